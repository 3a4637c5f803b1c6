import pathlib
import subprocess

import pytest

import mtls
from mtls import errors


# The one maker of every suite's test PKIs (see its header for its shapes).
TEST_PKI = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "test-pki.sh"


def sh(cmd, cwd):
    subprocess.run(cmd, shell=True, check=True, cwd=cwd, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    sh(f"{TEST_PKI} --root . root 'Py Root' && {TEST_PKI} --leaf . leaf p384 py.client root && "
       "openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -name 'py id' -passout pass:pw -out id.p12 && "
       "openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -name 'py id' -passout pass:pw -legacy -out legacy.p12",
       tmp_path)
    return tmp_path


def test_import_gives_identity_with_chain_and_check(pki):
    p = mtls.PKCS12.load(pki / "id.p12", "pw")
    assert len(p.identities) == 1 and len(p.certificates) == 2
    ident = p.identities[0]
    assert ident.friendly_name == "py id"
    assert ident.key_type == ("p384", 384)
    assert ident.leaf.subject_summary == "py.client"
    assert [c.subject_summary for c in ident.chain] == ["Py Root"]
    assert len(ident.local_key_id) == 20
    check = ident.chain_check
    assert check.verified and check.complete and check.signatures_ok and check.within_validity
    assert check.openssl_code == 0


def test_legacy_file_and_bytes_input(pki):
    p = mtls.PKCS12.parse((pki / "legacy.p12").read_bytes(), "pw")
    assert p.identities[0].leaf.subject_summary == "py.client"


def test_errors_are_typed(pki):
    data = (pki / "id.p12").read_bytes()
    with pytest.raises(errors.BadPassword):
        mtls.PKCS12.parse(data, "nope")
    with pytest.raises(errors.BadPassword, match="--password-file"):  # the message names the fix (issue 38)
        mtls.PKCS12.parse(data, None)
    with pytest.raises(errors.Corrupt):
        mtls.PKCS12.parse(data[: len(data) // 2], "pw")
    with pytest.raises(errors.NotPKCS12):
        mtls.PKCS12.parse((pki / "leaf.pem").read_bytes(), "pw")
    with pytest.raises(errors.NotPKCS12):
        mtls.PKCS12.parse(b"", "pw")


def test_export_round_trip_and_from_pem(pki):
    ident = mtls.Identity.from_pem((pki / "leaf.pem").read_bytes() + (pki / "root.pem").read_bytes(),
                                   (pki / "leaf.key").read_bytes())
    assert ident.friendly_name is None and ident.local_key_id is None
    for legacy in (False, True):
        data = ident.export_pkcs12("s3cret ü", legacy=legacy, friendly_name="exported")
        back = mtls.PKCS12.parse(data, "s3cret ü")
        assert back.identities[0].friendly_name == "exported"
        assert back.identities[0].leaf == ident.leaf
        assert [c.der for c in back.identities[0].chain] == [c.der for c in ident.chain]
    with pytest.raises(errors.KeyMismatch):
        mtls.Identity.from_pem((pki / "root.pem").read_bytes(), (pki / "leaf.key").read_bytes())
    with ident:
        pass


def test_legacy_import_leaves_the_host_openssl_context_alone(pki):
    """The legacy provider (RC2, MD4...) lives only in libmtls's own OpenSSL context: Python's
    hashlib, which shares the process's default context, still cannot make MD4 afterwards."""
    import hashlib

    def md4_available():
        try:
            hashlib.new("md4")
            return True
        except ValueError:
            return False

    before = md4_available()
    p = mtls.PKCS12.parse((pki / "legacy.p12").read_bytes(), "pw")   # RC2-40 certificates
    assert len(p.identities) == 1
    assert md4_available() == before


def test_empty_and_absent_passwords_open_each_others_files(pki):
    for args, name in (("", "empty.p12"), ("-legacy", "empty-legacy.p12")):
        sh(f"openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -name 'Zoë ☺' -passout pass: {args} -out {name}", pki)
        for password in (None, ""):
            p = mtls.PKCS12.load(pki / name, password)
            assert p.password_encoding == "empty"
            assert p.identities[0].friendly_name == "Zoë ☺"
        with pytest.raises(errors.BadPassword):
            mtls.PKCS12.load(pki / name, "x")
    assert mtls.PKCS12.load(pki / "id.p12", "pw").password_encoding == "given"
