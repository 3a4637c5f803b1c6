"""Mutual-TLS connections: Connection (client), Listener (server), and configure_ssl_ctx for an
OpenSSL SSL_CTX the application owns. Over the C ABI's "Connections" section."""
import ctypes
import os
from dataclasses import dataclass
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from ._lib import lib, fn, c_void_pp, c_size_p, c_int_p
from ._url import endpoint, host_only, listen_endpoint
from ._handle import _Handle, utf8, out_bytes, out_handle, out_string, out_value
from .certificate import Certificate
from .errors import BY_CODE, check, Error, InvalidArgument, TrustError, TruncatedError
from . import _callbacks
from .identity import Identity
from .store import Store
from .tokens import identity_from_pkcs11
from .trust import Overrides, Policy, TrustOverridesC, TrustResult, _read_result
from . import rotation


TLS_1_2, TLS_1_3 = 12, 13
_VERSIONS = {"1.2": TLS_1_2, "1.3": TLS_1_3, TLS_1_2: TLS_1_2, TLS_1_3: TLS_1_3}
CLIENT_AUTH = {"none": 0, "optional": 1, "require": 2}
# The CA names of a listener's certificate request (MTLS_CA_NAMES_*); a list of certificates is "list".
CA_NAMES = {"anchors": 0, "none": 1, "list": 2}
CONN_OPTIONS_VERSION = 2
LISTENER_OPTIONS_VERSION = 3


class ConnOptions(ctypes.Structure):
    """typedef struct mtls_conn_options (version 2)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("sni", ctypes.c_char_p),
        ("verify_as", ctypes.c_char_p),
        ("alpn", ctypes.c_char_p),
        ("min_tls", ctypes.c_int),
        ("max_tls", ctypes.c_int),
        ("connect_timeout_ms", ctypes.c_int),
        ("handshake_timeout_ms", ctypes.c_int),
        ("io_timeout_ms", ctypes.c_int),
        ("non_blocking", ctypes.c_int),
        ("no_session_resumption", ctypes.c_int),
        ("identity", ctypes.c_void_p),
        ("candidates", ctypes.POINTER(ctypes.c_void_p)),
        ("candidate_count", ctypes.c_size_t),
        ("policy", ctypes.c_void_p),
        ("overrides", ctypes.POINTER(TrustOverridesC)),
        ("identity_source", ctypes.c_void_p),
    ]


class ListenerOptions(ctypes.Structure):
    """typedef struct mtls_listener_options (version 3)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("client_auth", ctypes.c_int),
        ("identity", ctypes.c_void_p),
        ("client_policy", ctypes.c_void_p),
        ("alpn", ctypes.c_char_p),
        ("min_tls", ctypes.c_int),
        ("max_tls", ctypes.c_int),
        ("handshake_timeout_ms", ctypes.c_int),
        ("io_timeout_ms", ctypes.c_int),
        ("no_session_tickets", ctypes.c_int),
        ("client_overrides", ctypes.POINTER(TrustOverridesC)),
        ("first_byte_timeout_ms", ctypes.c_int),
        ("max_handshakes_per_address", ctypes.c_int),
        ("client_ca_names", ctypes.c_int),
        ("client_ca_certs", ctypes.POINTER(ctypes.c_void_p)),
        ("client_ca_cert_count", ctypes.c_size_t),
        ("client_hello_timeout_ms", ctypes.c_int),
        ("ipv6_source_prefix_length", ctypes.c_int),
    ]


_opts_p = ctypes.POINTER(ConnOptions)
_lopts_p = ctypes.POINTER(ListenerOptions)
# int mtls_conn_options_init(mtls_conn_options *opts, unsigned int version)
fn("mtls_conn_options_init", ctypes.c_int, _opts_p, ctypes.c_uint)
# int mtls_conn_connect(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)
fn("mtls_conn_connect", ctypes.c_int, ctypes.c_char_p, ctypes.c_uint16, _opts_p, c_void_pp)
# int mtls_conn_open(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)
fn("mtls_conn_open", ctypes.c_int, ctypes.c_char_p, ctypes.c_uint16, _opts_p, c_void_pp)
# int mtls_conn_wrap_fd(int fd, const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)
fn("mtls_conn_wrap_fd", ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint16, _opts_p, c_void_pp)
# int mtls_conn_handshake(mtls_conn *conn)
fn("mtls_conn_handshake", ctypes.c_int, ctypes.c_void_p)
# int mtls_conn_read(mtls_conn *conn, uint8_t *buf, size_t len, size_t *n)
_conn_read = fn("mtls_conn_read", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, c_size_p)
# int mtls_conn_write(mtls_conn *conn, const uint8_t *buf, size_t len, size_t *n)
_conn_write = fn("mtls_conn_write", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, c_size_p)
# int mtls_conn_shutdown(mtls_conn *conn)
fn("mtls_conn_shutdown", ctypes.c_int, ctypes.c_void_p)
# void mtls_conn_free(mtls_conn *conn)
fn("mtls_conn_free", None, ctypes.c_void_p)
# int mtls_conn_fd(const mtls_conn *conn, int *fd)
fn("mtls_conn_fd", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_conn_forward(mtls_conn *conn, int fd, int idle_timeout_ms, uint64_t *bytes_from_tls, uint64_t *bytes_to_tls)
fn("mtls_conn_forward", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
   ctypes.POINTER(ctypes.c_uint64))
#: void (*mtls_forward_done_cb)(void *user, int status, uint64_t bytes_from_tls, uint64_t bytes_to_tls)
FORWARD_DONE_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64)
# int mtls_forwarder_new(int threads, mtls_forwarder **out)
fn("mtls_forwarder_new", ctypes.c_int, ctypes.c_int, c_void_pp)
# int mtls_forwarder_add(mtls_forwarder *fw, mtls_conn *conn, int fd, int idle_timeout_ms, mtls_forward_done_cb done, void *user)
fn("mtls_forwarder_add", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, FORWARD_DONE_CB,
   ctypes.c_void_p)
