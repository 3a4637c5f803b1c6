#!/usr/bin/env python3
"""Issuing benchmark: bench/c/bench_pki.c, built against the installed libmtls ($MTLS_PREFIX) and
OpenSSL, times mtls_pki_issue and the same certificate made with raw OpenSSL calls."""
import os
import subprocess
import sys
import tempfile

import re

from _cbench import build, row

prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_pki: set MTLS_PREFIX to an installed libmtls")
with tempfile.TemporaryDirectory() as d:
    exe = build("bench_pki", d, prefix, pkgs=["libcrypto"])
    r = subprocess.run([exe, *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
    print(r.stdout, end="", flush=True)
    lib = re.search(r"libmtls mtls_pki_issue\s+([\d.]+)", r.stdout)
    raw = re.search(r"raw OpenSSL\s+([\d.]+)", r.stdout)
    if r.returncode == 0 and lib and raw:
        row("pki issue", "client certificate (P-256 keygen + sign)", float(lib.group(1)) / float(raw.group(1)), None,
            mtls=float(lib.group(1)), baseline=float(raw.group(1)), unit="us", baseline_name="OpenSSL X509_sign")
    sys.exit(r.returncode)
