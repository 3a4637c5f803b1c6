"""`mtls verify` on certificates shaped the way operators make them by hand with the openssl
command line (`req -x509`, `x509 -req -extfile`) and the way other private CAs shape them (SPIFFE,
Active Directory Certificate Services, S/MIME-style client certificates, name-constrained
per-customer intermediates). Each shape is made at run time and must be trusted or refused as
RFC 5280 / RFC 6125 and the webpki rules decide; a refusal names its reason code."""
import json

import pytest

from conftest import sh

HOST = "server.internal"


def key(d, name, alg="ec"):
    args = {"ec": "-newkey ec -pkeyopt ec_paramgen_curve:P-256", "p384": "-newkey ec -pkeyopt ec_paramgen_curve:P-384",
            "p521": "-newkey ec -pkeyopt ec_paramgen_curve:P-521", "rsa2048": "-newkey rsa:2048",
            "rsa3072": "-newkey rsa:3072", "rsa4096": "-newkey rsa:4096", "ed25519": "-newkey ed25519",
            "ed448": "-newkey ed448", "rsapss": "-newkey rsa-pss -pkeyopt rsa_keygen_bits:2048"}[alg]
    return f"{args} -nodes -keyout {name}.key"


def self_signed(d, name, extra, alg="ec", subj="/CN=server"):
    """`openssl req -x509` as a user runs it: the config's v3_ca (CA:TRUE) plus what -addext adds."""
    sh(f"openssl req -x509 {key(d, name, alg)} -out {name}.pem -subj '{subj}' -days 30 {extra}", d)
    return d / f"{name}.pem"


def issue(d, name, issuer, subj, ext, chain=()):
    """A CSR signed with `openssl x509 -req`, with exactly the extensions in `ext` (none: a v1
    certificate, as `x509 -req` makes without -extfile); writes NAME.chain = leaf + `chain`."""
    sh(f"openssl req -new {key(d, name)} -out {name}.csr -subj '{subj}'", d)
    extfile = ""
    if ext is not None:
        (d / f"{name}.ext").write_text("\n".join(line.strip() for line in ext.strip().splitlines()) + "\n")
        extfile = f"-extfile {name}.ext"
    sh(f"openssl x509 -req -in {name}.csr -CA {issuer}.pem -CAkey {issuer}.key -out {name}.pem -days 30 {extfile}", d)
    (d / f"{name}.chain").write_text("".join((d / f"{c}.pem").read_text() for c in (name, *chain)))
    return d / f"{name}.chain"


CA_EXT = """
    basicConstraints = critical, CA:TRUE{pathlen}
    keyUsage = critical, keyCertSign, cRLSign
    subjectKeyIdentifier = hash
    authorityKeyIdentifier = keyid
"""


def ca_ext(more="", pathlen=""):
    return CA_EXT.format(pathlen=pathlen) + more


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("shapes")
    self_signed(d, "root", "", subj="/O=Example/CN=Example Private Root")
    issue(d, "ica", "root", "/CN=Customer A Intermediate", ca_ext(pathlen=", pathlen:0"))
    return d


def verify(cli, chain, anchor, *args):
    r = cli("verify", chain, "--anchor", anchor, "--anchors-only", "--json", *args)
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert out["trusted"] == (r.returncode == 0)
    return out


def codes(out):
    return {x["code"] for x in out["reasons"]}


# -- A self-signed certificate pinned directly: what `openssl req -x509` makes (CA:TRUE, no EKU).
@pytest.mark.parametrize("alg", ["ec", "p384", "p521", "rsa2048", "rsa3072", "rsa4096", "ed25519", "ed448", "rsapss"])
def test_req_x509_self_signed_pinned_directly_with_each_key_type(cli, tmp_path, alg):
    cert = self_signed(tmp_path, alg, f"-addext subjectAltName=DNS:{HOST}", alg)
    for purpose in ("server", "client"):
        out = verify(cli, cert, cert, "--host", HOST, "--purpose", purpose)
        assert out["trusted"], out


