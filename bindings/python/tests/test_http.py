"""HTTPS through libmtls from the HTTP clients Python users use: requests (mtls.requests.Adapter),
httpx (mtls.httpx.Transport), http.client and urllib (mtls.http), against nginx with
`ssl_verify_client on` that accepts only customer A's clients. The client connects by
127.0.0.1, validates the server as server.test and pins the test root."""
import http.client
import re
import urllib.request

import httpx
import pytest
import requests

import mtls
import mtls.http
import mtls.httpx
import mtls.requests
from conftest import SOFTHSM_MODULE, identity

CUSTOMER_A = "CN=Customer A CA,O=libmtls test"


@pytest.fixture
def nginx(pki, start_nginx):
    """nginx sending customer A's intermediate as its only CA name and refusing (403) clients
    whose issuer is any other CA."""
    return start_nginx(str(pki / "int-a.pem"), issuer_dn=CUSTOMER_A)


def pinned(pki, *pin_files):
    """Trust only the test root, validate the server as server.test, and pin `pin_files`' keys
    (default: the root, with customer A's intermediate as the backup pin)."""
    pins = [mtls.Certificate.load(pki / f).spki_pin for f in (pin_files or ("root.pem", "int-a.pem"))]
    return mtls.Policy(anchors=[mtls.Certificate.load(pki / "root.pem")], anchors_only=True,
                       verify_as="server.test", pins=pins)


def fields(text):
    """{"conn": ..., "req": ..., "session": ...} from nginx's answer."""
    return dict(re.findall(r"(\w+)=(\S*)", text.split(" ", 2)[2]))


@pytest.fixture
def store(pki, tmp_path):
    with mtls.Store(tmp_path / "store.db", secret="store secret", kdf_log_n=10, create=True) as st:
        st.import_pkcs12("alice", (pki / "client-a.p12").read_bytes(), "pw")
        yield st


# ---- requests

def test_requests_get_with_a_stored_identity_keeps_the_connection_alive(pki, nginx, store):
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity="alice", store=store, policy=pinned(pki)))
        seen = []
        for _ in range(5):
            r = s.get(nginx.url + "/")
            assert r.status_code == 200, r.text
            assert r.text.startswith("hello CN=client-a,O=libmtls test ")
            seen.append(fields(r.text))
        # A gzipped answer of unknown length comes chunked.
        assert r.headers["Transfer-Encoding"] == "chunked" and r.headers["Content-Encoding"] == "gzip"
    # One TCP connection and one TLS session served the five requests, in order.
    assert len({f["conn"] for f in seen}) == 1 and len({f["session"] for f in seen}) == 1
    assert [f["req"] for f in seen] == ["1", "2", "3", "4", "5"]


def test_requests_follows_redirects_and_sends_chunked_bodies(pki, nginx):
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki)))
        r = s.get(nginx.url + "/old")
        assert r.status_code == 200 and [h.status_code for h in r.history] == [302]
        assert r.url == nginx.url + "/" and r.text.startswith("hello CN=client-a")
        r = s.post(nginx.url + "/upload", data=(part for part in [b"first-", b"second-", b"third"]))
        assert r.status_code == 200 and r.text == "stored\n"
        assert r.request.headers["Transfer-Encoding"] == "chunked"
    assert nginx.body_log().splitlines() == ["first-second-third"]


def test_requests_refused_server_raises_trust_error_with_pin_mismatch(pki, nginx):
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity=identity(pki, "client-a"),
                                                  policy=pinned(pki, "other-root.pem", "int-b.pem")))
        with pytest.raises(mtls.TrustError) as e:
            s.get(nginx.url + "/")
    assert "pin_mismatch" in e.value.codes
    assert e.value.evaluation is not None and not e.value.evaluation.trusted
    assert "pin_mismatch" in str(e.value)


def test_requests_client_of_another_customer_is_refused_by_nginx(pki, nginx):
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity=identity(pki, "client-b", "int-b"), policy=pinned(pki)))
        r = s.get(nginx.url + "/")
    assert r.status_code == 403 and r.text == "wrong customer\n"


# ---- httpx

