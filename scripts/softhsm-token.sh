#!/bin/bash
# Makes SoftHSM2 test tokens in DIR (used by the Swift, C, Python and e2e token tests).
#
#   scripts/softhsm-token.sh DIR
#   export SOFTHSM2_CONF=DIR/softhsm2.conf
#
# Keys are generated ON the token (pkcs11-tool --keypairgen): there is no software copy.
# Certificates are issued for the token's public keys by a CA made here and stored on the token
# with the key's CKA_ID. Everything else is written to DIR:
#   softhsm2.conf  tokens/           SoftHSM's config and token store
#   ca.pem ca.key                    the test CA (also stored on token "mtls-test" as "ca")
#   server.pem server.key            a server certificate for 127.0.0.1/localhost, from the CA
#   rsa.pem ec.pem p384.pem          the token certificates (clientAuth)
#   pin                              the user PIN (1234) of every token, in a file
#   module                           the SoftHSM2 module path
# Tokens (user PIN 1234, SO PIN 5678):
#   mtls-test:   id 01 "rsa-client" RSA 2048, id 02 "ec-client" P-256, id 03 "p384-client" P-384,
#                "ca" (certificate only)
#   mtls-spare:  id 01 "spare" P-256 (for wrong-PIN tests, so "mtls-test" is never touched),
#                id 02 "tls-server" P-256 with a serverAuth certificate for 127.0.0.1/localhost,
#                id 03 P-256 key labelled "spare-key" whose certificate is labelled "spare-cert",
#                id 07 "ed-client" Ed25519 (ed.pem), id 08 "always-auth" P-256 marked
#                CKA_ALWAYS_AUTHENTICATE (always.pem; a context-specific login before each signature)
#   mtls-empty:  no objects
#   mtls-locked: id 01 "locked" P-256, and the token reports its user PIN locked. SoftHSM2 never
#                locks a PIN itself (wrong PINs only set CKF_USER_PIN_COUNT_LOW, and its C_Login
#                ignores CKF_USER_PIN_LOCKED), so the flag is set in its token file, as a token
#                that did lock would report it.
set -euo pipefail
DIR=${1:?usage: softhsm-token.sh DIR}
mkdir -p "$DIR/tokens"
DIR=$(cd "$DIR" && pwd)
MODULE=${SOFTHSM2_MODULE:-}
for m in /usr/lib/softhsm/libsofthsm2.so /usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so /usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so; do
    [ -n "$MODULE" ] && break
    [ -e "$m" ] && MODULE=$m
done
[ -n "$MODULE" ] || { echo "softhsm-token.sh: libsofthsm2.so not found (install softhsm2)" >&2; exit 1; }
export SOFTHSM2_CONF="$DIR/softhsm2.conf"
printf 'directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n' "$DIR" > "$SOFTHSM2_CONF"
printf '1234\n' > "$DIR/pin"
chmod 600 "$DIR/pin"
echo "$MODULE" > "$DIR/module"

p11() { pkcs11-tool --module "$MODULE" "$@" >/dev/null 2>"$DIR/p11.err" || { cat "$DIR/p11.err" >&2; exit 1; }; }

for t in mtls-test mtls-spare mtls-empty mtls-locked; do
    softhsm2-util --init-token --free --label "$t" --pin 1234 --so-pin 5678 >/dev/null
done

cd "$DIR"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
    -subj "/CN=libmtls token test CA" -days 30 -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout placeholder.key \
    -out placeholder.csr -subj "/CN=placeholder" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' > client.ext
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' > server.ext
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr \
    -subj "/CN=localhost" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -extfile server.ext -days 30 \
    -out server.pem 2>/dev/null

# token_identity TOKEN ID LABEL KEYTYPE FILE [EXTFILE [CERTLABEL]]: key pair generated on the token,
# certificate (clientAuth unless EXTFILE says otherwise; labelled LABEL unless CERTLABEL) beside it.
token_identity() {
    local token=$1 id=$2 label=$3 keytype=$4 file=$5 ext=${6:-client.ext} certlabel=${7:-$3}
    # shellcheck disable=SC2086 # KEYGEN_FLAGS: extra pkcs11-tool flags, word-split on purpose
    p11 --token-label "$token" --login --pin 1234 --keypairgen --key-type "$keytype" --id "$id" --label "$label" ${KEYGEN_FLAGS:-}
    # (gnutls's p11tool: pkcs11-tool 0.23 cannot export P-384 public keys)
    GNUTLS_PIN=1234 p11tool --provider "$MODULE" --login --export-pubkey \
        "pkcs11:token=$token;id=%$id;type=public" --outfile "$file.pub.pem" 2>"$DIR/p11.err" \
        || { cat "$DIR/p11.err" >&2; exit 1; }
    openssl x509 -req -in placeholder.csr -CA ca.pem -CAkey ca.key -CAcreateserial -force_pubkey "$file.pub.pem" \
        -subj "/CN=token $label" -extfile "$ext" -days 30 -out "$file.pem" 2>/dev/null
    openssl x509 -in "$file.pem" -outform DER -out "$file.der"
    p11 --token-label "$token" --login --pin 1234 --write-object "$file.der" --type cert --id "$id" --label "$certlabel"
}
token_identity mtls-test 01 rsa-client rsa:2048 rsa
token_identity mtls-test 02 ec-client EC:prime256v1 ec
token_identity mtls-test 03 p384-client EC:secp384r1 p384
token_identity mtls-spare 01 spare EC:prime256v1 spare
token_identity mtls-spare 02 tls-server EC:prime256v1 tls-server server.ext
token_identity mtls-spare 03 spare-key EC:prime256v1 spare3 client.ext spare-cert
token_identity mtls-locked 01 locked EC:prime256v1 locked
token_identity mtls-spare 07 ed-client EC:edwards25519 ed
KEYGEN_FLAGS="--always-auth --usage-sign" token_identity mtls-spare 08 always-auth EC:prime256v1 always
openssl x509 -in ca.pem -outform DER -out ca.der
p11 --token-label mtls-test --login --pin 1234 --write-object ca.der --type cert --id ff --label ca
# Mark mtls-locked's user PIN locked: CKA_OS_TOKENFLAGS (0x8000534b, an 8-byte big-endian
# CK_ULONG after its type tag) |= CKF_USER_PIN_LOCKED (0x40000).
python3 - "$(grep -l mtls-locked tokens/*/token.object)" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
tag = bytes.fromhex("000000008000534b0000000000000002")
at = data.find(tag) + len(tag)
assert at >= len(tag), "token flags not found in " + path
flags = int.from_bytes(data[at:at + 8], "big") | 0x40000
data[at:at + 8] = flags.to_bytes(8, "big")
open(path, "wb").write(data)
PY
rm -f placeholder.key placeholder.csr server.csr p11.err ./*.pub.pem
