"""HTTPS through an HTTP proxy stays in libmtls (issue 23, defect 6; issue 29 for asyncio):
requests (mtls.requests.Adapter), httpx (mtls.httpx.Transport and AsyncTransport), urllib
(mtls.http) and mtls.asyncio streams ask the proxy for a CONNECT tunnel and run libmtls's TLS
through it, with the target's identity, policy and host rules, never Python's ssl.

The peers are real: tinyproxy (Debian's package, started here on 127.0.0.1 with a configuration
made for the test), nginx with `ssl_verify_client on` (conftest's start_nginx: it answers with the
client certificate's DN), and a hostile CONNECT proxy written here that sends every tunnel to
another TLS server, whose certificate (DNS:server.test) is issued by a root nobody trusts."""
import asyncio
import gc
import pathlib
import re
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, List, Optional

import httpx
import pytest
import requests

import mtls
import mtls._proxy
import mtls.asyncio
import mtls.http
import mtls.httpx
import mtls.requests
from conftest import free_port, identity, require_tool, stop_process, wait_port
from waits import wait_until

CUSTOMER_A = "CN=Customer A CA,O=libmtls test"
CLIENT_A_DN = "CN=client-a,O=libmtls test"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without proxy variables (and sets the ones it needs)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def nginx(pki, start_nginx):
    """nginx requiring customer A's clients; GET / answers "hello <client DN> conn=<n> ..."."""
    return start_nginx(str(pki / "int-a.pem"), issuer_dn=CUSTOMER_A)


def pinned(pki: pathlib.Path, *pin_files: str) -> mtls.Policy:
    """Trust only the test root, validate the server as server.test, pin `pin_files`' keys
    (default: the root)."""
    pins = [mtls.Certificate.load(pki / f).spki_pin for f in (pin_files or ("root.pem",))]
    return mtls.Policy(anchors=[mtls.Certificate.load(pki / "root.pem")], anchors_only=True,
                       verify_as="server.test", pins=pins)


def conn_id(text: str) -> str:
    """nginx's connection serial in its answer."""
    m = re.search(r"conn=(\d+)", text)
    assert m, text
    return m.group(1)


# ---- the proxies

class Tinyproxy:
    """tinyproxy on 127.0.0.1:port; `connects()` lists the CONNECT requests it received."""

    def __init__(self, d: pathlib.Path, port: int, proc: "subprocess.Popen[bytes]") -> None:
        self.dir, self.port, self.proc = d, port, proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self, method: str) -> List[str]:
        """The targets of the `method` requests it received (host:port for CONNECT, the URL
        otherwise)."""
        log = (self.dir / "tinyproxy.log").read_text()
        return re.findall(rf"Request \(file descriptor \d+\): {method} (\S+) HTTP", log)

    def connects(self) -> List[str]:
        return self.requests("CONNECT")

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture
def start_tinyproxy(tmp_path: pathlib.Path) -> Iterator:
    """start_tinyproxy(connect_port, basic_auth=None) -> Tinyproxy: allows CONNECT to
    `connect_port` only (others get 403), and with basic_auth=(user, password) requires it
    (others get 407)."""
    require_tool(shutil.which("tinyproxy"), "tinyproxy")
    started: List[Tinyproxy] = []

    def start(connect_port: int, basic_auth: Optional[tuple] = None) -> Tinyproxy:
        port = free_port()
        d = tmp_path / f"tinyproxy-{port}"
        d.mkdir()
        auth = f"BasicAuth {basic_auth[0]} {basic_auth[1]}\n" if basic_auth else ""
        (d / "tinyproxy.conf").write_text(
            f"Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile \"{d}/tinyproxy.log\"\nLogLevel Connect\n"
            f"PidFile \"{d}/tinyproxy.pid\"\nMaxClients 20\nAllow 127.0.0.1\nConnectPort {connect_port}\n"
            f"DisableViaHeader Yes\n{auth}")
        proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(d / "tinyproxy.conf")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proxy = Tinyproxy(d, port, proc)
        started.append(proxy)
        wait_port(port, proc)
        # tinyproxy may open its log file after it listens: connects() reads that file.
        wait_until(lambda: (d / "tinyproxy.log").exists(), what="tinyproxy's log file")
        return proxy

    yield start
    for p in started:
        p.stop()


