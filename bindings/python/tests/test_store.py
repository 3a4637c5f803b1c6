import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import mtls
from mtls import errors
from mtls.store import Store, StoreKey

KDF = {"kdf_log_n": 10, "create": True}  # cheap scrypt for tests (the default is 2^17); each test makes its stores


def sh(cmd, cwd):
    subprocess.run(cmd, shell=True, cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and two client identities as .p12 files (password "pw")."""
    d = tmp_path_factory.mktemp("store-pki")
    sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
       "-subj '/CN=Py Store CA' -days 5 -addext 'basicConstraints=critical,CA:TRUE'", d)
    for name in ("alice", "bob"):
        sh(f"openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout {name}.key -out {name}.csr "
           f"-subj '/CN={name}' && openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
           f"-out {name}.pem -days 5 && openssl pkcs12 -export -inkey {name}.key -in {name}.pem -certfile ca.pem "
           f"-passout pass:pw -out {name}.p12", d)
    return d


def sha256_of(pem_path):
    return mtls.Certificate.load(str(pem_path)).sha256_hex


def test_import_get_list_find_delete_export(pki, tmp_path):
    path = tmp_path / "s" / "store.db"
    with Store(path, "secret", **KDF) as st:
        with pytest.raises(errors.BadPassword):
            st.import_pkcs12("alice", (pki / "alice.p12").read_bytes(), "nope")
        st.import_pkcs12("alice", (pki / "alice.p12").read_bytes(), "pw")
        with pytest.raises(errors.Duplicate, match="--replace"):  # the message names the fix (issue 38)
            st.import_pkcs12("alice", (pki / "bob.p12").read_bytes(), "pw")
        st.import_pkcs12("bob", (pki / "bob.p12").read_bytes(), "pw")
        ca = mtls.Certificate.load(str(pki / "ca.pem"))
        st.put_certificate("ca", ca)
        st.put_token_identity("hsm", "pkcs11:token=t;object=k", ca)
        items = st.list()
        assert [(i.label, i.item_class) for i in items] == [
            ("alice", "identity"), ("bob", "identity"), ("ca", "certificate"), ("hsm", "token-identity")]
        alice = st.info("alice")
        assert alice.subject == "CN=alice" and alice.issuer == "CN=Py Store CA"
        assert alice.leaf_sha256 == sha256_of(pki / "alice.pem")
        assert alice.chain_sha256 == [ca.sha256_hex]
        assert alice.token_uri is None and alice.created <= alice.modified
        assert [i.label for i in st.find_sha256(alice.leaf_sha256)] == ["alice"]
        assert [i.label for i in st.find_subject("bob")] == ["bob"]
        assert st.get_certificate("ca").sha256_hex == ca.sha256_hex
        uri, cert = st.get_token_identity("hsm")
        assert uri == "pkcs11:token=t;object=k" and cert.sha256_hex == ca.sha256_hex
        assert [i.leaf.subject for i in st.identities()] == ["CN=alice", "CN=bob"]
        st.put_identities([("x1", st.get_identity("alice")), ("x2", st.get_identity("bob"))])
        with pytest.raises(errors.Duplicate):
            st.put_identities([("x3", st.get_identity("alice")), ("x2", st.get_identity("bob"))])
        assert st.delete("x1") == 1 and st.delete("x2") == 1
        with pytest.raises(errors.NotFound):
            st.delete("x3")
        assert st.get_identity("bob").leaf.subject == "CN=bob"
        assert len(st.get_identity("bob").chain) == 1
        with pytest.raises(errors.NotFound):
            st.get_identity("nobody")
        p12 = st.export_pkcs12("alice", "out")
        (tmp_path / "out.p12").write_bytes(p12)
        sh("openssl pkcs12 -in out.p12 -passin pass:out -nokeys -info 2>&1 | grep -q 'friendlyName: alice'", tmp_path)
        assert st.delete("bob") == 1
        with pytest.raises(errors.NotFound):
            st.delete("bob")
        assert st.delete_class("token-identity") == 1
        assert [i.label for i in st.list()] == ["alice", "ca"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"


def test_errors_bad_secret_not_a_store_schema_too_new(pki, tmp_path):
    path = tmp_path / "store.db"
    with Store(path, "right", **KDF) as st:
        st.put_certificate("ca", mtls.Certificate.load(str(pki / "ca.pem")))
    before = path.read_bytes()
    with pytest.raises(errors.BadSecret):
        Store(path, "wrong", **KDF)
    with pytest.raises(errors.BadSecret):
        Store(path, StoreKey(b"k" * 32), **KDF)
    assert path.read_bytes() == before
    with pytest.raises(errors.NotAStore):
        Store(pki / "alice.p12", "x", **KDF)
    with pytest.raises(errors.NotFound):
        Store(tmp_path / "missing.db", "x", kdf_log_n=10)
    with pytest.raises(errors.ReadOnly):
        Store("/sys/mtls-py-store.db", "x", **KDF)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=42")
    db.close()
    with pytest.raises(errors.SchemaTooNew):
        Store(path, "right", **KDF)


def test_secret_files_everyone_can_read_are_refused_and_group_readable_ones_warn(tmp_path):
    """Issue 23, defect 10: a secret or key file others can write or everyone can read is refused
    (InvalidArgument naming the file and the chmod that fixes it); a group-readable one is used,
    with an mtls.LibraryWarning; an owner-only one silently."""
    secret = tmp_path / "secret.txt"
    secret.write_text("store passphrase\n")
    for mode in (0o644, 0o666, 0o620):
        secret.chmod(mode)
        with pytest.raises(errors.InvalidArgument) as e:
            Store(tmp_path / "s.db", secret_file=secret, **KDF)
        assert str(secret) in str(e.value) and "chmod 600" in str(e.value)
    secret.chmod(0o640)
    with pytest.warns(mtls.LibraryWarning, match="group"):
        Store(tmp_path / "s.db", secret_file=secret, **KDF).close()
    secret.chmod(0o600)
    with Store(tmp_path / "s.db", secret_file=secret, **KDF):
        pass
    assert mtls.take_warnings() == []
    key = tmp_path / "store.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o604)
    with pytest.raises(errors.InvalidArgument, match="chmod 600"):
        Store(tmp_path / "k.db", key_file=key, **KDF)


def test_a_secret_file_owned_by_another_user_is_refused(tmp_path):
    """As OpenSSH: a secret file owned by neither the user nor root is refused (InvalidArgument
    naming the file and its owner), whatever its mode. The tests run as root."""
    assert os.geteuid() == 0, "the tests run as root, to give a file to another uid"
    secret = tmp_path / "secret.txt"
    secret.write_text("store passphrase\n")
    secret.chmod(0o600)
    os.chown(secret, 4242, 4242)
    with pytest.raises(errors.InvalidArgument) as e:
        Store(tmp_path / "s.db", secret_file=secret, **KDF)
    assert str(secret) in str(e.value) and "owned by another user (uid 4242)" in str(e.value)
    os.chown(secret, 0, 0)
    with Store(tmp_path / "s.db", secret_file=secret, **KDF):
        pass


def test_change_secret_to_a_key_file(pki, tmp_path):
    path, keyfile = tmp_path / "store.db", tmp_path / "store.key"
    keyfile.write_bytes(os.urandom(32))
    keyfile.chmod(0o600)  # a secret file: libmtls refuses one everyone can read
    with Store(path, "old", **KDF) as st:
        st.import_pkcs12("alice", (pki / "alice.p12").read_bytes(), "pw")
        st.change_secret(StoreKey(keyfile.read_bytes()))
    with pytest.raises(errors.BadSecret):
        Store(path, "old", **KDF)
    # A secret file is always a passphrase, even of 32 bytes: the key file is named as such.
    with pytest.raises(errors.BadSecret):
        Store(path, secret_file=keyfile)
    with Store(path, key_file=keyfile) as st:
        assert st.info("alice").item_class == "identity"


def test_locked_beyond_the_busy_timeout(pki, tmp_path):
    path = tmp_path / "store.db"
    Store(path, "s", **KDF).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Store(path, "s", busy_timeout_ms=100, **KDF) as st:
            with pytest.raises(errors.Locked):
                st.put_certificate("ca", mtls.Certificate.load(str(pki / "ca.pem")))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_plaintext_scan_of_db_wal_and_journal(pki, tmp_path):
    path = tmp_path / "store.db"
    with Store(path, "s", **KDF) as st:
        for i in range(3):
            for name in ("alice", "bob"):
                st.import_pkcs12(f"{name}{i}", (pki / f"{name}.p12").read_bytes(), "pw", replace=True)
        files = [p for p in (path, tmp_path / "store.db-wal", tmp_path / "store.db-journal") if p.exists()]
        assert len(files) >= 2
        blobs = [p.read_bytes() for p in files]
    for name in ("alice", "bob"):
        der = subprocess.run(["openssl", "pkcs8", "-topk8", "-nocrypt", "-outform", "DER", "-in", str(pki / f"{name}.key")],
                             check=True, capture_output=True).stdout
        text = subprocess.run(["openssl", "pkey", "-in", str(pki / f"{name}.key"), "-noout", "-text"],
                              check=True, capture_output=True, text=True).stdout
        priv = bytes.fromhex("".join(c for c in text.split("priv:")[1].split("pub:")[0] if c in "0123456789abcdef"))
        priv = priv[-32:]
        pem_body = "".join(l for l in (pki / f"{name}.key").read_text().splitlines() if not l.startswith("-----"))
        for blob in blobs:
            assert der not in blob
            assert priv not in blob
            assert pem_body[:40].encode() not in blob
            assert b"PRIVATE KEY" not in blob


CHILD = textwrap.dedent("""
    import sys
    from mtls.store import Store
    path, a, b = sys.argv[1:4]
    data = [open(a, "rb").read(), open(b, "rb").read()]
    st = Store(path, "crash", kdf_log_n=10)
    print("ready", flush=True)
    i = 0
    while True:
        st.import_pkcs12("same", data[i % 2], "pw", replace=True)
        st.import_pkcs12("other%d" % (i % 50), data[(i + 1) % 2], "pw", replace=True)
        i += 1
""")


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_sigkill_during_replace_100_times_leaves_old_or_new(pki, tmp_path):
    path = tmp_path / "store.db"
    with Store(path, "crash", **KDF) as st:
        st.import_pkcs12("same", (pki / "alice.p12").read_bytes(), "pw")
    allowed = {sha256_of(pki / "alice.pem"), sha256_of(pki / "bob.pem")}
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(4)
    last_counter = 0
    for round_ in range(100):
        child = subprocess.Popen([sys.executable, str(script), str(path), str(pki / "alice.p12"), str(pki / "bob.p12")],
                                 stdout=subprocess.PIPE, env=child_env())
        assert child.stdout.readline().strip() == b"ready", f"round {round_}: child did not start"
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        with Store(path, "crash", **KDF) as st:
            assert st.info("same").leaf_sha256 in allowed
            st.get_identity("same").close()
            # The authenticated write counter never goes back across a kill.
            assert st.write_counter >= last_counter
            last_counter = st.write_counter
            assert "same" in {i.label for i in st.list()}
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.close()


WORKER = textwrap.dedent("""
    import sys, threading
    from mtls.store import Store
    path, a, b, proc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    data = [open(a, "rb").read(), open(b, "rb").read()]
    # A generous busy timeout: the point is that waiting for locks is absorbed, however loaded
    # the machine running the test is.
    st = Store(path, "conc", kdf_log_n=10, busy_timeout_ms=60000)
    errors = []
    def work(t):
        try:
            own = Store(path, "conc", kdf_log_n=10, busy_timeout_ms=60000) if t % 2 else st
            for i in range(8):
                own.import_pkcs12("p%d-t%d-%d" % (proc, t, i), data[(t + i) % 2], "pw")
                own.import_pkcs12("same", data[i % 2], "pw", replace=True)
                own.get_identity("same").close()
                own.list()
        except Exception as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print("\\n".join(errors) if errors else "ok")
    sys.exit(1 if errors else 0)
""")


def test_four_processes_and_eight_threads_lose_nothing(pki, tmp_path):
    path = tmp_path / "store.db"
    Store(path, "conc", **KDF).close()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [subprocess.Popen([sys.executable, str(script), str(path), str(pki / "alice.p12"), str(pki / "bob.p12"),
                               str(p)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env())
             for p in range(4)]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    alice, bob = sha256_of(pki / "alice.pem"), sha256_of(pki / "bob.pem")
    with Store(path, "conc", **KDF) as st:
        items = {i.label: i for i in st.list()}
        assert len(items) == 4 * 8 * 8 + 1
        for p in range(4):
            for t in range(8):
                for i in range(8):
                    assert items[f"p{p}-t{t}-{i}"].leaf_sha256 == (alice, bob)[(t + i) % 2]
        assert items["same"].leaf_sha256 in (alice, bob)
        # Every import was one write transaction, each counted once by the manifest's header.
        assert st.write_counter == 4 * 8 * 8 * 2
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.fixture
def tiny_fs(tmp_path):
    """A 512 KiB tmpfs, to fill up for real (needs root, as the test suite runs in CI)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    assert mounted.returncode == 0, f"cannot mount a tmpfs (run the tests as root): {mounted.stderr.strip()}"
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_is_disk_full_and_loses_nothing(pki, tiny_fs):
    path = tiny_fs / "store.db"
    stored = []
    with Store(path, "s", **KDF) as st:
        with pytest.raises(errors.DiskFull):
            for i in range(2000):
                st.import_pkcs12(f"id{i}", (pki / ("alice.p12", "bob.p12")[i % 2]).read_bytes(), "pw")
                stored.append(i)
        assert len(stored) > 10
        # Everything stored before the failure is intact, and the store still reads.
        for i in stored[:: max(len(stored) // 20, 1)]:
            assert st.get_identity(f"id{i}").leaf.subject == ("CN=alice", "CN=bob")[i % 2]
        assert len(st.list()) == len(stored)
    with Store(path, "s", **KDF) as st:
        assert len(st.list()) == len(stored)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "Tests", "fixtures", "store")
FIXTURE_KEY = StoreKey(b"libmtls-store-fixture-key-32byte")


def test_write_counter_and_a_row_written_back_or_deleted(pki, tmp_path):
    path = tmp_path / "store.db"
    with Store(path, "s", **KDF) as st:
        assert st.write_counter == 0
        st.import_pkcs12("alice", (pki / "alice.p12").read_bytes(), "pw")
        st.import_pkcs12("gone", (pki / "bob.p12").read_bytes(), "pw")
        db = sqlite3.connect(path)
        old = db.execute("SELECT * FROM items WHERE label = 'alice'").fetchone()
        db.close()
        st.import_pkcs12("alice", (pki / "bob.p12").read_bytes(), "pw", replace=True)
        assert st.write_counter == 3
    # As an attacker: the renewed identity's old row written back, another row deleted.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DELETE FROM items WHERE label = 'alice'")
    db.execute(f"INSERT INTO items VALUES ({', '.join('?' * len(old))})", old)
    db.execute("DELETE FROM items WHERE label = 'gone'")
    db.close()
    with Store(path, "s", **KDF) as st:
        with pytest.raises(errors.Corrupt, match='"alice"'):
            st.get_identity("alice")
        with pytest.raises(errors.Corrupt, match='"gone"'):
            st.info("gone")
        with pytest.raises(errors.Corrupt):
            st.list()


def test_an_older_store_is_upgraded_only_when_confirmed(tmp_path):
    import shutil
    path = tmp_path / "old.db"
    shutil.copy(os.path.join(FIXTURES, "v2.db"), path)
    with pytest.raises(mtls.UpgradeRequired, match="mtls store upgrade"):
        Store(path, FIXTURE_KEY)
    preview = Store.upgrade_preview(path, FIXTURE_KEY)
    assert [(i.label, i.item_class) for i in preview.items] == [
        ("acme-root", "certificate"), ("client", "identity"), ("tok", "token-identity")]
    assert "1234" not in preview.items[2].token_uri
    with pytest.raises(errors.InvalidArgument):
        Store.upgrade(path, FIXTURE_KEY, "wrong")
    assert Store.upgrade(path, FIXTURE_KEY, preview.confirmation) == 3
    with Store(path, FIXTURE_KEY) as st:
        assert st.info("acme-root").subject == "CN=Acme Root"
        assert st.write_counter == 1
    assert Store.upgrade_preview(path, FIXTURE_KEY) is None


def test_a_missing_store_is_created_only_when_asked(tmp_path):
    """Issue 38: Store(path, secret) opens an existing store; a mistyped path is NotFound naming
    it, and nothing (file or folder) is made; create=True makes it."""
    path = tmp_path / "typo" / "store.db"
    with pytest.raises(errors.NotFound, match="no store at " + re.escape(str(path))) as e:
        Store(path, "s", kdf_log_n=10)
    # The message names the Python way to create it.
    assert "create=True" in str(e.value), e.value
    assert not (tmp_path / "typo").exists()
    with Store(path, "s", kdf_log_n=10, create=True) as st:
        assert st.list() == []
    assert sorted(p.name for p in path.parent.iterdir() if not p.name.endswith(("-wal", "-shm"))) == ["store.db"]
    with Store(path, "s", kdf_log_n=10) as st:
        assert st.list() == []
