#!/usr/bin/env python3
"""Full and resumed mutual-TLS handshakes per second from one thread: libmtls's client against a
raw OpenSSL C client, both in one C program (bench/c/bench_tls.c), against a raw OpenSSL C server
started here; and the server's side: a libmtls listener (a process of its own) against that raw
OpenSSL C server, with the same raw OpenSSL client alternating between them in blocks of 20
handshakes (bench/c/bench_tls.c says why). TLS 1.2 and 1.3, P-256 and RSA-2048. Each row: the
median of ROUNDS runs (its spread: the range of their cost ratios); target: libmtls at least as
fast as raw OpenSSL (issue 40). Informational rows for the resumed client handshakes: the raw
client offering libmtls's cipher suites in libmtls's order (TLSContext.ownSuites), so that both
negotiate the same suite."""
import os
import socket
import subprocess
import sys
import tempfile
import time

from _cbench import build, free_port, median_by, row, throughput_row, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
SECONDS = float(os.environ.get("MTLS_BENCH_SECONDS", "3"))
ROUNDS = int(os.environ.get("MTLS_BENCH_TLS_ROUNDS", "3"))
TARGET = 1.0  # issue 40: every handshake row at least as fast as raw OpenSSL




def median_round(exe, args, what, **env):
    """Runs `bench_tls ARGS` ROUNDS times: the median round by its ratio (raw rate, libmtls rate,
    ratio) and the spread (the range of the rounds' cost ratios, None for one round)."""
    rounds = []
    for _ in range(ROUNDS):
        r = subprocess.run([exe, *args], capture_output=True, text=True, env=dict(os.environ, LD_LIBRARY_PATH="", **env))
        if r.returncode != 0:
            print(r.stdout, r.stderr, file=sys.stderr)
            raise SystemExit(f"bench_tls {what} failed")
        rounds.append(tuple(float(x) for x in r.stdout.split()))
    (raw, mtls, ratio), spread = median_by(rounds, lambda t: t[0] / t[1])
    return raw, mtls, ratio, spread


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
        listeners = []
        try:
            wait_port(port)
            for version in ("13", "12"):
                # The libmtls listener in a process of its own, as the raw server (TLS 1.`version` only).
                mtls_port = free_port()
                listeners.append(subprocess.Popen([exe, "mtlsserver", str(mtls_port), version, p(f"{server}-chain.pem"),
                                                   p(f"{server}.key"), p("root.pem")]))
                wait_port(mtls_port)
                for mode in ("full", "resumed"):
                    common = [version, mode, p(f"{client}.pem"), p(f"{client}.key"), p("int-a.pem"), p("root.pem"), str(SECONDS)]
                    # The client's side: libmtls's client against the raw OpenSSL client. The
                    # server's side: the same raw OpenSSL client against the libmtls listener and
                    # against the raw OpenSSL server.
                    for side, args, group, ours, base in (
                            ("client", [str(port)] + common, "handshake client", "libmtls", "OpenSSL C client"),
                            ("serverside", [str(port), str(mtls_port)] + common, "handshake server",
                             "libmtls listener", "OpenSSL C server")):
                        raw, mtls, ratio, spread = median_round(exe, [side, *args], f"{side}: {key} TLS {version} {mode}")
                        name = f"{group} TLS 1.{version[1]} {key:8} {mode:7}"
                        rows.append((name, raw, mtls, ratio))
                        print(f"  {name}  raw OpenSSL {raw:7.0f}/s  {ours} {mtls:7.0f}/s  ratio {ratio:.2f}x"
                              + ("" if ratio >= TARGET else f"  (below {TARGET:.2f}x)"), flush=True)
                        throughput_row(group, f"TLS 1.{version[1]} {key} {mode}", mtls, raw, TARGET, unit="hs/s",
                                       baseline_name=base, spread=spread)
                        if ratio < TARGET:
                            below.append(name)
                    if mode == "resumed":
                        # Informational: the raw client offering libmtls's suites in libmtls's
                        # order (BENCH_RAW_SUITES, bench_tls_support.h), so that the row compares
                        # the same cipher suite: what the libmtls client's own code costs.
                        raw, mtls, ratio, spread = median_round(exe, ["client", str(port)] + common,
                                                                f"client, same suites: {key} TLS {version}",
                                                                BENCH_RAW_SUITES="libmtls")
                        print(f"  handshake client TLS 1.{version[1]} {key:8} resumed, same suites  raw OpenSSL {raw:7.0f}/s  "
                              f"libmtls {mtls:7.0f}/s  ratio {ratio:.2f}x (informational)", flush=True)
                        row("handshake client, same suites", f"TLS 1.{version[1]} {key} resumed", raw / mtls, None,
                            mtls=round(mtls, 1), baseline=round(raw, 1), unit="hs/s",
                            baseline_name="OpenSSL C client offering libmtls's suites",
                            spread=spread)
        finally:
            for proc in [srv, *listeners]:
                proc.terminate()
                proc.wait()
    print(f"tls: {len(rows) - len(below)}/{len(rows)} rows at or above {TARGET:.2f}x")


if __name__ == "__main__":
    main()
