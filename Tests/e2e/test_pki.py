"""`mtls pki`: issued certificates verify with OpenSSL, work with nginx and openssl s_server for
their purpose, are refused for the wrong one, and bad inputs fail cleanly."""
import json
import os
import shutil
import stat
import subprocess
import time

import pytest

import nginx_server
from conftest import CLI, free_port, require_tool, run_cli, write_secret


def ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0, f"mtls {' '.join(map(str, args))}: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Root, two customer intermediates, a server and a client for customer A, a client for B."""
    base = tmp_path_factory.mktemp("pki")
    d = base / "D"
    pw = base / "p12pw"
    write_secret(pw, "p12-secret\n")
    ok("pki", "init", "--dir", d, "--name", "Example Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer B", "--key", "rsa-2048")
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "api.example.com", "--ip", "127.0.0.1")
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", "alice",
       "--p12", base / "alice.p12", "--password-file", pw)
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer B", "--name", "mallory")

    class P:
        pass
    p = P()
    p.base, p.dir, p.pw = base, d, pw
    p.root = d / "root" / "cert.pem"
    p.inter = d / "ca" / "customer-a" / "cert.pem"
    p.server = d / "ca" / "customer-a" / "issued" / "api.example.com"
    p.alice = d / "ca" / "customer-a" / "issued" / "alice"
    p.mallory = d / "ca" / "customer-b" / "issued" / "mallory"
    return p


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, timeout=30, **kw)


def test_issued_certificates_verify_with_openssl_and_the_chain(pki):
    for leaf in (pki.server, pki.alice):
        r = sh(["openssl", "verify", "-CAfile", pki.root, "-untrusted", pki.inter, leaf / "cert.pem"])
        assert r.returncode == 0, r.stdout + r.stderr
    r = sh(["openssl", "verify", "-CAfile", pki.root, pki.mallory / "cert.pem"])
    assert r.returncode != 0  # without its intermediate, no path


def test_extensions_read_back_with_openssl(pki):
    def text(path):
        return sh(["openssl", "x509", "-in", path, "-noout", "-text"]).stdout
    root = text(pki.root)
    assert "CA:TRUE" in root and "Certificate Sign, CRL Sign" in root and "Subject Key Identifier" in root
    inter = text(pki.inter)
    assert "CA:TRUE, pathlen:0" in inter and "Authority Key Identifier" in inter
    server = text(pki.server / "cert.pem")
    assert "TLS Web Server Authentication" in server and "Digital Signature" in server
    assert "DNS:api.example.com, IP Address:127.0.0.1" in server and "CA:FALSE" in server
    client = text(pki.alice / "cert.pem")
    assert "TLS Web Client Authentication" in client and "Server Authentication" not in client
    assert "sha256" in client.lower()


def test_purpose_checks_accept_the_right_purpose_and_refuse_the_wrong_one(pki):
    base = ["openssl", "verify", "-CAfile", pki.root, "-untrusted", pki.inter]
    assert sh(base + ["-purpose", "sslserver", pki.server / "cert.pem"]).returncode == 0
    assert sh(base + ["-purpose", "sslclient", pki.alice / "cert.pem"]).returncode == 0
    assert sh(base + ["-purpose", "sslserver", pki.alice / "cert.pem"]).returncode != 0
    assert sh(base + ["-purpose", "sslclient", pki.server / "cert.pem"]).returncode != 0


