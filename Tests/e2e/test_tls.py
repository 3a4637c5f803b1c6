"""Connections end to end: the mtls CLI as a client against openssl s_server, nginx, GnuTLS's
gnutls-serv, Java (JSSE) and Go (crypto/tls) servers and Python's ssl server, and `mtls serve`
against openssl s_client, curl, GnuTLS's gnutls-cli, Java, Go and Python ssl clients. Every peer
is started here on 127.0.0.1 (ephemeral ports) and stopped after."""
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

import nginx_server
import pha_server
from conftest import TEST_PKI, free_port, run_cli, untimed, wait_port, write_secret

HERE = os.path.dirname(os.path.abspath(__file__))
PKI_SCRIPT = os.path.join(HERE, "..", "..", "scripts", "test-pki.sh")
HTTP_GET = "GET / HTTP/1.0\\r\\nHost: server.test\\r\\n\\r\\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls-pki")
    subprocess.run([PKI_SCRIPT, str(d)], check=True)
    return lambda name: str(d / name)


class Peer:
    """A peer process started by a test and always stopped."""

    def __init__(self, args, port, **kw):
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, **kw)
        self.port = port
        wait_port(port, self.proc)

        self.seen = ""

    def output_until(self, done, timeout=30):
        """The peer's output so far, read until `done(output)` holds, the peer exits or `timeout`
        seconds pass — a verdict is waited for, not raced against a fixed sleep."""
        import select
        fd = self.proc.stdout.fileno()
        end = time.time() + timeout
        while not done(self.seen) and time.time() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.time()))
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.seen += chunk.decode(errors="replace")
        return self.seen

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rest = self.proc.stdout.read() if self.proc.stdout else ""
        self.seen += rest or ""
        return self.seen


@pytest.fixture
def peers():
    started = []
    yield started
    for p in started:
        p.stop()


def s_server(pki, peers, server="server", extra=(), cafile="root.pem"):
    port = free_port()
    args = ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-quiet", "-www",
            "-cert", pki(f"{server}.pem"), "-key", pki(f"{server}.key"),
            "-Verify", "1", "-CAfile", pki(cafile), "-verify_return_error", *extra]
    if server in ("server", "server-rsa"):
        args += ["-cert_chain", pki("int-a.pem")]
    p = Peer(args, port)
    peers.append(p)
    return port


def gnutls_serv(pki, peers):
    port = free_port()
    p = Peer(["gnutls-serv", "--port", str(port), "--http", "--x509certfile", pki("server-chain.pem"),
              "--x509keyfile", pki("server.key"), "--x509cafile", pki("root.pem"), "--require-client-cert",
              "--verify-client-cert"], port)
    peers.append(p)
    return port


def connect(pki, port, *args, identity="client-a", anchor="root", host="127.0.0.1"):
    cmd = ["connect", f"{host}:{port}", "--json", "--timeout", "5"]
    if identity:
        cmd += ["--identity", pki(f"{identity}.p12"), "--password-file", pki("password.txt")]
    if anchor:
        cmd += ["--anchor", pki(f"{anchor}.pem"), "--anchors-only"]
    r = run_cli(*cmd, *args)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"no JSON: {r.stdout!r} {r.stderr!r}")
    assert set(out) == {"connected", "tls_version", "alpn", "peer_chain", "evaluation", "error", "error_code",
                        "side", "response"}
    assert (r.returncode == 0) == out["connected"], (r.returncode, out)
    # error_code and side come with error, and only with it
    assert (out["error"] is None) == (out["error_code"] is None) == (out["side"] is None), out
    assert out["side"] in (None, "client", "server"), out
    return out


# ---- libmtls client -> openssl s_server -Verify 1 (and gnutls-serv)

@pytest.mark.parametrize("version", ["1.2", "1.3"])
@pytest.mark.parametrize("identity", ["client-a", "client-a-rsa"])
@pytest.mark.parametrize("server", ["openssl s_server", "gnutls-serv"])
def test_client_to_servers_tls_versions_and_key_types(pki, peers, server, version, identity):
    # Two TLS stacks' servers requiring a client certificate: OpenSSL's and GnuTLS's.
    start, page = {"openssl s_server": (s_server, "200 ok"),
                   "gnutls-serv": (gnutls_serv, 'This is <a href="http://www.gnu.org/software/gnutls">GnuTLS</a>')}[server]
    port = start(pki, peers)
    out = connect(pki, port, "--verify-as", "server.test", "--tls-min", version, "--tls-max", version,
                  "--send", HTTP_GET, identity=identity)
    assert out["connected"], out
    assert out["tls_version"] == f"TLSv{version}"
    assert out["evaluation"]["trusted"] is True and out["evaluation"]["kind"] == "proceed"
    assert page in out["response"], out
    assert len(out["peer_chain"]) == 2


