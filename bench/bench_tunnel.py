#!/usr/bin/env python3
"""`mtls tunnel` against stunnel (Debian's stunnel4), both in the same run on loopback (issue 39).

Rows (cost ratios, lower is better, target <= 1.0 against stunnel):
- one stream: MTLS_BENCH_TUNNEL_MIB (default 256) MiB from a plain backend through
  client tunnel → server tunnel to a plain reader; stunnel client → stunnel server the same way;
- 64 concurrent streams (4 MiB each) the same way;
- new connections per second with a full mutual-TLS handshake: Python ssl clients (4 threads, no
  session reuse) straight to the server end, each sending a line and reading the answer;
- memory per idle connection at the server end: RSS growth of the server process with
  MTLS_BENCH_TUNNEL_IDLE (default 200) connections open after their handshake and one exchange.
The two tunnels run side by side and are measured in turn: MTLS_BENCH_TUNNEL_ROUNDS (default 5)
rounds of the two stream rows, then, after a short untimed warm-up of each, the handshake row's
MTLS_BENCH_TUNNEL_HANDSHAKE_SECONDS (default 10 per tunnel) in MTLS_BENCH_TUNNEL_HANDSHAKE_ROUNDS
(default 10) alternating slices, apart from the streams' load; each row is the ratio of the two
medians, its spread the range of the rounds' ratios.
And the tunnel's own overhead: the same one-stream and 64-stream rows against a direct
connection to the backend (informational, no target).

The backend, the readers and the handshaking clients are Python, the same for both tunnels."""
import os
import shutil
import socket
import socketserver
import statistics
import ssl
import subprocess
import sys
import tempfile
import threading
import time

from _cbench import free_port, row, stop, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
CLI = os.path.join(PREFIX, "bin", "mtls")
MIB = int(os.environ.get("MTLS_BENCH_TUNNEL_MIB", "256"))
STREAMS, STREAM_MIB = 64, 4
IDLE = int(os.environ.get("MTLS_BENCH_TUNNEL_IDLE", "200"))
HANDSHAKE_SECONDS = float(os.environ.get("MTLS_BENCH_TUNNEL_HANDSHAKE_SECONDS", "10"))
ROUNDS = int(os.environ.get("MTLS_BENCH_TUNNEL_ROUNDS", "5"))
HANDSHAKE_ROUNDS = int(os.environ.get("MTLS_BENCH_TUNNEL_HANDSHAKE_ROUNDS", "10"))
STUNNEL = shutil.which("stunnel4") or shutil.which("stunnel")
CHUNK = b"\0" * (1 << 20)


class Backend(socketserver.BaseRequestHandler):
    """`SEND n` sends n bytes and closes; `PING` answers one byte; `IDLE` answers one byte and
    waits for the end."""

    def handle(self):
        line = b""
        while not line.endswith(b"\n"):
            data = self.request.recv(64)
            if not data:
                return
            line += data
        word, _, arg = line.strip().partition(b" ")
        if word == b"SEND":
            left = int(arg)
            while left > 0:
                n = min(left, len(CHUNK))
                self.request.sendall(CHUNK[:n])
                left -= n
        else:
            self.request.sendall(b"P")
            if word == b"IDLE":
                self.request.recv(1)


class Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


