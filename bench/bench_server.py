#!/usr/bin/env python3
"""Server throughput with 64 concurrent mutual-TLS clients: a libmtls server (mtls_listener,
bench/c/bench_server.c) against nginx with `ssl_verify_client on`, on the same certificates, the
same 127.0.0.1 port kind, the same load generator (raw OpenSSL clients: full TLS 1.3 handshake
with a client certificate, one GET, close) and the same CPUs, measured alternately in one run.

Two rows, each like for like: session tickets off on both servers (the handshake work alone),
and session tickets on on both (each server's default: nginx sends OpenSSL's two tickets per
handshake, the listener one, bound to its client policy). The load's clients never resume, so
a ticket is pure cost to its server. Comparing the listener with tickets against nginx without
them (as this bench did first) charged the listener ~0.25 ms of ticket work per request that
nginx was not asked to do.
Row: cost ratio nginx rate / libmtls rate, the median of MTLS_BENCH_SERVER_ROUNDS (default 5)
alternating rounds; target <= 1.0 (issue 40: libmtls at least as fast as nginx; 1/0.9 before)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from _cbench import build, free_port, quartiles, row, stop, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
SECONDS = float(os.environ.get("MTLS_BENCH_SECONDS", "4"))
ROUNDS = int(os.environ.get("MTLS_BENCH_SERVER_ROUNDS", "5"))
CLIENTS = 64
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"




def main():
    work = tempfile.mkdtemp(prefix="mtls-bench-server-")
    procs = []
    try:
        pki = os.path.join(work, "pki")
        subprocess.run([os.path.join(ROOT, "scripts", "test-pki.sh"), pki], check=True, capture_output=True)
        p = lambda n: os.path.join(pki, n)  # noqa: E731
        with open(p("server-full.pem"), "w") as f:
            f.write(open(p("server.pem")).read() + open(p("int-a.pem")).read())
        with open(p("client-full.pem"), "w") as f:
            f.write(open(p("client-a.pem")).read() + open(p("int-a.pem")).read())
        exe = build("bench_server", work, PREFIX, pkgs=["openssl"], libs=["-lpthread"])
        cpus = os.cpu_count() or 2
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        ports = {t: (free_port(), free_port()) for t in ("off", "on")}  # tickets: (libmtls, nginx)
        # Both servers trust the same root for clients and check the same two signatures
        # (client-a by int-a, int-a by the root). nginx's OpenSSL needs the chain to end at a
        # self-signed root (it does not take the intermediate alone as an anchor).
        for tickets, (mport, _) in ports.items():
            procs.append(subprocess.Popen([exe, "serve", str(mport), p("server-full.pem"), p("server.key"), p("root.pem"),
                                           str(4 * cpus), tickets], env=env))
        servers = "".join(f"""
  server {{ listen 127.0.0.1:{nport} ssl; ssl_certificate {p("server-full.pem")}; ssl_certificate_key {p("server.key")};
    ssl_protocols TLSv1.3; ssl_session_tickets {tickets}; ssl_session_cache off;
    ssl_client_certificate {p("root.pem")}; ssl_verify_client on; ssl_verify_depth 2;
    keepalive_timeout 0; location / {{ return 200 "ok"; }} }}""" for tickets, (_, nport) in ports.items())
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off; worker_processes {cpus}; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work};{servers} }}
""")
        procs.append(subprocess.Popen([NGINX, "-c", conf, "-e", os.path.join(work, "error.log")]))
        for pair in ports.values():
            for port in pair:
                wait_port(port)

        def load(port, who):
            r = subprocess.run([exe, "load", str(port), p("client-full.pem"), p("client-a.key"), p("root.pem"),
                                str(CLIENTS), str(SECONDS)], env=env, capture_output=True, text=True, check=True)
            rate, failed = r.stdout.split()
            if int(failed):
                raise SystemExit(f"bench_server: {failed} failed requests against {who} (port {port})")
            return float(rate)

        for tickets, (mport, nport) in ports.items():
            ratios, m_rates, n_rates = [], [], []
            for _ in range(ROUNDS):  # alternate so both see the same machine load
                n = load(nport, "nginx")
                m = load(mport, "the libmtls listener")
                n_rates.append(n)
                m_rates.append(m)
                ratios.append(n / m)
                print(f"server 64 clients, tickets {tickets:3}  nginx {n:8.1f} req/s  libmtls {m:8.1f} req/s  "
                      f"cost {n / m:.2f}x", flush=True)
            med, spread = quartiles(ratios)
            what = ("full TLS 1.3 mTLS handshake + GET, 64 clients, "
                    + ("tickets issued by both (nginx 2, libmtls 1)" if tickets == "on" else "no tickets on either"))
            row("server throughput 64 clients", what, med, 1.0, mtls=round(quartiles(m_rates)[0], 1),
                baseline=round(quartiles(n_rates)[0], 1), unit="req/s", baseline_name="nginx ssl_verify_client on",
                spread=spread)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