def test_client_to_rsa_server(pki, peers):
    port = s_server(pki, peers, server="server-rsa")
    out = connect(pki, port, "--verify-as", "server.test", "--send", HTTP_GET)
    assert out["connected"] and "200 ok" in out["response"], out


@pytest.mark.parametrize("anchor", ["root", "int-a", "server"])
def test_pinned_root_intermediate_or_leaf(pki, peers, anchor):
    port = s_server(pki, peers)
    out = connect(pki, port, "--verify-as", "server.test", anchor=anchor)
    assert out["connected"], out
    assert out["evaluation"]["trusted"] is True


def test_connect_by_ip_validates_as_dns_name(pki, peers):
    port = s_server(pki, peers)
    assert connect(pki, port, "--verify-as", "server.test")["connected"]
    out = connect(pki, port)  # validated as 127.0.0.1, which the certificate does not name
    assert not out["connected"]
    assert out["evaluation"]["trusted"] is False
    assert out["evaluation"]["reasons"], out


def test_connect_by_name_sends_sni(pki, peers):
    port = s_server(pki, peers)
    out = connect(pki, port, host="localhost")
    assert out["connected"], out


def test_untrusted_server_is_refused_with_reasons(pki, peers):
    port = s_server(pki, peers, server="other-server")
    out = connect(pki, port, "--verify-as", "server.test")
    assert not out["connected"]
    assert out["evaluation"]["trusted"] is False and out["evaluation"]["reasons"]
    assert "our evaluation" in out["error"]
    assert out["error_code"] == "untrusted" and out["side"] == "client", out
    assert len(out["peer_chain"]) == 1


def test_wrong_pin_is_refused(pki, peers):
    port = s_server(pki, peers)
    wrong = "sha256/" + "A" * 43 + "="
    out = connect(pki, port, "--verify-as", "server.test", "--pin", wrong)
    assert not out["connected"]
    assert out["evaluation"]["trusted"] is False
    assert any("pin" in r["code"] for r in out["evaluation"]["reasons"]), out


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_server_rejecting_our_certificate_is_the_peers_alert(pki, peers, version):
    port = s_server(pki, peers)
    out = connect(pki, port, "--verify-as", "server.test", "--tls-max", version, "--tls-min", version,
                  identity="client-c")
    assert not out["connected"]
    assert "alert" in out["error"], out
    assert out["error_code"] == "peer_alert" and out["side"] == "server", out
    assert out["evaluation"]["trusted"] is True  # we trusted the server; it refused us


def test_no_certificate_when_server_requires_one(pki, peers):
    port = s_server(pki, peers)
    out = connect(pki, port, "--verify-as", "server.test", identity=None)
    assert not out["connected"]
    assert 'alert "certificate required"' in out["error"], out
    assert out["error_code"] == "peer_alert" and out["side"] == "server", out


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_refusal_says_why_our_certificate_did_not_fit_the_request(pki, peers, version):
    # A server that takes client signatures only as RSA-PSS: OpenSSL sends no certificate for an EC
    # identity, and the server's refusal alone would not say why. The error keeps its code and side.
    port = s_server(pki, peers, extra=("-client_sigalgs", "rsa_pss_rsae_sha256"))
    out = connect(pki, port, "--verify-as", "server.test", "--tls-max", version, "--send", HTTP_GET)
    assert not out["connected"] and out["error_code"] == "peer_alert" and out["side"] == "server", out
    assert out["error"].endswith("our certificate does not fit its certificate request: the server accepts no "
                                 "signature scheme for our EC P-256 key (it accepts rsa_pss_rsae_sha256)"), out
    assert connect(pki, port, "--verify-as", "server.test", "--tls-max", version, "--send", HTTP_GET,
                   identity="client-a-rsa")["connected"]
    # A server that names another root: the CA names it sent are in the error.
    port = s_server(pki, peers, cafile="other-root.pem")
    out = connect(pki, port, "--verify-as", "server.test", "--send", HTTP_GET)
    assert not out["connected"] and out["error_code"] == "peer_alert", out
    assert "no certificate on its path is issued by a CA the server names (\"CN=Other Root,O=libmtls test\")" in out["error"], out


def test_refused_connection(pki):
    out = connect(pki, free_port())
    assert not out["connected"] and "connect" in out["error"]
    assert out["error_code"] == "connect" and out["side"] == "server", out


