#!/usr/bin/env python3
"""The listener's cost per connection outside the CPU's instructions (issue 40), two rows:

- system calls per server handshake (TLS 1.3 and 1.2, resumed and full): the same raw OpenSSL C client makes N TLS 1.3 or 1.2
  mutual-TLS handshakes (one byte each way, close) against a libmtls listener
  (bench/c/bench_listener.c mtls-serve) and against the raw OpenSSL C server (bench_tls server);
  each server is traced with `strace -f -c` attached (every thread) after a warm-up, so only the N
  handshakes count. A count, not a time: independent of the machine's load. Target <= 1.0.
- RSS growth per 1,000 idle mutual-TLS connections after their handshake and one HTTP request,
  the libmtls listener (connections accepted and kept by the application) against nginx with
  `ssl_verify_client on` (one worker), in the same run. Target <= 1.0 (libmtls <= nginx).
The syscall breakdown of both servers (calls per handshake) is printed for the report. An
informational row counts the client's side the same way: libmtls's client against the raw OpenSSL
C client, each traced whole against the raw server."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _cbench import build, free_port, row, stop, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
HANDSHAKES = int(os.environ.get("MTLS_BENCH_SYSCALL_HANDSHAKES", "500"))
IDLE = int(os.environ.get("MTLS_BENCH_IDLE_CONNECTIONS", "1000"))
WARM = 20
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
STRACE = shutil.which("strace")


def wait_for(cond, what, timeout=30.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"bench_listener: {what} did not happen in {timeout} s")
        time.sleep(0.01)


def traced(pid):
    """Every thread of `pid` has a tracer."""
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/status") as f:
                if not any(l.startswith("TracerPid:") and l.split()[1] != "0" for l in f):
                    return False
        return True
    except OSError:
        return False


def parse_strace(path):
    """{syscall: calls} and the total from an `strace -c` table."""
    calls, total = {}, 0
    for line in open(path):
        parts = line.split()
        if len(parts) < 5 or not parts[0].replace(".", "").isdigit():
            continue
        name = parts[-1]
        n = int(parts[3])
        if name == "total":
            total = n
        else:
            calls[name] = n
    return calls, total


def count_syscalls(exe, port, server_pid, p, work, label, handshakes=HANDSHAKES, version=13, mode="resumed"):
    """System calls per handshake of the server `server_pid` (every thread), and
    {syscall: calls per handshake}; `handshakes` TLS 1.`version` handshakes, resumed or full
    (`mode`), are traced (also used by Tests/e2e/test_listener_syscalls.py)."""
    client = subprocess.Popen([exe, "resume", str(port), str(handshakes), p("client-a.pem"), p("client-a.key"),
                               p("int-a.pem"), p("root.pem"), str(version), mode],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "warm"
    out = os.path.join(work, f"strace-{label}-{version}-{mode}.txt")
    tracer = subprocess.Popen([STRACE, "-f", "-c", "-o", out, "-p", str(server_pid)], stderr=subprocess.DEVNULL)
    wait_for(lambda: traced(server_pid), f"strace attaching to {label}")
    client.stdin.write("go\n")
    client.stdin.flush()
    resumed = int(client.stdout.readline())
    client.wait()
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=30)
    if mode == "resumed" and resumed < handshakes * 9 // 10:
        raise SystemExit(f"bench_listener: only {resumed} of {handshakes} handshakes resumed against {label}")
    calls, total = parse_strace(out)
    top = sorted(calls.items(), key=lambda kv: -kv[1])
    print(f"syscalls per {mode} TLS 1.{version - 10} server handshake, {label}: {total / handshakes:.2f}  ("
          + ", ".join(f"{k} {v / handshakes:.2f}" for k, v in top) + ")", flush=True)
    return total / handshakes, {k: v / handshakes for k, v in calls.items()}


def count_both(exe, tls, p, work, procs, handshakes=HANDSHAKES, version=13, mode="resumed"):
    """count_syscalls for the raw OpenSSL C server, then for a libmtls listener (mtls-serve, TLS
    1.`version` only), started here and appended to `procs` (the caller stops them):
    ((total, calls), (total, calls))."""
    raw_port = free_port()
    raw = subprocess.Popen([tls, "server", str(raw_port), p("server-chain.pem"), p("server.key"), p("root.pem")])
    procs.append(raw)
    mtls = subprocess.Popen([exe, "mtls-serve", p("server-chain.pem"), p("server.key"), p("root.pem"), str(version)],
                            stdout=subprocess.PIPE, text=True)
    procs.append(mtls)
    mtls_port = int(mtls.stdout.readline())
    wait_port(raw_port)
    return (count_syscalls(exe, raw_port, raw.pid, p, work, "raw OpenSSL C server", handshakes, version, mode),
            count_syscalls(exe, mtls_port, mtls.pid, p, work, "libmtls listener", handshakes, version, mode))


def count_client_syscalls(cg, p, work, impl, version=13, mode="resumed", n1=20, n2=120):
    """System calls per client handshake (TLS 1.`version`, resumed or full) of the raw OpenSSL C
    client (`impl` "raw") or libmtls's (`impl` "mtls"), against the raw OpenSSL C server: the
    client process of bench/c/bench_callgrind.c (`cg`) traced whole (`strace -f -c`) for `n1`
    and for `n2` handshakes, the difference over `n2 - n1` (start-up and warm-up cancel out), and
    {syscall: calls per handshake}. A count, not a time: independent of the machine's load (also
    used by Tests/e2e/test_client_syscalls.py)."""
    def traced_run(n):
        port = free_port()
        extra = 1 if mode == "resumed" else 0
        srv = subprocess.Popen([cg, "rawserver", str(port), str(n + extra), p("server-chain.pem"), p("server.key"),
                                p("root.pem")], stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout.readline().strip() == "ready"
            out = os.path.join(work, f"strace-client-{impl}-{version}-{mode}-{n}.txt")
            subprocess.run([STRACE, "-f", "-c", "-o", out, cg, f"{impl}client", str(port), str(n), str(version), mode,
                            p("client-a.pem"), p("client-a.key"), p("int-a.pem"), p("root.pem")],
                           check=True, stdout=subprocess.DEVNULL)
            srv.wait(timeout=60)
        finally:
            stop([srv])
        return parse_strace(out)
    (c1, t1), (c2, t2) = traced_run(n1), traced_run(n2)
    per = {k: (c2.get(k, 0) - c1.get(k, 0)) / (n2 - n1) for k in set(c1) | set(c2)}
    per = {k: v for k, v in per.items() if abs(v) >= 0.005}
    total = (t2 - t1) / (n2 - n1)
    label = "libmtls client" if impl == "mtls" else "raw OpenSSL C client"
    print(f"syscalls per {mode} TLS 1.{version - 10} client handshake, {label}: {total:.2f}  ("
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])) + ")", flush=True)
    return total, per


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"bench_listener: no VmRSS for {pid}")


def hold(exe, port, n, p):
    """A client holding `n` idle connections to `port`, once they are all answered."""
    c = subprocess.Popen([exe, "hold", str(port), str(n), p("client-a.pem"), p("client-a.key"), p("int-a.pem"),
                          p("root.pem")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = c.stdout.readline().strip()
    if line != f"held {n}":
        raise SystemExit(f"bench_listener: the idle client to port {port} failed ({line!r})")
    return c


def rss_growth(exe, port, pid, p, n=None):
    """KiB of RSS `pid` grows by per 1,000 idle connections (`n`, IDLE by default, held after
    WARM warm-up connections)."""
    n = n or IDLE
    warm = hold(exe, port, WARM, p)
    before = rss_kib(pid)
    idle = hold(exe, port, n, p)
    after = rss_kib(pid)
    for c in (idle, warm):
        c.stdin.close()
        c.wait()
    return (after - before) * 1000 / n


def rss_both(exe, p, work, procs, idle=None):
    """RSS growth (KiB per 1,000 idle mutual-TLS connections) of nginx (`ssl_verify_client on`,
    one worker) and of a libmtls listener (mtls-hold), both started here and appended to `procs`
    (the caller stops them): (nginx, libmtls). Also used by Tests/e2e/test_listener_idle_memory.py."""
    hold_srv = subprocess.Popen([exe, "mtls-hold", p("server-chain.pem"), p("server.key"), p("root.pem")],
                                stdout=subprocess.PIPE, text=True)
    procs.append(hold_srv)
    hold_port = int(hold_srv.stdout.readline())
    nport = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; worker_processes 1; worker_rlimit_nofile 8192; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work}; keepalive_timeout 600s; keepalive_requests 1000;
  server {{ listen 127.0.0.1:{nport} ssl; ssl_certificate {p("server-chain.pem")}; ssl_certificate_key {p("server.key")};
    ssl_protocols TLSv1.3; ssl_client_certificate {p("root.pem")}; ssl_verify_client on; ssl_verify_depth 2;
    location / {{ return 200 "ok"; }} }} }}
""")
    nginx = subprocess.Popen([NGINX, "-c", conf, "-e", os.path.join(work, "error.log")])
    procs.append(nginx)
    wait_port(nport)

    def nginx_worker():
        with open(f"/proc/{nginx.pid}/task/{nginx.pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    wait_for(lambda: nginx_worker() is not None, "nginx's worker starting")
    return rss_growth(exe, nport, nginx_worker(), p, idle), rss_growth(exe, hold_port, hold_srv.pid, p, idle)


def client_program(work, prefix=PREFIX):
    """bench/c/bench_callgrind.c built against `prefix` (its raw and libmtls clients)."""
    return build("bench_callgrind", work, prefix, pkgs=["openssl"])


def programs(work, prefix=PREFIX):
    """A test PKI under `work` and the two C programs built against `prefix`: (p, exe, tls), where
    p(name) is a PKI file, exe bench_listener and tls bench_tls (also used by the e2e tests)."""
    pki = os.path.join(work, "pki")
    subprocess.run([os.path.join(ROOT, "scripts", "test-pki.sh"), pki], check=True, capture_output=True)
    exe = build("bench_listener", work, prefix, pkgs=["openssl"], libs=["-lpthread"])
    tls = build("bench_tls", work, prefix, pkgs=["openssl"])
    return (lambda n: os.path.join(pki, n)), exe, tls


def main():
    if not STRACE:
        raise SystemExit("bench_listener: strace is missing (scripts/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="mtls-bench-listener-")
    procs = []
    try:
        p, exe, tls = programs(work)

        # ---- system calls per server handshake: TLS 1.3 and 1.2, resumed and full
        for version, mode in ((13, "resumed"), (12, "resumed"), (13, "full"), (12, "full")):
            (base, _), (ours, _) = count_both(exe, tls, p, work, procs, HANDSHAKES if mode == "resumed" else HANDSHAKES // 5,
                                              version, mode)
            row("listener", f"system calls per {mode} TLS 1.{version - 10} mTLS server handshake (strace -f -c, one client)",
                ours / base, 1.0, mtls=round(ours, 2), baseline=round(base, 2), unit="calls",
                baseline_name="raw OpenSSL C server")

        # ---- system calls per client handshake: libmtls's client and the raw one, resumed
        cg = client_program(work)
        for version in (13, 12):
            base, _ = count_client_syscalls(cg, p, work, "raw", version)
            ours, _ = count_client_syscalls(cg, p, work, "mtls", version)
            row("listener", f"system calls per resumed TLS 1.{version - 10} mTLS client handshake (strace -f -c)",
                ours / base, None, mtls=round(ours, 2), baseline=round(base, 2), unit="calls",
                baseline_name="raw OpenSSL C client")

        # ---- RSS per 1,000 idle connections
        n_growth, m_growth = rss_both(exe, p, work, procs)
        print(f"RSS growth per 1,000 idle mTLS connections: nginx {n_growth:.0f} KiB, libmtls listener {m_growth:.0f} KiB",
              flush=True)
        row("listener", f"RSS growth per 1,000 idle mTLS connections after handshake + one request ({IDLE} held)",
            m_growth / n_growth, 1.0, mtls=round(m_growth), baseline=round(n_growth), unit="KiB",
            baseline_name="nginx ssl_verify_client on, 1 worker")
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
