"""Builds a benchmark's C program (bench/c/<name>.c) against the libmtls installed at a prefix,
the way every bench_*.py does: pkg-config for the flags, the same compiler options for all."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "support"))
from ports import free_port, wait_port  # noqa: E402,F401 (the shared helpers, for the bench_*.py)


def build(name, out_dir, prefix, pkgs=(), libs=()):
    """Compiles bench/c/<name>.c into out_dir/<name> with the flags of `mtls` and `pkgs` from the
    pkg-config files under `prefix`, plus `libs`; returns the executable's path."""
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls", *pkgs], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    exe = os.path.join(out_dir, name)
    subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-o", exe,
                    os.path.join(HERE, "c", name + ".c"), *flags, *libs], check=True)
    return exe


# ---- The row protocol of `make bench` (bench/run.py gathers the rows into bench/REPORT.md).
# A benchmark script prints each measured row on stdout as one line:
#   BENCHROW {"group": ..., "name": ..., "ratio": ..., "spread": ..., "target": ...,
#             "mtls": ..., "baseline": ..., "baseline_name": ..., "unit": ...}
# `ratio` is always a COST ratio, libmtls over its raw baseline measured in the same run (time per
# operation over time per operation, or baseline throughput over libmtls throughput): lower is
# better and the row is met when ratio <= target (target None: an informational row). `spread` is the interquartile range of the
# per-round ratios (None when the bench measured one round). `mtls`/`baseline` are the medians in
# `unit`. Scripts in any language can print the line; Python ones call row().
import json as _json

ROW_PREFIX = "BENCHROW "


def row(group, name, ratio, target, mtls=None, baseline=None, unit="", baseline_name="raw OpenSSL",
        spread=None, note=""):
    """Prints one report row (see above) and returns it."""
    r = {"group": group, "name": name, "ratio": round(float(ratio), 4),
         "target": None if target is None else float(target),
         "spread": None if spread is None else round(float(spread), 4),
         "mtls": mtls, "baseline": baseline, "unit": unit, "baseline_name": baseline_name, "note": note}
    print(ROW_PREFIX + _json.dumps(r), flush=True)
    return r


def throughput_row(group, name, mtls_rate, base_rate, min_fraction, unit="/s", **kw):
    """A row from two throughputs (higher is better) and a 'libmtls >= min_fraction x baseline'
    target, expressed as the cost ratio base/mtls <= 1/min_fraction."""
    return row(group, name, base_rate / mtls_rate, round(1 / min_fraction, 3), mtls=round(mtls_rate, 1),
               baseline=round(base_rate, 1), unit=unit, **kw)


def stop(procs):
    """Ends the servers a benchmark started: SIGTERM, then SIGKILL after 10 s."""
    import subprocess
    for pr in procs:
        pr.terminate()
        try:
            pr.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pr.kill()


def median_by(runs, ratio):
    """Of several runs of one measurement, the run whose `ratio(run)` is the median, and the range
    of those ratios as its spread (None for one run)."""
    runs = sorted(runs, key=ratio)
    values = [ratio(r) for r in runs]
    return runs[len(runs) // 2], (round(values[-1] - values[0], 4) if len(runs) > 1 else None)


def quartiles(values):
    """(median, interquartile range) of a list of numbers."""
    v = sorted(values)
    if not v:
        return None, None
    q = lambda f: v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]  # noqa: E731
    return q(0.5), q(0.75) - q(0.25)


