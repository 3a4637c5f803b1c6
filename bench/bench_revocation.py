#!/usr/bin/env python3
"""Revocation cost (issue 28's `make bench` bullet): trust evaluation with hard CRL checking and a
warm CRL cache against the same evaluation without revocation (target <= 1.05x), cached (the
policy's evaluation cache, as handshakes use it) and uncached; and the first evaluation with a
cold cache (two CRL fetches from Python's http.server on 127.0.0.1), informational.
Needs MTLS_PREFIX (an installed release build)."""
import functools
import http.server
import os
import re
import sys
import tempfile
import threading

from _cbench import build, row

prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_revocation: set MTLS_PREFIX to an installed libmtls")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


with tempfile.TemporaryDirectory() as tmp:
    serve = os.path.join(tmp, "crl")
    os.mkdir(serve)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=serve))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        exe = build("bench_revocation", tmp, prefix)
        import subprocess
        r = subprocess.run([exe, serve, f"http://127.0.0.1:{httpd.server_address[1]}"], stdout=subprocess.PIPE, text=True,
                           env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    finally:
        httpd.shutdown()
        httpd.server_close()
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        sys.exit("bench_revocation: run failed")
    for label in ("cached", "uncached"):
        m = re.search(rf"^{label}: without revocation ([\d.]+) us \| hard CRL, warm cache ([\d.]+) us \| ratio ([\d.]+) iqr ([\d.]+)",
                      r.stdout, re.M)
        if not m:
            sys.exit(f"bench_revocation: no {label} line")
        row("revocation", f"evaluation, hard CRL, warm cache, {label}", float(m.group(3)), 1.05, mtls=float(m.group(2)),
            baseline=float(m.group(1)), unit="us", baseline_name="libmtls without revocation", spread=float(m.group(4)))
    m = re.search(r"^cold: without revocation ([\d.]+) us \| hard CRL, cold cache \(2 fetches\) ([\d.]+) us \| ratio ([\d.]+)",
                  r.stdout, re.M)
    if m:
        row("revocation", "first evaluation, cold CRL cache (2 fetches)", float(m.group(3)), None, mtls=float(m.group(2)),
            baseline=float(m.group(1)), unit="us", baseline_name="libmtls without revocation, uncached")
