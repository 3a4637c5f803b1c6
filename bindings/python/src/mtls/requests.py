"""requests over libmtls: a transport adapter to mount on a ``requests.Session``.

    import requests, mtls, mtls.requests
    policy = mtls.Policy(anchors=[mtls.Certificate.load("root.pem")], verify_as="api.internal")
    s = requests.Session()
    s.mount("https://", mtls.requests.Adapter(identity="alice", policy=policy))
    s.get("https://10.0.0.7:8443/status")

Connections are pooled and kept alive per host (urllib3's pool; ``pool_connections``,
``pool_maxsize`` as for ``requests.adapters.HTTPAdapter``); redirects, chunked bodies and
streaming work as with requests' own adapter. The identity is an :class:`mtls.Identity`, a store
label or a ``pkcs11:`` URI (opened once, shared by the pooled connections). TLS is libmtls's
alone: the server is judged by ``policy`` and the identity is the adapter's, so requests' ``cert=``
is refused (:class:`mtls.InvalidArgument`, naming ``identity=``), as is ``verify=False``
(libmtls never stops verifying: name what to trust in ``policy``), while ``verify=`` with a CA
bundle path is not used and says so with an :class:`IgnoredVerifyWarning` (the policy's anchors
decide; the bundle requests takes from ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` is not used
either, without a warning: it is the machine's setting, not the program's). Needs the ``requests`` extra
(``pip install mtls[requests]``).

Failures are requests' own exceptions, so existing ``except`` and retry code catches them: a
refused server, a refused client certificate or a failed handshake raise
``requests.exceptions.SSLError``, a TCP connection that cannot be made
``requests.exceptions.ConnectionError``, a connect or handshake timeout
``requests.exceptions.ConnectTimeout`` (a ``requests.exceptions.Timeout``). Each is also of
libmtls's class, with its ``.code``, ``.name`` and ``.message``: a refused server is an
:class:`mtls.TrustError` with libmtls's reasons.

Proxies: requests chooses the proxy as usual (``proxies=``, and with ``trust_env`` HTTPS_PROXY,
ALL_PROXY and NO_PROXY). For an https:// URL through an ``http://`` proxy the adapter asks the
proxy for a CONNECT tunnel (with Proxy-Authorization from the proxy URL's user information) and
runs libmtls's TLS through it, for the target's host, port, identity and policy; connections are
kept alive per proxy and target. A plain http:// URL through a proxy (when the adapter is also
mounted for http://) is forwarded by requests as usual: no TLS is involved. An ``https://`` or
SOCKS proxy raises ``requests.exceptions.InvalidProxyURL``; a proxy that cannot be reached or
refuses the tunnel raises ``requests.exceptions.ProxyError`` with its status."""
import os
import warnings
from typing import Any, Dict, Optional

from requests.adapters import DEFAULT_POOLBLOCK, DEFAULT_POOLSIZE, DEFAULT_RETRIES, HTTPAdapter
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import InvalidProxyURL, SSLError
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ProxyError
from urllib3.poolmanager import SSL_KEYWORDS, PoolManager, ProxyManager

from ._proxy import HTTPProxy, TunnelError, UnsupportedProxy, connect_via
from ._socket import TLSSocket
from ._url import url_host
from .errors import TLS_FAILURES, Closed, ConnectError, Error, InvalidArgument, Timeout, as_http_error
from .store import Store
from .tls import IdentityLike, connect, resolve_identity
from .trust import Policy


class IgnoredVerifyWarning(UserWarning):
    """requests' ``verify=`` named a CA bundle that :class:`Adapter` does not use: the server is
    judged by the adapter's policy."""


class _ConnectFailed(Exception):
    """A libmtls failure while connecting, carried past urllib3 (which would wrap an OSError in
    its own errors and retry) to Adapter.send, which raises it as requests' exception."""

    def __init__(self, error: Error) -> None:
        super().__init__(str(error))
        self.error = error


def _as_requests_error(e: Error, request: Any) -> BaseException:
    """A TLS failure while connecting as requests raises it (``SSLError``, and still of
    libmtls's class); other failures as they are. (Refused connections and timeouts go through
    urllib3's own errors, and its retries: see Adapter.send.)"""
    if isinstance(e, TLS_FAILURES):
        return as_http_error(e, SSLError, request=request)
    return e


