"""Every mtls command behaves the same way: --help works, and a bad input (missing file, wrong
password, unknown label, bad URI, bad address) gives one line on stderr and a non-zero exit."""
import json
import re

import pytest

from conftest import run_cli, write_secret

COMMANDS = [
    ["cert"], ["cert", "show"], ["p12"], ["p12", "inspect"], ["p12", "create"], ["pki"], ["pki", "init"], ["pki", "intermediate"],
    ["pki", "issue"], ["pki", "issue", "server"], ["pki", "issue", "client"], ["pki", "revoke"], ["pki", "crl"],
    ["pki", "list"],
    ["store"], ["store", "import"], ["store", "add-cert"], ["store", "add-token"], ["store", "list"],
    ["store", "show"], ["store", "delete"], ["store", "export"], ["store", "change-secret"], ["store", "check"],
    ["store", "metrics"], ["verify"], ["limbo"], ["connect"], ["serve"],
    ["token"], ["token", "list"], ["token", "objects"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command):
    r = run_cli(*command, "--help")
    assert r.returncode == 0, r.stderr
    assert "USAGE:" in r.stdout


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    write_secret((d / "pw"), "right\n")
    write_secret((d / "wrong"), "wrong\n")
    write_secret((d / "secret"), "store-secret\n")
    (d / "junk").write_bytes(b"not a certificate or anything else\n")
    pki = d / "pki"
    for args in (["init", "--name", "R"], ["intermediate", "--name", "C"],
                 ["issue", "client", "--ca", "C", "--name", "c", "--p12", d / "c.p12", "--password-file", d / "pw"]):
        assert run_cli("pki", *args, "--dir", pki).returncode == 0
    assert run_cli("store", "--store", d / "s.db", "--secret-file", d / "secret", "add-cert",
                   pki / "root" / "cert.pem", "--label", "root").returncode == 0
    return d


BAD = [
    ("cert show: missing file", ["cert", "show", "{d}/missing.pem"]),
    ("cert show: not a certificate", ["cert", "show", "{d}/junk"]),
    ("p12 inspect: wrong password", ["p12", "inspect", "{d}/c.p12", "--password-file", "{d}/wrong"]),
    ("p12 inspect: missing file", ["p12", "inspect", "{d}/missing.p12", "--password-file", "{d}/pw"]),
    ("p12 inspect: not pkcs12", ["p12", "inspect", "{d}/junk", "--no-password"]),
    ("verify: missing file", ["verify", "{d}/missing.pem"]),
    ("verify: bad policy file", ["verify", "{d}/pki/root/cert.pem", "--policy", "{d}/junk"]),
    ("store: wrong secret", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/wrong", "list"]),
    ("store: unknown label", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "show", "nope"]),
    ("store: import wrong password", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "import",
                                      "{d}/c.p12", "--label", "x", "--password-file", "{d}/wrong"]),
    ("store: add-token bad uri", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "add-token",
                                  "pkcs11:token=%zz", "--label", "t"]),
    ("connect: bad address", ["connect", "nohostport"]),
    ("connect: refused", ["connect", "127.0.0.1:1"]),
    ("connect: missing identity file", ["connect", "127.0.0.1:1", "--identity", "{d}/missing.p12",
                                        "--password-file", "{d}/pw"]),
    ("serve: missing identity", ["serve", "--identity", "{d}/missing.p12", "--password-file", "{d}/pw"]),
    ("pki: missing folder", ["pki", "intermediate", "--dir", "{d}/nowhere", "--name", "X"]),
    ("pki list: missing folder", ["pki", "list", "--dir", "{d}/nowhere"]),
    ("pki: unknown intermediate", ["pki", "issue", "client", "--dir", "{d}/pki", "--ca", "Nope", "--name", "x"]),
    ("token: bad uri", ["token", "objects", "--token", "pkcs11:token=%zz"]),
    ("token: missing module", ["token", "list", "--module", "/nonexistent/module.so"]),
    # Usage errors ArgumentParser finds: one line too, not its Error/Usage/See block.
    ("pki issue server: no --dns or --ip", ["pki", "issue", "server", "--dir", "{d}/pki", "--ca", "C", "--name", "s"]),
    ("pki issue client: --p12 without --password-file", ["pki", "issue", "client", "--dir", "{d}/pki", "--ca", "C",
                                                         "--name", "y", "--p12", "{d}/y.p12"]),
    ("p12 inspect: --password-file with --no-password", ["p12", "inspect", "{d}/c.p12", "--password-file", "{d}/pw",
                                                         "--no-password", "--json"]),
    ("token objects: URI given positionally", ["token", "objects", "pkcs11:token=x"]),
    ("p12 create: missing key", ["p12", "create", "--cert", "{d}/pki/root/cert.pem", "--key", "{d}/missing.pem",
                                 "--out", "{d}/new.p12", "--password-file", "{d}/pw", "--json"]),
    ("p12 create: existing output", ["p12", "create", "--cert", "{d}/pki/root/cert.pem", "--key", "{d}/pki/root/key.pem",
                                     "--out", "{d}/c.p12", "--password-file", "{d}/pw"]),
    ("store export: existing output", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "export", "root",
                                       "--out", "{d}/c.p12", "--password-file", "{d}/pw", "--json"]),
    ("store import: missing file", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "import",
                                    "{d}/missing.p12", "--label", "x", "--json"]),
    ("store delete: unknown label", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "delete", "nope", "--json"]),
    ("store check: both --days and --within", ["store", "--store", "{d}/s.db", "--secret-file", "{d}/secret", "check",
                                               "--days", "1", "--within", "1"]),
    ("unknown option", ["cert", "show", "{d}/junk", "--no-such-option"]),
    ("missing argument", ["cert", "show"]),
]


