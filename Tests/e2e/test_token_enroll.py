"""Enrollment end to end on a blank SoftHSM2 token, with the mtls command alone:
`mtls token keygen` (the key made on the token, sensitive, never extractable) → `mtls token csr`
(signed on the token) → `mtls pki sign client` → `mtls token import-cert` → a handshake with the
token identity against `openssl s_server -Verify 1` and `gnutls-serv --require-client-cert`,
TLS 1.2 and 1.3, for every key type."""
import json
import os
import subprocess

import pytest

from conftest import free_port, run_cli, SOFTHSM_MODULE as MODULE, needs_softhsm, server_pki, softhsm_conf, write_secret
from test_tls import Peer

pytestmark = needs_softhsm

KEY_TYPES = ["ec-p256", "ec-p384", "rsa-2048", "rsa-3072", "ed25519"]  # the MTLS_KEY_TYPE_* names


@pytest.fixture(scope="module")
def blank(tmp_path_factory):
    """A blank token "enroll-card" (user PIN 1234) and a PKI: root, "Customer A", server localhost."""
    d = tmp_path_factory.mktemp("enroll")
    (d / "tokens").mkdir()
    (d / "softhsm2.conf").write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    write_secret((d / "pin"), "1234\n")
    with softhsm_conf(d / "softhsm2.conf"):
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "enroll-card", "--pin", "1234",
                        "--so-pin", "5678"], check=True, capture_output=True)
        server_pki(d, "Enroll Root")
        (d / "cas.pem").write_text((d / "int.pem").read_text() + (d / "root.pem").read_text())
        yield d


def p11(*args):
    return subprocess.run(["pkcs11-tool", "--module", MODULE, "--token-label", "enroll-card", "--login", "--pin", "1234",
                           *args], capture_output=True, text=True)


def enroll(d, key_type, index):
    uri = f"pkcs11:token=enroll-card;object=alice-{key_type};id=%{index:02x}"
    pin = ["--pin-file", d / "pin", "--module", MODULE]
    r = run_cli("token", "keygen", uri, "--type", key_type, *pin, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["key_uri"].startswith("pkcs11:")
    # the private key never leaves the token
    listing = p11("--list-objects", "--type", "privkey", "--label", f"alice-{key_type}").stdout
    assert "sensitive" in listing and "never extractable" in listing, listing
    r = run_cli("token", "csr", uri, "--subject", f"CN=alice {key_type}", *pin, "--out", d / f"{key_type}.csr")
    assert r.returncode == 0, r.stdout + r.stderr
    v = subprocess.run(["openssl", "req", "-in", d / f"{key_type}.csr", "-noout", "-verify"], capture_output=True, text=True)
    assert "verify OK" in v.stdout + v.stderr
    r = run_cli("pki", "sign", "client", "--dir", d / "pki", "--ca", "Customer A", "--csr", d / f"{key_type}.csr",
                "--out", d / f"{key_type}.pem", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["name"] == f"alice {key_type}"
    r = run_cli("token", "import-cert", uri, "--cert", d / f"{key_type}.pem", *pin)
    assert r.returncode == 0, r.stdout + r.stderr
    # still sensitive and never extractable after all of it
    listing = p11("--list-objects", "--type", "privkey", "--label", f"alice-{key_type}").stdout
    assert "sensitive" in listing and "never extractable" in listing, listing
    return f"pkcs11:token=enroll-card;object=alice-{key_type}"


def connect(d, port, identity, version):
    r = run_cli("connect", f"127.0.0.1:{port}", "--identity", identity, "--pin-file", d / "pin", "--anchor", d / "root.pem",
                "--anchors-only", "--verify-as", "localhost", "--tls-min", version, "--tls-max", version,
                "--send", f"hello from the token over {version}\\n", "--timeout", "5", "--json")
    return r, json.loads(r.stdout)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_blank_token_to_mutual_tls(blank, key_type):
    d = blank
    with softhsm_conf(d / "softhsm2.conf"):
        identity = enroll(d, key_type, 1 + KEY_TYPES.index(key_type))
        for version in ("1.2", "1.3"):
            # openssl s_server requiring a client certificate under the PKI
            port = free_port()
            s = Peer(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", d / "server.pem", "-key", d / "server.key",
                      "-cert_chain", d / "int.pem", "-CAfile", d / "cas.pem", "-Verify", "1", "-verify_return_error"], port)
            try:
                r, out = connect(d, port, identity, version)
                log = s.output_until(lambda log: "hello from the token" in log, timeout=10)
            finally:
                log = s.stop()
            assert out["connected"] and out["tls_version"] == f"TLSv{version}", (out, r.stderr, log)
            assert f"subject=CN = alice {key_type}" in log and "hello from the token" in log, log
            # gnutls-serv requiring and verifying a client certificate
            port = free_port()
            prio = "NORMAL:-VERS-ALL:+VERS-TLS" + version
            g = Peer(["gnutls-serv", "--port", str(port), "--x509certfile", d / "server-chain.pem", "--x509keyfile", d / "server.key",
                      "--x509cafile", d / "cas.pem", "--require-client-cert", "--verify-client-cert", "--echo",
                      "--priority", prio], port)
            try:
                r, out = connect(d, port, identity, version)
            finally:
                glog = g.stop()
            assert out["connected"] and out["tls_version"] == f"TLSv{version}", (out, r.stderr, glog)
            assert "hello from the token" in (out["response"] or ""), (out, glog)


def test_keygen_refuses_a_second_key_with_the_same_id_or_label(blank):
    d = blank
    with softhsm_conf(d / "softhsm2.conf"):
        uri = "pkcs11:token=enroll-card;object=twice;id=%70"
        pin = ["--pin-file", d / "pin", "--module", MODULE]
        assert run_cli("token", "keygen", uri, "--type", "ec-p256", *pin).returncode == 0
        r = run_cli("token", "keygen", uri, "--type", "ec-p256", *pin, "--json")
        assert r.returncode != 0 and json.loads(r.stdout)["error"] == "duplicate", r.stdout


def test_import_cert_refuses_a_certificate_for_another_key(blank):
    d = blank
    with softhsm_conf(d / "softhsm2.conf"):
        pin = ["--pin-file", d / "pin", "--module", MODULE]
        assert run_cli("token", "keygen", "pkcs11:token=enroll-card;object=lonely;id=%71", "--type", "ec-p256",
                       *pin).returncode == 0
        r = run_cli("token", "import-cert", "pkcs11:token=enroll-card;object=lonely", "--cert", d / "server.pem",
                    *pin, "--json")
        assert r.returncode != 0 and json.loads(r.stdout)["error"] == "key_mismatch", r.stdout


def test_pki_sign_refuses_a_csr_whose_signature_does_not_verify(blank, tmp_path):
    d = blank
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", tmp_path / "k.pem", "-subj", "/CN=tampered", "-outform", "DER", "-out", tmp_path / "c.der"],
                   check=True, capture_output=True)
    der = bytearray((tmp_path / "c.der").read_bytes())
    der[-5] ^= 0x01  # inside the signature
    (tmp_path / "bad.der").write_bytes(bytes(der))
    r = run_cli("pki", "sign", "client", "--dir", d / "pki", "--ca", "Customer A", "--csr", tmp_path / "bad.der",
                "--out", tmp_path / "bad.pem", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] in ("corrupt", "parse"), r.stdout
    assert not os.path.exists(tmp_path / "bad.pem")


