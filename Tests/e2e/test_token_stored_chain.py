"""A token identity kept in the store (`mtls store add-token URI --cert leaf-and-chain.pem`)
presents the stored chain after its leaf, and uses the stored certificate when the token holds
only the key. The server (`openssl s_server -Verify 1`) trusts only the root, so it accepts the
client only when the intermediate comes with the leaf; the key was generated on a SoftHSM2 token,
so the handshake also proves the token signed."""
import json
import shutil
import subprocess

import pytest

from conftest import TEST_PKI, run_cli, SOFTHSM_MODULE as MODULE, needs_softhsm, softhsm_conf, write_secret
from test_token_connect import SCRIPT, SServer

pytestmark = needs_softhsm


def sh(cmd, cwd):
    subprocess.run(cmd, shell=True, cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def hsm(tmp_path_factory):
    d = tmp_path_factory.mktemp("hsm-chain")
    subprocess.run([str(SCRIPT), str(d)], check=True)
    with softhsm_conf(d / "softhsm2.conf"):
        # a key made on the token, no certificate object beside it
        sh(f"pkcs11-tool --module {MODULE} --token-label mtls-spare --login --pin 1234 --keypairgen "
           "--key-type EC:prime256v1 --id 04 --label chained", d)
        sh(f"GNUTLS_PIN=1234 p11tool --provider {MODULE} --login --export-pubkey "
           "'pkcs11:token=mtls-spare;id=%04;type=public' --outfile chained.pub.pem", d)
        # root -> intermediate -> leaf for the token's public key
        subprocess.run([TEST_PKI, "--chain", str(d / "ca")], check=True, capture_output=True)
        shutil.copy(d / "ca" / "root.pem", d / "root.pem")
        shutil.copy(d / "ca" / "int.pem", d / "int.pem")
        sh("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ph.key -out ph.csr -subj /CN=ph", d)
        sh("openssl x509 -req -in ph.csr -CA int.pem -CAkey ca/int.key -CAcreateserial -force_pubkey chained.pub.pem "
           "-subj '/CN=token chained' -extfile client.ext -days 30 -out leaf.pem", d)
        (d / "leaf-and-chain.pem").write_text((d / "leaf.pem").read_text() + (d / "int.pem").read_text())
        # the server: the token test's server certificate, trusting only the new root for clients
        srv = d / "srv"
        srv.mkdir()
        shutil.copy(d / "server.pem", srv / "server.pem")
        shutil.copy(d / "server.key", srv / "server.key")
        shutil.copy(d / "root.pem", srv / "ca.pem")
        yield d


def store_args(tmp_path):
    write_secret((tmp_path / "secret"), "store secret\n")
    return ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]


def connect(hsm, server, label, store):
    return run_cli("connect", f"127.0.0.1:{server.port}", "--identity", label, *store, "--pin-file", hsm / "pin",
                   "--anchor", hsm / "ca.pem", "--anchors-only", "--send", "hello over a stored chain\\n",
                   "--timeout", "5", "--json")


def test_stored_certificate_and_chain_when_the_token_has_only_the_key(hsm, tmp_path):
    store = store_args(tmp_path)
    r = run_cli("store", *store, "add-token", "pkcs11:token=mtls-spare;id=%04", "--label", "tok",
                "--cert", hsm / "leaf-and-chain.pem")
    assert r.returncode == 0, r.stderr
    show = json.loads(run_cli("store", *store, "show", "tok", "--json").stdout)
    assert len(show["chain"]) >= 1, show
    server = SServer(hsm / "srv")
    r = connect(hsm, server, "tok", store)
    log = server.finish()
    assert r.returncode == 0, r.stdout + r.stderr + log
    out = json.loads(r.stdout)
    assert out["connected"], out
    assert "subject=CN = token chained" in log and "hello over a stored chain" in log, log


def test_without_the_stored_intermediate_the_server_refuses(hsm, tmp_path):
    """The control: the same key and leaf stored without the intermediate is refused by the
    server, so the test above passes because the stored chain was sent."""
    store = store_args(tmp_path)
    r = run_cli("store", *store, "add-token", "pkcs11:token=mtls-spare;id=%04", "--label", "bare",
                "--cert", hsm / "leaf.pem")
    assert r.returncode == 0, r.stderr
    server = SServer(hsm / "srv")
    r = connect(hsm, server, "bare", store)
    server.finish()
    out = json.loads(r.stdout)
    assert not out["connected"] and out["side"] == "server", out


def test_token_certificate_with_the_stored_chain(hsm, tmp_path):
    with softhsm_conf(hsm / "softhsm2.conf"):
        sh("openssl x509 -in leaf.pem -outform DER -out leaf.der", hsm)
        sh(f"pkcs11-tool --module {MODULE} --token-label mtls-spare --login --pin 1234 --write-object leaf.der "
           "--type cert --id 04 --label chained", hsm)
        try:
            store = store_args(tmp_path)
            r = run_cli("store", *store, "add-token", "pkcs11:token=mtls-spare;id=%04", "--label", "tok2",
                        "--cert", hsm / "leaf-and-chain.pem")
            assert r.returncode == 0, r.stderr
            server = SServer(hsm / "srv")
            r = connect(hsm, server, "tok2", store)
            log = server.finish()
            assert r.returncode == 0, r.stdout + r.stderr + log
            assert json.loads(r.stdout)["connected"]
        finally:
            sh(f"pkcs11-tool --module {MODULE} --token-label mtls-spare --login --pin 1234 --delete-object "
               "--type cert --id 04", hsm)
