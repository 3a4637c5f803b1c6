"""`mtls store ...` end to end: import, add-cert, add-token, list, show, delete, export, errors."""
import json
import os
import subprocess

import pytest

from conftest import CLI, TEST_PKI, fresh_copy, sh, write_secret

FAST = ["--kdf-log-n", "10"]  # hidden test-only scrypt cost; the default is 2^17


@pytest.fixture(scope="module")
def pki_made(tmp_path_factory):
    made = tmp_path_factory.mktemp("storepki")
    sh(f"{TEST_PKI} --root . ca 'E2E Store CA' && {TEST_PKI} --leaf . c p256 e2e-client ca && "
       "openssl pkcs12 -export -inkey c.key -in c.pem -certfile ca.pem -passout pass:pw -out c.p12 && "
       "echo pw > pw.txt && echo 'store passphrase' > secret.txt && echo out > outpw.txt && "
       "chmod 600 pw.txt secret.txt outpw.txt", made)
    return made


@pytest.fixture
def pki(pki_made, tmp_path):
    return fresh_copy(pki_made, tmp_path)


def store(pki, *args, env=None):
    base = [CLI, "store", "--store", str(pki / "st" / "store.db"), "--secret-file", str(pki / "secret.txt"), *FAST]
    return subprocess.run([*base, *map(str, args)], capture_output=True, text=True, timeout=60, env=env)


def fingerprint(pki, name):
    return subprocess.run(["openssl", "x509", "-in", str(pki / name), "-outform", "DER"], capture_output=True,
                          check=True).stdout


def sha256_hex(pki, name):
    import hashlib
    return hashlib.sha256(fingerprint(pki, name)).hexdigest()


