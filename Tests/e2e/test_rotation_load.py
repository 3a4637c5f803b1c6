"""Rotation under load (issue 26): clients loop full handshakes against `mtls serve`, which
follows a store label, while another process replaces the label's identity with `mtls store
import --replace` again and again. No handshake fails; every handshake that starts more than a
second after a replacement presents the new certificate; the server's memory stays flat. Then the
same with a client whose identity follows a store label: the listener sees the new client
certificate, never the old one resumed.

MTLS_ROTATION_CLIENTS and MTLS_ROTATIONS set the load (defaults: the issue's 64 clients and 100
replacements)."""
import os
import subprocess
import threading
import time

import pytest

import mtls
from conftest import CLI, free_port, untimed, wait_port, write_secret
from serve_support import der_sha256, expected, rss_kib
from waits import wait_until

CLIENTS = int(os.environ.get("MTLS_ROTATION_CLIENTS", "64"))
ROTATIONS = int(os.environ.get("MTLS_ROTATIONS", "100"))
FAST = ["--kdf-log-n", "10"]
KEYS = 4  # distinct identities the rotations cycle through


def ok(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("rotation")
    d = base / "D"
    pw = base / "pw"
    write_secret(pw, "p12\n")
    write_secret(base / "secret", "store passphrase\n")
    ok("pki", "init", "--dir", d, "--name", "Rotation Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    shas = {}
    for kind, name in [("server", f"s{i}") for i in range(KEYS)] + [("client", f"c{i}") for i in range(KEYS)]:
        extra = ["--dns", "server.test", "--name", name] if kind == "server" else ["--name", name]
        ok("pki", "issue", kind, "--dir", d, "--ca", "Customer A", *extra, "--p12", base / f"{name}.p12",
           "--password-file", pw)
        out = subprocess.run(["openssl", "pkcs12", "-in", str(base / f"{name}.p12"), "-passin", "pass:p12",
                              "-clcerts", "-nokeys"], capture_output=True, check=True)
        (base / f"{name}.pem").write_bytes(out.stdout)
        shas[name] = der_sha256(base / f"{name}.pem")
    return base, d, pw, shas


def store_args(base, name):
    return ["store", "--store", base / f"{name}.db", "--secret-file", base / "secret", *FAST]


def rotate(base, pw, store_name, label, names, record):
    """Replaces `label` ROTATIONS times, from another process, cycling through `names`; records
    (started, finished, name) of each replacement. Every tenth one is held 1.5 s, so that
    handshakes start more than a second after it."""
    for k in range(ROTATIONS):
        name = names[(k + 1) % len(names)]
        started = time.monotonic()
        ok(*store_args(base, store_name), "import", base / f"{name}.p12", "--label", label, "--replace",
           "--password-file", pw)
        record.append((started, time.monotonic(), name))
        time.sleep(1.5 if k % 10 == 0 else 0.1)  # the hold is what is tested (see the docstring)


def test_server_identity_rotates_under_load(pki):
    base, d, pw, shas = pki
    ok(*store_args(base, "server"), "import", base / "s0.p12", "--label", "srv", "--password-file", pw)
    port = free_port()
    serve = subprocess.Popen([CLI, "serve", "--port", str(port), "--identity", "srv", "--store", base / "server.db",
                              "--secret-file", base / "secret"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(serve.stdout), daemon=True)
    try:
        wait_port(port, serve)
        reader.start()
        policy = mtls.Policy(anchors=[str(d / "root" / "cert.pem")])
        record, results, failures = [], [], []
        stop = threading.Event()

        def client():
            while not stop.is_set():
                started = time.monotonic()
                try:
                    with mtls.Connection.connect("127.0.0.1", port, policy=policy, verify_as="server.test",
                                                 resume=False, handshake_timeout=60) as c:
                        sha = c.peer_chain[0].sha256_hex
                    results.append((started, time.monotonic(), sha))
                except mtls.MTLSError as e:
                    failures.append(repr(e))

        threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        wait_until(lambda: len(results) >= CLIENTS, what="a handshake per client before the rotations")
        rotate(base, pw, "server", "srv", [f"s{i}" for i in range(KEYS)], record)
        time.sleep(1.5)  # handshakes that start more than a second after the last rotation: time is tested
        stop.set()
        for t in threads:
            t.join(90)
        by_sha = {v: k for k, v in shas.items()}
        assert not failures, failures[:5]
        assert len(results) > CLIENTS
        checked = 0
        for started, ended, sha in results:
            allowed, bound = expected(record, started, ended)
            if bound:
                checked += 1
                assert by_sha.get(sha) in allowed, (started, by_sha.get(sha), allowed)
        assert checked > 0
        lines = [untimed(line) for line in lines]
        rotated = [line for line in lines if line.startswith("rotated:")]
        assert len(rotated) >= ROTATIONS // 2, lines[-5:]
        assert not [line for line in lines if line.startswith("reload failed")]
    finally:
        serve.terminate()
        serve.wait(10)


def test_server_memory_is_flat_across_rotations(pki):
    base, d, pw, shas = pki
    ok(*store_args(base, "mem"), "import", base / "s0.p12", "--label", "srv", "--password-file", pw)
    port = free_port()
    serve = subprocess.Popen([CLI, "serve", "--port", str(port), "--identity", "srv", "--store", base / "mem.db",
                              "--secret-file", base / "secret", "--no-session-tickets"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, serve)
        policy = mtls.Policy(anchors=[str(d / "root" / "cert.pem")])
        stop = threading.Event()

        def client():
            while not stop.is_set():
                with mtls.Connection.connect("127.0.0.1", port, policy=policy, verify_as="server.test", resume=False,
                                             handshake_timeout=60):
                    pass

        threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        names = [f"s{i}" for i in range(KEYS)]
        # The load alone first, until RSS has been flat for 10 s: that is the program's size under
        # this load, before any rotation. Measured on `mtls serve` with no rotation at all, RSS
        # under 64 clients climbs 13-19 % over its first ~100 s and is flat after: glibc's
        # per-thread arenas and caches settling, as connections are made on the listener's
        # threads and freed on the serving ones (with GLIBC_TUNABLES arena_max=1 and
        # tcache_count=0 the climb is 3 %). Measuring rotations during that climb measures glibc.
        warm = [rss_kib(serve.pid)]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (len(warm) > 10 and warm[-1] <= warm[-11] * 1.01):
            time.sleep(1.0)  # one sample a second: RSS over time is what is measured
            warm.append(rss_kib(serve.pid))
        # Then ROTATIONS replacements. The live heap stays flat across them (heaptrack, and
        # malloc_stats' "in use" bytes at rotations 1, 50, ... 300: 2.7-4.9 MiB with no trend,
        # the spread being the handshakes in flight); what made RSS climb 13-25 % over 100
        # rotations under this load was freed memory glibc's per-thread arenas kept. The watcher
        # gives it back a few looks after a rotation (LifecycleWatcher.releaseFreedMemorySoon).
        # One RSS sample is the connections in flight at that instant (64 handshakes of ~70 KB
        # each come and go: +-4 % between two samples a second apart), so one sample, or five
        # over a second, compared with another is noise: this failed once at +6.8 % with no
        # leak. A leak grows with the number of rotations; compared here are the medians of the
        # samples taken after each of the first and of the last WINDOW rotations.
        rss = []
        for k in range(ROTATIONS):
            ok(*store_args(base, "mem"), "import", base / f"{names[(k + 1) % len(names)]}.p12", "--label", "srv", "--replace",
               "--password-file", pw)
            time.sleep(0.2)  # samples spread over the run: time passing is what is sampled
            rss.append(rss_kib(serve.pid))
        stop.set()
        for t in threads:
            t.join(60)
        window = max(1, min(20, ROTATIONS // 4))
        first, last = sorted(rss[:window])[window // 2], sorted(rss[-window:])[window // 2]
        print("RSS KiB under load before any rotation:", warm)
        print("RSS KiB after each rotation:", rss)
        print(f"median RSS KiB after the first and the last {window} rotations:", first, last)
        assert last <= first * 1.05, (first, last, rss)  # within 5 %
    finally:
        serve.terminate()
        serve.wait(10)


def test_client_identity_rotates_and_old_sessions_are_not_resumed(pki, tmp_path):
    base, d, pw, shas = pki
    ok(*store_args(base, "client"), "import", base / "c0.p12", "--label", "cli", "--password-file", pw)
    server_id = mtls.PKCS12.load(str(base / "s0.p12"), "p12").identities[0]
    listener = mtls.Listener(server_id, client_policy=mtls.Policy(anchors=[str(d / "ca" / "customer-a" / "cert.pem")]))
    seen, failures = [], []
    stop, server_stop = threading.Event(), threading.Event()

    def serve():
        while not server_stop.is_set():
            try:
                with listener.accept(timeout=1) as c:
                    seen.append((time.monotonic(), c.peer_chain[0].sha256_hex, c.resumed))
                    c.write(b"k")  # the client reads it after the TLS 1.3 ticket, which it keeps
            except mtls.Timeout:
                pass
            except mtls.MTLSError as e:
                failures.append(repr(e))

    server_thread = threading.Thread(target=serve, daemon=True)
    server_thread.start()
    store = mtls.Store(str(base / "client.db"), secret_file=str(base / "secret"), create=False)
    source = mtls.IdentitySource.follow(store, "cli")
    policy = mtls.Policy(anchors=[str(d / "root" / "cert.pem")])
    record, client_failures = [], []

    def client():
        while not stop.is_set():
            try:
                with mtls.Connection.connect("127.0.0.1", listener.port, policy=policy, verify_as="server.test",
                                             identity_source=source, handshake_timeout=30, io_timeout=30) as c:
                    c.read()
            except mtls.MTLSError as e:
                client_failures.append(repr(e))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(seen) >= 4, what="the clients' first handshakes")
    rotations = max(10, ROTATIONS // 5)
    for k in range(rotations):
        name = f"c{(k + 1) % KEYS}"
        started = time.monotonic()
        ok(*store_args(base, "client"), "import", base / f"{name}.p12", "--label", "cli", "--replace",
           "--password-file", pw)
        record.append((started, time.monotonic(), name))
        time.sleep(1.2 if k % 3 == 0 else 0.1)  # handshakes starting over a second after it: time is tested
    time.sleep(1.2)
    stop.set()
    for t in threads:
        t.join(60)
    server_stop.set()  # only once the clients are done: each waits for the server's byte
    server_thread.join(10)
    listener.close()
    assert not failures and not client_failures, (failures[:3], client_failures[:3])
    by_sha = {v: k for k, v in shas.items()}
    resumed = [s for s in seen if s[2]]
    assert resumed, "the client resumes while its identity stays the same"
    checked = 0
    for when, sha, was_resumed in seen:
        before = [r for r in record if r[1] <= when - 1.0]
        if not before:
            continue
        # The last replacement finished over a second ago and no other was under way since.
        if any(r[0] < when and r[1] > when - 1.0 for r in record):
            continue
        checked += 1
        assert by_sha[sha] == before[-1][2], (when, by_sha[sha], before[-1][2], was_resumed)
    assert checked > 0
