"""The host of a URL as libmtls takes it (private): an IPv6 zone written as RFC 6874 writes it in a
URI, ``[fe80::1%25eth0]`` ("%25" is the percent-encoded "%", then the zone, itself
percent-encoded), becomes the address with its zone, ``fe80::1%eth0``, which is how libmtls (and
the resolver) read an address with a zone. requests (urllib3) decodes it already; httpx and
urllib keep "%25" in the host, which libmtls would read as the zone "25eth0".

As urllib3, and as RFC 6874 section 4 advises user agents, a bare "%" not followed by "25" is
taken as the zone's delimiter (``[fe80::1%eth0]``), which httpx and urllib accept too; an empty
zone (``[fe80::1%]``) is refused by those parsers before it reaches here, and by libmtls."""
import urllib.parse


def url_host(host: str) -> str:
    """`host` (bracketed or bare, possibly followed by ":port") with an RFC 6874 zone decoded."""
    start = host.find("%")
    if start < 0 or ":" not in host[:start]:
        return host  # no zone, or not an IPv6 address
    end = host.find("]", start)
    end = len(host) if end < 0 else end
    zone = host[start + 1:end]
    if zone.startswith("25") and len(zone) > 2:
        zone = urllib.parse.unquote(zone[2:], errors="strict")
    return f"{host[:start]}%{zone}{host[end:]}"


__all__ = ["url_host"]
