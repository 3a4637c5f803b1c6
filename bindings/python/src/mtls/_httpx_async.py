"""httpx.AsyncClient over libmtls (private; use ``mtls.httpx.AsyncTransport``).

httpcore's connection pool does the HTTP/1.1, keep-alive, pool limits and expiry; its network
backend here is libmtls: the TCP connection is made on the loop, the TLS handshake runs through
:mod:`mtls.asyncio` (every step on a worker thread), and reads and writes are non-blocking libmtls
calls driven by ``loop.add_reader``/``add_writer``. The ``ssl_context`` httpcore hands to
``start_tls`` is ignored: libmtls's identity and policy make the TLS, never Python's ssl.

Proxies: for an origin whose route (mtls._httpx_proxy, shared with the blocking transport) is an
http:// proxy, the backend's TCP connection is the proxy's CONNECT tunnel to the origin (made by
mtls.asyncio, with the request and answer parsing of mtls._proxy), and start_tls runs libmtls's
TLS through it for the origin. httpcore's pool keys connections by origin, and the route is a
function of the origin, so a pooled connection always went the way its origin's requests go."""
import asyncio
import select
import socket
import ssl
from typing import Any, AsyncIterator, Dict, Iterable, Optional, Tuple

import httpcore
import httpx
from httpx._transports.default import map_httpcore_exceptions

from mtls._httpx_errors import ConnectFailed, as_httpx_error
from mtls._httpx_proxy import ProxyRoutes, route_client_proxies
from mtls._proxy import TunnelError
from mtls._url import url_host
from mtls._url import endpoint, host_only
from mtls.asyncio import _bounded, _connect_or_tunnel, _free, _handshake, _off_loop, _wait_fd
from mtls.errors import Closed, Error, Unsupported, WantRead, WantWrite
from mtls.pkcs12 import Identity
from mtls.tls import Connection, IdentityLike, resolve_identity
from mtls.trust import Policy

_WRITE_CHUNK = 1 << 18  # fixed: a write retried after WantWrite is never shorter than the first try


async def _io(fd: int, writing: bool, timeout: Optional[float], what: str) -> None:
    """Waits for the socket; no limit when timeout is None."""
    if timeout is None:
        await _wait_fd(fd, writing)
    else:
        await _bounded(_wait_fd(fd, writing), timeout, what)


class _TLSStream(httpcore.AsyncNetworkStream):
    """A handshaken libmtls connection as httpcore's network stream."""

    def __init__(self, conn: Connection, sock: socket.socket, peer: str) -> None:
        self._conn, self._sock, self._peer = conn, sock, peer
        self._fd = sock.fileno()
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)

    async def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        while True:
            try:
                return self._conn.read(max_bytes)
            except Closed:  # the server hung up without close_notify: end of stream for HTTP
                return b""
            except WantRead:
                await _io(self._fd, False, timeout, f"reading from {self._peer}")
            except WantWrite:
                await _io(self._fd, True, timeout, f"reading from {self._peer}")

    async def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        view = memoryview(buffer)
        while view:
            chunk = bytes(view[:_WRITE_CHUNK])
            try:
                n = self._conn.write(chunk)
            except WantWrite:
                await _io(self._fd, True, timeout, f"writing to {self._peer}")
                continue
            except WantRead:
                await _io(self._fd, False, timeout, f"writing to {self._peer}")
                continue
            view = view[n:]

    async def aclose(self) -> None:
        conn = self._conn
        if conn._h is not None:
            try:
                conn.shutdown()  # close_notify, when the socket takes it now
            except Exception:  # noqa: BLE001 - the server may be gone: best effort
                pass
            await _free(conn)  # off the loop when it may wait for a token's lock
        self._sock.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: Optional[str] = None,
                        timeout: Optional[float] = None) -> httpcore.AsyncNetworkStream:
        raise Unsupported("TLS inside TLS (an https proxy) is not supported by mtls.httpx.AsyncTransport",
                          Unsupported.code)

    def get_extra_info(self, info: str) -> Any:
        conn = self._conn
        if info == "is_readable":
            # An idle kept-alive connection the server closed (or sent anything on) is not reused,
            # nor one made under a policy that has changed since (Connection.policy_changed).
            if conn._h is None or conn.policy_changed:
                return True
            return bool(self._poll.poll(0))
        if info in ("client_addr", "sockname"):
            return self._sock.getsockname()
        if info in ("server_addr", "peername"):
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "ssl_object":
            return None  # httpcore asks it for ALPN "h2"; HTTP/1.1 only here
        if info == "connection":
            return conn
        if conn._h is None:
            return None
        if info == "peercert":
            chain = conn.peer_chain
            return chain[0] if chain else None
        if info in ("peer_chain", "evaluation", "presented_identity", "alpn", "tls_version", "resumed"):
            return getattr(conn, info)
        return None


