"""RFC 6874: the host the URL adapters hand to libmtls has its IPv6 zone decoded ("%25eth0" is the
zone "eth0"). httpx and urllib keep "%25" in a URL's host; requests (urllib3) decodes it itself.
A bare "%" is accepted as these parsers accept it. (The e2e test Tests/e2e/test_url_zones.py
connects through every adapter to a server on [::1].)"""
import urllib.request

import httpx
import pytest

import mtls.http
import mtls.httpx
from mtls._url import url_host


@pytest.mark.parametrize("given, expected", [
    ("fe80::1%25eth0", "fe80::1%eth0"), ("[fe80::1%25eth0]:8443", "[fe80::1%eth0]:8443"), ("::1%251", "::1%1"),
    ("fe80::1%25en%30", "fe80::1%en0"), ("fe80::1%eth0", "fe80::1%eth0"), ("fe80::1%25", "fe80::1%25"),
    ("server.test", "server.test"), ("10.0.0.1", "10.0.0.1"), ("[::1]:443", "[::1]:443")])
def test_url_host(given, expected):
    assert url_host(given) == expected


class Reached(Exception):
    pass


def test_urllib_and_httpx_hand_libmtls_the_decoded_zone(monkeypatch):
    hosts = []

    def connect(host, port, **options):
        hosts.append((host, port))
        raise Reached()
    monkeypatch.setattr(mtls.http, "connect", connect)
    opener = urllib.request.build_opener(mtls.http.HTTPSHandler())
    with pytest.raises(Exception):
        opener.open("https://[fe80::1%25eth0]:8443/", timeout=5)
    with httpx.Client(transport=mtls.httpx.Transport()) as c:
        with pytest.raises(Reached):
            c.get("https://[fe80::1%25eth0]:8443/")
    assert hosts == [("fe80::1%eth0", 8443), ("fe80::1%eth0", 8443)]
