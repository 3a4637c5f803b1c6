"""Trust policies and evaluation through the C ABI, on a PKI made at run time."""
import pathlib
import subprocess
import time

import pytest

import mtls
from mtls import errors

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "test-pki.sh"
NOW = int(time.time()) + 86400


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("trust-pki")
    subprocess.run([str(SCRIPT), "--trust", str(d)], check=True, capture_output=True)
    return d


def certs(pki, name):
    return mtls.Certificate.load_all(str(pki / name))


def pinned_root_policy(pki):
    p = mtls.Policy()
    p.add_anchor(certs(pki, "root.pem")[0])
    p.set_anchors_only(True)
    p.set_time(NOW)
    return p


def test_pinned_root_trusts_chain_and_builds_it(pki):
    with pinned_root_policy(pki) as p:
        r = p.evaluate(certs(pki, "chain.pem"), host="server.test")
        assert r.trusted and r.kind == "proceed" and r.reasons == []
        assert [c.subject_summary for c in r.chain] == ["server.test", "Test Intermediate", "Test Root"]


def test_wrong_host_is_recoverable_name_mismatch(pki):
    r = pinned_root_policy(pki).evaluate(certs(pki, "chain.pem"), host="other.test")
    assert not r.trusted and r.kind == "recoverable_failure"
    assert mtls.TrustReason("name_mismatch", 0, r.reasons[0].message) in r.reasons


def test_name_mismatch_message_names_the_certificates_names_and_verify_as(pki):
    # Issue 38: the core's message, the same in C, Python and the CLI, says what to do next.
    r = pinned_root_policy(pki).evaluate(certs(pki, "chain.pem"), host="other.test")
    [m] = [x.message for x in r.reasons if x.code == "name_mismatch"]
    assert "the certificate's names: server.test" in m and "verify-as" in m, m


def test_curl_pin_form_is_accepted(pki):
    pin = mtls.Certificate.load(pki / "root.pem").spki_pin
    curl_form = "sha256//" + pin[len("sha256/"):]
    p = mtls.Policy(anchors=[mtls.Certificate.load(pki / "root.pem")], pins=[curl_form], anchors_only=True)
    assert p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted
    with pytest.raises(errors.Error) as e:
        mtls.Policy(pins=["sha256//AAAA"])
    assert "sha256/BASE64" in str(e.value) and "sha256//BASE64" in str(e.value), e.value


def test_no_host_fails_closed_unless_name_check_is_off(pki):
    p = pinned_root_policy(pki)
    r = p.evaluate(certs(pki, "chain.pem"))  # a server, a name check, and no name to check
    assert not r.trusted and r.kind == "fatal_failure" and r.codes == ["no_peer_name"]
    p.set_name_check(False)
    assert p.evaluate(certs(pki, "chain.pem")).trusted


def test_expired_at_later_time(pki):
    r = pinned_root_policy(pki).evaluate(certs(pki, "chain.pem"), host="server.test", at=NOW + 60 * 86400)
    assert "expired" in r.codes


def test_client_purpose(pki):
    p = pinned_root_policy(pki)
    assert p.evaluate(certs(pki, "client-chain.pem"), purpose="client").trusted
    assert "wrong_purpose" in p.evaluate(certs(pki, "chain.pem"), purpose="client").codes
    with pytest.raises(ValueError):
        p.evaluate(certs(pki, "chain.pem"), purpose="both")


def test_verify_as_and_pins(pki):
    p = pinned_root_policy(pki)
    inter_pin = certs(pki, "inter.pem")[0].spki_pin
    p.add_host_rule("10.0.0.9", verify_as="server.test")
    p.add_pin("10.0.0.9", certs(pki, "other-root.pem")[0].spki_pin)
    assert len(p.warnings) == 1
    r = p.evaluate(certs(pki, "chain.pem"), host="10.0.0.9")
    assert not r.trusted and r.kind == "fatal_failure" and "pin_mismatch" in r.codes
    p.add_pin("10.0.0.9", inter_pin)
    assert p.warnings == []
    r = p.evaluate(certs(pki, "chain.pem"), host="10.0.0.9")
    assert r.trusted and r.matched_rule == "10.0.0.9" and r.matched_pin == inter_pin


def test_report_only_calls_back_and_reraises(pki):
    p = pinned_root_policy(pki)
    p.add_pin("server.test", certs(pki, "other-root.pem")[0].spki_pin)
    p.set_report_only("server.test")
    seen = []
    p.set_report_callback(lambda host, rule, code, message: seen.append((host, rule, code)))
    assert p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted
    assert seen == [("server.test", "server.test", "pin_mismatch")]

    def boom(*_):
        raise RuntimeError("from the callback")
    p.set_report_callback(boom)
    with pytest.raises(RuntimeError, match="from the callback"):
        p.evaluate(certs(pki, "chain.pem"), host="server.test")
    p.set_report_callback(None)
    assert p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted


def test_pin_expiry_fail_closed(pki):
    p = pinned_root_policy(pki)
    p.add_pin("server.test", certs(pki, "other-root.pem")[0].spki_pin)
    p.set_pin_expiry("server.test", NOW - 10)
    assert p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted
    p.set_pin_expiry("server.test", NOW - 10, fail_closed=True)
    assert "pin_expired" in p.evaluate(certs(pki, "chain.pem"), host="server.test").codes


def test_crl_and_rule_anchor_and_skip_name_check(pki):
    p = pinned_root_policy(pki)
    p.add_host_rule("*.internal", skip_name_check=True)
    assert p.evaluate(certs(pki, "chain.pem"), host="db.internal").trusted
    p.add_rule_anchor("*.wild.test", certs(pki, "other-root.pem")[0])
    assert not p.evaluate(certs(pki, "chain.pem"), host="a.wild.test").trusted
    p.add_crl_file(str(pki / "revoked.crl"))
    r = p.evaluate(certs(pki, "chain.pem"), host="server.test")
    assert mtls.TrustReason("revoked", 0, next(x.message for x in r.reasons if x.code == "revoked")) in r.reasons


def test_policy_file_and_replace(pki):
    (pki / "p.json").write_text('{"anchors": ["root.pem"], "anchors_only": true}')
    p = mtls.Policy.from_file(str(pki / "p.json"))
    p.set_time(NOW)
    assert p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted
    other = mtls.Policy.from_json('{"anchors_only": true}')
    p.replace(other)
    assert not p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted


def test_errors(pki):
    with pytest.raises(errors.InvalidPolicy, match="nope"):
        mtls.Policy.from_json('{"nope": 1}')
    p = mtls.Policy()
    with pytest.raises(errors.InvalidPolicy):
        p.add_pin("server.test", "md5/abc")
    with pytest.raises(errors.InvalidArgument):
        p.evaluate([])
    p.close()
    p.close()


def test_evaluate_der_cached_and_uncached(pki):
    p = pinned_root_policy(pki)
    ders = [c.der for c in certs(pki, "chain.pem")]
    for cache in (False, True):
        p.set_cache(cache)
        for _ in range(2):
            assert p.evaluate_der(ders, host="server.test").trusted
            assert "name_mismatch" in p.evaluate_der(ders, host="x.test").codes
    with pytest.raises(errors.ParseError):
        p.evaluate_der([b"junk"], host="server.test")


# ---- Trust decisions bound to the peer reached (issue 9)

WRONG_PINS = ["sha256/" + "A" * 43 + "=", "sha256/" + "B" * 43 + "="]


@pytest.mark.parametrize("pattern", ["10.0.0.5:8443", "10.0.0.5"])
def test_ip_rule_pins_hold_when_validated_as_another_name(pki, pattern):
    p = pinned_root_policy(pki)
    for pin in WRONG_PINS:
        p.add_pin(pattern, pin)
    r = p.evaluate_peer(certs(pki, "chain.pem"), "10.0.0.5", 8443, verify_as="server.test")
    assert not r.trusted and r.codes == ["pin_mismatch"], r.reasons
    assert r.matched_rule == pattern
    # Another port: a rule with a port does not apply, the name is still checked as verify-as.
    r = p.evaluate_peer(certs(pki, "chain.pem"), "10.0.0.5", 9443, verify_as="server.test")
    assert r.trusted == (pattern != "10.0.0.5")


@pytest.mark.parametrize("spelling", ["10.5", "012.0.0.5", "0xa.0.0.5", "167772165", "::ffff:10.0.0.5"])
def test_ip_rule_pins_hold_however_the_address_is_spelt(pki, spelling):
    p = pinned_root_policy(pki)
    for pin in WRONG_PINS:
        p.add_pin("10.0.0.5:8443", pin)
    r = p.evaluate_peer(certs(pki, "chain.pem"), spelling, 8443, verify_as="server.test")
    assert not r.trusted and r.codes == ["pin_mismatch"] and r.matched_rule == "10.0.0.5:8443", r.reasons


def test_the_text_form_host_port_selects_the_rule_too(pki):
    p = pinned_root_policy(pki)
    p.add_host_rule("10.0.0.5:8443", verify_as="server.test")
    for pin in WRONG_PINS:
        p.add_pin("10.0.0.5:8443", pin)
    assert p.evaluate(certs(pki, "chain.pem"), host="10.0.0.5:8443").codes == ["pin_mismatch"]


@pytest.mark.parametrize("verify_as", ["", "   "])
def test_empty_verify_as_is_an_invalid_policy(pki, verify_as):
    with pytest.raises(errors.InvalidPolicy) as e:
        pinned_root_policy(pki).add_host_rule("10.0.0.5", verify_as=verify_as)
    assert "10.0.0.5" in str(e.value)
    with pytest.raises(errors.InvalidPolicy):
        mtls.Policy.from_json('{"version": 1, "hosts": [{"host": "10.0.0.5", "verify_as": "%s"}]}' % verify_as)


