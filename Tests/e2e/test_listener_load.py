"""Issue 40's load proof: many mutual-TLS clients against `mtls serve`, which follows a store
label, while another process replaces the label's identity every few seconds, and no connection
is lost.

The clients are bench/c/load_clients.c (raw OpenSSL, built here against the installed libmtls's
pkg-config flags, as the other e2e tests build bench/c programs): MTLS_LOAD_CLIENTS threads,
half TLS 1.3 and half TLS 1.2, each making MTLS_LOAD_HANDSHAKES connections (every fourth a full
handshake, the others resuming), each with a client certificate, one GET and the whole answer.
Afterwards:
- every connection went through: none failed, none refused by the kernel, none reset (the client
  retries nothing);
- the listener's own counters (`--metrics-port`) agree: as many handshakes accepted as the
  clients made, as many resumed, none refused; and its log has one "accepted" line each, no
  "rejected" one;
- every full handshake that started more than a second after a replacement presented the new
  certificate, and every replacement followed by a second of handshakes was seen by clients;
- the server's RSS at the end is within RSS_BOUND of its RSS after the first replacement (see
  there).

Defaults: 64 clients x 160 handshakes (10,240) with a replacement every 2 s, part of `make test`.
The issue's size, 64 x 10,000 (640,000): `make soak` (docs/contributing.md)."""
import bisect
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

from conftest import CLI, REPO, free_port, require_tool, untimed
from serve_support import der_sha256, expected, make_pki, ok, rss_kib
from waits import wait_until

sys.path.insert(0, os.path.join(REPO, "bench"))
from _cbench import build  # noqa: E402

CLIENTS = int(os.environ.get("MTLS_LOAD_CLIENTS", "64"))
HANDSHAKES = int(os.environ.get("MTLS_LOAD_HANDSHAKES", "160"))
ROTATE_SECONDS = float(os.environ.get("MTLS_LOAD_ROTATE_SECONDS", "2"))
# Seconds the whole load may take: at least 100 connections a second (a debug build on two busy
# cores makes about 500); a lost connection times out in the client after 60 s.
LOAD_TIMEOUT = float(os.environ.get("MTLS_LOAD_TIMEOUT", max(600, CLIENTS * HANDSHAKES / 100)))
NAMES = ("s0", "s1", "s2", "s3")  # the identities the replacements cycle through
# Flags of a record of load_clients.c.
LOAD_OK, LOAD_RESUMED = 1, 2
RECORD = struct.Struct("=ddii")
# RSS at the end may exceed RSS after the first replacement by this factor. Under 64 clients
# `mtls serve`'s RSS climbs 13-19 % over its first ~100 s with no rotation at all, while glibc's
# per-thread arenas and caches settle (test_rotation_load.py measures it), and the connections in
# flight at one instant move a sample by +-4 %; a leak of 1 KiB per connection at the default
# size, or of 16 bytes per connection at the size, goes beyond it.
RSS_BOUND = 1.25


