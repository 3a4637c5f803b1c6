"""Revocation for a private PKI (issue 28): `mtls pki` publishes where each CA's CRL lives, what it
issues carries the distribution point, and `mtls pki crl --out DIR` writes every CA's CRL for a
web server; checking fetches them from a real HTTP server on 127.0.0.1."""
import json
import os
import subprocess

import pytest

from conftest import free_port, run_cli, wait_port


def ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0, f"mtls {' '.join(map(str, args))}: {r.stderr}"
    return r


def ext_text(cert):
    r = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-ext",
                        "crlDistributionPoints,authorityInfoAccess"], capture_output=True, text=True, check=True)
    return r.stdout


@pytest.fixture(scope="module")
def crl_port():
    return free_port()


@pytest.fixture(scope="module")
def pki(tmp_path_factory, crl_port):
    """A root and customer A publishing CRLs at 127.0.0.1:crl_port; customer B publishes nothing."""
    base = tmp_path_factory.mktemp("revoke")
    d = base / "D"
    url = f"http://127.0.0.1:{crl_port}"
    ok("pki", "init", "--dir", d, "--name", "Revoke Root", "--crl-url", f"{url}/root.crl")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A", "--crl-url", f"{url}/customer-a.crl",
       "--ocsp-url", "http://127.0.0.1:9/ocsp")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer B")
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1")
    for name in ("alice", "bob", "laptop"):
        ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", name)
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer B", "--name", "mallory")

    class P:
        pass
    p = P()
    p.base, p.dir, p.url = base, d, url
    p.root = d / "root" / "cert.pem"
    p.inter = d / "ca" / "customer-a"
    p.issued = lambda name, ca="customer-a": d / "ca" / ca / "issued" / name
    return p


def test_issued_certificates_carry_their_issuers_crl_url(pki):
    # The intermediate carries the root's distribution point, the leaves the intermediate's.
    assert f"URI:{pki.url}/root.crl" in ext_text(pki.inter / "cert.pem")
    leaf = ext_text(pki.issued("laptop") / "cert.pem")
    assert f"URI:{pki.url}/customer-a.crl" in leaf
    assert "OCSP - URI:http://127.0.0.1:9/ocsp" in leaf
    assert "CRL Distribution Points" not in ext_text(pki.issued("mallory", "customer-b") / "cert.pem")
    assert "CRL Distribution Points" not in ext_text(pki.root)
    # The JSON of a new CA says where it publishes.
    r = ok("pki", "intermediate", "--dir", pki.dir, "--name", "Customer C", "--crl-url", f"{pki.url}/c.crl", "--json")
    out = json.loads(r.stdout)
    assert out["publishes_crl_at"] == f"{pki.url}/c.crl"
    assert out["crl_distribution_points"] == [f"{pki.url}/root.crl"]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "https://x/a.crl", "http://x/a.crl,URI:file:///y", "http://x/"])
def test_bad_crl_urls_are_refused_before_anything_is_made(tmp_path, url):
    r = run_cli("pki", "init", "--dir", tmp_path / "D", "--name", "R", "--crl-url", url)
    assert r.returncode != 0 and "http://" in r.stderr
    assert not (tmp_path / "D" / "root").exists()


def test_pki_crl_out_writes_every_publishing_cas_crl_in_der(pki, tmp_path):
    www = tmp_path / "www"
    r = ok("pki", "crl", "--dir", pki.dir, "--out", www, "--json")
    out = json.loads(r.stdout)
    files = sorted(os.path.basename(c["file"]) for c in out["crls"])
    assert "root.crl" in files and "customer-a.crl" in files and "c.crl" in files
    for name, issuer in (("root.crl", "Revoke Root"), ("customer-a.crl", "Customer A")):
        text = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", www / name, "-noout", "-issuer"],
                              capture_output=True, text=True, check=True).stdout
        assert issuer in text
        # verified against its CA with OpenSSL
        ca = pki.root if name == "root.crl" else pki.inter / "cert.pem"
        v = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", www / name, "-noout", "-CAfile", ca],
                           capture_output=True, text=True)
        assert "verify OK" in v.stderr + v.stdout
    assert oct(os.stat(www / "customer-a.crl").st_mode & 0o777) == "0o644"
    # neither --ca nor --out
    assert run_cli("pki", "crl", "--dir", pki.dir).returncode != 0
