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
import mtls.asyncio
import mtls.errors
import mtls.http
import mtls.httpx
import mtls.requests
from conftest import run_cli
from test_tls import peers, pki  # noqa: F401 (fixtures)
from test_trust_peer import s_server_v6

LO = socket.if_nametoindex("lo")


WRONG_PIN = "sha256/" + "A" * 43 + "="


def policy(pki, rules=()):
    return mtls.Policy(anchors=[mtls.Certificate.load(pki("root.pem"))], anchors_only=True, verify_as="server.test",
                       host_rules=list(rules))


def identity(pki):
    with open(pki("client-a-chain.pem")) as chain, open(pki("client-a.key")) as key:
        return mtls.Identity.from_pem(chain.read(), key.read())


@pytest.fixture
def v6(pki, peers):  # noqa: F811
    return s_server_v6(pki, peers)


def fetchers(pki, pol):
    """GET through each adapter: requests, httpx, httpx async, urllib."""
    import httpx
    import requests

    def with_requests(url):
        with requests.Session() as s:
            s.mount("https://", mtls.requests.Adapter(identity=identity(pki), policy=pol))
            return s.get(url, timeout=10).status_code

    def with_httpx(url):
        with httpx.Client(transport=mtls.httpx.Transport(identity=identity(pki), policy=pol)) as c:
            return c.get(url, timeout=10).status_code

    def with_httpx_async(url):
        async def fetch():
            async with httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(identity=identity(pki), policy=pol)) as c:
                return (await c.get(url, timeout=10)).status_code
        return asyncio.run(fetch())

    def with_urllib(url):
        opener = urllib.request.build_opener(mtls.http.HTTPSHandler(identity=identity(pki), policy=pol))
        with opener.open(url, timeout=10) as r:
            return r.status
    return {"requests": with_requests, "httpx": with_httpx, "httpx async": with_httpx_async, "urllib": with_urllib}


@pytest.mark.parametrize("zone", [f"%25{LO}", f"%{LO}"], ids=["rfc6874", "bare"])
def test_python_adapters_decode_the_url_zone(pki, v6, zone):
    """The URL reaches ::1 on the loopback link, and the rule that names that link applies:
    with "%25" kept (httpx, urllib before), the zone read was "25<n>", which is no link, so the
    link's rule (pins the chain does not carry) was skipped and the server trusted."""
    url = f"https://[::1{zone}]:{v6}/"
    for name, get in fetchers(pki, policy(pki)).items():
        assert get(url) == 200, name
    link_rule = policy(pki, [{"host": f"::1%{LO}", "pins": [WRONG_PIN]}])
    for name, get in fetchers(pki, link_rule).items():
        with pytest.raises(Exception) as e:
            get(url)
        assert "pin" in repr(e.value).lower() or "pin" in str(e.value.__cause__ or e.value.__context__).lower(), (name, e.value)


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


def test_python_reads_hosts_and_ports_as_the_cli(pki, v6):
    """Issue 36: one host:port splitter. What `mtls connect TARGET` reads, Python's front ends read
    the same (they call the core's mtls_host_port): brackets off, a zone kept, a bare IPv6 literal
    all host (no port: the CLI asks for [ADDRESS]:PORT), a bad port refused by both."""
    from mtls._url import host_port
    args = ["--identity", pki("client-a.p12"), "--password-file", pki("password.txt"), "--anchor", pki("root.pem"),
            "--anchors-only", "--verify-as", "server.test", "--json"]
    pol = policy(pki)
    for target, host in ((f"[::1]:{v6}", "::1"), (f"[::1%{LO}]:{v6}", f"::1%{LO}")):
        r = run_cli("connect", target, *args)
        assert json.loads(r.stdout)["connected"], (target, r.stderr)
        assert host_port(target) == (host, v6)
        for given in (host, f"[{host}]"):
            conn = mtls.Connection.connect(given, v6, identity=identity(pki), policy=pol)
            conn.close()

            async def via_asyncio():
                c, sock = await mtls.asyncio.connect(given, v6, identity=identity(pki), policy=pol)
                c.close()
                sock.close()
            asyncio.run(via_asyncio())
    for target in (f"::1:{v6}", "[::1]:0", "[::1]:65536", f"[::1]:+{v6}", f"[::1:{v6}", f"[::1]x{v6}", f":{v6}"):
        r = run_cli("connect", target, *args)
        assert r.returncode != 0 and "expected HOST:PORT" in r.stdout + r.stderr, (target, r.stdout, r.stderr)
        try:
            assert host_port(target)[1] is None, target  # no port read: as the CLI, which wants one
        except mtls.errors.InvalidArgument:
            pass
