#!/usr/bin/env python3
"""Opening a token identity: mtls_identity_from_pkcs11 vs the same PKCS#11 calls made directly
through p11-kit (bench/c/bench_tokens.c), on SoftHSM2 tokens made by scripts/softhsm-token.sh.
Target: ratio <= 1.25 (libmtls also reads the token's other certificates to build the chain and
makes the OpenSSL key object). Needs MTLS_PREFIX (an installed build)."""
import json
import os
import subprocess
import sys
import tempfile

from _cbench import build, row

TARGET = 1.25
MODULE = "/usr/lib/softhsm/libsofthsm2.so"
here = os.path.dirname(os.path.abspath(__file__))
prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("MTLS_PREFIX must point at an installed libmtls (make bench sets it)")
if not os.path.exists(MODULE):
    print("tokens      SoftHSM2 is not installed: skipped")
    sys.exit(0)

with tempfile.TemporaryDirectory(prefix="mtls-bench-tokens-") as tmp:
    exe = build("bench_tokens", tmp, prefix, pkgs=["openssl", "p11-kit-1"])
    subprocess.run([os.path.join(here, "..", "scripts", "softhsm-token.sh"), tmp], check=True, capture_output=True)
    run_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    run_env["SOFTHSM2_CONF"] = os.path.join(tmp, "softhsm2.conf")
    worst = 0.0
    for id_byte, label in (("01", "RSA-2048 key + certificate"), ("02", "P-256 key + certificate")):
        r = subprocess.run([exe, MODULE, "mtls-test", id_byte, "1234"], check=True, capture_output=True, text=True,
                           env=run_env)
        res = json.loads(r.stdout)
        worst = max(worst, res["ratio"])
        print(f"token open  {label:30s} libmtls {res['mtls_ms']:8.3f} ms  raw PKCS#11 {res['raw_ms']:8.3f} ms"
              f"  ratio {res['ratio']:.3f}", flush=True)
        row("token open", label, res["ratio"], TARGET, mtls=res["mtls_ms"], baseline=res["raw_ms"], unit="ms",
            baseline_name="raw PKCS#11 via p11-kit")
    print(f"token open  worst ratio {worst:.3f} (target <= {TARGET:.2f}): {'ok' if worst <= TARGET else 'ABOVE TARGET'}")
