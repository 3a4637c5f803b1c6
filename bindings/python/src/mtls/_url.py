"""URLs as libmtls reads them (private), through the core's one URL parser
(``mtls_url_host_port``), so that a zone is decoded, and a malformed one refused, exactly as
``mtls connect``, the ACME and EST clients and the revocation fetcher do.

An IPv6 zone written as RFC 6874 writes it in a URI, ``[fe80::1%25eth0]`` ("%25" is the
percent-encoded "%", then the zone, itself percent-encoded), becomes the address with its zone,
``fe80::1%eth0``, which is how libmtls (and the resolver) read an address with a zone. requests
(urllib3) decodes it already; httpx and urllib keep "%25" in the host, which libmtls would read as
the zone "25eth0". As urllib3, and as RFC 6874 section 4 advises user agents, a bare "%" not
followed by "25" is taken as the zone's delimiter (``[fe80::1%eth0]``); an empty zone or a broken
percent-encoding is refused (:class:`mtls.errors.InvalidArgument`)."""
import ctypes
from typing import Tuple

from ._lib import c_void_pp, fn, lib, take_string
from .errors import check

# int mtls_url_host_port(const char *url, char **host, uint16_t *port)
fn("mtls_url_host_port", ctypes.c_int, ctypes.c_char_p, c_void_pp, ctypes.POINTER(ctypes.c_uint16))


def url_host_port(url: str) -> Tuple[str, int]:
    """The host (an IPv6 literal without brackets, its zone decoded) and port (80 or 443 by
    default) of an ``http://`` or ``https://`` URL without user information, read by the core."""
    out, port = ctypes.c_void_p(), ctypes.c_uint16()
    check(lib.mtls_url_host_port(url.encode("utf-8"), ctypes.byref(out), ctypes.byref(port)))
    host = take_string(out)
    assert host is not None  # the core sets it on success
    return host, port.value


def url_host(host: str) -> str:
    """`host` (bracketed or bare, possibly followed by ":port") with an RFC 6874 zone decoded."""
    start = host.find("%")
    if start < 0 or ":" not in host[:start]:
        return host  # no zone, or not an IPv6 address
    if host.startswith("["):
        close = host.find("]")
        inner, rest = (host[1:], "") if close < 0 else (host[1:close], host[close + 1:])
        return f"[{url_host_port(f'https://[{inner}]/')[0]}]{rest}"
    return url_host_port(f"https://[{host}]/")[0]


__all__ = ["url_host", "url_host_port"]
