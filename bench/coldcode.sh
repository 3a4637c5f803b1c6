#!/bin/sh
# What code run cold costs a client per handshake on this machine (bench/c/bench_coldcode.c): the
# raw OpenSSL C client with and without calling LINES small functions spread as a library's code
# is (7 per page, in 10 MiB), against the raw OpenSSL C server. Compare with the code lines
# libmtls's client touches per handshake (bench/callgrind.sh with MTLS_CG_LINES=1). With
# MTLS_SPIN_US="15 30", bench/c/bench_spin.c too: what a busy wait of that many microseconds adds
# to a resumed handshake, in the raw client (before its socket, after its TCP connect, after its
# handshake) and in the raw server (after its accept, after its handshake, after its answer).
#
#   bench/coldcode.sh LIBDIR [N [LINES...]]   LIBDIR holds libmtls.so (bench_tls_support.h links it)
set -eu
LIB=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${2:-2000}
if [ $# -gt 2 ]; then shift 2; else set -- 350 700 1400; fi
WORK=$(mktemp -d /tmp/mtls-cold-XXXXXX)
srv=
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -rf "$WORK"' EXIT
"$ROOT/scripts/test-pki.sh" "$WORK/pki" >/dev/null
# The library's soname is libmtls.so.0; a build directory holds libmtls.so only.
LIBDIR=$WORK/lib
mkdir -p "$LIBDIR"
ln -s "$(cd "$LIB" && pwd)/libmtls.so" "$LIBDIR/libmtls.so.0"
ln -s libmtls.so.0 "$LIBDIR/libmtls.so"
P=$WORK/pki
python3 - "$WORK/cold.S" <<'PY'
import random, sys
rng = random.Random(7)
pages, per = 400, 7   # 2,800 functions, one 64-byte line each, 7 on each of 400 random pages of 10 MiB
chosen = rng.sample(range(10 * 1024 * 1024 // 4096), pages)
lines = sorted(p * 64 + l for p in chosen for l in rng.sample(range(64), per))
out = [".text", ".p2align 12"]
at = 0
for i, line in enumerate(lines):
    if line * 64 > at:
        out.append(f".skip {line * 64 - at}, 0xcc")
    out += [f"cold_f{i}:", "  addq $1, %rax", "  ret", ".p2align 6"]
    at = line * 64 + 64
order = list(range(len(lines)))
rng.shuffle(order)
out += ['.section .data.rel.ro,"aw"', ".globl cold_table", ".p2align 3", "cold_table:"]
out += [f"  .quad cold_f{i}" for i in order]
out += [".globl cold_count", ".p2align 3", "cold_count:", f"  .quad {len(lines)}"]
out.append('.section .note.GNU-stack,"",@progbits')
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
# The server links libmtls (bench_tls holds the libmtls sides too); the measured client does not.
cc -O2 -std=gnu11 -Wall -Wextra -Werror -I"$ROOT/include" -o "$WORK/bench_tls" "$ROOT/bench/c/bench_tls.c" \
    -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lmtls $(pkg-config --cflags --libs openssl)
cc -O2 -std=gnu11 -Wall -Wextra -Werror -I"$ROOT/include" -o "$WORK/bench_coldcode" "$ROOT/bench/c/bench_coldcode.c" \
    "$WORK/cold.S" $(pkg-config --cflags --libs openssl)
cc -O2 -std=gnu11 -Wall -Wextra -Werror -I"$ROOT/include" -o "$WORK/bench_spin" "$ROOT/bench/c/bench_spin.c" \
    $(pkg-config --cflags --libs openssl)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$WORK/bench_tls" server "$port" "$P/server-chain.pem" "$P/server.key" "$P/root.pem" &
srv=$!
i=0; until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),1)" 2>/dev/null; do
    i=$((i+1)); [ $i -lt 100 ] || { echo "server not ready" >&2; exit 1; }; sleep 0.1; done
for version in 12 13; do
    "$WORK/bench_coldcode" "$port" $version "$P/client-a.pem" "$P/client-a.key" "$P/int-a.pem" "$P/root.pem" "$N" "$@"
done
for us in ${MTLS_SPIN_US:-}; do
    for version in 12 13; do
        "$WORK/bench_spin" "$port" $version "$P/client-a.pem" "$P/client-a.key" "$P/int-a.pem" "$P/root.pem" "$N" "$us"
    done
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_listening() {
    i=0; until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null; do
        i=$((i+1)); [ $i -lt 100 ] || { echo "server not ready" >&2; exit 1; }; sleep 0.1; done
}
for us in ${MTLS_SPIN_US:-}; do
    for version in 12 13; do
        line="TLS 1.${version#1} resumed, $us us in the raw server:"
        for where in 1 2 3; do
            plain=$(free_port); waiting=$(free_port)
            "$WORK/bench_spin" serve "$plain" "$P/server-chain.pem" "$P/server.key" "$P/root.pem" 0 0 & s1=$!
            "$WORK/bench_spin" serve "$waiting" "$P/server-chain.pem" "$P/server.key" "$P/root.pem" $where "$us" & s2=$!
            wait_listening "$plain"; wait_listening "$waiting"
            set -- $("$WORK/bench_spin" servers "$plain" "$waiting" $version "$P/client-a.pem" "$P/client-a.key" \
                "$P/int-a.pem" "$P/root.pem" "$N")
            kill $s1 $s2; wait $s1 $s2 2>/dev/null || true
            name=$(echo "after the accept|after the handshake|after the answer" | cut -d'|' -f$where)
            line="$line $name +$(python3 -c "print(f'{$2 - $1:.1f} ({($2 - $1) / $us:.2f}x)')"),"
        done
        echo "${line%,} (handshake $1 us)"
    done
done
