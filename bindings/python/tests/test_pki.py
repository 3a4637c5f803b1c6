"""Issuing through the Python bindings; results checked with the cryptography package."""
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

import mtls
from mtls import IssuedCertificate, errors

NOW = 1893456000  # 2030-01-01T00:00:00Z


@pytest.fixture(scope="module")
def chain():
    root = IssuedCertificate.root("Py Root", now=NOW)
    inter = root.issue_intermediate("Customer P", now=NOW)
    return root, inter


def test_server_certificate_has_names_and_server_auth(chain):
    _, inter = chain
    server = inter.issue_server("api.example.com", dns=["api.example.com"], ips=["127.0.0.1"], now=NOW)
    cert = x509.load_der_x509_certificate(server.certificate.der)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api.example.com"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert int(cert.not_valid_before_utc.timestamp()) == NOW - 300
    assert server.chain_pem.count("BEGIN CERTIFICATE") == 3


def test_client_p12_carries_key_chain_and_friendly_name(chain):
    _, inter = chain
    alice = inter.issue_client("alice", key_type="ec-p384", days=10, now=NOW)
    key, cert, extra = pkcs12.load_key_and_certificates(alice.export_pkcs12("pw"), b"pw")
    assert cert.subject.rfc4514_string() == "CN=alice"
    assert [c.subject.rfc4514_string() for c in extra] == ["CN=Customer P", "CN=Py Root"]
    assert key.key_size == 384
    p12 = pkcs12.load_pkcs12(alice.export_pkcs12("pw", legacy=True), b"pw")
    assert p12.cert.friendly_name == b"alice"


def test_issued_certificate_is_an_identity(chain):
    _, inter = chain
    ident = inter.issue_client("erin", now=NOW).identity
    assert isinstance(ident, mtls.Identity)
    assert ident.leaf.subject == "CN=erin"


def test_key_pem_is_encrypted_with_a_password(chain):
    root, _ = chain
    enc = root.key_pem("kp")
    assert enc.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    load_pem_private_key(enc.encode(), b"kp")
    assert root.key_pem().startswith("-----BEGIN PRIVATE KEY-----")


def test_load_and_issue_from_files(chain, tmp_path):
    _, inter = chain
    (tmp_path / "ca.pem").write_text(inter.chain_pem)
    (tmp_path / "key.pem").write_text(inter.key_pem("kp"))
    (tmp_path / "key.pem").chmod(0o600)  # a key file: libmtls refuses one everyone can read
    with pytest.raises(errors.BadPassword):
        IssuedCertificate.load(tmp_path / "ca.pem", tmp_path / "key.pem", "wrong")
    with IssuedCertificate.load(tmp_path / "ca.pem", tmp_path / "key.pem", "kp") as ca:
        bob = ca.issue_client("bob", key_type="ed25519")
        assert bob.certificate.issuer == "CN=Customer P"


def test_crl_lists_the_revoked_serial(chain):
    _, inter = chain
    c = inter.issue_client("carol", now=NOW)
    crl = x509.load_der_x509_crl(inter.crl([c.certificate.serial_hex], number=5, now=NOW))
    assert crl.get_revoked_certificate_by_serial_number(int(c.certificate.serial_hex, 16)) is not None
    assert crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number == 5


def test_bad_inputs_raise_the_matching_exception(chain):
    root, inter = chain
    with pytest.raises(errors.InvalidArgument, match="unknown key kind"):
        IssuedCertificate.root("R", key_type="dsa")
    with pytest.raises(errors.InvalidArgument, match="at least one DNS name"):
        inter.issue_server("s")
    with pytest.raises(errors.InvalidArgument, match="not an IP address"):
        inter.issue_server("s", ips=["1.2.3.4.5"])
    with pytest.raises(errors.InvalidArgument, match="path length 0"):
        inter.issue_intermediate("Sub")
    with pytest.raises(errors.NotFound):
        IssuedCertificate.load("/nonexistent.pem", "/nonexistent.key")
    assert isinstance(errors.InvalidArgument("x"), mtls.MTLSError)


def test_crl_and_ocsp_urls_are_carried_by_what_the_ca_issues(chain):
    # issue 28: the URLs say where the issuer publishes; the new certificate carries them.
    _, inter = chain
    bob = inter.issue_client("bob-revocable", now=NOW, crl_url="http://127.0.0.1:8080/customer-p.crl",
                             ocsp_url="http://127.0.0.1:8081/")
    assert bob.certificate.crl_urls == ["http://127.0.0.1:8080/customer-p.crl"]
    assert bob.certificate.ocsp_urls == ["http://127.0.0.1:8081/"]
    cert = x509.load_der_x509_certificate(bob.certificate.der)
    cdp = cert.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
    assert [n.value for n in cdp[0].full_name] == ["http://127.0.0.1:8080/customer-p.crl"]
    aia = cert.extensions.get_extension_for_class(x509.AuthorityInformationAccess).value
    assert [d.access_location.value for d in aia] == ["http://127.0.0.1:8081/"]
    plain = inter.issue_client("carol-plain", now=NOW)
    assert plain.certificate.crl_urls == [] and plain.certificate.ocsp_urls == []


@pytest.mark.parametrize("url", ["file:///etc/passwd", "https://x/y.crl", "http://a/x.crl,URI:file:///y", "http://a/"])
def test_non_http_crl_urls_are_refused(chain, url):
    _, inter = chain
    with pytest.raises(errors.InvalidArgument, match="http://"):
        inter.issue_client("dave", now=NOW, crl_url=url)
