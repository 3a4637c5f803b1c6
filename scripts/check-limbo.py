#!/usr/bin/env python3
"""Scores `mtls limbo` output with the suite's score.py (Tests/limbo/ by default) and enforces the bar:
zero false accepts and at least MIN_PASS passing cases."""
import subprocess, sys, re

MIN_PASS = 203
limbo_dir, results = sys.argv[1], sys.argv[2]
out = subprocess.run([sys.executable, f"{limbo_dir}/score.py", f"{limbo_dir}/limbo.json", results,
                      "--by-namespace", "--list-failures"], capture_output=True, text=True, check=True).stdout
print(out)
first = out.splitlines()[0]
fields = dict(re.findall(r"(\w+)=(\d+)", first))
fa, passed = int(fields["false_accept"]), int(fields["pass"])
ok = fa == 0 and passed >= MIN_PASS
print(f"limbo: {'1 passed, 0 failed' if ok else '0 passed, 1 failed'} (pass={passed} >= {MIN_PASS}, false_accept={fa} == 0)")
sys.exit(0 if ok else 1)
