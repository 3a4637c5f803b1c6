"""httpx over libmtls: a transport for ``httpx.Client(transport=...)``.

    import httpx, mtls, mtls.httpx
    policy = mtls.Policy(anchors=[mtls.Certificate.load("root.pem")], verify_as="api.internal")
    with httpx.Client(transport=mtls.httpx.Transport(identity="alice", policy=policy)) as client:
        client.get("https://10.0.0.7:8443/status")

HTTP/1.1 with keep-alive: idle connections are kept per host (up to ``max_keepalive`` each) and
reused; request bodies of unknown length go chunked; responses stream. The identity is an
:class:`mtls.Identity`, a store label or a ``pkcs11:`` URI; ``policy`` judges the server. Failures
are httpx's own exceptions, so httpx users' ``except`` and retry code catch them: a refused
server, a refused client certificate, a failed handshake or TCP connection raise
``httpx.ConnectError``, a timeout while connecting ``httpx.ConnectTimeout`` (later
``httpx.ReadTimeout``); each is also of libmtls's class (a refused server is an
``mtls.TrustError`` with libmtls's reasons, ``.code`` and ``.name`` are kept). Needs the ``httpx``
extra.

Proxies: ``Transport(proxy="http://proxy:3128")`` (a URL or an ``httpx.Proxy``, with its auth and
headers) sends every request through that proxy's CONNECT tunnel, and libmtls's TLS runs through
the tunnel for the target's host, port, identity and policy; idle connections are kept per proxy
and target. Without ``proxy``, and with ``trust_env`` (the default), the transport reads
HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY as httpx's own client reads them (httpx ignores
them once a transport is given, so the transport does it). ``httpx.Client(transport=Transport(...),
proxy=P)`` is routed the same way: importing this module makes httpx build the proxy's transport
from ours (httpx would otherwise make a transport of its own, with another TLS stack, for the
proxy). Only ``http://`` proxies are honoured: an ``https://`` or SOCKS proxy is an error
(ValueError when given, ``httpx.ProxyError`` when it comes from the environment), and a proxy that
cannot be reached or refuses the tunnel raises ``httpx.ProxyError`` with its status.

asyncio: ``mtls.httpx.AsyncTransport`` for ``httpx.AsyncClient`` takes the same identity, policy,
``proxy`` and ``trust_env`` arguments, chooses proxies with the same code (mtls._httpx_proxy), and
``httpx.AsyncClient(transport=AsyncTransport(...), proxy=P)`` is routed through libmtls the same
way."""
import http.client
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import httpx

from ._httpx_errors import ConnectFailed, as_httpx_error
from ._httpx_proxy import ProxyRoutes, route_client_proxies
from ._proxy import HTTPProxy, TunnelError
from ._url import url_host
from .errors import Error
from .http import HTTPSConnection
from .store import Store
from .tls import IdentityLike, resolve_identity
from .trust import Policy


# Idle connections are kept per (proxy or None, host, port).
_Key = Tuple[Optional[HTTPProxy], str, int]


class _ResponseStream(httpx.SyncByteStream):
    """The response body, read from http.client's response (which undoes chunked encoding); the
    connection goes back to the pool when the body was read to its end."""

    def __init__(self, transport: "Transport", key: _Key, conn: HTTPSConnection,
                 response: http.client.HTTPResponse) -> None:
        self._transport, self._key, self._conn, self._response = transport, key, conn, response

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self._response.read(65536)
            if not chunk:
                break
            yield chunk

    def close(self) -> None:
        r = self._response
        reusable = r.isclosed() and not r.will_close
        r.close()
        if reusable:
            self._transport._checkin(self._key, self._conn)
        else:
            self._conn.close()


