"""The listener's first-byte deadline and per-address cap from Python (issue 23, defect 7): a
client that connects and says nothing is closed when its first_byte_timeout is over, unreported,
while real clients are served; the keywords reach the C options (version 2). Issue 35 item 8: a
part of a ClientHello holds no slot either, and is closed at client_hello_timeout (version 3)."""
import socket
import threading

import pytest

import mtls
from conftest import anchored, identity


def _serve_in_background(listener, accepts):
    """Accepts `accepts` times on a thread, echoing once per client: (thread, accepted subjects,
    errors)."""
    accepted, errors = [], []

    def serve():
        for _ in range(accepts):
            try:
                with listener.accept(timeout=5) as c:
                    accepted.append(c.peer_chain[0].subject_summary)
                    c.write(c.read())
            except mtls.Error as e:
                errors.append(e)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t, accepted, errors


def _real_client(pki, port):
    with mtls.connect("127.0.0.1", port, identity=identity(pki, "client-a"),
                      policy=anchored(pki, "root.pem"), verify_as="server.test") as c:
        c.write(b"hi")
        assert c.read() == b"hi"


def test_silent_client_is_closed_unreported_and_real_clients_are_served(pki):
    with mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"),
                       first_byte_timeout=0.3, max_handshakes_per_address=4) as listener:
        t, accepted, errors = _serve_in_background(listener, 2)
        silent = [socket.create_connection(("127.0.0.1", listener.port)) for _ in range(20)]
        for s in silent:
            s.settimeout(5)
            assert s.recv(1) == b""  # the listener hung up on it
            s.close()
        for _ in range(2):
            _real_client(pki, listener.port)
        t.join(10)
        assert accepted == ["client-a", "client-a"] and errors == []  # nothing reported for the silent ones


def test_part_of_a_client_hello_is_closed_at_client_hello_timeout(pki):
    """Issue 35 item 8: one byte, or a record header that promises a ClientHello, takes no
    handshake slot: the socket is closed when client_hello_timeout is over, though its first byte
    came in time, and reported as a refused handshake (Timeout) as it was when it took a slot;
    real clients are served meanwhile."""
    with mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"),
                       client_hello_timeout=0.4, ipv6_source_prefix_length=48) as listener:
        t, accepted, errors = _serve_in_background(listener, 3)
        partial = []
        for head in (b"\x16", b"\x16\x03\x01\x02\x00\x01"):
            s = socket.create_connection(("127.0.0.1", listener.port))
            s.sendall(head)
            s.settimeout(5)
            partial.append(s)
        _real_client(pki, listener.port)
        for s in partial:
            try:
                assert s.recv(1) == b""  # the listener hung up on it...
            except ConnectionResetError:
                pass  # ...with its bytes unread, so the kernel says so with a reset
            s.close()
        t.join(20)
        assert accepted == ["client-a"]
        assert len(errors) == 2 and all(isinstance(e, mtls.Timeout) and "ClientHello" in str(e) for e in errors), errors
        assert listener.refused_count(mtls.Timeout) == 2


def test_ipv6_source_prefix_longer_than_an_address_is_refused(pki):
    with pytest.raises(mtls.InvalidArgument, match="prefix"):
        mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"), ipv6_source_prefix_length=129)
