"""A second ACME server besides pebble (issue 37): acme2certifier (PyPI; GPL, run here as a
program, not copied), its openssl CA handler signing with a `mtls pki` intermediate (conftest's server_pki), its WSGI
application under Python's wsgiref on 127.0.0.1 with TLS. Two instances: one open, one that
requires external account binding (its CSV EAB handler). Enroll, renew, EAB renew and revoke.

acme2certifier behaves differently from pebble: it wants a contact on every newAccount (so
renewal must not send newAccount again without one), its nonces and orders have their own shape,
`kid` is checked against its database, and it has its own revocation rules. Its challenge validation is turned off
(`challenge_validation_disable` with ACME2CERTIFIER_I_KNOW_THE_RISK=1): it would fetch http-01
answers from port 80 of the name, which a test may not take; pebble's tests validate challenges.

The server runs in its own virtual environment (scripts/install-deps.sh makes it at
/opt/libmtls-tests/acme2certifier; MTLS_A2C_PYTHON names another python that imports it)."""
import json
import os
import subprocess
import types

import pytest

from conftest import free_port, require_tool, run_cli, server_pki, stop, store_args, wait_port, write_secret

A2C_PYTHON = os.environ.get("MTLS_A2C_PYTHON", "/opt/libmtls-tests/acme2certifier/bin/python")
EAB_KEY = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"

RUN = r"""
import ssl, sys
from wsgiref.simple_server import make_server
import acme2certifier.share.acme2certifier_wsgi as a2c
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class Handler(a2c.get_handler_cls()):
    def get_environ(self):
        env = super().get_environ()
        env["HTTPS"] = "on"  # the URLs in the directory are https
        return env

    def log_message(self, *args):
        pass

srv = make_server("127.0.0.1", port, a2c.application, handler_class=Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"""


def config(d, ca, root, eab):
    text = f"""[DEFAULT]
debug: False

[Nonce]
nonce_check_disable: False

[CAhandler]
handler_module: acme2certifier.cahandlers.openssl_ca_handler
issuing_ca_key: {ca / "key.pem"}
issuing_ca_cert: {ca / "cert.pem"}
issuing_ca_root: {root}
ca_cert_chain_list: ["{root}"]
cert_validity_days: 30
cert_save_path: {d / "certs"}
issuing_ca_crl: {d / "crl.pem"}

[DBhandler]
handler_module: acme2certifier.dbhandlers.wsgi_handler
dbfile: {d / "a2c.db"}

[Certificate]
revocation_reason_check_disable: False

[Challenge]
challenge_validation_disable: True

[Order]
tnauthlist_support: False
"""
    if eab:
        (d / "eab.csv").write_text(f"eab_kid,eab_mac\nkid-1,{EAB_KEY}\n")
        text += f"""
[EABhandler]
eab_handler_module: acme2certifier.eabhandlers.file_handler
key_file: {d / "eab.csv"}
"""
    (d / "acme_srv.cfg").write_text(text)


@pytest.fixture(scope="module")
def a2c(tmp_path_factory):
    ok = os.access(A2C_PYTHON, os.X_OK) and subprocess.run(
        [A2C_PYTHON, "-c", "import acme2certifier.acme_srv"], capture_output=True).returncode == 0
    require_tool(ok, f"acme2certifier (a python that imports it: {A2C_PYTHON}; see scripts/install-deps.sh)")
    base = tmp_path_factory.mktemp("a2c")
    server_pki(base, "A2C Root")  # the CA signs with "Customer A"; the server presents localhost
    ca, root = base / "pki" / "ca" / "customer-a", base / "root.pem"
    (base / "run.py").write_text(RUN)
    procs, urls = [], {}
    try:
        for name, eab in (("open", False), ("eab", True)):
            d = base / name
            (d / "certs").mkdir(parents=True)
            config(d, ca, root, eab)
            port = free_port()
            env = dict(os.environ, ACME_SRV_CONFIGFILE=str(d / "acme_srv.cfg"), ACME2CERTIFIER_I_KNOW_THE_RISK="1")
            p = subprocess.Popen([A2C_PYTHON, base / "run.py", str(port), base / "server-chain.pem", base / "server.key"],
                                 cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=open(d / "server.log", "w"))
            procs.append(p)
            wait_port(port, p)
            urls[name] = f"https://127.0.0.1:{port}/directory"
        yield types.SimpleNamespace(open=urls["open"], eab=urls["eab"], root=root, issuing=ca / "cert.pem", base=base)
    finally:
        stop(*procs)


@pytest.fixture
def store(tmp_path):
    return store_args(tmp_path, "a2c secret")


def enroll(a2c, directory, store, label, name, *extra):
    return run_cli("enroll", "acme", "--directory", directory, "--anchor", a2c.root, "--chain-anchor", a2c.root,
                   "--name", name, "--label", label, "--http-port", free_port(), "--listen-address", "127.0.0.1",
                   "--contact", "mailto:ops@a2c.test",
                   *store, *extra, "--json", timeout=180)


def leaf_sha(store, label):
    r = run_cli("store", "show", label, *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["leaf_sha256"]


def test_enroll_renew_and_revoke_at_acme2certifier(a2c, store):
    r = enroll(a2c, a2c.open, store, "web", "web.a2c.test")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    assert first["identifiers"] == ["web.a2c.test"] and leaf_sha(store, "web") == first["leaf_sha256"]
    r = run_cli("renew", "web", "--force", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    renewed = json.loads(r.stdout)
    assert renewed["renewed"] is True and renewed["serial"] != first["serial"]
    assert leaf_sha(store, "web") == renewed["leaf_sha256"]
    r = run_cli("enroll", "revoke", "web", "--reason", "4", *store, "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["revoked"] is True
    # The CA knows it: a second revocation of the same certificate is refused.
    r = run_cli("enroll", "revoke", "web", *store, "--json", timeout=60)
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "ca_rejected", r.stdout


def test_external_account_binding_enroll_and_renew_at_acme2certifier(a2c, store, tmp_path):
    r = enroll(a2c, a2c.eab, store, "noeab", "noeab.a2c.test")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "ca_rejected", r.stdout
    write_secret(tmp_path / "eab", EAB_KEY + "\n")
    r = enroll(a2c, a2c.eab, store, "eab", "eab.a2c.test", "--eab-kid", "kid-1", "--eab-hmac-file", tmp_path / "eab")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    # Renewal needs no binding again: it uses the recorded account (RFC 8555 §7.3.1).
    r = run_cli("renew", "eab", "--force", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    renewed = json.loads(r.stdout)
    assert renewed["renewed"] is True and renewed["serial"] != first["serial"]
    r = run_cli("enroll", "revoke", "eab", *store, "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
