"""Private PKIs and PKCS#12 files made by other producers than the openssl command line, each run
at test time: Easy-RSA 3 (the tool OpenVPN documents), CFSSL, GnuTLS certtool, NSS pk12util, and
Go's crypto/x509 as Go-based CAs use it.
Their chains are trusted by name and by address as RFC 5280 / RFC 6125 and the webpki rules decide,
their key and PKCS#12 files load as they come, and a client identity from each connects with
mutual TLS to `openssl s_server` serving that producer's server certificate.

Easy-RSA's stock `x509-types/ca` makes a root that the rules refuse (a non-critical basicConstraints
and an authority key identifier carrying the issuer's name and serial): the refusal must name both
reasons with the change that fixes them, and the PKI made after that change must work end to end."""
import hashlib
import json
import os
import shutil
import ssl
import subprocess

import pytest

from conftest import free_port, require_tool, run_cli, sh, write_secret
from test_tls import Peer, peers  # noqa: F401 (fixture)

NAME = "api.customer-a.internal"
EASYRSA = "/usr/share/easy-rsa/easyrsa"
PASSWORD = "Customer A p12 passphrase"


class Made:
    """What a producer made, as files in `d`: the root, the server's leaf, intermediates (None when
    the root issued it) and key, and the client's chain (leaf first), its common name and its identity
    (a PKCS#12 file, or the chain with the producer's PEM key when the producer makes no PKCS#12)."""

    def __init__(self, d, root, server, server_ints, server_key, client_chain, client_cn, client_key=None,
                 client_p12=None):
        self.d, self.root, self.server, self.server_key = d, d / root, d / server, d / server_key
        self.server_ints = d / server_ints if server_ints else None
        self.server_chain = d / "server-chain.pem"
        self.server_chain.write_text(self.server.read_text() + (self.server_ints.read_text() if server_ints else ""))
        self.client_chain, self.client_cn = d / client_chain, client_cn
        self.client_key = d / client_key if client_key else None
        self.client_p12 = d / client_p12 if client_p12 else None
        write_secret((d / "password.txt"), PASSWORD + "\n")

    def identity_args(self):
        if self.client_p12:
            return ["--identity", self.client_p12, "--password-file", self.d / "password.txt"]
        return ["--cert", self.client_chain, "--key", self.client_key]


def easy_rsa(d, fixed_ca):
    """An Easy-RSA 3 PKI as its documentation makes one (build-ca, build-server-full with the
    server's names, build-client-full, export-p12), with the stock CA extensions or the two-line fix."""
    require_tool(os.access(EASYRSA, os.X_OK), f"Easy-RSA ({EASYRSA})")
    env = dict(os.environ, EASYRSA_BATCH="1", EASYRSA_PKI=str(d / "pki"))

    def easyrsa(*args, **more_env):
        subprocess.run([EASYRSA, *args], cwd=d, env=dict(env, **more_env), check=True, capture_output=True)

    easyrsa("init-pki")
    shutil.copytree("/usr/share/easy-rsa/x509-types", d / "pki" / "x509-types")
    if fixed_ca:
        ca = d / "pki" / "x509-types" / "ca"
        text = ca.read_text()
        for old, new in (("basicConstraints = CA:TRUE", "basicConstraints = critical, CA:TRUE"),
                         ("authorityKeyIdentifier = keyid:always,issuer:always", "authorityKeyIdentifier = keyid:always")):
            assert f"\n{old}\n" in text, f"Easy-RSA's x509-types/ca changed: no line {old!r}"
            text = text.replace(f"\n{old}\n", f"\n{new}\n")
        ca.write_text(text)
    easyrsa("build-ca", "nopass", EASYRSA_REQ_CN="Customer A Root")
    easyrsa(f"--subject-alt-name=DNS:{NAME},IP:127.0.0.1", "build-server-full", "server", "nopass")
    easyrsa("build-client-full", "alice", "nopass")
    easyrsa(f"--passout=pass:{PASSWORD}", "export-p12", "alice")
    pki = d / "pki"
    for src, dst in ((pki / "ca.crt", "root.pem"), (pki / "issued" / "server.crt", "server.pem"),
                     (pki / "private" / "server.key", "server.key"), (pki / "issued" / "alice.crt", "client-chain.pem"),
                     (pki / "private" / "alice.p12", "client.p12")):
        shutil.copy(src, d / dst)
    return Made(d, "root.pem", "server.pem", None, "server.key", "client-chain.pem", "alice", client_p12="client.p12")


