"""Who may connect (issue 39): Policy(allow=...), allow_add and HostRule.allow, judged by the
library's one trust decision: evaluate(), a Listener's client policy and a Connection's policy
refuse the same peer with reason "not_allowed". PKI: scripts/test-pki.sh --allow."""
import pathlib
import subprocess
import threading

import pytest

import mtls
from conftest import PKI_SCRIPT


@pytest.fixture(scope="module")
def apki(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("allow-pki")
    subprocess.run([str(PKI_SCRIPT), "--allow", str(d)], check=True, capture_output=True)
    return d


def chain(apki, name):
    return mtls.Certificate.load_all(apki / f"{name}-chain.pem")


def ident(apki, name):
    return mtls.Identity.from_pem((apki / f"{name}-chain.pem").read_text(), (apki / f"{name}.key").read_text())


def clients(apki, **allow):
    """A client policy trusting both roots (no name check), with `allow`."""
    return mtls.Policy(anchors=[apki / "root.pem", apki / "root-2.pem"], name_check=False, allow=allow)


def judge(policy, apki, name):
    return policy.evaluate(chain(apki, name), purpose="client")


@pytest.mark.parametrize("kind,pattern,says", [
    ("cn", "alice", 'CN "bob" matches no --allow-cn'),
    ("ou", ["eng"], 'OU ["ops"] match no --allow-ou'),
    ("dns", "*.svc.example", "DNS SANs [bob.other.example] match no --allow-dns"),
    ("uri", ["spiffe://example.org/ns/*/sa/**"], "URI SANs [spiffe://other.org/ns/prod/sa/bob] match no --allow-uri"),
    ("spki", None, "matches no --allow-spki"),
])
def test_each_kind_accepts_one_client_and_refuses_another(apki, kind, pattern, says):
    if pattern is None:
        pattern = mtls.Certificate.load(apki / "alice.pem").spki_pin
    p = clients(apki, **{kind: pattern})
    assert judge(p, apki, "alice").trusted
    r = judge(p, apki, "bob")
    assert not r.trusted and r.kind == "fatal_failure" and r.codes == ["not_allowed"]
    assert "the client certificate is not allowed by the policy's allow-list" in r.reasons[0].message
    assert says in r.reasons[0].message


def test_issuer_takes_a_certificate(apki):
    p = clients(apki, issuer=[mtls.Certificate.load(apki / "root-2.pem")])
    assert judge(p, apki, "carol").trusted
    r = judge(p, apki, "alice")
    assert r.codes == ["not_allowed"] and 'anchor "Allow Root"' in r.reasons[0].message
    assert p.allow() == {"issuer": [mtls.Certificate.load(apki / "root-2.pem").sha256_hex]}


def test_allow_reads_back_and_bad_patterns_raise(apki):
    p = clients(apki, cn=["alice"], uri="spiffe://example.org/ns/*/sa/**")
    p.allow_add("dns", "*.svc.example")
    assert p.allow() == {"cn": ["alice"], "dns": ["*.svc.example"], "uri": ["spiffe://example.org/ns/*/sa/**"]}
    with pytest.raises(mtls.InvalidPolicy, match="trust domain"):
        p.allow_add("uri", "spiffe://*.example.org/x")
    with pytest.raises(mtls.InvalidPolicy, match="whole segment"):
        mtls.Policy(allow={"dns": ["a*.example"]})
    with pytest.raises(ValueError, match="allow keys"):
        mtls.Policy(allow={"email": ["x"]})
    with pytest.raises(ValueError, match="allow kind"):
        p.allow_add("subject", "x")
    assert p.allow()["dns"] == ["*.svc.example"]


def test_host_rule_allow_is_a_list_of_its_own(apki):
    p = mtls.Policy(anchors=[apki / "root.pem"],
                    host_rules=[{"host": "server.test", "allow": {"uri": ["spiffe://example.org/ns/prod/sa/other"]}}])
    p.set_time(None)
    assert p.allow("server.test") == {"uri": ["spiffe://example.org/ns/prod/sa/other"]}
    r = p.evaluate(chain(apki, "server"), host="server.test")
    assert r.codes == ["not_allowed"] and "host rule server.test" in r.reasons[0].message
    # Another host's rule does not apply: the server is validated as itself, by IP address.
    assert p.evaluate(chain(apki, "server"), host="127.0.0.1").trusted


def test_policy_file_allow(apki, tmp_path):
    f = tmp_path / "policy.json"
    f.write_text('{"anchors": ["%s"], "purpose": "client", "name_check": "none",'
                 ' "allow": {"uri": ["spiffe://example.org/ns/prod/sa/**"]}}' % (apki / "root.pem"))
    p = mtls.Policy.from_file(f)
    assert judge(p, apki, "alice").trusted
    assert judge(p, apki, "bob").codes == ["not_allowed"]


def test_listener_refuses_a_client_the_list_does_not_name(apki):
    listener = mtls.Listener(ident(apki, "server"), client_policy=clients(apki, uri=["spiffe://example.org/ns/prod/sa/*"]))
    results = []

    def serve(n):
        for _ in range(n):
            try:
                with listener.accept(timeout=10) as c:
                    results.append(c.peer_chain[0].subject_summary)
                    c.write(c.read())
            except mtls.MTLSError as e:
                results.append(e)

    t = threading.Thread(target=serve, args=(2,), daemon=True)
    t.start()
    server_policy = mtls.Policy(anchors=[apki / "root.pem"])
    try:
        with mtls.Connection.connect("127.0.0.1", listener.port, identity=ident(apki, "alice"), policy=server_policy,
                                     verify_as="server.test", handshake_timeout=10) as c:
            c.write(b"hi")
            assert c.read() == b"hi"
        with pytest.raises(mtls.MTLSError):
            with mtls.Connection.connect("127.0.0.1", listener.port, identity=ident(apki, "bob"), policy=server_policy,
                                         verify_as="server.test", handshake_timeout=10) as c:
                c.write(b"hi")
                c.read()
        t.join(15)
        assert results[0] == "alice"
        refused = results[1]
        assert isinstance(refused, mtls.TrustError), refused
        assert "not_allowed" in str(refused) and "URI SANs [spiffe://other.org/ns/prod/sa/bob]" in str(refused)
    finally:
        listener.close()


def test_connection_judges_the_server_by_the_allow_list(apki):
    listener = mtls.Listener(ident(apki, "server"), client_policy=clients(apki))
    t = threading.Thread(target=lambda: [_accept_quietly(listener) for _ in range(1)], daemon=True)
    t.start()
    try:
        policy = mtls.Policy(anchors=[apki / "root.pem"], allow={"uri": ["spiffe://example.org/ns/prod/sa/db"]})
        with pytest.raises(mtls.TrustError) as e:
            mtls.Connection.connect("127.0.0.1", listener.port, identity=ident(apki, "alice"), policy=policy,
                                    verify_as="server.test", handshake_timeout=10)
        assert "not_allowed" in str(e.value)
        assert "the server certificate is not allowed by the policy's allow-list" in str(e.value)
        t.join(15)
    finally:
        listener.close()


def _accept_quietly(listener):
    try:
        with listener.accept(timeout=10) as c:
            c.read()
    except mtls.MTLSError:
        pass
