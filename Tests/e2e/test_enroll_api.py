"""Enrollment from C and Python (issue 27): mtls_enroll_acme/_est/_pki and mtls.enroll_acme/
enroll_est/enroll_pki against the real certificate authorities of test_enroll.py and test_est.py
— pebble (here one that requires external account binding, its 5 % of nonces rejected), the
nginx + fcgiwrap + openssl EST endpoint, and an `mtls pki` directory — each enrolled identity in
the store and renewed with mtls_renew / mtls.renew. Bad input each with its stable error."""
import json
import os
import ssl
import subprocess
import urllib.request

import pytest

import mtls
from conftest import free_port, run_cli, write_secret
from pebble_server import Pebble  # Tests/support: the one pebble harness
from test_est import est  # noqa: F401  (the EST endpoint fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = os.environ.get("MTLS_PREFIX")
EAB_KID = "kid-api"
EAB_KEY = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"
WRONG_KEY = "b10lLJs8l1GPIzsLP0s6pMt8O0XVGnfTaCeROxQM0BIt2XrJMDHJZBM5NuQmQJQH"


@pytest.fixture(scope="module")
def pebble(tmp_path_factory):
    p = Pebble(tmp_path_factory.mktemp("pebble-api"), eab_keys={EAB_KID: EAB_KEY})
    yield p
    p.stop()


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki"
    assert run_cli("pki", "init", "--dir", d, "--name", "API Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", d, "--name", "API CA").returncode == 0
    return d


@pytest.fixture
def store(tmp_path):
    write_secret(tmp_path / "secret", "api secret\n")
    with mtls.Store(tmp_path / "store.db", secret_file=tmp_path / "secret", create=True) as st:
        yield st