def cfssl(d):
    """A CFSSL root, a path-length-0 intermediate from a signing profile, an ECDSA server for a name
    and an address, and an RSA client whose common name is a display name (CFSSL writes SEC1 keys)."""
    require_tool(shutil.which("cfssl") and shutil.which("cfssljson"), "CFSSL (cfssl, cfssljson)")
    (d / "config.json").write_text(json.dumps({"signing": {"default": {"expiry": "8760h"}, "profiles": {
        "intermediate": {"usages": ["cert sign", "crl sign"], "expiry": "43800h",
                         "ca_constraint": {"is_ca": True, "max_path_len": 0, "max_path_len_zero": True}},
        "server": {"usages": ["signing", "digital signature", "key encipherment", "server auth"], "expiry": "8760h"},
        "client": {"usages": ["signing", "digital signature", "key encipherment", "client auth"], "expiry": "8760h"}}}}))
    csrs = {"root": {"CN": "Customer A Root", "key": {"algo": "ecdsa", "size": 256}, "names": [{"O": "Customer A"}]},
            "int": {"CN": "Customer A Intermediate", "key": {"algo": "ecdsa", "size": 384}},
            "server": {"CN": NAME, "hosts": [NAME, "127.0.0.1"], "key": {"algo": "ecdsa", "size": 256}},
            "client": {"CN": "Alice Example (billing)", "key": {"algo": "rsa", "size": 2048}}}
    for name, csr in csrs.items():
        (d / f"{name}-csr.json").write_text(json.dumps(csr))
    sh("cfssl gencert -initca root-csr.json | cfssljson -bare root", d)
    sh("cfssl gencert -initca int-csr.json | cfssljson -bare int", d)
    sh("cfssl sign -ca root.pem -ca-key root-key.pem -config config.json -profile intermediate int.csr"
       " | cfssljson -bare int", d)
    for name in ("server", "client"):
        sh(f"cfssl gencert -ca int.pem -ca-key int-key.pem -config config.json -profile {name} {name}-csr.json"
           f" | cfssljson -bare {name}", d)
    (d / "client-chain.pem").write_text((d / "client.pem").read_text() + (d / "int.pem").read_text())
    return Made(d, "root.pem", "server.pem", "int.pem", "server-key.pem", "client-chain.pem", "Alice Example (billing)",
                client_key="client-key.pem")


def certtool(d, nss=False):
    """A GnuTLS certtool PKI from templates (ECDSA root and intermediate, RSA server, Ed25519 client
    with a mail address), the client as certtool's PKCS#12 — or as NSS's pk12util writes it after
    importing that file into an NSS database."""
    require_tool(shutil.which("certtool"), "GnuTLS certtool (gnutls-bin)")
    templates = {
        "root": 'cn = "Customer A Root"\nca\ncert_signing_key\ncrl_signing_key\nexpiration_days = 3650\n',
        "int": 'cn = "Customer A Intermediate"\nca\npath_len = 0\ncert_signing_key\ncrl_signing_key\n'
               'expiration_days = 1825\n',
        "server": f'cn = "API server"\ndns_name = "{NAME}"\nip_address = "127.0.0.1"\ntls_www_server\n'
                  'signing_key\nencryption_key\nexpiration_days = 365\n',
        "client": 'cn = "Alice"\nemail = "alice@customer-a.example"\ntls_www_client\nsigning_key\n'
                  'expiration_days = 365\n'}
    # NSS (3.87) cannot import an Ed25519 key from PKCS#12: its client is ECDSA.
    keys = {"root": "ecdsa", "int": "ecdsa", "server": "rsa --bits 2048", "client": "ecdsa" if nss else "ed25519"}
    for name, template in templates.items():
        (d / f"{name}.tmpl").write_text(template)
        sh(f"certtool --generate-privkey --key-type {keys[name]} --outfile {name}.key", d)
    sh("certtool --generate-self-signed --load-privkey root.key --template root.tmpl --outfile root.pem", d)
    for name, issuer in (("int", "root"), ("server", "int"), ("client", "int")):
        sh(f"certtool --generate-certificate --load-privkey {name}.key --load-ca-certificate {issuer}.pem "
           f"--load-ca-privkey {issuer}.key --template {name}.tmpl --outfile {name}.pem", d)
    (d / "client-chain.pem").write_text((d / "client.pem").read_text() + (d / "int.pem").read_text())
    sh(f"certtool --to-p12 --load-privkey client.key --load-certificate client-chain.pem --p12-name alice "
       f"--password '{PASSWORD}' --outder --outfile client.p12", d)
    p12 = "client.p12"
    if nss:
        require_tool(shutil.which("pk12util") and shutil.which("certutil"), "NSS tools (libnss3-tools)")
        (d / "nssdb").mkdir()
        sh("certutil -N -d sql:nssdb --empty-password", d)
        sh(f"pk12util -i client.p12 -d sql:nssdb -W '{PASSWORD}'", d)
        sh(f"pk12util -o client-nss.p12 -n alice -d sql:nssdb -W '{PASSWORD}'", d)
        p12 = "client-nss.p12"
    return Made(d, "root.pem", "server.pem", "int.pem", "server.key", "client-chain.pem", "Alice", client_p12=p12)


