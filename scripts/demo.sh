#!/usr/bin/env bash
# The libmtls demo (`make demo`): in a temporary folder, make a private PKI, keep the client's
# identity and the pinned root in a store, run a mutual-TLS server that accepts only one
# customer's clients, connect to it by IP while validating the server as its DNS name (its
# certificate names only that DNS name), pinning the root kept in the store, then show the
# refusals that matter. Usage: scripts/demo.sh [PATH-TO-mtls]
#
# Every step prints a line starting with "  => " saying what happened; the test
# (Tests/e2e/test_demo.py) reads those lines.
set -euo pipefail

MTLS=${1:-${MTLS_CLI:-mtls}}
if ! command -v "$MTLS" >/dev/null 2>&1; then
    echo "demo: cannot run the mtls command line at '$MTLS' (build it first: make build-release)" >&2
    exit 1
fi
MTLS=$(command -v "$MTLS")
# The demo works in a temporary folder: a relative path must be made absolute first.
case $MTLS in /*) ;; */*) MTLS=$(cd "$(dirname "$MTLS")" && pwd)/$(basename "$MTLS") ;; esac

if [ -t 1 ]; then bold=$'\033[1m'; green=$'\033[32m'; red=$'\033[31m'; off=$'\033[0m'; else bold= green= red= off=; fi
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
run() { printf '  $ mtls'; printf ' %q' "$@"; printf '\n'; "$MTLS" "$@" 2>&1 | sed 's/^/    /'; return "${PIPESTATUS[0]}"; }
# Like run, but shows the output only when the command fails.
quiet() {
    printf '  $ mtls'; printf ' %q' "$@"; printf '\n'
    local out
    if ! out=$("$MTLS" "$@" 2>&1); then printf '%s\n' "$out" | sed 's/^/    /'; return 1; fi
}
ok() { printf '  %s=> %s%s\n' "$green" "$*" "$off"; }
die() { printf '  %s=> FAILED: %s%s\n' "$red" "$*" "$off"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mtls-demo.XXXXXX")
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$work"
start=$SECONDS

echo "${bold}libmtls demo${off} — working in $work (removed at the end)"
umask 077
printf 'demo-p12-password\n' > p12.pw
printf 'demo-store-secret\n' > store.secret
# The CA and leaf keys in pki/ are encrypted with this password (mtls pki reads the file named
# by MTLS_PKI_KEY_PASSWORD_FILE when --key-password-file is not given).
printf 'demo-key-password\n' > pki-key.pw
export MTLS_PKI_KEY_PASSWORD_FILE="$work/pki-key.pw"
HOST=api.customer-a.internal

step "1. A private PKI: root, an intermediate per customer, a server and a client certificate"
quiet pki init --dir pki --name "Demo Root" || die "pki init failed"
ok "root CA made: pki/root/cert.pem (keys encrypted with pki-key.pw)"
quiet pki intermediate --dir pki --name "Customer A" || die "pki intermediate failed"
ok "intermediate for Customer A: pki/ca/customer-a/"
quiet pki intermediate --dir pki --name "Customer B" || die "pki intermediate failed"
ok "intermediate for Customer B: pki/ca/customer-b/"
run pki issue server --dir pki --ca "Customer A" --dns "$HOST" \
    --p12 server.p12 --p12-password-file p12.pw || die "pki issue server failed"
ok "server certificate for $HOST only (no IP address in it), packaged in server.p12"
quiet pki issue client --dir pki --ca "Customer A" --name alice --p12 alice.p12 --p12-password-file p12.pw \
    || die "pki issue client failed"
ok "client certificate 'alice' from Customer A, packaged in alice.p12 (key + chain)"
quiet pki issue client --dir pki --ca "Customer B" --name mallory --p12 mallory.p12 --p12-password-file p12.pw \
    || die "pki issue client failed"
ok "client certificate 'mallory' from Customer B (for a refusal below)"

step "2. A credential store: alice's identity and the pinned root, under labels"
export MTLS_STORE="$work/store.db" MTLS_STORE_SECRET_FILE="$work/store.secret"
run store import alice.p12 --label alice --password-file p12.pw || die "store import failed"
run store add-cert pki/root/cert.pem --label demo-root || die "store add-cert failed"
run store list || die "store list failed"
ok "store.db holds 'alice' (identity, key encrypted at rest) and 'demo-root' (certificate)"

step "3. An mTLS server that requires client certificates from Customer A's intermediate"
printf '  $ mtls serve --port 0 --identity server.p12 --password-file p12.pw --client-anchor pki/ca/customer-a/cert.pem --require-client-cert &\n'
"$MTLS" serve --port 0 --identity server.p12 --password-file p12.pw \
    --client-anchor pki/ca/customer-a/cert.pem --require-client-cert > server.log 2>&1 &
server_pid=$!
port=
for _ in $(seq 1 100); do
    port=$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' server.log | head -1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { sed 's/^/    /' server.log; die "the server did not start"; }
    sleep 0.1
done
[ -n "$port" ] || die "the server did not say which port it listens on"
ok "server listening on 127.0.0.1:$port"

# Prints the server's log lines that appeared since the last call; keeps the last "rejected"
# reason in $server_reason.
seen=1
server_reason=
server_view() {
    local total new
    # The server logs each client as soon as its handshake ends; give it up to 5 s under load.
    for _ in $(seq 1 50); do
        [ "$(wc -l < server.log)" -gt "$seen" ] && break
        sleep 0.1
    done
    total=$(wc -l < server.log)
    server_reason=
    if [ "$total" -gt "$seen" ]; then
        # Each log line starts with its RFC 3339 time; the demo shows what happened.
        new=$(sed -n "$((seen + 1)),${total}p" server.log | sed -E 's/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z //')
        printf '%s\n' "$new" | sed 's/^/    server: /'
        server_reason=$(printf '%s\n' "$new" | sed -n 's/^rejected client [^ ]*: //p' | tail -1)
        seen=$total
    fi
}

# The anchor is the root stored under 'demo-root' (a label, since a store is given), not the file.
connect_args=(127.0.0.1:"$port" --verify-as "$HOST" --anchor demo-root --anchors-only)

step "4. Connect by 127.0.0.1 as 'alice' (from the store), validating the server as $HOST, stored root 'demo-root' pinned, anchors only"
if run connect "${connect_args[@]}" --identity alice --send 'GET / HTTP/1.0\r\n\r\n'; then
    server_view
    grep -q "accepted .*CN=alice" server.log || die "the server did not report alice"
    ok "connected: the server is trusted, and the server saw client CN=alice from Customer A"
else
    server_view
    die "the mutual-TLS connection failed"
fi

# Runs a connection that must be refused and prints why.
expect_refusal() {
    local what=$1; shift
    local out
    set +e
    out=$("$MTLS" connect "$@" --json 2>/dev/null)
    local rc=$?
    set -e
    printf '  $ mtls connect'; printf ' %q' "$@"; printf ' --json\n'
    printf '%s\n' "$out" | sed 's/^/    /'
    server_view
    if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q '"connected":true' \
        && ! printf '%s' "$out" | grep -q '"error":"'; then
        die "$what: the connection was NOT refused"
    fi
    local reason
    reason=$(printf '%s' "$out" | python3 -c 'import json,sys
d = json.load(sys.stdin)
ev = d.get("evaluation") or {}
rs = [r["code"] + ": " + r["message"] for r in ev.get("reasons", [])]
print("; ".join(rs) or d.get("error") or "refused")' 2>/dev/null || echo "refused")
    ok "refused ($what): $reason${server_reason:+ | server: $server_reason}"
}

step "5. Refusal: the same connection without --verify-as (127.0.0.1 is not a name in the certificate)"
expect_refusal "name mismatch" 127.0.0.1:"$port" --anchor demo-root --anchors-only --identity alice

step "6. Refusal: the server's key does not match the pinned SPKI hash"
expect_refusal "wrong pin" "${connect_args[@]}" --identity alice \
    --pin sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=

step "7. Refusal: a client from another customer (mallory, issued by Customer B)"
expect_refusal "client from another customer" "${connect_args[@]}" --identity mallory.p12 --password-file p12.pw \
    --send 'GET / HTTP/1.0\r\n\r\n'

step "8. Refusal: no client certificate"
# No store here (with one, a client picks a stored identity): the root is pinned from its file.
( unset MTLS_STORE MTLS_STORE_SECRET_FILE
  expect_refusal "no client certificate" 127.0.0.1:"$port" --verify-as "$HOST" --anchor pki/root/cert.pem \
      --anchors-only --send 'GET / HTTP/1.0\r\n\r\n' )

step "Done in $((SECONDS - start)) s; cleaning up $work"
ok "demo finished"
