"""`mtls connect --identity pkcs11:URI` against `openssl s_server -Verify 1`, with client keys that
were generated on a SoftHSM2 token (scripts/softhsm-token.sh): the handshake can only succeed if
the token signed. TLS 1.2 and 1.3, RSA (PKCS#1 v1.5 and PSS), ECDSA P-256/P-384, Ed25519 and a
CKA_ALWAYS_AUTHENTICATE key (libmtls's OpenSSL provider), also against gnutls-serv; token
identities kept in the store; wrong PIN, missing PIN, missing token, bad URI."""
import json
import os
import pathlib
import subprocess
import time

import pytest

from conftest import free_port, run_cli, SOFTHSM_MODULE as MODULE, needs_softhsm, softhsm_conf, write_secret

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "softhsm-token.sh"
pytestmark = needs_softhsm


@pytest.fixture(scope="module")
def hsm(tmp_path_factory):
    d = tmp_path_factory.mktemp("hsm-connect")
    subprocess.run([str(SCRIPT), str(d)], check=True)
    write_secret((d / "bad-pin"), "0000\n")
    with softhsm_conf(d / "softhsm2.conf"):
        yield d


class SServer:
    """openssl s_server on a free port that requires a client certificate from the test CA."""

    def __init__(self, d, *extra):
        self.p = subprocess.Popen(
            ["openssl", "s_server", "-accept", "127.0.0.1:0", "-naccept", "1", "-cert", d / "server.pem",
             "-key", d / "server.key", "-CAfile", d / "ca.pem", "-Verify", "1", "-verify_return_error", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = ""
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("s_server exited: " + self.log)
            self.log += line
            if line.startswith("ACCEPT "):
                self.port = int(line.rsplit(":", 1)[1])
                break

    def finish(self):
        try:
            out, _ = self.p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, _ = self.p.communicate()
        return self.log + out


def connect(d, server, identity, *args):
    return run_cli("connect", f"127.0.0.1:{server.port}", "--identity", identity, "--anchor", d / "ca.pem",
                   "--anchors-only", "--send", "hello from the token\\n", "--timeout", "2", "--json", *args)


@pytest.mark.parametrize("uri, tls, server_args", [
    ("pkcs11:token=mtls-test;object=rsa-client", "1.2", ["-client_sigalgs", "RSA+SHA256"]),  # PKCS#1 v1.5
    ("pkcs11:token=mtls-test;object=rsa-client", "1.2", []),                                # RSA-PSS
    ("pkcs11:token=mtls-test;object=rsa-client", "1.3", []),                                # RSA-PSS
    ("pkcs11:token=mtls-test;id=%02", "1.2", []),                                           # ECDSA P-256
    ("pkcs11:token=mtls-test;id=%02", "1.3", []),
    ("pkcs11:token=mtls-test;id=%03;type=private", "1.2", []),                              # ECDSA P-384
    ("pkcs11:token=mtls-test;id=%03;type=private", "1.3", []),
    ("pkcs11:token=mtls-spare;object=ed-client", "1.2", []),                                # Ed25519 (CKM_EDDSA)
    ("pkcs11:token=mtls-spare;object=ed-client", "1.3", []),
    ("pkcs11:token=mtls-spare;object=always-auth", "1.2", []),                              # CKA_ALWAYS_AUTHENTICATE
    ("pkcs11:token=mtls-spare;object=always-auth", "1.3", []),
])
def test_handshake_signs_on_the_token(hsm, uri, tls, server_args):
    server = SServer(hsm, *server_args)
    r = connect(hsm, server, uri, "--pin-file", hsm / "pin", "--tls-min", tls, "--tls-max", tls)
    log = server.finish()
    assert r.returncode == 0, r.stdout + r.stderr + log
    out = json.loads(r.stdout)
    assert out["connected"] and out["tls_version"] == f"TLSv{tls}"
    assert out["evaluation"]["trusted"]
    # s_server accepted the client certificate (verify_return_error) and read our request.
    assert "subject=CN = token" in log and "hello from the token" in log, log


@pytest.mark.parametrize("uri", ["pkcs11:token=mtls-test;object=rsa-client", "pkcs11:token=mtls-test;id=%02",
                                 "pkcs11:token=mtls-test;id=%03;type=private", "pkcs11:token=mtls-spare;object=ed-client"])
@pytest.mark.parametrize("tls", ["1.2", "1.3"])
def test_gnutls_server_accepts_token_signatures(hsm, uri, tls):
    """GnuTLS checks the token's signatures with its own code (RSA: PSS in TLS 1.3, as negotiated
    in 1.2)."""
    port = free_port()
    p = subprocess.Popen(["gnutls-serv", "--port", str(port), "--x509certfile", str(hsm / "server.pem"),
                          "--x509keyfile", str(hsm / "server.key"), "--x509cafile", str(hsm / "ca.pem"),
                          "--require-client-cert", "--verify-client-cert",
                          "--priority", f"NORMAL:-VERS-ALL:+VERS-TLS{tls}"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = ""
        while "listening on IPv4" not in log:
            line = p.stdout.readline()
            assert line, "gnutls-serv exited: " + log
            log += line
        r = run_cli("connect", f"127.0.0.1:{port}", "--identity", uri, "--pin-file", hsm / "pin", "--anchor",
                    hsm / "ca.pem", "--anchors-only", "--send", "GET / HTTP/1.0\r\n\r\n", "--timeout", "2",
                    "--tls-min", tls, "--tls-max", tls, "--json")
        assert r.returncode == 0, r.stdout + r.stderr + log
        out = json.loads(r.stdout)
        assert out["connected"] and out["tls_version"] == f"TLSv{tls}", out
        assert "GnuTLS" in out["response"], out
    finally:
        p.kill()
        p.wait()


def test_csr_of_an_always_authenticate_key_logs_in_before_signing(hsm, tmp_path):
    """`mtls token csr` on a CKA_ALWAYS_AUTHENTICATE key does the context-specific login before
    C_Sign, as the handshake does (before: pin_required ... No user has logged in)."""
    r = run_cli("token", "csr", "pkcs11:token=mtls-spare;object=always-auth", "--subject", "CN=always csr",
                "--pin-file", hsm / "pin", "--module", MODULE, "--out", tmp_path / "always.csr")
    assert r.returncode == 0, r.stdout + r.stderr
    v = subprocess.run(["openssl", "req", "-in", tmp_path / "always.csr", "-noout", "-verify", "-subject"],
                       capture_output=True, text=True)
    assert "verify OK" in v.stdout + v.stderr and "CN = always csr" in v.stdout, v


def test_pin_in_the_uri_and_registered_modules(hsm):
    server = SServer(hsm)
    r = connect(hsm, server, f"pkcs11:token=mtls-test;id=%02?pin-source=file:{hsm}/pin")
    server.finish()
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["connected"]


def test_stored_token_identity_connects_by_label(hsm, tmp_path):
    store = ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]
    write_secret((tmp_path / "secret"), "store secret\n")
    r = run_cli("store", *store, "add-token", "pkcs11:token=mtls-test;object=ec-client;type=private",
                "--label", "card", "--pin-file", hsm / "pin")
    assert r.returncode == 0, r.stderr
    r = run_cli("store", *store, "list", "--json")
    item = next(i for i in json.loads(r.stdout) if i["label"] == "card")
    assert item["class"] == "token-identity" and item["subject"] == "CN=token ec-client"
    server = SServer(hsm)
    r = connect(hsm, server, "card", *store, "--pin-file", hsm / "pin")
    log = server.finish()
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert "subject=CN = token ec-client" in log


@pytest.mark.parametrize("identity, pin, text", [
    ("pkcs11:token=mtls-spare;object=spare", "bad-pin", "wrong PIN"),
    ("pkcs11:token=mtls-spare;object=spare", None, "needs a PIN"),
    ("pkcs11:token=mtls-locked;object=locked", "pin", "is locked"),
    ("pkcs11:token=no-such-token;id=%01", "pin", "no token present matches"),
    ("pkcs11:token=mtls-test;id=%77", "pin", "no certificate matching"),
    ("pkcs11:token=%zz", "pin", "invalid PKCS#11 URI"),
])
def test_token_failures_say_what_happened(hsm, identity, pin, text):
    args = ["--pin-file", hsm / pin] if pin else []
    r = run_cli("connect", "127.0.0.1:9", "--identity", identity, "--json", *args)
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert not out["connected"] and text in out["error"], out


def test_objects_show_keys_generated_on_the_token(hsm):
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:token=mtls-test", "--pin-file",
                hsm / "pin", "--json")
    assert r.returncode == 0, r.stderr
    keys = sorted(o["label"] for o in json.loads(r.stdout) if o["class"] == "private-key")
    assert keys == ["ec-client", "p384-client", "rsa-client"]
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:token=mtls-spare", "--pin-file",
                hsm / "pin", "--json")
    keys = sorted(o["label"] for o in json.loads(r.stdout) if o["class"] == "private-key")
    assert "ed-client" in keys and "always-auth" in keys


@pytest.mark.parametrize("tls", ["1.2", "1.3"])
def test_serve_with_a_token_server_key(hsm, tls):
    """mtls serve whose server key is on the token; curl checks the server against the test CA."""
    p = subprocess.Popen([os.environ.get("MTLS_CLI", "mtls"), "serve", "--identity",
                          "pkcs11:token=mtls-spare;object=tls-server", "--pin-file", str(hsm / "pin")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line + p.stderr.read()
        port = int(line.rsplit(":", 1)[1])
        r = subprocess.run(["curl", "-sS", "--cacert", str(hsm / "ca.pem"), f"--tlsv{tls}", "--tls-max", tls,
                            f"https://127.0.0.1:{port}/"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "hello anonymous\n"
    finally:
        p.kill()
        p.wait()


def auto_store(hsm, tmp_path, *tokens):
    """A store holding only token identities: (label, URI) pairs."""
    store = ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]
    write_secret((tmp_path / "secret"), "store secret\n")
    for label, uri in tokens:
        r = run_cli("store", *store, "add-token", uri, "--label", label, "--pin-file", hsm / "pin")
        assert r.returncode == 0, r.stderr
    return store


def connect_automatic(hsm, server, store, *args):
    return run_cli("connect", f"127.0.0.1:{server.port}", *store, "--identity", "auto", "--anchor", hsm / "ca.pem", "--anchors-only",
                   "--send", "hello from the token\\n", "--timeout", "2", "--json", *args)


def test_automatic_selection_includes_stored_token_identities(hsm, tmp_path):
    store = auto_store(hsm, tmp_path, ("card", "pkcs11:token=mtls-test;object=ec-client;type=private"))
    server = SServer(hsm)
    r = connect_automatic(hsm, server, store, "--pin-file", hsm / "pin")
    log = server.finish()
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert "subject=CN = token ec-client" in log and "hello from the token" in log, log


def test_automatic_token_identity_with_a_wrong_pin_says_so(hsm, tmp_path):
    store = auto_store(hsm, tmp_path, ("card", "pkcs11:token=mtls-test;object=ec-client;type=private"))
    server = SServer(hsm)
    r = connect_automatic(hsm, server, store, "--pin-file", hsm / "bad-pin")
    server.p.kill()
    server.finish()
    assert r.returncode != 0
    assert "wrong PIN" in json.loads(r.stdout)["error"], r.stdout


@pytest.mark.parametrize("sigalg, chosen", [("ECDSA+SHA256", "ec-client"), ("ECDSA+SHA384", "p384-client")])
def test_automatic_selection_matches_the_curve_to_the_servers_tls13_schemes(hsm, tmp_path, sigalg, chosen):
    # Both identities chain to the CA the server lists; in TLS 1.3 ecdsa_secp256r1_sha256 can only
    # be made with a P-256 key and ecdsa_secp384r1_sha384 with a P-384 key.
    store = auto_store(hsm, tmp_path, ("a-p384", "pkcs11:token=mtls-test;id=%03;type=private"),
                       ("b-p256", "pkcs11:token=mtls-test;object=ec-client;type=private"))
    server = SServer(hsm, "-tls1_3", "-client_sigalgs", sigalg)
    r = connect_automatic(hsm, server, store, "--pin-file", hsm / "pin")
    log = server.finish()
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert f"subject=CN = token {chosen}" in log, log
