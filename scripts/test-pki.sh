#!/usr/bin/env bash
# The test PKIs of every suite (Swift, C, Python, end-to-end, benches), made with the openssl
# command line. One script, one set of helpers (key, root, sign), four shapes:
#
#   test-pki.sh DIR            the connection PKI (made once per DIR):
#     root (EC) ─┬─ int-a (customer A) ─┬─ server  (DNS:server.test, serverAuth)
#                │                      ├─ client-a      (clientAuth, EC P-256)
#                │                      └─ client-a-rsa  (clientAuth, RSA 2048)
#                └─ int-b (customer B) ─── client-b      (clientAuth, EC)
#     other-root ── other-server (DNS:server.test)       (a server nobody pinned)
#     root-2 ── int-c ── client-c                         (a third customer under another root)
#     Each NAME.pem is the certificate, NAME.key the key (PKCS#8, clear), NAME-chain.pem the
#     certificate with its intermediate, NAME.p12 (password "pw") the identity with its chain.
#
#   test-pki.sh --trust DIR    the trust shapes (all valid from now for 30 days):
#     root.pem (P-256 root) -> inter.pem (pathlen 0) -> server.pem (serverAuth, DNS:server.test,
#     DNS:*.wild.test, IP:127.0.0.1) and client.pem (clientAuth); chain.pem = server + inter;
#     client-chain.pem; other-root.pem (an unrelated root); selfsigned.pem (self-signed server,
#     CA:FALSE); rsa-*.pem (same shape with RSA-2048); sha1-server.pem (SHA-1 signed);
#     weak-server.pem (RSA-1024 key); noeku-server.pem; cn-chain.pem (CN a sibling of a SAN);
#     cn-*-chain.pem (other CNs); caleaf-chain.pem (a CA certificate as leaf); nosan-chain.pem;
#     deep-chain.pem (leaf under an intermediate issued by inter: violates pathlen 0);
#     revoked.crl revoking server.pem; reqx509.pem; name-constraint, path-building (pb-*) and
#     root-rollover (ro-*) shapes, described where they are made below.
#
#   test-pki.sh --chain DIR [KEY [CN]]   root.pem -> int.pem -> leaf.pem (clientAuth, CN client.example
#     unless CN is given), chain.pem = int + root, keys NAME.key (and leaf.p8, PKCS#8 DER), valid 30 days.
#   test-pki.sh --leaf DIR NAME [KEY [CN [ISSUER]]]   one more client leaf NAME.pem/.key/.p8
#     (CN NAME unless given) under ISSUER.pem/.key in DIR (default int, made by --chain).
#   test-pki.sh --root DIR NAME CN       a root CA alone: NAME.pem, NAME.key.
#   test-pki.sh --allow DIR   the allow-list shapes (issue 39), leaves for client and server use,
#     each NAME.pem / NAME.key / NAME-chain.pem (leaf + its root):
#     root.pem (Allow Root) ─┬─ alice  (CN alice, OU eng, DNS:alice.svc.example,
#                            │          URI:spiffe://example.org/ns/prod/sa/alice)
#                            ├─ bob    (CN bob, OU ops, DNS:bob.other.example,
#                            │          URI:spiffe://other.org/ns/prod/sa/bob)
#                            └─ server (CN server.test, DNS:server.test, DNS:localhost, IP:127.0.0.1,
#                                       URI:spiffe://example.org/ns/prod/sa/server)
#     root-2.pem (Second Allow Root) ── carol (CN carol, OU eng, DNS:carol.svc.example,
#                                       URI:spiffe://example.org/ns/dev/sa/carol/x)
#   KEY: p256 (default), p384, rsa1024, rsa2048, rsa4096 or ed25519.
set -euo pipefail
mode=connection
case "${1:-}" in --trust | --chain | --leaf | --root | --allow) mode=${1#--}; shift ;; esac
D=${1:?usage: test-pki.sh [--trust | --chain | --leaf | --root] DIR ...}
shift
mkdir -p "$D" && cd "$D"

# Runs a command quietly; on failure runs it again to show why, and stops.
q() { "$@" >/dev/null 2>&1 || { echo "test-pki.sh: failed: $*" >&2; "$@"; exit 1; }; }
DAYS=30
key() { # out [p256|p384|rsa1024|rsa2048|rsa4096|ed25519]
  case ${2:-p256} in
    p256) q openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" ;;
    p384) q openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$1" ;;
    rsa1024 | rsa2048 | rsa4096) q openssl genpkey -algorithm RSA -pkeyopt "rsa_keygen_bits:${2#rsa}" -out "$1" ;;
    ed25519) q openssl genpkey -algorithm ED25519 -out "$1" ;;
    *) echo "test-pki.sh: unknown key type $2" >&2; exit 2 ;;
  esac
}
ext() { # name body: NAME.ext, section v3, with subject and authority key identifiers
  printf '[v3]\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n%s\n' "$2" > "$1.ext"; }
