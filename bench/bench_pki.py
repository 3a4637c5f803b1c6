#!/usr/bin/env python3
"""Issuing benchmark: bench/c/bench_pki.c, built against the installed libmtls ($MTLS_PREFIX) and
OpenSSL, times mtls_pki_issue and the same certificate made with raw OpenSSL calls."""
import os
import subprocess
import sys
import tempfile

from _cbench import build

prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_pki: set MTLS_PREFIX to an installed libmtls")
with tempfile.TemporaryDirectory() as d:
    exe = build("bench_pki", d, prefix, pkgs=["libcrypto"])
    sys.exit(subprocess.run([exe, *sys.argv[1:]]).returncode)
