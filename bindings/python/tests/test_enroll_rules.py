"""mtls.enroll_acme, enroll_est and enroll_pki get the library's rules about which options go
together through the C ABI (the core's EnrollmentRules.swift): each broken rule is
mtls.InvalidArgument with the library's message, raised before the CA is reached (the URLs name
a closed port, so a rule that were not checked would raise ConnectError instead) and with
nothing stored."""
import pytest

import mtls
from mtls import Store

KDF = {"kdf_log_n": 10, "create": True}
ACME = "https://127.0.0.1:1/dir"
EST = "https://127.0.0.1:1/.well-known/est"


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db", "secret", **KDF) as st:
        yield st


def refused(message, func, *args, **kwargs):
    with pytest.raises(mtls.InvalidArgument) as e:
        func(*args, **kwargs)
    assert message in str(e.value), str(e.value)


def test_acme_rules_come_from_the_library(store):
    one_method = "give exactly one of opts->challenge = MTLS_ACME_HTTP01"
    refused(one_method, mtls.enroll_acme, store, "a", ACME, ["a.test"])
    refused(one_method, mtls.enroll_acme, store, "a", ACME, ["a.test"], http_port=5002, dns_hook="/bin/true")
    refused(one_method, mtls.enroll_acme, store, "a", ACME, ["a.test"], http_port=5002, tls_alpn_port=5003)
    refused("give at least one name", mtls.enroll_acme, store, "a", ACME, [], http_port=5002)
    refused("opts->challenge = MTLS_ACME_WEBROOT needs opts->webroot", mtls.enroll_acme, store, "a", ACME, ["a.test"],
            webroot="")
    refused("opts->eab_kid and opts->eab_hmac_key go together", mtls.enroll_acme, store, "a", ACME, ["a.test"],
            http_port=5002, eab_kid="kid-1")
    refused("opts->key_type makes a new key; it does not go with opts->token_uri", mtls.enroll_acme, store, "a", ACME,
            ["a.test"], http_port=5002, key_type="ec-p384", token_uri="pkcs11:token=t;object=k")
    refused("opts->timeout_seconds must be 1 to 86400 seconds", mtls.enroll_acme, store, "a", ACME, ["a.test"],
            http_port=5002, timeout=86401)
    with pytest.raises(mtls.ConnectError):  # every rule kept: the request goes out
        mtls.enroll_acme(store, "a", ACME, ["a.test"], http_port=5002)


def test_est_and_pki_rules_come_from_the_library(store, tmp_path):
    refused("give opts->user and opts->password, or opts->bootstrap", mtls.enroll_est, store, "e", EST, "CN=e")
    refused("opts->user and opts->password go together", mtls.enroll_est, store, "e", EST, "CN=e", user="device")
    refused("opts->key_type makes a new key; it does not go with opts->token_uri", mtls.enroll_est, store, "e", EST,
            "CN=e", user="device", password="pw", key_type="ec-p256", token_uri="pkcs11:token=t;object=k")
    refused("opts->key_type makes a new key; it does not go with opts->token_uri", mtls.enroll_pki, store, "p",
            tmp_path / "missing", "CA", "p.local", key_type="rsa-2048", token_uri="pkcs11:token=t;object=k")
    refused("opts->profile is server or client, not intermediate", mtls.enroll_pki, store, "p", tmp_path / "missing",
            "CA", "p.local", profile="intermediate")
    with pytest.raises(mtls.ConnectError):
        mtls.enroll_est(store, "e", EST, "CN=e", user="device", password="pw")
    assert store.list() == []