# int mtls_forwarder_active(const mtls_forwarder *fw, int *active)
fn("mtls_forwarder_active", ctypes.c_int, ctypes.c_void_p, c_int_p)
# void mtls_forwarder_free(mtls_forwarder *fw)
fn("mtls_forwarder_free", None, ctypes.c_void_p)
# int mtls_conn_proxy_header(const mtls_conn *conn, int include_certificate, uint8_t **out, size_t *out_len)
fn("mtls_conn_proxy_header", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, c_void_pp, c_size_p)
# int mtls_address_is_local(const char *address, int *is_local)
fn("mtls_address_is_local", ctypes.c_int, ctypes.c_char_p, c_int_p)
# int mtls_conn_set_non_blocking(mtls_conn *conn, int non_blocking)
fn("mtls_conn_set_non_blocking", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# int mtls_conn_peer_chain(const mtls_conn *conn, mtls_cert ***out, size_t *count)
fn("mtls_conn_peer_chain", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_conn_evaluation(const mtls_conn *conn, mtls_trust_result **out)
fn("mtls_conn_evaluation", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_conn_alpn(const mtls_conn *conn, char **out)
fn("mtls_conn_alpn", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_conn_tls_version(const mtls_conn *conn, char **out)
fn("mtls_conn_tls_version", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_conn_resumed(const mtls_conn *conn, int *resumed)
fn("mtls_conn_resumed", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_conn_may_block(const mtls_conn *conn, int *may_block)
fn("mtls_conn_may_block", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_conn_policy_changed(const mtls_conn *conn, int *changed)
_conn_policy_changed = fn("mtls_conn_policy_changed", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_conn_presented_identity(const mtls_conn *conn, mtls_identity **out)
fn("mtls_conn_presented_identity", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# void mtls_conn_cache_clear(void)
fn("mtls_conn_cache_clear", None)
# int mtls_listener_options_init(mtls_listener_options *opts, unsigned int version)
fn("mtls_listener_options_init", ctypes.c_int, _lopts_p, ctypes.c_uint)
# int mtls_listener_new(const char *address, uint16_t port, const mtls_listener_options *opts, mtls_listener **out)
fn("mtls_listener_new", ctypes.c_int, ctypes.c_char_p, ctypes.c_uint16, _lopts_p, c_void_pp)
# int mtls_listener_port(const mtls_listener *listener, uint16_t *port)
fn("mtls_listener_port", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint16))
# int mtls_listener_accept(mtls_listener *listener, int timeout_ms, mtls_conn **out)
fn("mtls_listener_accept", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, c_void_pp)
# void mtls_listener_free(mtls_listener *listener)
fn("mtls_listener_free", None, ctypes.c_void_p)
# int mtls_ssl_ctx_configure(void *ssl_ctx, const mtls_identity *identity, const mtls_policy *policy, int accepts_clients)
fn("mtls_ssl_ctx_configure", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
# int mtls_ssl_ctx_configure_overrides(void *ssl_ctx, const mtls_identity *identity, const mtls_policy *policy,
#                                      int accepts_clients, const mtls_trust_overrides *overrides)
fn("mtls_ssl_ctx_configure_overrides", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
   ctypes.POINTER(TrustOverridesC))
# int mtls_ssl_set_peer(void *ssl, const char *host, uint16_t port, const char *verify_as)
fn("mtls_ssl_set_peer", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16, ctypes.c_char_p)
# int mtls_ssl_ctx_set_peer(void *ssl_ctx, const char *host, uint16_t port, const char *verify_as)
fn("mtls_ssl_ctx_set_peer", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16, ctypes.c_char_p)


def _ms(seconds: Optional[float]) -> int:
    """Seconds to a C `*_timeout_ms` field under libmtls's one convention for timeouts and limits
    (the core's TLSDefaults, as in C): None or 0: the library's default; negative or inf: no
    limit (-1); anything else that many seconds (at least 1 ms)."""
    if seconds is None or seconds == 0:
        return 0
    if seconds < 0 or seconds == float("inf"):
        return -1
    return max(1, int(seconds * 1000))


def _limit(count: Optional[int]) -> int:
    """A count limit (max_handshakes_per_address) to its C field, under the timeouts' convention:
    None or 0: the library's default; negative: no limit (-1); anything else that many."""
    if count is None:
        return 0
    return -1 if count < 0 else int(count)


_initialized_options: Optional[ConnOptions] = None


def _new_conn_options() -> ConnOptions:
    """A ConnOptions as mtls_conn_options_init writes it. Its defaults are the core's constants
    (TLSDefaults), so the C call is made once and each connection gets a copy of its result (a
    call and a check fewer per connection)."""
    global _initialized_options
    if _initialized_options is None:
        o = ConnOptions()
        check(lib.mtls_conn_options_init(ctypes.byref(o), CONN_OPTIONS_VERSION))
        _initialized_options = o
    return ConnOptions.from_buffer_copy(_initialized_options)


def default_timeout(field: str) -> Optional[float]:
    """The library's default, in seconds (None: no limit), of a ConnOptions `*_timeout_ms` field,
    as mtls_conn_options_init writes it: the value is the core's (TLSDefaults), not retyped here."""
    o = _new_conn_options()
    ms = getattr(o, field)
    return None if ms < 0 else ms / 1000


def effective_timeout(seconds: Optional[float], field: str) -> Optional[float]:
    """`seconds` as the library uses it under the one convention (None or 0: the default of
    `field`, see default_timeout; negative or inf: None, no limit), for the waits Python runs
    itself (asyncio's connect and handshake, a proxy's CONNECT)."""
    if seconds is None or seconds == 0:
        return default_timeout(field)
    if seconds < 0 or seconds == float("inf"):
        return None
    return seconds


def _version(v: Union[str, int]) -> int:
    if v not in _VERSIONS:
        raise ValueError("TLS version must be '1.2' or '1.3'")
    return _VERSIONS[v]


def _set_versions(o: Any, min_tls: Optional[Union[str, int]], max_tls: Optional[Union[str, int]]) -> None:
    """Sets the bounds given on options filled by their init function; None keeps the library's
    default, which the init function wrote (TLSDefaults in the core), not a value retyped here."""
    if min_tls is not None:
        o.min_tls = _version(min_tls)
    if max_tls is not None:
        o.max_tls = _version(max_tls)


@dataclass(frozen=True)
class ConnectOptions:
    """The options of a client connection, and their defaults (stated here only).

    identity: presented (an Identity; mtls.connect also takes a store label or a pkcs11: URI);
    candidates: identities to choose from by the server's CA list (instead of identity);
    policy: judges the server (None: the system trust store); verify_as: validate the server as
    this name, over the policy's and its rules' verify_as (None: as the policy says, else the
    host); pins: SPKI pins this connection requires, always enforced; anchors / system_anchors /
    anchors_only: anchors added for this connection, the only ones trusted unless system_anchors
    (see Overrides) — verify_as, pins and anchors are overrides
    libmtls composes on top of the policy for this connection only, the Policy object is never
    changed; sni: the name sent (None: the host if it is a name); alpn: protocols offered;
    min_tls/max_tls: "1.2" or "1.3" (None: the library's bounds, 1.2 to 1.3); timeouts in seconds under libmtls's one convention (None
    or 0: the library's default; negative or inf: no limit); resume: TLS session resumption (only under the same overrides); non_blocking:
    WantRead/WantWrite instead of waiting."""
    identity: Optional[Identity] = None
    candidates: Optional[Sequence[Identity]] = None
    policy: Optional[Policy] = None
    verify_as: Optional[str] = None
    sni: Optional[str] = None
    alpn: Sequence[str] = ()
    min_tls: Optional[Union[str, int]] = None
    max_tls: Optional[Union[str, int]] = None
    connect_timeout: Optional[float] = None
    handshake_timeout: Optional[float] = None
    io_timeout: Optional[float] = None
    resume: bool = True
    non_blocking: bool = False
    pins: Sequence[str] = ()
    anchors: Sequence[Any] = ()
    anchors_only: Optional[bool] = None
    system_anchors: Optional[bool] = None
    #: an mtls.rotation.IdentitySource: presented instead of identity/candidates, each connection
    #: taking the identity in force when it starts (a session of another identity never resumes)
    identity_source: Optional[Any] = None

    def to_c(self, host: Optional[str]) -> Tuple[ConnOptions, List[Any]]:
        """The C structure, and the Python objects that must stay alive while a C call borrows
        their handles."""
        o = _new_conn_options()
        # verify_as, pins and anchors are this connection's overrides: libmtls composes them on
        # top of the policy (and of the rule its host and port select); nothing is written into
        # the policy.
        overrides, keep_overrides = Overrides(anchors=self.anchors, anchors_only=self.anchors_only, pins=self.pins,
                                              verify_as=self.verify_as, system_anchors=self.system_anchors).to_c()
        o.overrides = overrides
        o.sni = utf8(self.sni)
        o.alpn = utf8(",".join(self.alpn)) if self.alpn else None
        _set_versions(o, self.min_tls, self.max_tls)
        o.connect_timeout_ms, o.handshake_timeout_ms = _ms(self.connect_timeout), _ms(self.handshake_timeout)
        o.io_timeout_ms = _ms(self.io_timeout)
        o.non_blocking, o.no_session_resumption = int(self.non_blocking), int(not self.resume)
        keep: List[Any] = [self.identity, self.candidates, self.policy, overrides, keep_overrides]
        if self.identity is not None:
            o.identity = self.identity._h
        elif self.candidates:
            arr = (ctypes.c_void_p * len(self.candidates))(*[c._h for c in self.candidates])
            keep.append(arr)
            o.candidates = ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p))
            o.candidate_count = len(self.candidates)
        if self.policy is not None:
            o.policy = self.policy._h
        if self.identity_source is not None:
            if not isinstance(self.identity_source, rotation.IdentitySource):
                raise TypeError("identity_source must be an mtls.IdentitySource (IdentitySource(identity) or "
                                "IdentitySource.follow(store, label))")
            o.identity_source = self.identity_source._h
            keep.append(self.identity_source)
        return o, keep


class Connection(_Handle):
    """One mutual-TLS connection (wraps an mtls_conn). Use from one thread at a time.

    Errors are mtls.Error subclasses that say which side failed: TrustError (our evaluation
    rejected the peer; mtls.connect attaches the evaluation), PeerAlert (the peer refused us),
    NoMatchingIdentity, Timeout, ConnectError, HandshakeError; WantRead/WantWrite in
    non-blocking mode; TruncatedError from a read when the peer closed without close_notify.

    suppress_ragged_eofs (a keyword of connect, wrap and mtls.connect; default False, unlike
    ssl.SSLSocket): True makes a read return b"" (0) where the peer closed without close_notify,
    as ssl's suppress_ragged_eofs does -- for peers known to hang up that way, when the data
    carries its own length."""
    _free = "mtls_conn_free"
    suppress_ragged_eofs: bool = False
    #: Set by mtls.asyncio while the core says this connection cannot wait for anything but its
    #: socket (:attr:`may_block` False): its handshake steps and its close run on the event loop.
    _on_loop: bool = False

    @classmethod
    def connect(cls, host: str, port: int, *, handshake: bool = True, **options: Any) -> "Connection":
        """Connects and (unless non_blocking or handshake=False) runs the handshake; `options`
        are ConnectOptions' fields. With handshake=False, call handshake() yourself: a failed one
        leaves peer_chain and evaluation readable. `host` is read as ``mtls connect`` reads one
        (``[::1]`` is ``::1``; a bare IPv6 literal and a zone as written); a host carrying a port
        of its own (``[::1]:443``), or a port outside 1 to 65535, raises InvalidArgument."""
        suppress = bool(options.pop("suppress_ragged_eofs", False))
        if host:
            host, port = endpoint(host, port)
        o, keep = ConnectOptions(**options).to_c(host)
        h = out_handle(lib.mtls_conn_connect if handshake else lib.mtls_conn_open, utf8(host), int(port),
                       ctypes.byref(o))
        del keep
        conn = cls(h)
        conn.suppress_ragged_eofs = suppress
        return conn

    @classmethod
    def wrap(cls, fd: Union[int, Any], host: str, port: int = 0, **options: Any) -> "Connection":
        """TLS over a connected socket the caller owns (an int fd or a socket object); the caller
        closes it after this connection. `options` are ConnectOptions' fields; `host` is read as
        :meth:`connect` reads it."""
        fd = fd.fileno() if hasattr(fd, "fileno") else fd
        suppress = bool(options.pop("suppress_ragged_eofs", False))
        if host:
            host, port = endpoint(host, port) if port else (host_only(host), port)
        o, keep = ConnectOptions(**options).to_c(host)
        h = out_handle(lib.mtls_conn_wrap_fd, int(fd), utf8(host), int(port), ctypes.byref(o))
        del keep
        conn = cls(h)
        conn.suppress_ragged_eofs = suppress
        return conn

    def handshake(self) -> None:
        """Runs or continues the handshake (non-blocking: raises WantRead/WantWrite). When our
        policy refuses the server, the TrustError carries the evaluation and its reasons."""
        try:
            check(lib.mtls_conn_handshake(self._h))
        except TrustError as e:
            if e.evaluation is None:
                try:
                    e.evaluation = self.evaluation
                except Error:
                    pass
            raise

    def read(self, n: int = 16384) -> bytes:
        """Up to n bytes; b"" when the peer closed the connection with close_notify. Raises
        TruncatedError when it closed without (what was read may be cut short), unless
        suppress_ragged_eofs."""
        buf = ctypes.create_string_buffer(max(n, 1))
        got = ctypes.c_size_t()
        try:
            check(lib.mtls_conn_read(self._h, buf, len(buf), ctypes.byref(got)))
        except TruncatedError:
            if self.suppress_ragged_eofs:
                return b""
            raise
        return buf.raw[:got.value]

    def readinto(self, buffer: Any) -> int:
        """Reads into a writable buffer (bytearray, memoryview); returns the count, 0 when the
        peer closed the connection."""
        # Called per read by http.client through TLSSocket: the buffer is passed by the address
        # of its first byte (a one-byte ctypes view), not as an array type made for its length.
        view = memoryview(buffer)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        n = view.nbytes
        if n == 0:
            return 0
        got = ctypes.c_size_t()
        try:
            check(_conn_read(self._h, ctypes.byref(ctypes.c_char.from_buffer(view)), n, ctypes.byref(got)))
        except TruncatedError:
            if self.suppress_ragged_eofs:
                return 0
            raise
        return got.value

    def write(self, data: bytes) -> int:
        """Writes data (all of it, unless non-blocking); returns the count written."""
        if type(data) is not bytes:
            data = utf8(data)
        n = ctypes.c_size_t()  # called per request, as readinto: no helper frames
        check(_conn_write(self._h, data, len(data), ctypes.byref(n)))
        return n.value

    def shutdown(self) -> None:
        """Sends close_notify."""
        check(lib.mtls_conn_shutdown(self._h))

    def fileno(self) -> int:
        return out_value(ctypes.c_int, lib.mtls_conn_fd, self._h)

    def forward(self, fd, idle_timeout: Optional[float] = None) -> Tuple[int, int]:
        """Moves bytes both ways between this connection and the connected plaintext socket `fd`
        (a socket object or a file descriptor) until both directions have ended, half-close passed
        through (mtls_conn_forward): returns (bytes from the TLS peer, bytes to it). Raises
        mtls.Timeout after `idle_timeout` seconds with nothing moving, TruncatedError when the
        TLS peer hung up without close_notify, the error that stopped it otherwise. Closes
        neither socket. Releases the GIL while it runs."""
        fd = fd.fileno() if hasattr(fd, "fileno") else fd
        ms = -1 if idle_timeout is None else int(idle_timeout * 1000)
        from_tls, to_tls = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.mtls_conn_forward(self._h, fd, ms, ctypes.byref(from_tls), ctypes.byref(to_tls)))
        return from_tls.value, to_tls.value

    def proxy_header(self, include_certificate: bool = False) -> bytes:
        """The PROXY protocol v2 header for a plaintext target (an accepted connection): the
        client's address, and the TLS TLVs with the client certificate's CN
        (mtls_conn_proxy_header); `include_certificate` adds its DER in TLV 0xE0."""
        return out_bytes(lib.mtls_conn_proxy_header, self._h, int(bool(include_certificate)))

    def set_non_blocking(self, non_blocking: bool = True) -> None:
        """Switches to non-blocking mode (True) or back to blocking mode (False). Made for
        connections from :meth:`Listener.accept` (blocking, their reads and writes waiting within
        the listener's io_timeout), so that an event loop can serve them: in non-blocking mode
        handshake, read, readinto, write and shutdown raise WantRead/WantWrite instead of waiting
        (wait for fileno() and call again; a write that raised WantWrite is retried with the same
        bytes). Buffered data is kept across the switch (mtls_conn_set_non_blocking)."""
        check(lib.mtls_conn_set_non_blocking(self._h, 1 if non_blocking else 0))

    @property
    def peer_chain(self) -> List[Certificate]:
        """The chain the peer presented, leaf first."""
        return Certificate._list(lib.mtls_conn_peer_chain, self._h)

    @property
    def evaluation(self) -> Optional[TrustResult]:
        """Our evaluation of the peer's chain (None when it sent no certificate)."""
        h = out_handle(lib.mtls_conn_evaluation, self._h)
        return _read_result(h) if h else None

    @property
    def alpn(self) -> Optional[str]:
        return out_string(lib.mtls_conn_alpn, self._h)

    @property
    def tls_version(self) -> str:
        return out_string(lib.mtls_conn_tls_version, self._h)

    @property
    def resumed(self) -> bool:
        return bool(out_value(ctypes.c_int, lib.mtls_conn_resumed, self._h))

    @property
    def may_block(self) -> bool:
        """Whether a handshake step or the close of this connection may wait for something other
        than its socket (mtls_conn_may_block): a blocking or a listener's connection, a key on a
        token or loaded only when chosen, a policy that checks revocation. False for a
        non-blocking client connection with keys in memory under a policy without revocation,
        whose steps an event loop may run itself. Can change with the policy: ask before each step."""
        return bool(out_value(ctypes.c_int, lib.mtls_conn_may_block, self._h))

    @property
    def policy_changed(self) -> bool:
        """True when the policy judging the peer changed since this connection was made
        (Policy.replace, a followed policy file's reload, any setting): the adapters' pools drop
        such a connection instead of reusing it. False once closed."""
        if self._h is None:
            return False
        changed = ctypes.c_int()  # asked before each reuse of a pooled connection: no helper frames
        check(_conn_policy_changed(self._h, ctypes.byref(changed)))
        return bool(changed.value)

    @property
    def presented_identity(self) -> Optional[Identity]:
        """The identity we presented (with automatic selection, the one chosen)."""
        h = out_handle(lib.mtls_conn_presented_identity, self._h)
        return Identity(h) if h else None


class Listener(_Handle):
    """A TLS server socket (wraps an mtls_listener): accepts clients with the server identity
    and judges their certificates with `client_policy` (its policy-wide pins and verify_as
    included; no name check otherwise), with `client_overrides` (an Overrides) on top.

    Timeouts and limits follow libmtls's one convention, as in C (None or 0: the library's
    default; negative, or inf for a timeout: no limit).
    first_byte_timeout: seconds an accepted client has to send its first byte (default 5 s);
    until then it takes no handshake slot, after it it is closed silently.
    max_handshakes_per_address: the most clients of one source (an IPv4 address, an IPv6 /64) in a
    handshake at once (default 32; 0 is the default, no longer "no limit": give a negative number
    for no limit).
    client_hello_timeout: seconds an accepted client has to send its whole ClientHello (default
    10 s); until then it takes no handshake slot (a byte, or a part of a ClientHello, holds
    nothing), after it it is closed silently.
    ipv6_source_prefix_length: the leading bits of an IPv6 client address that make one source for
    max_handshakes_per_address (default 64; 128 or negative: each address alone; above 128:
    refused).
    client_ca_names: the CA names of the certificate request, from which clients pick their
    certificate: "anchors" (the client anchors', the default), "none" (each client presents the one
    it has; for clients that match the names wrongly, such as Erlang/OTP 25 over TLS 1.3), or a
    list of Certificates whose subjects are sent. Trust does not change."""
    _free = "mtls_listener_free"

    def __init__(self, identity: Identity, *, address: Optional[str] = "127.0.0.1", port: int = 0,
                 client_auth: str = "require", client_policy: Optional[Policy] = None, alpn: Sequence[str] = (),
                 min_tls=None, max_tls=None, handshake_timeout=None, io_timeout=None,
                 session_tickets: bool = True, client_overrides: Optional[Overrides] = None,
                 first_byte_timeout: Optional[float] = None, max_handshakes_per_address: Optional[int] = None,
                 identity_source: Optional[Any] = None,
                 client_ca_names: Union[str, Sequence[Certificate]] = "anchors",
                 client_hello_timeout: Optional[float] = None, ipv6_source_prefix_length: Optional[int] = None):
        if client_auth not in CLIENT_AUTH:
            raise ValueError("client_auth must be 'none', 'optional' or 'require'")
        if isinstance(client_ca_names, str) and client_ca_names not in ("anchors", "none"):
            raise ValueError("client_ca_names must be 'anchors', 'none' or a list of Certificates")
        o = ListenerOptions()
        check(lib.mtls_listener_options_init(ctypes.byref(o), LISTENER_OPTIONS_VERSION))
        o.client_auth = CLIENT_AUTH[client_auth]
        o.identity = identity._h if identity is not None else None
        o.client_policy = client_policy._h if client_policy is not None else None
        o.alpn = utf8(",".join(alpn)) if alpn else None
        _set_versions(o, min_tls, max_tls)
        o.handshake_timeout_ms, o.io_timeout_ms = _ms(handshake_timeout), _ms(io_timeout)
        o.no_session_tickets = 0 if session_tickets else 1
        overrides, keep = (client_overrides or Overrides()).to_c()
        o.client_overrides = overrides
        o.first_byte_timeout_ms = _ms(first_byte_timeout)
        o.max_handshakes_per_address = _limit(max_handshakes_per_address)
        o.client_hello_timeout_ms = _ms(client_hello_timeout)
        o.ipv6_source_prefix_length = _limit(ipv6_source_prefix_length)
        ca_certs = None
        if isinstance(client_ca_names, str):
            o.client_ca_names = CA_NAMES[client_ca_names]
        else:
            certs = list(client_ca_names)
            ca_certs = (ctypes.c_void_p * max(len(certs), 1))(*[c._h for c in certs])
            o.client_ca_names = CA_NAMES["list"]
            o.client_ca_certs = ctypes.cast(ca_certs, ctypes.POINTER(ctypes.c_void_p))
            o.client_ca_cert_count = len(certs)
        address, port = listen_endpoint(address, port)
        if identity_source is not None:
            if not isinstance(identity_source, rotation.IdentitySource):
                raise TypeError("identity_source must be an mtls.IdentitySource")
            # issue 26: each handshake presents the source's identity in force when it starts
            super().__init__(out_handle(lib.mtls_listener_new_with_source, utf8(address), int(port), ctypes.byref(o),
                                        identity_source._h))
            self._identity_source = identity_source  # and with it the Store it follows, kept open
        else:
            super().__init__(out_handle(lib.mtls_listener_new, utf8(address), int(port), ctypes.byref(o)))
        del keep, ca_certs

    @property
    def port(self) -> int:
        return out_value(ctypes.c_uint16, lib.mtls_listener_port, self._h)

    def accept(self, timeout: Optional[float] = None) -> Connection:
        """Waits for a client (timeout in seconds; None: forever) and runs its handshake. A
        rejected client raises (Untrusted with our reasons, PeerAlert...)."""
        return Connection(out_handle(lib.mtls_listener_accept, self._h,
                                     -1 if timeout is None else int(timeout * 1000)))

    # ---- issue 26: identities that change, events, counters

    def set_identity(self, identity: Identity) -> None:
        """Presents `identity` from the next handshake on; connections already made keep theirs.
        An expired or not yet valid identity raises InvalidArgument (the identity in force stays)."""
        if not isinstance(identity, Identity):
            raise TypeError("Listener.set_identity needs an mtls.Identity")
        check(lib.mtls_listener_set_identity(self._h, identity._h))

    def set_event_callback(self, callback) -> None:
        """Calls `callback(mtls.rotation.Event)` on rotations, failed reloads, expiry warnings (None: stop)."""
        rotation._set_callback(lib.mtls_listener_set_event_callback, self._h, callback)

    @property
    def counters(self) -> dict:
        """{"accepted", "resumed", "refused", "current_connections"}: the listener's counters."""
        c = rotation.ListenerCountersC(version=rotation.LISTENER_COUNTERS_VERSION)
        check(lib.mtls_listener_get_counters(self._h, ctypes.byref(c)))
        return {"accepted": c.accepted, "resumed": c.resumed, "refused": c.refused,
                "current_connections": c.current_connections}

    def refused_count(self, error: type) -> int:
        """Handshakes refused with the exception class `error` (mtls.Untrusted, mtls.HandshakeError...)."""
        return out_value(ctypes.c_uint64, lib.mtls_listener_refused_count, self._h, int(error.code))

    def metrics(self) -> str:
        """The counters as Prometheus text."""
        return out_string(lib.mtls_listener_metrics, self._h)


def configure_ssl_ctx(ssl_ctx: int, identity: Optional[Identity] = None, policy: Optional[Policy] = None,
                      accepts_clients: bool = False, overrides: Optional[Overrides] = None,
                      identity_source: Optional[Any] = None):
    """Configures an OpenSSL SSL_CTX* (an address) the application owns to present `identity` and
    judge peers with `policy` (its policy-wide pins and verify_as included) and `overrides` on
    top, through libmtls's evaluator."""
    o, keep = (overrides or Overrides()).to_c()
    if identity_source is not None:
        if not isinstance(identity_source, rotation.IdentitySource):
            raise TypeError("identity_source must be an mtls.IdentitySource")
        check(lib.mtls_ssl_ctx_configure_source(ssl_ctx, identity_source._h, policy._h if policy else None,
                                                int(accepts_clients), ctypes.cast(o, ctypes.c_void_p)))
        del keep
        return
    check(lib.mtls_ssl_ctx_configure_overrides(ssl_ctx, identity._h if identity else None,
                                               policy._h if policy else None, int(accepts_clients), o))
    del keep


def set_ssl_peer(ssl: int, host: str, port: int = 0, verify_as: Optional[str] = None) -> None:
    """Tells libmtls the peer an OpenSSL SSL* (an address) made from a configured context reaches:
    its host and port choose the host rule, verify_as (None: the host) the name checked."""
    check(lib.mtls_ssl_set_peer(ssl, utf8(host), int(port), utf8(verify_as)))


def set_ssl_ctx_peer(ssl_ctx: int, host: str, port: int = 0, verify_as: Optional[str] = None) -> None:
    """Same for every SSL made from the SSL_CTX* that was not given a peer of its own."""
    check(lib.mtls_ssl_ctx_set_peer(ssl_ctx, utf8(host), int(port), utf8(verify_as)))


def clear_session_cache() -> None:
    """Forgets every cached TLS session and the shared OpenSSL contexts (and their references to
    identities) behind them; open connections are not affected."""
    lib.mtls_conn_cache_clear()


IdentityLike = Union[Identity, str, None]


def _default_store() -> "Store":
    """The store MTLS_STORE names, opened with MTLS_STORE_SECRET_FILE (the mtls CLI's defaults)."""
    path, secret_file = os.environ.get("MTLS_STORE"), os.environ.get("MTLS_STORE_SECRET_FILE")
    if not path or not secret_file:
        raise InvalidArgument("an identity given by store label needs store= (a Store), or MTLS_STORE and "
                              "MTLS_STORE_SECRET_FILE in the environment", InvalidArgument.code)
    return Store(path, secret_file=secret_file, create=False)


def resolve_identity(identity: IdentityLike, store: "Optional[Store]" = None,
                     pin: "Any" = None) -> Optional[Identity]:
    """An Identity from what a user may name one by: an Identity, a `pkcs11:` URI (the key stays
    on the token; `pin` as in identity_from_pkcs11), or the label of an identity in `store` (None:
    the store MTLS_STORE names, with MTLS_STORE_SECRET_FILE)."""
    if identity is None or isinstance(identity, Identity):
        return identity
    if not isinstance(identity, str):
        raise TypeError("identity must be an mtls.Identity, a store label or a pkcs11: URI")
    if identity.startswith("pkcs11:"):
        return identity_from_pkcs11(identity, pin)
    own = store is None
    st = _default_store() if own else store
    try:
        item = st[identity]
    finally:
        if own:
            st.close()
    if not isinstance(item, Identity):
        raise InvalidArgument(f"store item {identity!r} is a certificate, not an identity", InvalidArgument.code)
    return item


def connect(host: str, port: int, *, identity: IdentityLike = None, policy: Optional[Policy] = None,
            verify_as: Optional[str] = None, store: "Optional[Store]" = None, pin: "Any" = None,
            **options: Any) -> Connection:
    """A connected, handshaken mutual-TLS client connection. `identity` is an Identity, a store
    label (in `store`, else MTLS_STORE) or a pkcs11: URI; `policy` judges the server (None: the
    system store), validated as `verify_as` (None: the policy's verify_as, else `host`); other
    `options` are ConnectOptions' fields. A refused server raises TrustError with libmtls's
    evaluation and reasons."""
    ident = resolve_identity(identity, store, pin)
    conn = Connection.connect(host, port, identity=ident, policy=policy, verify_as=verify_as, handshake=False,
                              **options)
    if not options.get("non_blocking"):
        try:
            conn.handshake()
        except BaseException:
            conn.close()
            raise
    return conn


def address_is_local(address: str) -> bool:
    """The plaintext rule (mtls_address_is_local): True when plaintext to or from `address`
    (HOST:PORT, [IPv6]:PORT, unix:PATH or /PATH) stays on this machine: a loopback IP,
    "localhost" or a UNIX socket. InvalidArgument for anything that is not an address."""
    return bool(out_value(ctypes.c_int, lib.mtls_address_is_local, utf8(address)))


def _forward_done(user, status, from_tls, to_tls):
    """The one C thunk behind every Forwarder.add: on a forwarder thread, calls the pair's
    `done(error, bytes_from_tls, bytes_to_tls)` and lets go of it."""
    done = _callbacks.lookup(user)
    _callbacks.release(user)
    if done is None:
        return
    error = None
    if status != 0:
        msg = (lib.mtls_last_error() or b"").decode("utf-8", "replace") or lib.mtls_strerror(status).decode()
        error = BY_CODE.get(status, Error)(msg, status)
    try:
        done(error, from_tls, to_tls)
    except Exception as e:  # noqa: BLE001 - nothing on the forwarder thread can take it
        warnings.warn(f"mtls.Forwarder: a done callback raised {e!r}", RuntimeWarning)


_FORWARD_DONE = FORWARD_DONE_CB(_forward_done)


class Forwarder(_Handle):
    """Forwards many (Connection, plaintext socket) pairs on a few library threads, each an epoll
    loop: what Connection.forward does, with no thread per connection (mtls_forwarder_*).
    Half-close passes both ways, and each pair has its idle timeout.

    `add` hands the connection and the socket over: the forwarder closes both when the pair ends,
    then calls `done(error, bytes_from_tls, bytes_to_tls)` on its own thread (error None when both
    directions ended; mtls.Timeout for the idle timeout, TruncatedError, Closed when the forwarder
    was closed with the pair running, or the error that stopped it). `close()` ends the pairs
    still running and waits for the threads; do not call it from `done`."""
    _free = "mtls_forwarder_free"

    def __init__(self, threads: int = 0) -> None:
        """`threads`: 1 to 64 forwarding threads; 0 for the library's default (1)."""
        super().__init__(out_handle(lib.mtls_forwarder_new, int(threads)))

    def add(self, conn: "Connection", sock, idle_timeout: Optional[float] = None,
            done: Optional[Callable[[Optional[Error], int, int], None]] = None) -> None:
        """Hands `conn` (handshake done) and the connected plaintext socket `sock` (a socket
        object, detached here, or a file descriptor) to the forwarder. `conn` is closed to the
        caller from here on."""
        fd = sock.fileno() if hasattr(sock, "fileno") else int(sock)
        ms = -1 if idle_timeout is None else int(idle_timeout * 1000)
        key = _callbacks.register(done)
        try:
            check(lib.mtls_forwarder_add(self._h, conn._h, fd, ms, _FORWARD_DONE, key))
        except BaseException:
            _callbacks.release(key)
            raise
        conn._h = None  # the forwarder has it now
        if hasattr(sock, "detach"):
            sock.detach()  # the forwarder closes the descriptor

    @property
    def active(self) -> int:
        """Pairs added and not yet ended."""
        return out_value(ctypes.c_int, lib.mtls_forwarder_active, self._h)
