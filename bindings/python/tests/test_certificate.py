import pathlib
import re
import subprocess

import pytest

import mtls
from mtls import errors


def make_cert(tmp_path):
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-subj", "/CN=py.example", "-days", "1",
                    "-addext", "subjectAltName=DNS:py.example,IP:::1",
                    "-addext", "extendedKeyUsage=clientAuth"], check=True, capture_output=True)
    return cert.read_bytes()


def test_version_matches_package():
    """The library's version is the header's MTLS_VERSION_* macros (written nowhere else)."""
    header = (pathlib.Path(__file__).resolve().parents[3] / "include" / "mtls.h").read_text()
    parts = [re.search(rf"^#define MTLS_VERSION_{p} (\d+)$", header, re.M).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert mtls.__version__ == ".".join(parts) == "0.3.0"


def test_parse_reads_fields(tmp_path):
    pem = make_cert(tmp_path)
    with mtls.Certificate.parse(pem) as c:
        assert c.subject == "CN=py.example"
        assert c.subject_summary == "py.example"
        assert c.key_type == ("rsa2048", 2048)
        assert c.subject_alt_names == [("DNS", "py.example"), ("IP", "::1")]
        assert c.extended_key_usages == ["1.3.6.1.5.5.7.3.2"]
        assert len(c.sha256_hex) == 64 and c.spki_pin.startswith("sha256/")
        nb, na = c.validity
        assert na - nb == 86400
        assert mtls.Certificate.parse(c.der) == c


def test_parse_all_reads_every_pem_block(tmp_path):
    pem = make_cert(tmp_path)
    assert len(mtls.Certificate.parse_all(pem + pem)) == 2


def test_garbage_raises_parse_error_with_message():
    with pytest.raises(errors.ParseError) as e:
        mtls.Certificate.parse(b"not a certificate")
    assert e.value.code == -5 and e.value.message
