"""One effective policy, composed in libmtls (issue 23, defect 1): Policy(pins=..., verify_as=...)
are the core's policy-wide settings, applied to every evaluation — a Listener's clients,
configure_ssl_ctx, evaluate() without a host — on top of the host rule selected by host and
port; a connection's verify_as and pins are overrides; Python adds no rule and never changes
the caller's policy. Real listeners and clients on 127.0.0.1, PKI made by scripts/test-pki.sh."""
import ctypes
import ctypes.util
import socket
import threading

import pytest

import mtls
from mtls import errors

from conftest import anchored, identity


def cert(pki, name):
    return mtls.Certificate.load(pki / name)


def pin(pki, name):
    return cert(pki, name).spki_pin


def chain(pki, name):
    return mtls.Certificate.load_all(pki / f"{name}-chain.pem")


class Server:
    """A listener serving `count` clients on a thread; results: (CN, trusted) or the error."""

    def __init__(self, listener, count):
        self.listener, self.results = listener, []
        self.thread = threading.Thread(target=self._run, args=(count,), daemon=True)
        self.thread.start()

    def _run(self, count):
        for _ in range(count):
            try:
                with self.listener.accept(timeout=10) as c:
                    self.results.append((c.peer_chain[0].subject_summary, c.evaluation.trusted))
                    c.write(c.read())
            except mtls.MTLSError as e:
                self.results.append(e)

    def join(self):
        self.thread.join(15)
        self.listener.close()
        return self.results


def talk(conn):
    """One echo; None when the server refused us (TLS 1.3: its alert comes on the first read)."""
    with conn:
        conn.write(b"ping")
        try:
            return conn.read()
        except (errors.PeerAlert, errors.Closed):
            return None


def connect(pki, port, **kw):
    kw.setdefault("identity", identity(pki, "client-a"))
    kw.setdefault("policy", anchored(pki, "root.pem"))
    kw.setdefault("handshake_timeout", 10)
    kw.setdefault("io_timeout", 10)
    conn = mtls.Connection.connect("127.0.0.1", port, handshake=False, **kw)
    try:
        conn.handshake()  # a TrustError carries the evaluation
    except BaseException:
        conn.close()
        raise
    return conn


def test_listener_client_policy_pins_refuse_another_customer(pki):
    # Every customer's clients chain to the root; the policy-wide pin admits customer B only.
    policy = mtls.Policy(anchors=[cert(pki, "root.pem")], pins=[pin(pki, "int-b.pem")])
    server = Server(mtls.Listener(identity(pki, "server"), client_policy=policy, session_tickets=False), 2)
    port = server.listener.port
    assert talk(connect(pki, port, verify_as="server.test")) is None
    assert talk(connect(pki, port, verify_as="server.test", identity=identity(pki, "client-b", "int-b"))) == b"ping"
    results = server.join()
    # The listener reports a refused handshake and a finished one in whichever order they end.
    refused = [x for x in results if isinstance(x, errors.Untrusted)]
    assert len(refused) == 1 and "policy-wide pins" in str(refused[0]), results
    assert ("client-b", True) in results and len(results) == 2, results
    assert policy.pins == [pin(pki, "int-b.pem")]


def test_listener_client_overrides_pin_a_customer(pki):
    overrides = mtls.Overrides(pins=[pin(pki, "int-a.pem")])
    server = Server(mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "root.pem"),
                                  client_overrides=overrides, session_tickets=False), 2)
    port = server.listener.port
    assert talk(connect(pki, port, verify_as="server.test", identity=identity(pki, "client-b", "int-b"))) is None
    assert talk(connect(pki, port, verify_as="server.test")) == b"ping"
    results = server.join()
    refused = [x for x in results if isinstance(x, errors.Untrusted)]
    assert len(refused) == 1 and "pins given as overrides" in str(refused[0]), results
    assert ("client-a", True) in results and len(results) == 2, results


def test_evaluate_without_a_host_applies_policy_wide_pins(pki):
    policy = mtls.Policy(anchors=[cert(pki, "root.pem")], pins=[pin(pki, "other-root.pem")], name_check=False)
    r = policy.evaluate(chain(pki, "server"))
    assert not r.trusted and "pin_mismatch" in r.codes, r
    r = policy.evaluate(chain(pki, "client-a"), purpose="client")
    assert not r.trusted and "pin_mismatch" in r.codes, r
    policy.pins = [pin(pki, "int-a.pem")]
    r = policy.evaluate(chain(pki, "client-a"), purpose="client")
    assert r.trusted, r
    assert r.provenance["pins"] == [{"from": "policy", "enforced": True, "matched": pin(pki, "int-a.pem")}]


def _libssl():
    libssl = ctypes.CDLL(ctypes.util.find_library("ssl"))
    libssl.TLS_method.restype = ctypes.c_void_p
    libssl.SSL_CTX_new.restype = ctypes.c_void_p
    libssl.SSL_CTX_new.argtypes = [ctypes.c_void_p]
    libssl.SSL_CTX_free.argtypes = [ctypes.c_void_p]
    libssl.SSL_new.restype = ctypes.c_void_p
    libssl.SSL_new.argtypes = [ctypes.c_void_p]
    libssl.SSL_free.argtypes = [ctypes.c_void_p]
    libssl.SSL_set_fd.argtypes = [ctypes.c_void_p, ctypes.c_int]
    libssl.SSL_connect.argtypes = [ctypes.c_void_p]
    libssl.SSL_get_verify_result.restype = ctypes.c_long
    libssl.SSL_get_verify_result.argtypes = [ctypes.c_void_p]
    return libssl