class _TCPStream(httpcore.AsyncNetworkStream):
    """A connected socket, before start_tls."""

    def __init__(self, backend: "_Backend", sock: socket.socket, host: str, port: int) -> None:
        self._backend, self._sock, self._host, self._port = backend, sock, host, port

    async def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        raise Unsupported("mtls.httpx.AsyncTransport speaks https only", Unsupported.code)

    async def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        raise Unsupported("mtls.httpx.AsyncTransport speaks https only", Unsupported.code)

    async def aclose(self) -> None:
        self._sock.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: Optional[str] = None,
                        timeout: Optional[float] = None) -> httpcore.AsyncNetworkStream:
        b = self._backend
        options: Dict[str, Any] = dict(b.options)
        options["identity"] = await b.identity()
        options["policy"], options["verify_as"] = b.policy, b.verify_as
        if server_hostname and host_only(url_host(server_hostname)) != self._host and "sni" not in options:
            options["sni"] = server_hostname  # httpx's "sni_hostname" extension
        t = timeout if timeout is not None else b.timeout
        peer = f"{self._host}:{self._port}"
        try:
            conn = await (_handshake(self._sock, self._host, self._port, options) if t is None else
                          _bounded(_handshake(self._sock, self._host, self._port, options), t,
                                   f"TLS handshake with {peer}"))
        except Error as e:
            self._sock.close()
            raise ConnectFailed(e) from None
        except BaseException:
            self._sock.close()
            raise
        return _TLSStream(conn, self._sock, peer)


