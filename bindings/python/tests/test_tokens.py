"""PKCS#11 tokens through the Python bindings, against SoftHSM2 tokens made in a temporary folder
by scripts/softhsm-token.sh (keys generated on the token)."""
import os
import pathlib
import subprocess

import pytest

import mtls
from mtls import errors

MODULE = "/usr/lib/softhsm/libsofthsm2.so"



@pytest.fixture(autouse=True)
def softhsm_installed():
    # Not a skip: a test that needs a tool fails without it (scripts/install-deps.sh installs it).
    assert os.path.exists(MODULE), f"SoftHSM2 is not installed at {MODULE}: run scripts/install-deps.sh"


def test_list_tokens_gives_labels_uris_and_flags(tokens):
    listed = mtls.list_tokens(MODULE)
    assert sorted(t.label for t in listed) == ["mtls-empty", "mtls-locked", "mtls-spare", "mtls-test"]
    t = next(t for t in listed if t.label == "mtls-test")
    assert t.uri.startswith("pkcs11:") and "token=mtls-test" in t.uri
    assert t.manufacturer == "SoftHSM project" and t.model == "SoftHSM v2" and t.serial
    assert t.login_required and not t.pin_locked
    assert next(t for t in listed if t.label == "mtls-locked").pin_locked
    assert isinstance(t.slot_id, int) and t.module_name


def test_registered_modules_are_used_without_a_module_path(tokens):
    assert "mtls-test" in [t.label for t in mtls.list_tokens()]


def test_a_listing_pin_needs_one_named_token(tokens):
    """Issue 23, defect 8: a PIN goes only to the token the URI names, never to every token."""
    with pytest.raises(mtls.InvalidArgument, match="token="):
        mtls.token_objects(MODULE, None, pin="1234")
    with pytest.raises(mtls.BadURI):
        mtls.token_objects(MODULE, "pkcs11:model=SoftHSM%20v2", pin="1234")


def test_objects_need_the_pin_for_private_keys(tokens):
    public = mtls.token_objects(MODULE, "pkcs11:token=mtls-test")
    assert {o.kind for o in public} == {"certificate", "public-key"}
    everything = mtls.token_objects(MODULE, "pkcs11:token=mtls-test", pin="1234")
    keys = {o.label: o for o in everything if o.kind == "private-key"}
    assert set(keys) == {"rsa-client", "ec-client", "p384-client"}
    assert keys["p384-client"].key_type == "p384" and keys["p384-client"].id == b"\x03"
    assert keys["rsa-client"].certificate is None
    cert = next(o for o in everything if o.kind == "certificate" and o.label == "ec-client")
    assert cert.certificate.subject_summary == "token ec-client"
    assert "type=cert" in cert.uri and "id=%02" in cert.uri
    assert cert.token.label == "mtls-test"


def test_identity_from_uri_with_a_pin(tokens):
    ident = mtls.identity_from_pkcs11(f"pkcs11:token=mtls-test;id=%02?module-path={MODULE}", pin="1234")
    assert ident.leaf.subject_summary == "token ec-client"
    assert [c.subject_summary for c in ident.chain] == ["libmtls token test CA"]
    assert "type=private" in ident.token_uri
    ident.close()


def test_identity_pin_callback_is_told_the_token(tokens):
    asked = []

    def pin(label, uri, flags):
        asked.append((label, uri.startswith("pkcs11:")))
        return "1234"

    ident = mtls.identity_from_pkcs11(f"pkcs11:token=mtls-test;object=rsa-client?module-path={MODULE}", pin=pin)
    assert asked == [("mtls-test", True)]
    assert ident.key_type[0] == "rsa2048"


def test_identity_pin_from_the_uri_pin_source(tokens):
    ident = mtls.identity_from_pkcs11(
        f"pkcs11:token=mtls-test;object=p384-client?module-path={MODULE}&pin-source=file:{tokens}/pin")
    assert ident.key_type[0] == "p384"


def test_exception_in_pin_callback_is_re_raised(tokens):
    def pin(label, uri, flags):
        raise KeyError("no PIN for you")

    with pytest.raises(KeyError):
        mtls.identity_from_pkcs11(f"pkcs11:token=mtls-spare;object=spare?module-path={MODULE}", pin=pin)


@pytest.mark.parametrize("uri, pin, exc", [
    ("pkcs11:token=mtls-spare;object=spare?module-path=" + MODULE, "0000", errors.PinIncorrect),
    ("pkcs11:token=mtls-spare;object=spare?module-path=" + MODULE, None, errors.PinRequired),
    ("pkcs11:token=mtls-spare;object=spare?module-path=" + MODULE, lambda *a: None, errors.PinRequired),
    ("pkcs11:token=mtls-locked;object=locked?module-path=" + MODULE, "1234", errors.PinLocked),
    ("pkcs11:token=absent;id=%01?module-path=" + MODULE, "1234", errors.TokenNotPresent),
    ("pkcs11:token=mtls-test;id=%77?module-path=" + MODULE, "1234", errors.NotFound),
    ("pkcs11:token=%zz", "1234", errors.BadURI),
    ("https://example.com/", None, errors.BadURI),
])
def test_token_errors_have_their_own_exceptions(tokens, uri, pin, exc):
    with pytest.raises(exc):
        mtls.identity_from_pkcs11(uri, pin=pin)


def test_in_memory_identity_has_no_token_uri(tokens):
    ident = mtls.Identity.from_pem((tokens / "server.pem").read_text(), (tokens / "server.key").read_text())
    assert ident.token_uri is None


@pytest.mark.parametrize("key, tls", [("mtls-test;id=%01", "1.2"), ("mtls-test;id=%01", "1.3"),
                                      ("mtls-test;id=%02", "1.3"), ("mtls-test;id=%03", "1.2"),
                                      ("mtls-spare;id=%07", "1.2"), ("mtls-spare;id=%07", "1.3"),  # Ed25519
                                      ("mtls-spare;id=%08", "1.3")])  # CKA_ALWAYS_AUTHENTICATE
def test_connection_signs_on_the_token_for_a_python_ssl_server(tokens, key, tls):
    """Python's own ssl server requires a client certificate from the test CA: the handshake
    only succeeds if the token (the only holder of the key) signed. The always-authenticate key
    asks for its PIN again at the signature, after the call that opened it returned."""
    import gc
    import socket
    import ssl
    import threading

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tokens / "server.pem", tokens / "server.key")
    ctx.load_verify_locations(tokens / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    seen = {}

    def serve():
        raw, _ = listener.accept()
        with ctx.wrap_socket(raw, server_side=True) as s:
            seen["subject"] = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
            seen["version"] = s.version()
            seen["data"] = s.recv(64)
            s.sendall(b"pong")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    asked = []
    ident = mtls.identity_from_pkcs11(f"pkcs11:token={key}?module-path={MODULE}",
                                      pin=lambda label, uri, flags: asked.append(label) or "1234")
    gc.collect()
    policy = mtls.Policy()
    policy.add_anchor(mtls.Certificate.load(str(tokens / "ca.pem")))
    policy.set_anchors_only(True)
    conn = mtls.tls.Connection.connect("127.0.0.1", listener.getsockname()[1], identity=ident, policy=policy,
                                       min_tls=tls, max_tls=tls, io_timeout=10)
    conn.write(b"ping")
    assert conn.read(4) == b"pong"
    conn.close()
    t.join(10)
    listener.close()
    assert seen["subject"] == ident.leaf.subject_summary and seen["data"] == b"ping"
    assert seen["version"] == f"TLSv{tls}"
    assert len(asked) == (2 if key.endswith("%08") else 1), asked