def test_keys_are_owner_only_and_p12_carries_the_chain_and_friendly_name(pki):
    for item in (pki.dir / "root", pki.server, pki.alice):
        assert stat.S_IMODE(os.stat(item / "key.pem").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(pki.base / "alice.p12").st_mode) == 0o600
    r = sh(["openssl", "pkcs12", "-in", pki.base / "alice.p12", "-passin", "pass:p12-secret", "-nokeys", "-info"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("BEGIN CERTIFICATE") == 3
    assert "friendlyName: alice" in r.stdout
    assert "AES-256-CBC" in r.stderr


def start_s_server(cert_dir, port, extra):
    p = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-cert", cert_dir / "cert.pem",
                          "-key", cert_dir / "key.pem", "-cert_chain", cert_dir / "chain.pem", "-www", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if sh(f"ss -ltn | grep -q ':{port} '").returncode == 0:
            return p
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("s_server did not start")


def s_client(port, pki, *extra):
    return sh(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", pki.root,
               "-verify_return_error", "-verify_hostname", "api.example.com", "-ign_eof", *extra],
              input="GET / HTTP/1.0\r\n\r\n")


def test_openssl_s_server_accepts_the_server_cert_and_the_client_cert(pki):
    port = free_port()
    # The server trusts customer A's intermediate alone (-partial_chain: it is the anchor).
    srv = start_s_server(pki.server, port, ["-Verify", "3", "-CAfile", pki.inter, "-partial_chain",
                                            "-verify_return_error"])
    try:
        r = s_client(port, pki, "-cert", pki.alice / "cert.pem", "-key", pki.alice / "key.pem",
                     "-cert_chain", pki.alice / "chain.pem")
        assert "Verify return code: 0 (ok)" in r.stdout, r.stdout + r.stderr
        assert "HTTP/1.0 200 ok" in r.stdout
        r = s_client(port, pki, "-cert", pki.mallory / "cert.pem", "-key", pki.mallory / "key.pem",
                     "-cert_chain", pki.mallory / "chain.pem")
        assert "HTTP/1.0 200 ok" not in r.stdout and "unknown ca" in r.stdout + r.stderr
    finally:
        srv.kill()
        srv.wait()


def test_client_certificate_used_as_server_certificate_fails_the_handshake(pki):
    port = free_port()
    srv = start_s_server(pki.alice, port, [])
    try:
        r = s_client(port, pki, "-verify_hostname", "alice")
        assert "HTTP/1.0 200 ok" not in r.stdout
        assert "unsuitable certificate purpose" in (r.stdout + r.stderr)
    finally:
        srv.kill()
        srv.wait()


def test_nginx_accepts_the_customer_client_and_refuses_others(pki, tmp_path):
    require_tool(shutil.which("nginx"), "nginx")
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_text((pki.dir / "ca" / "customer-a" / "chain.pem").read_text())
    # The trust store holds the root, so any customer's client verifies; the server then
    # accepts only clients whose issuer is its own customer's intermediate.
    srv = nginx_server.start(tmp_path / "nginx", server_chain=pki.server / "chain.pem", server_key=pki.server / "key.pem",
                             client_ca=client_ca, issuer_dn="CN=Customer A")
    port = srv.port
    try:
        url = f"https://api.example.com:{port}/"
        common = ["curl", "-sS", "--resolve", f"api.example.com:{port}:127.0.0.1", "--cacert", str(pki.root)]
        r = sh(common + ["--cert", str(pki.alice / "chain.pem"), "--key", str(pki.alice / "key.pem"), url])
        assert r.returncode == 0 and "hello CN=alice" in r.stdout, r.stdout + r.stderr
        # A client from customer B's intermediate, and no client certificate: refused.
        r = sh(common + ["--cert", str(pki.mallory / "chain.pem"), "--key", str(pki.mallory / "key.pem"), url])
        assert "hello" not in r.stdout and "wrong customer" in r.stdout
        r = sh(common + [url])
        assert "hello" not in r.stdout and "400" in r.stdout
        # The server certificate does not verify under another name.
        r = sh(["curl", "-sS", "--resolve", f"other.example.com:{port}:127.0.0.1", "--cacert", str(pki.root),
                f"https://other.example.com:{port}/"])
        assert r.returncode != 0
    finally:
        srv.stop()


def test_revoke_and_crl(pki, tmp_path):
    d = tmp_path / "D"
    ok("pki", "init", "--dir", d, "--name", "R")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", "bob")
    r = ok("pki", "revoke", "--dir", d, "--ca", "Customer A", "--name", "bob", "--reason", "superseded", "--json")
    out = json.loads(r.stdout)
    assert out["revoked"] == "bob" and out["reason"] == "superseded"
    crl = d / "ca" / "customer-a" / "crl.pem"
    r = sh(["openssl", "verify", "-crl_check", "-CRLfile", crl, "-CAfile", d / "root" / "cert.pem",
            "-untrusted", d / "ca" / "customer-a" / "cert.pem", d / "ca" / "customer-a" / "issued" / "bob" / "cert.pem"])
    assert r.returncode != 0 and "revoked" in r.stdout + r.stderr
    r = ok("pki", "crl", "--dir", d, "--ca", "Customer A", "--out", tmp_path / "copy.crl", "--json")
    assert json.loads(r.stdout)["revoked_count"] == 1
    assert "BEGIN X509 CRL" in (tmp_path / "copy.crl").read_text()
    r = run_cli("pki", "revoke", "--dir", d, "--ca", "Customer A", "--name", "bob")
    assert r.returncode != 0 and "already revoked" in r.stderr
    listing = json.loads(ok("pki", "list", "--dir", d, "--json").stdout)
    assert [(e["kind"], e["name"], e["ca"], e["revoked"]) for e in listing] == [
        ("root", "R", None, False), ("intermediate", "Customer A", None, False), ("client", "bob", "Customer A", True)]
    assert listing[2]["reason"] == "superseded"
    assert "REVOKED" in ok("pki", "list", "--dir", d).stdout


def snapshot(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def fails_cleanly(d, *args, expect):
    before = snapshot(d) if d.exists() else []
    r = run_cli(*args)
    assert r.returncode != 0, r.stdout
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and expect in lines[0], r.stderr
    assert (snapshot(d) if d.exists() else []) == before, "something was written"
    return r


def test_bad_inputs_give_one_line_and_write_nothing(tmp_path):
    d = tmp_path / "D"
    kp = tmp_path / "kp"
    write_secret(kp, "key-pass\n")
    fails_cleanly(d, "pki", "intermediate", "--dir", d, "--name", "A", expect="has no root CA")
    fails_cleanly(d, "pki", "init", "--dir", d, "--name", "", expect="1 to 64 characters")
    fails_cleanly(d, "pki", "init", "--dir", d, "--name", "R", "--days", "0", expect="validity")
    assert not d.exists()
    ok("pki", "init", "--dir", d, "--name", "Root", "--key-password-file", kp)
    assert "ENCRYPTED PRIVATE KEY" in (d / "root" / "key.pem").read_text()
    fails_cleanly(d, "pki", "init", "--dir", d, "--name", "Root", expect="already has a root")
    fails_cleanly(d, "pki", "intermediate", "--dir", d, "--name", "A", expect="is encrypted")
    write_secret((tmp_path / "wrong"), "nope\n")
    fails_cleanly(d, "pki", "intermediate", "--dir", d, "--name", "A", "--key-password-file", tmp_path / "wrong",
                  expect="wrong key password")
    fails_cleanly(d, "pki", "intermediate", "--dir", d, "--name", "A", "--key-password-file", tmp_path / "missing",
                  expect="cannot open")
    fails_cleanly(d, "pki", "intermediate", "--dir", d, "--name", "A", "--key", "rsa-1024",
                  "--key-password-file", kp, expect="unknown key kind")
    ok("pki", "intermediate", "--dir", d, "--name", "A", "--key-password-file", kp)
    fails_cleanly(d, "pki", "issue", "client", "--dir", d, "--ca", "Nope", "--name", "c", "--key-password-file", kp,
                  expect="no intermediate named")
    fails_cleanly(d, "pki", "issue", "server", "--dir", d, "--ca", "A", "--ip", "300.1.2.3", "--key-password-file", kp,
                  expect="not an IP address")
    fails_cleanly(d, "pki", "issue", "server", "--dir", d, "--ca", "A", "--dns", "bad name", "--key-password-file", kp,
                  expect="not a valid DNS name")
    fails_cleanly(d, "pki", "issue", "client", "--dir", d, "--ca", "A", "--name", "c", "--key-password-file", kp,
                  "--p12", tmp_path / "c.p12", "--p12-password-file", tmp_path / "missing", expect="cannot open")
    assert not (tmp_path / "c.p12").exists()
    # The certificate and its .p12 are one step: a .p12 that cannot be written leaves no
    # certificate behind, and an existing one is refused before anything is issued.
    write_secret(tmp_path / "p12pw", "p12-secret\n")
    fails_cleanly(d, "pki", "issue", "client", "--dir", d, "--ca", "A", "--name", "c", "--key-password-file", kp,
                  "--p12", tmp_path / "nowhere" / "c.p12", "--p12-password-file", tmp_path / "p12pw",
                  expect=f"the folder {tmp_path / 'nowhere'} does not exist")
    (tmp_path / "taken.p12").write_bytes(b"")
    fails_cleanly(d, "pki", "issue", "client", "--dir", d, "--ca", "A", "--name", "c", "--key-password-file", kp,
                  "--p12", tmp_path / "taken.p12", "--p12-password-file", tmp_path / "p12pw", expect="already exists")
    fails_cleanly(d, "pki", "revoke", "--dir", d, "--ca", "A", "--name", "ghost", "--key-password-file", kp,
                  expect="issued nothing named")
    fails_cleanly(d, "pki", "revoke", "--dir", d, "--ca", "A", "--cert", tmp_path / "missing.pem",
                  "--key-password-file", kp, expect="cannot open")
    r = run_cli("pki", "issue", "client", "--dir", d, "--ca", "Nope", "--name", "c", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "not_found"
    for cmd in (["pki"], ["pki", "init"], ["pki", "intermediate"], ["pki", "issue", "server"],
                ["pki", "issue", "client"], ["pki", "revoke"], ["pki", "crl"]):
        assert run_cli(*cmd, "--help").returncode == 0


def test_unencrypted_keys_are_written_with_one_warning_and_the_environment_encrypts_them(tmp_path):
    d = tmp_path / "plain"
    r = run_cli("pki", "init", "--dir", d, "--name", "Root")
    assert r.returncode == 0, r.stderr
    warnings = [l for l in r.stderr.splitlines() if "warning" in l]
    assert len(warnings) == 1 and "unencrypted" in warnings[0] and "--password-file" in warnings[0] \
        and "MTLS_PKI_KEY_PASSWORD_FILE" in warnings[0] and str(d / "root" / "key.pem") in warnings[0], r.stderr
    assert "ENCRYPTED" not in (d / "root" / "key.pem").read_text()
    # MTLS_PKI_KEY_PASSWORD_FILE is the default --password-file: encrypted, no warning.
    write_secret((tmp_path / "kp"), "key-pass\n")
    env = dict(os.environ, MTLS_PKI_KEY_PASSWORD_FILE=str(tmp_path / "kp"))
    e = tmp_path / "enc"
    for args in (["init", "--name", "Root"], ["intermediate", "--name", "A"],
                 ["issue", "client", "--ca", "A", "--name", "c"]):
        r = subprocess.run([CLI, "pki", *args, "--dir", str(e)], capture_output=True, text=True, env=env)
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert "ENCRYPTED PRIVATE KEY" in (e / "root" / "key.pem").read_text()
    assert "ENCRYPTED PRIVATE KEY" in (e / "ca" / "a" / "issued" / "c" / "key.pem").read_text()


def test_serve_takes_a_stored_intermediate_as_client_anchor(pki, tmp_path):
    store = ["--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret"]
    write_secret((tmp_path / "secret"), "store secret\n")
    ok("store", *store, "add-cert", pki.inter, "--label", "customer-a")
    srv = subprocess.Popen([CLI, "serve", "--port", "0", "--cert", str(pki.server / "chain.pem"),
                            "--key", str(pki.server / "key.pem"), *map(str, store),
                            "--client-anchor", "customer-a", "--require-client-cert", "--count", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = srv.stdout.readline()
        assert first.startswith("listening on "), first + srv.stdout.read()
        port = first.strip().rsplit(":", 1)[1]
        good = run_cli("connect", f"127.0.0.1:{port}", "--identity", pki.base / "alice.p12", "--password-file", pki.pw,
                       "--anchor", pki.root, "--anchors-only", "--send", "GET / HTTP/1.0\r\n\r\n")
        assert good.returncode == 0 and "hello alice" in good.stdout, good.stdout + good.stderr
        bad = run_cli("connect", f"127.0.0.1:{port}", "--cert", pki.mallory / "cert.pem", "--key",
                      pki.mallory / "key.pem", "--anchor", pki.root, "--anchors-only", "--send", "GET / HTTP/1.0\r\n\r\n")
        assert "hello" not in bad.stdout
        log = srv.communicate(timeout=30)[0]
        assert "accepted" in log and "CN=alice" in log and "rejected client" in log, log
    finally:
        srv.kill()
        srv.wait()
