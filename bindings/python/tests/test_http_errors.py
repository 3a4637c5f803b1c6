"""The HTTP adapters raise what requests and httpx users catch (issue 38, item 4): a refused
server is a requests.exceptions.SSLError / httpx.ConnectError, a connection that cannot be made
requests.exceptions.ConnectionError / httpx.ConnectError, a timeout requests' Timeout family /
httpx.TimeoutException — each still of libmtls's class, with its code, name and reasons; the
messages name each code once; requests' verify= and cert= are refused or warned about, never
silently ignored."""
import asyncio
import re
import socket
import threading
import time
import warnings

import httpx
import pytest
import requests

import mtls
import mtls.httpx
import mtls.requests
from conftest import free_port, identity

CUSTOMER_A = "CN=Customer A CA,O=libmtls test"


@pytest.fixture
def nginx(pki, start_nginx):
    return start_nginx(str(pki / "int-a.pem"), issuer_dn=CUSTOMER_A)


def untrusting(pki):
    """Trusts only another root: the server's chain reaches no anchor."""
    return mtls.Policy(anchors=[mtls.Certificate.load(pki / "other-root.pem")], anchors_only=True,
                       verify_as="server.test")


def trusting(pki):
    return mtls.Policy(anchors=[mtls.Certificate.load(pki / "root.pem")], anchors_only=True, verify_as="server.test")


@pytest.fixture
def silent_server():
    """Accepts TCP connections (the kernel's backlog) and never answers: handshakes time out."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield f"https://127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.fixture
def closed_port():
    return f"https://127.0.0.1:{free_port()}"


def codes_said_once(e):
    text = str(e)
    for code in e.codes:
        assert len(re.findall(rf"\b{re.escape(code)}\b", text)) == 1, text


# ---- requests

def requests_session(pki, policy):
    s = requests.Session()
    s.mount("https://", mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=policy))
    return s


def test_requests_untrusted_server_is_an_ssl_error_with_libmtls_reasons(pki, nginx):
    with requests_session(pki, untrusting(pki)) as s:
        with pytest.raises(requests.exceptions.SSLError) as e:
            s.get(nginx.url + "/")
    err = e.value
    assert isinstance(err, requests.exceptions.ConnectionError) and isinstance(err, requests.RequestException)
    assert isinstance(err, mtls.TrustError) and err.name == "untrusted" and err.code == mtls.TrustError.code
    assert err.codes and err.evaluation is not None and not err.evaluation.trusted
    assert err.request is not None and err.request.url == nginx.url + "/"
    codes_said_once(err)


def test_requests_refused_connection_is_a_connection_error(pki, closed_port):
    with requests_session(pki, trusting(pki)) as s:
        with pytest.raises(requests.exceptions.ConnectionError) as e:
            s.get(closed_port + "/")
    assert isinstance(e.value, mtls.ConnectError) and e.value.name == "connect"
    assert not isinstance(e.value, requests.exceptions.SSLError)


def test_requests_handshake_timeout_is_a_connect_timeout(pki, silent_server):
    with requests_session(pki, trusting(pki)) as s:
        with pytest.raises(requests.exceptions.Timeout) as e:
            s.get(silent_server + "/", timeout=0.5)
    assert isinstance(e.value, requests.exceptions.ConnectTimeout)
    assert isinstance(e.value, mtls.Timeout) and e.value.name == "timeout"


def test_requests_connect_retries_still_apply(pki):
    """Refused connections and timeouts go through urllib3's own connection errors, so a
    Retry(connect=N) retries them as with requests' own adapter; the last is raised as requests'
    exception, of libmtls's class."""
    from urllib3.util.retry import Retry
    accepted = []
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    stop = threading.Event()

    def accept():
        s.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(s.accept()[0])
            except OSError:
                pass
    t = threading.Thread(target=accept)
    t.start()
    try:
        with requests.Session() as session:
            session.mount("https://", mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=trusting(pki),
                                                            max_retries=Retry(connect=2, backoff_factor=0)))
            with pytest.raises(requests.exceptions.ConnectTimeout) as e:
                session.get(f"https://127.0.0.1:{s.getsockname()[1]}/", timeout=0.3)
        assert isinstance(e.value, mtls.Timeout)
        deadline = time.monotonic() + 10  # the accepting thread may still be taking the last one
        while len(accepted) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(accepted) == 3  # the first try and two retries
    finally:
        stop.set()
        t.join()
        for c in accepted:
            c.close()
        s.close()