class HostileProxy:
    """A CONNECT proxy that answers 200 to every CONNECT and sends the tunnel to `evil_port`
    (a TLS server of the attacker's), whatever target was asked for. `targets` lists what the
    clients asked for; `served` counts the HTTP requests the attacker's server read."""

    def __init__(self, pki: pathlib.Path, silent: bool = False) -> None:
        self.silent = silent  # answer 200, then send nothing at all (a tunnel that hangs)
        self.targets: List[str] = []
        self.served = 0
        self._stop = threading.Event()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki / "other-server.pem"), str(pki / "other-server.key"))
        self._evil = self._listen(lambda c: self._serve_evil(c, ctx))
        self.evil_port = self._evil.getsockname()[1]
        self._proxy = self._listen(self._tunnel)
        self.port = self._proxy.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self, handle) -> socket.socket:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        srv.settimeout(0.2)

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    c, _ = srv.accept()
                except OSError:
                    continue
                threading.Thread(target=handle, args=(c,), daemon=True).start()
            srv.close()
        threading.Thread(target=loop, daemon=True).start()
        return srv

    def _tunnel(self, client: socket.socket) -> None:
        client.settimeout(10)  # a client that never sends a CONNECT (TLS to the proxy) is dropped
        with client:
            head = self._read_head(client)
            if not head:
                return
            self.targets.append(head.split(b" ")[1].decode())
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if self.silent:
                self._stop.wait(10)
                return
            with socket.create_connection(("127.0.0.1", self.evil_port)) as up:
                t = threading.Thread(target=self._pipe, args=(up, client), daemon=True)
                t.start()
                self._pipe(client, up)
                t.join(5)

    @staticmethod
    def _read_head(sock: socket.socket) -> bytes:
        """A request's head (up to its blank line); b"" when the peer closed before."""
        head = b""
        while b"\r\n\r\n" not in head:
            b = sock.recv(4096)
            if not b:
                return b""
            head += b
        return head

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _serve_evil(self, c: socket.socket, ctx: ssl.SSLContext) -> None:
        c.settimeout(10)
        try:
            with ctx.wrap_socket(c, server_side=True) as tls:
                if not self._read_head(tls):
                    return
                self.served += 1
                body = b"hello from the attacker\n"
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        except (OSError, ssl.SSLError):
            pass  # the client refused the attacker's certificate

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
def hostile(pki) -> Iterator[HostileProxy]:
    p = HostileProxy(pki)
    yield p
    p.stop()


# ---- requests

def adapter_session(adapter: mtls.requests.Adapter) -> requests.Session:
    s = requests.Session()
    s.mount("https://", adapter)
    return s


def test_requests_through_tinyproxy_presents_the_identity_and_keeps_one_tunnel(pki, nginx, start_tinyproxy):
    proxy = start_tinyproxy(nginx.port)
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        answers = [s.get(nginx.url + "/", proxies={"https": proxy.url}) for _ in range(3)]
    for r in answers:
        assert r.status_code == 200, r.text
        assert r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
    # The three requests went through one tunnel (one CONNECT, one TLS connection at nginx).
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]
    assert len({conn_id(r.text) for r in answers}) == 1


def test_requests_verify_false_and_cert_are_refused_not_ignored(pki, nginx, start_tinyproxy):
    """requests' verify=False and cert= never replace libmtls's policy and identity: they are
    refused (issue 38) before anything is sent, through a proxy as directly."""
    proxy = start_tinyproxy(nginx.port)
    other_client = (str(pki / "client-b.pem"), str(pki / "client-b.key"))
    proxies = {"https": proxy.url}
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        with pytest.raises(mtls.InvalidArgument, match="identity="):
            s.get(nginx.url + "/", proxies=proxies, cert=other_client)
        with pytest.raises(mtls.InvalidArgument, match="verify=False"):
            s.get(nginx.url + "/", proxies=proxies, verify=False)
        assert proxy.connects() == []
        r = s.get(nginx.url + "/", proxies=proxies)
        assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
    # A pin the server does not match is refused through the proxy.
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"),
                                               policy=pinned(pki, "other-root.pem"))) as s:
        with pytest.raises(mtls.TrustError) as e:
            s.get(nginx.url + "/", proxies=proxies)
    assert "pin_mismatch" in e.value.codes and not e.value.evaluation.trusted  # the evaluation, as direct
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"] * 2


