#!/bin/sh
# Writes Sources/CMTLS/libmtls.order: the functions of libmtls.so that the benchmarked
# handshakes, reads and writes run (client and listener, TLS 1.3 and 1.2, full and resumed), one
# mangled name a line, which the linker lays out together (Package.swift, --symbol-ordering-file).
# Spread over the library as the source files place them, a resumed handshake's ~700 lines of
# code sat on ~107 pages: cold instruction-cache and TLB misses that cost the client more than its
# instructions (issue 40). Run it after a change that renames or adds functions on those paths
# (a name the build no longer has is skipped; a new function is only placed by source file).
#
#   scripts/order-file.sh [LIBDIR]     LIBDIR: a release build's libmtls.so (default .build/release)
#
# Needs valgrind (scripts/install-deps.sh installs it). bench/callgrind.sh with MTLS_CG_LINES=1
# shows the result: the lines and pages of libmtls's code each handshake runs.
#
# Order: the functions every measured row runs first, then those of fewer rows, grouped by the
# rows that share them; within a group, the most instructions per handshake first. Left out: names
# defined in an object's plain `.text` section (the Swift runtime's static libraries keep many
# functions in one such section, 1.6 MB in Swift.o): ordering one of them would move that whole
# section, and the hot functions after it would be spread again.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIBDIR=${1:-$ROOT/.build/release}
KEEP=$(mktemp -d /tmp/mtls-order-XXXXXX)
trap 'rm -rf "$KEEP"' EXIT
VALGRIND_OPTS=--demangle=no MTLS_CG_LINES=1 MTLS_CG_KEEP=$KEEP "$ROOT/bench/callgrind.sh" "$LIBDIR" >&2
STATIC=$(dirname "$(readlink -f "$(command -v swiftc)")")/../lib/swift_static/linux
for f in "$STATIC"/*.a $(find "$LIBDIR"/ -name '*.o'); do objdump -t "$f" 2>/dev/null; done |
    awk '$0 ~ / \.text\t/ {print $NF}' | sort -u >"$KEEP/plain-text"
python3 - "$KEEP" "$ROOT/Sources/CMTLS/libmtls.order" <<'PY'
import collections, glob, os, re, sys
keep, out = sys.argv[1:3]
plain = set(open(os.path.join(keep, "plain-text")).read().split())

def per_function(path):
    """Instructions of each libmtls.so function itself (not its callees) in one callgrind output."""
    ir, ours, fn, after_call = collections.Counter(), False, None, False
    for line in open(path):
        if line.startswith("ob="):
            ours = line[3:].strip().endswith("/libmtls.so.0")
        elif line.startswith("fn="):
            fn = re.sub(r"'\d+$", "", line[3:].strip())
        elif line.startswith("calls="):
            after_call = True  # the next cost line is the call's, inclusive
        elif line.startswith("0x"):
            if ours and fn and not after_call:
                parts = line.split()
                if len(parts) >= 3 and parts[2].isdigit():
                    ir[fn] += int(parts[2])
            after_call = False
    return ir

rows = collections.defaultdict(dict)   # function -> {row: instructions per handshake}
for small in glob.glob(os.path.join(keep, "callgrind.out.*-mtls-*")):
    m = re.match(r".*callgrind\.out\.(.+)-mtls-(.+)-(\d+)$", small)
    if not m or m.group(3) != "10":
        continue
    row = f"{m.group(1)}-{m.group(2)}"
    large = small[:-2] + "30"
    a, b = per_function(small), per_function(large)
    for fn, n in b.items():
        if n > a.get(fn, 0):
            rows[fn][row] = (n - a.get(fn, 0)) / 20
if not rows:
    sys.exit("order-file: no libmtls.so function ran per handshake (callgrind output missing?)")
order = sorted((f for f in rows if f not in plain and not f.startswith("0x")), key=lambda f: (-len(rows[f]), sorted(rows[f]), -sum(rows[f].values()), f))
with open(out, "w") as f:
    f.writelines(fn + "\n" for fn in order)
print(f"order-file: {len(order)} functions into {out} ({len(rows) - len(order)} in a plain .text left where they are)",
      file=sys.stderr)
PY
# SwiftPM does not know the list is an input of the link: relink by hand.
echo "order-file: relink to use it (rm $LIBDIR/libmtls.so; swift build -c release)" >&2