def test_bad_identity_file_is_the_clients_error(pki, tmp_path):
    write_secret((tmp_path / "wrong.txt"), "not the password\n")
    r = run_cli("connect", f"127.0.0.1:{free_port()}", "--json", "--identity", pki("client-a.p12"),
                "--password-file", tmp_path / "wrong.txt")
    out = json.loads(r.stdout)
    assert r.returncode != 0 and not out["connected"]
    assert out["error_code"] == "bad_password" and out["side"] == "client", out


# ---- libmtls client -> nginx with ssl_verify_client on

@pytest.fixture
def nginx(pki, tmp_path):
    srv = nginx_server.start(tmp_path / "nginx", server_chain=pki("server-chain.pem"), server_key=pki("server.key"),
                             client_ca=pki("root.pem"))
    yield srv.port
    srv.stop()


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_client_to_nginx_verify_client_on(pki, nginx, version):
    out = connect(pki, nginx, "--verify-as", "server.test", "--tls-min", version, "--tls-max", version,
                  "--send", HTTP_GET)
    assert out["connected"], out
    assert "200 OK" in out["response"] and "CN=client-a" in out["response"], out


def test_nginx_refuses_certificate_from_another_root(pki, nginx):
    out = connect(pki, nginx, "--verify-as", "server.test", "--send", HTTP_GET, identity="client-c")
    # nginx finishes the handshake and answers 400 (or drops the connection).
    assert not out["connected"] or "400" in (out["response"] or ""), out


# ---- libmtls client -> Python ssl server requiring a client certificate

