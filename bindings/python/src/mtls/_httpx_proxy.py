"""Proxy routing for the httpx transports (private; used by mtls.httpx.Transport and
mtls.httpx.AsyncTransport, so that the blocking and the asyncio transport choose proxies the same
way): a transport's own proxy, else the environment's proxies as httpx's client reads them, and
httpx's clients made to build their proxy transports from ours."""
from typing import Any, List, Optional, Tuple, Union

import httpx
from httpx._utils import URLPattern, get_environment_proxies

from ._proxy import HTTPProxy, UnsupportedProxy

# The proxy for a request: none, an http proxy, or why the one configured cannot be used.
Route = Union[None, HTTPProxy, UnsupportedProxy]


def http_proxy(proxy: Any) -> HTTPProxy:
    """An HTTPProxy from what httpx takes as a proxy (a URL string, an httpx.URL or an
    httpx.Proxy with its auth and headers); UnsupportedProxy for anything but http://."""
    if isinstance(proxy, HTTPProxy):
        return proxy
    if not isinstance(proxy, httpx.Proxy):
        proxy = httpx.Proxy(url=proxy)
    headers = {k: v for k, v in proxy.headers.items()}
    return HTTPProxy.from_url(str(proxy.url), headers=headers, auth=proxy.auth)


def environment_routes() -> List[Tuple[Any, Route]]:
    """The proxies of the environment as httpx's client reads them (its get_environment_proxies
    and URLPattern, most specific pattern first): NO_PROXY entries map to None."""
    routes: List[Tuple[Any, Route]] = []
    for key, url in get_environment_proxies().items():
        route: Route = None
        if url is not None:
            try:
                route = http_proxy(url)
            except (UnsupportedProxy, ValueError) as e:
                route = e if isinstance(e, UnsupportedProxy) else UnsupportedProxy(str(e))
        routes.append((URLPattern(key), route))
    return sorted(routes, key=lambda r: r[0])


class ProxyRoutes:
    """Where a transport sends its requests: through `proxy` (an http:// URL, an httpx.Proxy or
    an HTTPProxy) for every request; without it and with `trust_env`, through the environment's
    proxy for the URL (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY: httpx ignores them once a
    client is given a transport, so the transport reads them); otherwise directly. `owner` names
    the transport in errors. An https:// or SOCKS `proxy` is a ValueError here."""

    def __init__(self, proxy: Any, trust_env: bool, owner: str) -> None:
        try:
            self.proxy: Optional[HTTPProxy] = None if proxy is None else http_proxy(proxy)
        except UnsupportedProxy as e:
            raise ValueError(f"{owner} {e}") from e
        self._owner = owner
        self._routes = environment_routes() if proxy is None and trust_env else []
        #: True when every request goes directly (no proxy given, none from the environment):
        #: route() is then None for any URL, and a caller may skip building the URL it asks about.
        self.direct = self.proxy is None and not self._routes

    def route(self, url: httpx.URL) -> Optional[HTTPProxy]:
        """The proxy for a request to `url` (None: direct), chosen as httpx's client chooses among
        its mounts; an unusable proxy from the environment raises httpx.ProxyError."""
        if self.proxy is not None:
            return self.proxy
        for pattern, route in self._routes:
            if pattern.matches(url):
                if isinstance(route, UnsupportedProxy):
                    raise httpx.ProxyError(f"{self._owner} {route} (from the environment)")
                return route
        return None


def route_client_proxies(client: type, transport: type) -> None:
    """`client(transport=ours, proxy=P)` (httpx.Client or httpx.AsyncClient) mounts a transport
    that httpx makes itself for P, with its own TLS: the client's _init_proxy_transport builds it.
    For a client whose transport is a `transport` (ours), build ours through P instead, with
    ``_through(P)``; other clients are left alone."""
    original = client.__dict__.get("_init_proxy_transport")
    if original is None or getattr(original, "_mtls_routed", False):
        return

    def _init_proxy_transport(self: Any, proxy: Any, *args: Any, **kwargs: Any) -> Any:
        ours = getattr(self, "_transport", None)
        if isinstance(ours, transport):
            return ours._through(proxy)
        return original(self, proxy, *args, **kwargs)

    _init_proxy_transport._mtls_routed = True  # type: ignore[attr-defined]
    setattr(client, "_init_proxy_transport", _init_proxy_transport)
