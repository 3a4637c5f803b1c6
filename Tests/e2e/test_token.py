"""`mtls token list|objects` against a SoftHSM2 token made in a temporary folder."""
import json
import os
import subprocess

import pytest

from conftest import run_cli, SOFTHSM_MODULE as MODULE, needs_softhsm, softhsm_conf, write_secret

pytestmark = needs_softhsm


@pytest.fixture(scope="module")
def token(tmp_path_factory):
    """A SoftHSM token 'mtls-test' (user PIN 1234) holding a client key and certificate (id 42)."""
    d = tmp_path_factory.mktemp("hsm")
    (d / "tokens").mkdir()
    conf = d / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    env = dict(os.environ, SOFTHSM2_CONF=str(conf))

    def sh(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, env=env)
    sh("softhsm2-util", "--init-token", "--free", "--label", "mtls-test", "--so-pin", "5678", "--pin", "1234")
    pki = d / "pki"
    for args in (["init", "--name", "Token Root"], ["intermediate", "--name", "Customer T"],
                 ["issue", "client", "--ca", "Customer T", "--name", "token-user"]):
        r = run_cli("pki", *args, "--dir", pki)
        assert r.returncode == 0, r.stderr
    item = pki / "ca" / "customer-t" / "issued" / "token-user"
    sh("openssl", "pkcs8", "-topk8", "-nocrypt", "-in", str(item / "key.pem"), "-outform", "DER", "-out", str(d / "key.der"))
    sh("openssl", "x509", "-in", str(item / "cert.pem"), "-outform", "DER", "-out", str(d / "cert.der"))
    for kind, f in (("privkey", "key.der"), ("cert", "cert.der")):
        sh("pkcs11-tool", "--module", MODULE, "--login", "--pin", "1234", "--write-object", str(d / f),
           "--type", kind, "--id", "42", "--label", "token-user")
    write_secret((d / "pin"), "1234\n")
    write_secret((d / "bad-pin"), "0000\n")
    with softhsm_conf(conf):
        yield d


def test_list_shows_the_token_with_its_uri(token):
    r = run_cli("token", "list", "--module", MODULE, "--json")
    assert r.returncode == 0, r.stderr
    tokens = json.loads(r.stdout)
    assert [t["label"] for t in tokens] == ["mtls-test"]
    t = tokens[0]
    assert t["uri"].startswith("pkcs11:") and "token=mtls-test" in t["uri"]
    assert t["login_required"] is True and t["module_path"] == MODULE
    r = run_cli("token", "list", "--module", MODULE)
    assert "mtls-test" in r.stdout and "pkcs11:" in r.stdout


def test_objects_without_pin_show_the_certificate_and_with_pin_the_key(token):
    r = run_cli("token", "objects", "--module", MODULE, "--json")
    assert r.returncode == 0, r.stderr
    objs = json.loads(r.stdout)
    assert [(o["class"], o["label"], o["id"]) for o in objs] == [("certificate", "token-user", "42")]
    assert objs[0]["subject"] == "CN=token-user"
    assert "id=%42" in objs[0]["uri"] and "type=cert" in objs[0]["uri"] and "object=token-user" in objs[0]["uri"]
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:token=mtls-test", "--pin-file", token / "pin",
                "--json")
    assert r.returncode == 0, r.stderr
    classes = sorted(o["class"] for o in json.loads(r.stdout))
    assert "private-key" in classes and "certificate" in classes


def test_objects_of_one_token_by_uri(token):
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:token=mtls-test", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 1


def test_registered_modules_include_the_softhsm_token(token):
    r = run_cli("token", "list", "--json")
    assert r.returncode == 0, r.stderr
    assert "mtls-test" in [t["label"] for t in json.loads(r.stdout)]


