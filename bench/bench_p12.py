#!/usr/bin/env python3
"""PKCS#12 import: mtls_pkcs12_import vs raw OpenSSL PKCS12_parse on the same files, in one
process (bench/c/bench_p12.c). Target: ratio <= 1.10. Needs MTLS_PREFIX (an installed build)."""
import json
import os
import subprocess
import sys
import tempfile

from _cbench import build, row

TARGET = 1.10
prefix = os.environ.get("MTLS_PREFIX")
if not prefix:
    sys.exit("MTLS_PREFIX must point at an installed libmtls (make bench sets it)")


def sh(cmd, cwd):
    subprocess.run(cmd, shell=True, check=True, cwd=cwd, capture_output=True)


with tempfile.TemporaryDirectory(prefix="mtls-bench-p12-") as tmp:
    exe = build("bench_p12", tmp, prefix, pkgs=["openssl"])
    sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout root.key -out root.pem "
       "-subj '/CN=Bench Root' -days 5 && "
       "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout int.key -out int.csr -subj '/CN=Bench Int' && "
       "printf 'basicConstraints=critical,CA:TRUE\\nkeyUsage=keyCertSign\\n' > ca.ext && "
       "openssl x509 -req -in int.csr -CA root.pem -CAkey root.key -CAcreateserial -out int.pem -days 5 -extfile ca.ext && "
       "cat int.pem root.pem > chain.pem && "
       "openssl req -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.csr -subj '/CN=bench rsa' && "
       "openssl x509 -req -in rsa.csr -CA int.pem -CAkey int.key -CAcreateserial -out rsa.pem -days 5 && "
       "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec.key -out ec.csr -subj '/CN=bench ec' && "
       "openssl x509 -req -in ec.csr -CA int.pem -CAkey int.key -CAcreateserial -out ec.pem -days 5 && "
       "openssl pkcs12 -export -inkey rsa.key -in rsa.pem -certfile chain.pem -name b -passout pass:pw -out rsa-aes.p12 && "
       "openssl pkcs12 -export -inkey ec.key -in ec.pem -certfile chain.pem -name b -passout pass:pw -out ec-aes.p12 && "
       "openssl pkcs12 -export -inkey rsa.key -in rsa.pem -certfile chain.pem -name b -passout pass:pw "
       "-keypbe PBE-SHA1-3DES -certpbe PBE-SHA1-3DES -macalg sha1 -out rsa-3des.p12",
       tmp)
    worst = 0.0
    for name, label in (("rsa-aes.p12", "RSA-2048 + 2-cert chain, AES-256/PBKDF2-SHA256, SHA-256 MAC"),
                        ("ec-aes.p12", "P-256 + 2-cert chain, AES-256/PBKDF2-SHA256, SHA-256 MAC"),
                        ("rsa-3des.p12", "RSA-2048 + 2-cert chain, SHA1-3DES, SHA-1 MAC")):
        r = subprocess.run([exe, os.path.join(tmp, name), "pw"], check=True, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
        res = json.loads(r.stdout)
        worst = max(worst, res["ratio"])
        print(f"p12 import  {label:58s} libmtls {res['mtls_ms']:7.3f} ms  PKCS12_parse {res['openssl_ms']:7.3f} ms"
              f"  ratio {res['ratio']:.3f}", flush=True)
        row("p12 import", label, res["ratio"], TARGET, mtls=res["mtls_ms"], baseline=res["openssl_ms"], unit="ms",
            baseline_name="OpenSSL PKCS12_parse", spread=res.get("spread"))
    print(f"p12 import  worst ratio {worst:.3f} (target <= {TARGET:.2f}): {'ok' if worst <= TARGET else 'ABOVE TARGET'}")