def test_requests_through_a_proxy_uses_the_targets_host_rule(pki, nginx, start_tinyproxy):
    """The rule for the target's address and port decides (validate as server.test, pin): not
    the proxy's address, which is 127.0.0.1 too but another port."""
    proxy = start_tinyproxy(nginx.port)
    root = mtls.Certificate.load(pki / "root.pem")

    def ruled(pin_file: str) -> mtls.Policy:
        rule = mtls.HostRule(f"127.0.0.1:{nginx.port}", verify_as="server.test", anchors=[root],
                             pins=[mtls.Certificate.load(pki / pin_file).spki_pin])
        return mtls.Policy(anchors=[root], host_rules=[rule])

    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=ruled("root.pem"))) as s:
        r = s.get(nginx.url + "/", proxies={"https": proxy.url})
        assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"),
                                               policy=ruled("other-root.pem"))) as s:
        with pytest.raises(mtls.TrustError) as e:
            s.get(nginx.url + "/", proxies={"https": proxy.url})
    assert "pin_mismatch" in e.value.codes and not e.value.evaluation.trusted  # the evaluation, as direct


def test_requests_hostile_connect_proxy_is_refused_even_with_verify_false(pki, nginx, hostile):
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        with pytest.raises(mtls.InvalidArgument):
            s.get(nginx.url + "/", proxies={"https": hostile.url}, verify=False)
        assert hostile.targets == []  # refused before anything was sent
        with pytest.raises(mtls.TrustError) as e:
            s.get(nginx.url + "/", proxies={"https": hostile.url})
    assert "unknown_issuer" in e.value.codes  # the attacker's certificate, from a root nobody trusts
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"]  # the tunnel was asked for, and went elsewhere
    assert hostile.served == 0  # no request reached the attacker's server


def test_requests_environment_proxies_and_no_proxy(pki, nginx, hostile, monkeypatch):
    """HTTPS_PROXY is used as requests uses it (here: the hostile proxy, refused); NO_PROXY
    and Session.trust_env = False bypass it, as in requests."""
    adapter = mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))
    monkeypatch.setenv("HTTPS_PROXY", hostile.url)
    with adapter_session(adapter) as s:
        with pytest.raises(mtls.TrustError):
            s.get(nginx.url + "/")
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"]
    with adapter_session(adapter) as s:
        s.trust_env = False
        assert s.get(nginx.url + "/").text.startswith(f"hello {CLIENT_A_DN} ")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    with adapter_session(adapter) as s:
        assert s.get(nginx.url + "/").text.startswith(f"hello {CLIENT_A_DN} ")
    assert len(hostile.targets) == 1


def test_requests_proxy_authorization_and_refusals_name_the_proxy_status(pki, nginx, start_tinyproxy):
    proxy = start_tinyproxy(nginx.port, basic_auth=("alice", "s3cret"))
    authed = f"http://alice:s3cret@127.0.0.1:{proxy.port}"
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        r = s.get(nginx.url + "/", proxies={"https": authed})
        assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
        with pytest.raises(requests.exceptions.ProxyError) as e:
            s.get(nginx.url + "/", proxies={"https": proxy.url})  # no credentials
        assert "407" in str(e.value) and f"127.0.0.1:{proxy.port}" in str(e.value)
    other = start_tinyproxy(nginx.port + 1 if nginx.port < 65535 else nginx.port - 1)  # not our port
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        with pytest.raises(requests.exceptions.ProxyError) as e:
            s.get(nginx.url + "/", proxies={"https": other.url})
    assert "403" in str(e.value)


def test_requests_plain_http_through_the_proxy_is_forwarded_without_tls(pki, nginx, start_tinyproxy):
    """With the adapter mounted for http:// too, a plain http:// URL through the proxy is
    forwarded by requests as usual (GET http://... to the proxy): no TLS, no tunnel."""
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"plain " + self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = start_tinyproxy(nginx.port)
    try:
        adapter = mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))
        with adapter_session(adapter) as s:
            s.mount("http://", adapter)
            url = f"http://127.0.0.1:{server.server_address[1]}/page"
            r = s.get(url, proxies={"http": proxy.url, "https": proxy.url}, timeout=10)
            assert r.status_code == 200 and r.text == "plain /page"
            r = s.get(nginx.url + "/", proxies={"http": proxy.url, "https": proxy.url}, timeout=10)
            assert r.text.startswith(f"hello {CLIENT_A_DN} ")
    finally:
        server.shutdown()
        server.server_close()
    assert proxy.requests("GET") == [url]
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]


