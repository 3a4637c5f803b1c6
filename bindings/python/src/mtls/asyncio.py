"""asyncio over libmtls: mutual-TLS streams (:func:`open_connection`) and servers
(:func:`start_server`) whose reader and writer are asyncio's own ``StreamReader`` and
``StreamWriter``.

    import mtls, mtls.asyncio
    policy = mtls.Policy(anchors=[mtls.Certificate.load("root.pem")], verify_as="api.internal")
    reader, writer = await mtls.asyncio.open_connection("10.0.0.7", 8443, identity="alice", policy=policy)
    writer.write(b"GET / HTTP/1.0\\r\\n\\r\\n")
    await writer.drain()
    print(await reader.read(), writer.get_extra_info("evaluation").trusted)
    writer.close()
    await writer.wait_closed()

The identity is an :class:`mtls.Identity`, a store label or a ``pkcs11:`` URI, the policy an
:class:`mtls.Policy`, as for :func:`mtls.connect`. Failures raise the bindings' own exceptions
(:mod:`mtls.errors`) in the awaiting task: :class:`mtls.TrustError` with libmtls's evaluation when
our policy refuses the server, :class:`mtls.PeerAlert` when the server refuses us,
:class:`mtls.Timeout`, :class:`mtls.ConnectError`, :class:`mtls.PinIncorrect`...

**What runs where.** Socket readiness is waited for on the event loop (``loop.add_reader`` /
``add_writer`` on the connection's descriptor); reads and writes are non-blocking libmtls calls
made on the loop. A handshake whose every step is CPU work over the socket runs on the loop too,
as Python's ``ssl`` runs its handshakes: when the identity (if any) has its key in memory
(``Identity.key_in_memory``) and libmtls says the connection cannot wait for anything but its
socket (``Connection.may_block`` False, ``mtls_conn_may_block``: asked before each step), making
the connection, each handshake step (the server's chain evaluated with a cold cache included)
and freeing the connection are made on the loop, with no thread hop. Everything that may block
runs on a worker thread of this module (ctypes releases the GIL during the C call, so the loop
keeps running): resolving a store label or a ``pkcs11:`` URI (the store's KDF, a token login and
its PIN callback), and, for a connection with a token key (a signature, the token's lock, a PIN
callback), with candidates loaded only once chosen, with an identity source, or judged by a
policy that checks revocation (a CRL or OCSP fetch within the policy's timeouts), every step of
its handshake and its free (``mtls_conn_free`` may wait for a token's lock). Such a connection
costs a thread hop per step (two or three per handshake), small against a token signature. A PIN
callback is therefore called on that worker thread. There are ``MTLS_ASYNCIO_THREADS`` worker
threads (default 4); names are resolved with ``loop.getaddrinfo`` (an IP address needs no lookup:
it is read on the loop). Connections accepted by :func:`start_server` are freed on a worker
thread.

**The one exception: a certificate asked for after the handshake.** Reads and writes of an
established connection are made on the loop, and a client's read processes whatever TLS message
comes. A TLS 1.3 server may send a CertificateRequest at any time after the handshake
(post-handshake authentication, which libmtls offers: Apache httpd does it for a per-location
``SSLVerifyClient`` over TLS 1.3; nginx and most servers ask during the handshake, which runs on
the thread). The read that meets it chooses the identity and signs the CertificateVerify with its
key, on the loop: a millisecond or less for a key in memory, but a token key's signature (and a
PIN callback that asks at each signature) blocks the loop for as long as it takes. The request
travels encrypted as application data does, so nothing tells it apart before the read; reads are
not sent to the thread (a thread hop per read would cost every connection). With a token
identity and such a server, pass ``max_tls="1.2"`` (libmtls refuses TLS 1.2 renegotiation, so
nothing is signed after the handshake, and a server that insists fails with an error saying it
asked to renegotiate) or use the blocking API on a thread. Servers made with
:func:`start_server` never ask after the handshake.

**Proxies.** ``open_connection(..., proxy="http://[user:password@]host:port")`` asks the proxy
for a ``CONNECT`` tunnel (on the loop; the same request and answer handling as the blocking
adapters) and runs the handshake through it for the target, exactly as on a direct connection.
``mtls.httpx.AsyncTransport`` does the same for its proxies and the environment's.

**Cancellation and timeouts.** A cancelled or timed-out connect leaves nothing behind: no
descriptor registered with the loop, the socket closed, the TLS connection freed (close_notify
once the handshake had completed). A handshake step already running on a worker thread cannot
be interrupted: the cancelled task waits for that step (bounded by ``handshake_timeout``) before it
frees the connection and re-raises ``CancelledError``. ``writer.close()`` sends close_notify after
the data written before it, then closes the socket.

**get_extra_info** keys (on the writer, and on the transport): ``"peername"``, ``"sockname"``,
``"socket"`` (the socket object; on a server, a duplicate of the connection's descriptor, closed
with its object), ``"ssl_object"`` (the :class:`mtls.Connection`), ``"peercert"`` (the peer's leaf
:class:`mtls.Certificate`, None without one — libmtls's object, not ssl's dictionary),
``"peer_chain"`` (the chain the peer presented, leaf first), ``"evaluation"`` (libmtls's
:class:`mtls.TrustResult` for the peer, None when it sent no certificate), ``"presented_identity"``
(the :class:`mtls.Identity` we presented), ``"alpn"`` (the protocol agreed on, or None),
``"tls_version"`` (``"TLSv1.2"`` or ``"TLSv1.3"``), ``"resumed"`` (whether the session was
resumed), ``"sslcontext"`` (always None: there is no ssl.SSLContext).

**Servers.** :func:`start_server` listens with an :class:`mtls.Listener`, whose own threads run
each client's handshake (the server identity may be a token key); accepted clients are handed to
the loop and to ``handler(reader, writer)``, which sees the client's certificate and evaluation
through ``writer.get_extra_info``. Clients the policy refuses never reach the handler; their
errors are kept in ``Server.rejected``. Accepted connections come from the listener in blocking
mode; each is switched to non-blocking mode (``Connection.set_non_blocking``,
``mtls_conn_set_non_blocking``) before it reaches the loop, which then drives it as a client's:
a client that sends half a record or stops reading holds nothing. Reads have no time limit of
their own: use ``asyncio.wait_for``."""
# Inside the mtls package this module is named "asyncio": every import here is absolute, so
# "asyncio" below is the standard library's.
import asyncio
import concurrent.futures
import os
import socket
import threading
import warnings
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Dict, List, Optional, Sequence, Tuple, TypeVar

