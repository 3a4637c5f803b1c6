#!/bin/bash
# Regenerates the seeds of the network-parser targets (fuzz/corpus/{http_response,http_request,
# acme,renewal_info,est,ocsp,crl}) and the fixed issuer and leaf the OCSP and CRL targets check
# against (fuzz/data/rev-ca.pem, rev-leaf.pem; the CA key is thrown away). Small files only; the
# output is committed, so this runs only when the seeds should change. The seeds' OCSP responses
# and CRLs are valid at the targets' fixed time (2027-01-15, Sources/MTLS/FuzzEntry.swift).
set -euo pipefail
cd "$(dirname "$0")"
D=data; C=corpus; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for t in http_response http_request acme renewal_info est ocsp crl; do rm -rf "${C:?}/$t"; mkdir -p "$C/$t"; done
o() { openssl "$@" 2>/dev/null; }
# --- HTTP responses (CR LF line ends; the body after the blank line as is)
printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\nReplay-Nonce: abc_-123\r\n\r\n{"status":"ok"}' > $C/http_response/ok-length
printf 'HTTP/1.1 200 OK\r\nContent-Type: application/pkix-crl\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: yes\r\n\r\n' > $C/http_response/chunked
printf 'HTTP/1.1 301 Moved Permanently\r\nLocation: http://crl.example.com/ca.crl\r\nContent-Length: 0\r\n\r\n' > $C/http_response/redirect
printf 'HTTP/1.1 307 Temporary Redirect\r\nLocation: /acme/new-order\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n' > $C/http_response/redirect-relative
printf 'HTTP/1.0 200 OK\r\nContent-Type: application/ocsp-response\r\n\r\nbody until the connection ends' > $C/http_response/until-close
printf 'HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\nContent-Length: 94\r\nLink: <https://acme.example/dir>;rel="index"\r\n\r\n{"type":"urn:ietf:params:acme:error:badNonce","detail":"JWS has an invalid anti-replay nonce"}' > $C/http_response/problem
printf 'HTTP/1.1 204 No Content\r\nReplay-Nonce: n1\r\nCache-Control: no-store\r\n\r\n' > $C/http_response/no-content
printf 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok' > $C/http_response/continue
# --- request heads, as a scraper or an ACME validation server sends them
printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nUser-Agent: Prometheus/2.51.0\r\nAccept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAuthorization: Bearer c2VjcmV0\r\n\r\n' > $C/http_request/metrics
printf 'GET /.well-known/acme-challenge/LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: Mozilla/5.0 (compatible; Let'"'"'s Encrypt validation server)\r\nAccept: */*\r\nConnection: close\r\n\r\n' > $C/http_request/challenge
printf 'HEAD /metrics?x=1#frag HTTP/1.0\r\n\r\n' > $C/http_request/head
printf 'POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc' > $C/http_request/post
# --- ACME JSON (RFC 8555 §7.1)
cat > $C/acme/directory.json <<'J'
{"newNonce":"https://acme.example/acme/new-nonce","newAccount":"https://acme.example/acme/new-acct","newOrder":"https://acme.example/acme/new-order","revokeCert":"https://acme.example/acme/revoke-cert","keyChange":"https://acme.example/acme/key-change","renewalInfo":"https://acme.example/acme/renewal-info","meta":{"termsOfService":"https://acme.example/tos.pdf","externalAccountRequired":false,"caaIdentities":["acme.example"]}}
J
cat > $C/acme/order.json <<'J'
{"status":"pending","expires":"2027-01-20T14:09:07.99Z","identifiers":[{"type":"dns","value":"example.com"},{"type":"ip","value":"192.0.2.7"}],"authorizations":["https://acme.example/acme/authz/PAniVnsZcis","https://acme.example/acme/authz/r4HqLzrSrpI"],"finalize":"https://acme.example/acme/order/TOlocE8rfgo/finalize","certificate":"https://acme.example/acme/cert/mAt3xBGaobw"}
J
cat > $C/acme/authorization.json <<'J'
{"status":"pending","expires":"2027-01-20T14:09:07.99Z","identifier":{"type":"dns","value":"example.org"},"wildcard":true,"challenges":[{"url":"https://acme.example/acme/chall/prV_B7yEyA4","type":"http-01","status":"pending","token":"DGyRejmCefe7v4NfDGDKfA"},{"url":"https://acme.example/acme/chall/Rg5dV14Gh1Q","type":"dns-01","status":"pending","token":"evaGxfADs6pSRb2LAv9IZ"},{"url":"https://acme.example/acme/chall/TLS","type":"tls-alpn-01","status":"pending","token":"abc-_123"}]}
J
cat > $C/acme/authorization-invalid.json <<'J'
{"status":"invalid","identifier":{"type":"ip","value":"2001:db8:0::7"},"challenges":[{"url":"https://acme.example/c/1","type":"http-01","status":"invalid","token":"t","error":{"type":"urn:ietf:params:acme:error:connection","detail":"Connection refused","status":400}}]}
J
cat > $C/acme/problem.json <<'J'
{"type":"urn:ietf:params:acme:error:rejectedIdentifier","detail":"Some of the identifiers requested were rejected","status":400,"subproblems":[{"type":"urn:ietf:params:acme:error:malformed","detail":"Invalid underscore in DNS name \"_example.org\"","identifier":{"type":"dns","value":"_example.org"}},{"type":"urn:ietf:params:acme:error:rejectedIdentifier","detail":"This CA will not issue for \"example.net\"","identifier":{"type":"dns","value":"example.net"}}]}
J
printf '{"type":"urn:ietf:params:acme:error:caa","detail":"CAA forbids \\u202eissuance\\u001b[2J\\u009b31m","subproblems":[{"identifier":{"type":"dns","value":"a\\r\\nb.example"},"detail":"\\u2028x"}]}' > $C/acme/problem-hostile.json
# --- renewal information (RFC 9773 §4.2)
cat > $C/renewal_info/window.json <<'J'
{"suggestedWindow":{"start":"2027-01-02T04:00:00Z","end":"2027-01-03T04:00:00Z"},"explanationURL":"https://acme.example/docs/ari"}
J
cat > $C/renewal_info/fractional.json <<'J'
{"suggestedWindow":{"start":"2026-12-31T23:59:59.123Z","end":"2027-01-01T00:00:00.5Z"}}
J
# --- the fixed issuer and leaf of the revocation targets, an OCSP responder and a CRL
o req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $T/ca.key -out $D/rev-ca.pem \
  -days 7300 -subj "/CN=Fuzz Revocation CA" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