def python_tls_server(pki, version=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki("server-chain.pem"), pki("server.key"))
    ctx.load_verify_locations(pki("root.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    seen = []

    def serve():
        sock.settimeout(15)
        try:
            raw, _ = sock.accept()
            with ctx.wrap_socket(raw, server_side=True) as s:
                seen.append(dict(x[0] for x in s.getpeercert()["subject"]))
                data = s.recv(1024)
                s.sendall(b"python says " + data)
                # close_notify ends the reply cleanly (a hang-up without it is a truncated reply:
                # test_truncation.py); the client's close_notify back is not waited for.
                try:
                    s.unwrap()
                except (ssl.SSLError, OSError):
                    pass
        except Exception as e:  # noqa: BLE001 - reported to the test
            seen.append(e)
        finally:
            sock.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, seen, t


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_client_to_python_ssl_server(pki, version):
    port, seen, t = python_tls_server(pki, version)
    out = connect(pki, port, "--verify-as", "server.test", "--send", "hi")
    t.join(10)
    assert out["connected"], out
    assert out["response"] == "python says hi"
    assert seen and seen[0]["commonName"] == "client-a"


def test_server_asking_for_the_certificate_after_the_handshake(pki):
    # TLS 1.3 post-handshake authentication, as Apache httpd does for a per-location
    # SSLVerifyClient: the server asks once it has read the request, and gets the same identity.
    port, seen, t = pha_server.start(pki("server-chain.pem"), pki("server.key"), pki("root.pem"))
    out = connect(pki, port, "--verify-as", "server.test", "--send", "GET /admin\\n")
    t.join(10)
    assert "error" not in seen, seen
    assert seen["request"] == b"GET /admin\n" and not seen["during handshake"] and seen["after"] == "client-a", seen
    assert out["connected"] and out["response"] == "asked\nhello client-a\n", out


def test_python_ssl_server_rejects_other_customer_root(pki):
    port, seen, t = python_tls_server(pki)
    out = connect(pki, port, "--verify-as", "server.test", "--send", "hi", identity="client-c")
    t.join(10)
    assert not out["connected"], out
    assert isinstance(seen[0], ssl.SSLError)


# ---- libmtls client -> GnuTLS (gnutls-serv --require-client-cert), another TLS stack's server

def test_gnutls_serv_requiring_a_certificate_we_do_not_have(pki, peers):
    port = gnutls_serv(pki, peers)
    out = connect(pki, port, "--verify-as", "server.test", "--send", "x", identity=None)
    assert not out["connected"] and out["side"] == "server" and out["error_code"] == "peer_alert", out
    assert "certificate required" in out["error"], out


# ---- libmtls client -> Java (JSSE) and Go (crypto/tls) servers requiring a client certificate

FIXTURES = os.path.join(HERE, "..", "fixtures")


class OtherStack:
    """A TLS peer written against another stack's API (Tests/fixtures/java/TlsPeer.java,
    Tests/fixtures/go/tlspeer.go), built once per module; both take the same roles and print the
    same lines. Java reads the .p12 files, Go the PEM chain and key."""

    def __init__(self, name, command, p12):
        self.name, self.command, self.p12 = name, command, p12

    def identity(self, pki, name):
        if name is None:
            return ["-", "-"]
        return [pki(f"{name}.p12"), pki("password.txt")] if self.p12 else [pki(f"{name}-chain.pem"), pki(f"{name}.key")]

    def server(self, pki, port, client_anchor):
        return [*self.command, "server", str(port), *self.identity(pki, "server"), pki(client_anchor)]

    def client(self, pki, port, host, identity, *version):
        return [*self.command, "client", str(port), host, *self.identity(pki, identity), pki("root.pem"), *version]


@pytest.fixture(scope="module", params=["java", "go"])
def other_stack(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    if request.param == "java":
        subprocess.run(["javac", "-d", str(out), os.path.join(FIXTURES, "java", "TlsPeer.java")],
                       check=True, capture_output=True)
        return OtherStack("java", ["java", "-cp", str(out), "TlsPeer"], p12=True)
    env = dict(os.environ, GOCACHE=str(out / "cache"), GOPATH=str(out / "gopath"), GO111MODULE="off")
    subprocess.run(["go", "build", "-o", str(out / "tlspeer"), os.path.join(FIXTURES, "go", "tlspeer.go")],
                   check=True, capture_output=True, env=env)
    return OtherStack("go", [str(out / "tlspeer")], p12=False)


# What each stack says when it refuses: (our client from another customer, our client without a
# certificate) as alerts it sends; (its client refused by mtls serve, its name check of our server).
REFUSALS = {"java": (("certificate unknown", "bad certificate"), ("certificate_required", "No subject alternative names")),
            "go": (("bad certificate", "bad certificate"), ("certificate required", "not wrong.test"))}


def test_client_to_other_stacks_servers(pki, peers, other_stack):
    port = free_port()
    server = Peer(other_stack.server(pki, port, "int-a.pem"), port)
    peers.append(server)
    for identity, version in (("client-a", "1.3"), ("client-a-rsa", "1.2")):
        out = connect(pki, port, "--verify-as", "server.test", "--tls-max", version, "--send", "hi there\\n",
                      identity=identity)
        assert out["connected"] and out["tls_version"] == f"TLSv{version}", out
        assert out["response"] == f"hello CN={identity},O=libmtls test: hi there\n", out
    # Another customer's certificate and a missing one are refused, each with the stack's alert.
    (other_customer, missing), _ = REFUSALS[other_stack.name]
    out = connect(pki, port, "--verify-as", "server.test", "--send", "x\\n", identity="client-b")
    assert not out["connected"] and out["side"] == "server" and f'"{other_customer}"' in out["error"], out
    out = connect(pki, port, "--verify-as", "server.test", "--send", "x\\n", identity=None)
    assert not out["connected"] and out["side"] == "server" and f'"{missing}"' in out["error"], out
    log = server.output_until(lambda log: log.count("accepted") >= 2)
    assert "accepted TLSv1.3 CN=client-a," in log and "accepted TLSv1.2 CN=client-a-rsa," in log, log


# ---- clients -> mtls serve

@pytest.fixture
def mtls_server(pki, peers):
    """`mtls serve` accepting customer A's clients only (anchor: its intermediate)."""
    port = free_port()
    p = Peer([os.environ.get("MTLS_CLI", "mtls"), "serve", "--port", str(port), "--identity", pki("server.p12"),
              "--password-file", pki("password.txt"), "--client-anchor", pki("int-a.pem"),
              "--require-client-cert"], port)
    peers.append(p)
    return p


def server_log(p, done):
    """The server's log once `done(log)` holds: it prints each verdict after closing with the
    client, which the client may see first (the port probe of wait_port adds a "rejected" line
    of its own)."""
    p.output_until(done)
    return p.stop()


def verdicts(log, word):
    """The server's verdict lines that start with `word` ("accepted", "rejected") and are about a
    client that got as far as presenting a certificate or refusing one (not the port probe)."""
    return [line for line in untimed(log).splitlines() if line.startswith(word) and "closed the connection" not in line]


def s_client(pki, port, *args, data=b"hello\n"):
    """openssl s_client sends `data`; returns once `mtls serve` has echoed it back or s_client has
    ended (refused). s_client -quiet never closes by itself: waiting for it to end waited for the
    server's 10 s idle timeout in every accepted case."""
    p = subprocess.Popen(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "server.test",
                          "-CAfile", pki("root.pem"), "-verify_return_error", "-quiet", *args],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data)
        p.stdin.flush()
    except BrokenPipeError:
        pass  # refused before it read its input
    out, fd, end = b"", p.stdout.fileno(), time.monotonic() + 20
    while data.strip() not in out and time.monotonic() < end:
        if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    if p.poll() is None:
        p.terminate()
    rest, err = p.communicate(timeout=20)
    return subprocess.CompletedProcess(p.args, p.returncode, out + rest, err)


def test_s_client_from_right_intermediate_is_accepted(pki, mtls_server):
    r = s_client(pki, mtls_server.port, "-cert", pki("client-a.pem"), "-key", pki("client-a.key"),
                 "-cert_chain", pki("int-a.pem"))
    assert b"hello" in r.stdout, r
    log = server_log(mtls_server, lambda log: verdicts(log, "accepted"))
    assert "accepted" in log and "CN=client-a" in log and "trusted" in log, log


def test_s_client_from_other_customer_is_rejected(pki, mtls_server):
    r = s_client(pki, mtls_server.port, "-cert", pki("client-b.pem"), "-key", pki("client-b.key"),
                 "-cert_chain", pki("int-b.pem"))
    assert b"hello" not in r.stdout
    log = server_log(mtls_server, lambda log: verdicts(log, "rejected"))
    # Rejected by our evaluation (the other customer's intermediate is not the client anchor),
    # not merely disconnected.
    [line] = verdicts(log, "rejected")
    assert "our evaluation rejected the client's certificate" in line and line.endswith("[untrusted]"), log


def test_s_client_without_certificate_is_rejected(pki, mtls_server):
    r = s_client(pki, mtls_server.port)
    assert b"hello" not in r.stdout
    assert "no certificate" in server_log(mtls_server, lambda log: "no certificate" in log)


def curl(pki, port, *args):
    return subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", pki("root.pem"),
                           "--resolve", f"server.test:{port}:127.0.0.1", f"https://server.test:{port}/", *args],
                          capture_output=True, text=True)


