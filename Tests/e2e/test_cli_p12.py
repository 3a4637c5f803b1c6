"""`mtls p12 inspect --json` against files made by openssl and keytool at run time."""
import hashlib
import json
import pathlib
import shlex
import subprocess

import pytest

from conftest import TEST_PKI, fresh_copy, sh, write_secret


@pytest.fixture(scope="module")
def pki_made(tmp_path_factory):
    made = tmp_path_factory.mktemp("p12pki")
    sh(f"{TEST_PKI} --root . root 'E2E Root' && {TEST_PKI} --leaf . leaf rsa2048 e2e.client root && "
       "openssl x509 -in leaf.pem -outform DER -out leaf.der && "
       "openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -name 'e2e id' -passout pass:pw -out id.p12 && "
       "openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -passout pass: -out empty.p12 && "
       "openssl pkcs12 -export -nokeys -in root.pem -passout pass:pw -out certs.p12 && "
       "printf 'pw\\n' > pw.txt && : > empty.txt && chmod 600 pw.txt empty.txt",
       made)
    return made


@pytest.fixture
def pki(pki_made, tmp_path):
    return fresh_copy(pki_made, tmp_path)


def test_inspect_json_has_exactly_the_documented_keys(pki, cli):
    r = cli("p12", "inspect", pki / "id.p12", "--password-file", pki / "pw.txt", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"identities", "certificates", "password_encoding"}
    assert out["password_encoding"] == "given"
    [ident] = out["identities"]
    assert set(ident) == {"key_type", "leaf_sha256", "leaf_subject_cn", "chain_count", "friendly_name"}
    assert ident["key_type"] == "rsa2048"
    assert ident["leaf_sha256"] == hashlib.sha256((pki / "leaf.der").read_bytes()).hexdigest()
    assert ident["leaf_subject_cn"] == "e2e.client"
    assert ident["chain_count"] == 1
    assert ident["friendly_name"] == "e2e id"
    assert len(out["certificates"]) == 2
    assert all({"sha256", "subject"} <= set(c) for c in out["certificates"])
    assert ident["leaf_sha256"] in [c["sha256"] for c in out["certificates"]]


