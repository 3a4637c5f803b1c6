#!/usr/bin/env python3
"""Full and resumed mutual-TLS handshakes per second from one thread: libmtls's client against a
raw OpenSSL C client, both in one C program (bench/c/bench_tls.c), against a raw OpenSSL C server
started here; and the server's side: a libmtls listener against that raw OpenSSL C server, with
the same raw OpenSSL client alternating between them. TLS 1.2 and 1.3, P-256 and RSA-2048. Prints each row as a ratio (target >= 0.90x)."""
import os
import socket
import subprocess
import sys
import tempfile
import time

from _cbench import build, free_port, throughput_row, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
SECONDS = float(os.environ.get("MTLS_BENCH_SECONDS", "6"))
TARGET = 0.90




def main():
    work = tempfile.mkdtemp(prefix="mtls-bench-tls-")
    pki = os.path.join(work, "pki")
    subprocess.run([os.path.join(ROOT, "scripts", "test-pki.sh"), pki], check=True)
    p = lambda n: os.path.join(pki, n)  # noqa: E731
    exe = build("bench_tls", work, PREFIX, pkgs=["openssl"])
    rows, below = [], []
    for key, server, client in (("P-256", "server", "client-a"), ("RSA-2048", "server-rsa", "client-a-rsa")):
        port = free_port()
        srv = subprocess.Popen([exe, "server", str(port), p(f"{server}-chain.pem"), p(f"{server}.key"), p("root.pem")])
        try:
            wait_port(port)
            for version in ("13", "12"):
                for mode in ("full", "resumed"):
                    r = subprocess.run([exe, "client", str(port), version, mode, p(f"{client}.pem"), p(f"{client}.key"),
                                        p("int-a.pem"), p("root.pem"), str(SECONDS)],
                                       capture_output=True, text=True, env=dict(os.environ, LD_LIBRARY_PATH=""))
                    if r.returncode != 0:
                        print(r.stdout, r.stderr, file=sys.stderr)
                        raise SystemExit(f"bench_tls client failed: {key} TLS {version} {mode}")
                    raw, mtls, ratio = r.stdout.split()
                    name = f"TLS 1.{version[1]} {key:8} {mode:7}"
                    rows.append((name, float(raw), float(mtls), float(ratio)))
                    print(f"  {name}  raw OpenSSL {float(raw):7.0f}/s  libmtls {float(mtls):7.0f}/s  "
                          f"ratio {float(ratio):.2f}x" + ("" if float(ratio) >= TARGET else "  (below 0.90x)"),
                          flush=True)
                    throughput_row("handshake client", f"TLS 1.{version[1]} {key} {mode}", float(mtls), float(raw),
                                   TARGET, unit="hs/s", baseline_name="OpenSSL C client")
                    if float(ratio) < TARGET:
                        below.append(name)
                    # The server's side: the same raw OpenSSL client against a libmtls listener
                    # and against the raw OpenSSL server.
                    r = subprocess.run([exe, "serverside", str(port), version, mode, p(f"{client}.pem"), p(f"{client}.key"),
                                        p("int-a.pem"), p("root.pem"), str(SECONDS), p(f"{server}-chain.pem"), p(f"{server}.key")],
                                       capture_output=True, text=True, env=dict(os.environ, LD_LIBRARY_PATH=""))
                    if r.returncode != 0:
                        print(r.stdout, r.stderr, file=sys.stderr)
                        raise SystemExit(f"bench_tls serverside failed: {key} TLS {version} {mode}")
                    raw, mtls, ratio = r.stdout.split()
                    sname = f"server TLS 1.{version[1]} {key:8} {mode:7}"
                    rows.append((sname, float(raw), float(mtls), float(ratio)))
                    print(f"  {sname}  raw OpenSSL {float(raw):7.0f}/s  libmtls listener {float(mtls):7.0f}/s  "
                          f"ratio {float(ratio):.2f}x" + ("" if float(ratio) >= TARGET else "  (below 0.90x)"),
                          flush=True)
                    throughput_row("handshake server", f"TLS 1.{version[1]} {key} {mode}", float(mtls), float(raw),
                                   TARGET, unit="hs/s", baseline_name="OpenSSL C server")
                    if float(ratio) < TARGET:
                        below.append(sname)
        finally:
            srv.terminate()
            srv.wait()
    print(f"tls: {len(rows) - len(below)}/{len(rows)} rows at or above {TARGET:.2f}x")


if __name__ == "__main__":
    main()