def test_curl_with_client_cert(pki, mtls_server):
    r = curl(pki, mtls_server.port, "--cert", pki("client-a-chain.pem"), "--key", pki("client-a.key"))
    assert r.returncode == 0 and r.stdout == "hello client-a\n", r


def test_curl_other_customer_and_no_cert_rejected(pki, mtls_server):
    # Each refusal names its cause: the listener's alert reaches curl (exit 56: TLS 1.3 reports it
    # on the first read).
    r = curl(pki, mtls_server.port, "--cert", pki("client-b-chain.pem"), "--key", pki("client-b.key"))
    assert r.returncode == 56 and "alert unknown ca" in r.stderr, r
    r = curl(pki, mtls_server.port)
    assert r.returncode == 56 and "alert certificate required" in r.stderr, r
    log = server_log(mtls_server, lambda log: log.count("[untrusted]") >= 2)
    assert log.count("[untrusted]") == 2, log


def python_client(pki, port, identity):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki("root.pem"))
    if identity:
        ctx.load_cert_chain(pki(f"{identity}-chain.pem"), pki(f"{identity}.key"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="server.test") as s:
            s.sendall(b"ping")
            return s.recv(100)


def gnutls_cli(pki, port, *args, data="hello\n", priority="NORMAL"):
    return subprocess.run(["gnutls-cli", "--port", str(port), "127.0.0.1", "--sni-hostname", "server.test",
                           "--verify-hostname", "server.test", "--x509cafile", pki("root.pem"),
                           "--priority", priority, *args],
                          input=data, capture_output=True, text=True, timeout=20)


def test_gnutls_cli_against_mtls_serve(pki, mtls_server):
    # Another TLS stack's client: customer A's certificate over TLS 1.3 and 1.2 is served; customer
    # B's gets the unknown-CA alert and no certificate the certificate-required alert.
    for priority in ("NORMAL", "NORMAL:-VERS-TLS1.3"):
        r = gnutls_cli(pki, mtls_server.port, "--x509certfile", pki("client-a-chain.pem"),
                       "--x509keyfile", pki("client-a.key"), priority=priority)
        assert r.returncode == 0 and "hello" in r.stdout.split("Handshake was completed", 1)[-1], r
    r = gnutls_cli(pki, mtls_server.port, "--x509certfile", pki("client-b-chain.pem"), "--x509keyfile", pki("client-b.key"))
    assert r.returncode != 0 and "CA is unknown" in r.stdout + r.stderr, r
    r = gnutls_cli(pki, mtls_server.port)
    assert r.returncode != 0 and "Certificate is required" in r.stdout + r.stderr, r
    log = server_log(mtls_server, lambda log: log.count("[untrusted]") >= 2 and len(verdicts(log, "accepted")) >= 2)
    assert [v.split()[2] for v in verdicts(log, "accepted")] == ["TLSv1.3", "TLSv1.2"], log
    assert "CN=client-a" in log and log.count("[untrusted]") == 2, log


def test_other_stacks_clients_against_mtls_serve(pki, mtls_server, other_stack):
    def client(identity, *version, host="server.test"):
        return subprocess.run(other_stack.client(pki, mtls_server.port, host, identity, *version),
                              capture_output=True, text=True, timeout=60)
    for identity, version in (("client-a", "TLSv1.3"), ("client-a-rsa", "TLSv1.2")):
        r = client(identity, version)
        assert r.returncode == 0 and r.stdout == f"{version} ping\n", r
    # Both stacks offer only a certificate issued under the CA names the server asks for: customer
    # B's client sends none and is refused like a client without one.
    required, name_check = REFUSALS[other_stack.name][1]
    for identity in ("client-b", None):
        r = client(identity)
        assert r.returncode == 1 and required in r.stdout, r
    r = client("client-a", host="wrong.test")  # the stack's own name check of our server
    assert r.returncode == 1 and name_check in r.stdout, r
    log = server_log(mtls_server, lambda log: log.count("[untrusted]") >= 2 and "[peer_alert]" in log)
    assert [v.split()[2] for v in verdicts(log, "accepted")] == ["TLSv1.3", "TLSv1.2"], log
    assert log.count("the client presented no certificate") == 2, log


def test_python_clients_against_mtls_serve(pki, mtls_server):
    assert python_client(pki, mtls_server.port, "client-a") == b"ping"
    for identity in ("client-b", None):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            python_client(pki, mtls_server.port, identity)
    log = server_log(mtls_server, lambda log: log.count("accepted") >= 1 and log.count("[untrusted]") >= 2)
    assert log.count("accepted") == 1 and log.count("[untrusted]") == 2, log


# ---- automatic identity selection among a store's identities

def test_automatic_identity_picks_the_one_the_server_asks_for(pki, peers, tmp_path):
    store, secret = tmp_path / "s.db", tmp_path / "secret"
    write_secret(secret, "store secret\n")
    # The store lists identities in label order: the right one (client-a) is labelled to come
    # LAST, after client-b, which the server would also accept (its chain reaches root.pem), so
    # taking the first candidate or any acceptable one is caught.
    labels = {"a-customer-c": "client-c", "b-customer-b": "client-b", "z-customer-a": "client-a"}
    for label, name in labels.items():
        r = run_cli("store", "--store", store, "--secret-file", secret, "import", pki(f"{name}.p12"),
                    "--label", label, "--password-file", pki("password.txt"))
        assert r.returncode == 0, r.stderr
    listed = json.loads(run_cli("store", "--store", store, "--secret-file", secret, "list", "--json").stdout)
    assert [i["label"] for i in listed] == sorted(labels), listed  # client-a really is the last candidate
    # s_server lists the CAs of -CAfile in its CertificateRequest: customer A's intermediate only.
    port = s_server(pki, peers, cafile="int-a.pem", extra=["-verifyCAfile", pki("root.pem")])
    r = run_cli("connect", f"127.0.0.1:{port}", "--store", store, "--secret-file", secret, "--identity", "auto",
                "--anchor", pki("root.pem"), "--verify-as", "server.test", "--send", HTTP_GET)
    assert r.returncode == 0, r.stderr
    assert "presented client-a" in r.stdout, r.stdout

    # The server's view: s_server -www prints the certificate the client presented.
    def pem_body(name):
        return "".join(open(pki(f"{name}.pem")).read().split("-----")[2].split())
    seen = "".join(r.stdout.split("-----BEGIN CERTIFICATE-----", 1)[1].split("-----END")[0].split())
    assert seen == pem_body("client-a"), r.stdout
    assert seen not in (pem_body("client-b"), pem_body("client-c"))


# ---- examples/curl_fetch.c: libcurl with CURLOPT_SSL_CTX_FUNCTION -> mtls_ssl_ctx_configure

@pytest.fixture(scope="module")
def curl_fetch(tmp_path_factory):
    prefix = os.environ.get("MTLS_PREFIX")
    assert prefix, "MTLS_PREFIX (the installed prefix) is not set: run the tests through make test-e2e"
    exe = str(tmp_path_factory.mktemp("curl-example") / "curl_fetch")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls", "libcurl"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", exe,
                    os.path.join(HERE, "..", "..", "examples", "curl_fetch.c"), *flags], check=True)
    return exe