def test_requests_cert_and_verify_false_are_refused_and_a_ca_bundle_warns(pki, nginx, monkeypatch):
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    with requests_session(pki, trusting(pki)) as s:
        with pytest.raises(mtls.InvalidArgument, match="identity="):
            s.get(nginx.url + "/", cert=(str(pki / "client-a.pem"), str(pki / "client-a.key")))
        with pytest.raises(mtls.InvalidArgument, match="policy="):
            s.get(nginx.url + "/", verify=False)
        with pytest.warns(mtls.requests.IgnoredVerifyWarning, match="not used"):
            r = s.get(nginx.url + "/", verify=str(pki / "root.pem"))
        assert r.status_code == 200
        # The bundle requests takes from the environment is the machine's, not a request's: no warning.
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki / "root.pem"))
        with warnings.catch_warnings():
            warnings.simplefilter("error", mtls.requests.IgnoredVerifyWarning)
            assert s.get(nginx.url + "/").status_code == 200


# ---- httpx, blocking

def httpx_client(pki, policy, timeout=5.0):
    return httpx.Client(transport=mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=policy),
                        timeout=timeout)


def test_httpx_untrusted_server_is_a_connect_error_with_libmtls_reasons(pki, nginx):
    with httpx_client(pki, untrusting(pki)) as c:
        with pytest.raises(httpx.ConnectError) as e:
            c.get(nginx.url + "/")
    err = e.value
    assert isinstance(err, httpx.TransportError) and isinstance(err, mtls.TrustError)
    assert err.codes and err.evaluation is not None and err.request.url == nginx.url + "/"
    codes_said_once(err)


def test_httpx_refused_connection_and_timeout(pki, closed_port, silent_server):
    with httpx_client(pki, trusting(pki), timeout=0.5) as c:
        with pytest.raises(httpx.ConnectError) as e:
            c.get(closed_port + "/")
        assert isinstance(e.value, mtls.ConnectError)
        with pytest.raises(httpx.TimeoutException) as t:
            c.get(silent_server + "/")
        assert isinstance(t.value, httpx.ConnectTimeout) and isinstance(t.value, mtls.Timeout)


# ---- httpx, asyncio

def test_httpx_async_untrusted_refused_and_timeout(pki, nginx, closed_port, silent_server):
    async def main():
        transport = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=untrusting(pki))
        async with httpx.AsyncClient(transport=transport, timeout=0.5) as c:
            with pytest.raises(httpx.ConnectError) as e:
                await c.get(nginx.url + "/")
            assert isinstance(e.value, mtls.TrustError) and e.value.codes
            codes_said_once(e.value)
            with pytest.raises(httpx.ConnectError) as r:
                await c.get(closed_port + "/")
            assert isinstance(r.value, mtls.ConnectError)
            with pytest.raises(httpx.TimeoutException) as t:
                await c.get(silent_server + "/")
            assert isinstance(t.value, httpx.ConnectTimeout) and isinstance(t.value, mtls.Timeout)
    asyncio.run(main())


def test_trust_error_text_names_each_code_once():
    e = mtls.TrustError("server.test: not trusted [unknown_issuer, certificate 1]")

    class R:
        code = "unknown_issuer"

    class Ev:
        reasons = [R()]
    e.evaluation = Ev()
    assert str(e) == "server.test: not trusted [unknown_issuer, certificate 1]"
    e.message = "server.test: not trusted"
    assert str(e) == "server.test: not trusted [unknown_issuer]"
