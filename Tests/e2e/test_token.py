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
    r = run_cli("token", "objects", "--module", MODULE, "--pin-file", token / "pin", "--json")
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
    (["objects", "--pin-file", "BAD"], "pin_incorrect", "PIN is incorrect"),
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
    r = run_cli("token", *args, "--module", MODULE, "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == code


def test_missing_module_is_not_found(token):
    r = run_cli("token", "list", "--module", "/nonexistent/module.so")
    assert r.returncode != 0 and "no PKCS#11 module" in r.stderr
    assert run_cli("token", "--help").returncode == 0
    assert run_cli("token", "objects", "--help").returncode == 0
