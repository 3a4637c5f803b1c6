"""`mtls enroll pki --token-uri` and `mtls renew` of the identity it makes, with keys on a real
SoftHSM2 token (EC P-256 and RSA 2048): the local CA checks the CSR signed on the token, the
certificate is for the token key, and the identity completes mutual TLS with
`openssl s_server -Verify` (which checks the token's CertificateVerify against the certificate).

Before the fix, the CA verified the CSR with the key object the CSR was built from (OpenSSL caches
it in the request) — the token key, whose provider signs but does not verify — so enrollment and
renewal failed with "the CSR's signature does not verify with its own public key" (corrupt)."""
import json
import os
import re
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

from conftest import free_port, run_cli, SOFTHSM_MODULE as MODULE, needs_softhsm, softhsm_conf, write_secret
from test_tls import Peer

pytestmark = needs_softhsm

KEY_TYPES = ["ec-p256", "rsa-2048"]


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    """A blank token "pki-card" (user PIN 1234) and a PKI: root, intermediate "Site", server localhost."""
    d = tmp_path_factory.mktemp("pkitok")
    (d / "tokens").mkdir()
    (d / "softhsm2.conf").write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    write_secret(d / "pin", "1234\n")
    write_secret(d / "secret", "store secret\n")
    with softhsm_conf(d / "softhsm2.conf"):
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "pki-card", "--pin", "1234",
                        "--so-pin", "5678"], check=True, capture_output=True)
    pki = d / "pki"
    for args in (["init", "--name", "Token Root"], ["intermediate", "--name", "Site"],
                 ["issue", "server", "--ca", "Site", "--dns", "localhost", "--ip", "127.0.0.1"]):
        r = run_cli("pki", *args, "--dir", pki)
        assert r.returncode == 0, r.stdout + r.stderr
    issued = pki / "ca" / "site" / "issued" / "localhost"
    (d / "server.pem").write_text((issued / "cert.pem").read_text())
    (d / "server.key").write_text((issued / "key.pem").read_text())
    (d / "int.pem").write_text((pki / "ca" / "site" / "cert.pem").read_text())
    (d / "root.pem").write_text((pki / "root" / "cert.pem").read_text())
    (d / "cas.pem").write_text((d / "int.pem").read_text() + (d / "root.pem").read_text())
    yield d


def token_public_key(label):
    """The PEM SubjectPublicKeyInfo of the token's public key object `label` (read by pkcs11-tool, parsed by openssl)."""
    der = subprocess.run(["pkcs11-tool", "--module", MODULE, "--token-label", "pki-card", "--read-object",
                          "--type", "pubkey", "--label", label], capture_output=True, check=True).stdout
    return subprocess.run(["openssl", "pkey", "-pubin", "-inform", "DER", "-pubout"], input=der,
                          capture_output=True, check=True).stdout.decode()


def certificate_facts(pem):
    """(SHA-256 fingerprint as lower-case hex without colons, PEM public key) of a certificate."""
    fp = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256"], input=pem, capture_output=True,
                        text=True, check=True).stdout
    pub = subprocess.run(["openssl", "x509", "-noout", "-pubkey"], input=pem, capture_output=True, text=True,
                         check=True).stdout
    return fp.split("=", 1)[1].strip().replace(":", "").lower(), pub


def handshake(d, store, label, name):
    """Mutual TLS from the stored token identity `label` to `openssl s_server -Verify 1`: the
    client certificate s_server received (PEM), after the client's message came through."""
    port = free_port()
    s = Peer(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", d / "server.pem", "-key", d / "server.key",
              "-cert_chain", d / "int.pem", "-CAfile", d / "cas.pem", "-Verify", "1", "-verify_return_error"], port)
    try:
        r = run_cli("connect", f"127.0.0.1:{port}", "--identity", label, *store, "--pin-file", d / "pin",
                    "--anchor", d / "root.pem", "--anchors-only", "--verify-as", "localhost",
                    "--send", f"hello from {name}\\n", "--timeout", "5", "--json")
        log = s.output_until(lambda log: f"hello from {name}" in log, timeout=10)
    finally:
        log = s.stop()
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert json.loads(r.stdout)["connected"], r.stdout
    assert f"subject=CN = {name}" in log and f"hello from {name}" in log, log
    m = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n", log, re.S)
    assert m, log
    return m.group(0)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_enroll_pki_with_a_token_key_then_renew_on_the_token(card, key_type):
    d = card
    store = ["--store", d / f"{key_type}.db", "--secret-file", d / "secret"]
    name = f"alice-{key_type}"
    uri = f"pkcs11:token=pki-card;object={name};id=%{1 + KEY_TYPES.index(key_type):02x}"
    with softhsm_conf(d / "softhsm2.conf"):
        r = run_cli("token", "keygen", uri, "--type", key_type, "--pin-file", d / "pin", "--module", MODULE)
        assert r.returncode == 0, r.stdout + r.stderr
        r = run_cli("enroll", "pki", "--dir", d / "pki", "--ca", "Site", "--name", name, "--profile", "client",
                    "--token-uri", uri, "--pin-file", d / "pin", "--label", name, *store, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        first = json.loads(r.stdout)
        assert first["source"] == "pki" and first["token_uri"] == uri, first

        # The certificate is for the token key, and the token key proves it in a handshake.
        pem = handshake(d, store, name, name)
        sha, pub = certificate_facts(pem)
        assert sha == first["leaf_sha256"].lower().replace(":", ""), (sha, first)
        assert pub == token_public_key(name), pub

        # Renewal re-keys on the token: a new key, a certificate for it, the same handshake.
        r = run_cli("renew", name, "--force", "--pin-file", d / "pin", *store, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        renewed = json.loads(r.stdout)
        assert renewed["renewed"] is True and renewed["serial"] != first["serial"], renewed
        new_uri = renewed["token_uri"]
        m = re.search(r"object=([^;]+)", new_uri)
        assert new_uri != uri and m, renewed
        new_label = urllib.parse.unquote(m.group(1))
        assert new_label != name and new_label.startswith(name), new_label
        pem = handshake(d, store, name, name)
        sha, pub = certificate_facts(pem)
        assert sha == renewed["leaf_sha256"].lower().replace(":", ""), (sha, renewed)
        assert pub == token_public_key(new_label) and pub != token_public_key(name), pub

        # The same renewal through the C ABI (Python's mtls.renew → mtls_renew), in a process of
        # its own so that the token's module is loaded with this test's SoftHSM2 configuration.
        code = textwrap.dedent(f"""
            import mtls
            with mtls.Store({str(d / f"{key_type}.db")!r}, secret_file={str(d / "secret")!r}) as st:
                before = st.info({name!r}).leaf_sha256
                assert mtls.renew(st, {name!r}, force=True, pin="1234") is True
                assert st.info({name!r}).leaf_sha256 != before
        """)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        pem = handshake(d, store, name, name)
        sha, pub = certificate_facts(pem)
        assert sha == show(store, name)["leaf_sha256"].lower().replace(":", ""), sha
        assert pub not in (token_public_key(name), token_public_key(new_label)), pub


def show(store, label):
    r = run_cli("store", "show", label, *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)