def test_empty_password_file_no_password_and_environment(pki, cli):
    r = cli("p12", "inspect", pki / "empty.p12", "--password-file", pki / "empty.txt", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["identities"][0]["friendly_name"] is None
    assert json.loads(r.stdout)["password_encoding"] == "empty"
    # Written with the empty password, opened with none: both encodings are tried, as OpenSSL
    # does, and the output says which one opened the file.
    r = cli("p12", "inspect", pki / "empty.p12", "--no-password", "--json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["password_encoding"] == "empty"
    assert json.loads(r.stdout)["identities"][0]["leaf_subject_cn"] == "e2e.client"
    import os
    env_run = subprocess.run([os.environ.get("MTLS_CLI", "mtls"), "p12", "inspect", str(pki / "id.p12"), "--json"],
                             capture_output=True, text=True, env={**os.environ, "MTLS_P12_PASSWORD": "pw"})
    assert env_run.returncode == 0, env_run.stderr
    r = cli("p12", "inspect", pki / "id.p12", "--json")  # no password source at all
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "bad_password"
    # File problems are named by their own code, as `cert show` names them; the PKCS#12 names
    # are for the file's content.
    r = cli("p12", "inspect", pki / "id.p12", "--password-file", pki / "missing.txt", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "not_found"
    r = cli("p12", "inspect", pki / "missing.p12", "--password-file", pki / "pw.txt", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "not_found"
    r = cli("cert", "show", pki / "missing.p12", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "not_found"


def test_usage_error_with_json_is_one_error_object(pki, cli):
    r = cli("p12", "inspect", pki / "id.p12", "--password-file", pki / "pw.txt", "--no-password", "--json")
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["error"] == "invalid_argument" and "--no-password" in out["message"]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mtls: ") and "mtls p12 inspect --help" in lines[0], r.stderr


def test_certificate_only_file_lists_certificates(pki, cli):
    r = cli("p12", "inspect", pki / "certs.p12", "--password-file", pki / "pw.txt", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["identities"] == [] and len(out["certificates"]) == 1


@pytest.mark.parametrize("damage,code", [
    ("wrong_password", "bad_password"),
    ("truncated", "corrupt"),
    ("pem", "not_pkcs12"),
    ("empty", "not_pkcs12"),
    ("random", "not_pkcs12"),
])
def test_failures_give_the_error_object_and_nonzero_exit(pki, cli, damage, code):
    data = (pki / "id.p12").read_bytes()
    target = pki / "bad.p12"
    password = pki / "pw.txt"
    if damage == "wrong_password":
        target.write_bytes(data)
        write_secret((pki / "wrong.txt"), "nope\n")
        password = pki / "wrong.txt"
    elif damage == "truncated":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "pem":
        target.write_bytes((pki / "leaf.pem").read_bytes())
    elif damage == "empty":
        target.write_bytes(b"")
    else:
        target.write_bytes(bytes(range(256)) * 8)
    r = cli("p12", "inspect", target, "--password-file", password, "--json")
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert set(out) == {"error", "message"}
    assert out["error"] == code, out
    assert out["message"]
    r = cli("p12", "inspect", target, "--password-file", password)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1


def test_java_keystore_with_two_entries(tmp_path, cli):
    for alias, alg in (("alice", "-keyalg EC -groupname secp384r1"), ("bob", "-keyalg RSA -keysize 2048")):
        sh(f"keytool -genkeypair -keystore ks.p12 -storetype PKCS12 -storepass changeit -alias {alias} {alg} "
           f"-dname CN={alias} -validity 5", tmp_path)
    write_secret((tmp_path / "pw.txt"), "changeit")
    r = cli("p12", "inspect", tmp_path / "ks.p12", "--password-file", tmp_path / "pw.txt", "--json")
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout)["identities"]
    assert [(i["friendly_name"], i["key_type"], i["leaf_subject_cn"]) for i in ids] == \
        [("alice", "p384", "alice"), ("bob", "rsa2048", "bob")]


def test_text_output(pki, cli):
    r = cli("p12", "inspect", pki / "id.p12", "--password-file", pki / "pw.txt")
    assert r.returncode == 0, r.stderr
    assert "Identity #1 \"e2e id\"" in r.stdout and "Chain check:   verified" in r.stdout


JAVA_WRITER = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "java" / "WriteKeyStore.java"


@pytest.mark.parametrize("how", ["empty", "null"])
def test_java_key_store_without_a_password_opens_either_way(pki, cli, how):
    # java.security.KeyStore writes these: the empty password (MAC and bags under ""), or no
    # password at all (Java's password-less store: no MAC, the key under an empty char[]). A user
    # cannot know which encoding a producer used, so no password and "" both open each file.
    sh("openssl pkcs8 -topk8 -nocrypt -in leaf.key -outform DER -out leaf.pk8", pki)
    name = "Zoë's clé ☺ 😀"  # Java keeps aliases in lower case
    flags = "-Dkeystore.pkcs12.macAlgorithm=NONE -Dkeystore.pkcs12.certProtectionAlgorithm=NONE" if how == "null" else ""
    password = "--null" if how == "null" else "''"
    sh(f"java {flags} {JAVA_WRITER} java.p12 leaf.pk8 leaf.pem {shlex.quote(name)} {password}", pki)
    for source in (["--no-password"], ["--password-file", pki / "empty.txt"]):
        r = cli("p12", "inspect", pki / "java.p12", *source, "--json")
        assert r.returncode == 0, (source, r.stdout, r.stderr)
        out = json.loads(r.stdout)
        assert out["password_encoding"] in ("empty", "absent"), out
        ident, = out["identities"]
        assert (ident["friendly_name"], ident["leaf_subject_cn"]) == (name.lower(), "e2e.client"), ident
    r = cli("p12", "inspect", pki / "java.p12", "--password-file", pki / "pw.txt", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "bad_password", r.stdout