o req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $T/leaf.key -out $T/leaf.csr -subj /CN=revoked.example
printf 'subjectAltName=DNS:revoked.example\nkeyUsage=critical,digitalSignature\ncrlDistributionPoints=URI:http://crl.fuzz.invalid/ca.crl\nauthorityInfoAccess=OCSP;URI:http://ocsp.fuzz.invalid/\n' > $T/leaf.ext
o x509 -req -in $T/leaf.csr -CA $D/rev-ca.pem -CAkey $T/ca.key -set_serial 0x1001 -days 7000 -extfile $T/leaf.ext -out $D/rev-leaf.pem
o req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $T/resp.key -out $T/resp.csr -subj "/CN=Fuzz OCSP Responder"
printf 'extendedKeyUsage=OCSPSigning\nkeyUsage=critical,digitalSignature\n' > $T/resp.ext
o x509 -req -in $T/resp.csr -CA $D/rev-ca.pem -CAkey $T/ca.key -set_serial 0x2002 -days 7000 -extfile $T/resp.ext -out $T/resp.pem
mkdir -p $T/ca; : > $T/ca/index.txt; echo 1000 > $T/ca/crlnumber
cat > $T/ca.cnf <<C
[ca]
default_ca = fz
[fz]
database = $T/ca/index.txt
crlnumber = $T/ca/crlnumber
default_md = sha256
default_crl_days = 7000
crl_extensions = crl_ext
[crl_ext]
authorityKeyIdentifier = keyid:always
C
# good: another serial is revoked; revoked: the leaf is (keyCompromise)
printf 'R\t491231235959Z\t261101000000Z,superseded\t3003\tunknown\t/CN=other\n' > $T/ca/index.txt
o ca -config $T/ca.cnf -gencrl -keyfile $T/ca.key -cert $D/rev-ca.pem -out $T/good.pem
o crl -in $T/good.pem -outform DER -out $C/crl/good.der
printf 'R\t491231235959Z\t261101000000Z,keyCompromise\t1001\tunknown\t/CN=revoked.example\n' >> $T/ca/index.txt
o ca -config $T/ca.cnf -gencrl -keyfile $T/ca.key -cert $D/rev-ca.pem -out $C/crl/revoked.pem
o crl -in $C/crl/revoked.pem -outform DER -out $C/crl/revoked.der
# a CRL of another CA whose name holds U+202E and an escape (refused, and quoted clean)
o req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $T/evil.key -out $T/evil.pem -days 7300 -utf8 \
  -subj "/CN=Evil$(printf '\xe2\x80\xae')gpj.exe$(printf '\x1b')[2J"