sign() { # key subject ca.pem ca.key ext out [digest]: a certificate for key, issued by ca, DAYS days
  q openssl req -new -key "$1" -subj "$2" -out "$6.csr"
  q openssl x509 -req -in "$6.csr" -CA "$3" -CAkey "$4" -days "$DAYS" -set_serial "0x$(openssl rand -hex 8)" \
    -extfile "$5.ext" -extensions v3 -"${7:-sha256}" -out "$6"
  rm -f "$6.csr"; }
root() { # key subject out: a self-signed root, DAYS days
  q openssl req -x509 -new -key "$1" -subj "$2" -days "$DAYS" -set_serial "0x$(openssl rand -hex 8)" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$3"; }

connection_pki() {
  [ -f done ] && return 0
  ext ca 'basicConstraints=critical,CA:true
keyUsage=critical,keyCertSign,cRLSign'
  leaf() { printf 'basicConstraints=critical,CA:false\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s' "$1" "$2"; }
  ext server "$(leaf serverAuth 'subjectAltName=DNS:server.test,DNS:localhost')"
  ext server-ip "$(leaf serverAuth 'subjectAltName=IP:127.0.0.1')"
  ext other-server "$(leaf serverAuth 'subjectAltName=DNS:server.test')"
  ext client "$(leaf clientAuth '')"
  o="/O=libmtls test/CN"
  DAYS=3650
  key root.key; root root.key "$o=Test Root" root.pem
  key other-root.key; root other-root.key "$o=Other Root" other-root.pem
  key root-2.key; root root-2.key "$o=Second Root" root-2.pem
  DAYS=825
  key int-a.key; sign int-a.key "$o=Customer A CA" root.pem root.key ca int-a.pem
  key int-b.key; sign int-b.key "$o=Customer B CA" root.pem root.key ca int-b.pem
  key int-c.key; sign int-c.key "$o=Customer C CA" root-2.pem root-2.key ca int-c.pem
  key server.key; sign server.key "$o=server.test" int-a.pem int-a.key server server.pem
  key server-ip.key; sign server-ip.key "$o=127.0.0.1" int-a.pem int-a.key server-ip server-ip.pem
  key server-rsa.key rsa2048; sign server-rsa.key "$o=server.test" int-a.pem int-a.key server server-rsa.pem
  key client-a.key; sign client-a.key "$o=client-a" int-a.pem int-a.key client client-a.pem
  key client-a-rsa.key rsa2048; sign client-a-rsa.key "$o=client-a-rsa" int-a.pem int-a.key client client-a-rsa.pem
  key client-b.key; sign client-b.key "$o=client-b" int-b.pem int-b.key client client-b.pem
  key other-server.key; sign other-server.key "$o=server.test" other-root.pem other-root.key other-server other-server.pem
  key client-c.key; sign client-c.key "$o=client-c" int-c.pem int-c.key client client-c.pem
  rm -f ./*.ext

  for n in server server-rsa client-a client-a-rsa; do cat $n.pem int-a.pem > $n-chain.pem; done
  cat server-ip.pem int-a.pem > server-ip-chain.pem
  cat other-server.pem > other-server-chain.pem
  cat client-b.pem int-b.pem > client-b-chain.pem
  cat client-c.pem int-c.pem > client-c-chain.pem
  for n in client-a client-a-rsa client-b client-c server; do
    issuer=$(case $n in client-b) echo int-b ;; client-c) echo int-c ;; *) echo int-a ;; esac)
    rootf=$(case $n in client-c) echo root-2 ;; *) echo root ;; esac)
    cat $issuer.pem $rootf.pem > $n-cas.pem
    q openssl pkcs12 -export -inkey $n.key -in $n.pem -certfile $n-cas.pem -name $n -passout pass:pw -out $n.p12
  done
  printf 'pw\n' > password.txt
  chmod 600 ./*.key password.txt  # secret files: libmtls refuses world-readable ones
  touch done
}

trust_pki() {
  ext ca 'basicConstraints=critical,CA:TRUE,pathlen:0
  keyUsage=critical,keyCertSign,cRLSign'
  ext subca 'basicConstraints=critical,CA:TRUE
  keyUsage=critical,keyCertSign,cRLSign'
  ext server 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=serverAuth
  subjectAltName=DNS:server.test,DNS:*.wild.test,IP:127.0.0.1'
  ext client 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=clientAuth
  subjectAltName=DNS:client.test'
  ext noeku 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  subjectAltName=DNS:server.test'

  key root.key; root root.key "/CN=Test Root" root.pem
  key other-root.key; root other-root.key "/CN=Other Root" other-root.pem
  key inter.key; sign inter.key "/CN=Test Intermediate" root.pem root.key ca inter.pem
  key server.key; sign server.key "/CN=server.test" inter.pem inter.key server server.pem
  key client.key; sign client.key "/CN=client.test" inter.pem inter.key client client.pem
  cat server.pem inter.pem > chain.pem
  cat client.pem inter.pem > client-chain.pem
  sign server.key "/CN=server.test" inter.pem inter.key noeku noeku-server.pem
  cat noeku-server.pem inter.pem > noeku-chain.pem
  sign server.key "/CN=server.test" inter.pem inter.key server sha1-server.pem sha1
  cat sha1-server.pem inter.pem > sha1-chain.pem
  key weak.key rsa1024; sign weak.key "/CN=server.test" inter.pem inter.key server weak-server.pem
  cat weak-server.pem inter.pem > weak-chain.pem
  key sub.key; sign sub.key "/CN=Sub Intermediate" inter.pem inter.key subca sub.pem
  sign server.key "/CN=server.test" sub.pem sub.key server deep-server.pem
  cat deep-server.pem sub.pem inter.pem > deep-chain.pem
  # Policy-layer cases: a CN naming a host that is not a SAN, a CA certificate as leaf, no SAN.
  sign server.key "/CN=notinsan.test" inter.pem inter.key server cn-server.pem
  cat cn-server.pem inter.pem > cn-chain.pem
  # Common names that are fine beside the SANs (another namespace, another address, a display
  # name) and ones that spell a SAN another way (case, non-canonical IP text).
  for cn in bad.example.com 10.9.9.9 server "Server Test" SERVER.TEST 127.000.000.001; do
    f=cn-$(printf '%s' "$cn" | tr -c 'A-Za-z0-9' '_')
    sign server.key "/CN=$cn" inter.pem inter.key server "$f-server.pem"
    cat "$f-server.pem" inter.pem > "$f-chain.pem"
  done
  ext caleaf 'basicConstraints=critical,CA:TRUE
  keyUsage=critical,keyCertSign,digitalSignature
  extendedKeyUsage=serverAuth
  subjectAltName=DNS:server.test'
  sign server.key "/CN=server.test" inter.pem inter.key caleaf caleaf-server.pem
  cat caleaf-server.pem inter.pem > caleaf-chain.pem
  ext nosan 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=serverAuth'
  sign server.key "/CN=server.test" inter.pem inter.key nosan nosan-server.pem
  cat nosan-server.pem inter.pem > nosan-chain.pem
  # Self-signed server certificate (a pinned leaf).
  openssl req -x509 -new -key server.key -subj "/CN=server.test" -days 30 -set_serial 0x1234 \
    -addext "basicConstraints=critical,CA:FALSE" -addext "keyUsage=critical,digitalSignature" \
    -addext "extendedKeyUsage=serverAuth" -addext "subjectAltName=DNS:server.test" \
    -addext "subjectKeyIdentifier=hash" -out selfsigned.pem 2>/dev/null
  # RSA-2048 chain of the same shape.
  key rsa-root.key rsa2048; root rsa-root.key "/CN=RSA Root" rsa-root.pem
  key rsa-inter.key rsa2048; sign rsa-inter.key "/CN=RSA Intermediate" rsa-root.pem rsa-root.key ca rsa-inter.pem
  key rsa-server.key rsa2048; sign rsa-server.key "/CN=server.test" rsa-inter.pem rsa-inter.key server rsa-server.pem
  cat rsa-server.pem rsa-inter.pem > rsa-chain.pem
  # A CRL from the intermediate revoking server.pem.
  cat > ca.cnf <<CNF
[ca]
default_ca=d
[d]
database=$PWD/index.txt
crlnumber=$PWD/crlnumber
default_md=sha256
default_crl_days=30
crl_extensions=crlext
[crlext]
authorityKeyIdentifier=keyid
CNF
  : > index.txt; echo 01 > crlnumber
  openssl ca -config ca.cnf -keyfile inter.key -cert inter.pem -revoke server.pem 2>/dev/null
  openssl ca -config ca.cnf -keyfile inter.key -cert inter.pem -gencrl -out revoked.crl 2>/dev/null
  : > index.txt
  openssl ca -config ca.cnf -keyfile inter.key -cert inter.pem -gencrl -out empty.crl 2>/dev/null
  # A self-signed server certificate as `openssl req -x509` makes it: no EKU, CN not a DNS name.
  openssl req -x509 -new -key server.key -subj "/CN=server" -days 30 \
    -addext "subjectAltName=DNS:server.internal" -out reqx509.pem 2>/dev/null
  # A leaf whose CN is the parent domain of its SAN (private CAs do this): not a name, accepted.
  sign server.key "/CN=test" inter.pem inter.key server cnparent-server.pem
  cat cnparent-server.pem inter.pem > cnparent-chain.pem
  # Name constraints apply to a DNS-like CN: permitted .allowed.test; the CN names another domain.
  ext nc 'basicConstraints=critical,CA:TRUE
  keyUsage=critical,keyCertSign,cRLSign
  nameConstraints=critical,permitted;DNS:allowed.test'
  ext ncleaf 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=serverAuth
  subjectAltName=DNS:api.allowed.test'
  key nc.key; sign nc.key "/CN=Constrained Intermediate" root.pem root.key nc nc-inter.pem
  sign server.key "/CN=evil.other.test" nc-inter.pem nc.key ncleaf nccn-server.pem
  cat nccn-server.pem nc-inter.pem > nccn-chain.pem
  sign server.key "/CN=api.allowed.test" nc-inter.pem nc.key ncleaf ncok-server.pem
  cat ncok-server.pem nc-inter.pem > ncok-chain.pem
  # An address in the CN is not a DNS name: free under DNS constraints (the SAN is the IP).
  ext ncipleaf 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=serverAuth
  subjectAltName=IP:127.0.0.1'
  sign server.key "/CN=127.0.0.1" nc-inter.pem nc.key ncipleaf ncipcn-server.pem
  cat ncipcn-server.pem nc-inter.pem > ncipcn-chain.pem
  # A client certificate without SANs: its DNS-like CN is its only host-like name, and the
  # constraints judge it (nccnonly: outside them; nccnonlyok: inside).
  ext ncclient 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=clientAuth'
  sign server.key "/CN=evil.other.test" nc-inter.pem nc.key ncclient nccnonly-client.pem
  cat nccnonly-client.pem nc-inter.pem > nccnonly-chain.pem
  sign server.key "/CN=device.allowed.test" nc-inter.pem nc.key ncclient nccnonlyok-client.pem
  cat nccnonlyok-client.pem nc-inter.pem > nccnonlyok-chain.pem
  # Path building: pb-server.pem under "PB Intermediate" (key pb.key), and several certificates of
  # that intermediate (same name and key), each another issuer candidate: pb-expired.pem (valid
  # one day: expired two days from now), pb-wrongeku.pem (EKU clientAuth), pb-notca.pem (CA:FALSE),
  # pb-sha1.pem (signed with SHA-1), pb-nonanchor.pem (under Other Root), pb-good.pem (and a
  # second certificate of each bad kind, pb-V2.pem). pb-bag.pem:
  # leaf, every bad candidate, Other Root, then the good one. pb-noise.pem: leaf and 50 useless
  # candidates (same name and key identifier, another key: every signature fails).
  key pb.key
  ext pbca 'basicConstraints=critical,CA:TRUE
  keyUsage=critical,keyCertSign,cRLSign'
  sign pb.key "/CN=PB Intermediate" root.pem root.key pbca pb-good.pem
  ext pbserver 'basicConstraints=critical,CA:FALSE
  keyUsage=critical,digitalSignature
  extendedKeyUsage=serverAuth
  subjectAltName=DNS:server.test'
  sign server.key "/CN=server.test" pb-good.pem pb.key pbserver pb-server.pem
  openssl req -new -key pb.key -subj "/CN=PB Intermediate" -out pb.csr 2>/dev/null
  pbsign() { # ext out ca cakey days digest
    openssl x509 -req -in pb.csr -CA "$3" -CAkey "$4" -days "$5" -set_serial "0x$(openssl rand -hex 8)" \
      -extfile "$1.ext" -extensions v3 -"$6" -out "$2" 2>/dev/null; }
  pbsign pbca pb-expired.pem root.pem root.key 1 sha256
  ext pbeku 'basicConstraints=critical,CA:TRUE
  keyUsage=critical,keyCertSign,cRLSign
  extendedKeyUsage=clientAuth'
  pbsign pbeku pb-wrongeku.pem root.pem root.key 30 sha256
  ext pbnotca 'basicConstraints=critical,CA:FALSE'
  pbsign pbnotca pb-notca.pem root.pem root.key 30 sha256
  pbsign pbca pb-sha1.pem root.pem root.key 30 sha1
  pbsign pbca pb-nonanchor.pem other-root.pem other-root.key 30 sha256
  pbsign pbca pb-expired2.pem root.pem root.key 1 sha256
  pbsign pbeku pb-wrongeku2.pem root.pem root.key 30 sha256
  pbsign pbnotca pb-notca2.pem root.pem root.key 30 sha256
  pbsign pbca pb-sha12.pem root.pem root.key 30 sha1
  pbsign pbca pb-nonanchor2.pem other-root.pem other-root.key 30 sha256
  # pb-V-chain.pem: the leaf, two bad candidates of one kind (so hiding one is not enough), the good one.
  for v in expired wrongeku notca sha1 nonanchor; do cat pb-server.pem pb-$v.pem pb-${v}2.pem pb-good.pem > pb-$v-chain.pem; done
  cat pb-server.pem pb-expired.pem pb-wrongeku.pem pb-notca.pem pb-sha1.pem pb-nonanchor.pem other-root.pem pb-good.pem > pb-bag.pem
  PBSKI=$(openssl x509 -in pb-good.pem -noout -ext subjectKeyIdentifier | tail -1 | tr -d ' ')
  ext pbnoise "basicConstraints=critical,CA:TRUE
  keyUsage=critical,keyCertSign,cRLSign
  subjectKeyIdentifier=$PBSKI"
  sed -i '/^subjectKeyIdentifier=hash$/d' pbnoise.ext
  key noise.key; openssl req -new -key noise.key -subj "/CN=PB Intermediate" -out noise.csr 2>/dev/null
  cp pb-server.pem pb-noise.pem
  for i in $(seq 1 50); do
    openssl x509 -req -in noise.csr -CA root.pem -CAkey root.key -days 30 -set_serial "$((1000 + i))" \
      -extfile pbnoise.ext -extensions v3 -sha256 2>/dev/null >> pb-noise.pem
  done
  # Root rollover: Rollover Root's old key (old-root.pem, valid one day) and new key (new-root.pem,
  # same name); new-cross.pem is the new root cross-signed by the old one; ro-inter.pem under the
  # new key; ro-chain.pem = leaf, intermediate, cross-signed new root (what a server sends during
  # a rollover).
  key old-root.key; openssl req -x509 -new -key old-root.key -subj "/CN=Rollover Root" -days 1 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out old-root.pem 2>/dev/null
  key new-root.key; root new-root.key "/CN=Rollover Root" new-root.pem
  openssl req -new -key new-root.key -subj "/CN=Rollover Root" -out new-root.csr 2>/dev/null
  openssl x509 -req -in new-root.csr -CA old-root.pem -CAkey old-root.key -days 30 -set_serial 0x77 \
    -extfile subca.ext -extensions v3 -sha256 -out new-cross.pem 2>/dev/null
  key ro-inter.key; sign ro-inter.key "/CN=Rollover Intermediate" new-root.pem new-root.key ca ro-inter.pem
  sign server.key "/CN=server.test" ro-inter.pem ro-inter.key server ro-server.pem
  cat ro-server.pem ro-inter.pem new-cross.pem > ro-chain.pem
  chmod 600 ./*.key
}

client_leaf() { # name key-type cn [issuer]: a clientAuth leaf, with NAME.p8 (PKCS#8 DER)
  ext client 'basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth'
  key "$1.key" "$2"
  sign "$1.key" "/CN=$3" "${4:-int}.pem" "${4:-int}.key" client "$1.pem"
  q openssl pkcs8 -topk8 -nocrypt -in "$1.key" -outform DER -out "$1.p8"
  chmod 600 "$1.key" "$1.p8"
  rm -f client.ext
}

chain_pki() { # [key-type [cn]]
  ext ca 'basicConstraints=critical,CA:TRUE
keyUsage=critical,keyCertSign,cRLSign'
  key root.key; root root.key "/CN=Test Root" root.pem
  key int.key; sign int.key "/CN=Test Intermediate" root.pem root.key ca int.pem
  client_leaf leaf "${1:-p256}" "${2:-client.example}"
  cat int.pem root.pem > chain.pem
  chmod 600 ./*.key
  rm -f ca.ext
}

allow_pki() {
  [ -f done ] && return 0
  allow_leaf() { # name subject san issuer
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth,serverAuth\nsubjectAltName=%s\n' "$3" > "$1.body"
    ext "$1" "$(cat "$1.body")"; rm -f "$1.body"
    key "$1.key"; sign "$1.key" "$2" "$4.pem" "$4.key" "$1" "$1.pem"
    cat "$1.pem" "$4.pem" > "$1-chain.pem"
  }
  key root.key; root root.key "/O=libmtls test/CN=Allow Root" root.pem
  key root-2.key; root root-2.key "/O=libmtls test/CN=Second Allow Root" root-2.pem
  allow_leaf alice "/O=libmtls test/OU=eng/CN=alice" "DNS:alice.svc.example,URI:spiffe://example.org/ns/prod/sa/alice" root
  allow_leaf bob "/O=libmtls test/OU=ops/CN=bob" "DNS:bob.other.example,URI:spiffe://other.org/ns/prod/sa/bob" root
  allow_leaf server "/O=libmtls test/CN=server.test" "DNS:server.test,DNS:localhost,IP:127.0.0.1,URI:spiffe://example.org/ns/prod/sa/server" root
  allow_leaf carol "/O=libmtls test/OU=eng/CN=carol" "DNS:carol.svc.example,URI:spiffe://example.org/ns/dev/sa/carol/x" root-2
  rm -f ./*.ext
  chmod 600 ./*.key
  touch done
}

case $mode in
  allow) allow_pki ;;
  connection) connection_pki ;;
  trust) trust_pki ;;
  chain) chain_pki "$@" ;;
  leaf) client_leaf "${1:?usage: test-pki.sh --leaf DIR NAME [KEY [CN [ISSUER]]]}" "${2:-p256}" "${3:-$1}" "${4:-int}" ;;
  root) key "${1:?usage: test-pki.sh --root DIR NAME CN}.key"; root "$1.key" "/CN=${2:?usage: test-pki.sh --root DIR NAME CN}" "$1.pem"
    chmod 600 "$1.key" ;;
esac