@pytest.mark.parametrize("scheme", ["https", "socks5", "socks5h"])
def test_requests_refuses_proxies_it_cannot_tunnel_through_libmtls(pki, nginx, hostile, scheme):
    """An https:// proxy (TLS to the proxy) or SOCKS: a clear error, not urllib3's own TLS."""
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        with pytest.raises(requests.exceptions.InvalidProxyURL) as e:
            s.get(nginx.url + "/", proxies={"https": f"{scheme}://127.0.0.1:{hostile.port}"}, timeout=10)
    assert "http:// proxies" in str(e.value)
    assert hostile.targets == []  # nothing was sent to the proxy


# ---- httpx

def test_httpx_transport_through_tinyproxy_presents_the_identity_and_keeps_one_tunnel(pki, nginx, start_tinyproxy):
    proxy = start_tinyproxy(nginx.port)
    transport = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki), proxy=proxy.url)
    with httpx.Client(transport=transport) as client:
        answers = [client.get(nginx.url + "/") for _ in range(3)]
    for r in answers:
        assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]
    assert len({conn_id(r.text) for r in answers}) == 1


def test_httpx_client_proxy_with_our_transport_goes_through_libmtls(pki, nginx, start_tinyproxy, hostile):
    """httpx.Client(transport=mtls..., proxy=P) used to mount httpx's own transport (its TLS) for
    P; now the proxy's transport is ours: identity presented, the hostile tunnel refused even
    with verify=False."""
    proxy = start_tinyproxy(nginx.port)
    transport = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki))
    with httpx.Client(transport=transport, proxy=proxy.url) as client:
        r = client.get(nginx.url + "/")
    assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]
    with httpx.Client(transport=transport, proxy=hostile.url, verify=False) as client:
        with pytest.raises(mtls.TrustError):
            client.get(nginx.url + "/")
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"] and hostile.served == 0


def test_httpx_wrong_pin_and_hostile_proxy_are_refused(pki, nginx, start_tinyproxy, hostile):
    proxy = start_tinyproxy(nginx.port)
    wrong = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki, "other-root.pem"),
                                 proxy=proxy.url)
    with httpx.Client(transport=wrong) as client:
        with pytest.raises(mtls.TrustError) as e:
            client.get(nginx.url + "/")
    assert "pin_mismatch" in e.value.codes and not e.value.evaluation.trusted  # the evaluation, as direct
    evil = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki), proxy=hostile.url)
    with httpx.Client(transport=evil, verify=False) as client:
        with pytest.raises(mtls.TrustError):
            client.get(nginx.url + "/")
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"] and hostile.served == 0


def test_httpx_environment_proxies_and_no_proxy(pki, nginx, hostile, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", hostile.url)
    with httpx.Client(transport=mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki))) as c:
        with pytest.raises(mtls.TrustError):
            c.get(nginx.url + "/")
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"]
    # trust_env=False: the environment is not read.
    t = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki), trust_env=False)
    with httpx.Client(transport=t) as c:
        assert c.get(nginx.url + "/").text.startswith(f"hello {CLIENT_A_DN} ")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with httpx.Client(transport=mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki))) as c:
        assert c.get(nginx.url + "/").text.startswith(f"hello {CLIENT_A_DN} ")
    assert len(hostile.targets) == 1