def test_import_list_show_export_delete(pki):
    r = store(pki, "import", pki / "c.p12", "--label", "client", "--password-file", pki / "pw.txt")
    assert r.returncode == 0, r.stderr
    r = store(pki, "add-cert", pki / "ca.pem", "--label", "root")
    assert r.returncode == 0, r.stderr
    r = store(pki, "add-token", "pkcs11:token=t;object=k", "--label", "hsm", "--cert", pki / "c.pem")
    assert r.returncode == 0, r.stderr

    r = store(pki, "list", "--json")
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)
    assert [(i["label"], i["class"]) for i in items] == [("client", "identity"), ("hsm", "token-identity"),
                                                         ("root", "certificate")]
    client = items[0]
    assert set(client) == {"label", "class", "subject", "issuer", "not_after", "leaf_sha256"}
    assert client["subject"] == "CN=e2e-client" and client["issuer"] == "CN=E2E Store CA"
    assert client["leaf_sha256"] == sha256_hex(pki, "c.pem")
    assert client["not_after"].endswith("Z") and "T" in client["not_after"]

    r = store(pki, "show", "client", "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["chain"] == [sha256_hex(pki, "ca.pem")]
    assert {k: shown[k] for k in client} == client

    r = store(pki, "export", "client", "--out", pki / "out.p12", "--password-file", pki / "outpw.txt")
    assert r.returncode == 0, r.stderr
    assert os.stat(pki / "out.p12").st_mode & 0o077 == 0
    out = subprocess.run(["openssl", "pkcs12", "-in", str(pki / "out.p12"), "-passin", "pass:out", "-nodes"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "PRIVATE KEY" in out.stdout and "friendlyName: client" in out.stdout
    r = store(pki, "export", "client", "--out", pki / "legacy.p12", "--password-file", pki / "outpw.txt", "--legacy")
    assert r.returncode == 0, r.stderr
    info = subprocess.run(["openssl", "pkcs12", "-in", str(pki / "legacy.p12"), "-passin", "pass:out", "-info",
                           "-noout", "-legacy"], capture_output=True, text=True)
    assert "TripleDES" in info.stderr + info.stdout and "sha1" in (info.stderr + info.stdout).lower()

    r = store(pki, "delete", "hsm")
    assert r.returncode == 0, r.stderr
    r = store(pki, "list")
    assert r.returncode == 0 and "hsm" not in r.stdout and "client" in r.stdout


def test_errors_are_one_line_and_non_zero(pki):
    assert store(pki, "import", pki / "c.p12", "--label", "c", "--password-file", pki / "pw.txt").returncode == 0
    cases = [
        (store(pki, "import", pki / "c.p12", "--label", "c", "--password-file", pki / "pw.txt"), "already exists"),
        (store(pki, "import", pki / "c.p12", "--label", "d", "--password-file", pki / "outpw.txt"), ""),
        (store(pki, "show", "nobody"), "nobody"),
        (store(pki, "delete", "nobody"), "nobody"),
        (store(pki, "export", "nobody", "--out", pki / "x.p12", "--password-file", pki / "pw.txt"), "nobody"),
        (store(pki, "add-token", "http://not-pkcs11", "--label", "t", "--cert", pki / "c.pem"), "pkcs11:"),
        (store(pki, "add-cert", pki / "pw.txt", "--label", "bad"), ""),
    ]
    for r, text in cases:
        assert r.returncode != 0, r
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and text in lines[0], r.stderr
    r = store(pki, "import", pki / "c.p12", "--label", "c", "--password-file", pki / "pw.txt", "--replace")
    assert r.returncode == 0, r.stderr
    r = store(pki, "show", "nobody", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "not_found"

    write_secret((pki / "wrong.txt"), "wrong\n")
    r = subprocess.run([CLI, "store", "--store", str(pki / "st" / "store.db"), "--secret-file", str(pki / "wrong.txt"),
                        "list"], capture_output=True, text=True)
    assert r.returncode != 0 and "wrong store secret" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([CLI, "store", "--store", str(pki / "c.p12"), "--secret-file", str(pki / "secret.txt"), "list"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "not a libmtls store" in r.stderr


def test_store_level_errors_schema_read_only_locked(pki):
    import sqlite3
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "root").returncode == 0
    db = pki / "st" / "store.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        r = store(pki, "--busy-timeout", "100", "add-cert", pki / "ca.pem", "--label", "root2")
        assert r.returncode != 0 and "locked" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    finally:
        holder.execute("ROLLBACK")
    holder.execute("PRAGMA user_version=77")
    holder.close()
    r = store(pki, "list")
    assert r.returncode != 0 and "schema version 77" in r.stderr
    r = subprocess.run([CLI, "store", "--store", "/sys/mtls-e2e.db", "--secret-file", str(pki / "secret.txt"),
                        "add-cert", str(pki / "ca.pem"), "--label", "root"], capture_output=True, text=True)
    assert r.returncode != 0 and "Permission denied" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_environment_defaults_and_xdg_path(pki):
    env = dict(os.environ)
    env.pop("MTLS_STORE", None)
    env["MTLS_STORE_SECRET_FILE"] = str(pki / "secret.txt")
    env["XDG_DATA_HOME"] = str(pki / "xdg")
    r = subprocess.run([CLI, "store", *FAST, "add-cert", str(pki / "ca.pem"), "--label", "root"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    db = pki / "xdg" / "mtls" / "store.db"
    assert db.exists() and os.stat(db).st_mode & 0o077 == 0
    assert os.stat(db.parent).st_mode & 0o777 == 0o700
    env["MTLS_STORE"] = str(pki / "env.db")
    r = subprocess.run([CLI, "store", *FAST, "add-cert", str(pki / "ca.pem"), "--label", "root"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert (pki / "env.db").exists()
    env.pop("MTLS_STORE_SECRET_FILE")
    r = subprocess.run([CLI, "store", "list"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "secret" in r.stderr


def test_full_disk_is_one_line_and_keeps_what_was_stored(pki, tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, text=True)
    # Not a skip: the test suite runs as root (CI does); a full disk must be tested for real.
    assert mounted.returncode == 0, f"cannot mount a tmpfs (run the tests as root): {mounted.stderr.strip()}"
    try:
        base = [CLI, "store", "--store", str(mnt / "store.db"), "--secret-file", str(pki / "secret.txt"), *FAST]
        stored = 0
        for i in range(500):
            r = subprocess.run([*base, "import", str(pki / "c.p12"), "--label", f"c{i}", "--password-file",
                                str(pki / "pw.txt")], capture_output=True, text=True)
            if r.returncode != 0:
                break
            stored += 1
        assert r.returncode != 0 and "disk is full" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert stored > 5
        r = subprocess.run([*base, "list", "--json"], capture_output=True, text=True)
        assert r.returncode == 0 and len(json.loads(r.stdout)) == stored
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["show", "client"], ["delete", "client"],
                                  ["export", "client", "--out", "x.p12", "--password-file", "outpw.txt"]],
                         ids=["list", "list-json", "show", "delete", "export"])
def test_reading_a_missing_store_fails_and_creates_nothing(pki, args):
    missing = pki / "typo" / "store.db"
    r = subprocess.run([CLI, "store", "--store", str(missing), "--secret-file", str(pki / "secret.txt"),
                        *[str(pki / a) if a.endswith((".p12", ".txt")) else a for a in args]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no store at" in lines[0] and str(missing) in lines[0], r.stderr
    assert not missing.exists() and not missing.parent.exists()


def test_connect_with_a_missing_store_fails_and_creates_nothing(pki):
    missing = pki / "typo.db"
    # The store is opened when an identity is asked of it (a label, or automatic selection).
    for extra in (["--identity", "auto"], ["--identity", "client"]):
        r = subprocess.run([CLI, "connect", "127.0.0.1:1", "--store", str(missing), "--secret-file",
                            str(pki / "secret.txt"), *extra], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert "no store at" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        r = subprocess.run([CLI, "connect", "127.0.0.1:1", "--store", str(missing), "--secret-file",
                            str(pki / "secret.txt"), "--json", *extra], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "no store at" in json.loads(r.stdout)["error"]
    assert not missing.exists()


def test_serve_with_a_label_in_a_missing_store_fails_and_creates_nothing(pki):
    missing = pki / "typo.db"
    r = subprocess.run([CLI, "serve", "--port", "0", "--identity", "server", "--store", str(missing),
                        "--secret-file", str(pki / "secret.txt")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no store at" in r.stderr, r.stderr
    assert not missing.exists()


def test_only_adding_commands_create_the_store(pki):
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "root").returncode == 0
    assert (pki / "st" / "store.db").exists()
    r = store(pki, "list", "--json")
    assert r.returncode == 0 and [i["label"] for i in json.loads(r.stdout)] == ["root"], r


@pytest.mark.parametrize("damage", ["wrong-password", "truncated"])
def test_failed_import_into_a_new_store_leaves_no_file(pki, damage):
    write_secret((pki / "wrong.txt"), "wrong\n")
    (pki / "half.p12").write_bytes((pki / "c.p12").read_bytes()[:300])
    p12, pw = (pki / "c.p12", pki / "wrong.txt") if damage == "wrong-password" else (pki / "half.p12", pki / "pw.txt")
    r = store(pki, "import", p12, "--label", "client", "--password-file", pw)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (pki / "st").exists(), list((pki / "st").iterdir())
    # Into an existing store, the failure changes nothing and keeps the store.
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "root").returncode == 0
    assert store(pki, "import", p12, "--label", "client", "--password-file", pw).returncode != 0
    r = store(pki, "list", "--json")
    assert r.returncode == 0 and [i["label"] for i in json.loads(r.stdout)] == ["root"], r


def test_a_stored_certificate_is_an_anchor_by_label(pki):
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "root").returncode == 0
    location = ["--store", str(pki / "st" / "store.db"), "--secret-file", str(pki / "secret.txt")]

    def verify(anchor):
        r = subprocess.run([CLI, "verify", str(pki / "c.pem"), "--purpose", "client", "--anchors-only", "--anchor", anchor,
                            *location, "--json"], capture_output=True, text=True, timeout=60)
        return json.loads(r.stdout)

    # The stored root anchors the chain exactly as the file does (the openssl-made leaf has other
    # faults, the same with either), and unlike an anchor that is not its issuer.
    by_file = verify(str(pki / "ca.pem"))
    assert by_file["chain"][-1] == sha256_hex(pki, "ca.pem"), by_file
    for anchor in ("root", "store:root"):
        assert verify(anchor) == by_file
    assert store(pki, "add-cert", pki / "c.pem", "--label", "leaf").returncode == 0
    assert verify("leaf")["chain"] != by_file["chain"]
    # An unknown label, and a label without a store, are one-line errors.
    r = subprocess.run([CLI, "verify", str(pki / "c.pem"), "--anchor", "nope", *location], capture_output=True, text=True)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "nope" in r.stderr, r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("MTLS_STORE", "MTLS_STORE_SECRET_FILE")}
    r = subprocess.run([CLI, "verify", str(pki / "c.pem"), "--anchor", "store:root"], capture_output=True, text=True,
                       env=env)
    assert r.returncode != 0 and "needs a store" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_pin_value_is_never_stored_or_printed(pki):
    r = store(pki, "add-token", "pkcs11:token=t;object=k?pin-source=file:/run/pin&pin-value=31415926",
              "--label", "hsm", "--cert", pki / "c.pem")
    assert r.returncode == 0, r.stderr
    assert "31415926" not in r.stdout + r.stderr
    assert "warning:" in r.stderr and "pin-value" in r.stderr
    # The URI as p11-kit formats it without the PIN: pin-source stays (percent-encoded).
    assert "pkcs11:token=t;object=k?pin-source=file%3A%2Frun%2Fpin" in r.stdout
    for args in (["show", "hsm"], ["show", "hsm", "--json"], ["list", "--json"]):
        r = store(pki, *args)
        assert r.returncode == 0, r.stderr
        assert "31415926" not in r.stdout
    assert json.loads(store(pki, "show", "hsm", "--json").stdout)["token_uri"] == \
        "pkcs11:token=t;object=k?pin-source=file%3A%2Frun%2Fpin"
    # Nothing of the PIN in the file (or its WAL).
    for f in (pki / "st").iterdir():
        assert b"31415926" not in f.read_bytes(), f


def test_tampered_rows_are_refused_by_label(pki):
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "root").returncode == 0
    assert store(pki, "add-token", "pkcs11:token=t;object=k", "--label", "hsm", "--cert", pki / "c.pem").returncode == 0
    sh(f"{TEST_PKI} --root . evil 'E2E Store CA' && openssl x509 -in evil.pem -outform DER -out evil.der", pki)
    db = pki / "st" / "store.db"
    # The attacker's root in place of the pinned one: mtls verify --anchor LABEL never trusts it
    # (the certificate does not match the row's authenticated fingerprint).
    sh(f"sqlite3 {db} \"UPDATE items SET leaf = readfile('evil.der') WHERE label = 'root'\"", pki)
    r = subprocess.run([CLI, "verify", pki / "c.pem", "--store", db, "--secret-file", pki / "secret.txt",
                        "--anchor", "root", "--anchors-only"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and '"root" is tampered or damaged' in r.stdout + r.stderr, r
    # ... and with the row's fingerprint changed to match, or a token URI edited: every read of
    # the row, metadata included, refuses it.
    evil_sha = subprocess.run("openssl x509 -in evil.pem -outform DER | sha256sum", shell=True, cwd=pki,
                              capture_output=True, text=True, check=True).stdout.split()[0]
    sh(f"sqlite3 {db} \"UPDATE items SET leaf_sha256 = '{evil_sha}' WHERE label = 'root'; "
       f"UPDATE items SET token_uri = 'pkcs11:token=t;object=k?module-path=/tmp/evil.so' WHERE label = 'hsm'\"", pki)
    for label in ("root", "hsm"):
        r = store(pki, "show", label, "--json")
        assert r.returncode != 0
        out = json.loads(r.stdout)
        assert out["error"] == "corrupt" and f'"{label}" is tampered or damaged' in out["message"], out


def test_secret_file_is_a_passphrase_and_key_file_a_key(pki, tmp_path):
    key = tmp_path / "store.key"
    write_secret(key, os.urandom(32))
    db = tmp_path / "k" / "store.db"
    base = [CLI, "store", "--store", str(db), *FAST]
    r = subprocess.run([*base, "--key-file", str(key), "add-cert", str(pki / "ca.pem"), "--label", "root"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*base, "--secret-file", str(key), "list"], capture_output=True, text=True)
    assert r.returncode != 0 and "wrong store secret" in r.stderr and "--key-file" in r.stderr
    r = subprocess.run([*base, "list"], capture_output=True, text=True, env={**os.environ, "MTLS_STORE_KEY_FILE": str(key)})
    assert r.returncode == 0 and "root" in r.stdout, r.stderr
    r = subprocess.run([*base, "--key-file", str(key), "--secret-file", str(key), "list"], capture_output=True, text=True)
    assert r.returncode != 0 and "not both" in r.stderr
    # A passphrase of exactly 32 bytes with its newline is stretched (a passphrase store).
    pw = tmp_path / "pw.txt"
    write_secret(pw, "0123456789012345678901234567890\n")
    db2 = tmp_path / "p" / "store.db"
    r = subprocess.run([CLI, "store", "--store", str(db2), "--secret-file", str(pw), *FAST, "add-cert",
                        str(pki / "ca.pem"), "--label", "root"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["sqlite3", str(db2), "SELECT value FROM meta WHERE name = 'kdf'"], capture_output=True, text=True)
    assert r.stdout.strip() == "scrypt"