def ok(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_tunnel: mtls {' '.join(map(str, args))}: {r.stderr}")


def make_pki(d):
    pw = os.path.join(d, "pw")
    with open(os.open(pw, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("p12\n")
    pki = os.path.join(d, "D")
    ok("pki", "init", "--dir", pki, "--name", "Bench Root")
    ok("pki", "intermediate", "--dir", pki, "--name", "Customer A")
    ok("pki", "issue", "server", "--dir", pki, "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1",
       "--name", "server", "--p12", os.path.join(d, "server.p12"), "--password-file", pw)
    ok("pki", "issue", "client", "--dir", pki, "--ca", "Customer A", "--name", "alice", "--p12",
       os.path.join(d, "alice.p12"), "--password-file", pw)
    issued = os.path.join(pki, "ca", "customer-a", "issued")
    return {"pw": pw, "root": os.path.join(pki, "root", "cert.pem"), "int": os.path.join(pki, "ca", "customer-a", "cert.pem"),
            "server": os.path.join(issued, "server"), "alice": os.path.join(issued, "alice"), "dir": d}


def start_mtls(p, backend):
    sport, cport = free_port(), free_port()
    server = subprocess.Popen([CLI, "tunnel", "server", "--listen", f"127.0.0.1:{sport}", "--target", f"127.0.0.1:{backend}",
                               "--identity", os.path.join(p["dir"], "server.p12"), "--password-file", p["pw"],
                               "--client-anchor", p["int"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = subprocess.Popen([CLI, "tunnel", "client", "--listen", f"127.0.0.1:{cport}", "--target", f"127.0.0.1:{sport}",
                               "--identity", os.path.join(p["dir"], "alice.p12"), "--password-file", p["pw"],
                               "--anchor", p["root"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(sport)
    wait_port(cport)
    return server, client, sport, cport


def start_stunnel(p, backend):
    sport, cport = free_port(), free_port()
    procs = []
    for name, lines in (("server", [f"accept = 127.0.0.1:{sport}", f"connect = 127.0.0.1:{backend}",
                                    f"cert = {p['server']}/chain.pem", f"key = {p['server']}/key.pem",
                                    f"CAfile = {p['root']}", "verifyChain = yes", "requireCert = yes"]),
                        ("client", ["client = yes", f"accept = 127.0.0.1:{cport}", f"connect = 127.0.0.1:{sport}",
                                    f"cert = {p['alice']}/chain.pem", f"key = {p['alice']}/key.pem",
                                    f"CAfile = {p['root']}", "verifyChain = yes"])):
        conf = os.path.join(p["dir"], f"stunnel-{name}.conf")
        with open(conf, "w") as f:
            f.write("foreground = yes\npid =\ndebug = 3\n[t]\n" + "\n".join(lines) + "\n")
        procs.append(subprocess.Popen([STUNNEL, conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_port(sport)
    wait_port(cport)
    return procs[0], procs[1], sport, cport


def fetch(port, n):
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"SEND %d\n" % n)
        buf = bytearray(1 << 20)
        got = 0
        while got < n:
            k = s.recv_into(buf)
            if not k:
                raise SystemExit(f"bench_tunnel: stream ended after {got} of {n} bytes")
            got += k


def one_stream(port):
    fetch(port, 1 << 20)  # warm-up
    t = time.perf_counter()
    fetch(port, MIB << 20)
    return (MIB << 20) / (time.perf_counter() - t) / 1e6


def many_streams(port):
    t = time.perf_counter()
    threads = [threading.Thread(target=fetch, args=(port, STREAM_MIB << 20)) for _ in range(STREAMS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return STREAMS * (STREAM_MIB << 20) / (time.perf_counter() - t) / 1e6


def client_context(p):
    ctx = ssl.create_default_context(cafile=p["root"])
    ctx.load_cert_chain(os.path.join(p["alice"], "chain.pem"), os.path.join(p["alice"], "key.pem"))
    return ctx


def handshakes_per_second(p, port, seconds):
    ctx = client_context(p)
    end = time.perf_counter() + seconds
    counts = [0] * 4

    def worker(i):
        while time.perf_counter() < end:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    s.sendall(b"PING\n")
                    if s.recv(1) != b"P":
                        raise SystemExit("bench_tunnel: no answer through the tunnel")
            counts[i] += 1
    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(counts) / (time.perf_counter() - start)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def idle_kib_per_connection(p, port, pid):
    ctx = client_context(p)
    before = rss_kib(pid)
    conns = []
    for _ in range(IDLE):
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.sendall(b"IDLE\n")
        if s.recv(1) != b"P":
            raise SystemExit("bench_tunnel: no answer through the tunnel")
        conns.append(s)
    time.sleep(0.5)  # let the server settle (its threads' stacks touched) before reading RSS
    after = rss_kib(pid)
    for s in conns:
        s.close()
    return (after - before) / IDLE


def main():
    if not os.path.exists(CLI):
        raise SystemExit(f"bench_tunnel: no mtls at {CLI} (make bench installs it)")
    if not STUNNEL:
        raise SystemExit("bench_tunnel: stunnel4 is not installed: run scripts/install-deps.sh")
    with tempfile.TemporaryDirectory(prefix="mtls-bench-tunnel-") as d:
        p = make_pki(d)
        backend = Threaded(("127.0.0.1", 0), Backend)
        threading.Thread(target=backend.serve_forever, daemon=True).start()
        bport = backend.server_address[1]
        # Both tunnels up at once, measured in turn round after round (the first to go alternates),
        # so that both see the same machine; each row compares the medians (one sample of a
        # single stream moved by 20 % between two runs on a quiet machine).
        ends = {"mtls": start_mtls(p, bport), "stunnel": start_stunnel(p, bport)}
        rounds = {name: {"one": [], "many": [], "hs": []} for name in ends}
        try:
            for r in range(ROUNDS):
                for name in (("mtls", "stunnel") if r % 2 == 0 else ("stunnel", "mtls")):
                    _, _, sport, cport = ends[name]
                    rounds[name]["one"].append(one_stream(cport))
                    rounds[name]["many"].append(many_streams(cport))
            # New connections on their own, in short alternating slices: a slice right after
            # 256 MiB of streaming, or one long slice per round, moved this row by 25 % between
            # rounds (its clients, Python threads, share the 2 CPUs with the tunnel).
            for name in ends:
                handshakes_per_second(p, ends[name][2], 0.3)
            for r in range(HANDSHAKE_ROUNDS):
                for name in (("mtls", "stunnel") if r % 2 == 0 else ("stunnel", "mtls")):
                    rounds[name]["hs"].append(handshakes_per_second(p, ends[name][2], HANDSHAKE_SECONDS / HANDSHAKE_ROUNDS))
            idle = {name: idle_kib_per_connection(p, ends[name][2], ends[name][0].pid) for name in ends}
        finally:
            for server, client, _, _ in ends.values():
                stop([client, server])
        direct = {"one": one_stream(bport), "many": many_streams(bport)}
        backend.shutdown()
    print("  rounds (MB/s, MB/s, handshakes/s):", {name: {k: [round(x) for x in v] for k, v in r.items()} for name, r in rounds.items()}, flush=True)
    results = {name: {k: statistics.median(v) for k, v in rounds[name].items()} for name in rounds}
    for name in results:
        results[name]["idle"] = idle[name]
        print(f"  {name}: one stream {results[name]['one']:.0f} MB/s, {STREAMS} streams {results[name]['many']:.0f} MB/s, "
              f"{results[name]['hs']:.0f} full handshakes/s (medians of {ROUNDS} and {HANDSHAKE_ROUNDS} rounds), "
              f"{results[name]['idle']:.1f} KiB per idle connection", flush=True)
    m, s = results["mtls"], results["stunnel"]

    def cost(key):
        """The cost ratio of the medians (stunnel's rate over libmtls's), and the range of the
        rounds' own ratios as its spread."""
        ratios = sorted(b / a for a, b in zip(rounds["mtls"][key], rounds["stunnel"][key]))
        return s[key] / m[key], (round(ratios[-1] - ratios[0], 4) if len(ratios) > 1 else None)

    kw = {"baseline_name": "stunnel"}
    for key, name, unit in (("one", f"one stream, {MIB} MiB (MB/s)", "MB/s"),
                            ("many", f"{STREAMS} concurrent streams (MB/s)", "MB/s"),
                            ("hs", "new connections, full mTLS handshake (/s)", "/s")):
        ratio, spread = cost(key)
        row("tunnel", name, ratio, 1.0, mtls=round(m[key]), baseline=round(s[key]), unit=unit, spread=spread, **kw)
    row("tunnel", "memory per idle connection, server end (KiB)", max(m["idle"], 0.1) / max(s["idle"], 0.1), 1.0,
        mtls=round(m["idle"], 1), baseline=round(s["idle"], 1), unit="KiB", **kw)
    row("tunnel", "one stream vs a direct connection (MB/s)", direct["one"] / m["one"], None, mtls=round(m["one"]),
        baseline=round(direct["one"]), unit="MB/s", baseline_name="direct")
    row("tunnel", f"{STREAMS} streams vs a direct connection (MB/s)", direct["many"] / m["many"], None,
        mtls=round(m["many"]), baseline=round(direct["many"]), unit="MB/s", baseline_name="direct")


if __name__ == "__main__":
    sys.exit(main())
