"""HTTPS over libmtls for the standard library: :class:`HTTPSConnection` (an
``http.client.HTTPSConnection``) and :class:`HTTPSHandler` (for ``urllib.request``).

    import urllib.request, mtls.http
    opener = urllib.request.build_opener(mtls.http.HTTPSHandler(identity="alice", policy=policy))
    opener.open("https://10.0.0.7:8443/").read()

The identity is an :class:`mtls.Identity`, a store label or a ``pkcs11:`` URI; ``policy`` (an
:class:`mtls.Policy`) judges the server, validated as ``verify_as``. A refused server raises
:class:`mtls.TrustError` with libmtls's reasons.

Proxies: a connection given a tunnel (``set_tunnel``, as urllib's ProxyHandler does for
HTTPS_PROXY) asks its host, an ``http://`` proxy, for a CONNECT tunnel and runs libmtls's TLS
through it for the tunnel's host and port; a proxy that refuses raises OSError with its status."""
import http.client
import socket
import urllib.request
from typing import Any, Optional, Tuple

from ._proxy import HTTPProxy, connect_via
from ._socket import TLSSocket
from ._url import url_host
from .pkcs12 import Identity
from .store import Store
from .tls import IdentityLike, connect, resolve_identity
from .trust import Policy


def timeout_seconds(timeout: Any) -> Optional[float]:
    """A socket-style timeout (None, a number, or socket's "global default") in seconds or None."""
    if timeout is None or timeout is socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
        return None
    return float(timeout)


class HTTPSConnection(http.client.HTTPSConnection):
    """``http.client.HTTPSConnection`` whose TLS is libmtls: the client identity is presented
    and the server judged by ``policy``. Keyword options other than the ones named are
    :class:`mtls.ConnectOptions` fields (``alpn``, ``min_tls``...)."""

    def __init__(self, host: str, port: Optional[int] = None, *, identity: IdentityLike = None,
                 policy: Optional[Policy] = None, verify_as: Optional[str] = None, store: Optional[Store] = None,
                 pin: Any = None, timeout: Any = socket._GLOBAL_DEFAULT_TIMEOUT,  # type: ignore[attr-defined]
                 source_address: Optional[Tuple[str, int]] = None, blocksize: int = 8192, **options: Any) -> None:
        # http.client.HTTPConnection's constructor, not HTTPSConnection's (no ssl context to make).
        http.client.HTTPConnection.__init__(self, host, port, timeout, source_address, blocksize)
        self.identity: Optional[Identity] = resolve_identity(identity, store, pin)
        self.policy = policy
        self.verify_as = verify_as
        self._options = options

    def connect(self) -> None:
        t = timeout_seconds(self.timeout)
        options = dict(self._options)
        if t is not None:
            options.setdefault("connect_timeout", t)
            options.setdefault("handshake_timeout", t)
            options.setdefault("io_timeout", t)
        if self._tunnel_host:  # type: ignore[attr-defined]
            # host:port is the proxy; the tunnel's host and port are the server libmtls judges.
            # (Python 3.12 puts a Host header among the tunnel's headers: CONNECT sends its own.)
            headers = {k: v for k, v in self._tunnel_headers.items()  # type: ignore[attr-defined]
                       if k.lower() != "host"}
            proxy = HTTPProxy(self.host, self.port, tuple(headers.items()))
            conn = connect_via(proxy, self._tunnel_host, self._tunnel_port,  # type: ignore[attr-defined]
                               timeout=options.pop("connect_timeout", None), identity=self.identity,
                               policy=self.policy, verify_as=self.verify_as, **options)
        else:
            conn = connect(self.host, self.port, identity=self.identity, policy=self.policy,
                           verify_as=self.verify_as, **options)
        self.sock = TLSSocket(conn)

    @property
    def connection(self) -> Any:
        """The mtls.Connection under the current socket (None before connect)."""
        return self.sock.connection if isinstance(self.sock, TLSSocket) else None

    @property
    def policy_changed(self) -> bool:
        """Whether the policy that judged the server changed since the connection was made
        (mtls.Connection.policy_changed): a pool drops such an idle connection."""
        c = self.connection
        return c is not None and c.policy_changed


class HTTPSHandler(urllib.request.HTTPSHandler):
    """A ``urllib.request`` handler for https: URLs through :class:`HTTPSConnection`; takes the
    same keywords."""

    def __init__(self, debuglevel: int = 0, **connection_options: Any) -> None:
        urllib.request.AbstractHTTPHandler.__init__(self, debuglevel)
        ident = connection_options.pop("identity", None)
        store, pin = connection_options.pop("store", None), connection_options.pop("pin", None)
        connection_options["identity"] = resolve_identity(ident, store, pin)
        self._options = connection_options

    def https_open(self, req: urllib.request.Request) -> Any:
        # req.host is the URL's host[:port]: an RFC 6874 zone ("[fe80::1%25eth0]") is decoded.
        def connection(host: str, **kw: Any) -> HTTPSConnection:
            return HTTPSConnection(url_host(host), **kw)
        return self.do_open(connection, req, **self._options)


__all__ = ["HTTPSConnection", "HTTPSHandler"]