@pytest.mark.parametrize("name, args", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gives_one_line_and_a_non_zero_exit(files, name, args):
    r = run_cli(*[a.format(d=files) for a in args], timeout=30)
    assert r.returncode != 0, r.stdout
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("mtls: "), r.stderr
    assert "Traceback" not in r.stderr and "Fatal error" not in r.stderr and "Usage:" not in r.stderr
    if "--json" in args:
        out = json.loads(r.stdout)
        assert set(out) == {"error", "message"} and out["message"], r.stdout


def test_help_and_version_are_unchanged():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() and not r.stderr
    r = run_cli("pki", "issue", "server", "--help")
    assert r.returncode == 0 and "USAGE:" in r.stdout and "--dns" in r.stdout


# ---- One name per idea across subcommands (issue 38): the same idea is spelled the same way
# everywhere; the names before 0.3.0 still parse but are hidden from --help.

def _options(command):
    """The long options `mtls COMMAND --help` shows."""
    r = run_cli(*command, "--help")
    assert r.returncode == 0, r.stderr
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", r.stdout))


def _leaves(command=()):
    """Every command that does something (has no subcommands of its own)."""
    r = run_cli(*command, "--help")
    subs = re.search(r"SUBCOMMANDS:\n(.*?)(?:\n\n|\Z)", r.stdout, re.S)
    if not subs:
        return [list(command)]
    names = [m.group(1) for line in subs.group(1).splitlines() if (m := re.match(r"  (\S+)", line))]
    return [leaf for n in names if n != "help" for leaf in _leaves((*command, n))]


LEAVES = _leaves()


@pytest.mark.parametrize("command", LEAVES, ids=" ".join)
def test_every_command_takes_json(command):
    assert "--json" in _options(command)


@pytest.mark.parametrize("command", LEAVES, ids=" ".join)
def test_one_name_per_idea(command):
    options = _options(command)
    # A number of days is --days (never --within).
    assert "--within" not in options and "--crl-days" not in options
    # A key type is --key-type wherever one is chosen; --key is always a key file.
    key_type_commands = {("pki", "init"), ("pki", "intermediate"), ("pki", "issue", "server"), ("pki", "issue", "client"),
                         ("enroll", "acme"), ("enroll", "est"), ("enroll", "pki")}
    if tuple(command) in key_type_commands:
        assert "--key-type" in options and "--key" not in options, options
    # A server certificate's names are --dns and --ip.
    if tuple(command) in {("pki", "issue", "server"), ("pki", "sign", "server"), ("enroll", "pki")}:
        assert {"--dns", "--ip"} <= options, options
    # Where a PKCS#12 file is read or written with a password, --password-file gives it and
    # --no-password says there is none.
    if tuple(command) in {("p12", "inspect"), ("p12", "create"), ("store", "import"), ("connect",), ("serve",)}:
        assert {"--password-file", "--no-password"} <= options, options
    # Trust anchors are --anchor (curl's --cacert is a hidden alias, never shown).
    assert "--cacert" not in options


def test_cacert_is_not_taken_for_cert():
    r = run_cli("connect", "127.0.0.1:1", "--cacert", "/nonexistent/ca.pem")
    assert "--cert" not in r.stderr and "Did you mean" not in r.stderr, r.stderr
    assert "/nonexistent/ca.pem" in r.stderr, r.stderr


# ---- An encrypted key's password is --password-file in pki too; a .p12's is --p12-password-file.

def _pki_with_encrypted_keys(d):
    write_secret(d / "key.pw", "key pass\n")
    write_secret(d / "p12.pw", "p12 pass\n")
    for args in (["init", "--name", "R"], ["intermediate", "--name", "C"]):
        r = run_cli("pki", *args, "--dir", d / "pki", "--password-file", d / "key.pw")
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert "ENCRYPTED PRIVATE KEY" in (d / "pki" / "root" / "key.pem").read_text()
    return d / "pki"


def _p12_opens_with(p12, password_file):
    return run_cli("p12", "inspect", p12, "--password-file", password_file, "--json").returncode == 0


def test_pki_password_file_is_the_keys_and_p12_password_file_the_p12s(tmp_path):
    pki = _pki_with_encrypted_keys(tmp_path)
    r = run_cli("pki", "issue", "client", "--dir", pki, "--ca", "C", "--name", "new", "--password-file", tmp_path / "key.pw",
                "--p12", tmp_path / "new.p12", "--p12-password-file", tmp_path / "p12.pw")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    assert "ENCRYPTED PRIVATE KEY" in (pki / "ca" / "c" / "issued" / "new" / "key.pem").read_text()
    assert _p12_opens_with(tmp_path / "new.p12", tmp_path / "p12.pw")
    assert not _p12_opens_with(tmp_path / "new.p12", tmp_path / "key.pw")
    # The help shows the new names and not the old ones.
    options = _options(["pki", "issue", "client"])
    assert {"--password-file", "--p12-password-file"} <= options and "--key-password-file" not in options, options
    # --p12 without a .p12 password names the option to give.
    r = run_cli("pki", "issue", "client", "--dir", pki, "--ca", "C", "--name", "none", "--password-file", tmp_path / "key.pw",
                "--p12", tmp_path / "none.p12")
    assert r.returncode != 0 and "--p12-password-file" in r.stderr, r.stderr
    # A wrong CA key password is said as one.
    r = run_cli("pki", "issue", "client", "--dir", pki, "--ca", "C", "--name", "bad", "--password-file", tmp_path / "p12.pw")
    assert r.returncode != 0 and "wrong key password" in r.stderr, r.stderr


def test_pki_old_spellings_keep_their_meaning_for_a_release(tmp_path):
    pki = _pki_with_encrypted_keys(tmp_path)
    # --key-password-file: the old name of the key's password, hidden, no warning.
    r = run_cli("pki", "issue", "client", "--dir", pki, "--ca", "C", "--name", "old", "--key-password-file", tmp_path / "key.pw")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert "ENCRYPTED PRIVATE KEY" in (pki / "ca" / "c" / "issued" / "old" / "key.pem").read_text()
    # --p12 F --password-file P (before 0.3.0: P is the .p12's password), with the key's password
    # as --key-password-file: works as before, with a deprecation warning naming the new option.
    r = run_cli("pki", "issue", "client", "--dir", pki, "--ca", "C", "--name", "legacy", "--p12", tmp_path / "legacy.p12",
                "--password-file", tmp_path / "p12.pw", "--key-password-file", tmp_path / "key.pw")
    assert r.returncode == 0, r.stderr
    warnings = [l for l in r.stderr.splitlines() if "warning" in l]
    assert len(warnings) == 1 and "--p12-password-file" in warnings[0] and ".p12" in warnings[0], r.stderr
    assert _p12_opens_with(tmp_path / "legacy.p12", tmp_path / "p12.pw")
    # Both names of the key's password at once: refused.
    r = run_cli("pki", "crl", "--dir", pki, "--ca", "C", "--password-file", tmp_path / "key.pw",
                "--key-password-file", tmp_path / "key.pw")
    assert r.returncode != 0 and "once" in r.stderr, r.stderr
    # The CA key password is --password-file in every pki command (crl here).
    r = run_cli("pki", "crl", "--dir", pki, "--ca", "C", "--password-file", tmp_path / "key.pw")
    assert r.returncode == 0, r.stderr


def test_enroll_pki_and_renew_take_password_file_for_the_ca_keys(tmp_path):
    for command in (["enroll", "pki"], ["renew"]):
        options = _options(command)
        assert "--password-file" in options and "--key-password-file" not in options, (command, options)