@pytest.mark.parametrize("extra", [
    "-sha384", "-sha512", "-set_serial 1",
    "-addext basicConstraints=critical,CA:FALSE",
    "-addext basicConstraints=CA:FALSE -addext keyUsage=digitalSignature -addext extendedKeyUsage=serverAuth,clientAuth",
    "-sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:32",
])
def test_req_x509_variants_pinned_directly(cli, tmp_path, extra):
    alg = "rsa2048" if "rsa_padding" in extra else "ec"
    cert = self_signed(tmp_path, "c", f"-addext subjectAltName=DNS:{HOST} {extra}", alg)
    assert verify(cli, cert, cert, "--host", HOST)["trusted"]


def test_req_x509_without_san_is_refused_because_the_cn_is_never_a_name(cli, tmp_path):
    cert = self_signed(tmp_path, "c", "", subj=f"/CN={HOST}")
    out = verify(cli, cert, cert, "--host", HOST)
    assert not out["trusted"] and codes(out) & {"name_mismatch", "san_missing"}
    assert verify(cli, cert, cert)["trusted"]  # without a host, no name is checked


# -- root -> per-customer intermediate -> leaf, signed with `openssl x509 -req -extfile`.
TRUSTED_LEAVES = {
    "san-only (no EKU, no keyUsage)": ("/CN=api", f"subjectAltName = DNS:{HOST}"),
    "CN is a display name": ("/O=Customer A/CN=Customer A API server", f"subjectAltName = DNS:{HOST}"),
    "CN is an unrelated host": ("/CN=legacy-box", f"subjectAltName = DNS:{HOST}"),
    "no subjectKeyIdentifier": ("/CN=api", f"subjectAltName = DNS:{HOST}\nsubjectKeyIdentifier = none"),
    "empty subject, critical SAN": ("/", f"subjectAltName = critical, DNS:{HOST}"),
    "classic usr_cert": ("/CN=api", f"""
        basicConstraints = CA:FALSE
        nsCertType = server, client
        nsComment = "OpenSSL Generated Certificate"
        subjectKeyIdentifier = hash
        authorityKeyIdentifier = keyid, issuer
        subjectAltName = DNS:{HOST}"""),
    "AD CS style extensions": ("/CN=api", f"""
        keyUsage = critical, digitalSignature, keyEncipherment
        extendedKeyUsage = serverAuth, clientAuth
        subjectAltName = DNS:{HOST}
        crlDistributionPoints = URI:http://pki.example.internal/ica.crl
        authorityInfoAccess = caIssuers;URI:http://pki.example.internal/ica.crt, OCSP;URI:http://ocsp.example.internal
        certificatePolicies = 1.3.6.1.4.1.311.21.8.1.2.3
        1.3.6.1.4.1.311.21.7 = ASN1:SEQUENCE:template
        [template]
        oid = OID:1.3.6.1.4.1.311.21.8.1.2
        major = INT:100
        minor = INT:0"""),
    "many key usages and purposes": ("/CN=api", f"""
        keyUsage = critical, digitalSignature, keyEncipherment, dataEncipherment, keyAgreement
        extendedKeyUsage = serverAuth, clientAuth, codeSigning
        subjectAltName = DNS:{HOST}"""),
    "upper-case SAN": ("/CN=api", "subjectAltName = DNS:SERVER.Internal"),
}


@pytest.mark.parametrize("shape", sorted(TRUSTED_LEAVES))
def test_hand_made_leaves_under_an_intermediate_are_trusted(cli, pki, shape):
    subj, ext = TRUSTED_LEAVES[shape]
    name = "leaf-" + "".join(c for c in shape if c.isalnum())
    chain = issue(pki, name, "ica", subj, ext, chain=("ica",))
    out = verify(cli, chain, pki / "root.pem", "--host", HOST)
    assert out["trusted"] and len(out["chain"]) == 3, out
    assert verify(cli, chain, pki / "root.pem", "--host", f"{HOST.upper()}.:8443")["trusted"]


