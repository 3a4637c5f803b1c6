#!/usr/bin/env python3
"""Listener full handshakes with an identity that follows a store label, against the same
listener with a fixed identity, in one process (bench/c/bench_rotation.c). The change check of a
followed label (issue 26) runs on the library's watcher thread, and a listener keeps one SSL_CTX
per identity (ListenerContexts), so a handshake costs the same with either. Target: <= 1.02x.

The followed listener is measured after two rotations. Rounds are interleaved (fixed, a second
fixed listener, following, in an order that turns each round) and the row is the median of the
per-round ratios with their interquartile range; the second row, fixed against fixed, is the
control: what two identical listeners differ by on this machine, run for run."""
import os
import subprocess
import tempfile

from _cbench import build, row

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
SECONDS = float(os.environ.get("MTLS_BENCH_SECONDS", "6"))


def main():
    work = tempfile.mkdtemp(prefix="mtls-bench-rotation-")
    pki = os.path.join(work, "pki")
    subprocess.run([os.path.join(ROOT, "scripts", "test-pki.sh"), pki], check=True)
    exe = build("bench_rotation", work, PREFIX, libs=["-lpthread"])
    r = subprocess.run([exe, os.path.join(pki, "server-chain.pem"), os.path.join(pki, "server.key"),
                        os.path.join(pki, "root.pem"), os.path.join(work, "store.db"), str(SECONDS * 3), "15"],
                       capture_output=True, text=True, check=True, env=dict(os.environ, LD_LIBRARY_PATH=""))
    fixed, following, cost, spread, control, control_cost, control_spread = (float(x) for x in r.stdout.split())
    print(f"  listener handshakes: fixed identity {fixed:7.0f}/s  store-following (after rotations) {following:7.0f}/s  "
          f"cost {cost:.3f}x (IQR {spread:.3f}); control, fixed vs fixed {control_cost:.3f}x (IQR {control_spread:.3f})",
          flush=True)
    # The ratio is the median of per-round ratios (each round measures both back to back), not the
    # ratio of mean rates, which a burst of load during one listener's turn would move.
    row("rotation", "listener full handshakes, store-following (after rotations) vs fixed identity", cost, 1.02,
        mtls=round(following, 1), baseline=round(fixed, 1), unit="hs/s", baseline_name="fixed identity", spread=spread)
    row("rotation", "control: listener full handshakes, fixed vs another fixed (the noise of this row)", control_cost,
        None, mtls=round(control, 1), baseline=round(fixed, 1), unit="hs/s", baseline_name="fixed identity",
        spread=control_spread)


if __name__ == "__main__":
    main()
