"""RFC 6874: an IPv6 zone in a URL is written "%25" then the zone (`https://[::1%251]:P/`), and is
decoded to the zone wherever libmtls takes a URL: `mtls connect https://...`, and the requests,
httpx (sync and async) and urllib adapters. httpx and urllib keep "%25" in the host; libmtls used
to read it as the zone "251" (no such interface: the connection failed). A bare "%" (`[::1%1]`)
is accepted as requests, httpx and urllib accept it (RFC 6874 section 4), and in `HOST:PORT`
targets, which are not URLs, "%" is the zone's delimiter as before. The server is openssl
s_server on [::1]; glibc takes an interface name only after a link-local address, so ::1 is
written with the loopback interface's index."""
import asyncio
import json
import socket
import urllib.request

import pytest

import mtls
import mtls.http
import mtls.httpx
import mtls.requests
from conftest import run_cli
from test_tls import peers, pki  # noqa: F401 (fixtures)
from test_trust_peer import s_server_v6

LO = socket.if_nametoindex("lo")


def policy(pki):
    return mtls.Policy(anchors=[mtls.Certificate.load(pki("root.pem"))], anchors_only=True, verify_as="server.test")


def identity(pki):
    with open(pki("client-a-chain.pem")) as chain, open(pki("client-a.key")) as key:
        return mtls.Identity.from_pem(chain.read(), key.read())


@pytest.fixture
def v6(pki, peers):  # noqa: F811
    return s_server_v6(pki, peers)


@pytest.mark.parametrize("zone", [f"%25{LO}", f"%{LO}"], ids=["rfc6874", "bare"])
def test_python_adapters_decode_the_url_zone(pki, v6, zone):
    url = f"https://[::1{zone}]:{v6}/"
    import requests
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity=identity(pki), policy=policy(pki)))
        assert s.get(url, timeout=10).status_code == 200
    import httpx
    with httpx.Client(transport=mtls.httpx.Transport(identity=identity(pki), policy=policy(pki))) as c:
        assert c.get(url, timeout=10).status_code == 200

    async def fetch():
        async with httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(identity=identity(pki), policy=policy(pki))) as c:
            return (await c.get(url, timeout=10)).status_code
    assert asyncio.run(fetch()) == 200
    opener = urllib.request.build_opener(mtls.http.HTTPSHandler(identity=identity(pki), policy=policy(pki)))
    with opener.open(url, timeout=10) as r:
        assert r.status == 200


def test_cli_connect_takes_a_url_with_an_rfc6874_zone(pki, v6, tmp_path):
    args = ["--identity", pki("client-a.p12"), "--password-file", pki("password.txt"), "--anchor", pki("root.pem"), "--anchors-only", "--verify-as", "server.test", "--json"]
    for target in (f"https://[::1%25{LO}]:{v6}/", f"[::1%{LO}]:{v6}"):
        r = run_cli("connect", target, *args)
        out = json.loads(r.stdout)
        assert out["connected"], (target, r.stderr, out)
    # A URL's zone must be percent-encoded: "%" then something else than "25" is the bare form,
    # accepted as Python's URL parsers accept it; an empty zone is refused.
    r = run_cli("connect", f"https://[::1%]:{v6}/", *args)
    assert r.returncode != 0
