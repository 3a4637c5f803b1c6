"""Connections through the C ABI from Python: a libmtls listener and client on 127.0.0.1, made
with a PKI generated at run time (scripts/test-pki.sh)."""
import ctypes
import ctypes.util
import select
import socket
import threading

import pytest

import mtls
from mtls import errors

import pha_server
from conftest import anchored, identity


@pytest.fixture
def server(pki):
    """A listener for customer A's clients; yields (port, results), results filled per client."""
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"), alpn=["echo/1"])
    results = []

    def run(count):
        for _ in range(count):
            try:
                with listener.accept(timeout=10) as c:
                    results.append((c.peer_chain[0].subject_summary, c.evaluation.trusted, c.alpn, c.tls_version))
                    c.write(c.read())
            except mtls.MTLSError as e:
                results.append(e)

    threads = []

    def start(count=1):
        t = threading.Thread(target=run, args=(count,), daemon=True)
        t.start()
        threads.append(t)
        return listener.port

    yield start, results
    for t in threads:
        t.join(15)
    listener.close()


def client(pki, port, **kw):
    kw.setdefault("identity", identity(pki, "client-a"))
    kw.setdefault("policy", anchored(pki, "root.pem"))
    kw.setdefault("verify_as", "server.test")
    kw.setdefault("handshake_timeout", 10)
    return mtls.Connection.connect("127.0.0.1", port, **kw)


def test_client_and_listener_agree(pki, server):
    start, results = server
    port = start()
    with client(pki, port, alpn=["echo/1"]) as c:
        assert c.tls_version == "TLSv1.3" and c.alpn == "echo/1" and not c.resumed
        assert [x.subject_summary for x in c.peer_chain] == ["server.test", "Customer A CA"]
        ev = c.evaluation
        assert ev.trusted and ev.kind == "proceed"
        assert c.presented_identity.leaf.subject_summary == "client-a"
        assert c.write(b"ping") == 4
        assert c.read() == b"ping"
        assert c.fileno() >= 0
        c.shutdown()
    assert results[0] == ("client-a", True, "echo/1", "TLSv1.3")


def test_tls12_and_wrapped_socket(pki, server):
    start, results = server
    port = start()
    sock = socket.create_connection(("127.0.0.1", port))
    with mtls.Connection.wrap(sock, "127.0.0.1", port, identity=identity(pki, "client-a"),
                              policy=anchored(pki, "root.pem"), verify_as="server.test", max_tls="1.2") as c:
        assert c.tls_version == "TLSv1.2"
        c.write(b"x")
        assert c.read() == b"x"
    sock.close()


def test_other_customer_is_refused_by_the_server(pki, server):
    start, results = server
    port = start()
    with client(pki, port, identity=identity(pki, "client-b", "int-b")) as c:
        c.write(b"ping")
        with pytest.raises(errors.PeerAlert):
            c.read()
    for _ in range(100):
        if results:
            break
        threading.Event().wait(0.05)
    assert isinstance(results[0], errors.Untrusted)


def test_automatic_identity_chooses_by_ca_list(pki, server):
    start, results = server
    port = start()
    with client(pki, port, identity=None,
                candidates=[identity(pki, "client-c", "int-c"), identity(pki, "client-a")]) as c:
        assert c.presented_identity.leaf.subject_summary == "client-a"
        c.write(b"auto")
        assert c.read() == b"auto"


def test_no_matching_identity_names_the_cas(pki, server):
    start, results = server
    port = start()
    with pytest.raises(errors.NoMatchingIdentity, match="Customer A CA"):
        client(pki, port, identity=None, candidates=[identity(pki, "client-c", "int-c")])


def test_untrusted_server_keeps_the_evaluation(pki, server):
    start, results = server
    port = start()
    c = client(pki, port, policy=anchored(pki, "other-root.pem"), handshake=False)
    with pytest.raises(errors.Untrusted, match="our evaluation") as e:
        c.handshake()
    assert c.evaluation.trusted is False and c.evaluation.reasons
    # Issue 38: each code once ("[unknown_issuer, certificate 1]", not followed by "[unknown_issuer]"),
    # and the message says what to do next.
    for code in e.value.codes:
        assert str(e.value).count(code) == 1, str(e.value)
    assert "as an anchor" in str(e.value) and "anchors= in Python" in str(e.value), str(e.value)
    assert len(c.peer_chain) == 2
    c.close()


