"""A hostile ACME server (issue 41 item 4, issue 35 items 6 and 11): a hand-written CA on
127.0.0.1 whose problem details hold ESC, C1 (U+009B, a CSI on many terminals), U+202E and a
CR LF followed by a forged `renewal_succeeded` line; which issues a certificate whose name holds
U+202E; which asks to authorize a name the order never requested; and which picks the token of
a webroot challenge where someone planted a link. What `mtls` prints (text and JSON, stdout and
stderr, `renew --loop`'s log) is checked byte by byte for none of those characters; the dns-01
hook and the webroot are checked for what they did."""
import base64
import datetime
import http.server
import ipaddress
import json
import os
import select
import ssl
import subprocess
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import CLI, free_port, write_secret

HOSTILE = ("denied\x1b[2J\x1b]0;pwned\x07 \u009b31m \u202eevil\u2066 \u0085\u2028"
           "\r\nrenewal_succeeded label=web renewed: serial 01 until 2099-01-01T00:00:00Z")
# The raw forms that must not reach a terminal: ESC, C1 U+009B and NEL in UTF-8, the bidi
# override and isolate, the separators, a carriage return.
FORBIDDEN = [b"\x1b", b"\xc2\x9b", b"\xc2\x85", "\u202e".encode(), "\u2066".encode(), "\u2028".encode(), b"\r", b"\x07"]
RTL_NAME = "web.test \u202eevil\u009b"


