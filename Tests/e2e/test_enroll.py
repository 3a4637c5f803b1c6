"""Enrollment and renewal end to end against real certificate authorities (issue 27): pebble, the
ACME test server, started here on 127.0.0.1 (its HTTPS certificate made with `mtls pki`, its
issuing root read from its management endpoint, its default 5 % of nonces rejected, so the client
must retry), with pebble-challtestsrv as its DNS (and the dns-01 TXT records); pebble connects
back to libmtls's own http-01 and tls-alpn-01 responders. Also the local `mtls pki` directory as
a source, `mtls renew --force`, and a renewal whose chain fails the policy (not installed)."""
import json
import os
import re
import subprocess

import pytest

from conftest import free_port, wait_port, run_cli, write_secret, needs_softhsm, softhsm_conf, SOFTHSM_MODULE
from pebble_server import Pebble  # Tests/support: the one pebble harness (the bench's too)


@pytest.fixture(scope="module")
def pebble(tmp_path_factory):
    p = Pebble(tmp_path_factory.mktemp("pebble"))
    yield p
    p.stop()


@pytest.fixture
def store(tmp_path):
    write_secret(tmp_path / "secret", "enroll secret\n")
    return ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]


def enroll_acme(pebble, store, label, names, *method, extra=()):
    return run_cli("enroll", "acme", "--directory", pebble.directory, "--anchor", pebble.https_root,
                   "--chain-anchor", pebble.issuing_ca, *[a for n in names for a in ("--name", n)],
                   "--label", label, *method, "--listen-address", "127.0.0.1", *store, *extra, "--json", timeout=180)


