#!/usr/bin/env python3
"""Issuing benchmark: bench/c/bench_pki.c, built against the installed libmtls ($MTLS_PREFIX) and
OpenSSL, times mtls_pki_issue and the same certificate made with raw OpenSSL calls."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_pki: set MTLS_PREFIX to an installed libmtls")
env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls", "libcrypto"], env=env, check=True,
                       capture_output=True, text=True).stdout.split()
with tempfile.TemporaryDirectory() as d:
    exe = os.path.join(d, "bench_pki")
    subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-o", exe,
                    os.path.join(here, "c", "bench_pki.c"), *flags], check=True)
    sys.exit(subprocess.run([exe, *sys.argv[1:]]).returncode)