def metrics(port):
    """{sample name with labels: value} of the listener's counters."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("mtls_listener_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def logged(path, prefix):
    """The first line of the file at `path` starting with `prefix`, or None."""
    with open(path) as f:
        return next((line.strip() for line in f if untimed(line).startswith(prefix)), None)


def test_no_connection_is_lost_under_load_with_rotations(tmp_path):
    store = make_pki(tmp_path, names=NAMES)
    d, pw = tmp_path / "D", tmp_path / "pw"
    identity = client_identity(tmp_path)
    shas = {}
    for name in NAMES:
        subprocess.run(["openssl", "pkcs12", "-in", tmp_path / f"{name}.p12", "-passin", "pass:p12", "-clcerts",
                        "-nokeys", "-out", tmp_path / f"{name}.pem"], check=True, capture_output=True)
        shas[der_sha256(tmp_path / f"{name}.pem")] = name
    clients = build_clients(tmp_path)

    ok(*store, "import", tmp_path / "s0.p12", "--label", "srv", "--password-file", pw)
    log = tmp_path / "serve.log"
    started = time.monotonic()
    with open(log, "w") as out:
        serve = subprocess.Popen([CLI, "serve", "--port", "0", "--identity", "srv", "--store", tmp_path / "s.db",
                                  "--secret-file", tmp_path / "secret", "--client-anchor", d / "root" / "cert.pem",
                                  "--metrics-port", "0"], stdout=out, stderr=subprocess.STDOUT)
    load = None
    try:
        # Both lines come once the port listens: no probe connection, which the counters would see.
        wait_until(lambda: logged(log, "metrics on ") or serve.poll() is not None, what="`mtls serve` listening")
        port = int(logged(log, "listening on ").rsplit(":", 1)[1])
        metrics_port = int(logged(log, "metrics on ").rsplit(":", 1)[1])
        before = metrics(metrics_port)
        record = [(started, started, "s0")]
        rss = [rss_kib(serve.pid)]
        load = subprocess.Popen([clients, str(port), str(CLIENTS), str(HANDSHAKES), *identity, tmp_path / "records"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        report = {}
        threading.Thread(target=lambda: report.update(zip(("out", "err"), load.communicate())), daemon=True).start()
        deadline = time.monotonic() + LOAD_TIMEOUT
        k = 0
        # A replacement every ROTATE_SECONDS until the clients are done (the wait ends early when they are).
        while not load_done(load, ROTATE_SECONDS):
            assert time.monotonic() < deadline, f"the clients took over {LOAD_TIMEOUT} s"
            k += 1
            name = NAMES[k % len(NAMES)]
            began = time.monotonic()
            ok(*store, "import", tmp_path / f"{name}.p12", "--label", "srv", "--replace", "--password-file", pw)
            record.append((began, time.monotonic(), name))
            rss.append(rss_kib(serve.pid))
        finished = time.monotonic()
        wait_until(lambda: "out" in report, what="the clients' report")
        rss.append(rss_kib(serve.pid))
        counts = {line.split()[0]: int(line.split()[1]) for line in report["out"].splitlines() if not line.startswith("cert ")}
        certs = {int(line.split()[1]): line.split()[2] for line in report["out"].splitlines() if line.startswith("cert ")}
        total = CLIENTS * HANDSHAKES
        summary = (f"{total} connections ({CLIENTS} clients x {HANDSHAKES}) in {finished - started:.1f} s, "
                   f"{counts.get('resumed', 0)} resumed, {len(record) - 1} replacements; server RSS KiB: {rss[0]} before the "
                   f"load, {rss[1]} after the first replacement, {max(rss)} at most, {rss[-1]} at the end")
        print(summary)
        print(report["err"], end="")

        # Every connection went through, with nothing retried.
        assert load.returncode == 0 and counts["failed"] == counts["refused"] == counts["reset"] == 0, (counts, report["err"])
        assert counts["handshakes"] == total, counts
        assert counts["resumed"] >= total // 2, counts  # three of four offer a session: the load mixes both
        # The listener counted the same.
        wait_until(lambda: metrics(metrics_port).get("mtls_listener_connections") == 0, what="every connection closed")
        after = metrics(metrics_port)
        grown = {name: after.get(name, 0) - before.get(name, 0) for name in set(after) | set(before)}
        assert grown["mtls_listener_handshakes_accepted_total"] == total, grown
        assert grown["mtls_listener_handshakes_resumed_total"] == counts["resumed"], grown
        assert not {n: v for n, v in grown.items() if n.startswith("mtls_listener_handshakes_refused_total") and v}, grown
        with open(log) as f:
            words = [line.split(" ", 2)[1] for line in f if line.count(" ") >= 2]
        assert words.count("accepted") == total and words.count("rejected") == 0, summary
        assert words.count("rotated:") >= 1, "the server followed the replacements"

        # Rotations: the certificates full handshakes were shown.
        records = list(RECORD.iter_unpack((tmp_path / "records").read_bytes()))
        assert len(records) == total
        finished_at = [r[1] for r in record]
        seen_after = set()
        bound = 0
        for began, ended, cert, flags in records:
            if not flags & LOAD_OK or flags & LOAD_RESUMED:
                continue  # a resumed session shows the certificate of the handshake it resumes
            allowed, is_bound = expected(record, began, ended)
            name = shas.get(certs.get(cert))
            if is_bound:
                bound += 1
                assert name in allowed, (began, name, allowed)
                # After replacement k, once it is in force, this is what a client sees.
                if allowed == {name}:
                    seen_after.add(bisect.bisect_right(finished_at, began - 1.0) - 1)
        assert bound > 0
        # Every replacement followed by a second of full handshakes (ten starting in it, half a
        # second before the next replacement, so that they end before it) was seen in force.
        full_starts = sorted(r[0] for r in records if r[3] & LOAD_OK and not r[3] & LOAD_RESUMED)
        windows = [i for i in range(1, len(record))
                   if count_between(full_starts, record[i][1] + 1.0,
                                    record[i + 1][0] - 0.5 if i + 1 < len(record) else finished) >= 10]
        assert windows, f"no replacement was followed by a second of full handshakes ({summary})"
        assert set(windows) <= seen_after, (sorted(set(windows) - seen_after), summary)
        print(f"{len(seen_after - {0})} of {len(record) - 1} replacements seen in force by full handshakes")

        # No memory kept per connection: RSS at the end against after the first replacement.
        if len(rss) >= 3:
            assert rss[-1] <= rss[1] * RSS_BOUND, summary
    finally:
        if load is not None and load.poll() is None:
            load.kill()
        serve.terminate()
        serve.wait(10)


def client_identity(work):
    """A client certificate from make_pki's PKI in `work`, for load_clients: (certificate, its key
    in clear, the intermediate, the root)."""
    d = work / "D"
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", "load", "--password-file", work / "pw")
    issued = d / "ca" / "customer-a" / "issued" / "load"
    subprocess.run(["openssl", "pkey", "-in", issued / "key.pem", "-passin", "pass:p12", "-out", work / "client.key"],
                   check=True, capture_output=True)
    return issued / "cert.pem", work / "client.key", d / "ca" / "customer-a" / "cert.pem", d / "root" / "cert.pem"


def build_clients(work):
    """bench/c/load_clients.c built in `work` against the installed libmtls; its path."""
    require_tool(shutil.which("cc") and shutil.which("pkg-config"), "a C compiler and pkg-config")
    return build("load_clients", str(work), os.environ["MTLS_PREFIX"], pkgs=["openssl"], libs=["-lpthread"])


def test_the_load_client_counts_refused_and_cut_connections(tmp_path):
    """The clients retry nothing: a refused connection and one the server cuts are each counted,
    and the exit status says so (what the load test above relies on)."""
    clients = build_clients(tmp_path)
    make_pki(tmp_path, names=("s0",))
    args = [*client_identity(tmp_path), tmp_path / "records"]

    def run(port):
        r = subprocess.run([clients, str(port), "2", "3", *args], capture_output=True, text=True, timeout=120)
        return r.returncode, {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()}, r.stderr

    closed = free_port()  # nothing listens there
    rc, counts, err = run(closed)
    assert rc == 1 and counts["refused"] == 6 and counts["handshakes"] == 0, (counts, err)
    assert "Connection refused" in err, err

    # A server that accepts each connection and closes it at once.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        done = threading.Event()

        def cut():
            s.settimeout(0.2)
            while not done.is_set():
                try:
                    s.accept()[0].close()
                except socket.timeout:
                    pass

        cutter = threading.Thread(target=cut, daemon=True)
        cutter.start()
        try:
            rc, counts, err = run(s.getsockname()[1])
        finally:
            done.set()
            cutter.join(10)
    assert rc == 1 and counts["failed"] + counts["reset"] == 6 and counts["handshakes"] == 0, (counts, err)
    assert "handshake failed" in err, err


def load_done(proc, seconds):
    """Whether `proc` has ended, waiting up to `seconds` for it."""
    try:
        proc.wait(seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def count_between(sorted_values, low, high):
    """How many values of `sorted_values` lie in [low, high)."""
    return max(0, bisect.bisect_left(sorted_values, high) - bisect.bisect_left(sorted_values, low))