def test_httpx_get_keeps_the_connection_alive_and_streams(pki, nginx):
    transport = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki))
    with httpx.Client(transport=transport) as client:
        seen = []
        for _ in range(3):
            r = client.get(nginx.url + "/")
            assert r.status_code == 200 and r.text.startswith("hello CN=client-a,O=libmtls test ")
            seen.append(fields(r.text))
        assert r.headers["content-encoding"] == "gzip"
        r = client.get(nginx.url + "/old", follow_redirects=True)
        assert r.status_code == 200 and [h.status_code for h in r.history] == [302]
        r = client.post(nginx.url + "/upload", content=iter([b"a" * 10, b"b" * 5]))
        assert r.status_code == 200 and r.text == "stored\n"
    assert len({f["conn"] for f in seen}) == 1 and [f["req"] for f in seen] == ["1", "2", "3"]
    assert nginx.body_log().splitlines() == ["a" * 10 + "b" * 5]


def test_a_replaced_policy_drops_idle_pooled_connections(pki, nginx):
    """Issue 35 item 13: after Policy.replace (mtls_policy_replace; a followed policy file's
    reload is the same call), a kept-alive connection made under the old settings is not reused
    by requests, httpx or the asyncio httpx transport: the next request opens a new connection,
    judged under the policy in force; without a change the connection is kept."""
    import asyncio

    def conns(get):
        return [fields(get().text)["conn"] for _ in range(2)]

    for kind in ("requests", "httpx", "async"):
        policy = pinned(pki)
        if kind == "requests":
            s = requests.Session()
            s.mount("https://", mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=policy))
            get, close = (lambda: s.get(nginx.url + "/")), s.close
        elif kind == "httpx":
            c = httpx.Client(transport=mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=policy))
            get, close = (lambda: c.get(nginx.url + "/")), c.close
        else:
            loop = asyncio.new_event_loop()
            ac = httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=policy))
            get = lambda: loop.run_until_complete(ac.get(nginx.url + "/"))  # noqa: E731
            close = lambda: (loop.run_until_complete(ac.aclose()), loop.close())  # noqa: E731
        try:
            before = conns(get)
            assert before[0] == before[1], (kind, before)  # kept alive
            policy.replace(pinned(pki))
            after = conns(get)
            assert after[0] != before[1], (kind, before, after)  # dropped: a new connection
            assert after[0] == after[1], (kind, after)  # and that one is kept
        finally:
            close()


def test_httpx_refused_server_raises_trust_error(pki, nginx):
    transport = mtls.httpx.Transport(identity=identity(pki, "client-a"),
                                     policy=pinned(pki, "other-root.pem", "int-b.pem"))
    with httpx.Client(transport=transport) as client:
        with pytest.raises(mtls.TrustError) as e:
            client.get(nginx.url + "/")
    assert "pin_mismatch" in e.value.codes


# ---- the standard library

def test_http_client_and_urllib(pki, nginx):
    policy = pinned(pki)
    ident = identity(pki, "client-a")
    conn = mtls.http.HTTPSConnection("127.0.0.1", nginx.port, identity=ident, policy=policy, timeout=10)
    assert isinstance(conn, http.client.HTTPSConnection)
    for n in ("1", "2"):
        conn.request("GET", "/")
        r = conn.getresponse()
        assert r.status == 200 and fields(r.read().decode())["req"] == n
    assert conn.connection.evaluation.trusted and conn.connection.tls_version == "TLSv1.3"
    conn.close()
    opener = urllib.request.build_opener(mtls.http.HTTPSHandler(identity=ident, policy=policy))
    with opener.open(nginx.url + "/old", timeout=10) as r:
        assert r.status == 200 and r.read().startswith(b"hello CN=client-a")


# ---- a SoftHSM2-backed identity

