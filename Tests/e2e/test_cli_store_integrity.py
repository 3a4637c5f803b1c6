"""The store as a whole (issue 24) through `mtls`: an attacker who can write the store file (here
with Python's sqlite3) but does not know its secret edits it, then the command line is asked.
Each attack went through on 1a1cbe4: the downgrade laundered the anchor, the rolled-back anchor
and the deleted row went unnoticed, the old secret kept opening the store after change-secret,
and a PIN among the path attributes was stored. Also `store upgrade` and `store show-counter`."""
import hashlib
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, TEST_PKI, fresh_copy, sh

FAST = ["--kdf-log-n", "10"]  # hidden test-only scrypt cost
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "store"


@pytest.fixture(scope="module")
def pki_made(tmp_path_factory):
    made = tmp_path_factory.mktemp("integritypki")
    sh(f"{TEST_PKI} --root . ca 'Acme Root' && {TEST_PKI} --leaf . c p256 e2e-client ca && "
       f"{TEST_PKI} --root . evil 'Acme Root' && {TEST_PKI} --leaf . e p256 e2e-client evil && "
       "openssl pkcs12 -export -inkey c.key -in c.pem -certfile ca.pem -passout pass:pw -out c.p12 && "
       "echo pw > pw.txt && echo 'store passphrase' > secret.txt && echo 'new passphrase' > new.txt && "
       "echo out > outpw.txt && chmod 600 pw.txt secret.txt new.txt outpw.txt", made)
    return made


@pytest.fixture
def pki(pki_made, tmp_path):
    return fresh_copy(pki_made, tmp_path)


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


def store(pki, *args, secret="secret.txt"):
    return run("store", "--store", pki / "store.db", "--secret-file", pki / secret, *FAST, *args)


def der(path):
    return subprocess.run(["openssl", "x509", "-in", str(path), "-outform", "DER"], capture_output=True,
                          check=True).stdout


def verify(pki, leaf, anchor):
    return run("verify", pki / leaf, "--purpose", "client", "--anchors-only", "--anchor", anchor,
               "--store", pki / "store.db", "--secret-file", pki / "secret.txt", "--json")


def edit(path, *statements, params=()):
    db = sqlite3.connect(str(path), isolation_level=None)
    try:
        for i, s in enumerate(statements):
            db.execute(s, params[i] if i < len(params) else ())
    finally:
        db.close()


def user_version(path):
    db = sqlite3.connect(str(path))
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def test_downgrade_laundering_is_refused_and_nothing_is_written(pki):
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "acme-root").returncode == 0
    r = verify(pki, "c.pem", "acme-root")
    assert r.returncode == 0 and r.stdout, r
    good = json.loads(r.stdout)
    evil = der(pki / "evil.pem")
    # Drop the tags, claim schema 2, put the attacker's root under the pinned label.
    edit(pki / "store.db", "ALTER TABLE items DROP COLUMN mac", "PRAGMA user_version = 2",
         "UPDATE items SET leaf = ?, leaf_sha256 = ? WHERE label = 'acme-root'",
         params=((), (), (evil, hashlib.sha256(evil).hexdigest())))
    r = verify(pki, "e.pem", "acme-root")
    assert r.returncode != 0, r.stdout
    assert "tampered or damaged" in r.stderr, r
    assert hashlib.sha256(evil).hexdigest() not in r.stdout
    r = store(pki, "list")
    assert r.returncode != 0 and "tampered or damaged" in r.stderr, r.stderr
    assert store(pki, "upgrade", "--yes").returncode != 0  # never vouched for again
    assert user_version(pki / "store.db") == 2  # nothing written
    assert good["chain"][-1] == hashlib.sha256(der(pki / "ca.pem")).hexdigest()


