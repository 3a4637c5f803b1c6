"""Secret files (issue 23, defect 10) through the CLI: a PIN, password, store-secret or key file
that others can write or everyone can read is refused, naming the file and the `chmod 600` that
fixes it (as OpenSSH refuses an unprotected key); a group-readable one is used with a warning on
stderr; an owner-only one silently. Files that are not secret keep any mode."""
import json

import pytest

from conftest import TEST_PKI, fresh_copy, run_cli, sh, write_secret


@pytest.fixture(scope="module")
def pki_made(tmp_path_factory):
    made = tmp_path_factory.mktemp("secretpki")
    sh(f"{TEST_PKI} --root . root 'Secret Root' && {TEST_PKI} --leaf . leaf p256 secret.client root && "
       "openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -passout pass:pw -out id.p12 && "
       "chmod 644 leaf.pem root.pem id.p12", made)
    write_secret(made / "pw.txt", "pw\n")
    write_secret(made / "secret.txt", "store passphrase\n")
    return made


@pytest.fixture
def pki(pki_made, tmp_path):
    return fresh_copy(pki_made, tmp_path)


def p12_inspect(pki):
    return run_cli("p12", "inspect", pki / "id.p12", "--password-file", pki / "pw.txt", "--json")


@pytest.mark.parametrize("mode, why", [(0o666, "can be written by others"), (0o644, "is readable by everyone"),
                                       (0o620, "can be written by others"), (0o604, "is readable by everyone")],
                         ids=["0666", "0644", "0620", "0604"])
def test_a_password_file_others_can_write_or_everyone_can_read_is_refused(pki, mode, why):
    (pki / "pw.txt").chmod(mode)
    r = p12_inspect(pki)
    assert r.returncode != 0, r
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and why in lines[0] and str(pki / "pw.txt") in lines[0], r.stderr
    assert f"chmod 600 {pki / 'pw.txt'}" in lines[0], r.stderr
    assert json.loads(r.stdout)["error"] == "invalid_argument"


def test_a_group_readable_password_file_works_with_a_warning_and_owner_only_silently(pki):
    (pki / "pw.txt").chmod(0o640)
    r = p12_inspect(pki)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["identities"]) == 1
    assert "warning" in r.stderr and "group" in r.stderr and f"chmod 600 {pki / 'pw.txt'}" in r.stderr, r.stderr
    (pki / "pw.txt").chmod(0o600)
    r = p12_inspect(pki)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_a_password_file_owned_by_another_user_is_refused(pki):
    """OpenSSH's owner rule: a secret file not owned by the user (or root) is refused, naming it."""
    import os
    assert os.geteuid() == 0, "the tests run as root, to give a file to another uid"
    os.chown(pki / "pw.txt", 4242, 4242)
    r = p12_inspect(pki)
    assert r.returncode != 0, r
    assert "owned by another user (uid 4242)" in r.stderr and str(pki / "pw.txt") in r.stderr, r.stderr
    assert json.loads(r.stdout)["error"] == "invalid_argument"
    os.chown(pki / "pw.txt", 0, 0)
    assert p12_inspect(pki).returncode == 0


def test_store_secret_and_key_files_are_secret_files(pki):
    store = pki / "s.db"
    r = run_cli("store", "--store", store, "--secret-file", pki / "secret.txt", "import", pki / "id.p12", "--label", "a",
                "--password-file", pki / "pw.txt")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    (pki / "secret.txt").chmod(0o644)
    r = run_cli("store", "--store", store, "--secret-file", pki / "secret.txt", "list")
    assert r.returncode != 0 and f"chmod 600 {pki / 'secret.txt'}" in r.stderr and "store secret" in r.stderr, r.stderr
    (pki / "secret.txt").chmod(0o640)
    r = run_cli("store", "--store", store, "--secret-file", pki / "secret.txt", "list", "--json")
    assert r.returncode == 0 and [i["label"] for i in json.loads(r.stdout)] == ["a"], r.stderr
    assert "warning" in r.stderr and "group" in r.stderr, r.stderr
    write_secret(pki / "store.key", bytes(range(32)))
    (pki / "store.key").chmod(0o666)
    r = run_cli("store", "--store", pki / "k.db", "--key-file", pki / "store.key", "list")
    assert r.returncode != 0 and "can be written by others" in r.stderr and "chmod 600" in r.stderr, r.stderr


def test_a_private_key_file_is_a_secret_file_and_a_certificate_is_not(pki):
    (pki / "leaf.key").chmod(0o644)
    r = run_cli("connect", "127.0.0.1:1", "--cert", pki / "leaf.pem", "--key", pki / "leaf.key", "--json",
                "--timeout", "2")
    assert r.returncode != 0 and f"chmod 600 {pki / 'leaf.key'}" in r.stdout + r.stderr, r
    (pki / "leaf.key").chmod(0o600)
    r = run_cli("connect", "127.0.0.1:1", "--cert", pki / "leaf.pem", "--key", pki / "leaf.key", "--json",
                "--timeout", "2")
    assert "chmod" not in r.stdout + r.stderr and json.loads(r.stdout)["error_code"] == "connect", r
    # Certificates, policies and CRLs are not secrets: a 0644 certificate is read as before.
    assert run_cli("cert", "show", pki / "leaf.pem").returncode == 0


@pytest.mark.parametrize("mode, owner, why", [(0o644, 0, "is readable by everyone (mode 0644)"),
                                              (0o600, 4242, "owned by another user (uid 4242)")],
                         ids=["0644", "other-owner"])
def test_the_c_example_refuses_an_unprotected_password_file_as_the_library_does(pki, tmp_path, mode, owner, why):
    """examples/connect.c reads its own password file: it applies the library's secret-file rule
    (mode and owner) instead of modelling the unsafe read."""
    import os
    import subprocess
    from conftest import REPO
    prefix = os.environ["MTLS_PREFIX"]
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls"], check=True, capture_output=True, text=True,
                           env={**os.environ, "PKG_CONFIG_PATH": os.path.join(prefix, "lib", "pkgconfig")}).stdout
    connect = tmp_path / "connect"
    sh(f"cc -std=c11 -Wall -Werror -o {connect} {REPO}/examples/connect.c {flags}", tmp_path)
    pw = pki / "pw.txt"
    pw.chmod(mode)
    os.chown(pw, owner, owner)
    r = subprocess.run([str(connect), "--p12", str(pki / "id.p12"), "--password-file", str(pw), "--anchor",
                        str(pki / "root.pem"), "127.0.0.1", "1"], capture_output=True, text=True)
    assert r.returncode != 0 and why in r.stderr and str(pw) in r.stderr, r