def test_c_enroll_functions_against_pebble_and_the_local_ca(pebble, pki, tmp_path):
    """Tests/c/test_enroll_ca.c, compiled against the installed header, given the real CAs."""
    assert PREFIX, "MTLS_PREFIX (the installed prefix) is not set: run the tests through make test-e2e"
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(PREFIX, "lib", "pkgconfig"))
    env.pop("LD_LIBRARY_PATH", None)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls"], capture_output=True, text=True, env=env,
                           check=True).stdout.split()
    exe = tmp_path / "test_enroll_ca"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    os.path.join(ROOT, "Tests", "c", "test_enroll_ca.c"), *flags], check=True)
    r = subprocess.run([str(exe), pebble.directory, str(pebble.https_root), str(pebble.issuing_ca),
                        str(pebble.http_port), EAB_KID, EAB_KEY, str(pki), "API CA"],
                       capture_output=True, text=True, timeout=300, env=dict(env, MTLS_TEST_TMP=str(tmp_path)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed, 0 failed" in r.stdout


def _acme(pebble, store, label, names, **kw):
    kw.setdefault("http_port", pebble.http_port)
    return mtls.enroll_acme(store, label, pebble.directory, names, listen_address="127.0.0.1",
                            anchors=[mtls.Certificate.load(str(pebble.https_root))],
                            chain_anchors=[mtls.Certificate.load(str(pebble.issuing_ca))], **kw)


def test_python_enroll_acme_external_account_binding_then_renew(pebble, store):
    with pytest.raises(mtls.CARejected) as e:
        _acme(pebble, store, "py-acme", ["py-acme.test"])
    assert "externalAccountRequired" in str(e.value)
    with pytest.raises(mtls.CARejected):
        _acme(pebble, store, "py-acme", ["py-acme.test"], eab_kid=EAB_KID, eab_hmac_key=WRONG_KEY)
    with pytest.raises(mtls.NotFound):
        store.info("py-acme")
    leaf = _acme(pebble, store, "py-acme", ["py-acme.test", "127.0.0.1"], eab_kid=EAB_KID, eab_hmac_key=EAB_KEY,
                 key_type="ec-p384", tls_alpn_port=None)
    assert isinstance(leaf, mtls.Certificate)
    assert store.info("py-acme").leaf_sha256 == leaf.sha256_hex
    assert "py-acme.test" in [v for _, v in leaf.subject_alt_names]
    assert leaf.key_type[0] == "p384"
    assert mtls.renew(store, "py-acme", force=True) is True
    assert store.info("py-acme").leaf_sha256 != leaf.sha256_hex


def test_python_enroll_acme_tls_alpn01(pebble, store):
    leaf = _acme(pebble, store, "py-alpn", ["py-alpn.test"], http_port=None, tls_alpn_port=pebble.tls_port,
                 eab_kid=EAB_KID, eab_hmac_key=EAB_KEY)
    assert store.info("py-alpn").leaf_sha256 == leaf.sha256_hex


def test_python_enroll_bad_input_each_with_its_error(pebble, store, tmp_path):
    # no challenge, or two: the library's rule, through C (InvalidArgument is a ValueError)
    with pytest.raises(mtls.InvalidArgument, match="give exactly one of"):
        mtls.enroll_acme(store, "x", pebble.directory, ["x.test"])
    with pytest.raises(mtls.InvalidArgument, match="give exactly one of"):
        mtls.enroll_acme(store, "x", pebble.directory, ["x.test"], http_port=1, dns_hook="/bin/true")
    with pytest.raises(mtls.InvalidArgument):
        _acme(pebble, store, "x", ["not a name!"])
    with pytest.raises(mtls.InvalidArgument):
        _acme(pebble, store, "x", ["x.test"], eab_kid=EAB_KID)  # the MAC key missing
    with pytest.raises(mtls.InvalidArgument):
        _acme(pebble, store, "x", ["x.test"], key_type="ec-p256", token_uri="pkcs11:token=t;object=o")
    with pytest.raises(mtls.ConnectError):
        mtls.enroll_acme(store, "x", f"https://127.0.0.1:{free_port()}/dir", ["x.test"], http_port=pebble.http_port)
    with pytest.raises(mtls.Untrusted):  # the directory's TLS under anchors that are not its own
        mtls.enroll_acme(store, "x", pebble.directory, ["x.test"], http_port=pebble.http_port,
                         anchors=[mtls.Certificate.load(str(pebble.issuing_ca))], eab_kid=EAB_KID, eab_hmac_key=EAB_KEY)
    with pytest.raises(mtls.InvalidArgument):
        mtls.enroll_est(store, "x", "https://127.0.0.1:1/.well-known/est", "CN=x")  # no authentication
    with pytest.raises(mtls.InvalidArgument, match="opts->profile is server or client"):  # the library's rule
        mtls.enroll_pki(store, "x", tmp_path, "CA", "x.local", profile="intermediate")
    with pytest.raises(mtls.NotFound):
        mtls.enroll_pki(store, "x", tmp_path / "missing", "CA", "x.local")
    with pytest.raises(mtls.NotFound):
        store.info("x")


def _pebble_status(pebble, serial_hex):
    """What pebble itself says of a certificate (its management endpoint)."""
    ctx = ssl.create_default_context(cafile=str(pebble.https_root))
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{pebble.mgmt}/cert-status-by-serial/{serial_hex}", context=ctx,
                                timeout=10) as r:
        return json.loads(r.read())


def test_python_enroll_revoke_is_reported_revoked_by_pebble(pebble, store, pki):
    """mtls.enroll_revoke → C mtls_enroll_revoke → the core's Enrollment.revokeACME: pebble then
    reports the certificate revoked with the reason given; a second revocation is pebble's refusal."""
    leaf = _acme(pebble, store, "py-gone", ["py-gone.test"], eab_kid=EAB_KID, eab_hmac_key=EAB_KEY)
    assert _pebble_status(pebble, leaf.serial_hex)["Status"] == "Valid"
    with pytest.raises(ValueError):
        mtls.enroll_revoke(store, "py-gone", reason="noSuchReason")
    with pytest.raises(mtls.InvalidArgument):
        mtls.enroll_revoke(store, "py-gone", reason=7)
    with pytest.raises(mtls.NotFound):
        mtls.enroll_revoke(store, "no-such-label")
    mtls.enroll_pki(store, "py-local", pki, "API CA", "py-local.test")
    with pytest.raises(mtls.Unsupported):
        mtls.enroll_revoke(store, "py-local")
    revoked = mtls.enroll_revoke(store, "py-gone", reason="keyCompromise")
    assert revoked.sha256_hex == leaf.sha256_hex
    status = _pebble_status(pebble, leaf.serial_hex)
    assert status["Status"] == "Revoked" and status["Reason"] == 1, status
    assert store.info("py-gone").leaf_sha256 == leaf.sha256_hex  # the identity stays in the store
    with pytest.raises(mtls.CARejected):
        mtls.enroll_revoke(store, "py-gone", reason=4)


def test_python_enroll_pki_then_renew(store, pki):
    leaf = mtls.enroll_pki(store, "svc", pki, "API CA", "svc.local")
    assert leaf.subject_summary == "svc.local"
    assert store.info("svc").leaf_sha256 == leaf.sha256_hex
    client = mtls.enroll_pki(store, "alice", pki, "API CA", "alice", profile="client", key_type="rsa-2048")
    assert "clientAuth" in " ".join(client.extended_key_usages) or "1.3.6.1.5.5.7.3.2" in client.extended_key_usages
    assert "rsa" in client.key_type[0]
    assert mtls.renew(store, "svc", force=True) is True
    assert store.info("svc").leaf_sha256 != leaf.sha256_hex


def test_python_enroll_est_then_reenroll_over_mutual_tls(est, store):  # noqa: F811
    anchor = mtls.Certificate.load(str(est.root))
    with pytest.raises(mtls.CARejected):
        mtls.enroll_est(store, "dev", est.url, "CN=device-py", user="device", password="wrong", anchors=[anchor])
    leaf = mtls.enroll_est(store, "dev", est.url, "CN=device-py", user="device", password="enroll-me", anchors=[anchor])
    assert leaf.subject_summary == "device-py"
    assert store.info("dev").leaf_sha256 == leaf.sha256_hex
    assert mtls.renew(store, "dev", force=True) is True
    assert store.info("dev").leaf_sha256 != leaf.sha256_hex


def test_python_enroll_est_keep_password_for_a_server_asking_for_http_auth_on_reenrollment(est, store):  # noqa: F811
    """Issue 37: keep_password=True keeps the password (sealed with the record) and renewal sends it
    to a server that asks for HTTP authentication on /simplereenroll as well as the certificate."""
    anchor = mtls.Certificate.load(str(est.root))
    mtls.enroll_est(store, "plain", est.url_auth, "CN=device-py-2", user="device", password="enroll-me", anchors=[anchor])
    with pytest.raises(mtls.CARejected, match="keep_password"):
        mtls.renew(store, "plain", force=True)
    leaf = mtls.enroll_est(store, "kept", est.url_auth, "CN=device-py-3", user="device", password="enroll-me",
                           anchors=[anchor], keep_password=True)
    assert mtls.renew(store, "kept", force=True) is True
    assert store.info("kept").leaf_sha256 != leaf.sha256_hex