def show(store, label):
    r = run_cli("store", "show", label, *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def public_key(store, label, tmp_path):
    """The PEM public key of a stored identity (exported to .p12, read by openssl)."""
    write_secret(tmp_path / "p12pass", "p12\n")
    out = tmp_path / f"{label}.p12"
    if out.exists():
        out.unlink()
    r = run_cli("store", "export", label, "--out", out, "--password-file", tmp_path / "p12pass", *store)
    assert r.returncode == 0, r.stdout + r.stderr
    key = subprocess.run(["openssl", "pkcs12", "-in", out, "-nocerts", "-nodes", "-passin", "pass:p12"],
                         capture_output=True, check=True).stdout
    return subprocess.run(["openssl", "pkey", "-pubout"], input=key, capture_output=True, check=True).stdout


def test_acme_http01_enroll_then_forced_renewal_gives_new_serial_and_key(pebble, store, tmp_path):
    r = enroll_acme(pebble, store, "web", ["web.test", "127.0.0.1"], "--http-port", pebble.http_port)
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    assert first["source"] == "acme" and first["url"] == pebble.directory
    assert first["account"].startswith(f"https://127.0.0.1:{pebble.port}/")
    assert first["identifiers"] == ["web.test", "127.0.0.1"] and first["key_type"] == "p256"
    shown = show(store, "web")
    assert shown["class"] == "identity" and shown["leaf_sha256"] == first["leaf_sha256"]
    assert "web.test" in shown["subject"]
    key_before = public_key(store, "web", tmp_path)

    # Not due (a fresh certificate): nothing changes.
    r = run_cli("renew", "web", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["renewed"] is False
    assert show(store, "web")["leaf_sha256"] == first["leaf_sha256"]

    r = run_cli("renew", "web", "--force", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    renewed = json.loads(r.stdout)
    assert renewed["renewed"] is True and renewed["previous_sha256"] == first["leaf_sha256"]
    assert renewed["serial"] != first["serial"]
    assert renewed["account"] == first["account"]  # the same ACME account, from the record
    assert show(store, "web")["leaf_sha256"] == renewed["leaf_sha256"]
    assert public_key(store, "web", tmp_path) != key_before


def test_acme_tls_alpn01_with_an_rsa_key(pebble, store):
    r = enroll_acme(pebble, store, "alpn", ["alpn.test"], "--tls-alpn-port", pebble.tls_port, extra=("--key-type", "rsa-2048"))
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["key_type"] == "rsa2048"
    assert show(store, "alpn")["leaf_sha256"] == out["leaf_sha256"]


def test_acme_dns01_through_the_hook(pebble, store):
    r = enroll_acme(pebble, store, "dns", ["dns.test"], "--dns-hook", pebble.hook)
    assert r.returncode == 0, r.stdout + r.stderr
    assert show(store, "dns")["leaf_sha256"] == json.loads(r.stdout)["leaf_sha256"]


def test_acme_failed_validation_is_challenge_failed_with_the_servers_detail(pebble, store, tmp_path):
    # The responder listens where pebble does not connect: pebble's validation fails.
    r = enroll_acme(pebble, store, "nowhere", ["nowhere.test"], "--http-port", free_port())
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["error"] == "challenge_failed"
    assert "nowhere.test" in out["message"] and "connection" in out["message"].lower(), out["message"]
    assert not (tmp_path / "store.db").exists() or run_cli("store", "show", "nowhere", *store).returncode != 0


def test_acme_problem_document_is_ca_rejected(pebble, store):
    # pebble refuses an account whose contact is not a mailto: URL, with a problem document.
    r = enroll_acme(pebble, store, "rejected", ["rejected.test"], "--http-port", pebble.http_port,
                    extra=("--contact", "tel:+15555550100"))
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["error"] == "ca_rejected", out
    assert "Contact" in out["message"] and "creating the ACME account" in out["message"], out["message"]


def test_renewal_whose_chain_fails_the_policy_is_not_installed(pebble, store, tmp_path):
    r = enroll_acme(pebble, store, "kept", ["kept.test"], "--http-port", pebble.http_port)
    assert r.returncode == 0, r.stdout + r.stderr
    before = show(store, "kept")["leaf_sha256"]
    # An anchor the issued chain does not lead to: the new certificate is issued but refused.
    other = tmp_path / "other"
    assert run_cli("pki", "init", "--dir", other, "--name", "Unrelated Root").returncode == 0
    r = run_cli("renew", "kept", "--force", "--anchor", other / "root" / "cert.pem", *store, "--json", timeout=180)
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["error"] == "challenge_failed" and "not installed" in out["message"], out
    assert show(store, "kept")["leaf_sha256"] == before


@needs_softhsm
def test_acme_with_a_softhsm_token_key(pebble, store, tmp_path):
    d = tmp_path
    (d / "tokens").mkdir()
    (d / "softhsm2.conf").write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    write_secret(d / "pin", "1234\n")
    with softhsm_conf(d / "softhsm2.conf"):
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "acme-card", "--pin", "1234",
                        "--so-pin", "5678"], check=True, capture_output=True)
        uri = "pkcs11:token=acme-card;object=web;id=%01"
        r = run_cli("token", "keygen", uri, "--type", "ec-p256", "--pin-file", d / "pin", "--module", SOFTHSM_MODULE)
        assert r.returncode == 0, r.stdout + r.stderr
        r = enroll_acme(pebble, store, "tokenweb", ["token.test"], "--http-port", pebble.http_port,
                        extra=("--token-uri", uri, "--pin-file", d / "pin"))
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout)
        assert out["token_uri"] == uri
        shown = show(store, "tokenweb")
        assert shown["class"] == "token-identity" and shown["leaf_sha256"] == out["leaf_sha256"]
        # The certificate went onto the token beside its key.
        objs = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "acme-card", "--list-objects",
                               "--type", "cert"], capture_output=True, text=True)
        assert "token.test" in objs.stdout, objs.stdout + objs.stderr
        r = run_cli("renew", "tokenweb", "--force", "--pin-file", d / "pin", *store, "--json", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        renewed = json.loads(r.stdout)
        assert renewed["serial"] != out["serial"]
        shown = show(store, "tokenweb")
        assert shown["leaf_sha256"] == renewed["leaf_sha256"]
        # Re-keyed on the token: a new key (its own label and CKA_ID), the previous one kept.
        new_key = re.compile(r"object=web(~|%7E)[0-9]+")
        assert renewed["token_uri"] != uri and new_key.search(renewed["token_uri"]), renewed
        assert new_key.search(shown["token_uri"]), shown
        keys = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "acme-card", "--login",
                               "--pin", "1234", "--list-objects", "--type", "privkey"], capture_output=True, text=True)
        assert keys.stdout.count("Private Key Object") == 2, keys.stdout + keys.stderr