def test_httpx_proxy_refusals_and_unsupported_proxies(pki, nginx, start_tinyproxy, hostile, monkeypatch):
    proxy = start_tinyproxy(nginx.port, basic_auth=("alice", "s3cret"))
    ident, policy = identity(pki, "client-a"), pinned(pki)
    t = mtls.httpx.Transport(identity=ident, policy=policy, proxy=httpx.Proxy(proxy.url, auth=("alice", "s3cret")))
    with httpx.Client(transport=t) as c:
        assert c.get(nginx.url + "/").text.startswith(f"hello {CLIENT_A_DN} ")
    with httpx.Client(transport=mtls.httpx.Transport(identity=ident, policy=policy, proxy=proxy.url)) as c:
        with pytest.raises(httpx.ProxyError) as e:
            c.get(nginx.url + "/")
    assert "407" in str(e.value)
    for scheme in ("https", "socks5"):
        with pytest.raises(ValueError, match="http:// proxies"):
            mtls.httpx.Transport(identity=ident, policy=policy, proxy=f"{scheme}://127.0.0.1:{hostile.port}")
        with pytest.raises(ValueError, match="http:// proxies"):
            httpx.Client(transport=mtls.httpx.Transport(identity=ident, policy=policy),
                         proxy=f"{scheme}://127.0.0.1:{hostile.port}")
    monkeypatch.setenv("HTTPS_PROXY", f"https://127.0.0.1:{hostile.port}")
    with httpx.Client(transport=mtls.httpx.Transport(identity=ident, policy=policy)) as c:
        with pytest.raises(httpx.ProxyError, match="http:// proxies"):
            c.get(nginx.url + "/")
    assert hostile.targets == []


def test_a_tunnel_that_never_answers_the_handshake_times_out(pki):
    """The handshake through a tunnel keeps the connection's handshake timeout (it runs
    non-blocking, waited for in Python): a proxy that answers 200 and then nothing is a Timeout."""
    silent = HostileProxy(pki, silent=True)
    try:
        t = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki), proxy=silent.url,
                                 timeout=0.5)
        with httpx.Client(transport=t) as c:
            with pytest.raises(mtls.Timeout):
                c.get("https://127.0.0.1:9/")
        conn = mtls.http.HTTPSConnection("127.0.0.1", silent.port, identity=identity(pki, "client-a"),
                                         policy=pinned(pki), timeout=0.5)
        conn.set_tunnel("127.0.0.1", 9)
        with pytest.raises(mtls.Timeout):
            conn.request("GET", "/")
        conn.close()
        assert silent.targets == ["127.0.0.1:9", "127.0.0.1:9"]
    finally:
        silent.stop()


def test_proxy_url_host_is_read_by_the_core_parser():
    """A proxy URL's host and port are read by the core's one URL parser (mtls_url_host_port), as
    every URL libmtls connects to: an RFC 6874 zone "%25eth0" decoded to "%eth0" (before, the
    proxy's host kept "%25eth0", which the resolver reads as the interface "25eth0"); a malformed
    port refused as the core refuses it; user information still read here."""
    p = mtls._proxy
    proxy = p.HTTPProxy.from_url("http://user:pw@[fe80::1%25eth0]:3128")
    assert (proxy.host, proxy.port) == ("fe80::1%eth0", 3128)
    assert dict(proxy.headers)["Proxy-Authorization"] == "Basic dXNlcjpwdw=="
    assert (p.HTTPProxy.from_url("[::1%25lo]").host, p.HTTPProxy.from_url("[::1%25lo]").port) == ("::1%lo", 80)
    assert p.HTTPProxy.from_url("http://proxy.test:8080").host == "proxy.test"
    with pytest.raises(p.UnsupportedProxy, match="malformed port"):
        p.HTTPProxy.from_url("http://[fe80::1%25eth0]:99999")
    with pytest.raises(mtls.errors.InvalidArgument, match="percent-encoding in the IPv6 zone"):
        mtls._url.url_host("[fe80::1%25eth%zz]:8443")
    assert mtls._url.url_host("[fe80::1%25eth0]:8443") == "[fe80::1%eth0]:8443"


