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
                    common = [str(port), version, mode, p(f"{client}.pem"), p(f"{client}.key"), p("int-a.pem"),
                              p("root.pem"), str(SECONDS)]
                    # The client's side: libmtls's client against the raw OpenSSL client. The
                    # server's side: the same raw OpenSSL client against a libmtls listener and
                    # against the raw OpenSSL server.
                    for side, args, group, ours, base in (
                            ("client", common, "handshake client", "libmtls", "OpenSSL C client"),
                            ("serverside", common + [p(f"{server}-chain.pem"), p(f"{server}.key")], "handshake server",
                             "libmtls listener", "OpenSSL C server")):
                        r = subprocess.run([exe, side, *args], capture_output=True, text=True,
                                           env=dict(os.environ, LD_LIBRARY_PATH=""))
                        if r.returncode != 0:
                            print(r.stdout, r.stderr, file=sys.stderr)
                            raise SystemExit(f"bench_tls {side} failed: {key} TLS {version} {mode}")
                        raw, mtls, ratio = (float(x) for x in r.stdout.split())
                        name = f"{group} TLS 1.{version[1]} {key:8} {mode:7}"
                        rows.append((name, raw, mtls, ratio))
                        print(f"  {name}  raw OpenSSL {raw:7.0f}/s  {ours} {mtls:7.0f}/s  ratio {ratio:.2f}x"
                              + ("" if ratio >= TARGET else "  (below 0.90x)"), flush=True)
                        throughput_row(group, f"TLS 1.{version[1]} {key} {mode}", mtls, raw, TARGET, unit="hs/s",
                                       baseline_name=base)
                        if ratio < TARGET:
                            below.append(name)
        finally:
            srv.terminate()
            srv.wait()
    print(f"tls: {len(rows) - len(below)}/{len(rows)} rows at or above {TARGET:.2f}x")


if __name__ == "__main__":
    main()
