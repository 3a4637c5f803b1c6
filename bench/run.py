#!/usr/bin/env python3
"""Runs every benchmark (bench/bench_*.py) against the release build installed at $MTLS_PREFIX and
gathers their rows into one report, bench/REPORT.md (a Markdown table, also printed).

Row protocol (bench/_cbench.py): a script prints `BENCHROW {json}` lines; each row is a COST
ratio of libmtls against its raw baseline (OpenSSL, p11-kit, SQLite, Python ssl, nginx) measured
in the same run, lower is better, met when ratio <= target. Other output is passed through.
A benchmark that fails (exit status) fails `make bench`; a target not met is reported, not fatal.
MTLS_BENCH_ONLY=store,tls runs only the named scripts (bench_<name>.py)."""
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _cbench import ROW_PREFIX  # noqa: E402

# The rows issue 14 asks for, by group: a group no script produced is listed as missing.
EXPECTED = [
    ("p12 import", "bench_p12.py"),
    ("verify", "bench_trust.py"),
    ("path building (hostile issuers)", "bench_trust.py (trust helper)"),
    ("handshake client", "bench_tls.py"),
    ("handshake server", "bench_tls.py"),
    ("token signature in handshake", "bench_tokens.py (provider helper)"),
    ("store", "bench_store.py"),
    ("python https", "bench_python.py (python helper)"),
    ("python asyncio https", "bench_python_async.py"),
    ("server throughput 64 clients", "bench_server.py"),
    ("revocation", "bench_revocation.py"),
    ("renewal", "bench_renewal.py (issue 27, informational)"),
    ("listener", "bench_listener.py (issue 40)"),
    ("tunnel", "bench_tunnel.py (issue 39, against stunnel)"),
]


def run_script(script):
    rows = []
    proc = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True, cwd=HERE)
    for line in proc.stdout:
        if line.startswith(ROW_PREFIX):
            try:
                r = json.loads(line[len(ROW_PREFIX):])
            except ValueError:
                print(f"  unreadable row: {line.strip()}", flush=True)
                continue
            r["script"] = os.path.basename(script)
            rows.append(r)
            met = "no target" if r["target"] is None else "met" if r["ratio"] <= r["target"] else "NOT MET"
            print(f"  {r['group']}: {r['name']}: cost {r['ratio']:.3f}x (target <= {r['target']}) {met}", flush=True)
        else:
            print(line, end="", flush=True)
    return proc.wait(), rows


def fmt(v):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def met(r):
    if r["target"] is None:
        return "n/a"
    return "yes" if r["ratio"] <= r["target"] else "**no**"


def report(rows, failed):
    out = ["# libmtls benchmark report", "",
           f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, "
           f"{platform.node()}, {os.cpu_count()} CPUs, `make bench`. Each ratio is libmtls's COST relative "
           "to the raw baseline measured in the same run (lower is better; 1.00 = same cost); a row is met "
           "when ratio <= target. Spread: interquartile range of the per-round ratios (— : one round).", "",
           "| group | benchmark | libmtls (median) | baseline (median) | cost ratio | spread | target (<=) | met |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        unit = r.get("unit") or ""
        out.append(f"| {r['group']} | {r['name']} | {fmt(r.get('mtls'))} {unit} | {fmt(r.get('baseline'))} {unit} "
                   f"({r.get('baseline_name', '')}) | {r['ratio']:.3f} | {fmt(r.get('spread'))} | {fmt(r['target'])} | "
                   f"{met(r)} |")
    seen = {r["group"] for r in rows}
    missing = [(g, s) for g, s in EXPECTED if g not in seen]
    notmet = [r for r in rows if met(r) == "**no**"]
    targeted = [r for r in rows if r["target"] is not None]
    out += ["", f"{len(targeted) - len(notmet)} of {len(targeted)} rows with a target met it"
                f" ({len(rows) - len(targeted)} informational rows)."]
    if notmet:
        out.append("Not met: " + "; ".join(f"{r['group']} / {r['name']} ({r['ratio']:.2f} > {r['target']:.3g})"
                                           + (f" — {r['note']}" if r.get("note") else "") for r in notmet) + ".")
    if missing:
        out.append("Rows with no benchmark in this run: " + "; ".join(f"{g} ({s})" for g, s in missing) + ".")
    if failed:
        out.append("Benchmarks that failed: " + ", ".join(failed) + ".")
    return "\n".join(out) + "\n"


def main():
    only = {n.strip() for n in os.environ.get("MTLS_BENCH_ONLY", "").split(",") if n.strip()}
    failed, rows = [], []
    for script in sorted(glob.glob(os.path.join(HERE, "bench_*.py"))):
        name = os.path.basename(script)[len("bench_"):-3]
        if only and name not in only:
            continue
        print(f"== {os.path.basename(script)}", flush=True)
        rc, got = run_script(script)
        rows += got
        if rc != 0:
            failed.append(os.path.basename(script))
    text = report(rows, failed)
    with open(os.path.join(HERE, "REPORT.md"), "w") as f:
        f.write(text)
    print()
    print(text)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