def test_curl_example_with_p12_and_pinned_root(pki, peers, curl_fetch):
    port = s_server(pki, peers)
    args = [curl_fetch, "--p12", pki("client-a.p12"), "--password-file", pki("password.txt"),
            "--resolve", f"server.test:{port}:127.0.0.1", f"https://server.test:{port}/"]
    r = subprocess.run(args + ["--anchor", pki("root.pem")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "<HTML>" in r.stdout and "BEGIN CERTIFICATE" in r.stdout  # s_server shows the client's certificate
    # Another anchor: libmtls's evaluator refuses the server inside libcurl's handshake.
    r = subprocess.run(args + ["--anchor", pki("other-root.pem")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "<HTML>" not in r.stdout, r
    assert "peer certificate" in r.stderr and "not OK" in r.stderr, r.stderr  # CURLE_PEER_FAILED_VERIFICATION


def test_curl_example_with_stored_identity(pki, peers, curl_fetch, tmp_path):
    store, secret = tmp_path / "s.db", tmp_path / "secret"
    write_secret(secret, "store secret\n")
    r = run_cli("store", "--store", store, "--secret-file", secret, "import", pki("client-a.p12"),
                "--label", "laptop", "--password-file", pki("password.txt"))
    assert r.returncode == 0, r.stderr
    port = s_server(pki, peers)
    r = subprocess.run([curl_fetch, "--store", str(store), "--secret-file", str(secret), "--label", "laptop",
                        "--anchor", pki("root.pem"), "--resolve", f"server.test:{port}:127.0.0.1",
                        f"https://server.test:{port}/"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "<HTML>" in r.stdout and "BEGIN CERTIFICATE" in r.stdout


def test_policy_file_host_rule_verify_as_and_pin(pki, peers, tmp_path):
    port = s_server(pki, peers)
    pin = run_cli("cert", "show", pki("int-a.pem"), "--json")
    spki = json.loads(pin.stdout)[0]["spki_pin"] if pin.returncode == 0 else None
    rule = {"host": f"127.0.0.1:{port}", "verify_as": "server.test"}
    if spki:
        rule["pins"] = [spki, "sha256/" + "B" * 43 + "="]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"version": 1, "anchors": [pki("root.pem")], "anchors_only": True, "hosts": [rule]}))
    out = connect(pki, port, "--policy", policy, anchor=None)
    assert out["connected"], out
    # The same rule for another port does not apply: validated as 127.0.0.1, refused.
    rule["host"] = f"127.0.0.1:{port + 1}"
    policy.write_text(json.dumps({"version": 1, "anchors": [pki("root.pem")], "anchors_only": True, "hosts": [rule]}))
    out = connect(pki, port, "--policy", policy, anchor=None)
    assert not out["connected"] and out["evaluation"]["trusted"] is False


def test_python_example_client(pki, peers):
    port = s_server(pki, peers)
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "bindings", "python", "src"))
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "examples", "mtls_connect.py"),
                        f"127.0.0.1:{port}", "--p12", pki("client-a.p12"), "--password-file", pki("password.txt"),
                        "--anchor", pki("root.pem"), "--verify-as", "server.test"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "evaluation: trusted" in r.stdout and "200 ok" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "examples", "mtls_connect.py"),
                        f"127.0.0.1:{port}", "--p12", pki("client-a.p12"), "--password-file", pki("password.txt"),
                        "--anchor", pki("other-root.pem"), "--verify-as", "server.test"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "untrusted" in r.stderr, r.stderr