@pytest.mark.parametrize("pin", ["sha256/abc", "sha256/" + "A" * 43 + "==", "sha256/" + "A" * 44 + "="])
def test_malformed_pin_is_an_invalid_policy(pki, pin):
    with pytest.raises(errors.InvalidPolicy):
        pinned_root_policy(pki).add_pin("10.0.0.5", pin)


def test_leaf_without_eku_is_good_for_every_purpose(pki):
    p = pinned_root_policy(pki)
    assert p.evaluate(certs(pki, "noeku-chain.pem"), host="server.test").trusted
    p = mtls.Policy()
    p.add_anchor(certs(pki, "reqx509.pem")[0])
    p.set_anchors_only(True)
    assert p.evaluate(certs(pki, "reqx509.pem"), host="server.internal").trusted


def test_path_building_finds_the_good_issuer_among_bad_ones(pki):
    p = pinned_root_policy(pki)
    p.set_time(NOW + 86400)  # the one-day candidate has expired
    r = p.evaluate(certs(pki, "pb-bag.pem"), host="server.test")
    assert r.trusted, r.reasons
    assert [c.subject_summary for c in r.chain] == ["server.test", "PB Intermediate", "Test Root"]


def test_client_certificates_never_chain_to_the_system_store_by_default(pki):
    # root.pem plays the system trust store; the policy's own anchor is another root.
    text = '{"version": 1, "anchors": ["%s"], "system_ca_file": "%s"}' % (pki / "other-root.pem", pki / "root.pem")
    p = mtls.Policy.from_json(text)
    p.set_time(NOW)
    # Issue 35 item 1: servers too are judged by the anchors only, unless system_anchors.
    assert not p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted
    p.set_system_anchors(True)
    assert p.evaluate(certs(pki, "chain.pem"), host="server.test").trusted  # servers: the system store counts
    r = p.evaluate(certs(pki, "client-chain.pem"), purpose="client")
    assert not r.trusted and ("untrusted_root" in r.codes or "unknown_issuer" in r.codes), r.reasons
    assert any('the client anchor "Other Root"' in x.message for x in r.reasons), r.reasons
    p.set_system_anchors_for_clients(True)
    assert p.evaluate(certs(pki, "client-chain.pem"), purpose="client").trusted


def test_policy_anchors_are_the_only_ones_unless_system_anchors(pki):
    """Issue 35 item 1, in Python's spellings: Policy, HostRule, Overrides; root.pem plays the
    system store (system_ca_file) and signs chain.pem."""
    def judged(p, overrides=None):
        return p.evaluate(certs(pki, "chain.pem"), host="server.test", overrides=overrides).trusted

    def policy(**kw):
        p = mtls.Policy.from_json('{"system_ca_file": "%s"}' % (pki / "root.pem"))
        p.set_time(NOW)
        for k, v in kw.items():
            if k == "rule":
                p.add_rule(v)
            else:
                getattr(p, "set_" + k)(v)
        return p

    other = mtls.Certificate.load(pki / "other-root.pem")
    assert judged(policy())
    p = policy()
    p.add_anchor(other)
    assert not judged(p)
    p.set_system_anchors(True)
    assert judged(p)
    p.set_system_anchors(None)
    assert not judged(p)
    p.set_anchors_only(False)  # the older spelling keeps its meaning
    assert judged(p)
    assert not judged(policy(rule=mtls.HostRule("server.test", anchors=[other])))
    assert judged(policy(rule=mtls.HostRule("server.test", anchors=[other], system_anchors=True)))
    assert not judged(policy(), mtls.Overrides(anchors=[other]))
    assert judged(policy(), mtls.Overrides(anchors=[other], system_anchors=True))
    with pytest.raises(ValueError):
        mtls.Policy(anchors=[other], system_anchors=True, anchors_only=True)


def _tls_server(pki, clients):
    """A Python ssl server on 127.0.0.1 presenting chain.pem, for `clients` handshakes."""
    import socket
    import ssl
    import threading
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki / "chain.pem"), str(pki / "server.key"))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve():
        for _ in range(clients):
            c, _ = srv.accept()
            try:
                with ctx.wrap_socket(c, server_side=True) as s:
                    s.sendall(b"ok")
            except (OSError, ssl.SSLError):
                pass
        srv.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv.getsockname()[1], t


def test_wrap_fd_with_the_port_applies_the_host_port_rule(pki):
    import socket
    port, t = _tls_server(pki, 2)
    p = pinned_root_policy(pki)
    for pin in WRONG_PINS:
        p.add_pin(f"127.0.0.1:{port}", pin)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        with pytest.raises(errors.Untrusted) as e:
            mtls.Connection.wrap(sock, "127.0.0.1", port, policy=p, verify_as="server.test")
        assert "pin" in str(e.value)
    # Port 0 (documented): only rules without a port apply, so this rule does not.
    with socket.create_connection(("127.0.0.1", port)) as sock:
        with mtls.Connection.wrap(sock, "127.0.0.1", 0, policy=p, verify_as="server.test") as c:
            assert c.evaluation.trusted and c.evaluation.matched_rule is None
    t.join(10)