def test_intermediate_shapes(cli, pki):
    root = pki / "root.pem"
    # An intermediate limited by EKU (as CA/B asks of subordinate CAs), AKI with issuer and serial,
    # no keyUsage at all: all trusted.
    for name, ext in [("ica-eku", ca_ext("extendedKeyUsage = serverAuth, clientAuth")),
                      ("ica-akiiss", "basicConstraints = critical, CA:TRUE\nsubjectKeyIdentifier = hash\n"
                                     "authorityKeyIdentifier = keyid:always, issuer:always"),
                      ("ica-noku", "basicConstraints = critical, CA:TRUE")]:
        issue(pki, name, "root", f"/CN={name}", ext)
        chain = issue(pki, f"leaf-{name}", name, "/CN=api", f"subjectAltName = DNS:{HOST}", chain=(name,))
        assert verify(cli, chain, root, "--host", HOST)["trusted"], name
    # An intermediate for client certificates only: its leaves are good clients, not servers.
    issue(pki, "ica-client", "root", "/CN=clients", ca_ext("extendedKeyUsage = clientAuth"))
    chain = issue(pki, "leaf-client", "ica-client", "/CN=device 7", f"subjectAltName = DNS:{HOST}", chain=("ica-client",))
    assert verify(cli, chain, root, "--purpose", "client")["trusted"]
    out = verify(cli, chain, root, "--host", HOST)
    assert not out["trusted"] and "wrong_purpose" in codes(out)


def test_shapes_the_standards_refuse_name_their_reason(cli, pki):
    root = pki / "root.pem"
    # `openssl x509 -req` without -extfile: a version 1 certificate.
    chain = issue(pki, "leaf-v1", "ica", f"/CN={HOST}", None, chain=("ica",))
    out = verify(cli, chain, root, "--host", HOST)
    assert not out["trusted"] and "version_unsupported" in codes(out)
    assert any("-extfile" in x["message"] for x in out["reasons"])
    # A CA whose basicConstraints is not critical (RFC 5280 4.2.1.9).
    issue(pki, "ica-bcnc", "root", "/CN=old style CA", "basicConstraints = CA:TRUE\nkeyUsage = keyCertSign, cRLSign")
    chain = issue(pki, "leaf-bcnc", "ica-bcnc", "/CN=api", f"subjectAltName = DNS:{HOST}", chain=("ica-bcnc",))
    out = verify(cli, chain, root, "--host", HOST)
    assert not out["trusted"] and "basic_constraints_invalid" in codes(out)
    assert any(x["cert_index"] == 1 and "critical" in x["message"] for x in out["reasons"])
    # An intermediate without key identifiers: its leaf has no AKI either (RFC 5280 4.2.1.1).
    issue(pki, "ica-noid", "root", "/CN=no ids", "basicConstraints = critical, CA:TRUE\n"
          "subjectKeyIdentifier = none\nauthorityKeyIdentifier = none")
    chain = issue(pki, "leaf-noid", "ica-noid", "/CN=api", f"subjectAltName = DNS:{HOST}", chain=("ica-noid",))
    out = verify(cli, chain, root, "--host", HOST)
    assert not out["trusted"] and "aki_missing" in codes(out)
    # A leaf with anyExtendedKeyUsage only, for a server (CA/B 7.1.2.7.10; OpenSSL refuses it too).
    chain = issue(pki, "leaf-anyeku", "ica", "/CN=api", f"subjectAltName = DNS:{HOST}\n"
                  "extendedKeyUsage = anyExtendedKeyUsage", chain=("ica",))
    out = verify(cli, chain, root, "--host", HOST)
    assert not out["trusted"] and "wrong_purpose" in codes(out)