class _MTLSHTTPConnection(HTTPConnection):
    """urllib3's HTTP connection over a libmtls TLS connection."""
    default_port = 443  # type: ignore[assignment]

    def __init__(self, *args: Any, mtls_config: Optional[Dict[str, Any]] = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._mtls = dict(mtls_config or {})

    def connect(self) -> None:
        try:
            self._connect()
        except (ConnectError, Closed) as e:
            # urllib3's own errors for these, so its Retry(connect=...) retries them as usual;
            # Adapter.send raises the libmtls error they carry as requests' exception.
            raise NewConnectionError(self, str(e)) from e
        except Timeout as e:
            raise ConnectTimeoutError(self, str(e)) from e
        except Error as e:
            raise _ConnectFailed(e) from None

    def _connect(self) -> None:
        if self._tunnel_host:
            # urllib3's own tunnel (set_tunnel) is never asked for: the adapter's proxy pools tunnel themselves.
            raise NotImplementedError("mtls.requests.Adapter tunnels through proxies itself, not with set_tunnel")
        options = dict(self._mtls)
        proxy: Optional[HTTPProxy] = options.pop("_proxy", None)
        t = self.timeout  # seconds, None, or urllib3's "default" sentinel
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            options.setdefault("connect_timeout", float(t))
            options.setdefault("handshake_timeout", float(t))
        if proxy is None:
            self.sock = TLSSocket(connect(url_host(self.host), self.port, **options))
        else:
            # The TCP connection is the proxy's: the connect timeout bounds it and the CONNECT answer.
            timeout = options.pop("connect_timeout", None)
            try:
                conn = connect_via(proxy, url_host(self.host), self.port, timeout=timeout, **options)
            except TunnelError as e:
                # urllib3's own error for a failed proxy: requests raises it as ProxyError.
                raise ProxyError(str(e), e) from e
            self.sock = TLSSocket(conn)
        self._has_connected_to_proxy = proxy is not None
        self.is_verified = True  # libmtls's policy judged the server, or the connection would not exist

    @property
    def is_connected(self) -> bool:
        # urllib3 drops a pooled connection that is not connected: also one made under a policy
        # that has changed since (replaced, a followed file reloaded; Connection.policy_changed).
        if isinstance(self.sock, TLSSocket) and self.sock.connection.policy_changed:
            return False
        return bool(super().is_connected)


class _MTLSConnectionPool(HTTPConnectionPool):
    scheme = "https"
    ConnectionCls = _MTLSHTTPConnection  # type: ignore[assignment]

    def __init__(self, host: str, port: Optional[int] = None, *, mtls_config: Dict[str, Any], **kw: Any) -> None:
        for k in SSL_KEYWORDS:
            kw.pop(k, None)
        super().__init__(host, port, **kw)
        self.conn_kw["mtls_config"] = mtls_config

    def _validate_conn(self, conn: Any) -> None:
        super()._validate_conn(conn)
        if conn.is_closed:
            conn.connect()  # connect (and hand a refused server's TrustError) before the request


class _MTLSPoolManager(PoolManager):
    def __init__(self, mtls_config: Dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self._mtls = mtls_config

    def _new_pool(self, scheme: str, host: str, port: int, request_context: Optional[Dict[str, Any]] = None) -> Any:
        if scheme != "https":
            return super()._new_pool(scheme, host, port, request_context)
        ctx = dict(request_context if request_context is not None else self.connection_pool_kw)
        for k in ("scheme", "host", "port"):
            ctx.pop(k, None)
        return _MTLSConnectionPool(host, port, mtls_config=self._mtls, **ctx)


class _MTLSProxyManager(_MTLSPoolManager):
    """What requests asks for one proxy: libmtls connections through the proxy's CONNECT tunnel
    for https targets (one pool per target, so connections are kept per proxy and target), and
    urllib3's plain forwarding through the proxy for http targets (no TLS at all: an https proxy
    never gets here)."""

    def __init__(self, proxy_url: str, proxy: HTTPProxy, mtls_config: Dict[str, Any], proxy_headers: Dict[str, str],
                 **kw: Any) -> None:
        super().__init__(dict(mtls_config, _proxy=proxy), **kw)
        self._forward = ProxyManager(proxy_url, proxy_headers=proxy_headers, **kw)

    def connection_from_host(self, host: Optional[str], port: Optional[int] = None, scheme: Optional[str] = "http",
                             pool_kwargs: Optional[Dict[str, Any]] = None) -> Any:
        if scheme != "https":
            return self._forward.connection_from_host(host, port, scheme, pool_kwargs=pool_kwargs)
        return super().connection_from_host(host, port, scheme, pool_kwargs=pool_kwargs)

    def clear(self) -> None:
        super().clear()
        self._forward.clear()


class Adapter(HTTPAdapter):
    """A ``requests`` transport adapter whose TLS is libmtls (mount it for ``https://``).
    Keyword options other than the ones named are :class:`mtls.ConnectOptions` fields."""

    def __init__(self, identity: IdentityLike = None, policy: Optional[Policy] = None,
                 verify_as: Optional[str] = None, *, store: Optional[Store] = None, pin: Any = None,
                 pool_connections: int = DEFAULT_POOLSIZE, pool_maxsize: int = DEFAULT_POOLSIZE,
                 max_retries: Any = DEFAULT_RETRIES, pool_block: bool = DEFAULT_POOLBLOCK, **options: Any) -> None:
        self.identity = resolve_identity(identity, store, pin)
        self.policy = policy
        self.verify_as = verify_as
        self._mtls = dict(options, identity=self.identity, policy=policy, verify_as=verify_as)
        super().__init__(pool_connections=pool_connections, pool_maxsize=pool_maxsize, max_retries=max_retries,
                         pool_block=pool_block)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = DEFAULT_POOLBLOCK,
                         **pool_kwargs: Any) -> None:
        self._pool_connections = connections
        self._pool_maxsize = maxsize
        self._pool_block = block
        self.poolmanager = _MTLSPoolManager(self._mtls, num_pools=connections, maxsize=maxsize, block=block,
                                            **pool_kwargs)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """The pools for one proxy URL (requests chose it, with its own rules for ``proxies``,
        ``trust_env`` and NO_PROXY): https targets are tunneled with CONNECT and run libmtls's
        TLS; an https:// or SOCKS proxy is refused (InvalidProxyURL), never handed to urllib3's
        own TLS or SOCKS support."""
        manager = self.proxy_manager.get(proxy)
        if manager is None:
            headers = self.proxy_headers(proxy)
            try:
                parsed = HTTPProxy.from_url(proxy, headers=headers)
            except UnsupportedProxy as e:
                raise InvalidProxyURL(f"mtls.requests.Adapter {e}") from e
            manager = self.proxy_manager[proxy] = _MTLSProxyManager(
                proxy, parsed, self._mtls, headers, num_pools=self._pool_connections, maxsize=self._pool_maxsize,
                block=self._pool_block, **proxy_kwargs)
        return manager

    def send(self, request: Any, *args: Any, **kw: Any) -> Any:
        """requests' send; a libmtls failure while connecting is raised as requests' own
        exception (see the module's text)."""
        try:
            return super().send(request, *args, **kw)
        except _ConnectFailed as f:
            raise _as_requests_error(f.error, request) from f.error
        except RequestsConnectionError as e:
            # A refused or timed-out connection, after urllib3's retries: requests' exception
            # (ConnectionError, ConnectTimeout) carrying libmtls's error it came from.
            reason = getattr(e.args[0] if e.args else None, "reason", None)
            cause = getattr(reason, "__cause__", None)
            if isinstance(cause, Error) and not isinstance(e, Error):
                raise as_http_error(cause, type(e), request=request) from e
            raise

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        """libmtls presents the identity and judges the server: requests' ``cert=`` and
        ``verify=False`` are refused, a ``verify=`` CA bundle is not used (a warning says so)."""
        if cert is not None:
            raise InvalidArgument("mtls.requests.Adapter presents its own identity: requests' cert= is not used; "
                                  "pass identity= (a file's Identity, a store label or a pkcs11: URI) to the Adapter",
                                  InvalidArgument.code)
        if verify is False:
            raise InvalidArgument("mtls.requests.Adapter always verifies the server by its policy: verify=False "
                                  "is not honoured; name what to trust in policy= (mtls.Policy(anchors=...))",
                                  InvalidArgument.code)
        # requests itself sets verify= from REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE (trust_env): a
        # setting of the machine, not of this program, which says nothing to warn about.
        if verify is True or verify is None:
            return  # each request asks: the common answer reads nothing
        if verify not in {os.environ.get("REQUESTS_CA_BUNDLE"), os.environ.get("CURL_CA_BUNDLE")} - {None, ""}:
            warnings.warn(f"verify={verify!r} is not used by mtls.requests.Adapter: the server is judged by "
                          "the adapter's policy (mtls.Policy(anchors=...))", IgnoredVerifyWarning, stacklevel=2)

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("mtls.requests.Adapter holds libmtls handles and cannot be pickled")


__all__ = ["Adapter", "IgnoredVerifyWarning"]