def test_token_identity_through_requests_and_httpx(pki, tokens, start_nginx):
    # nginx trusts the token test CA for clients; its server certificate is the same server.test.
    srv = start_nginx(str(tokens / "ca.pem"))
    uri = f"pkcs11:token=mtls-test;object=ec-client?module-path={SOFTHSM_MODULE}&pin-source=file:{tokens / 'pin'}"
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity=uri, policy=pinned(pki)))
        r = s.get(srv.url + "/")
        assert r.status_code == 200 and "CN=token ec-client" in r.text, r.text
    ident = mtls.identity_from_pkcs11(f"pkcs11:token=mtls-test;object=ec-client?module-path={SOFTHSM_MODULE}",
                                      pin="1234")
    assert ident.token_uri is not None
    with httpx.Client(transport=mtls.httpx.Transport(identity=ident, policy=pinned(pki))) as client:
        r = client.get(srv.url + "/")
        assert r.status_code == 200 and "CN=token ec-client" in r.text, r.text
    # Log out of the shared test token for the tests after this one: the identities and the
    # cached TLS contexts that hold them go.
    ident.close()
    mtls.clear_session_cache()


# ---- names a user meets first

def test_wrong_password_is_bad_password(pki, tmp_path):
    data = (pki / "client-a.p12").read_bytes()
    with pytest.raises(mtls.BadPassword):
        mtls.Identity.from_pkcs12(data, "wrong")
    assert mtls.Identity.from_pkcs12(data, "pw").leaf.subject_summary == "client-a"
    with mtls.Store(tmp_path / "s.db", secret="s", kdf_log_n=10, create=True) as st:
        with pytest.raises(mtls.BadPassword):
            st.import_pkcs12("a", data, "wrong")


def test_store_needs_a_secret_and_indexes_by_label(pki, tmp_path):
    with pytest.raises(mtls.InvalidArgument, match="insecure_no_secret"):
        mtls.Store(tmp_path / "s.db")
    with mtls.Store(tmp_path / "s.db", insecure_no_secret=True, kdf_log_n=10, create=True) as st:
        st.import_pkcs12("alice", (pki / "client-a.p12").read_bytes(), "pw")
        st.put_certificate("root", mtls.Certificate.load(pki / "root.pem"))
        assert isinstance(st["alice"], mtls.Identity) and st["alice"].leaf.subject_summary == "client-a"
        assert isinstance(st["root"], mtls.Certificate) and "alice" in st and "nobody" not in st
        with pytest.raises(KeyError):
            st["nobody"]
        with pytest.raises(mtls.NotFound):
            st["nobody"]


def test_certificate_constructors_and_policy_evaluate(pki):
    pem = (pki / "server.pem").read_text()
    cert = mtls.Certificate.from_pem(pem)
    assert mtls.Certificate.from_der(cert.der) == cert == mtls.Certificate.load(pki / "server.pem")
    chain = [cert, mtls.Certificate.load(pki / "int-a.pem")]
    r = pinned(pki).evaluate(chain, host="127.0.0.1")
    assert r.trusted, r.reasons
    r = pinned(pki, "other-root.pem", "int-b.pem").evaluate(chain, host="127.0.0.1")
    assert not r.trusted and "pin_mismatch" in r.codes
    policy = mtls.Policy(anchors=[pki / "root.pem"], host_rules=[{"host": "10.1.2.3", "verify_as": "server.test"}])
    assert policy.evaluate(chain, host="10.1.2.3").trusted
    assert not policy.evaluate(chain, host="10.9.9.9").trusted


def test_exceptions_are_real_classes_with_builtin_bases():
    assert mtls.MTLSError is mtls.Error and mtls.IOError_ is mtls.IOFailure
    assert issubclass(mtls.NotFound, LookupError) and issubclass(mtls.Timeout, TimeoutError)
    assert issubclass(mtls.IOError_, OSError) and issubclass(mtls.InvalidArgument, ValueError)
    assert issubclass(mtls.Untrusted, mtls.TrustError)
    for c in (mtls.PinIncorrect, mtls.PinLocked, mtls.PinRequired):
        assert issubclass(c, mtls.PinError)
    # one class per C code, each named by libmtls's own code name
    for code, cls in mtls.errors.BY_CODE.items():
        assert cls.__module__ == "mtls.errors" and cls.code == code
        assert cls.name == mtls._lib.mtls_error_name(code).decode()
    with pytest.raises(mtls.ParseError) as e:
        mtls.Certificate.from_pem("not a certificate")
    assert e.value.code == -5 and e.value.name == "parse" and e.value.message
