#!/usr/bin/env bash
# Refreshes the vendored x509-limbo suite in Tests/limbo/ from a folder that holds a newer copy:
#   scripts/refresh-limbo.sh DIR
# DIR holds limbo.json (C2SP/x509-limbo's compiled suite: `python -m limbo compile`, or the file
# from a checkout of https://github.com/C2SP/x509-limbo), and optionally score.py and README.md
# (the scorer and notes kept beside it). The suite is checked (JSON, version 1, testcases with
# ids), copied, and Tests/limbo/SHA256SUMS rewritten; review the diff, update the "Refreshed"
# line of Tests/limbo/PROVENANCE.md, run `make test-limbo` (its bar is in scripts/check-limbo.py),
# and commit.
set -euo pipefail
src=${1:?usage: scripts/refresh-limbo.sh DIR (a folder with limbo.json)}
dest=$(cd "$(dirname "$0")/.." && pwd)/Tests/limbo
[ -f "$src/limbo.json" ] || { echo "refresh-limbo: $src/limbo.json does not exist" >&2; exit 1; }
python3 - "$src/limbo.json" <<'PY'
import json, sys
suite = json.load(open(sys.argv[1]))
cases = suite.get("testcases")
if suite.get("version") != 1 or not isinstance(cases, list) or not cases or not all("id" in c for c in cases):
    sys.exit(f"refresh-limbo: {sys.argv[1]} is not an x509-limbo suite (version 1 with testcases)")
print(f"refresh-limbo: {len(cases)} testcases")
PY
install -d "$dest"
install -m 0644 "$src/limbo.json" "$dest/limbo.json"
[ ! -f "$src/score.py" ] || install -m 0755 "$src/score.py" "$dest/score.py"
[ ! -f "$src/README.md" ] || install -m 0644 "$src/README.md" "$dest/README.md"
(cd "$dest" && sha256sum limbo.json score.py README.md > SHA256SUMS)
echo "refresh-limbo: Tests/limbo/ updated from $src"
