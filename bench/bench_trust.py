#!/usr/bin/env python3
"""Trust evaluation throughput: libmtls (uncached and cached) against raw OpenSSL d2i_X509 +
X509_verify_cert with a host check, for a 3-certificate DER chain, P-256 and RSA-2048; and path
building against a bag of 50 useless candidate issuers (time against raw OpenSSL's one attempt).
Needs MTLS_PREFIX (an installed release build). Prints one row per key type with the ratios."""
import os
import subprocess
import sys
import tempfile

import re

from _cbench import build, throughput_row, row

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_trust: set MTLS_PREFIX to an installed libmtls")

with tempfile.TemporaryDirectory() as tmp:
    pki = os.path.join(tmp, "pki")
    subprocess.run([os.path.join(root, "scripts", "test-pki.sh"), "--trust", pki], check=True, capture_output=True)
    exe = build("bench_trust", tmp, prefix, pkgs=["libcrypto"])
    for variant in ("", "rsa-", "bag"):
        r = subprocess.run([exe, pki, variant], env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"},
                           stdout=subprocess.PIPE, text=True)
        print(r.stdout, end="", flush=True)
        if r.returncode != 0:
            sys.exit(f"bench_trust: {variant or 'P-256'} run failed")
        if variant == "bag":
            m = re.search(r"bag of (\d+) useless issuers.*?one attempt\s+([\d.]+) us \|.*?\)\s+([\d.]+) us", r.stdout)
            if m:
                row("path building (hostile issuers)", f"bag of {m.group(1)} useless issuers, refused",
                    float(m.group(3)) / float(m.group(2)), 4.0, mtls=float(m.group(3)), baseline=float(m.group(2)),
                    unit="us", baseline_name="OpenSSL, one attempt")
            m = re.search(r"5 bad candidates then the good one: raw OpenSSL\s+([\d.]+) us.*?libmtls\s+([\d.]+) us", r.stdout)
            if m:
                row("path building (hostile issuers)", "5 bad candidates then the good path",
                    float(m.group(2)) / float(m.group(1)), None, mtls=float(m.group(2)), baseline=float(m.group(1)),
                    unit="us", baseline_name="OpenSSL")
            continue
        m = re.search(r"^(\S+)\s+raw OpenSSL d2i\+verify:\s+([\d.]+) eval/s \| libmtls uncached:\s+([\d.]+) eval/s.*"
                      r"libmtls cached:\s+([\d.]+) eval/s", r.stdout, re.M)
        if not m:
            sys.exit("bench_trust: unexpected output")
        key, raw, unc, cached = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
        row("verify", f"{key} 3-cert chain, uncached", raw and raw / unc, 1.25, mtls=round(unc), baseline=round(raw),
            unit="eval/s", baseline_name="OpenSSL d2i_X509+X509_verify_cert")
        # cached: at least 5x faster than raw, i.e. cost <= 0.2x
        row("verify", f"{key} 3-cert chain, cached", raw / cached, 0.2, mtls=round(cached), baseline=round(raw),
            unit="eval/s", baseline_name="OpenSSL d2i_X509+X509_verify_cert")
