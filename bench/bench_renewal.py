#!/usr/bin/env python3
"""One renewal through pebble, in seconds (issue 27, informational): an identity enrolled with
`mtls enroll acme` (http-01, the built-in responder) renewed in-process with mtls.renew(force=True)
— a new key, the ACME order, pebble's http-01 validation of the responder, finalize, download,
the chain proven, the store transaction — against the same renewal from a local `mtls pki`
directory (no CA server) measured in the same run. pebble is the Tests/support harness (its
default 5 % of nonces rejected, validation without its random sleep). MTLS_BENCH_RENEWALS sets
the rounds (default 7). No target: a renewal is not on any hot path."""
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from _cbench import quartiles, row
import pebble_server  # Tests/support, on the path _cbench sets: the one pebble harness

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX", os.path.join(ROOT, "out", "bench-prefix"))
CLI = os.path.join(PREFIX, "bin", "mtls")
ROUNDS = int(os.environ.get("MTLS_BENCH_RENEWALS", "7"))
os.environ.setdefault("MTLS_LIBRARY", os.path.join(PREFIX, "lib", "libmtls.so"))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))

import mtls  # noqa: E402


def cli(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise RuntimeError(f"mtls {args[0]} {args[1]} failed: {r.stdout}{r.stderr}")


def timed_renewals(st, label):
    seconds = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        if not mtls.renew(st, label, force=True):
            raise RuntimeError(f"{label} was not renewed")
        seconds.append(time.perf_counter() - t)
    return seconds


def main():
    work = tempfile.mkdtemp(prefix="mtls-bench-renewal-")
    (pathlib.Path(work) / "pebble").mkdir()
    pebble = pebble_server.Pebble(pathlib.Path(work) / "pebble", cli=CLI)
    try:
        secret = os.path.join(work, "secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("bench renewal\n")
        store = ["--store", os.path.join(work, "store.db"), "--secret-file", secret, "--kdf-log-n", "10"]
        cli("enroll", "acme", "--directory", pebble.directory, "--anchor", pebble.https_root, "--chain-anchor",
            pebble.issuing_ca, "--name", "bench-renewal.test", "--label", "acme", "--http-port", pebble.http_port,
            "--listen-address", "127.0.0.1", *store)
        pki = os.path.join(work, "pki")
        cli("pki", "init", "--dir", pki, "--name", "Bench Root")
        cli("pki", "intermediate", "--dir", pki, "--name", "Bench CA")
        cli("enroll", "pki", "--dir", pki, "--ca", "Bench CA", "--name", "bench-renewal.local", "--label", "local", *store)
        with mtls.Store(os.path.join(work, "store.db"), secret_file=secret) as st:
            acme = timed_renewals(st, "acme")
            local = timed_renewals(st, "local")
    finally:
        pebble.stop()
    a, a_iqr = quartiles(acme)
    b, _ = quartiles(local)
    _, spread = quartiles([x / y for x, y in zip(acme, local)])
    print(f"  one renewal: through pebble {a:.3f} s (IQR {a_iqr:.3f}, {ROUNDS} rounds: "
          f"{', '.join(f'{s:.2f}' for s in acme)}), from a local pki directory {b:.3f} s", flush=True)
    row("renewal", "one ACME renewal through pebble (http-01, mtls.renew force), vs the local CA", a / b, None,
        mtls=round(a, 3), baseline=round(b, 3), unit="s", baseline_name="mtls pki directory renewal", spread=spread)


if __name__ == "__main__":
    main()