def test_connect_reply_takes_exactly_the_proxys_answer():
    """The reading of CONNECT's answer that the blocking and asyncio tunnels share: it takes the
    answer up to its blank line and not one byte of the server's TLS that may follow in the same
    segment, across any split; an answer without HTTP, a refusal, an endless head, a close."""
    p = mtls._proxy
    proxy = p.HTTPProxy("127.0.0.1", 3128)
    answer = b"HTTP/1.1 200 Connection established\r\nProxy-Agent: x\r\n\r\n"
    tls = b"\x16\x03\x03\x00\x7a" + b"\x02" * 20
    for split in range(1, len(answer) + 1):
        reply = p.ConnectReply(proxy, "10.0.0.7", 8443)
        taken = reply.take(answer[:split])
        if not reply.complete:
            assert taken == split
            taken += reply.take(answer[split:] + tls)
        assert reply.complete and taken == len(answer)
        reply.check()
    assert p.connect_request(proxy, "::1", 8443) == b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n"
    refused = p.ConnectReply(proxy, "10.0.0.7", 8443)
    refused.take(b"HTTP/1.0 403 Filtered\n\n")
    with pytest.raises(p.TunnelError, match="refused the tunnel to 10.0.0.7:8443: 403 Filtered") as e:
        refused.check()
    assert e.value.status == 403
    garbage = p.ConnectReply(proxy, "h", 1)
    garbage.take(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(p.TunnelError, match="not HTTP"):
        garbage.check()
    with pytest.raises(p.TunnelError, match="more than"):
        p.ConnectReply(proxy, "h", 1).take(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000)
    with pytest.raises(p.TunnelError, match="closed the connection"):
        p.ConnectReply(proxy, "h", 1).take(b"")
    with pytest.raises(p.UnsupportedProxy, match="line break"):
        p.connect_request(proxy, "evil\r\nX-Injected: 1", 443)


# ---- asyncio: httpx.AsyncClient with mtls.httpx.AsyncTransport, and mtls.asyncio streams

def run(coro):
    """Runs a test coroutine on a fresh loop within a minute."""
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_async_transport_through_tinyproxy_presents_the_identity_and_keeps_one_tunnel(pki, nginx, start_tinyproxy):
    proxy = start_tinyproxy(nginx.port)

    async def main() -> List[httpx.Response]:
        t = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=pinned(pki), proxy=proxy.url)
        async with httpx.AsyncClient(transport=t) as client:
            return [await client.get(nginx.url + "/") for _ in range(3)]

    answers = run(main())
    for r in answers:
        assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]  # one tunnel, kept alive
    assert len({conn_id(r.text) for r in answers}) == 1


def test_async_client_proxy_with_our_transport_goes_through_libmtls(pki, nginx, start_tinyproxy, hostile):
    """httpx.AsyncClient(transport=AsyncTransport(...), proxy=P) used to mount httpx's own
    transport (Python's ssl, no identity) for P; now the proxy's transport is ours: identity
    presented, the hostile tunnel refused even with verify=False."""
    proxy = start_tinyproxy(nginx.port)
    transport = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=pinned(pki))

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, proxy=proxy.url) as client:
            r = await client.get(nginx.url + "/")
        assert r.status_code == 200 and r.text.startswith(f"hello {CLIENT_A_DN} "), r.text
        async with httpx.AsyncClient(transport=transport, proxy=hostile.url, verify=False) as client:
            with pytest.raises(mtls.TrustError) as e:
                await client.get(nginx.url + "/")
        assert "unknown_issuer" in e.value.codes

    run(main())
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"] and hostile.served == 0


def test_async_transport_environment_proxies_and_no_proxy(pki, nginx, hostile, monkeypatch):
    """HTTPS_PROXY is honoured by the transport (httpx ignores the environment once it is given
    a transport: the request used to go straight to the server, past the proxy): here the
    hostile proxy, refused. trust_env=False and NO_PROXY bypass it."""
    monkeypatch.setenv("HTTPS_PROXY", hostile.url)

    async def get(**kw: object) -> httpx.Response:
        t = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=pinned(pki), **kw)
        async with httpx.AsyncClient(transport=t) as client:
            return await client.get(nginx.url + "/")

    with pytest.raises(mtls.TrustError):
        run(get())
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"] and hostile.served == 0
    assert run(get(trust_env=False)).text.startswith(f"hello {CLIENT_A_DN} ")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert run(get()).text.startswith(f"hello {CLIENT_A_DN} ")
    assert len(hostile.targets) == 1


