"""Identities that change under a running listener and client (issue 26), through the C ABI:
a listener following a store label replaced by another store connection, a broken replacement,
a swapped client identity that is never resumed, counters, events, store expiry."""
import threading

import requests

import mtls
from mtls import IdentitySource, Store
from mtls.rotation import AnchorWatch

from conftest import anchored, identity
from waits import wait_until

KDF = {"kdf_log_n": 10, "create": True}  # cheap scrypt for tests; each test makes its stores


def serve(listener, count):
    seen = []

    def run():
        for _ in range(count):
            try:
                with listener.accept(timeout=10) as c:
                    seen.append((c.peer_chain[0].sha256_hex, c.resumed))
                    c.write(c.read())
            except mtls.MTLSError as e:
                seen.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, seen


def round_trip(pki, port, **kw):
    kw.setdefault("identity", identity(pki, "client-a"))
    kw.setdefault("policy", anchored(pki, "root.pem"))
    with mtls.Connection.connect("127.0.0.1", port, verify_as="server.test",
                                 handshake_timeout=10, **kw) as c:
        c.write(b"ping")
        c.read()
        return c.peer_chain[0].sha256_hex, c.resumed


def test_listener_follows_a_store_label_and_keeps_the_last_good(pki, tmp_path):
    path = str(tmp_path / "s.db")
    other = Store(path, "secret", **KDF)
    other.put_identity("srv", identity(pki, "server"))
    ours = Store(path, "secret", **KDF)
    source = IdentitySource.follow(ours, "srv")
    events = []
    source.set_event_callback(events.append)
    listener = mtls.Listener(None, identity_source=source, client_policy=anchored(pki, "int-a.pem"))
    t, seen = serve(listener, 3)
    server = identity(pki, "server").leaf.sha256_hex
    server_rsa = identity(pki, "server-rsa").leaf.sha256_hex
    assert round_trip(pki, listener.port, resume=False)[0] == server
    other.put_identity("srv", identity(pki, "server-rsa"), replace=True)
    wait_until(lambda: events, what="the rotation's event")
    assert round_trip(pki, listener.port, resume=False)[0] == server_rsa
    assert [e.kind for e in events] == ["identity_rotated"]
    assert events[0].sha256 == server_rsa
    # Another process deletes the row: the last good identity keeps serving, the failure is reported.
    other.delete("srv")
    wait_until(lambda: len(events) >= 2, what="the reload failure's event")
    assert round_trip(pki, listener.port, resume=False)[0] == server_rsa
    failed = [e for e in events if e.kind == "reload_failed"]
    assert len(failed) == 1 and failed[0].error is mtls.NotFound, events
    t.join(15)
    assert listener.counters["accepted"] == 3 and listener.counters["refused"] == 0
    assert "mtls_listener_handshakes_accepted_total 3" in listener.metrics()
    listener.close()


def test_swapped_client_identity_is_not_resumed(pki):
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))
    t, seen = serve(listener, 3)
    source = IdentitySource(identity(pki, "client-a"))
    # One policy object: sessions resume only under the policy that judged them.
    kw = {"identity": None, "identity_source": source, "min_tls": "1.3", "policy": anchored(pki, "root.pem")}
    round_trip(pki, listener.port, **kw)
    assert round_trip(pki, listener.port, **kw)[1] is True  # same identity: resumed
    source.set(identity(pki, "client-a-rsa"))
    assert round_trip(pki, listener.port, **kw)[1] is False
    t.join(15)
    assert seen[2] == (identity(pki, "client-a-rsa").leaf.sha256_hex, False)
    assert listener.counters["resumed"] == 1
    listener.set_identity(identity(pki, "server-rsa"))
    listener.close()


def test_store_expiry_and_metrics(pki, tmp_path):
    with Store(str(tmp_path / "e.db"), "secret", **KDF) as st:
        st.put_identity("we\"ird\\label", identity(pki, "client-a"))
        items = st.expiry()
        assert [(i.label, i.item_class, i.position) for i in items][0][0] == "we\"ird\\label"
        assert {i.position for i in items} == {0, 1}
        when, label = st.earliest_expiry()
        assert label == "we\"ird\\label" and when == min(i.not_after for i in items)
        text = st.metrics()
        assert 'label="we\\"ird\\\\label"' in text
        assert text.count("mtls_certificate_not_after_seconds{") == len(items)


def test_requests_adapter_presents_the_swapped_identity(pki):
    """The adapters take identity_source like every ConnectOptions field: a new connection
    presents the identity in force when it starts."""
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))

    def answer(count):
        for _ in range(count):
            with listener.accept(timeout=10) as c:
                c.read()
                body = c.peer_chain[0].subject_summary.encode()
                c.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))

    t = threading.Thread(target=answer, args=(2,), daemon=True)
    t.start()
    source = IdentitySource(identity(pki, "client-a"))
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity_source=source, policy=anchored(pki, "root.pem"),
                                                  verify_as="server.test"))
        assert s.get(f"https://127.0.0.1:{listener.port}/", timeout=10).text == "client-a"
        source.set(identity(pki, "client-a-rsa"))
        assert s.get(f"https://127.0.0.1:{listener.port}/", timeout=10).text == "client-a-rsa"
    t.join(15)
    listener.close()


def test_anchors_from_store_labels_follow_the_store(pki, tmp_path):
    path = str(tmp_path / "a.db")
    other = Store(path, "secret", **KDF)
    other.put_certificate("customer", mtls.Certificate.load(str(pki / "int-a.pem")))
    policy = mtls.Policy()
    watch = AnchorWatch(policy, Store(path, "secret", **KDF), ["customer"])
    events = []
    watch.set_event_callback(events.append)
    other.put_certificate("customer", mtls.Certificate.load(str(pki / "int-b.pem")), replace=True)
    wait_until(lambda: events, what="the reload's event")
    assert [e.kind for e in events] == ["policy_reloaded"]
    listener = mtls.Listener(identity(pki, "server"), client_policy=policy)
    t, seen = serve(listener, 1)
    # client-b (customer B's intermediate) is accepted now, under the anchor the store holds.
    round_trip(pki, listener.port, identity=identity(pki, "client-b", "int-b"), resume=False)
    t.join(15)
    assert seen[0][0] == identity(pki, "client-b", "int-b").leaf.sha256_hex
    listener.close()
