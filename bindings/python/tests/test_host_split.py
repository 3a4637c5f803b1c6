"""Issue 36: the Python front ends read a host and a port with the core's one splitter
(mtls_host_port: what `mtls connect HOST:PORT`, `mtls verify --host` and host rules use), not with
copies of their own. Each front end hands libmtls the host the core reads: brackets off, a bare
IPv6 literal and a zone as written, and a host that carries a port of its own, or a bad port, is
refused. (Tests/e2e/test_url_zones.py compares these answers with the CLI's.)"""
import asyncio
import ctypes

import httpx
import pytest
import requests

import mtls
import mtls.asyncio
import mtls.httpx
import mtls.requests
import mtls.tls
from mtls._url import host_only, host_port
from mtls.errors import InvalidArgument

# The table of Tests/c/test_abi_facts.c's hosts_split_by_the_core and the Swift HostLiteralTests.
GOOD = [("[::1]:443", ("::1", 443)), ("::1", ("::1", None)), ("[::1]", ("::1", None)),
        ("fe80::1%eth0", ("fe80::1%eth0", None)), ("[fe80::1%eth0]:8443", ("fe80::1%eth0", 8443)),
        ("server.test:8443", ("server.test", 8443)), ("server.test", ("server.test", None)),
        ("::1:8443", ("::1:8443", None))]  # without brackets, two colons or more are all host
KDF = {"kdf_log_n": 10, "create": True}  # a fast store for the tests, as test_enroll_rules
BAD = ["h:0", "h:65536", "h:", "h:+443", "h: 443", "[::1", "[::1]x", "[::1]443", ":443", "[]", "",
       "h\0:443"]  # C would stop at the NUL: refused before


@pytest.mark.parametrize("text, expected", GOOD)
def test_host_port_is_the_cores_reading(text, expected):
    assert host_port(text) == expected


@pytest.mark.parametrize("text", BAD)
def test_host_port_refuses_what_the_core_refuses(text):
    with pytest.raises(InvalidArgument):
        host_port(text)


class Reached(Exception):
    pass


@pytest.fixture
def handed(monkeypatch):
    """The (host, port) each front end hands the C layer's connect; the connection goes no further."""
    seen = []

    def fake(host, port, options, out):
        seen.append((host.decode(), port))
        raise Reached()
    monkeypatch.setattr(mtls.tls.lib, "mtls_conn_connect", fake)
    monkeypatch.setattr(mtls.tls.lib, "mtls_conn_open", fake)
    return seen


HOSTS = [("[::1]", "::1"), ("::1", "::1"), ("fe80::1%eth0", "fe80::1%eth0"), ("[fe80::1%eth0]", "fe80::1%eth0"),
         ("server.test", "server.test")]


@pytest.mark.parametrize("given, expected", HOSTS)
def test_connection_hands_the_core_the_host_it_reads(handed, given, expected):
    with pytest.raises(Reached):
        mtls.tls.Connection.connect(given, 8443)
    with pytest.raises(Reached):
        mtls.tls.connect(given, 8443)
    assert handed == [(expected, 8443)] * 2


@pytest.mark.parametrize("given", ["[::1]:443", "server.test:443", "h:0", "[::1", ""])
def test_connection_refuses_a_host_with_a_port_or_a_malformed_one(handed, given):
    """Before, "[::1]:443" went to the resolver as a name (a connect error after a DNS lookup);
    now it is refused as the CLI refuses "[::1]:443:443": the port is given apart."""
    with pytest.raises(InvalidArgument):
        mtls.tls.Connection.connect(given or "x:", 443)
    assert handed == []


@pytest.mark.parametrize("given, expected", HOSTS[:3] + HOSTS[4:])
def test_asyncio_hands_the_core_the_host_it_reads(monkeypatch, given, expected):
    seen = []

    async def fake(host, port, proxy, timeout):
        seen.append((host, port))
        raise Reached()
    monkeypatch.setattr(mtls.asyncio, "_connect_or_tunnel", fake)
    with pytest.raises(Reached):
        asyncio.run(mtls.asyncio.connect(given, 8443))
    assert seen == [(expected, 8443)]
    with pytest.raises(InvalidArgument):
        asyncio.run(mtls.asyncio.connect(f"[{expected}]:443" if ":" in expected else f"{expected}:443", 443))
    assert len(seen) == 1


