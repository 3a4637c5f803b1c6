#!/usr/bin/env python3
"""Runs every benchmark (bench/bench_*.py) against the release build installed at $MTLS_PREFIX.
Each benchmark prints its own rows as ratios against a raw OpenSSL C baseline measured in the
same run; this runner only sequences them and fails if one fails."""
import glob
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
failed = []
for script in sorted(glob.glob(os.path.join(here, "bench_*.py"))):
    print(f"== {os.path.basename(script)}", flush=True)
    if subprocess.run([sys.executable, script]).returncode != 0:
        failed.append(script)
if failed:
    print("failed:", *failed)
    sys.exit(1)