: > $T/ca/evil.txt
sed "s|index.txt|evil.txt|" $T/ca.cnf > $T/evil.cnf
o ca -config $T/evil.cnf -gencrl -keyfile $T/evil.key -cert $T/evil.pem -out $T/evil.crl
o crl -in $T/evil.crl -outform DER -out $C/crl/other-issuer-hostile-name.der
# OCSP (RFC 6960): good, revoked (index above), from the CA itself and from a delegated responder
o ocsp -issuer $D/rev-ca.pem -cert $D/rev-leaf.pem -no_nonce -reqout $T/req.der
: > $T/ca/good.txt; printf 'V\t491231235959Z\t\t1001\tunknown\t/CN=revoked.example\n' > $T/ca/good.txt
o ocsp -index $T/ca/good.txt -CA $D/rev-ca.pem -rsigner $D/rev-ca.pem -rkey $T/ca.key -reqin $T/req.der -ndays 7000 -respout $C/ocsp/good-by-ca.der
o ocsp -index $T/ca/index.txt -CA $D/rev-ca.pem -rsigner $D/rev-ca.pem -rkey $T/ca.key -reqin $T/req.der -ndays 7000 -respout $C/ocsp/revoked-by-ca.der
o ocsp -index $T/ca/good.txt -CA $D/rev-ca.pem -rsigner $T/resp.pem -rkey $T/resp.key -reqin $T/req.der -ndays 7000 -respout $C/ocsp/good-delegated.der
o ocsp -index $T/ca/index.txt -CA $D/rev-ca.pem -rsigner $D/rev-ca.pem -rkey $T/ca.key -resp_no_certs -reqin $T/req.der -ndays 7000 -respout $C/ocsp/revoked-no-certs.der
printf '\x30\x03\x0a\x01\x06' > $C/ocsp/unauthorized.der
# --- EST certs-only PKCS#7 (RFC 7030 §4.1.3): base64 as sent, DER, and a CA chain
o crl2pkcs7 -nocrl -certfile $D/rev-leaf.pem -outform DER -out $C/est/leaf.p7.der
base64 -w 64 $C/est/leaf.p7.der > $C/est/leaf.p7.b64
cat $D/rev-leaf.pem $D/rev-ca.pem > $T/chain.pem
o crl2pkcs7 -nocrl -certfile $T/chain.pem -outform DER | base64 -w 76 | sed 's/$/\r/' > $C/est/cacerts.p7.b64
printf 'The server is unable to process the request: \x1b[31mdenied\x1b[0m \xe2\x80\xae' > $C/est/error-text