@pytest.mark.parametrize("pinned, connects", [("other-root.pem", False), ("root.pem", True)])
def test_configure_ssl_ctx_applies_policy_wide_pins(pki, pinned, connects):
    libssl = _libssl()
    server = Server(mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"),
                                  session_tickets=False), 1)
    ctx = libssl.SSL_CTX_new(libssl.TLS_method())
    sock = socket.create_connection(("127.0.0.1", server.listener.port))  # blocking, for SSL_connect
    ssl = None
    try:
        policy = mtls.Policy(anchors=[cert(pki, "root.pem")], pins=[pin(pki, pinned)])
        mtls.configure_ssl_ctx(ctx, identity(pki, "client-a"), policy)
        ssl = libssl.SSL_new(ctx)
        assert libssl.SSL_set_fd(ssl, sock.fileno()) == 1
        mtls.set_ssl_peer(ssl, "127.0.0.1", server.listener.port, "server.test")
        assert (libssl.SSL_connect(ssl) == 1) is connects
        # Refused by our evaluation (a pin failure is X509_V_ERR_CERT_REJECTED, 28), not anything else.
        assert libssl.SSL_get_verify_result(ssl) == (0 if connects else 28)
    finally:
        if ssl:
            libssl.SSL_free(ssl)
        libssl.SSL_CTX_free(ctx)
        sock.close()
        server.join()


def test_policy_verify_as_does_not_shadow_a_wildcard_rules_anchors(pki):
    # Default anchors: other-root; the **.test rule: the root only. Adding a policy-wide verify_as
    # must not add a rule for the host that would fall back to the default anchors.
    policy = mtls.Policy(anchors=[cert(pki, "other-root.pem")], verify_as="server.test",
                         host_rules=[mtls.HostRule("**.test", anchors=[cert(pki, "root.pem")])])
    r = policy.evaluate(chain(pki, "other-server"), host="x.test")
    assert not r.trusted, r
    r = policy.evaluate(chain(pki, "server"), host="x.test")
    assert r.trusted, r
    assert r.provenance["rule"] == "**.test" and r.provenance["anchors"] == ["rule"]
    assert r.provenance["name"] == "server.test" and r.provenance["name_from"] == "policy"
    # Through a connection reaching a server of the other root as x.test (a wrapped socket).
    server = Server(mtls.Listener(identity(pki, "other-server", "other-root"), client_auth="none"), 1)
    sock = socket.create_connection(("127.0.0.1", server.listener.port))
    try:
        with pytest.raises(errors.TrustError) as e:
            mtls.Connection.wrap(sock, "x.test", server.listener.port, policy=policy, handshake_timeout=10)
        assert "host rule **.test" in str(e.value)
    finally:
        sock.close()
        server.join()


def test_each_connection_gets_its_own_verify_as(pki):
    policy = mtls.Policy(anchors=[cert(pki, "root.pem")], verify_as="server.test")
    server = Server(mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem")), 3)
    port = server.listener.port
    assert talk(connect(pki, port, policy=policy)) == b"ping"  # the policy's verify_as
    with pytest.raises(errors.TrustError) as e:
        connect(pki, port, policy=policy, verify_as="wrong.test")  # its own, over the policy's
    assert "name_mismatch" in e.value.evaluation.codes
    assert e.value.evaluation.provenance["name_from"] == "override"
    with connect(pki, port, policy=policy, verify_as="server.test") as c:
        assert c.evaluation.provenance["name"] == "server.test"
        c.write(b"x")
        assert c.read() == b"x"
    assert policy.verify_as == "server.test" and policy.pins == []  # the caller's policy as it was
    server.join()


def test_connection_pins_are_enforced_under_a_report_only_rule(pki):
    wrong = "sha256/" + "A" * 43 + "="
    reports = []
    policy = mtls.Policy(anchors=[cert(pki, "root.pem")], verify_as="server.test",
                         host_rules=[{"host": "127.0.0.1", "pins": [wrong], "enforcement": "report_only"}],
                         report=lambda *a: reports.append(a))
    server = Server(mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem")), 3)
    port = server.listener.port
    assert talk(connect(pki, port, policy=policy)) == b"ping"  # the rule only reports
    assert reports
    with pytest.raises(errors.TrustError) as e:
        connect(pki, port, policy=policy, pins=[wrong])
    pins = e.value.evaluation.provenance["pins"]
    assert pins == [{"from": "rule", "enforced": False, "matched": None},
                    {"from": "override", "enforced": True, "matched": None}], pins
    assert talk(connect(pki, port, policy=policy, pins=[pin(pki, "int-a.pem")])) == b"ping"
    server.join()


def test_evaluate_overrides_leave_the_policy_alone(pki):
    policy = mtls.Policy(anchors=[cert(pki, "root.pem")])
    r = policy.evaluate(chain(pki, "server"), host="127.0.0.1:8443",
                        overrides=mtls.Overrides(verify_as="server.test", pins=[pin(pki, "root.pem")]))
    assert r.trusted, r
    assert r.provenance["name_from"] == "override"
    r = policy.evaluate(chain(pki, "server"), host="127.0.0.1:8443")
    assert not r.trusted and "name_mismatch" in r.codes  # nothing stayed behind
    assert policy.verify_as is None and policy.pins == []
    with pytest.raises(errors.InvalidArgument):
        policy.evaluate(chain(pki, "server"), host="127.0.0.1", overrides=mtls.Overrides(verify_as=""))
