"""`mtls enroll acme|est|pki` report a broken rule about which options go together as a usage
error (exit status 64, the message naming the flags, the pointer to --help), with the core's
rule and sentence (EnrollmentRules.swift) and the CLI's flag names; the CA is never reached (the
URLs name a closed port) and no store is left behind."""
import json

import pytest

from conftest import run_cli, write_secret

ACME = "https://127.0.0.1:1/dir"
EST = "https://127.0.0.1:1/.well-known/est"


@pytest.fixture
def store(tmp_path):
    write_secret(tmp_path / "secret", "rules secret\n")
    write_secret(tmp_path / "pw", "pw\n")
    return ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]


def refused(message, *args):
    r = run_cli("enroll", *args, "--json")
    assert r.returncode == 64, r.stdout + r.stderr
    assert json.loads(r.stdout) == {"error": "invalid_argument", "message": message}
    assert f"mtls: {message} (see 'mtls enroll {args[0]} --help')" in r.stderr


@pytest.mark.parametrize("flags, message", [
    ((), "give exactly one of --http-port, --webroot, --tls-alpn-port, --dns-hook"),
    (("--http-port", "80", "--dns-hook", "/bin/true"), "give exactly one of --http-port, --webroot, --tls-alpn-port, --dns-hook"),
    (("--http-port", "0"), "--http-port needs a port from 1 to 65535"),
    (("--webroot", ""), "--webroot needs a directory"),
    (("--dns-hook", ""), "--dns-hook needs a command"),
    (("--http-port", "80", "--eab-kid", "kid-1"), "--eab-kid and --eab-hmac-file go together"),
    (("--http-port", "80", "--key-type", "ec-p384", "--token-uri", "pkcs11:token=t;object=k"),
     "--key-type makes a new key; it does not go with --token-uri"),
    (("--http-port", "80", "--timeout", "0"), "--timeout must be 1 to 86400 seconds"),
])
def test_acme_rules(store, tmp_path, flags, message):
    refused(message, "acme", "--directory", ACME, "--name", "a.test", "--label", "a", *flags, *store)
    assert not (tmp_path / "store.db").exists()


def test_acme_needs_a_name(store):
    refused("give at least one --name", "acme", "--directory", ACME, "--label", "a", "--http-port", "80", *store)


def test_est_rules(store, tmp_path):
    est = ("est", "--url", EST, "--subject", "CN=e", "--label", "e")
    refused("give --user and --password-file, or --identity", *est, *store)
    refused("--user and --password-file go together", *est, "--user", "u", *store)
    refused("--key-type makes a new key; it does not go with --token-uri", *est, "--user", "u", "--password-file",
            tmp_path / "pw", "--key-type", "ec-p256", "--token-uri", "pkcs11:token=t;object=k", *store)
    refused("--profile is server or client, not intermediate", *est, "--user", "u", "--password-file", tmp_path / "pw",
            "--profile", "intermediate", *store)
    assert not (tmp_path / "store.db").exists()


def test_pki_rules(store, tmp_path):
    pki = ("pki", "--dir", tmp_path / "no-pki", "--ca", "CA", "--name", "p.local", "--label", "p")
    refused("--profile is server or client, not root", *pki, "--profile", "root", *store)
    refused("--key-type makes a new key; it does not go with --token-uri", *pki, "--key-type", "rsa-2048",
            "--token-uri", "pkcs11:token=t;object=k", *store)
