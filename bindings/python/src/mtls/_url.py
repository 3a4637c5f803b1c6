"""URLs and hosts as libmtls reads them (private), through the core's one URL parser
(``mtls_url_host_port``), so that a zone is decoded, and a malformed one refused, exactly as
``mtls connect``, the ACME and EST clients and the revocation fetcher do; and through the core's
one ``host[:port]`` splitter (``mtls_host_port``), so that brackets, a bare IPv6 literal and a
port are read exactly as ``mtls connect HOST:PORT``, ``mtls verify --host`` and host rules read
them. Nothing here takes a host apart itself.

An IPv6 zone written as RFC 6874 writes it in a URI, ``[fe80::1%25eth0]`` ("%25" is the
percent-encoded "%", then the zone, itself percent-encoded), becomes the address with its zone,
``fe80::1%eth0``, which is how libmtls (and the resolver) read an address with a zone. requests
(urllib3) decodes it already; httpx and urllib keep "%25" in the host, which libmtls would read as
the zone "25eth0". As urllib3, and as RFC 6874 section 4 advises user agents, a bare "%" not
followed by "25" is taken as the zone's delimiter (``[fe80::1%eth0]``); an empty zone or a broken
percent-encoding is refused (:class:`mtls.errors.InvalidArgument`)."""
import ctypes
import functools
from typing import Optional, Tuple
from urllib.parse import urlsplit

from ._lib import c_void_pp, fn, lib, take_string
from .errors import InvalidArgument, check

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


# int mtls_host_port(const char *text, char **host, uint16_t *port)
fn("mtls_host_port", ctypes.c_int, ctypes.c_char_p, c_void_pp, ctypes.POINTER(ctypes.c_uint16))
# int mtls_host_only(const char *text, char **host)
fn("mtls_host_only", ctypes.c_int, ctypes.c_char_p, c_void_pp)


# The core's reading of a text never changes, and one connection asks for it several times (the
# adapters' origin, endpoint's host and port, Connection.wrap): the answers (not the refusals,
# which raise each time) are remembered, so a new connection to a known host costs no C call here.
@functools.lru_cache(maxsize=256)
def host_port(text: str) -> Tuple[str, Optional[int]]:
    """`text` (``host``, ``host:port``, ``[v6]``, ``[v6]:port``, or a bare IPv6 literal such as
    ``::1`` or ``fe80::1%eth0``) split by the core: the host without brackets, and the port or
    None. A malformed bracket or port (0, above 65535, not digits, empty) or an empty host raises
    :class:`mtls.errors.InvalidArgument`."""
    if "\0" in text:  # C would read up to it: "h\0:443" would be the host "h"
        raise InvalidArgument(f"a host holds no NUL character: {text!r}", InvalidArgument.code)
    out, port = ctypes.c_void_p(), ctypes.c_uint16()
    check(lib.mtls_host_port(text.encode("utf-8"), ctypes.byref(out), ctypes.byref(port)))
    host = take_string(out)
    assert host is not None  # the core sets it on success
    return host, (port.value or None)


@functools.lru_cache(maxsize=256)
def host_only(host: str) -> str:
    """A host given apart from its port (``Connection.connect(host, port)``, asyncio, the HTTP
    adapters' origin) as the core reads it (``mtls_host_only``, what ``mtls_conn_connect`` does
    with its host): brackets off (``[::1]`` is ``::1``), a bare IPv6 literal or a zone kept. A host
    that carries a port of its own (``[::1]:443``, ``server.test:443``) raises
    :class:`mtls.errors.InvalidArgument`: the port is given apart."""
    if "\0" in host:  # C would read up to it
        raise InvalidArgument(f"a host holds no NUL character: {host!r}", InvalidArgument.code)
    out = ctypes.c_void_p()
    check(lib.mtls_host_only(host.encode("utf-8"), ctypes.byref(out)))
    bare = take_string(out)
    assert bare is not None  # the core sets it on success
    return bare


def endpoint(host: str, port: int) -> Tuple[str, int]:
    """A host and a port given apart (``Connection.connect(host, port)``, asyncio), both read by
    the core as ``mtls connect HOST:PORT`` reads them: the host as :func:`host_only` gives it, the
    port 1 to 65535 (ctypes would silently wrap 99999 to 34463). Raises
    :class:`mtls.errors.InvalidArgument` otherwise."""
    bare = host_only(host)
    checked = host_port(f"{bracketed(bare)}:{int(port)}")[1]
    assert checked is not None  # a port was written, so the core read one or refused it
    return bare, checked


def listen_endpoint(address: Optional[str], port: int) -> Tuple[Optional[str], int]:
    """A listener's address (None: as the C layer reads NULL) and port (0: an ephemeral one),
    read by the core: an IPv6 address's brackets off, a port outside 0 to 65535 refused with
    :class:`mtls.errors.InvalidArgument` (ctypes would silently wrap 99999 to 34463)."""
    bare = host_only(address) if address else address
    if int(port) != 0:
        host_port(f"{bracketed(bare or '0.0.0.0')}:{int(port)}")  # the core's port rule
    return bare, int(port)


def url_origin(url: str) -> Tuple[str, int]:
    """The host and port of an ``http://`` or ``https://`` URL read by the core's URL parser,
    only its authority (a long path or query is no concern here) and without its user
    information (which the core does not take in a URL, and requests and proxy URLs allow)."""
    parts = urlsplit(url)
    return url_host_port(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/")


def bracketed(host: str) -> str:
    """`host` as a URL, CONNECT and Host write it: an IPv6 literal in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def url_host(host: str) -> str:
    """A URL's `host` (bracketed or bare, possibly followed by ":port", as urllib and httpx give
    it) with an RFC 6874 zone decoded by the core; returned in the form given (brackets and port
    kept)."""
    if "%" not in host:
        return host  # no zone to decode
    bare, port = host_port(host)
    if ":" in bare:  # an IPv6 literal: its zone is read as the core reads a URL's
        bare = url_host_port(f"https://{bracketed(bare)}/")[0]
    if port is not None or host.startswith("["):
        return f"{bracketed(bare)}" + (f":{port}" if port is not None else "")
    return bare


__all__ = ["bracketed", "endpoint", "host_only", "host_port", "listen_endpoint", "url_host", "url_host_port",
           "url_origin"]
