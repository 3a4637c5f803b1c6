"""Enrolling a key made on a blank SoftHSM2 token through the Python bindings: generate_key,
make_csr (signed on the token), IssuedCertificate.sign_csr, import_certificate, then the token
identity by its URI."""
import os
import subprocess

import pytest

import mtls
from mtls import errors
from mtls.pki import IssuedCertificate
from mtls.tokens import generate_key, make_csr, import_certificate

MODULE = "/usr/lib/softhsm/libsofthsm2.so"


@pytest.fixture(scope="module")
def blank(tmp_path_factory):
    assert os.path.exists(MODULE), f"SoftHSM2 is not installed at {MODULE}: run scripts/install-deps.sh"
    d = tmp_path_factory.mktemp("enroll-py")
    (d / "tokens").mkdir()
    (d / "softhsm2.conf").write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    old = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(d / "softhsm2.conf")
    subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "enroll-py", "--pin", "1234", "--so-pin", "5678"],
                   check=True, capture_output=True)
    yield d
    if old is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = old


@pytest.mark.parametrize("key_type", ["ec-p256", "rsa2048"])
def test_generate_csr_sign_import_and_use(blank, key_type):
    uri = f"pkcs11:token=enroll-py;object=py-{key_type}?module-path={MODULE}"
    flags_seen = []

    def pin(label, token_uri, flags):
        flags_seen.append(flags)
        return "1234"

    key_uri = generate_key(uri, key_type, pin=pin)
    assert "type=private" in key_uri and f"object=py-{key_type}" in key_uri
    assert flags_seen and flags_seen[0] & mtls.tokens.TOKEN_LOGIN_REQUIRED
    with pytest.raises(errors.Duplicate):
        generate_key(uri, key_type, pin="1234")
    csr = make_csr(uri, f"CN=py {key_type}", pin="1234")
    assert csr.startswith("-----BEGIN CERTIFICATE REQUEST-----")
    root = IssuedCertificate.root("Py Enroll Root")
    customer = root.issue_intermediate("Py Customer")
    cert = customer.sign_csr(csr, "client")
    assert cert.subject_summary == f"py {key_type}"
    with pytest.raises(errors.KeyMismatch):
        import_certificate(uri, customer.certificate, pin="1234")
    assert "type=cert" in import_certificate(uri, cert, pin="1234")
    identity = mtls.identity_from_pkcs11(uri, pin="1234")
    assert identity.leaf.subject_summary == f"py {key_type}"


def test_sign_csr_refuses_what_is_not_a_csr(blank):
    root = IssuedCertificate.root("Py Enroll Root 2")
    with pytest.raises(errors.ParseError):
        root.issue_intermediate("C").sign_csr(b"garbage", "client")
    with pytest.raises(ValueError):
        root.sign_csr("x", "root")


def test_pin_callback_exception_is_reraised(blank):
    def pin(label, token_uri, flags):
        raise RuntimeError("no PIN today")

    with pytest.raises(RuntimeError, match="no PIN today"):
        make_csr(f"pkcs11:token=enroll-py;object=py-ec-p256?module-path={MODULE}", "CN=x", pin=pin)