def clean(data, what):
    for bad in FORBIDDEN:
        assert bad not in data, (what, bad, data)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CA:
    """A root that signs the server's TLS certificate and whatever the ACME server issues."""

    def __init__(self, tmp):
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Hostile ACME Root")])
        self.name = name
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.root_pem = tmp / "root.pem"
        self.root_pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        tls_key = ec.generate_private_key(ec.SECP256R1())
        tls = self.issue(tls_key.public_key(), "127.0.0.1", [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        self.tls_cert, self.tls_key = tmp / "tls.pem", tmp / "tls.key"
        self.tls_cert.write_bytes(tls.public_bytes(serialization.Encoding.PEM))
        self.tls_key.write_bytes(tls_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))

    def issue(self, public_key, common_name, sans, days=9):
        now = datetime.datetime.now(datetime.timezone.utc)
        return (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                .issuer_name(self.name).public_key(public_key).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
                .sign(self.key, hashes.SHA256()))


def serve_https(handler, ca):
    """An HTTPS server on 127.0.0.1 (an ephemeral port) with `ca`'s certificate for 127.0.0.1,
    serving `handler` on a thread until shut down."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(ca.tls_cert), str(ca.tls_key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class HostileACME:
    """An ACME server that does what `mode` says: "issue" (authorizations already valid, the
    certificate named RTL_NAME), "problem" (every new order refused with the HOSTILE detail),
    "extra" (a second pending dns-01 authorization, for evil.example instead of the second name ordered), "webroot" (a pending
    http-01 authorization whose token is "planted")."""

    def __init__(self, tmp):
        self.ca = CA(tmp)
        self.mode = "issue"
        self.ordered = []
        self.authz = {}
        self.issued = None
        self.nonce = 0
        acme = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body=b"", ctype="application/json", headers=()):
                if not isinstance(body, bytes):
                    body = json.dumps(body).encode()
                acme.nonce += 1
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Replay-Nonce", f"nonce{acme.nonce}")
                self.send_header("Connection", "close")
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                self.close_connection = True

            def do_HEAD(self):
                self.reply(200)

            def do_GET(self):
                if self.path == "/dir":
                    return self.reply(200, {k: acme.url("/" + k) for k in ("newNonce", "newAccount", "newOrder", "revokeCert")})
                self.reply(404, {"type": "urn:ietf:params:acme:error:malformed", "detail": HOSTILE}, "application/problem+json")

            def do_POST(self):
                jws = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                payload = json.loads(unb64url(jws["payload"])) if jws.get("payload") else None
                self.reply(*acme.answer(self.path, payload))

        self.server = serve_https(Handler, self.ca)
        self.port = self.server.server_address[1]
        self.directory = self.url("/dir")

    def url(self, path):
        return f"https://127.0.0.1:{self.port}{path}"

    def problem(self, status=403):
        return status, {"type": "urn:ietf:params:acme:error:unauthorized", "detail": HOSTILE,
                        "subproblems": [{"identifier": {"type": "dns", "value": "x\u202e"}, "detail": HOSTILE}]}, \
            "application/problem+json"

    def answer(self, path, payload):
        if path == "/newAccount":
            return 201, {"status": "valid"}, "application/json", [("Location", self.url("/acct/1"))]
        if path == "/newOrder":
            if self.mode == "problem":
                return self.problem()
            self.ordered = [i["value"] for i in payload["identifiers"]]
            first = self.ordered[0]
            if self.mode == "issue":
                self.authz = {"a1": {"identifier": {"type": "dns", "value": first}, "status": "valid", "challenges": []}}
            elif self.mode == "extra":
                self.authz = {name: {"identifier": {"type": "dns", "value": value}, "status": "pending",
                                     "challenges": [{"type": "dns-01", "url": self.url(f"/chall/{name}"), "token": f"tok{name}"}]}
                              for name, value in (("a1", first), ("a2", "evil.example"))}
            elif self.mode == "webroot":
                self.authz = {"a1": {"identifier": {"type": "dns", "value": first}, "status": "pending",
                                     "challenges": [{"type": "http-01", "url": self.url("/chall/a1"), "token": "planted"}]}}
            return 201, self.order(), "application/json", [("Location", self.url("/order/1"))]
        if path.startswith("/authz/"):
            return 200, self.authz[path.split("/")[-1]]
        if path.startswith("/chall/"):
            self.authz[path.split("/")[-1]]["status"] = "valid"
            return 200, {"status": "valid"}
        if path == "/order/1":
            return 200, self.order()
        if path == "/finalize":
            csr = x509.load_der_x509_csr(unb64url(payload["csr"]))
            cert = self.ca.issue(csr.public_key(), RTL_NAME, [x509.DNSName(n) for n in self.ordered])
            self.issued = cert.public_bytes(serialization.Encoding.PEM) + self.ca.cert.public_bytes(serialization.Encoding.PEM)
            return 200, self.order()
        if path == "/cert/1":
            return 200, self.issued, "application/pem-certificate-chain"
        return self.problem(404)

    def order(self):
        ready = all(a["status"] == "valid" for a in self.authz.values())
        o = {"status": "valid" if self.issued and ready else "ready" if ready else "pending",
             "identifiers": [{"type": "dns", "value": n} for n in self.ordered],
             "authorizations": [self.url(f"/authz/{name}") for name in self.authz], "finalize": self.url("/finalize")}
        if self.issued:
            o["certificate"] = self.url("/cert/1")
        return o

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def acme(tmp_path):
    server = HostileACME(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def store(tmp_path):
    write_secret(tmp_path / "secret", "hostile secret\n")
    return ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret", "--kdf-log-n", "10"]


def enroll(acme, store, *extra, names=("web.test",), label="web"):
    args = [CLI, "enroll", "acme", "--directory", acme.directory, "--anchor", acme.ca.root_pem,
            "--chain-anchor", acme.ca.root_pem, *[a for n in names for a in ("--name", n)], "--label", label,
            "--timeout", "10", *store, *extra]
    return subprocess.run([str(a) for a in args], capture_output=True, timeout=120)


def test_problem_details_reach_the_terminal_clean(acme, store):
    acme.mode = "problem"
    r = enroll(acme, store, "--http-port", free_port())
    assert r.returncode == 1, r
    clean(r.stdout + r.stderr, "enroll acme")
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtls: ") and "denied" in lines[0] and "renewal_succeeded" in lines[0], lines
    # --json: the message is one clean line inside an object, and nothing raw in the text.
    r = enroll(acme, store, "--http-port", free_port(), "--json")
    assert r.returncode == 1
    clean(r.stdout + r.stderr, "enroll acme --json")
    out = json.loads(r.stdout)
    assert out["error"] == "ca_rejected" and "renewal_succeeded" in out["message"] and "\n" not in out["message"], out


def test_a_certificate_named_with_a_bidi_override_prints_clean_and_json_stays_exact(acme, store):
    r = enroll(acme, store, "--http-port", free_port())
    assert r.returncode == 0, r.stderr
    clean(r.stdout + r.stderr, "enroll acme")
    assert b"web: CN=web.test  evil " in r.stdout, r.stdout
    r = subprocess.run([CLI, "store", "list", *map(str, store)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    clean(r.stdout + r.stderr, "store list")
    assert len(r.stdout.decode().splitlines()) == 1, r.stdout
    r = subprocess.run([CLI, "store", "show", "web", *map(str, store)], capture_output=True, timeout=60)
    clean(r.stdout + r.stderr, "store show")
    r = subprocess.run([CLI, "store", "list", "--json", *map(str, store)], capture_output=True, timeout=60)
    clean(r.stdout, "store list --json")  # escaped as \u202e ...
    subjects = [i["subject"] for i in json.loads(r.stdout) if i["label"] == "web"]
    assert subjects == ["CN=" + RTL_NAME], subjects  # ... and read back exact


def test_renew_loop_logs_a_hostile_problem_detail_in_one_clean_line(acme, store):
    assert enroll(acme, store, "--http-port", free_port()).returncode == 0
    acme.mode = "problem"
    proc = subprocess.Popen([CLI, "renew", "--loop", "--force", *map(str, store)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out = {proc.stdout.fileno(): b"", proc.stderr.fileno(): b""}
    try:
        end = time.time() + 60
        while b"failed" not in out[proc.stderr.fileno()] and time.time() < end:
            ready, _, _ = select.select(list(out), [], [], max(0.0, end - time.time()))
            for fd in ready:
                out[fd] += os.read(fd, 65536)
    finally:
        proc.terminate()
        proc.wait(10)
    stdout, stderr = out[proc.stdout.fileno()], out[proc.stderr.fileno()]
    assert b"renewing web failed" in stderr, (stdout, stderr)
    clean(stdout + stderr, "renew --loop")
    assert not [line for line in (stdout + stderr).decode().splitlines() if line.startswith("renewal_succeeded")]


def test_an_authorization_for_a_name_not_ordered_is_refused_before_any_hook_runs(acme, store, tmp_path):
    acme.mode = "extra"
    log = tmp_path / "hook.log"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\necho \"$1 $2\" >> {log}\nexit 0\n")
    hook.chmod(0o755)
    # Two names ordered, two authorizations: the second is for a name never asked for.
    r = enroll(acme, store, "--dns-hook", hook, names=("web.test", "www.web.test"))
    assert r.returncode == 1, r
    assert b"evil.example" in r.stderr and b"did not request" in r.stderr, r.stderr
    # No TXT record published at all (for evil.example above all): every authorization is checked
    # before any is answered.
    assert not log.exists(), log.read_text()


def test_a_webroot_challenge_file_is_not_written_through_a_planted_link(acme, store, tmp_path):
    acme.mode = "webroot"
    www = tmp_path / "www"
    (www / ".well-known" / "acme-challenge").mkdir(parents=True)
    target = tmp_path / "precious"
    target.write_text("original\n")
    (www / ".well-known" / "acme-challenge" / "planted").symlink_to(target)
    r = enroll(acme, store, "--webroot", www)
    assert r.returncode == 1, r
    assert b"planted" in r.stderr, r.stderr
    assert target.read_text() == "original\n"
    assert (www / ".well-known" / "acme-challenge" / "planted").is_symlink()


def test_an_est_error_body_reaches_the_terminal_clean(tmp_path, store):
    """An EST server refusing with a body of C0, C1, bidi controls, bytes that are not UTF-8 and
    a forged line (issue 41 item 4)."""
    ca = CA(tmp_path)
    body = HOSTILE.encode() + b"\xff\xfe\xc0\xaf tail"

    class Refusing(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(401 if "simpleenroll" in self.path else 500)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        do_GET = do_POST

    server = serve_https(Refusing, ca)
    write_secret(tmp_path / "pw", "est password\n")
    try:
        for json_flag in ([], ["--json"]):
            r = subprocess.run([CLI, "enroll", "est", "--url", f"https://127.0.0.1:{server.server_address[1]}/.well-known/est",
                                "--anchor", str(ca.root_pem), "--subject", "CN=device", "--label", "dev", "--user", "u",
                                "--password-file", str(tmp_path / "pw"), *map(str, store), *json_flag],
                               capture_output=True, timeout=120)
            assert r.returncode == 1, r
            clean(r.stdout + r.stderr, "enroll est")
            assert b"denied" in r.stderr and b"tail" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    finally:
        server.shutdown()
        server.server_close()
