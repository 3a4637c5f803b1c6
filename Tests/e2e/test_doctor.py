"""`mtls doctor HOST:PORT [connect's options]` (issue 38): for each broken setup the step that
fails and the fix it names, in the text output and in --json; a working setup exits 0.

Servers: `openssl s_server` on 127.0.0.1, started once for the module — one with a good server
certificate (DNS:server.test, IP:127.0.0.1, under root -> inter; listed in revoked.crl) that
requires a client certificate from the root, one with an expired certificate."""
import datetime
import json
import subprocess

import pytest

from conftest import CLI, TEST_PKI, free_port, needs_softhsm, softhsm_conf, wait_port, write_secret


def expired_server(d):
    """A server certificate under inter (DNS:server.test, IP:127.0.0.1) that expired yesterday."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    issuer_cert = x509.load_pem_x509_certificate((d / "inter.pem").read_bytes())
    issuer_key = serialization.load_pem_private_key((d / "inter.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired.server.test")]))
            .issuer_name(issuer_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=30)).not_valid_after(now - datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("server.test"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(issuer_key, hashes.SHA256()))
    (d / "expired.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "expired.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("doctor-pki")
    subprocess.run([TEST_PKI, "--trust", str(d)], check=True, capture_output=True)
    # A client under another root: a CA the server does not name.
    subprocess.run([TEST_PKI, "--leaf", str(d), "stranger", "p256", "stranger", "other-root"], check=True,
                   capture_output=True)
    expired_server(d)
    (d / "revocation.json").write_text(json.dumps({"crls": [str(d / "revoked.crl")]}))
    return d


def s_server(pki, cert, key):
    port = free_port()
    p = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pki / cert),
                          "-key", str(pki / key), "-cert_chain", str(pki / "inter.pem"), "-CAfile", str(pki / "root.pem"),
                          "-Verify", "2", "-verify_return_error", "-www", "-quiet"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    return p, port


def mtls_serve_optional(pki):
    """`mtls serve` asking for a client certificate without requiring one."""
    port = free_port()
    p = subprocess.Popen([CLI, "serve", "--address", "127.0.0.1", "--port", str(port), "--cert", str(pki / "chain.pem"),
                          "--key", str(pki / "server.key"), "--client-anchor", str(pki / "root.pem"),
                          "--optional-client-cert"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    return p, port


@pytest.fixture(scope="module")
def servers(pki):
    good, good_port = s_server(pki, "server.pem", "server.key")
    old, old_port = s_server(pki, "expired.pem", "expired.key")
    optional, optional_port = mtls_serve_optional(pki)
    yield {"good": good_port, "expired": old_port, "optional": optional_port}
    for p in (good, old, optional):
        p.terminate()
        p.wait(10)


def doctor(*args):
    text = subprocess.run([CLI, "doctor", *map(str, args)], capture_output=True, text=True, timeout=120)
    js = subprocess.run([CLI, "doctor", *map(str, args), "--json"], capture_output=True, text=True, timeout=120)
    out = json.loads(js.stdout)
    assert js.returncode == text.returncode
    assert {"target", "ok", "steps"} <= set(out)
    for s in out["steps"]:
        own = {"tls_groups": {"groups"}, "token_mechanisms": {"token"}}.get(s["name"], set())
        assert set(s) == {"name", "ok", "detail", "fix"} | own and (s["fix"] is None) == s["ok"], s
    return text, out


def failed(out, name):
    [step] = [s for s in out["steps"] if s["name"] == name]
    assert not step["ok"], out
    assert not out["ok"]
    return step


def client(pki):
    return ["--cert", pki / "client-chain.pem", "--key", pki / "client.key"]


def test_a_working_setup_exits_zero(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['good']}", "--anchor", pki / "root.pem", *client(pki))
    assert text.returncode == 0, text.stdout + text.stderr
    assert out["ok"] and all(s["ok"] for s in out["steps"])
    names = [s["name"] for s in out["steps"]]
    assert names == ["resolve", "tcp", "tls_versions", "tls_groups", "server_chain", "trust", "client_ca_names", "client_identity",
                     "server_verdict"]
    steps = {s["name"]: s for s in out["steps"]}
    assert "TLSv1.3 and TLSv1.2" in steps["tls_versions"]["detail"]
    assert "root" in steps["client_ca_names"]["detail"].lower()
    assert "the connection works" in text.stdout


def test_a_server_that_asks_but_does_not_require_works_without_an_identity(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['optional']}", "--anchor", pki / "root.pem")
    assert text.returncode == 0, text.stdout + text.stderr
    steps = {s["name"]: s for s in out["steps"]}
    assert "accepted the connection without one" in steps["client_identity"]["detail"]
    assert steps["server_verdict"]["ok"]


def test_wrong_name_lists_the_certificates_names_and_suggests_verify_as(pki, servers):
    text, out = doctor(f"localhost:{servers['good']}", "--anchor", pki / "root.pem", *client(pki))
    assert text.returncode != 0
    step = failed(out, "trust")
    assert "name_mismatch" in step["detail"]
    assert "DNS:server.test" in step["fix"] and "IP:127.0.0.1" in step["fix"]
    assert "--verify-as server.test" in step["fix"]
    assert "--verify-as server.test" in text.stdout


def test_no_anchor_names_the_anchor_option(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['good']}", "--anchors-only", *client(pki))
    assert text.returncode != 0
    step = failed(out, "trust")
    assert "--anchor" in step["fix"] and "issued the chain" in step["fix"]
    assert "--anchor FILE" in text.stdout


def test_expired_server_certificate(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['expired']}", "--anchor", pki / "root.pem", *client(pki))
    assert text.returncode != 0
    step = failed(out, "trust")
    assert "expired" in step["detail"]
    assert "expired on" in step["fix"] and "renewed certificate" in step["fix"]
    assert "renewed certificate" in text.stdout


def test_revoked_server_certificate(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['good']}", "--anchor", pki / "root.pem", "--policy",
                       pki / "revocation.json", *client(pki))
    assert text.returncode != 0
    step = failed(out, "trust")
    assert "revoked" in step["detail"]
    assert "is revoked by its CA" in step["fix"] and "needs a new certificate" in step["fix"]
    assert "needs a new certificate" in text.stdout


def test_client_certificate_from_the_wrong_ca(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['good']}", "--anchor", pki / "root.pem",
                       "--cert", pki / "stranger.pem", "--key", pki / "stranger.key")
    assert text.returncode != 0
    ident = failed(out, "client_identity")
    assert "does not fit" in ident["detail"] and "issued by a CA the server names" in ident["detail"]
    assert "get a client certificate issued by" in ident["fix"]
    verdict = failed(out, "server_verdict")
    assert "unknown ca" in verdict["detail"].lower()
    assert "does not trust the issuer" in verdict["fix"]
    assert "get a client certificate issued by" in text.stdout


def test_no_identity_offered_when_the_server_requires_one(pki, servers):
    text, out = doctor(f"127.0.0.1:{servers['good']}", "--anchor", pki / "root.pem")
    assert text.returncode != 0
    ident = failed(out, "client_identity")
    assert "no certificate was presented" in ident["detail"]
    verdict = failed(out, "server_verdict")
    assert "--identity" in verdict["fix"] and "present a client certificate" in verdict["fix"]
    assert "present a client certificate" in text.stdout


def test_store_identities_which_fits_and_why_the_others_do_not(pki, servers, tmp_path):
    """No identity named, a store holding one that fits and one from another CA: doctor names the
    one to present and says why the other does not fit."""
    write_secret(tmp_path / "secret", "doctor store\n")
    write_secret(tmp_path / "pw", "pw\n")
    store = ["--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret"]
    for label, cert, key in (("good", "client-chain.pem", "client.key"), ("other", "stranger.pem", "stranger.key")):
        subprocess.run(["openssl", "pkcs12", "-export", "-in", pki / cert, "-inkey", pki / key, "-passout", "pass:pw",
                        "-out", tmp_path / f"{label}.p12"], check=True, capture_output=True)
        r = subprocess.run([CLI, "store", "import", tmp_path / f"{label}.p12", "--label", label, "--password-file",
                            tmp_path / "pw", *store, "--kdf-log-n", "10"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    text, out = doctor(f"127.0.0.1:{servers['good']}", "--anchor", pki / "root.pem", *store)
    assert text.returncode != 0
    ident = failed(out, "client_identity")
    assert 'store identity "good" (CN=client.test): fits' in ident["detail"]
    assert 'store identity "other" (CN=stranger, issuer CN=Other Root): does not fit: no certificate on its path ' \
           'is issued by a CA the server names' in ident["detail"]
    assert ident["fix"].startswith('present store identity "good"') and "--identity" in ident["fix"]


def test_nothing_listening_fails_at_tcp(pki):
    text, out = doctor(f"127.0.0.1:{free_port()}", "--anchor", pki / "root.pem")
    assert text.returncode != 0
    step = failed(out, "tcp")
    assert "listens on port" in step["fix"]


# ---- Key-exchange groups (issue 38): which the server accepts.

def test_groups_of_a_server_restricted_to_one_group(pki):
    port = free_port()
    p = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pki / "server.pem"),
                          "-key", str(pki / "server.key"), "-cert_chain", str(pki / "inter.pem"), "-groups", "P-384",
                          "-www", "-quiet"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, p)
        text, out = doctor(f"127.0.0.1:{port}", "--anchor", pki / "root.pem")
    finally:
        p.terminate()
        p.wait(10)
    assert text.returncode == 0, text.stdout + text.stderr
    [step] = [s for s in out["steps"] if s["name"] == "tls_groups"]
    groups = step["groups"]
    assert step["ok"] and groups["accepted"] == ["P-384"], step
    assert {"X25519", "P-256", "P-521"} <= set(groups["refused"]), step
    assert groups["negotiated"] == "P-384", step
    # Every group probed is in one of the three lists (what this OpenSSL lacks is named, not tried).
    probed = {"X25519", "P-256", "P-384", "P-521", "X448", "ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144",
              "ffdhe8192", "X25519MLKEM768", "SecP256r1MLKEM768", "SecP384r1MLKEM1024", "X25519Kyber768Draft00"}
    lists = groups["accepted"] + groups["refused"] + groups["unavailable"]
    assert sorted(lists) == sorted(probed), step
    assert "tls_groups: accepts P-384" in text.stdout and "refuses X25519" in text.stdout, text.stdout


# ---- Token identities: can the token's key make a signature the server accepts?

SOFTHSM_SCRIPT = TEST_PKI.replace("test-pki.sh", "softhsm-token.sh")


@pytest.fixture(scope="module")
def hsm(tmp_path_factory):
    import os
    assert os.path.exists("/usr/lib/softhsm/libsofthsm2.so"), "SoftHSM2 is not installed: run scripts/install-deps.sh"
    d = tmp_path_factory.mktemp("doctor-hsm")
    subprocess.run([SOFTHSM_SCRIPT, str(d)], check=True, capture_output=True)
    conf = (d / "softhsm2.conf").read_text()
    # The same tokens with the RSA-PSS mechanisms switched off (SoftHSM2's slots.mechanisms; its
    # "-" list drops the first name it is given, hence the placeholder).
    (d / "no-pss.conf").write_text(conf + "slots.mechanisms = -CKM_PLACEHOLDER,CKM_RSA_PKCS_PSS,CKM_SHA1_RSA_PKCS_PSS,"
                                   "CKM_SHA224_RSA_PKCS_PSS,CKM_SHA256_RSA_PKCS_PSS,CKM_SHA384_RSA_PKCS_PSS,"
                                   "CKM_SHA512_RSA_PKCS_PSS\n")
    return d


def token_server(d, *extra):
    """openssl s_server (TLS 1.2 and 1.3) requiring a client certificate from the token test CA."""
    port = free_port()
    p = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(d / "server.pem"),
                          "-key", str(d / "server.key"), "-CAfile", str(d / "ca.pem"), "-Verify", "1",
                          "-verify_return_error", "-www", "-quiet", *extra],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    return p, port


@needs_softhsm
def test_token_without_rsa_pss_cannot_answer_a_tls13_server_and_the_fix_says_why(hsm):
    p, port = token_server(hsm)
    args = [f"127.0.0.1:{port}", "--anchor", hsm / "ca.pem", "--identity", "pkcs11:token=mtls-test;object=rsa-client",
            "--pin-file", hsm / "pin", "--timeout", "5"]
    try:
        with softhsm_conf(hsm / "no-pss.conf"):
            text, out = doctor(*args)
            # The fix it names works: TLS 1.2 takes the token's PKCS#1 v1.5 signature.
            _, tls12 = doctor(*args, "--tls-max", "1.2")
        with softhsm_conf(hsm / "softhsm2.conf"):
            _, whole = doctor(*args)
    finally:
        p.terminate()
        p.wait(10)
    assert text.returncode == 1
    step = failed(out, "token_mechanisms")
    token = step["token"]
    assert set(token) == {"uri", "key_type", "schemes", "server_schemes", "usable"}, token
    assert token["key_type"] == "rsa2048" and "mtls-test" in token["uri"], step
    assert token["schemes"] and all(s.startswith("rsa_pkcs1_") for s in token["schemes"]), step
    assert "rsa_pss_rsae_sha256" in token["server_schemes"] and token["usable"] == [], step
    assert "CKM_RSA_PKCS_PSS" in step["fix"] and "--tls-max 1.2" in step["fix"], step
    assert "token_mechanisms" in failed(out, "server_verdict")["fix"]
    names = [s["name"] for s in out["steps"]]
    assert names.index("client_identity") < names.index("token_mechanisms") < names.index("server_verdict"), names
    assert "FAIL token_mechanisms:" in text.stdout and "CKM_RSA_PKCS_PSS" in text.stdout, text.stdout
    # TLS 1.2: usable, and the connection works.
    assert tls12["ok"], tls12
    [step12] = [s for s in tls12["steps"] if s["name"] == "token_mechanisms"]
    assert step12["ok"] and step12["token"]["usable"] and all(s.startswith("rsa_pkcs1_") for s in step12["token"]["usable"])
    # The token with its RSA-PSS mechanism: TLS 1.3 works and the step says which schemes are usable.
    assert whole["ok"], whole
    [step13] = [s for s in whole["steps"] if s["name"] == "token_mechanisms"]
    assert step13["ok"] and step13["token"]["usable"] and all(s.startswith("rsa_pss_") for s in step13["token"]["usable"])


@needs_softhsm
def test_token_ec_key_on_another_curve_than_the_server_accepts(hsm):
    """TLS 1.3 binds an ECDSA scheme to its curve: a P-256 token key cannot answer a server that
    takes only ecdsa_secp384r1_sha384, although the token has CKM_ECDSA."""
    p, port = token_server(hsm, "-client_sigalgs", "ecdsa_secp384r1_sha384")
    try:
        with softhsm_conf(hsm / "softhsm2.conf"):
            text, out = doctor(f"127.0.0.1:{port}", "--anchor", hsm / "ca.pem", "--identity",
                               "pkcs11:token=mtls-test;object=ec-client", "--pin-file", hsm / "pin", "--timeout", "5")
    finally:
        p.terminate()
        p.wait(10)
    assert text.returncode == 1
    step = failed(out, "token_mechanisms")
    assert step["token"]["key_type"] == "p256" and "ecdsa_secp256r1_sha256" in step["token"]["schemes"], step
    assert step["token"]["server_schemes"] == ["ecdsa_secp384r1_sha384"] and step["token"]["usable"] == [], step
    assert "ecdsa_secp384r1_sha384" in step["fix"] and "ecdsa_secp256r1_sha256" in step["fix"], step


@needs_softhsm
def test_token_identity_chosen_from_the_store_is_checked_too(hsm, tmp_path):
    """--identity auto: the store's token identity the selection presents gets the same check."""
    write_secret(tmp_path / "secret", "store secret\n")
    store = ["--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret"]
    p, port = token_server(hsm)
    try:
        with softhsm_conf(hsm / "no-pss.conf"):
            r = subprocess.run([CLI, "store", *map(str, store), "add-token", "pkcs11:token=mtls-test;object=rsa-client",
                                "--label", "tok", "--pin-file", str(hsm / "pin")], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            text, out = doctor(f"127.0.0.1:{port}", "--anchor", hsm / "ca.pem", "--identity", "auto", *store,
                               "--pin-file", hsm / "pin", "--timeout", "5")
    finally:
        p.terminate()
        p.wait(10)
    assert text.returncode == 1
    step = failed(out, "token_mechanisms")
    assert "rsa-client" in step["token"]["uri"] and step["token"]["usable"] == [], step
    assert "CKM_RSA_PKCS_PSS" in step["fix"], step


def test_no_token_step_for_an_identity_in_a_file(pki, servers):
    _, out = doctor(f"127.0.0.1:{servers['good']}", "--anchor", pki / "root.pem", *client(pki))
    assert "token_mechanisms" not in [s["name"] for s in out["steps"]]