def test_readme_sequence_takes_a_blank_token_to_mutual_tls(tmp_path):
    """The README's "blank token to mTLS" block, run as written with the installed mtls."""
    import re
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "# blank token to mTLS" in b]
    assert len(blocks) == 1, "README.md has no \"blank token to mTLS\" block"
    bindir = os.path.dirname(os.path.abspath(os.environ["MTLS_CLI"]))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], PORT=str(free_port()))
    r = subprocess.run(["bash", "-ec", blocks[0] + "\nwait\n"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "hello alice" in r.stdout, r.stdout + r.stderr


def test_import_cert_with_its_chain_makes_the_token_identity_send_it(blank):
    """`mtls token import-cert` given the certificate and its intermediate writes both (the
    intermediate as a certificate without a key), so the token identity alone presents its chain:
    a server that trusts only the root accepts it. With the leaf alone on the token (the old
    behaviour) the server cannot build the client's path and refuses the handshake."""
    d = blank
    with softhsm_conf(d / "softhsm2.conf"):
        uri = "pkcs11:token=enroll-card;object=chained;id=%72"
        pin = ["--pin-file", d / "pin", "--module", MODULE]
        assert run_cli("token", "keygen", uri, "--type", "ec-p256", *pin).returncode == 0
        assert run_cli("token", "csr", uri, "--subject", "CN=chained", *pin, "--out", d / "chained.csr").returncode == 0
        r = run_cli("pki", "sign", "client", "--dir", d / "pki", "--ca", "Customer A", "--csr", d / "chained.csr",
                    "--out", d / "chained.pem")
        assert r.returncode == 0, r.stdout + r.stderr
        (d / "chained-with-ca.pem").write_text((d / "chained.pem").read_text() + (d / "int.pem").read_text())
        r = run_cli("token", "import-cert", uri, "--cert", d / "chained-with-ca.pem", *pin)
        assert r.returncode == 0, r.stdout + r.stderr
        certs = p11("--list-objects", "--type", "cert").stdout
        assert "Customer A" in certs, certs
        port = free_port()
        s = Peer(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", d / "server.pem", "-key", d / "server.key",
                  "-cert_chain", d / "int.pem", "-CAfile", d / "root.pem", "-Verify", "2", "-verify_return_error"], port)
        try:
            r, out = connect(d, port, "pkcs11:token=enroll-card;object=chained", "1.3")
        finally:
            log = s.stop()
        assert out["connected"], (out, r.stderr, log)
