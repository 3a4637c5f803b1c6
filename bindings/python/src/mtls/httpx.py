"""httpx over libmtls: a transport for ``httpx.Client(transport=...)``.

    import httpx, mtls, mtls.httpx
    policy = mtls.Policy(anchors=[mtls.Certificate.load("root.pem")], verify_as="api.internal")
    with httpx.Client(transport=mtls.httpx.Transport(identity="alice", policy=policy)) as client:
        client.get("https://10.0.0.7:8443/status")

HTTP/1.1 with keep-alive: idle connections are kept per host (up to ``max_keepalive`` each) and
reused; request bodies of unknown length go chunked; responses stream. The identity is an
:class:`mtls.Identity`, a store label or a ``pkcs11:`` URI; ``policy`` judges the server and a
refused one raises :class:`mtls.TrustError` with libmtls's reasons. Needs the ``httpx`` extra."""
import http.client
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import httpx

from .http import HTTPSConnection
from .store import Store
from .tls import IdentityLike, resolve_identity
from .trust import Policy

_Key = Tuple[str, int]


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
    each read or write."""

    def __init__(self, identity: IdentityLike = None, policy: Optional[Policy] = None,
                 verify_as: Optional[str] = None, *, store: Optional[Store] = None, pin: Any = None,
                 max_keepalive: int = 10, timeout: Optional[float] = None, **options: Any) -> None:
        self.identity = resolve_identity(identity, store, pin)
        self.policy = policy
        self.verify_as = verify_as
        self._options = options
        self._timeout = timeout
        self._max_keepalive = max_keepalive
        self._idle: Dict[_Key, List[HTTPSConnection]] = {}
        self._lock = threading.Lock()

    def _new(self, key: _Key) -> HTTPSConnection:
        kw: Dict[str, Any] = dict(self._options)
        if self._timeout is not None:
            kw["timeout"] = self._timeout
        return HTTPSConnection(key[0], key[1], identity=self.identity, policy=self.policy, verify_as=self.verify_as,
                               **kw)

    def _checkout(self, key: _Key) -> Tuple[HTTPSConnection, bool]:
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop(), True
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

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            raise httpx.UnsupportedProtocol(f"mtls.httpx.Transport speaks https only, not {request.url.scheme}:")
        key = (request.url.host, request.url.port or 443)
        conn, reused = self._checkout(key)
        try:
            response = self._send(conn, request)
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
            conn.close()
            if not reused:
                raise
            # The server closed an idle kept-alive connection: once more on a new one.
            conn = self._new(key)
            try:
                response = self._send(conn, request)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
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


__all__ = ["Transport"]

# asyncio: httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(...)), in a module of its own.
from ._httpx_async import AsyncTransport  # noqa: E402
__all__ += ["AsyncTransport"]