def test_wildcards_addresses_and_host_spellings(cli, pki):
    root = pki / "root.pem"
    chain = issue(pki, "leaf-wild", "ica", "/CN=wild", "subjectAltName = DNS:*.customer-a.internal", chain=("ica",))
    assert verify(cli, chain, root, "--host", "api.customer-a.internal")["trusted"]
    for host in ("a.b.customer-a.internal", "customer-a.internal"):
        out = verify(cli, chain, root, "--host", host)
        assert not out["trusted"] and "name_mismatch" in codes(out), host
    chain = issue(pki, "leaf-ip", "ica", "/CN=10.0.0.5", "subjectAltName = IP:10.0.0.5, IP:::1", chain=("ica",))
    for host in ("10.0.0.5", "10.0.0.5:8443", "::1", "[::1]:8443"):
        assert verify(cli, chain, root, "--host", host)["trusted"], host
    out = verify(cli, chain, root, "--host", "10.0.0.6")
    assert not out["trusted"] and "name_mismatch" in codes(out)


def test_client_certificates_of_other_kinds(cli, pki):
    root = pki / "root.pem"
    spiffe = issue(pki, "leaf-spiffe", "ica", "/O=SPIRE", """
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature, keyEncipherment, keyAgreement
        extendedKeyUsage = serverAuth, clientAuth
        subjectAltName = URI:spiffe://example.internal/ns/prod/sa/api""", chain=("ica",))
    assert verify(cli, spiffe, root, "--purpose", "client")["trusted"]
    person = issue(pki, "leaf-person", "ica", "/CN=Zoe Person/emailAddress=zoe@example.internal", """
        keyUsage = critical, digitalSignature
        extendedKeyUsage = clientAuth, emailProtection
        subjectAltName = email:zoe@example.internal""", chain=("ica",))
    assert verify(cli, person, root, "--purpose", "client")["trusted"]
    out = verify(cli, person, root, "--purpose", "server")
    assert not out["trusted"] and "wrong_purpose" in codes(out)


def test_name_constrained_customer_intermediates(cli, pki):
    root = pki / "root.pem"
    issue(pki, "ica-nc", "root", "/CN=Customer A (constrained)", ca_ext(
          "nameConstraints = critical, permitted;DNS:customer-a.internal, permitted;IP:10.0.0.0/255.0.0.0, "
          "permitted;email:customer-a.internal, permitted;dirName:dn\n[dn]\nO = Customer A"))
    ok = issue(pki, "leaf-nc", "ica-nc", "/O=Customer A/CN=Customer A API",
               "subjectAltName = DNS:api.customer-a.internal, IP:10.0.0.5", chain=("ica-nc",))
    # The seed scenario: reached by address, validated as the name.
    assert verify(cli, ok, root, "--host", "10.0.0.5:8443", "--verify-as", "api.customer-a.internal")["trusted"]
    assert verify(cli, ok, root, "--host", "10.0.0.5")["trusted"]
    for name, subj, ext in [("nc-dns", "/O=Customer A/CN=x", "subjectAltName = DNS:api.customer-b.internal"),
                            ("nc-ip", "/O=Customer A/CN=x", "subjectAltName = IP:192.168.1.5"),
                            ("nc-dn", "/O=Customer B/CN=x", "subjectAltName = DNS:api.customer-a.internal")]:
        chain = issue(pki, name, "ica-nc", subj, ext, chain=("ica-nc",))
        out = verify(cli, chain, root, "--purpose", "client")
        assert not out["trusted"] and "name_constraint_violation" in codes(out), name
    # OpenSSL's "subdomains only" spelling is not RFC 5280's: refused, and the message says how to write it.
    issue(pki, "ica-dot", "root", "/CN=dot", ca_ext("nameConstraints = critical, permitted;DNS:.customer-a.internal"))
    chain = issue(pki, "leaf-dot", "ica-dot", "/CN=x", "subjectAltName = DNS:api.customer-a.internal", chain=("ica-dot",))
    out = verify(cli, chain, root, "--host", "api.customer-a.internal")
    assert not out["trusted"] and "name_constraints_invalid" in codes(out)
    assert any("leading period" in x["message"] and x["cert_index"] == 1 for x in out["reasons"])