def test_rolled_back_anchor_and_deleted_rows_are_refused_by_label(pki):
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "acme-root").returncode == 0
    assert store(pki, "add-cert", pki / "c.pem", "--label", "other").returncode == 0
    db = sqlite3.connect(str(pki / "store.db"))
    old = db.execute("SELECT * FROM items WHERE label = 'acme-root'").fetchone()
    db.close()
    # The anchor is renewed; the attacker writes the old (authentic) row back.
    assert store(pki, "add-cert", pki / "evil.pem", "--label", "acme-root", "--replace").returncode == 0
    edit(pki / "store.db", "DELETE FROM items WHERE label = 'acme-root'",
         f"INSERT INTO items VALUES ({', '.join('?' * len(old))})", params=((), old))
    r = store(pki, "show", "acme-root")
    assert r.returncode != 0 and "acme-root" in r.stderr and "tampered or damaged" in r.stderr, r.stderr
    r = verify(pki, "c.pem", "acme-root")
    assert r.returncode != 0 and "acme-root" in r.stderr and "tampered or damaged" in r.stderr, r
    # A row deleted behind the library's back is an error naming it, not "not found".
    edit(pki / "store.db", "DELETE FROM items WHERE label = 'other'")
    r = store(pki, "show", "other", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "corrupt", r.stdout
    assert "other" in r.stderr
    assert store(pki, "list").returncode != 0
    r = store(pki, "show", "never-stored", "--json")
    assert json.loads(r.stdout)["error"] == "not_found"


def test_change_secret_rotates_the_data_key(pki):
    r = store(pki, "import", pki / "c.p12", "--label", "before", "--password-file", pki / "pw.txt")
    assert r.returncode == 0, r.stderr
    edit(pki / "store.db", "CREATE TABLE old_meta AS SELECT * FROM meta")
    r = store(pki, "change-secret", "--new-secret-file", pki / "new.txt")
    assert r.returncode == 0, r.stderr
    rotated = r.stdout
    r = store(pki, "import", pki / "c.p12", "--label", "after", "--password-file", pki / "pw.txt", secret="new.txt")
    assert r.returncode == 0, r.stderr
    assert store(pki, "list", secret="secret.txt").returncode != 0
    # The pre-rotation header rows put back: the old secret opens nothing written after the
    # change, and exports no key.
    shutil.copy(pki / "store.db", pki / "copy.db")
    edit(pki / "store.db", "DELETE FROM meta", "INSERT INTO meta SELECT * FROM old_meta")
    for label in ("after", "before"):
        r = store(pki, "export", label, "--out", pki / f"{label}.p12", "--password-file", pki / "outpw.txt")
        assert r.returncode != 0, r.stdout
        assert not (pki / f"{label}.p12").exists()
    assert store(pki, "list").returncode != 0
    # The new secret reads the untouched copy.
    r = run("store", "--store", pki / "copy.db", "--secret-file", pki / "new.txt", "list", "--json")
    assert r.returncode == 0 and [i["label"] for i in json.loads(r.stdout)] == ["after", "before"], r.stderr
    assert "rotated" in rotated


def test_a_pin_among_the_path_attributes_is_not_stored_or_printed(pki):
    r = store(pki, "add-token", "pkcs11:token=T;object=O;pin-value=1234", "--label", "tok", "--cert", pki / "c.pem")
    assert r.returncode == 0, r.stderr
    assert "1234" not in r.stdout and "warning:" in r.stderr
    shown = json.loads(store(pki, "show", "tok", "--json").stdout)
    assert "1234" not in shown["token_uri"] and "pin-value" not in shown["token_uri"]
    assert "token=T" in shown["token_uri"] and "object=O" in shown["token_uri"]
    for f in pki.glob("store.db*"):
        assert b"pin-value=1234" not in f.read_bytes(), f


def fixture_store(pki, name):
    shutil.copy(FIXTURES / name, pki / "old.db")
    # A clone gives the committed key file the mode of its umask: the copy is owner-only.
    shutil.copy(FIXTURES / "store.key", pki / "fixture.key")
    (pki / "fixture.key").chmod(0o600)
    return ["store", "--store", pki / "old.db", "--key-file", pki / "fixture.key"]


def test_upgrade_of_an_older_store_lists_what_it_vouches_for_and_needs_confirmation(pki):
    base = fixture_store(pki, "v2.db")
    r = run(*base, "list")
    assert r.returncode != 0 and "mtls store upgrade" in r.stderr, r.stderr
    r = run(*base, "list", "--json")
    assert json.loads(r.stdout)["error"] == "upgrade_required"
    # Without --yes and without a terminal: the list, and nothing changed.
    r = run(*base, "upgrade")
    assert r.returncode != 0 and "nothing was changed" in r.stderr, r.stderr
    root_sha = hashlib.sha256(der(FIXTURES / "ca.pem")).hexdigest()
    for shown in ("acme-root", "CN=Acme Root", root_sha, "client", "CN=fixture-client", "tok", "certificate",
                  "identity", "token-identity"):
        assert shown in r.stdout, (shown, r.stdout)
    assert "1234" not in r.stdout  # the old store's path pin-value is not shown
    assert user_version(pki / "old.db") == 2
    r = run(*base, "upgrade", "--yes")
    assert r.returncode == 0 and "3 items authenticated" in r.stdout, r.stderr
    r = run(*base, "list", "--json")
    assert r.returncode == 0 and [i["label"] for i in json.loads(r.stdout)] == ["acme-root", "client", "tok"]
    assert "1234" not in json.loads(run(*base, "show", "tok", "--json").stdout)["token_uri"]
    r = run(*base, "upgrade", "--yes")
    assert r.returncode == 0 and "nothing to upgrade" in r.stdout
    # --json reports what was vouched for.
    base = fixture_store(pki, "v2.db")
    r = run(*base, "upgrade", "--yes", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["upgraded"] is True
    assert {i["label"]: i["leaf_sha256"] for i in out["items"]}["acme-root"] == root_sha


FORBIDDEN = [b"\x1b", b"\x07", b"\r", b"\xc2\x9b", "\u202e".encode()]


def test_upgrade_preview_shows_the_fingerprints_of_the_rows_certificates_one_clean_numbered_line_each(pki):
    """Issue 35 item 6: someone who can write an old store file, without its secret, puts a rogue
    root's DER in the anchor's row (leaving its genuine fingerprint column) and adds a row whose
    label holds terminal escapes. The review shows the rogue root's fingerprint, since that is
    what the upgrade authenticates, and no raw escape; each row is one numbered line."""
    base = fixture_store(pki, "v2.db")
    rogue = der(pki / "evil.pem")
    rogue_sha, root_sha = hashlib.sha256(rogue).hexdigest(), hashlib.sha256(der(FIXTURES / "ca.pem")).hexdigest()
    hostile = "x\x1b[2J\x1b]0;pwned\x07\u009b1m\u202eevil\r\n  4. forged"
    edit(pki / "old.db", "UPDATE items SET leaf = ? WHERE label = 'acme-root'",
         "INSERT INTO items (class, label, subject, subject_cn, issuer, not_after, leaf_sha256, chain_sha256, leaf, chain, "
         "generation, created, modified) SELECT 2, ?, subject, subject_cn, issuer, not_after, leaf_sha256, chain_sha256, "
         "leaf, chain, 7, created, modified FROM items WHERE label = 'acme-root'",
         params=[(rogue,), (hostile,)])
    r = subprocess.run([CLI, *map(str, base), "upgrade"], capture_output=True, timeout=120)
    assert r.returncode != 0 and b"nothing was changed" in r.stderr, r.stderr
    for bad in FORBIDDEN:
        assert bad not in r.stdout + r.stderr, (bad, r.stdout)
    rows = [line for line in r.stdout.decode().splitlines() if line.startswith("  ")]
    assert [line.split(".")[0] for line in rows] == ["  1", "  2", "  3", "  4"], rows
    anchor = [line for line in rows if "\tcertificate\t" in line and line.startswith("  1. acme-root\t")]
    assert len(anchor) == 1 and rogue_sha in anchor[0] and root_sha not in anchor[0], rows
    assert any("forged" in line and rogue_sha in line for line in rows), rows  # the hostile row, on its own line
    # What was shown is what is authenticated: the rogue root, under its own fingerprint.
    r = subprocess.run([CLI, *map(str, base), "upgrade", "--yes", "--json"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for bad in FORBIDDEN:
        assert bad not in r.stdout, (bad, r.stdout)  # escaped in the JSON text...
    items = {i["label"]: i for i in json.loads(r.stdout)["items"]}
    assert items["acme-root"]["leaf_sha256"] == rogue_sha and hostile in items, items  # ... and exact once read
    shown = json.loads(run(*base, "show", "acme-root", "--json").stdout)
    assert shown["leaf_sha256"] == rogue_sha, shown


def test_a_schema_3_store_opens_after_its_rows_authenticate(pki):
    base = fixture_store(pki, "v3.db")
    r = run(*base, "show", "acme-root", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["subject"] == "CN=Acme Root", r.stderr
    assert user_version(pki / "old.db") == 4


def test_show_counter_counts_every_write(pki):
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "a").returncode == 0
    r = store(pki, "show-counter")
    assert r.returncode == 0 and r.stdout.strip() == "1", r
    assert store(pki, "add-cert", pki / "c.pem", "--label", "b").returncode == 0
    assert store(pki, "delete", "a").returncode == 0
    r = store(pki, "show-counter", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"write_counter": 3}
    # A whole-file rollback is what a copy of the counter kept elsewhere catches.
    shutil.copy(pki / "store.db", pki / "older.db")
    assert store(pki, "add-cert", pki / "ca.pem", "--label", "c").returncode == 0
    r = run("store", "--store", pki / "older.db", "--secret-file", pki / "secret.txt", "show-counter")
    assert int(r.stdout) < int(store(pki, "show-counter").stdout)