def go_x509(d):
    """Go's crypto/x509 as Go-based CAs (Vault, smallstep, cert-manager) use it
    (Tests/fixtures/go/gopki.go): subject key identifiers on CA certificates only, PKCS#8 keys."""
    require_tool(shutil.which("go"), "Go (golang-go)")
    env = dict(os.environ, GOCACHE=str(d / "cache"), GOPATH=str(d / "gopath"), GO111MODULE="off")
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "go", "gopki.go")
    subprocess.run(["go", "run", source, str(d), NAME], check=True, capture_output=True, env=env)
    return Made(d, "root.pem", "server.pem", "server-ints.pem", "server.key", "client-chain.pem", "Alice Example (billing)",
                client_key="client.key")


PRODUCERS = {"easy-rsa": lambda d: easy_rsa(d, fixed_ca=True), "cfssl": cfssl, "certtool": certtool,
             "nss-pk12util": lambda d: certtool(d, nss=True), "go-x509": go_x509}


_MADE = {}


def made_by(producer, tmp_path_factory):
    """Each producer runs once per session, for every test that reads what it made."""
    if producer not in _MADE:
        _MADE[producer] = PRODUCERS[producer](tmp_path_factory.mktemp(producer))
    return _MADE[producer]


@pytest.fixture(params=sorted(PRODUCERS))
def made(request, tmp_path_factory):
    return made_by(request.param, tmp_path_factory)


def verify(made, chain, *args):
    r = run_cli("verify", chain, "--anchor", made.root, "--anchors-only", "--json", *args)
    out = json.loads(r.stdout)
    assert (r.returncode == 0) == out["trusted"], r
    return out


def test_chains_are_trusted_by_name_by_address_and_as_clients(made):
    out = verify(made, made.server_chain, "--host", NAME)
    assert out["trusted"] and out["reasons"] == [], out
    assert verify(made, made.server_chain, "--host", "127.0.0.1")["trusted"]
    assert verify(made, made.server_chain, "--host", "127.0.0.1", "--verify-as", NAME)["trusted"]
    out = verify(made, made.client_chain, "--purpose", "client")
    assert out["trusted"], out
    # The same chains are refused where they must be: another name, the other purpose.
    assert [r["code"] for r in verify(made, made.server_chain, "--host", "other.customer-a.internal")["reasons"]] \
        == ["name_mismatch"]
    assert not verify(made, made.client_chain, "--host", NAME)["trusted"]


def test_client_identity_connects_with_mutual_tls(made, peers):  # noqa: F811
    port = free_port()
    chain = ["-cert_chain", made.server_ints] if made.server_ints else []
    server = Peer(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-quiet", "-www", "-cert", made.server,
                   *chain, "-key", made.server_key, "-Verify", "1", "-CAfile", made.root, "-verify_return_error"], port)
    peers.append(server)
    r = run_cli("connect", f"127.0.0.1:{port}", "--json", "--timeout", "5", "--verify-as", NAME,
                "--anchor", made.root, "--anchors-only", *made.identity_args(), "--send", r"GET / HTTP/1.0\r\n\r\n")
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert out["connected"] and out["evaluation"]["trusted"], out
    pem = made.server.read_text()  # Easy-RSA writes the certificate's text form before the PEM
    leaf = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem[pem.index("-----BEGIN CERTIFICATE-----"):])).hexdigest()
    assert out["peer_chain"][0] == leaf, out
    # s_server -www answers with the client certificate it verified.
    response = out["response"]
    assert "Client certificate" in response and f"Subject: CN={made.client_cn}\n" in response, response[-2000:]


@pytest.mark.parametrize("producer", sorted(p for p in PRODUCERS if p not in ("cfssl", "go-x509")))
def test_pkcs12_files_read_as_written(producer, tmp_path_factory, tmp_path):
    made = made_by(producer, tmp_path_factory)
    r = run_cli("p12", "inspect", made.client_p12, "--password-file", made.d / "password.txt", "--json")
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert [i["leaf_subject_cn"] for i in out["identities"]] == [made.client_cn], out
    # Every certificate of the client's chain is in the file (Easy-RSA adds its root too).
    pems = made.client_chain.read_text().count("-----BEGIN CERTIFICATE-----")
    assert out["identities"][0]["chain_count"] >= pems - 1, out
    write_secret((tmp_path / "wrong.txt"), "not the password\n")
    r = run_cli("p12", "inspect", made.client_p12, "--password-file", tmp_path / "wrong.txt", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "bad_password", r


def test_easy_rsa_stock_root_is_refused_naming_both_changes(tmp_path):
    made = easy_rsa(tmp_path, fixed_ca=False)
    out = verify(made, made.server_chain, "--host", NAME)
    reasons = {r["code"]: r["message"] for r in out["reasons"]}
    assert set(reasons) == {"basic_constraints_invalid", "aki_invalid"}, out
    assert "basicConstraints=critical,CA:TRUE" in reasons["basic_constraints_invalid"]
    assert "keyid:always" in reasons["aki_invalid"], reasons