from mtls._lib import lib
from mtls._url import endpoint
from mtls._proxy import (_MAX_REPLY, ConnectReply, HTTPProxy, TunnelError, UnsupportedProxy, closed_on_failure,
                         connect_request)
from mtls.errors import (ConnectError, Error, Timeout, TrustError, WantRead, WantWrite, check,
                         take_callback_exception)
from mtls.pkcs12 import Identity
from mtls.tls import Connection, IdentityLike, Listener, default_timeout, effective_timeout, resolve_identity
from mtls.trust import Policy

_T = TypeVar("_T")

#: The default time limit (seconds) for connecting: libmtls's own, read from the library (the
#: handshake's default is the library's handshake_timeout_ms).
DEFAULT_TIMEOUT = default_timeout("connect_timeout_ms")

# ---- the worker threads

_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
_executor_lock = threading.Lock()


def _workers() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that run the handshakes that may block and identity lookups, made on first
    use. Their number (MTLS_ASYNCIO_THREADS, default 4) bounds how many such handshake steps run
    at once; tokens serialise their signatures anyway."""
    global _executor
    with _executor_lock:
        if _executor is None:
            n = int(os.environ.get("MTLS_ASYNCIO_THREADS", "4"))
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, n),
                                                              thread_name_prefix="mtls-asyncio")
        return _executor


async def _off_loop(fn: Callable[..., _T], *args: Any, discard: Optional[Callable[[_T], None]] = None) -> _T:
    """fn(*args) on a worker thread; its exception is raised here. When the awaiting task is
    cancelled, the call (which cannot be interrupted) is waited for before CancelledError goes
    on, so the caller frees what the call used only once no thread uses it; `discard` frees
    what the call returned to nobody."""
    fut = asyncio.get_running_loop().run_in_executor(_workers(), fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        while not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                pass
            except BaseException:  # noqa: BLE001 - the call failed after all: the cancellation wins
                pass
        if not fut.cancelled():
            if fut.exception() is None and discard is not None:
                discard(fut.result())
        raise


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


async def _wait_fd(fd: int, writing: bool) -> None:
    """Until `fd` is readable (writable); the descriptor is unregistered however this ends."""
    loop = asyncio.get_running_loop()
    fut: "asyncio.Future[None]" = loop.create_future()
    if writing:
        loop.add_writer(fd, _wake, fut)
    else:
        loop.add_reader(fd, _wake, fut)
    try:
        await fut
    finally:
        if writing:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def _bounded(aw: Awaitable[_T], seconds: Optional[float], what: str,
                   field: str = "connect_timeout_ms") -> _T:
    """aw within `seconds` under libmtls's one convention (None or 0: the library's default for
    the ConnOptions `field`; negative or inf: no limit); mtls.Timeout when exceeded."""
    seconds = effective_timeout(seconds, field)
    if seconds is None:
        return await aw
    try:
        return await asyncio.wait_for(aw, seconds)
    except asyncio.TimeoutError as e:
        if isinstance(e, Timeout):
            raise
        raise Timeout(f"{what}: no answer within {seconds:g} s", Timeout.code) from None


# ---- client connections

def _numeric_addresses(host: str, port: int) -> Optional[List[Any]]:
    """getaddrinfo's answer for an IP address literal, made on the loop: with AI_NUMERICHOST the
    resolver looks nothing up (as asyncio's own create_connection does for an address), which
    spares a connection to an address the thread hop of loop.getaddrinfo. None for a name."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        return None


async def _connect_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to host:port (`host` as :func:`mtls._url.host_only`
    gives it; the name resolved off the loop, each address tried in turn)."""
    loop = asyncio.get_running_loop()
    try:
        infos = _numeric_addresses(host, port) or await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConnectError(f"cannot resolve {host}: {e.strerror}", ConnectError.code) from None
    last: Optional[OSError] = None
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as e:
            sock.close()
            last = e
        except BaseException:
            sock.close()
            raise
    raise ConnectError(f"cannot connect to {host}:{port}: {last.strerror if last else 'no address'}",
                       ConnectError.code)


async def _open_tunnel(proxy: HTTPProxy, host: str, port: int) -> socket.socket:
    """The asyncio form of mtls._proxy.open_tunnel, with its request and its reading of the
    answer (ConnectReply): a connected non-blocking socket on which the http:// `proxy` answered
    200 to ``CONNECT host:port``; anything else raises TunnelError naming the proxy and its
    answer. The caller bounds the time."""
    request = connect_request(proxy, host, port)
    try:
        sock = await _connect_socket(proxy.host, proxy.port)
    except ConnectError as e:
        raise TunnelError(f"cannot connect to the proxy {proxy}: {e.message}") from e
    with closed_on_failure(sock, proxy):
        await asyncio.get_running_loop().sock_sendall(sock, request)
        reply = ConnectReply(proxy, host, port)
        while not reply.complete:
            await _wait_fd(sock.fileno(), False)
            try:
                peeked = sock.recv(_MAX_REPLY, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            sock.recv(reply.take(peeked))  # bytes already queued: all of them at once
        reply.check()
        return sock


def _start_handshake(sock: socket.socket, host: str, port: int, options: Dict[str, Any]) -> Tuple[Connection, bool]:
    """On a worker thread: the TLS connection over `sock` (making its OpenSSL context may load
    a token key) and the handshake's first step. Returns the connection and whether the next step
    waits for the socket to be writable (False: readable)."""
    conn = Connection.wrap(sock, host, port, non_blocking=True, **options)
    try:
        return conn, _handshake_step(conn)
    except BaseException:
        conn.close()
        raise


_DONE = None


def _handshake_step(conn: Connection) -> Optional[bool]:
    """One step of the handshake (on the loop or a worker thread, see _step). None when complete;
    else True when it waits for the socket to be writable, False for readable. Other failures
    raise (a TrustError carries the evaluation)."""
    # The C call directly: waiting for the socket is the common outcome, and answering it without
    # making an exception keeps this thread's hold on the GIL (which the loop needs) short.
    rc = lib.mtls_conn_handshake(conn._h)
    if rc in (WantRead.code, WantWrite.code):
        pending = take_callback_exception()  # a PIN or report callback that raised
        if pending is not None:
            raise pending
        return rc == WantWrite.code
    try:
        check(rc)
    except TrustError as e:  # as Connection.handshake: the refusal carries our evaluation
        if e.evaluation is None:
            try:
                e.evaluation = conn.evaluation
            except Error:
                pass
        raise
    return _DONE


def _made_on_loop(options: Dict[str, Any]) -> bool:
    """Whether making the connection cannot wait: no identity source, and every identity given
    has its key in memory (making the OpenSSL context of a token identity may load its key)."""
    if options.get("identity_source") is not None:
        return False
    given = [options.get("identity"), *(options.get("candidates") or ())]
    return all(i is None or (isinstance(i, Identity) and i.key_in_memory) for i in given)


async def _step(conn: Connection) -> Optional[bool]:
    """The next handshake step: on the loop while the core says the connection cannot wait for
    anything but its socket (mtls_conn_may_block, asked before each step: a replaced policy may
    turn revocation on), else on a worker thread, where the connection then stays."""
    if conn._on_loop:
        conn._on_loop = not conn.may_block
    if conn._on_loop:
        return _handshake_step(conn)
    return await _off_loop(_handshake_step, conn)


async def _free(conn: Connection) -> None:
    """Frees the connection: on the loop when its steps ran there (nothing to wait for; a
    non-blocking close sends close_notify only if the socket takes it at once), else on a worker
    thread (mtls_conn_free may wait for a token's lock)."""
    if conn._on_loop:
        conn.close()
    else:
        await _off_loop(conn.close)


async def _handshake(sock: socket.socket, host: str, port: int, options: Dict[str, Any]) -> Connection:
    """The whole handshake over a connected socket; on failure or cancellation the connection is
    freed (the caller closes the socket). With keys in memory and no revocation checking, the
    connection is made and its steps run on the loop, as Python's ssl runs its handshakes: each
    step is CPU work over a socket that does not wait. Otherwise (a token key, an identity loaded
    only when chosen, an identity source, a policy that may fetch a CRL or OCSP answer) they run
    on a worker thread. Waiting for the socket between steps is always on the loop."""
    conn: Optional[Connection] = None
    try:
        if _made_on_loop(options):
            conn = Connection.wrap(sock, host, port, non_blocking=True, **options)
            conn._on_loop = True
            want = await _step(conn)
        else:
            conn, want = await _off_loop(_start_handshake, sock, host, port, options, discard=lambda r: r[0].close())
        fd = sock.fileno()
        while want is not _DONE:
            await _wait_fd(fd, want)
            want = await _step(conn)
        return conn
    except BaseException:
        if conn is not None:
            await _free(conn)  # before the caller closes the socket it writes to
        raise


async def _connect_or_tunnel(host: str, port: int, proxy: Optional[HTTPProxy], timeout: Optional[float]) -> socket.socket:
    """A connected non-blocking socket to host:port, directly or through `proxy`'s tunnel, within
    `timeout` (as _bounded)."""
    if proxy is None:
        return await _bounded(_connect_socket(host, port), timeout, f"connecting to {host}:{port}")
    return await _bounded(_open_tunnel(proxy, host, port), timeout,
                          f"opening a tunnel to {host}:{port} through the proxy {proxy}")


async def connect(host: str, port: int, *, identity: IdentityLike = None, policy: Optional[Policy] = None,
                  verify_as: Optional[str] = None, store: Any = None, pin: Any = None, proxy: Any = None,
                  **options: Any) -> Tuple[Connection, socket.socket]:
    """The handshaken non-blocking :class:`mtls.Connection` and the socket it runs on (the caller
    frees the connection, then closes the socket): what :func:`open_connection` and
    ``mtls.httpx.AsyncTransport`` build on. Arguments as :func:`open_connection`."""
    # Read by the core as mtls connect reads them: "[::1]" is ::1; a port in the host, or one
    # outside 1 to 65535, is refused.
    host, port = endpoint(host, port)
    connect_timeout = options.pop("connect_timeout", None)
    handshake_timeout = options.pop("handshake_timeout", None)
    options.pop("non_blocking", None)
    through = None if proxy is None else proxy if isinstance(proxy, HTTPProxy) else HTTPProxy.from_url(proxy)
    if isinstance(identity, str):
        identity = await _off_loop(resolve_identity, identity, store, pin)
    sock = await _connect_or_tunnel(host, int(port), through, connect_timeout)
    try:
        conn = await _bounded(_handshake(sock, host, int(port), dict(identity=identity, policy=policy,
                                                                     verify_as=verify_as, **options)),
                              handshake_timeout, f"TLS handshake with {host}:{port}", "handshake_timeout_ms")
    except BaseException:
        sock.close()
        raise
    return conn, sock


# ---- the transport under asyncio's streams

_READ_SIZE = 65536        # above a TLS record's 16 KiB: one read empties a record
_WRITE_CHUNK = 1 << 18    # a fixed bound, so a retried write is never shorter than the first try


class _TLSTransport(asyncio.Transport):
    """An asyncio transport over a handshaken non-blocking libmtls connection (a client's, or a
    server's switched with Connection.set_non_blocking): read until WantRead, written until
    WantWrite, a write that stopped there retried with the same bytes (OpenSSL's rule)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: Connection, sock: Optional[socket.socket],
                 protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._loop, self._conn, self._sock, self._protocol = loop, conn, sock, protocol
        self._fd = conn.fileno()
        self._rbuf = bytearray(_READ_SIZE)
        self._wbuf = bytearray()
        self._reading = False          # our reader is registered
        self._read_paused = False      # the protocol asked us to pause
        self._read_scheduled = False   # a call_soon(_on_readable) is pending
        self._writer_on = False        # our writer is registered
        self._write_wants_read = False
        self._closing = False
        self._shutting_down = False
        self._lost = False
        self._protocol_paused = False
        self._high, self._low = 64 * 1024, 16 * 1024
        self._info: Dict[str, Any] = {}
        self._fill_addresses()
        protocol.connection_made(self)
        self._resume_reading()

    # -- extra info
    def _fill_addresses(self) -> None:
        s = self._sock
        if s is None:  # a server connection: its descriptor is the connection's own
            s = socket.socket(fileno=os.dup(self._fd))
            self._info["socket"] = s
        else:
            self._info["socket"] = s
        try:
            self._info["peername"] = s.getpeername()
            self._info["sockname"] = s.getsockname()
        except OSError:
            self._info["peername"] = self._info["sockname"] = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._info:
            return self._info[name]
        conn = self._conn
        if name == "sslcontext":
            return None
        if name == "ssl_object":
            return conn
        if conn is None or conn._h is None:
            return default
        if name == "peercert":
            chain = conn.peer_chain
            value: Any = chain[0] if chain else None
        elif name == "peer_chain":
            value = conn.peer_chain
        elif name == "evaluation":
            value = conn.evaluation
        elif name == "presented_identity":
            value = conn.presented_identity
        elif name == "alpn":
            value = conn.alpn
        elif name == "tls_version":
            value = conn.tls_version
        elif name == "resumed":
            value = conn.resumed
        else:
            return default
        self._info[name] = value  # fixed once the handshake is done
        return value

    # -- reading
    def is_reading(self) -> bool:
        return not self._read_paused and not self._lost and not self._closing

    def pause_reading(self) -> None:
        self._read_paused = True
        self._stop_reader()

    def resume_reading(self) -> None:
        self._read_paused = False
        self._resume_reading()

    def _resume_reading(self) -> None:
        if self._lost or self._closing or self._read_paused:
            return
        if not self._reading:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True
        # OpenSSL may hold decrypted input the descriptor does not announce.
        self._schedule_read()

    def _schedule_read(self) -> None:
        if not self._read_scheduled:
            self._read_scheduled = True
            self._loop.call_soon(self._scheduled_read)

    def _scheduled_read(self) -> None:
        self._read_scheduled = False
        if self._reading:
            self._on_readable()

    def _stop_reader(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _on_readable(self) -> None:
        if self._write_wants_read:
            self._write_wants_read = False
            self._flush()
        for _ in range(16):
            if self._lost or self._closing or self._read_paused or self._conn is None:
                return
            try:
                n = self._conn.readinto(self._rbuf)
            except WantRead:
                return
            except WantWrite:  # TLS wants to write before it reads (a key update answer)
                self._stop_reader()
                self._loop.add_writer(self._fd, self._read_after_write)
                return
            except Exception as e:  # noqa: BLE001 - reported to the protocol, raised in the reader's task
                self._fatal(e)
                return
            if n == 0:
                self._on_eof()
                return
            self._protocol.data_received(bytes(self._rbuf[:n]))
        self._schedule_read()  # more may wait inside OpenSSL: read again after other callbacks

    def _read_after_write(self) -> None:
        self._loop.remove_writer(self._fd)
        self._resume_reading()

    def _on_eof(self) -> None:
        self._stop_reader()
        keep_open = self._protocol.eof_received()  # type: ignore[attr-defined]
        if not keep_open:
            self.close()

    # -- writing
    def write(self, data: Any) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expected a bytes-like object, not {type(data).__name__}")
        if self._closing or self._lost:
            return
        if not data:
            return
        self._wbuf += data
        if not self._writer_on and not self._write_wants_read:
            self._flush()
        self._maybe_pause_protocol()

    def _flush(self) -> None:
        """Writes what the socket takes now; registers the writer for the rest."""
        while self._wbuf and self._conn is not None:
            # At most _WRITE_CHUNK bytes a call, always from the start of the buffer, which only
            # grows at its end: a write retried after WantWrite starts with the same bytes and is
            # never shorter, as OpenSSL requires.
            chunk = bytes(self._wbuf[:_WRITE_CHUNK])
            try:
                n = self._conn.write(chunk)
            except WantWrite:
                self._want_writable()
                return
            except WantRead:
                self._write_wants_read = True
                self._resume_reading()
                return
            except Exception as e:  # noqa: BLE001 - reported to the protocol
                self._fatal(e)
                return
            del self._wbuf[:n]
        if self._writer_on:
            self._loop.remove_writer(self._fd)
            self._writer_on = False
        self._maybe_resume_protocol()
        if not self._wbuf and self._closing:
            self._shutdown()

    def _want_writable(self) -> None:
        if not self._writer_on:
            self._loop.add_writer(self._fd, self._flush)
            self._writer_on = True

    def get_write_buffer_size(self) -> int:
        return len(self._wbuf)

    def get_write_buffer_limits(self) -> Tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: Optional[int] = None, low: Optional[int] = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self) -> None:
        if not self._protocol_paused and len(self._wbuf) > self._high:
            self._protocol_paused = True
            self._protocol.pause_writing()

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and len(self._wbuf) <= self._low:
            self._protocol_paused = False
            self._protocol.resume_writing()

    def can_write_eof(self) -> bool:
        return False  # TLS has no half-close that every peer understands: close() sends close_notify

    def write_eof(self) -> None:
        raise NotImplementedError("TLS connections cannot write EOF alone; close() sends close_notify")

    # -- closing
    def is_closing(self) -> bool:
        return self._closing or self._lost

    def close(self) -> None:
        """Sends the data written so far, then close_notify, then closes the socket."""
        if self._closing or self._lost:
            return
        self._closing = True
        self._stop_reader()
        if not self._wbuf:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._lost or self._conn is None:
            return
        if self._writer_on:
            self._loop.remove_writer(self._fd)
            self._writer_on = False
        try:
            self._conn.shutdown()  # close_notify
        except WantWrite:
            if not self._shutting_down:
                self._shutting_down = True
                self._loop.add_writer(self._fd, self._shutdown_ready)
                return
        except Exception:  # noqa: BLE001 - the peer may be gone: close_notify is best effort
            pass
        self._finish(None)

    def _shutdown_ready(self) -> None:
        self._loop.remove_writer(self._fd)
        self._shutting_down = False
        try:
            self._conn.shutdown()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - still not writable, or gone: close without it
            pass
        self._finish(None)

    def abort(self) -> None:
        """Closes at once, dropping unsent data (close_notify is still attempted)."""
        self._finish(None)

    def _fatal(self, exc: BaseException) -> None:
        self._finish(exc)

    def _finish(self, exc: Optional[BaseException]) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._stop_reader()
        if self._writer_on or self._shutting_down or self._write_wants_read:
            self._loop.remove_writer(self._fd)
        self._writer_on = self._shutting_down = self._write_wants_read = False
        self._wbuf.clear()
        conn, self._conn = self._conn, None
        socks = [self._sock] if self._sock is not None else []
        own = self._info.get("socket")
        if own is not None and own is not self._sock:
            socks.append(own)

        def release(_: Any = None) -> None:
            for s in socks:  # after the free: the connection writes to its socket until then
                s.close()
            self._protocol.connection_lost(exc)

        if conn is None or conn._on_loop:
            if conn is not None:
                conn.close()  # nothing to wait for (see _free)
            self._loop.call_soon(release)
            return
        # mtls_conn_free may wait for a lock a token signature holds (the connection's identity
        # and context are shared with handshakes in progress): off the loop, as its steps were.
        try:
            self._loop.run_in_executor(_workers(), conn.close).add_done_callback(release)
        except RuntimeError:  # the loop is closed (a transport collected late): free here
            conn.close()
            for s in socks:
                s.close()

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def __del__(self) -> None:
        if not getattr(self, "_lost", True):
            warnings.warn(f"unclosed TLS transport {self!r}", ResourceWarning, source=self)
            try:
                self._finish(None)
            except Exception:  # noqa: BLE001 - the loop may be closed already
                pass


def _streams(loop: asyncio.AbstractEventLoop, conn: Connection, sock: Optional[socket.socket],
             limit: int) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport = _TLSTransport(loop, conn, sock, protocol)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def open_connection(host: str, port: int, *, identity: IdentityLike = None, policy: Optional[Policy] = None,
                          verify_as: Optional[str] = None, store: Any = None, pin: Any = None, limit: int = 2 ** 16,
                          proxy: Any = None, **options: Any) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connects to host:port over mutual TLS and returns asyncio's (StreamReader, StreamWriter).

    Keywords as :func:`mtls.connect`: `identity` (an Identity, a store label in `store` or
    MTLS_STORE, or a pkcs11: URI with `pin`), `policy`, `verify_as`, and the
    :class:`mtls.ConnectOptions` fields (``sni``, ``alpn``, ``min_tls``, ``max_tls``,
    ``resume``...). ``connect_timeout`` bounds the TCP connect (name resolution included) and
    ``handshake_timeout`` the handshake, in seconds under libmtls's one convention (None or 0:
    the library's default, 30 s; negative or ``float("inf")``: no limit);
    exceeding either raises :class:`mtls.Timeout`. Reads have no time limit of their own: wrap them
    in ``asyncio.wait_for``. `limit` is the StreamReader's buffer limit.

    `proxy` (an ``http://[user:password@]host:port`` URL): the connection goes through that
    proxy's CONNECT tunnel, and libmtls's TLS runs through the tunnel with the target's host,
    port, SNI, host rules, pins and identity, as on a direct connection (a hostile proxy that
    sends the tunnel elsewhere meets the policy). ``connect_timeout`` then bounds reaching the
    proxy and its answer. A proxy that cannot be reached or refuses the tunnel raises
    :class:`TunnelError` (an OSError; ``.status`` is the proxy's answer); an ``https://`` or
    SOCKS proxy is refused up front (:class:`UnsupportedProxy`, a ValueError): libmtls's TLS is
    never run inside another TLS layer or handed to another stack. Environment variables
    (HTTPS_PROXY...) are not read here, as asyncio's own open_connection does not."""
    conn, sock = await connect(host, port, identity=identity, policy=policy, verify_as=verify_as, store=store,
                               pin=pin, proxy=proxy, **options)
    try:
        return _streams(asyncio.get_running_loop(), conn, sock, limit)
    except BaseException:
        conn.close()
        sock.close()
        raise


# ---- servers

class Server:
    """A listening mutual-TLS server made by :func:`start_server` (an async context manager, like
    asyncio's Server): ``port``, ``close()``, ``await wait_closed()``, ``await serve_forever()``.
    ``rejected`` keeps the errors of the last 100 clients refused in their handshake (an
    :class:`mtls.Untrusted` with our evaluation, a :class:`mtls.PeerAlert`...)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, listener: Listener,
                 handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any], limit: int) -> None:
        self._loop, self._listener, self._handler, self._limit = loop, listener, handler, limit
        self.port: int = listener.port
        self.rejected: Deque[Error] = deque(maxlen=100)
        self._stop = threading.Event()
        self._closed: "asyncio.Future[None]" = loop.create_future()
        self._transports: List[_TLSTransport] = []
        self._thread = threading.Thread(target=self._accept_loop, name="mtls-asyncio-accept", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        """On its own thread: accepts (the listener's threads run the handshakes) and hands each
        client to the loop."""
        try:
            while not self._stop.is_set():
                try:
                    conn = self._listener.accept(timeout=0.1)
                except Timeout:
                    continue
                except Error as e:
                    self._post(self.rejected.append, e)
                    continue
                try:
                    # Accepted connections are blocking: the loop drives them non-blocking.
                    conn.set_non_blocking(True)
                except Error as e:
                    conn.close()
                    self._post(self.rejected.append, e)
                    continue
                if not self._post(self._on_client, conn):
                    conn.close()
        finally:
            self._post(self._accept_ended)

    def _post(self, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
            return True
        except RuntimeError:  # the loop is closed
            return False

    def _on_client(self, conn: Connection) -> None:
        if self._stop.is_set():
            conn.close()
            return
        reader = asyncio.StreamReader(limit=self._limit, loop=self._loop)
        protocol = asyncio.StreamReaderProtocol(reader, self._handler, loop=self._loop)
        try:
            transport = _TLSTransport(self._loop, conn, None, protocol)
        except BaseException:
            conn.close()
            raise
        self._transports.append(transport)
        self._transports = [t for t in self._transports if not t.is_closing()]

    def _accept_ended(self) -> None:
        if not self._closed.done():
            self._listener.close()
            self._closed.set_result(None)

    @property
    def sockets(self) -> Tuple[()]:
        return ()  # the listening socket is the Listener's own

    def is_serving(self) -> bool:
        return not self._stop.is_set()

    def close(self) -> None:
        """Stops accepting (within 0.1 s); connections already handed to handlers go on."""
        self._stop.set()

    def close_clients(self) -> None:
        """Closes the connections of every client accepted (close_notify)."""
        for t in self._transports:
            t.close()
        self._transports = []

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def serve_forever(self) -> None:
        try:
            await asyncio.shield(self._closed)
        except asyncio.CancelledError:
            self.close()
            await self.wait_closed()
            raise

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
        await self.wait_closed()


async def start_server(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
                       host: Optional[str] = "127.0.0.1", port: int = 0, *, identity: IdentityLike,
                       client_policy: Optional[Policy] = None, client_auth: str = "require",
                       store: Any = None, pin: Any = None, alpn: Sequence[str] = (), min_tls: Any = None,
                       max_tls: Any = None, handshake_timeout: Optional[float] = None,
                       session_tickets: bool = True, client_ca_names: Any = "anchors",
                       limit: int = 2 ** 16) -> Server:
    """Listens on host:port (0: an ephemeral port, see ``Server.port``) with the server
    `identity` (an Identity, a store label or a pkcs11: URI) and judges clients with
    `client_policy` (its anchors: the CA names sent, and the only trust for clients).
    ``client_auth``: "require" (default), "optional" or "none". Each accepted client runs
    ``handler(reader, writer)`` (a coroutine function or a plain function) on the loop, as with
    ``asyncio.start_server``; ``writer.get_extra_info("peercert")`` / ``"evaluation"`` give the
    client's certificate and libmtls's evaluation of it. ``client_ca_names`` as ``Listener``'s:
    "anchors" (default), "none", or a list of Certificates."""
    ident = await _off_loop(resolve_identity, identity, store, pin) if isinstance(identity, str) else identity
    if not isinstance(ident, Identity):
        raise TypeError("start_server needs a server identity")

    def make() -> Listener:
        return Listener(ident, address=host, port=port, client_auth=client_auth, client_policy=client_policy,
                        alpn=alpn, min_tls=min_tls, max_tls=max_tls, handshake_timeout=handshake_timeout,
                        session_tickets=session_tickets, client_ca_names=client_ca_names)
    listener = await _off_loop(make)
    return Server(asyncio.get_running_loop(), listener, handler, limit)


__all__ = ["open_connection", "start_server", "connect", "Server", "DEFAULT_TIMEOUT", "TunnelError",
           "UnsupportedProxy"]
