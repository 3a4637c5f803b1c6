#!/bin/sh
# Instructions per handshake (callgrind counts instructions, so the figure does not depend on the
# machine's load), for the server's and the client's side, libmtls against raw OpenSSL C, TLS 1.3
# and 1.2, full and resumed, P-256. Each measured side runs twice under callgrind, with N1 and N2
# handshakes; (total(N2) - total(N1)) / (N2 - N1) is one handshake without start-up.
#
#   bench/callgrind.sh LIBDIR [N1 N2]      LIBDIR holds libmtls.so (e.g. .build/release)
#
# Environment: MTLS_CG_ONLY="server-13-resumed ..." to run some rows only; MTLS_CG_KEEP=DIR keeps
# the callgrind.out files there (for callgrind_annotate --inclusive=yes); MTLS_CG_LINES=1 adds the
# distinct 64-byte lines of libmtls's code run per handshake and the pages they are on (what its
# code costs when run cold: bench/coldcode.sh; scripts/order-file.sh).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N1=${2:-10}
N2=${3:-30}
WORK=$(mktemp -d /tmp/mtls-cg-XXXXXX)
KEEP=${MTLS_CG_KEEP:-$WORK}
mkdir -p "$KEEP"
"$ROOT/scripts/test-pki.sh" "$WORK/pki" >/dev/null
# The library's soname is libmtls.so.0; a build directory holds libmtls.so only.
LIBDIR=$WORK/lib
mkdir -p "$LIBDIR"
# Valgrind 3.19 cannot read the Swift toolchain's debug info: a copy without it (symbols kept).
objcopy --strip-debug "$1/libmtls.so" "$LIBDIR/libmtls.so.0"
ln -s libmtls.so.0 "$LIBDIR/libmtls.so"
P=$WORK/pki
cc -O2 -std=c11 -Wall -Wextra -Werror -I"$ROOT/include" -o "$WORK/cg" "$ROOT/bench/c/bench_callgrind.c" \
    -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lmtls $(pkg-config --cflags --libs openssl)
EXE=$WORK/cg

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { # $1: file the server prints "ready" to
    i=0; while ! grep -q ready "$1" 2>/dev/null; do i=$((i+1)); [ $i -lt 600 ] || { echo "server not ready" >&2; exit 1; }; sleep 0.1; done
}
VG_LINES=
[ "${MTLS_CG_LINES:-0}" = 1 ] && VG_LINES="--dump-instr=yes --compress-pos=no --compress-strings=no"
# lines OUT1 OUT2 -> LINES/PAGES: the distinct 64-byte lines of libmtls.so's code whose instruction
# counts grew between the two runs (run per handshake; needs MTLS_CG_LINES=1), and the 4 KiB
# pages they are on (scripts/order-file.sh lays them out together)
lines() {
    python3 - "$1" "$2" <<'PY'
import re, sys
def run(path):
    counts, obj = {}, None
    for line in open(path):
        if line.startswith("ob="):
            obj = line[3:].strip()
        elif obj and obj.endswith("/libmtls.so.0"):
            m = re.match(r"(0x[0-9a-f]+) \d+ (\d+)", line)
            if m:
                key = int(m.group(1), 16)
                counts[key] = counts.get(key, 0) + int(m.group(2))
    return counts
a, b = run(sys.argv[1]), run(sys.argv[2])
run = [k for k, v in b.items() if v > a.get(k, 0)]
print(f"{len({k >> 6 for k in run})}/{len({k >> 12 for k in run})}")
PY
}
total() { # $1: callgrind.out file -> total Ir
    grep '^summary:' "$1" | awk '{print $2}'
}

# measure SIDE IMPL VERSION MODE N -> prints total instructions of the measured process
measure() {
    side=$1 impl=$2 version=$3 mode=$4 n=$5
    out=$KEEP/callgrind.out.$side-$impl-$version-$mode-$n
    pt=$(port)
    extra=0; [ "$mode" = resumed ] && extra=1
    client_args="$version $mode $P/client-a.pem $P/client-a.key $P/int-a.pem $P/root.pem"
    if [ "$side" = server ]; then
        if [ "$impl" = raw ]; then sargs="rawserver $pt $((n + extra)) $P/server-chain.pem $P/server.key $P/root.pem"
        else sargs="mtlsserver $pt $((n + extra)) $P/server-chain.pem $P/server.key $P/root.pem $version"; fi
        valgrind --tool=callgrind $VG_LINES --callgrind-out-file="$out" $EXE $sargs >"$WORK/ready" 2>"$WORK/vg.log" &
        vg=$!
        wait_ready "$WORK/ready"
        $EXE rawclient $pt $n $client_args
        wait $vg
    else
        $EXE rawserver $pt $((n + extra)) $P/server-chain.pem $P/server.key $P/root.pem >"$WORK/ready" &
        srv=$!
        wait_ready "$WORK/ready"
        valgrind --tool=callgrind $VG_LINES --callgrind-out-file="$out" $EXE ${impl}client $pt $n $client_args 2>"$WORK/vg.log"
        wait $srv
    fi
    total "$out"
}

printf '%-28s %12s %12s %7s' row "raw OpenSSL" libmtls ratio
[ -n "$VG_LINES" ] && printf ' %20s' "libmtls lines/pages"
echo
for side in server client; do
    for version in 13 12; do
        for mode in resumed full; do
            row=$side-$version-$mode
            if [ -n "${MTLS_CG_ONLY:-}" ]; then case " $MTLS_CG_ONLY " in *" $row "*) ;; *) continue ;; esac; fi
            r1=$(measure $side raw $version $mode $N1); r2=$(measure $side raw $version $mode $N2)
            m1=$(measure $side mtls $version $mode $N1); m2=$(measure $side mtls $version $mode $N2)
            raw=$(( (r2 - r1) / (N2 - N1) )); mt=$(( (m2 - m1) / (N2 - N1) ))
            printf '%-28s %12d %12d %7s' "$row" $raw $mt $(awk "BEGIN{printf \"%.3f\", $mt/$raw}")
            [ -n "$VG_LINES" ] && printf ' %20s' $(lines "$KEEP/callgrind.out.$side-mtls-$version-$mode-$N1" "$KEEP/callgrind.out.$side-mtls-$version-$mode-$N2")
            echo
        done
    done
done
