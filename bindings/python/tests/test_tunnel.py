"""The tunnel's library pieces from Python (issue 39): Connection.forward between a listener's
connection and a plain socket, half-close passed through; Connection.proxy_header; the
plaintext-address rule."""
import socket
import struct
import threading

import pytest

import mtls

from conftest import anchored, identity


def test_forward_passes_half_close_and_proxy_header_names_the_client(pki):
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))
    port = listener.port
    near, far = socket.socketpair()
    outcome = {}

    def serve():
        with listener.accept(timeout=10) as c:
            outcome["header"] = c.proxy_header(include_certificate=True)
            outcome["cert"] = c.peer_chain[0].der
            outcome["counts"] = c.forward(near, idle_timeout=10)

    def program():  # reads to the end of its input, then answers
        got = b""
        while chunk := far.recv(1024):
            got += chunk
        far.sendall(b"answer:" + got)
        far.close()
    threads = [threading.Thread(target=serve), threading.Thread(target=program)]
    for t in threads:
        t.start()
    with mtls.Connection.connect("127.0.0.1", port, identity=identity(pki, "client-a"),
                                 policy=anchored(pki, "root.pem"), verify_as="server.test") as c:
        c.write(b"hello")
        c.shutdown()
        reply = b""
        while chunk := c.read():
            reply += chunk
    for t in threads:
        t.join(20)
    near.close()
    listener.close()
    assert reply == b"answer:hello"
    assert outcome["counts"] == (5, 12)
    header = outcome["header"]
    assert header[:12] == b"\r\n\r\n\x00\r\nQUIT\n" and header[12:14] == b"\x21\x11"
    assert struct.unpack("!H", header[14:16])[0] == len(header) - 16
    assert header[16:20] == header[20:24] == socket.inet_aton("127.0.0.1")
    assert struct.unpack("!H", header[26:28])[0] == port
    assert b"\x22\x00\x08client-a" in header  # PP2_SUBTYPE_SSL_CN
    assert header.endswith(b"\xe0" + struct.pack("!H", len(outcome["cert"])) + outcome["cert"])


@pytest.mark.parametrize("address, local", [
    ("127.0.0.1:5432", True), ("[::1]:80", True), ("localhost:1", True), ("unix:/run/a.sock", True),
    ("/run/a.sock", True), ("10.0.0.1:80", False), ("0.0.0.0:80", False), ("db.internal:5432", False),
])
def test_address_is_local(address, local):
    assert mtls.address_is_local(address) is local


def test_address_that_is_none_is_refused():
    with pytest.raises(mtls.InvalidArgument):
        mtls.address_is_local("no-port")


def test_forwarder_runs_many_pairs_and_closes_the_rest(pki):
    """mtls.Forwarder: 8 pairs on one library thread, each passing its half-close both ways and
    reporting its bytes to done; a pair still running when the forwarder closes ends with Closed."""
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))
    forwarder = mtls.Forwarder(threads=1)
    results = {}
    ended = threading.Condition()

    def done_for(i):
        def done(error, from_tls, to_tls):
            with ended:
                results[i] = (error, from_tls, to_tls)
                ended.notify_all()
        return done

    fars, detached = [], []

    def accept_all():  # the listener's accepting thread hands each connection over
        for i in range(9):
            near, far = socket.socketpair()
            fars.append(far)
            forwarder.add(listener.accept(timeout=10), near, idle_timeout=20, done=done_for(i))
            detached.append(near.fileno() == -1)  # the forwarder closes it
    adder = threading.Thread(target=accept_all)
    adder.start()
    clients = [mtls.Connection.connect("127.0.0.1", listener.port, identity=identity(pki, "client-a"),
                                       policy=anchored(pki, "root.pem"), verify_as="server.test") for _ in range(9)]
    adder.join(20)
    assert detached == [True] * 9
    assert forwarder.active == 9
    for i in range(8):
        clients[i].write(b"hello %d" % i)
        clients[i].shutdown()
        got = b""
        while chunk := fars[i].recv(1024):
            got += chunk
        assert got == b"hello %d" % i
        fars[i].sendall(b"answer")
        fars[i].shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := clients[i].read():
            reply += chunk
        assert reply == b"answer"
    with ended:
        assert ended.wait_for(lambda: len(results) == 8, timeout=20)
    assert all(results[i] == (None, len(b"hello %d" % i), 6) for i in range(8))
    assert forwarder.active == 1
    forwarder.close()
    with ended:
        assert ended.wait_for(lambda: len(results) == 9, timeout=20)
    assert isinstance(results[8][0], mtls.Closed)
    assert fars[8].recv(16) == b""  # the forwarder closed its end
    for s in fars:
        s.close()
    for c in clients:
        c.close()
    listener.close()