def test_refused_and_bad_arguments(pki):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(errors.ConnectError):
        mtls.Connection.connect("127.0.0.1", port)
    with pytest.raises(ValueError):
        mtls.Connection.connect("127.0.0.1", port, min_tls="1.1")
    with pytest.raises(ValueError):
        mtls.Listener(identity(pki, "server"), client_auth="sometimes")


def test_listener_ca_names_none_or_a_given_list(pki):
    """client_ca_names: the certificate request names the client anchors (default), nothing
    ("none"), or the certificates given; who is trusted does not change."""
    def serve(names, client_id):
        listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"),
                                 client_ca_names=names)
        outcome = []

        def run():
            try:
                with listener.accept(timeout=10) as c:
                    outcome.append(c.peer_chain[0].subject_summary)
                    c.write(c.read())
            except mtls.MTLSError as e:
                outcome.append(e)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            c = client(pki, listener.port, identity=None, candidates=[client_id])
            presented = c.presented_identity.leaf.subject_summary
            try:
                c.write(b"x")
                c.read()
            except mtls.MTLSError:
                pass
            c.close()
        except errors.NoMatchingIdentity as e:
            presented = e
        t.join(15)
        listener.close()
        return presented, outcome

    # A list naming customer C's CA: customer A's identity fits no name.
    presented, _ = serve([mtls.Certificate.load(pki / "int-c.pem")], identity(pki, "client-a"))
    assert isinstance(presented, errors.NoMatchingIdentity) and "Customer C CA" in str(presented)
    # By default customer C's identity fits no name either; with none it is presented, and refused.
    presented, _ = serve("anchors", identity(pki, "client-c", "int-c"))
    assert isinstance(presented, errors.NoMatchingIdentity) and "Customer A CA" in str(presented)
    presented, outcome = serve("none", identity(pki, "client-c", "int-c"))
    assert presented == "client-c" and isinstance(outcome[0], errors.Untrusted), outcome
    presented, outcome = serve("none", identity(pki, "client-a"))
    assert presented == "client-a" and outcome == ["client-a"]
    with pytest.raises(ValueError):
        mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"), client_ca_names="all")


def test_clear_session_cache_then_connect_again(pki, server):
    start, results = server
    port = start(2)
    with client(pki, port) as c:
        c.write(b"1")
        assert c.read() == b"1"
    mtls.tls.clear_session_cache()
    with client(pki, port) as c:
        assert not c.resumed
        c.write(b"2")
        assert c.read() == b"2"


def test_configure_an_openssl_ssl_ctx(pki):
    libssl = ctypes.CDLL(ctypes.util.find_library("ssl"))
    libssl.TLS_method.restype = ctypes.c_void_p
    libssl.SSL_CTX_new.restype = ctypes.c_void_p
    libssl.SSL_CTX_new.argtypes = [ctypes.c_void_p]
    libssl.SSL_CTX_free.argtypes = [ctypes.c_void_p]
    ctx = libssl.SSL_CTX_new(libssl.TLS_method())
    try:
        mtls.configure_ssl_ctx(ctx, identity(pki, "client-a"), anchored(pki, "root.pem"))
        with pytest.raises(errors.InvalidArgument):
            mtls.configure_ssl_ctx(None)
    finally:
        libssl.SSL_CTX_free(ctx)


@pytest.mark.parametrize("tickets", [True, False])
def test_listener_session_tickets(pki, tickets):
    # A returning client resumes with the listener's ticket (the server still reports the
    # evaluation its ticket was issued under); without tickets every client is judged afresh.
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"), session_tickets=tickets)
    seen = []

    def run():
        for _ in range(2):
            with listener.accept(timeout=10) as c:
                seen.append((c.resumed, c.evaluation.trusted, c.peer_chain[0].subject_summary))
                c.write(c.read())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    policy, me = anchored(pki, "root.pem"), identity(pki, "client-a")  # one client: its session is reused
    for _ in range(2):
        with client(pki, listener.port, policy=policy, identity=me) as c:
            c.write(b"x")
            assert c.read() == b"x"
    t.join(15)
    listener.close()
    assert seen == [(False, True, "client-a"), (tickets, True, "client-a")], seen