def test_pki_enroll_then_forced_renewal_gives_new_serial_and_key(store, tmp_path):
    pki = tmp_path / "pki"
    assert run_cli("pki", "init", "--dir", pki, "--name", "Local Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Site").returncode == 0
    r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Site", "--name", "svc.local", "--label", "svc", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    assert first["source"] == "pki" and first["account"] == "Site"
    assert show(store, "svc")["leaf_sha256"] == first["leaf_sha256"]
    key_before = public_key(store, "svc", tmp_path)
    r = run_cli("renew", "svc", "--force", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    renewed = json.loads(r.stdout)
    assert renewed["renewed"] is True and renewed["serial"] != first["serial"]
    assert show(store, "svc")["leaf_sha256"] == renewed["leaf_sha256"]
    assert public_key(store, "svc", tmp_path) != key_before
    # The renewed chain validates to the pki root (the recorded anchor).
    r = run_cli("renew", "svc", "--force", "--anchor", pki / "ca" / "site" / "cert.pem", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr


def test_python_renew_through_the_c_abi(store, tmp_path):
    """mtls.renew (C: mtls_renew): not due → False and nothing changes; force → a new identity;
    an identity with no enrollment record → NotFound; a policy it fails → ChallengeFailed."""
    import mtls
    pki = tmp_path / "pki"
    assert run_cli("pki", "init", "--dir", pki, "--name", "Py Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Py CA").returncode == 0
    r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Py CA", "--name", "py.local", "--label", "py", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    with mtls.Store(tmp_path / "store.db", secret_file=tmp_path / "secret") as st:
        before = st.info("py").leaf_sha256
        assert mtls.renew(st, "py") is False
        assert st.info("py").leaf_sha256 == before
        assert mtls.renew(st, "py", force=True) is True
        after = st.info("py").leaf_sha256
        assert after != before
        # The program's own policy (its root, the name checked): proven, installed.
        good = mtls.Policy(anchors=[mtls.Certificate.load(str(pki / "root" / "cert.pem"))])
        assert mtls.renew(st, "py", force=True, policy=good) is True
        after = st.info("py").leaf_sha256
        other = tmp_path / "other"
        assert run_cli("pki", "init", "--dir", other, "--name", "Other Root").returncode == 0
        wrong = mtls.Policy(anchors=[mtls.Certificate.load(str(other / "root" / "cert.pem"))], anchors_only=True)
        with pytest.raises(mtls.ChallengeFailed):
            mtls.renew(st, "py", force=True, policy=wrong)
        assert st.info("py").leaf_sha256 == after
        with pytest.raises(mtls.NotFound):
            mtls.renew(st, "never-enrolled", force=True)


def _loop_lines(store, count, timeout=60):
    """Runs `mtls renew --loop --force --json` until it printed `count` lines, then stops it."""
    proc = subprocess.Popen([os.environ["MTLS_CLI"], "renew", "--loop", "--force", "--json", *map(str, store)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    text = ""
    try:
        import select
        import time
        end = time.time() + timeout
        fd = proc.stdout.fileno()
        while text.count("\n") < count and time.time() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.time()))
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            text += chunk.decode()
        lines = [json.loads(line) for line in text.splitlines()]
    finally:
        proc.terminate()
        proc.wait(10)
    return lines


def test_renew_loop_renews_every_enrolled_identity_then_backs_off_on_failure(store, tmp_path):
    pki = tmp_path / "pki"
    assert run_cli("pki", "init", "--dir", pki, "--name", "Loop Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Loop CA").returncode == 0
    for label in ("one", "two"):
        r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Loop CA", "--name", f"{label}.local", "--label", label, *store)
        assert r.returncode == 0, r.stdout + r.stderr
    before = {label: show(store, label)["leaf_sha256"] for label in ("one", "two")}
    # One line per library event (renewal_succeeded then renewal_scheduled, per label).
    lines = _loop_lines(store, 4)
    succeeded = [line for line in lines if line["event"] == "renewal_succeeded"]
    assert sorted(line["label"] for line in succeeded) == ["one", "two"] and all(line["renewed"] for line in succeeded), lines
    assert sorted(line["label"] for line in lines if line["event"] == "renewal_scheduled") == ["one", "two"], lines
    after = {label: show(store, label)["leaf_sha256"] for label in ("one", "two")}
    assert all(after[label] != before[label] for label in after)
    # The CA goes away: each attempt fails, is reported with its backoff, and the identity stays.
    os.rename(pki, tmp_path / "pki-gone")
    lines = _loop_lines(store, 2)
    assert len(lines) == 2 and all(line["event"] == "renewal_failed" and line["renewed"] is False
                                   and line["error"] == "not_found" for line in lines), lines
    assert all(24 <= line["retry_in"] <= 36 for line in lines), lines
    assert {label: show(store, label)["leaf_sha256"] for label in ("one", "two")} == after


def test_acme_retries_bad_nonces(tmp_path_factory, store):
    """pebble rejecting 40 % of nonces: an enrollment makes some 15 signed requests, so without
    the badNonce retry it would fail all but about once in 2,000 runs; with it, it succeeds."""
    p = Pebble(tmp_path_factory.mktemp("pebble-nonces"), nonce_reject=40)
    try:
        r = enroll_acme(p, store, "nonces", ["nonces.test"], "--http-port", p.http_port)
        assert r.returncode == 0, r.stdout + r.stderr
        assert show(store, "nonces")["leaf_sha256"] == json.loads(r.stdout)["leaf_sha256"]
    finally:
        p.stop()


def test_acme_http01_through_a_webroot(pebble, store, tmp_path):
    """--webroot: the key authorization is a file that another web server (here Python's) serves."""
    root = tmp_path / "www"
    root.mkdir()
    web = subprocess.Popen(["python3", "-m", "http.server", str(pebble.http_port), "--bind", "127.0.0.1",
                            "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(pebble.http_port, web)
        r = enroll_acme(pebble, store, "webroot", ["webroot.test"], "--webroot", root)
    finally:
        web.terminate()
        web.wait(10)
    assert r.returncode == 0, r.stdout + r.stderr
    assert show(store, "webroot")["leaf_sha256"] == json.loads(r.stdout)["leaf_sha256"]
    # The challenge file is removed afterwards.
    assert list((root / ".well-known" / "acme-challenge").iterdir()) == []


def test_acme_external_account_binding(tmp_path_factory, store, tmp_path):
    key = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"
    p = Pebble(tmp_path_factory.mktemp("pebble-eab"), eab_keys={"kid-1": key})
    try:
        r = enroll_acme(p, store, "noeab", ["noeab.test"], "--http-port", p.http_port)
        assert r.returncode != 0 and json.loads(r.stdout)["error"] == "ca_rejected", r.stdout
        assert "externalAccountRequired" in json.loads(r.stdout)["message"], r.stdout
        write_secret(tmp_path / "eab", key + "\n")
        r = enroll_acme(p, store, "eab", ["eab.test"], "--http-port", p.http_port,
                        extra=("--eab-kid", "kid-1", "--eab-hmac-file", tmp_path / "eab"))
        assert r.returncode == 0, r.stdout + r.stderr
        write_secret(tmp_path / "wrong", "b10lLJs8l1GPIzsLP0s6pMt8O0XVGnfTaCeROxQM0BIt2XrJMDHJZBM5NuQmQJQH\n")
        r = enroll_acme(p, store, "wrongeab", ["wrongeab.test"], "--http-port", p.http_port,
                        extra=("--eab-kid", "kid-1", "--eab-hmac-file", tmp_path / "wrong"))
        assert r.returncode != 0 and json.loads(r.stdout)["error"] == "ca_rejected", r.stdout
    finally:
        p.stop()


def test_pki_enroll_and_renew_with_encrypted_ca_keys(store, tmp_path):
    """A pki directory whose CA keys are encrypted: the password comes from --password-file (or
    its old name --key-password-file, or MTLS_PKI_KEY_PASSWORD_FILE, as for mtls pki), at
    enrollment and at renewal."""
    pki = tmp_path / "pki"
    write_secret(tmp_path / "capw", "ca password\n")
    pw = ["--key-password-file", tmp_path / "capw"]
    assert run_cli("pki", "init", "--dir", pki, "--name", "Locked Root", *pw).returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Locked CA", *pw).returncode == 0
    r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Locked CA", "--name", "locked.local", "--label", "locked", *store, "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "bad_password", r.stdout
    r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Locked CA", "--name", "locked.local", "--label", "locked", *store, *pw,
                "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    # --password-file is the CA keys' password too (--key-password-file, above, its old name).
    r = run_cli("renew", "locked", "--force", *store, "--password-file", tmp_path / "capw", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["serial"] != first["serial"]
