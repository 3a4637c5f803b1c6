"""Mutual-TLS connections: Connection (client), Listener (server), and configure_ssl_ctx for an
OpenSSL SSL_CTX the application owns. Over the C ABI's "Connections" section."""
import ctypes
from typing import List, Optional, Sequence

from ._lib import lib, fn, c_void_pp, c_size_p, c_int_p
from ._handle import _Handle, utf8, out_handle, out_string, out_value
from .certificate import Certificate
from .errors import check
from .pkcs12 import Identity
from .trust import Policy, TrustResult, _read_result

TLS_1_2, TLS_1_3 = 12, 13
_VERSIONS = {"1.2": TLS_1_2, "1.3": TLS_1_3, TLS_1_2: TLS_1_2, TLS_1_3: TLS_1_3}
CLIENT_AUTH = {"none": 0, "optional": 1, "require": 2}
CONN_OPTIONS_VERSION = 1
LISTENER_OPTIONS_VERSION = 1


class ConnOptions(ctypes.Structure):
    """typedef struct mtls_conn_options (version 1)."""
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
    ]


class ListenerOptions(ctypes.Structure):
    """typedef struct mtls_listener_options (version 1)."""
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
fn("mtls_conn_read", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, c_size_p)
# int mtls_conn_write(mtls_conn *conn, const uint8_t *buf, size_t len, size_t *n)
fn("mtls_conn_write", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, c_size_p)
# int mtls_conn_shutdown(mtls_conn *conn)
fn("mtls_conn_shutdown", ctypes.c_int, ctypes.c_void_p)
# void mtls_conn_free(mtls_conn *conn)
fn("mtls_conn_free", None, ctypes.c_void_p)
# int mtls_conn_fd(const mtls_conn *conn, int *fd)
fn("mtls_conn_fd", ctypes.c_int, ctypes.c_void_p, c_int_p)
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
# int mtls_ssl_set_peer(void *ssl, const char *host, uint16_t port, const char *verify_as)
fn("mtls_ssl_set_peer", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16, ctypes.c_char_p)
# int mtls_ssl_ctx_set_peer(void *ssl_ctx, const char *host, uint16_t port, const char *verify_as)
fn("mtls_ssl_ctx_set_peer", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16, ctypes.c_char_p)


def _ms(seconds):
    """Seconds (None: the library default) to the C convention (0: default, -1: no limit)."""
    if seconds is None:
        return 0
    if seconds == float("inf"):
        return -1
    return max(1, int(seconds * 1000))


def _version(v):
    if v not in _VERSIONS:
        raise ValueError("TLS version must be '1.2' or '1.3'")
    return _VERSIONS[v]


def _client_options(identity, candidates, policy, verify_as, sni, alpn, min_tls, max_tls, connect_timeout,
                    handshake_timeout, io_timeout, resume, non_blocking):
    o = ConnOptions()
    check(lib.mtls_conn_options_init(ctypes.byref(o), CONN_OPTIONS_VERSION))
    o.sni, o.verify_as = utf8(sni), utf8(verify_as)
    o.alpn = utf8(",".join(alpn)) if alpn else None
    o.min_tls, o.max_tls = _version(min_tls), _version(max_tls)
    o.connect_timeout_ms, o.handshake_timeout_ms = _ms(connect_timeout), _ms(handshake_timeout)
    o.io_timeout_ms = _ms(io_timeout)
    o.non_blocking, o.no_session_resumption = int(non_blocking), int(not resume)
    keep = [identity, candidates, policy]  # alive until the C call that borrows their handles
    if identity is not None:
        o.identity = identity._h
    elif candidates:
        arr = (ctypes.c_void_p * len(candidates))(*[c._h for c in candidates])
        keep.append(arr)
        o.candidates, o.candidate_count = ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p)), len(candidates)
    if policy is not None:
        o.policy = policy._h
    return o, keep