def test_accepted_connection_switched_to_non_blocking_and_back(pki):
    """Listener connections are blocking (a read waits out io_timeout); set_non_blocking(True)
    makes the same read raise WantRead at once and keeps every byte; False restores waiting."""
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"), io_timeout=0.3)
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(listener.accept(timeout=10)), daemon=True)
    t.start()
    with client(pki, listener.port) as c:
        t.join(15)
        with accepted[0] as srv:
            with pytest.raises(errors.Timeout):
                srv.read()
            srv.set_non_blocking(True)
            with pytest.raises(errors.WantRead):
                srv.read()
            c.write(b"ping")
            poller = select.poll()
            poller.register(srv.fileno(), select.POLLIN)
            assert poller.poll(10000)
            assert srv.read() == b"ping"
            assert srv.write(b"pong") == 4
            assert c.read() == b"pong"
            srv.set_non_blocking(False)
            with pytest.raises(errors.Timeout):
                srv.read()
            c.write(b"back")
            assert srv.read() == b"back"
    listener.close()


def test_certificate_asked_for_after_the_handshake(pki):
    # TLS 1.3 post-handshake authentication (as Apache httpd asks per location): the request is
    # answered inside read() with the connection's identity.
    port, seen, t = pha_server.start(pki / "server-chain.pem", pki / "server.key", pki / "root.pem")
    with client(pki, port) as c:
        c.write(b"GET /admin\n")
        got = b""
        while not got.endswith(b"client-a\n"):
            chunk = c.read(100)
            if not chunk:
                break
            got += chunk
    t.join(10)
    assert "error" not in seen, seen
    assert seen["during handshake"] is None and seen["after"] == "client-a", seen
    assert got == b"asked\nhello client-a\n"


def test_reads_and_writes_take_any_buffer(pki, monkeypatch):
    """Connection.readinto and the socket-like object http.client reads and writes through
    (TLSSocket: recv_into, sendall) take every buffer a socket does: bytes land where the buffer
    points, a buffer of wider items is read as its bytes, a read-only or empty one is refused or
    reads nothing, and a write larger than one chunk is written whole."""
    from mtls._socket import TLSSocket
    import mtls._socket
    import array
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))

    def echo():
        with listener.accept(timeout=10) as c:
            while True:
                data = c.read()
                if not data:
                    return
                c.write(data)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    try:
        c = client(pki, listener.port)
        s = TLSSocket(c)
        buf = bytearray(b"........")
        c.write(b"abcd")
        assert c.readinto(memoryview(buf)[2:6]) == 4 and buf == bytearray(b"..abcd..")
        wide = array.array("H", [0, 0, 0, 0])
        c.write("é1234_7")  # text is written as UTF-8: 8 bytes
        assert c.readinto(wide) == 8 and wide.tobytes() == "é1234_7".encode()
        with pytest.raises(TypeError):
            c.readinto(b"read-only")
        with pytest.raises((TypeError, BufferError)):
            c.readinto(memoryview(bytearray(8))[::2])  # every other byte: not one run of memory
        assert c.readinto(bytearray()) == 0
        # sendall in chunks of 3 bytes (a write larger than one chunk), from a memoryview
        monkeypatch.setattr(mtls._socket, "_CHUNK", 3)
        s.sendall(memoryview(bytearray(b"0123456789")))
        s.sendall(b"abcdefg")
        got = bytearray()
        out = bytearray(32)
        while len(got) < 17:
            n = s.recv_into(out, 5)  # at most nbytes
            assert 0 < n <= 5 and out[n:] == bytearray(32)[n:]
            got += out[:n]
            out[:n] = bytearray(n)
        assert got == bytearray(b"0123456789abcdefg")
        c.shutdown()
        s.close()
    finally:
        t.join(10)
        listener.close()
