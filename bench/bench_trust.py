#!/usr/bin/env python3
"""Trust evaluation throughput: libmtls (uncached and cached) against raw OpenSSL d2i_X509 +
X509_verify_cert with a host check, for a 3-certificate DER chain, P-256 and RSA-2048; and path
building against a bag of 50 useless candidate issuers (time against raw OpenSSL's one attempt).
Needs MTLS_PREFIX (an installed release build). Prints one row per key type with the ratios."""
import os
import subprocess
import sys
import tempfile

from _cbench import build

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_trust: set MTLS_PREFIX to an installed libmtls")

with tempfile.TemporaryDirectory() as tmp:
    pki = os.path.join(tmp, "pki")
    subprocess.run([os.path.join(root, "Tests", "fixtures", "make-trust-pki.sh"), pki], check=True, capture_output=True)
    exe = build("bench_trust", tmp, prefix, pkgs=["libcrypto"])
    for variant in ("", "rsa-", "bag"):
        r = subprocess.run([exe, pki, variant], env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
        if r.returncode != 0:
            sys.exit(f"bench_trust: {variant or 'P-256'} run failed")
