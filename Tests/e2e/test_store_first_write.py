"""A first `mtls store import` interrupted (SIGINT) at any point leaves no store file or a complete
store, never an empty file that a later command would turn into a store under another secret; and
the commands that only read (list, show, check, metrics, export) never create a store."""
import os
import signal
import subprocess
import time

import pytest

from conftest import CLI, TEST_PKI, fresh_copy, sh, write_secret


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("firstwrite")
    sh(f"{TEST_PKI} --root . ca 'First Write CA' && {TEST_PKI} --leaf . c p256 first-write-client ca && "
       "openssl pkcs12 -export -inkey c.key -in c.pem -certfile ca.pem -passout pass:pw -out c.p12", d)
    write_secret(d / "pw.txt", "pw\n")
    write_secret(d / "secret.txt", "the intended secret\n")
    write_secret(d / "other.txt", "some other secret\n")
    return d


@pytest.fixture
def d(made, tmp_path):
    return fresh_copy(made, tmp_path)


def store_cmd(d, secret, *args):
    # The default scrypt cost (2^17): the KDF takes long enough to be interrupted during it.
    return [CLI, "store", "--store", str(d / "st" / "store.db"), "--secret-file", str(d / secret), *map(str, args)]


def run(d, secret, *args):
    return subprocess.run(store_cmd(d, secret, *args), capture_output=True, text=True, timeout=120)


def wait_for(condition, proc, limit=60.0):
    """Polls `condition` until it holds or `proc` ends (False then)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return condition()
        time.sleep(0.002)
    raise AssertionError("the condition never held")


def anything_in(folder):
    return folder.exists() and any(folder.iterdir())


def store_file_appeared(folder):
    return (folder / "store.db").exists()


def assert_no_store_or_complete(d):
    """No file at the path, or a store that opens with the import's secret (and refuses another)."""
    path = d / "st" / "store.db"
    if not path.exists():
        return "none"
    assert path.stat().st_size > 0, "an empty store file was left behind"
    r = run(d, "secret.txt", "list", "--json")
    assert r.returncode == 0, r.stderr
    r = run(d, "other.txt", "list")
    assert r.returncode != 0 and "wrong store secret" in r.stderr, (r.stdout, r.stderr)
    return "complete"


def interrupt_import(d, when):
    p = subprocess.Popen(store_cmd(d, "secret.txt", "import", d / "c.p12", "--label", "alice",
                                   "--password-file", d / "pw.txt"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if when is not None:
            wait_for(lambda: when(d / "st"), p)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode


@pytest.mark.parametrize("point", ["at_start", "while_creating", "once_the_store_is_there"])
def test_interrupted_first_import_leaves_no_file_or_a_complete_store(d, point):
    when = {"at_start": None,
            # The folder has something in it: the store being made (the KDF runs then).
            "while_creating": anything_in,
            "once_the_store_is_there": store_file_appeared}[point]
    interrupt_import(d, when)
    if assert_no_store_or_complete(d) == "none":
        # Another secret finds no store, and makes none.
        r = run(d, "other.txt", "list")
        assert r.returncode != 0 and "no store at" in r.stderr, r.stderr
        assert not (d / "st" / "store.db").exists()
    # Nothing a later command would take for a store, and the intended secret works next time.
    r = run(d, "secret.txt", "import", d / "c.p12", "--label", "alice", "--password-file", d / "pw.txt")
    assert r.returncode == 0 or "already" in r.stderr, r.stderr
    r = run(d, "secret.txt", "list", "--json")
    assert r.returncode == 0 and '"alice"' in r.stdout, (r.stdout, r.stderr)
    # An interrupted creation's temporary file is swept by the next creation in that folder.
    assert sorted(os.listdir(d / "st")) in (["store.db"], ["store.db", "store.db-shm", "store.db-wal"])


@pytest.mark.parametrize("args", [["list"], ["show", "alice"], ["check", "--within", "30"], ["metrics"],
                                  ["export", "alice", "--out", "OUT", "--password-file", "pw.txt"]])
def test_read_only_commands_never_create_a_store(d, args):
    args = [str(d / "out.p12") if a == "OUT" else str(d / a) if a == "pw.txt" else a for a in args]
    r = run(d, "secret.txt", *args)
    assert r.returncode != 0
    assert "no store at " + str(d / "st" / "store.db") in r.stderr, r.stderr
    assert not (d / "st").exists(), "a read-only command created the store's folder"


def test_an_empty_file_left_by_an_older_interrupted_import_is_not_made_a_store(d):
    (d / "st").mkdir(mode=0o700)
    (d / "st" / "store.db").write_bytes(b"")
    r = run(d, "other.txt", "list")
    assert r.returncode != 0 and "empty file, not a store" in r.stderr, r.stderr
    assert (d / "st" / "store.db").stat().st_size == 0
    # Importing makes the store in its place, under the import's secret.
    r = run(d, "secret.txt", "import", d / "c.p12", "--label", "alice", "--password-file", d / "pw.txt")
    assert r.returncode == 0, r.stderr
    assert assert_no_store_or_complete(d) == "complete"