def test_async_transport_proxy_refusals_and_unsupported_proxies(pki, nginx, start_tinyproxy, hostile, monkeypatch):
    proxy = start_tinyproxy(nginx.port, basic_auth=("alice", "s3cret"))
    ident, policy = identity(pki, "client-a"), pinned(pki)

    async def main() -> None:
        t = mtls.httpx.AsyncTransport(identity=ident, policy=policy,
                                      proxy=httpx.Proxy(proxy.url, auth=("alice", "s3cret")))
        async with httpx.AsyncClient(transport=t) as c:
            assert (await c.get(nginx.url + "/")).text.startswith(f"hello {CLIENT_A_DN} ")
        # the target's pin is checked through the tunnel, with the evaluation as on a direct connection
        wrong = mtls.httpx.AsyncTransport(identity=ident, policy=pinned(pki, "other-root.pem"),
                                          proxy=f"http://alice:s3cret@127.0.0.1:{proxy.port}")
        async with httpx.AsyncClient(transport=wrong) as c:
            with pytest.raises(mtls.TrustError) as e:
                await c.get(nginx.url + "/")
        assert "pin_mismatch" in e.value.codes and not e.value.evaluation.trusted
        async with httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(identity=ident, policy=policy,
                                                                         proxy=proxy.url)) as c:
            with pytest.raises(httpx.ProxyError) as e:  # no credentials
                await c.get(nginx.url + "/")
        assert "407" in str(e.value) and f"127.0.0.1:{proxy.port}" in str(e.value)
        for scheme in ("https", "socks5"):
            with pytest.raises(ValueError, match="http:// proxies"):
                mtls.httpx.AsyncTransport(identity=ident, policy=policy, proxy=f"{scheme}://127.0.0.1:{hostile.port}")
            with pytest.raises(ValueError, match="http:// proxies"):
                httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(identity=ident, policy=policy),
                                  proxy=f"{scheme}://127.0.0.1:{hostile.port}")
        monkeypatch.setenv("HTTPS_PROXY", f"https://127.0.0.1:{hostile.port}")
        async with httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(identity=ident, policy=policy)) as c:
            with pytest.raises(httpx.ProxyError, match="http:// proxies"):
                await c.get(nginx.url + "/")

    run(main())
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"] * 3
    assert hostile.targets == []  # nothing was sent to the https/socks "proxy"


def test_async_tunnel_that_never_answers_the_handshake_times_out(pki):
    silent = HostileProxy(pki, silent=True)
    try:
        async def main() -> None:
            t = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=pinned(pki), proxy=silent.url,
                                          timeout=0.5)
            async with httpx.AsyncClient(transport=t) as c:
                with pytest.raises(mtls.Timeout):
                    await c.get("https://127.0.0.1:9/")
            with pytest.raises(mtls.Timeout):
                await mtls.asyncio.open_connection("127.0.0.1", 9, identity=identity(pki, "client-a"),
                                                   policy=pinned(pki), proxy=silent.url, handshake_timeout=0.5)
        run(main())
        assert silent.targets == ["127.0.0.1:9", "127.0.0.1:9"]
    finally:
        silent.stop()


def test_asyncio_open_connection_through_a_proxy(pki, nginx, start_tinyproxy, hostile, monkeypatch):
    """mtls.asyncio.open_connection(..., proxy=...) tunnels too: the identity reaches nginx
    through tinyproxy, the hostile tunnel is refused, a refused tunnel raises TunnelError with
    the proxy's status and leaves no descriptor open, an https:// proxy is refused up front."""
    proxy = start_tinyproxy(nginx.port, basic_auth=("alice", "s3cret"))
    authed = f"http://alice:s3cret@127.0.0.1:{proxy.port}"
    kw = dict(identity=identity(pki, "client-a"), policy=pinned(pki))

    async def refused() -> None:
        for _ in range(3):
            with pytest.raises(mtls.asyncio.TunnelError) as t:
                await mtls.asyncio.open_connection("127.0.0.1", nginx.port, proxy=proxy.url, **kw)
            assert t.value.status == 407 and f"127.0.0.1:{proxy.port}" in str(t.value)

    # Every socket made while the tunnel is refused is closed (kept referenced here, so only an
    # explicit close, not the garbage collector, closes it).
    opened: List[socket.socket] = []

    class Recorded(socket.socket):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    with monkeypatch.context() as m:
        m.setattr(mtls.asyncio.socket, "socket", Recorded)
        run(refused())
    to_proxy = [s for s in opened if s.family == socket.AF_INET and s.type == socket.SOCK_STREAM]
    assert len(to_proxy) >= 3 and all(s.fileno() == -1 for s in to_proxy)

    async def main() -> None:
        reader, writer = await mtls.asyncio.open_connection("127.0.0.1", nginx.port, proxy=authed, **kw)
        writer.write(b"GET / HTTP/1.1\r\nHost: server.test\r\nConnection: close\r\n\r\n")
        await writer.drain()
        reply = (await reader.read()).decode()
        assert reply.startswith("HTTP/1.1 200") and f"hello {CLIENT_A_DN} " in reply, reply
        assert writer.get_extra_info("evaluation").trusted
        assert writer.get_extra_info("peername") == ("127.0.0.1", proxy.port)  # the socket goes to the proxy
        writer.close()
        await writer.wait_closed()
        with pytest.raises(mtls.TrustError) as e:
            await mtls.asyncio.open_connection("127.0.0.1", nginx.port, proxy=hostile.url, **kw)
        assert "unknown_issuer" in e.value.codes
        with pytest.raises(mtls.asyncio.UnsupportedProxy, match="http:// proxies"):
            await mtls.asyncio.open_connection("127.0.0.1", nginx.port, proxy=f"https://127.0.0.1:{hostile.port}",
                                               **kw)

    run(main())
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"] * 4
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"] and hostile.served == 0


