#!/usr/bin/env python3
"""Scores `mtls limbo` output with the suite's score.py (Tests/limbo/ by default) and enforces the bar:
zero false accepts other than the deliberate ones below, and at least MIN_PASS passing cases."""
import subprocess, sys, re

MIN_PASS = 202
# Cases where libmtls decides otherwise than the suite on purpose, each with its reason. A false
# accept listed here is not counted; any other one fails the bar.
DELIBERATE = {
    # A CRL without a CRL number is used, as OpenSSL and the other verifiers use it, ordered by
    # thisUpdate: one CRL acceptance rule for every source (issue 36). RFC 5280 5.2.3 says a CA
    # MUST include the number; refusing the CRL refused every chain of its issuer, even with
    # revocation off.
    "crl::crlnumber-missing",
}
limbo_dir, results = sys.argv[1], sys.argv[2]
out = subprocess.run([sys.executable, f"{limbo_dir}/score.py", f"{limbo_dir}/limbo.json", results,
                      "--by-namespace", "--list-failures"], capture_output=True, text=True, check=True).stdout
print(out)
first = out.splitlines()[0]
fields = dict(re.findall(r"(\w+)=(\d+)", first))
fa, passed = int(fields["false_accept"]), int(fields["pass"])
deliberate = [line for line in out.splitlines()
              if line.startswith("false_accept") and len(line.split()) > 1 and line.split()[1] in DELIBERATE]
for line in deliberate:
    print(f"deliberate: {line}")
fa -= len(deliberate)
ok = fa == 0 and passed >= MIN_PASS
print(f"limbo: {'1 passed, 0 failed' if ok else '0 passed, 1 failed'} (pass={passed} >= {MIN_PASS}, false_accept={fa} == 0)")
sys.exit(0 if ok else 1)