class Transport(httpx.BaseTransport):
    """An httpx transport whose TLS is libmtls. Keyword options other than the ones named are
    :class:`mtls.ConnectOptions` fields. `timeout` (seconds) bounds connecting, the handshake and
    each read or write. `proxy` (an http:// URL or an httpx.Proxy) tunnels every request through
    that proxy; without it, `trust_env` reads the environment's proxies (see the module)."""

    def __init__(self, identity: IdentityLike = None, policy: Optional[Policy] = None,
                 verify_as: Optional[str] = None, *, store: Optional[Store] = None, pin: Any = None,
                 max_keepalive: int = 10, timeout: Optional[float] = None, proxy: Any = None,
                 trust_env: bool = True, **options: Any) -> None:
        self._routes = ProxyRoutes(proxy, trust_env, "mtls.httpx.Transport")
        self.proxy: Optional[HTTPProxy] = self._routes.proxy
        self.identity = resolve_identity(identity, store, pin)
        self.policy = policy
        self.verify_as = verify_as
        self.trust_env = trust_env
        self._options = options
        self._timeout = timeout
        self._max_keepalive = max_keepalive
        self._idle: Dict[_Key, List[HTTPSConnection]] = {}
        self._lock = threading.Lock()

    def _through(self, proxy: Any) -> "Transport":
        """A transport like this one (same identity, policy and options) through `proxy`: what
        httpx.Client makes for its `proxy=` when its transport is ours."""
        return Transport(self.identity, self.policy, self.verify_as, max_keepalive=self._max_keepalive,
                         timeout=self._timeout, proxy=proxy, trust_env=False, **self._options)

    def _new(self, key: _Key) -> HTTPSConnection:
        kw: Dict[str, Any] = dict(self._options)
        if self._timeout is not None:
            kw["timeout"] = self._timeout
        proxy, host, port = key
        if proxy is None:
            return HTTPSConnection(host, port, identity=self.identity, policy=self.policy, verify_as=self.verify_as,
                                   **kw)
        conn = HTTPSConnection(proxy.host, proxy.port, identity=self.identity, policy=self.policy,
                               verify_as=self.verify_as, **kw)
        conn.set_tunnel(host, port, headers=dict(proxy.headers))
        return conn

    def _checkout(self, key: _Key) -> Tuple[HTTPSConnection, bool]:
        stale: List[HTTPSConnection] = []
        found: Optional[HTTPSConnection] = None
        with self._lock:
            idle = self._idle.get(key)
            while idle and found is None:
                conn = idle.pop()
                # Made under a policy that has changed since (replaced, a followed file
                # reloaded): dropped, the next connection is judged under the policy in force.
                if conn.policy_changed:
                    stale.append(conn)
                else:
                    found = conn
        for conn in stale:
            conn.close()
        if found is not None:
            return found, True
        return self._new(key), False

    def _checkin(self, key: _Key, conn: HTTPSConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_keepalive:
                idle.append(conn)
                return
        conn.close()

    @staticmethod
    def _send(conn: HTTPSConnection, request: httpx.Request) -> http.client.HTTPResponse:
        if conn.sock is None:
            try:
                conn.connect()
            except Error as e:
                raise ConnectFailed(e) from None
        target = request.url.raw_path.decode("ascii")
        conn.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in request.headers.raw:
            conn.putheader(name, value)
        conn.endheaders()
        chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
        for chunk in request.stream:  # type: ignore[union-attr]
            if not chunk:
                continue
            if chunked:
                conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            else:
                conn.send(chunk)
        if chunked:
            conn.send(b"0\r\n\r\n")
        return conn.getresponse()

    def _exchange(self, key: _Key, request: httpx.Request) -> Tuple[HTTPSConnection, http.client.HTTPResponse]:
        """Sends the request on a kept-alive connection for `key` or a new one; the connection and
        the response (its head read)."""
        conn, reused = self._checkout(key)
        try:
            return conn, self._send(conn, request)
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
            conn.close()
            if not reused:
                raise
        except BaseException:
            conn.close()
            raise
        # The server closed an idle kept-alive connection: once more on a new one.
        conn = self._new(key)
        try:
            return conn, self._send(conn, request)
        except BaseException:
            conn.close()
            raise

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            raise httpx.UnsupportedProtocol(f"mtls.httpx.Transport speaks https only, not {request.url.scheme}:")
        key = (self._routes.route(request.url), url_host(request.url.host), 443 if request.url.port is None else request.url.port)
        try:
            conn, response = self._exchange(key, request)
        except TunnelError as e:
            # httpx's own error for a proxy that could not be reached or refused the tunnel.
            raise httpx.ProxyError(str(e), request=request) from e
        except ConnectFailed as f:
            raise as_httpx_error(f.error, request, connecting=True) from f.error
        except Error as e:
            raise as_httpx_error(e, request, connecting=False) from e
        return httpx.Response(
            response.status,
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.getheaders()],
            stream=_ResponseStream(self, key, conn, response),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.encode("latin-1")},
        )

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                c.close()


# httpx.Client(transport=Transport(...), proxy=P): the proxy's transport is ours, through P.
route_client_proxies(httpx.Client, Transport)

__all__ = ["Transport"]

# asyncio: httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(...)), in a module of its own.
from ._httpx_async import AsyncTransport  # noqa: E402
__all__ += ["AsyncTransport"]
