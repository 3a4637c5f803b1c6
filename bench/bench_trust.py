#!/usr/bin/env python3
"""Trust evaluation throughput: libmtls (uncached and cached) against raw OpenSSL d2i_X509 +
X509_verify_cert with a host check, for a 3-certificate DER chain, P-256 and RSA-2048; and path
building against a bag of 50 useless candidate issuers (time against raw OpenSSL's one attempt).
Needs MTLS_PREFIX (an installed release build). Prints one row per key type with the ratios.

Each key type's program runs MTLS_BENCH_TRUST_RUNS times (3): its rows are the run with the median
uncached ratio, their spread the range of the runs' ratios (the program measures raw OpenSSL, then
libmtls, one after the other, so one run moves with the machine: 1.08 to 1.40 for RSA-2048 in
re-runs of the same build)."""
import os
import subprocess
import sys
import tempfile

import re

from _cbench import build, median_by, row

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
RUNS = int(os.environ.get("MTLS_BENCH_TRUST_RUNS", "3"))
prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("bench_trust: set MTLS_PREFIX to an installed libmtls")

with tempfile.TemporaryDirectory() as tmp:
    pki = os.path.join(tmp, "pki")
    subprocess.run([os.path.join(root, "scripts", "test-pki.sh"), "--trust", pki], check=True, capture_output=True)
    exe = build("bench_trust", tmp, prefix, pkgs=["libcrypto"])
    verify = re.compile(r"^(\S+)\s+raw OpenSSL d2i\+verify:\s+([\d.]+) eval/s \| libmtls uncached:\s+([\d.]+) eval/s.*"
                        r"libmtls cached:\s+([\d.]+) eval/s", re.M)

    def run(variant):
        r = subprocess.run([exe, pki, variant], env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"},
                           stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(r.stdout, end="", flush=True)
            sys.exit(f"bench_trust: {variant or 'P-256'} run failed")
        return r.stdout

    for variant in ("", "rsa-", "bag"):
        if variant == "bag":
            out = run(variant)
            print(out, end="", flush=True)
            m = re.search(r"bag of (\d+) useless issuers.*?one attempt\s+([\d.]+) us \|.*?\)\s+([\d.]+) us", out)
            if m:
                row("path building (hostile issuers)", f"bag of {m.group(1)} useless issuers, refused",
                    float(m.group(3)) / float(m.group(2)), 4.0, mtls=float(m.group(3)), baseline=float(m.group(2)),
                    unit="us", baseline_name="OpenSSL, one attempt")
            m = re.search(r"5 bad candidates then the good one: raw OpenSSL\s+([\d.]+) us.*?libmtls\s+([\d.]+) us", out)
            if m:
                row("path building (hostile issuers)", "5 bad candidates then the good path",
                    float(m.group(2)) / float(m.group(1)), None, mtls=float(m.group(2)), baseline=float(m.group(1)),
                    unit="us", baseline_name="OpenSSL")
            continue
        runs = []
        for _ in range(RUNS):
            out = run(variant)
            m = verify.search(out)
            if not m:
                print(out, end="")
                sys.exit("bench_trust: unexpected output")
            runs.append((out, m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))))
        (out, key, raw, unc, cached), spread = median_by(runs, lambda t: t[2] / t[3])
        print(out, end="", flush=True)
        if RUNS > 1:
            print(f"{key} uncached cost ratios of the {RUNS} runs: " + ", ".join(f"{t[2] / t[3]:.3f}" for t in runs), flush=True)
        row("verify", f"{key} 3-cert chain, uncached", raw / unc, 1.25, mtls=round(unc), baseline=round(raw),
            unit="eval/s", baseline_name="OpenSSL d2i_X509+X509_verify_cert", spread=spread)
        # cached: at least 5x faster than raw, i.e. cost <= 0.2x
        row("verify", f"{key} 3-cert chain, cached", raw / cached, 0.2, mtls=round(cached), baseline=round(raw),
            unit="eval/s", baseline_name="OpenSSL d2i_X509+X509_verify_cert")
