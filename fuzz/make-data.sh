#!/bin/bash
# Regenerates fuzz/data (the fixed CA the evaluation targets trust, a server identity for the TLS
# target) and the seed corpora fuzz/corpus/<target>/ with openssl. Small files only; the output
# is committed, so this runs only when the seeds should change.
set -euo pipefail
cd "$(dirname "$0")"
D=data; C=corpus; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p $D $C/{pkcs12,cert,policy,chain,store,p11uri,tls_client}
o() { openssl "$@" 2>/dev/null; }
o req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $T/ca.key -out $D/ca.pem \
  -days 7300 -subj /CN=Fuzz\ Root -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
o req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $T/int.key -out $T/int.csr -subj /CN=Fuzz\ Intermediate
printf 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n' > $T/int.ext
o x509 -req -in $T/int.csr -CA $D/ca.pem -CAkey $T/ca.key -CAcreateserial -days 7000 -extfile $T/int.ext -out $T/int.pem
o req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $D/server.key -out $T/srv.csr -subj /CN=localhost
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n' > $T/leaf.ext
o x509 -req -in $T/srv.csr -CA $T/int.pem -CAkey $T/int.key -CAcreateserial -days 6900 -extfile $T/leaf.ext -out $T/srv.pem
cat $T/srv.pem $T/int.pem > $D/server.pem
# certificate parsing: DER, PEM (one, many), PKCS#7
o x509 -in $T/srv.pem -outform DER -out $C/cert/leaf.der
cp $D/server.pem $C/cert/chain.pem
o crl2pkcs7 -nocrl -certfile $D/server.pem -outform DER -out $C/cert/chain.p7b
o crl2pkcs7 -nocrl -certfile $D/server.pem -out $C/cert/chain.p7.pem
# PKCS#12 (password "fuzz" is fixed in fuzz_pkcs12.c): modern, legacy, no MAC, certificates only
o pkcs12 -export -inkey $D/server.key -in $D/server.pem -passout pass:fuzz -out $C/pkcs12/aes.p12
o pkcs12 -export -legacy -inkey $D/server.key -in $D/server.pem -passout pass:fuzz -out $C/pkcs12/legacy.p12 || \
  o pkcs12 -export -certpbe PBE-SHA1-3DES -keypbe PBE-SHA1-3DES -inkey $D/server.key -in $D/server.pem -passout pass:fuzz -out $C/pkcs12/legacy.p12
o pkcs12 -export -nomac -inkey $D/server.key -in $D/server.pem -passout pass:fuzz -out $C/pkcs12/nomac.p12
o pkcs12 -export -nokeys -in $D/server.pem -passout pass:fuzz -out $C/pkcs12/certs.p12
# chain evaluation: [u16 big-endian length][DER] records, leaf first
rec() { python3 -c 'import sys,struct
out=b""
for p in sys.argv[2:]:
    d=open(p,"rb").read(); out+=struct.pack(">H",len(d))+d
open(sys.argv[1],"wb").write(out)' "$@"; }
o x509 -in $T/int.pem -outform DER -out $T/int.der; o x509 -in $D/ca.pem -outform DER -out $T/ca.der
rec $C/chain/good $C/cert/leaf.der $T/int.der
rec $C/chain/full $C/cert/leaf.der $T/int.der $T/ca.der
rec $C/chain/reversed $T/int.der $C/cert/leaf.der
rec $C/chain/leafonly $C/cert/leaf.der
# policy JSON (keys from README.md)
cat > $C/policy/small.json <<'J'
{"version": 1, "anchors_only": true, "name_check": "none", "purpose": "client", "min_rsa_bits": 3072, "time": "2030-01-01T00:00:00Z"}
J
cat > $C/policy/hosts.json <<'J'
{"version": 1, "banned_signature_digests": ["md5", "sha1"], "max_chain_depth": 2, "crl_check_all": false,
 "hosts": [{"host": "*.example.com:8443", "verify_as": "api.example.com", "skip_name_check": false,
   "pins": ["sha256/4g3V1Uu6mqUWWbcKh9k8RBEEUq0Bn5pYz8bC1TFNz0s=", "sha256/Yq0Yk2M6jY6cC0qgkQ8o5n2aKX7bKpTtqE3Qd3XtHn8="],
   "pins_expire": "2027-06-30T00:00:00Z", "after_expiry": "fail_closed", "enforcement": "report_only"},
  {"host": "**.example", "anchors_only": true}, {"host": "10.0.0.1"}]}
J
# PKCS#11 URIs (RFC 7512)
printf 'pkcs11:token=Fuzz%%20Token;object=key;type=private?pin-value=1234' > $C/p11uri/full
printf 'pkcs11:id=%%01%%02;manufacturer=SoftHSM%%20project;serial=abc?module-path=/usr/lib/softhsm/libsofthsm2.so' > $C/p11uri/id
printf 'pkcs11:' > $C/p11uri/empty
printf 'pkcs11:model=SoftHSM%%20v2;slot-id=3;library-version=2.6?pin-source=file:/dev/null' > $C/p11uri/model
# TLS client: what a TLS 1.3 and a TLS 1.2 server sent to a client, recorded (server flights)
python3 record_server.py $D $C/tls_client
rm -f $D/*.srl
