"""CRLs made by another producer than libmtls and the openssl command line (issue 37): CFSSL
(`cfssl gencrl`, Debian's golang-cfssl), whose CRLs carry no CRL number. A CFSSL root and
intermediate whose signing profiles put CRL distribution points on 127.0.0.1 in what they
issue; a good and a revoked client certificate; the CRLs are used from the distribution point
(served by Python's http.server) and as files given to the policy."""
import base64
import json
import subprocess
import shutil
import types

import pytest

from conftest import free_port, require_tool, run_cli, sh, wait_port


def pem_crl(b64_der):
    body = "".join(b64_der.split())
    return "-----BEGIN X509 CRL-----\n" + "\n".join(body[i:i + 64] for i in range(0, len(body), 64)) + "\n-----END X509 CRL-----\n"


@pytest.fixture(scope="module")
def cf(tmp_path_factory):
    require_tool(shutil.which("cfssl") and shutil.which("cfssljson"), "CFSSL (cfssl, cfssljson)")
    d = tmp_path_factory.mktemp("cfssl-crl")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (d / "config.json").write_text(json.dumps({"signing": {"default": {"expiry": "8760h"}, "profiles": {
        "intermediate": {"usages": ["cert sign", "crl sign"], "expiry": "43800h", "crl_url": f"{url}/root.crl",
                         "ca_constraint": {"is_ca": True, "max_path_len": 0, "max_path_len_zero": True}},
        "client": {"usages": ["digital signature", "client auth"], "expiry": "8760h", "crl_url": f"{url}/int.crl"}}}}))
    for name, cn in (("root", "CFSSL CRL Root"), ("int", "CFSSL CRL Intermediate"), ("good", "good"), ("revoked", "revoked")):
        (d / f"{name}-csr.json").write_text(json.dumps({"CN": cn, "key": {"algo": "ecdsa", "size": 256}}))
    sh("cfssl gencert -initca root-csr.json | cfssljson -bare root", d)
    sh("cfssl gencert -initca int-csr.json | cfssljson -bare int", d)
    sh("cfssl sign -ca root.pem -ca-key root-key.pem -config config.json -profile intermediate int.csr | cfssljson -bare int", d)
    for name in ("good", "revoked"):
        sh(f"cfssl gencert -ca int.pem -ca-key int-key.pem -config config.json -profile client {name}-csr.json"
           f" | cfssljson -bare {name}", d)
        (d / f"{name}-chain.pem").write_text((d / f"{name}.pem").read_text() + (d / "int.pem").read_text())
    serial = subprocess.run(["openssl", "x509", "-in", d / "revoked.pem", "-noout", "-serial"], capture_output=True,
                            text=True, check=True).stdout.split("=")[1].strip()
    (d / "revoked-serials").write_text(f"{int(serial, 16)}\n")
    (d / "none").write_text("")
    www = d / "www"
    www.mkdir()
    for crl, serials, ca in (("int", "revoked-serials", "int"), ("root", "none", "root")):
        b64 = subprocess.run(["cfssl", "gencrl", serials, f"{ca}.pem", f"{ca}-key.pem"], cwd=d, capture_output=True,
                             text=True, check=True).stdout
        (www / f"{crl}.crl").write_bytes(base64.b64decode(b64))
        (d / f"{crl}-crl.pem").write_text(pem_crl(b64))
    p = subprocess.Popen(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(www)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, p)
        yield types.SimpleNamespace(dir=d, url=url)
    finally:
        p.terminate()
        p.wait(10)


def verify(cf, name, *args):
    r = run_cli("verify", cf.dir / f"{name}-chain.pem", "--purpose", "client", "--anchor", cf.dir / "root.pem",
                "--anchors-only", "--json", *args, timeout=60)
    return r, json.loads(r.stdout)


def test_cfssl_crls_from_the_distribution_point_good_and_revoked(cf):
    r, out = verify(cf, "good", "--revocation", "hard")
    assert r.returncode == 0 and out["trusted"], out
    checks = out["revocation"]["checks"]
    assert [c["url"] for c in checks] == [f"{cf.url}/int.crl", f"{cf.url}/root.crl"], checks
    assert all(c["status"] == "good" and c["source"] == "crl" for c in checks), checks
    r, out = verify(cf, "revoked", "--revocation", "hard")
    assert r.returncode == 1 and [x["code"] for x in out["reasons"]] == ["revoked"], out


def test_cfssl_crl_files_in_the_policy_good_and_revoked(cf, tmp_path):
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps({"crls": [str(cf.dir / "int-crl.pem"), str(cf.dir / "root-crl.pem")], "crl_check_all": True,
                                  "revocation": {"mode": "hard", "sources": ["crl"]}}))
    r, out = verify(cf, "good", "--policy", policy)
    assert r.returncode == 0 and out["trusted"], out
    assert {c["source"] for c in out["revocation"]["checks"]} == {"crl_file"}, out
    r, out = verify(cf, "revoked", "--policy", policy)
    assert r.returncode == 1 and "revoked" in [x["code"] for x in out["reasons"]], out