def test_sni_is_kept_apart_from_address_and_validation_name(pki, peers):
    # s_server answers SNI "alt.test" with the RSA certificate, anything else with the EC one.
    port = s_server(pki, peers, extra=["-servername", "alt.test", "-cert2", pki("server-rsa.pem"),
                                       "-key2", pki("server-rsa.key")])
    sha = lambda name: json.loads(run_cli("cert", "show", pki(name), "--json").stdout)[0]["sha256"]  # noqa: E731
    by_sni = connect(pki, port, "--sni", "alt.test", "--verify-as", "server.test", anchor="root")
    assert by_sni["peer_chain"][0] == sha("server-rsa.pem"), by_sni
    by_ip = connect(pki, port, "--verify-as", "server.test")  # an IP address: no SNI sent
    assert by_ip["peer_chain"][0] == sha("server.pem"), by_ip


# ---- mtls serve --count N: the last client is served to the end before the server exits

def test_serve_count_serves_the_last_client_fully(pki):
    p = subprocess.Popen([os.environ.get("MTLS_CLI", "mtls"), "serve", "--port", "0", "--count", "2",
                          "--identity", pki("server.p12"), "--password-file", pki("password.txt"),
                          "--client-anchor", pki("int-a.pem"), "--require-client-cert"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        assert first.startswith("listening on 127.0.0.1:"), first
        port = int(first.rsplit(":", 1)[1])
        # An echo client that takes its time: the server must still answer it and close cleanly.
        assert python_client(pki, port, "client-a") == b"ping"
        out = connect(pki, port, "--verify-as", "server.test", "--send", HTTP_GET)
        assert out["connected"], out
        assert out["response"].startswith("HTTP/1.1 200 OK") and out["response"].endswith("hello client-a\n"), out
        assert p.wait(20) == 0, p.stderr.read()
        log = p.stdout.read()
        assert log.count("accepted") == 2, log
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_automatic_identity_matches_the_curve_to_the_servers_tls13_schemes(pki, peers, tmp_path):
    # A P-384 identity of customer A, stored under a label that sorts before client-a (P-256).
    d = tmp_path
    subprocess.run(
        f"cp {pki('int-a.pem')} {pki('int-a.key')} . && {TEST_PKI} --leaf . p384 p384 client-p384 int-a && "
        f"openssl pkcs12 -export -inkey p384.key -in p384.pem -certfile {pki('client-a-cas.pem')} "
        f"-passout pass:pw -out p384.p12",
        shell=True, cwd=d, check=True, capture_output=True)
    store, secret = d / "s.db", d / "secret"
    write_secret(secret, "store secret\n")
    for label, p12 in (("a-p384", str(d / "p384.p12")), ("a-rsa", pki("client-a-rsa.p12")),
                       ("b-p256", pki("client-a.p12"))):
        r = run_cli("store", "--store", store, "--secret-file", secret, "import", p12, "--label", label,
                    "--password-file", pki("password.txt"))
        assert r.returncode == 0, r.stderr
    # RSA signs in TLS 1.3 only with PSS: rsa_pkcs1_sha256 in the server's list is not enough.
    for sigalg, chosen in (("ECDSA+SHA256", "client-a"), ("ECDSA+SHA384", "client-p384"),
                           ("RSA+SHA256:ECDSA+SHA256", "client-a"), ("RSA-PSS+SHA256", "client-a-rsa")):
        port = s_server(pki, peers, extra=["-tls1_3", "-client_sigalgs", sigalg])
        r = run_cli("connect", f"127.0.0.1:{port}", "--store", store, "--secret-file", secret, "--identity", "auto",
                    "--anchor", pki("root.pem"), "--verify-as", "server.test", "--send", HTTP_GET)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"presented {chosen}\n" in r.stdout, r.stdout  # the line ends with the chosen name


# ---- examples/connect.c: a plain C client (p12, pinned anchor, connect, send, evaluation)

@pytest.fixture(scope="module")
def connect_example(tmp_path_factory):
    prefix = os.environ["MTLS_PREFIX"]
    exe = str(tmp_path_factory.mktemp("connect-example") / "connect")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", exe,
                    os.path.join(HERE, "..", "..", "examples", "connect.c"), *flags], check=True)
    return exe


def test_connect_example_against_mtls_serve(pki, mtls_server, connect_example):
    args = [connect_example, "--p12", pki("client-a.p12"), "--password-file", pki("password.txt"),
            "--verify-as", "server.test", "--send", HTTP_GET]
    r = subprocess.run(args + ["--anchor", pki("root.pem"), "127.0.0.1", str(mtls_server.port)],
                       capture_output=True, text=True, timeout=30, env=dict(os.environ, LD_LIBRARY_PATH=""))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "evaluation: trusted" in r.stdout and "connected: TLSv1.3" in r.stdout, r.stdout
    assert "peer[0] CN=server.test" in r.stdout and r.stdout.endswith("hello client-a\n"), r.stdout
    # Another anchor: our evaluation refuses the server, and the example prints why.
    r = subprocess.run(args + ["--anchor", pki("other-root.pem"), "127.0.0.1", str(mtls_server.port)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "hello" not in r.stdout, r.stdout + r.stderr
    assert "evaluation: untrusted" in r.stdout and "  reason " in r.stdout, r.stdout
    assert "handshake:" in r.stderr and "(untrusted)" in r.stderr, r.stderr