@pytest.mark.parametrize("args, code, text", [
    (["objects", "--token", "pkcs11:token=mtls-test", "--pin-file", "BAD"], "pin_incorrect", "PIN is incorrect"),
    (["objects", "--pin-file", "BAD"], "invalid_argument", "a PIN goes only to the token it belongs to"),
    (["objects", "--token", "pkcs11:token=missing"], "token_not_present", "no token matches"),
    (["objects", "--token", "pkcs11:token=%zz"], "bad_uri", "invalid PKCS#11 URI"),
    (["objects", "--token", "https://example.com/"], "bad_uri", "not a PKCS#11 URI"),
    (["objects", "--pin-file", "/nonexistent/pin"], "not_found", "cannot open"),
])
def test_bad_inputs_give_one_line_and_the_token_code(token, args, code, text):
    args = [str(token / "bad-pin") if a == "BAD" else a for a in args]
    r = run_cli("token", *args, "--module", MODULE)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and text in lines[0], r.stderr
    # SoftHSM reports CKF_USER_PIN_COUNT_LOW after a wrong PIN: no word about unreported tries.
    assert "does not report its PIN tries" not in r.stderr, r.stderr
    r = run_cli("token", *args, "--module", MODULE, "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == code


def test_missing_module_is_not_found(token):
    r = run_cli("token", "list", "--module", "/nonexistent/module.so")
    assert r.returncode != 0 and "no PKCS#11 module" in r.stderr
    assert run_cli("token", "--help").returncode == 0
    assert run_cli("token", "objects", "--help").returncode == 0


@pytest.fixture
def two_cards(tmp_path):
    """Two SoftHSM tokens, as two cards plugged in: 'card-a' (PIN 1234) and 'card-b' (PIN 4321),
    each holding a certificate (ids a1 and b1), and a PIN file for each (0600)."""
    d = tmp_path
    (d / "tokens").mkdir()
    conf = d / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    env = dict(os.environ, SOFTHSM2_CONF=str(conf))

    def sh(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, env=env)
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
       str(d / "key.pem"), "-subj", "/CN=card-user", "-days", "2", "-outform", "DER", "-out", str(d / "cert.der"))
    for label, pin, oid in (("card-a", "1234", "a1"), ("card-b", "4321", "b1")):
        sh("softhsm2-util", "--init-token", "--free", "--label", label, "--so-pin", "5678", "--pin", pin)
        sh("pkcs11-tool", "--module", MODULE, "--token-label", label, "--login", "--pin", pin, "--write-object",
           str(d / "cert.der"), "--type", "cert", "--id", oid, "--label", f"{label}-user")
        write_secret(d / f"{label}.pin", pin + "\n")
    with softhsm_conf(conf):
        yield d


def saw_a_wrong_pin(label):
    """Whether the token has counted a failed login (SoftHSM sets CKF_USER_PIN_COUNT_LOW)."""
    r = run_cli("token", "list", "--module", MODULE, "--json")
    assert r.returncode == 0, r.stderr
    return next(t for t in json.loads(r.stdout) if t["label"] == label)["user_pin_count_low"]


def test_a_listing_pin_goes_only_to_the_card_it_belongs_to(two_cards):
    """Issue 23, defect 8: `token objects --pin-file` without --token used to log in to every
    token, so card-a's PIN reached card-b (a wrong PIN there, counted against it). Now a PIN needs
    --token naming one card (or its object); the other card never sees it."""
    r = run_cli("token", "objects", "--module", MODULE, "--pin-file", two_cards / "card-a.pin", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "invalid_argument", r
    assert "--token" in r.stderr or "token=" in r.stderr, r.stderr
    assert not saw_a_wrong_pin("card-b"), "card-a's PIN was sent to card-b"
    # A URI that matches both cards names no one card.
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:model=SoftHSM%20v2",
                "--pin-file", two_cards / "card-a.pin", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "bad_uri", r
    # Named: card-a only (its private objects listed after the login).
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:token=card-a",
                "--pin-file", two_cards / "card-a.pin", "--json")
    assert r.returncode == 0, r.stderr
    assert {o["token"] for o in json.loads(r.stdout)} == {"card-a"}
    # Named by the object it shows: card-b is logged in to with its own PIN, card-a is not.
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:object=card-b-user",
                "--pin-file", two_cards / "card-b.pin", "--json")
    assert r.returncode == 0, r.stderr
    assert [o["token"] for o in json.loads(r.stdout)] == ["card-b"]
    assert not saw_a_wrong_pin("card-a") and not saw_a_wrong_pin("card-b")
    # Without a PIN, every card is listed as before.
    r = run_cli("token", "objects", "--module", MODULE, "--json")
    assert r.returncode == 0 and {o["token"] for o in json.loads(r.stdout)} == {"card-a", "card-b"}, r


def test_a_pin_file_everyone_can_read_is_refused(two_cards):
    pin = two_cards / "card-a.pin"
    pin.chmod(0o644)
    r = run_cli("token", "objects", "--module", MODULE, "--token", "pkcs11:token=card-a", "--pin-file", pin)
    assert r.returncode != 0 and f"chmod 600 {pin}" in r.stderr, r.stderr
    assert not saw_a_wrong_pin("card-a")
