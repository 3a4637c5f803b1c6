#!/bin/bash
# Builds every C and C++ test program (Tests/c/*.c, *.cpp) against the installed libmtls
# (pkg-config, PKG_CONFIG_PATH set by the caller) and runs them C_TEST_JOBS at a time (default 3:
# most of their time is spent waiting on peers, servers and key derivation). Each program gets its
# own MTLS_TEST_TMP folder (OUT/NAME.tmp), so no two share a PKI, a store or a token folder, and
# its output is printed whole when it ends. The slowest programs of the last run (OUT/durations)
# start first. Exits 1 naming every program that failed.
#   scripts/test-c.sh OUT
set -euo pipefail
out=${1:?usage: scripts/test-c.sh OUT}
jobs=${C_TEST_JOBS:-3}
mkdir -p "$out"
list=$out/programs
: > "$list"
for src in Tests/c/*.c Tests/c/*.cpp; do
    [ -e "$src" ] || continue
    case $src in
    *.c)
        exe=$out/$(basename "$src" .c)
        links=$(sed -n '1s|^/\* test-c links: \(.*\) \*/$|\1|p' "$src")
        # shellcheck disable=SC2086 # pkg-config's flags are words
        cc -std=c11 -Wall -Wextra -Werror -o "$exe" "$src" $(pkg-config --cflags --libs mtls $links) ;;
    *.cpp)
        exe=$out/$(basename "$src" .cpp)-cpp
        # shellcheck disable=SC2046
        c++ -std=c++17 -Wall -Wextra -Werror -pedantic -o "$exe" "$src" $(pkg-config --cflags --libs mtls) ;;
    esac
    seconds=$(awk -v e="$(basename "$exe")" '$2 == e { print $1 }' "$out/durations" 2>/dev/null || true)
    echo "${seconds:-0} $exe" >> "$list"
done

run_one() {
    exe=$1 out=$2
    name=$(basename "$exe")
    tmp=$out/$name.tmp
    rm -rf "$tmp" && mkdir -p "$tmp"
    start=$(date +%s)
    if env -u LD_LIBRARY_PATH MTLS_TEST_TMP="$tmp" "$exe" > "$out/$name.log" 2>&1; then rc=0; else rc=$?; fi
    end=$(date +%s)
    # One write per program, so that parallel programs' outputs never interleave.
    { echo "== $exe ($((end - start)) s, exit $rc)"; cat "$out/$name.log"; } > "$out/$name.report"
    cat "$out/$name.report"
    echo "$((end - start)) $name $rc" >> "$out/results"
}
export -f run_one
: > "$out/results"
sort -rn "$list" | awk '{ print $2 }' | xargs -P "$jobs" -I{} bash -c 'run_one "$1" "$2"' _ {} "$out"
awk '{ print $1, $2 }' "$out/results" > "$out/durations"
failed=$(awk '$3 != 0 { printf " %s", $2 }' "$out/results")
ran=$(wc -l < "$out/results")
total=$(wc -l < "$list")
if [ "$ran" -ne "$total" ]; then echo "test-c: only $ran of $total programs reported"; exit 1; fi
if [ -n "$failed" ]; then echo "test-c: failed:$failed"; exit 1; fi
echo "test-c: $total programs passed"