URLS = [("https://[::1]:8443/", ("::1", 8443)), ("https://[fe80::1%25eth0]:8443/", ("fe80::1%eth0", 8443)),
        ("https://server.test:8443/", ("server.test", 8443)), ("https://server.test/", ("server.test", 443))]


@pytest.mark.parametrize("url, expected", URLS)
def test_http_adapters_hand_the_core_the_host_it_reads(handed, url, expected):
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter())
        with pytest.raises(Exception):
            s.get(url, timeout=5)
    with httpx.Client(transport=mtls.httpx.Transport()) as c:
        with pytest.raises(Reached):
            c.get(url)
    assert handed == [expected, expected]


@pytest.mark.parametrize("url", ["https://server.test:99999/", "https://server.test:0/", "https://server.test:x/"])
def test_http_adapters_refuse_bad_ports_before_the_core(handed, url):
    """As `mtls connect https://server.test:0/` refuses them. Before, httpx's ":0" was read as
    443 (``port or 443``). requests itself drops ":0" when it prepares the URL (its reading, not
    the adapter's), so only httpx is asked that one."""
    if not url.endswith(":0/"):
        with requests.Session() as s:
            s.mount("https://", mtls.requests.Adapter())
            with pytest.raises(Exception):
                s.get(url, timeout=5)
    with httpx.Client(transport=mtls.httpx.Transport()) as c:
        with pytest.raises(Exception):
            c.get(url)
    assert handed == []


@pytest.mark.parametrize("port", [0, 65536, 99999, -1])
def test_connection_refuses_a_port_out_of_range(handed, port):
    """Before, ctypes wrapped 99999 to 34463 (the c_uint16 of the C call) and connected there."""
    with pytest.raises(InvalidArgument):
        mtls.tls.Connection.connect("server.test", port)
    with pytest.raises(InvalidArgument):
        asyncio.run(mtls.asyncio.connect("server.test", port))
    assert handed == []


@pytest.mark.parametrize("port", [65536, 99999, -1])
def test_listener_refuses_a_port_out_of_range(pki, port):
    """Before, ctypes wrapped 99999 to 34463 and the listener listened there."""
    from conftest import identity
    with pytest.raises(InvalidArgument):
        mtls.Listener(identity(pki, "server"), port=port)


def test_listener_reads_its_address_as_the_core(pki):
    from conftest import identity
    from conftest import anchored
    with mtls.Listener(identity(pki, "server"), address="[127.0.0.1]", client_policy=anchored(pki, "int-a.pem")) as listener:
        assert listener.port > 0


def test_acme_challenge_port_out_of_range_is_refused(tmp_path):
    """Before, the options struct's uint16 wrapped 99999 to 34463 and the responder listened there."""
    import mtls.enrollment
    from mtls.store import Store
    with Store(tmp_path / "store.db", "secret", **KDF) as store:
        with pytest.raises(InvalidArgument, match="port"):
            mtls.enrollment.enroll_acme(store, "l", "https://127.0.0.1:1/dir", ["a.test"], http_port=99999)


@pytest.mark.parametrize("given", ["[::1]:443", "127.0.0.1:443", "server.test:443"])
def test_the_core_itself_refuses_a_host_with_a_port(given):
    """The rule is the core's (mtls_host_only, what mtls_conn_connect applies): the C call, reached
    without the bindings' own reading, refuses the host before any lookup, with the same message
    host_only raises."""
    out = ctypes.c_void_p()
    rc = mtls.tls.lib.mtls_conn_connect(given.encode(), 443, None, ctypes.byref(out))
    assert rc == InvalidArgument.code and not out.value
    with pytest.raises(InvalidArgument) as refused:
        host_only(given)
    assert "without a port" in str(refused.value)
