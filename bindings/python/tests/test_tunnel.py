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
