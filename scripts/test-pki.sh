#!/usr/bin/env bash
# Makes a small private PKI for the connection tests, with the openssl command line:
#   root (EC) ─┬─ int-a (customer A) ─┬─ server  (DNS:server.test, serverAuth)
#              │                      ├─ client-a      (clientAuth, EC P-256)
#              │                      └─ client-a-rsa  (clientAuth, RSA 2048)
#              └─ int-b (customer B) ─── client-b      (clientAuth, EC)
#   other-root ── other-server (DNS:server.test)       (a server nobody pinned)
#   root-2 ── int-c ── client-c                         (a third customer under another root)
# Each NAME.pem is the certificate, NAME.key the key (PKCS#8, clear), NAME-chain.pem the
# certificate with its intermediate, NAME.p12 (password "pw") the identity with its chain.
set -euo pipefail
dir=${1:?usage: test-pki.sh DIR}
mkdir -p "$dir" && cd "$dir"
[ -f done ] && exit 0
q() { "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; "$@"; exit 1; }; }
ec() { q openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
rsa() { q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1.key"; }
ca_ext='basicConstraints=critical,CA:true
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid:always'
root() { # name cn
  ec "$1"
  q openssl req -x509 -new -key "$1.key" -subj "/O=libmtls test/CN=$2" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:true" -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$1.pem"
}
issue() { # name issuer cn extensions
  q openssl req -new -key "$1.key" -subj "/O=libmtls test/CN=$3" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  q openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 825 -sha256 \
    -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}
leaf_ext() { printf 'basicConstraints=critical,CA:false\nkeyUsage=critical,digitalSignature,keyEncipherment\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\nextendedKeyUsage=%s\n%s' "$1" "$2"; }

root root "Test Root"
ec int-a; issue int-a root "Customer A CA" "$ca_ext"
ec int-b; issue int-b root "Customer B CA" "$ca_ext"
ec server; issue server int-a "server.test" "$(leaf_ext serverAuth 'subjectAltName=DNS:server.test,DNS:localhost')"
ec server-ip; issue server-ip int-a "127.0.0.1" "$(leaf_ext serverAuth 'subjectAltName=IP:127.0.0.1')"
rsa server-rsa; issue server-rsa int-a "server.test" "$(leaf_ext serverAuth 'subjectAltName=DNS:server.test,DNS:localhost')"
ec client-a; issue client-a int-a "client-a" "$(leaf_ext clientAuth '')"
rsa client-a-rsa; issue client-a-rsa int-a "client-a-rsa" "$(leaf_ext clientAuth '')"
ec client-b; issue client-b int-b "client-b" "$(leaf_ext clientAuth '')"
root other-root "Other Root"
ec other-server; issue other-server other-root "server.test" "$(leaf_ext serverAuth 'subjectAltName=DNS:server.test')"
root root-2 "Second Root"
ec int-c; issue int-c root-2 "Customer C CA" "$ca_ext"
ec client-c; issue client-c int-c "client-c" "$(leaf_ext clientAuth '')"

for n in server server-rsa client-a client-a-rsa; do cat $n.pem int-a.pem > $n-chain.pem; done
cat server-ip.pem int-a.pem > server-ip-chain.pem
cat other-server.pem > other-server-chain.pem
cat client-b.pem int-b.pem > client-b-chain.pem
cat client-c.pem int-c.pem > client-c-chain.pem
for n in client-a client-a-rsa client-b client-c server; do
  issuer=$(case $n in client-b) echo int-b;; client-c) echo int-c;; *) echo int-a;; esac)
  rootf=$(case $n in client-c) echo root-2;; *) echo root;; esac)
  cat $issuer.pem $rootf.pem > $n-cas.pem
  q openssl pkcs12 -export -inkey $n.key -in $n.pem -certfile $n-cas.pem -name $n -passout pass:pw -out $n.p12
done
printf 'pw\n' > password.txt
chmod 600 *.key
touch done