class _Backend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend: TCP on the loop, TLS by libmtls."""

    def __init__(self, identity: IdentityLike, store: Any, pin: Any, policy: Optional[Policy],
                 verify_as: Optional[str], timeout: Optional[float], options: Dict[str, Any],
                 routes: ProxyRoutes) -> None:
        self._identity, self._store, self._pin, self._routes = identity, store, pin, routes
        self._resolved: Optional[Identity] = identity if not isinstance(identity, str) else None
        self._lock: Optional[asyncio.Lock] = None
        self.policy, self.verify_as, self.timeout, self.options = policy, verify_as, timeout, options

    async def identity(self) -> Optional[Identity]:
        """The identity, a store label or pkcs11: URI resolved once, off the loop (a token login
        and its PIN callback, the store's KDF)."""
        if not isinstance(self._identity, str) or self._resolved is not None:
            return self._resolved
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._resolved is None:
                self._resolved = await _off_loop(resolve_identity, self._identity, self._store, self._pin)
        return self._resolved

    async def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None,
                          local_address: Optional[str] = None,
                          socket_options: Optional[Iterable[Any]] = None) -> httpcore.AsyncNetworkStream:
        t = timeout if timeout is not None else self.timeout
        # The origin's route, as handle_async_request checked it (an unusable one raised there).
        bare = host_only(host)  # brackets off, as the core reads a host
        proxy = None if self._routes.direct else self._routes.route(httpx.URL(scheme="https", host=bare, port=port))
        host, port = endpoint(url_host(host), port)  # the URL's host: an RFC 6874 zone ("%25eth0") decoded
        try:
            sock = await _connect_or_tunnel(host, port, proxy, float("inf") if t is None else t)
        except Error as e:
            raise ConnectFailed(e) from None
        return _TCPStream(self, sock, host, port)

    async def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                                  socket_options: Optional[Iterable[Any]] = None) -> httpcore.AsyncNetworkStream:
        raise Unsupported("mtls.httpx.AsyncTransport connects over TCP only", Unsupported.code)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _Released(httpx.AsyncByteStream):
    """The response body; its close gives the host's slot back (per-host limit)."""

    def __init__(self, stream: Any, release: Any) -> None:
        self._stream, self._release = stream, release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with map_httpcore_exceptions():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class AsyncTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncClient`` transport whose TLS is libmtls, with the identity and policy
    arguments of :class:`mtls.httpx.Transport`: `identity` (an Identity, a store label in `store`
    or MTLS_STORE, or a pkcs11: URI with `pin`; a label or URI is resolved on first use, off the
    loop), `policy`, `verify_as`, and :class:`mtls.ConnectOptions` fields as keywords.

    Pooling: HTTP/1.1 connections are kept alive and reused (httpcore's pool): at most
    `max_connections` in all, `max_per_host` requests (hence connections) at once per host and
    port (None: no limit of its own), `max_keepalive` idle ones (httpx's defaults: 100 and 20;
    fewer idle than busy connections means closing and opening under load), each for
    `keepalive_expiry` seconds. Timeouts: the client's (``httpx.Timeout``: connect bounds the TCP connect and the
    handshake each, read and write each socket wait); `timeout` (seconds) applies where the
    client gives none. Failures while connecting are httpx's own exceptions and libmtls's at once, as
    with the blocking transport: ``httpx.ConnectError`` (a refused server: also
    :class:`mtls.TrustError` with the evaluation), ``httpx.ConnectTimeout`` (also
    :class:`mtls.Timeout`); httpx's own
    for HTTP protocol errors.

    Proxies, as the blocking :class:`mtls.httpx.Transport`: `proxy` (an http:// URL or an
    ``httpx.Proxy`` with its auth and headers) sends every request through that proxy's CONNECT
    tunnel, libmtls's TLS running through the tunnel for the target's host, port, identity and
    policy; without it and with `trust_env` (default), HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and
    NO_PROXY are read as httpx's client reads them (httpx ignores them once it is given a
    transport). ``httpx.AsyncClient(transport=AsyncTransport(...), proxy=P)`` makes its proxy
    transport from ours (importing mtls.httpx arranges it), never httpx's own with Python's ssl.
    An ``https://`` or SOCKS proxy is a ValueError when given and ``httpx.ProxyError`` when it comes
    from the environment; a proxy that cannot be reached or refuses the tunnel is
    ``httpx.ProxyError`` naming its status; not reaching the proxy or its answer within the
    connect timeout is ``httpx.ConnectTimeout`` (also :class:`mtls.Timeout`)."""

    def __init__(self, identity: IdentityLike = None, policy: Optional[Policy] = None,
                 verify_as: Optional[str] = None, *, store: Any = None, pin: Any = None, max_keepalive: Optional[int] = 20,
                 max_connections: Optional[int] = 100, max_per_host: Optional[int] = None,
                 keepalive_expiry: Optional[float] = 5.0, timeout: Optional[float] = None, retries: int = 0,
                 proxy: Any = None, trust_env: bool = True, **options: Any) -> None:
        for name in ("non_blocking", "connect_timeout", "handshake_timeout"):
            options.pop(name, None)  # the pool's timeouts rule; connections are always non-blocking
        self._routes = ProxyRoutes(proxy, trust_env, "mtls.httpx.AsyncTransport")
        self.proxy = self._routes.proxy
        self.policy, self.verify_as, self.trust_env = policy, verify_as, trust_env
        self._settings: Dict[str, Any] = dict(
            store=store, pin=pin, max_keepalive=max_keepalive, max_connections=max_connections,
            max_per_host=max_per_host, keepalive_expiry=keepalive_expiry, timeout=timeout, retries=retries, **options)
        self._backend = _Backend(identity, store, pin, policy, verify_as, timeout, options, self._routes)
        self._max_per_host = max_per_host
        self._slots: Dict[Tuple[bytes, int], asyncio.Semaphore] = {}
        # httpcore calls ssl_context.set_alpn_protocols before start_tls: give it a context that is
        # never used for TLS (no certificates loaded, so it costs nothing).
        self._unused_ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=self._unused_ssl, max_connections=max_connections,
            max_keepalive_connections=max_keepalive, keepalive_expiry=keepalive_expiry,
            http1=True, http2=False, retries=retries, network_backend=self._backend)

    @property
    def identity(self) -> IdentityLike:
        """The identity presented (a label or URI until the first connection resolved it)."""
        return self._backend._resolved or self._backend._identity

    def _through(self, proxy: Any) -> "AsyncTransport":
        """A transport like this one (same identity, policy, limits and options) through
        `proxy`: what httpx.AsyncClient makes for its `proxy=` when its transport is ours."""
        return AsyncTransport(self.identity, self.policy, self.verify_as, proxy=proxy, trust_env=False,
                              **self._settings)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            raise httpx.UnsupportedProtocol(f"mtls.httpx.AsyncTransport speaks https only, not {request.url.scheme}:")
        self._routes.route(request.url)  # an unusable proxy from the environment: httpx.ProxyError now
        release = None
        if self._max_per_host is not None:
            key = (request.url.raw_host, 443 if request.url.port is None else request.url.port)
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = asyncio.Semaphore(self._max_per_host)
            await slot.acquire()
            release = slot.release
        try:
            req = httpcore.Request(
                method=request.method,
                url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                                 target=request.url.raw_path),
                headers=request.headers.raw, content=request.stream, extensions=request.extensions)
            try:
                with map_httpcore_exceptions():
                    resp = await self._pool.handle_async_request(req)
            except TunnelError as e:
                # httpx's own error for a proxy that could not be reached or refused the tunnel.
                raise httpx.ProxyError(str(e), request=request) from e
            except ConnectFailed as f:
                raise as_httpx_error(f.error, request, connecting=True) from f.error
            except Error as e:
                raise as_httpx_error(e, request, connecting=False) from e
        except BaseException:
            if release is not None:
                release()
            raise
        return httpx.Response(status_code=resp.status, headers=resp.headers,
                              stream=_Released(resp.stream, release), extensions=resp.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()


# httpx.AsyncClient(transport=AsyncTransport(...), proxy=P): the proxy's transport is ours, through P.
route_client_proxies(httpx.AsyncClient, AsyncTransport)

__all__ = ["AsyncTransport"]
