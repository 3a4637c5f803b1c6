"""A read tells a clean close (close_notify) from a peer that just hangs up (issue 23, defect 9):
Connection.read raises TruncatedError unless suppress_ragged_eofs=True, and the HTTP adapters
keep a response delimited by the end of the connection (HTTP/1.0 without Content-Length) only
when it ended with close_notify. The peer is Python's ssl server, which sends close_notify on
unwrap() and skips it on shutdown()."""
import socket
import ssl
import threading

import httpx
import pytest
import requests

import mtls
import mtls.httpx
import mtls.requests
from conftest import anchored

CLOSE_DELIMITED = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"x" * 3000 + b"end"
WITH_LENGTH = b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello"


class Server:
    """Serves each client `reply` after its request, then closes with close_notify (`clean`) or
    without it."""

    def __init__(self, pki, reply: bytes, clean: bool) -> None:
        self.reply, self.clean = reply, clean
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        chain = pki / "server-with-int.pem"
        chain.write_text((pki / "server.pem").read_text() + (pki / "int-a.pem").read_text())
        ctx.load_cert_chain(str(chain), str(pki / "server.key"))
        self.ctx = ctx
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.ctx.wrap_socket(raw, server_side=True) as s:
                    s.recv(4096)
                    s.sendall(self.reply)
                    if self.clean:
                        s.unwrap()  # close_notify
                    else:
                        s.shutdown(socket.SHUT_RDWR)  # the TCP connection ends, no close_notify
            except (OSError, ssl.SSLError):
                pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def serve(pki):
    servers = []

    def start(reply: bytes, clean: bool) -> Server:
        s = Server(pki, reply, clean)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.close()


def read_all(conn: mtls.Connection) -> bytes:
    data = b""
    while True:
        chunk = conn.read()
        if not chunk:
            return data
        data += chunk


def test_read_raises_truncated_when_the_peer_closes_without_close_notify(pki, serve):
    server = serve(CLOSE_DELIMITED, clean=False)
    with mtls.connect("127.0.0.1", server.port, policy=anchored(pki, "root.pem"), verify_as="server.test") as c:
        c.write(b"GET / HTTP/1.0\r\n\r\n")
        got = b""
        with pytest.raises(mtls.TruncatedError) as e:
            while True:
                chunk = c.read()
                assert chunk, "a clean end of data where the peer sent no close_notify"
                got += chunk
        assert got == CLOSE_DELIMITED  # what came before the hang-up was delivered
        assert e.value.code == mtls.errors.TruncatedError.code == -48 and e.value.name == "truncated"
        assert isinstance(e.value, ConnectionError) and "close_notify" in str(e.value)


def test_suppress_ragged_eofs_reads_a_hang_up_as_the_end(pki, serve):
    server = serve(CLOSE_DELIMITED, clean=False)
    with mtls.connect("127.0.0.1", server.port, policy=anchored(pki, "root.pem"), verify_as="server.test",
                      suppress_ragged_eofs=True) as c:
        c.write(b"GET / HTTP/1.0\r\n\r\n")
        assert read_all(c) == CLOSE_DELIMITED
        assert c.read() == b"" and c.readinto(bytearray(8)) == 0


def test_clean_close_is_the_end_of_data(pki, serve):
    server = serve(CLOSE_DELIMITED, clean=True)
    with mtls.connect("127.0.0.1", server.port, policy=anchored(pki, "root.pem"), verify_as="server.test") as c:
        c.write(b"GET / HTTP/1.0\r\n\r\n")
        assert read_all(c) == CLOSE_DELIMITED


def test_requests_keeps_a_close_delimited_body_only_when_it_ended_cleanly(pki, serve):
    policy = anchored(pki, "root.pem")
    clean, cut, sized = serve(CLOSE_DELIMITED, True), serve(CLOSE_DELIMITED, False), serve(WITH_LENGTH, False)
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(policy=policy, verify_as="server.test"))
        r = s.get(f"https://127.0.0.1:{clean.port}/")
        assert r.status_code == 200 and r.content == b"x" * 3000 + b"end"
        # The body's end is the connection's end: without close_notify it may be cut short.
        with pytest.raises(requests.exceptions.RequestException):
            s.get(f"https://127.0.0.1:{cut.port}/")
        # A body with its own length is complete whatever the hang-up after it.
        r = s.get(f"https://127.0.0.1:{sized.port}/")
        assert r.status_code == 200 and r.content == b"hello"


def test_httpx_keeps_a_close_delimited_body_only_when_it_ended_cleanly(pki, serve):
    policy = anchored(pki, "root.pem")
    clean, cut, sized = serve(CLOSE_DELIMITED, True), serve(CLOSE_DELIMITED, False), serve(WITH_LENGTH, False)
    with httpx.Client(transport=mtls.httpx.Transport(policy=policy, verify_as="server.test")) as client:
        r = client.get(f"https://127.0.0.1:{clean.port}/")
        assert r.status_code == 200 and r.content == b"x" * 3000 + b"end"
        with pytest.raises((httpx.HTTPError, mtls.TruncatedError)):
            client.get(f"https://127.0.0.1:{cut.port}/")
        r = client.get(f"https://127.0.0.1:{sized.port}/")
        assert r.status_code == 200 and r.content == b"hello"


def test_http_client_and_urllib_keep_a_close_delimited_body_only_when_it_ended_cleanly(pki, serve):
    import urllib.request

    import mtls.http
    clean, cut = serve(CLOSE_DELIMITED, True), serve(CLOSE_DELIMITED, False)
    opener = urllib.request.build_opener(mtls.http.HTTPSHandler(policy=anchored(pki, "root.pem"), verify_as="server.test"))
    assert opener.open(f"https://127.0.0.1:{clean.port}/").read() == b"x" * 3000 + b"end"
    with pytest.raises(mtls.TruncatedError):
        opener.open(f"https://127.0.0.1:{cut.port}/").read()