# ---- urllib (mtls.http)

def test_urllib_https_proxy_from_the_environment_tunnels_through_libmtls(pki, nginx, start_tinyproxy, hostile,
                                                                         monkeypatch):
    proxy = start_tinyproxy(nginx.port)
    handler = mtls.http.HTTPSHandler(identity=identity(pki, "client-a"), policy=pinned(pki))
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    body = urllib.request.build_opener(handler).open(nginx.url + "/", timeout=10).read().decode()
    assert body.startswith(f"hello {CLIENT_A_DN} ")
    assert proxy.connects() == [f"127.0.0.1:{nginx.port}"]
    monkeypatch.setenv("HTTPS_PROXY", hostile.url)
    with pytest.raises(mtls.TrustError):
        urllib.request.build_opener(handler).open(nginx.url + "/", timeout=10)
    assert hostile.targets == [f"127.0.0.1:{nginx.port}"] and hostile.served == 0



def test_tunnel_sockets_are_closed_with_their_connections(pki, nginx, start_tinyproxy, hostile, monkeypatch):
    """mtls_conn_wrap_fd leaves the socket to its caller: each tunnel's socket is closed when its
    connection closes, after a refused server and a refused tunnel too. The test keeps every
    tunnel socket referenced, so only an explicit close (not the garbage collector) closes it."""
    import mtls._proxy
    proxy = start_tinyproxy(nginx.port, basic_auth=("alice", "s3cret"))
    authed = f"http://alice:s3cret@127.0.0.1:{proxy.port}"
    opened: List[socket.socket] = []
    real_open = mtls._proxy.open_tunnel

    def recording_open(*args, **kwargs) -> socket.socket:
        sock = real_open(*args, **kwargs)
        opened.append(sock)
        return sock

    monkeypatch.setattr(mtls._proxy, "open_tunnel", recording_open)
    real_create = socket.create_connection
    attempted: List[socket.socket] = []

    def recording_create(address, *args, **kwargs) -> socket.socket:
        sock = real_create(address, *args, **kwargs)
        if address[1] in (proxy.port, hostile.port):  # not the hostile proxy's own connections
            attempted.append(sock)
        return sock

    monkeypatch.setattr(mtls._proxy.socket, "create_connection", recording_create)
    with adapter_session(mtls.requests.Adapter(identity=identity(pki, "client-a"), policy=pinned(pki))) as s:
        assert s.get(nginx.url + "/", proxies={"https": authed}).status_code == 200
        assert opened[0].fileno() != -1  # kept alive in the pool while the session is open
        with pytest.raises(mtls.TrustError):
            s.get(nginx.url + "/", proxies={"https": hostile.url})
        with pytest.raises(requests.exceptions.ProxyError):
            s.get(nginx.url + "/", proxies={"https": proxy.url})  # 407: the tunnel is refused
    t = mtls.httpx.Transport(identity=identity(pki, "client-a"), policy=pinned(pki), proxy=authed)
    with httpx.Client(transport=t) as c:
        assert c.get(nginx.url + "/").status_code == 200
    assert len(opened) == 3 and len(attempted) == 4  # three tunnels opened, one refused
    # A response's file (makefile) holds its connection open until it is collected, as on a
    # direct connection; collecting it closes the connection, which must close the socket.
    gc.collect()
    assert [sock.fileno() for sock in attempted] == [-1] * 4