class Connection(_Handle):
    """One mutual-TLS connection (wraps an mtls_conn). Use from one thread at a time.

    Errors are MTLSError subclasses that say which side failed: Untrusted (our evaluation
    rejected the peer), PeerAlert (the peer refused us), NoMatchingIdentity, Timeout,
    ConnectError, HandshakeError; WantRead/WantWrite in non-blocking mode."""
    _free = "mtls_conn_free"

    @classmethod
    def connect(cls, host: str, port: int, *, identity: Optional[Identity] = None,
                candidates: Optional[Sequence[Identity]] = None, policy: Optional[Policy] = None,
                verify_as: Optional[str] = None, sni: Optional[str] = None, alpn: Sequence[str] = (),
                min_tls="1.2", max_tls="1.3", connect_timeout=None, handshake_timeout=None, io_timeout=None,
                resume: bool = True, non_blocking: bool = False, handshake: bool = True) -> "Connection":
        """Connects and (unless non_blocking or handshake=False) runs the handshake. `identity`
        is presented; or, with `candidates`, the one that fits the server's CA list is chosen.
        `policy` judges the server (None: system trust store). Timeouts are in seconds. With
        handshake=False, call handshake() yourself: a failed one leaves peer_chain and
        evaluation readable."""
        o, keep = _client_options(identity, candidates, policy, verify_as, sni, alpn, min_tls, max_tls,
                                  connect_timeout, handshake_timeout, io_timeout, resume, non_blocking)
        h = out_handle(lib.mtls_conn_connect if handshake else lib.mtls_conn_open, utf8(host), int(port),
                       ctypes.byref(o))
        del keep
        return cls(h)

    @classmethod
    def wrap(cls, fd: int, host: str, port: int = 0, **kw) -> "Connection":
        """TLS over a connected socket the caller owns (an int fd or a socket object); the caller
        closes it after this connection. Same keywords as connect() except handshake."""
        fd = fd.fileno() if hasattr(fd, "fileno") else fd
        o, keep = _client_options(kw.pop("identity", None), kw.pop("candidates", None), kw.pop("policy", None),
                                  kw.pop("verify_as", None), kw.pop("sni", None), kw.pop("alpn", ()),
                                  kw.pop("min_tls", "1.2"), kw.pop("max_tls", "1.3"), kw.pop("connect_timeout", None),
                                  kw.pop("handshake_timeout", None), kw.pop("io_timeout", None),
                                  kw.pop("resume", True), kw.pop("non_blocking", False))
        if kw:
            raise TypeError(f"unknown options: {', '.join(kw)}")
        h = out_handle(lib.mtls_conn_wrap_fd, int(fd), utf8(host), int(port), ctypes.byref(o))
        del keep
        return cls(h)

    def handshake(self):
        """Runs or continues the handshake (non-blocking: raises WantRead/WantWrite)."""
        check(lib.mtls_conn_handshake(self._h))

    def read(self, n: int = 16384) -> bytes:
        """Up to n bytes; b"" when the peer closed the connection."""
        buf = ctypes.create_string_buffer(max(n, 1))
        got = ctypes.c_size_t()
        check(lib.mtls_conn_read(self._h, buf, len(buf), ctypes.byref(got)))
        return buf.raw[:got.value]

    def write(self, data: bytes) -> int:
        """Writes data (all of it, unless non-blocking); returns the count written."""
        data = utf8(data)
        return out_value(ctypes.c_size_t, lib.mtls_conn_write, self._h, data, len(data))

    def shutdown(self):
        """Sends close_notify."""
        check(lib.mtls_conn_shutdown(self._h))

    def fileno(self) -> int:
        return out_value(ctypes.c_int, lib.mtls_conn_fd, self._h)

    @property
    def peer_chain(self) -> List[Certificate]:
        """The chain the peer presented, leaf first."""
        return Certificate._list(lib.mtls_conn_peer_chain, self._h)

    @property
    def evaluation(self) -> Optional[TrustResult]:
        """Our evaluation of the peer's chain (None when it sent no certificate)."""
        h = out_handle(lib.mtls_conn_evaluation, self._h)
        if not h:
            return None
        try:
            return _read_result(h)
        finally:
            lib.mtls_trust_result_free(h)

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
    def presented_identity(self) -> Optional[Identity]:
        """The identity we presented (with automatic selection, the one chosen)."""
        h = out_handle(lib.mtls_conn_presented_identity, self._h)
        return Identity(h) if h else None


class Listener(_Handle):
    """A TLS server socket (wraps an mtls_listener): accepts clients with the server identity
    and judges their certificates with `client_policy` (no name check)."""
    _free = "mtls_listener_free"

    def __init__(self, identity: Identity, *, address: Optional[str] = "127.0.0.1", port: int = 0,
                 client_auth: str = "require", client_policy: Optional[Policy] = None, alpn: Sequence[str] = (),
                 min_tls="1.2", max_tls="1.3", handshake_timeout=None, io_timeout=None):
        if client_auth not in CLIENT_AUTH:
            raise ValueError("client_auth must be 'none', 'optional' or 'require'")
        o = ListenerOptions()
        check(lib.mtls_listener_options_init(ctypes.byref(o), LISTENER_OPTIONS_VERSION))
        o.client_auth = CLIENT_AUTH[client_auth]
        o.identity = identity._h
        o.client_policy = client_policy._h if client_policy is not None else None
        o.alpn = utf8(",".join(alpn)) if alpn else None
        o.min_tls, o.max_tls = _version(min_tls), _version(max_tls)
        o.handshake_timeout_ms, o.io_timeout_ms = _ms(handshake_timeout), _ms(io_timeout)
        super().__init__(out_handle(lib.mtls_listener_new, utf8(address), int(port), ctypes.byref(o)))

    @property
    def port(self) -> int:
        return out_value(ctypes.c_uint16, lib.mtls_listener_port, self._h)

    def accept(self, timeout: Optional[float] = None) -> Connection:
        """Waits for a client (timeout in seconds; None: forever) and runs its handshake. A
        rejected client raises (Untrusted with our reasons, PeerAlert...)."""
        return Connection(out_handle(lib.mtls_listener_accept, self._h,
                                     -1 if timeout is None else int(timeout * 1000)))


def configure_ssl_ctx(ssl_ctx: int, identity: Optional[Identity] = None, policy: Optional[Policy] = None,
                      accepts_clients: bool = False):
    """Configures an OpenSSL SSL_CTX* (an address) the application owns to present `identity` and
    judge peers with `policy` through libmtls's evaluator."""
    check(lib.mtls_ssl_ctx_configure(ssl_ctx, identity._h if identity else None, policy._h if policy else None,
                                     int(accepts_clients)))


def set_ssl_peer(ssl: int, host: str, port: int = 0, verify_as: Optional[str] = None):
    """Tells libmtls the peer an OpenSSL SSL* (an address) made from a configured context reaches:
    its host and port choose the host rule, verify_as (None: the host) the name checked."""
    check(lib.mtls_ssl_set_peer(ssl, utf8(host), int(port), utf8(verify_as)))


def set_ssl_ctx_peer(ssl_ctx: int, host: str, port: int = 0, verify_as: Optional[str] = None):
    """Same for every SSL made from the SSL_CTX* that was not given a peer of its own."""
    check(lib.mtls_ssl_ctx_set_peer(ssl_ctx, utf8(host), int(port), utf8(verify_as)))


def clear_session_cache():
    """Forgets every cached TLS session and the shared OpenSSL contexts (and their references to
    identities) behind them; open connections are not affected."""
    lib.mtls_conn_cache_clear()
