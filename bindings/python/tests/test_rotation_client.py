"""Client identities that change (issue 26), audited on every Python client front end against
Python's own ssl module as the server (it checks each CertificateVerify with the certificate it
was sent, and keeps its own TLS 1.2 session-id cache and tickets):

- IdentitySource.set refuses what cannot be presented (not an Identity, expired, not yet valid)
  and the identity in force stays; an identity a connection's context refuses (a key below
  OpenSSL's security level) keeps the last good one there, reported once;
- a swap loop against handshakes from many threads (mtls.Connection, resumption on, TLS 1.3 and
  1.2): the server sees, for every connection, resumed or not, the certificate the client took;
- the adapters (requests, httpx sync and async, urllib, http.client) and mtls.asyncio streams
  given identity_source=: a kept-alive pooled connection keeps the identity it was made with
  (as Go's http.Transport, whose GetClientCertificate is per handshake), every new connection
  presents the identity in force when it starts and never resumes a session of the old one."""
import asyncio
import hashlib
import http.server
import ssl
import subprocess
import threading
import time
import urllib.request

import httpx
import pytest
import requests

import mtls
import mtls.asyncio
import mtls.http
import mtls.httpx
import mtls.requests
from mtls import IdentitySource
from mtls.pki import IssuedCertificate

from conftest import PKI_SCRIPT, anchored, identity


def sha(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest() if der else "none"


def server_context(pki, max_tls) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server-chain.pem", pki / "server.key")
    ctx.load_verify_locations(pki / "root.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.maximum_version = max_tls
    return ctx


class ClaimServer:
    """Each client writes the SHA-256 of the certificate it holds; the server compares it with the
    one its handshake gave it (a resumed session's: the one it was made with) and answers."""

    def __init__(self, pki, max_tls):
        self.ctx = server_context(pki, max_tls)
        self.sock = self.ctx.wrap_socket(__import__("socket").create_server(("127.0.0.1", 0)), server_side=True)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.seen, self.mismatched, self.resumed, self.failed = [], [], 0, 0
        self.threads = [threading.Thread(target=self._serve, daemon=True) for _ in range(4)]
        for t in self.threads:
            t.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except ssl.SSLError:
                with self.lock:
                    self.failed += 1
                continue
            except OSError:
                return
            with c:
                c.settimeout(10)
                claim = b""
                while len(claim) < 64:
                    part = c.recv(64 - len(claim))
                    if not part:
                        break
                    claim += part
                seen = sha(c.getpeercert(binary_form=True))
                with self.lock:
                    self.seen.append(seen)
                    self.resumed += c.session_reused
                    if claim.decode() != seen:
                        self.mismatched.append((claim.decode(), seen, c.session_reused))
                c.sendall(b"ok" if claim.decode() == seen else b"no")
                try:
                    c.unwrap()  # close_notify: the client's read of the end is not a truncation
                except (OSError, ValueError):
                    pass

    def close(self):
        self.sock.close()


@pytest.fixture
def expired_and_future():
    now = int(time.time())
    ca = IssuedCertificate.root("rotation python test CA", now=now - 30 * 86400)
    expired = ca.issue_client("expired-client", now=now - 20 * 86400, days=2).identity
    future = ca.issue_client("future-client", now=now + 10 * 86400, days=30).identity
    return expired, future


def test_set_refuses_what_cannot_be_presented(pki, expired_and_future):
    expired, future = expired_and_future
    a = identity(pki, "client-a")
    source = IdentitySource(a)
    events = []
    source.set_event_callback(events.append)
    with pytest.raises(TypeError):
        source.set(None)
    with pytest.raises(TypeError):
        source.set("client-a")  # a label is followed (IdentitySource.follow), not swapped in
    with pytest.raises(TypeError):  # an identity where a source is wanted: said, not an AttributeError
        mtls.Connection.connect("127.0.0.1", 1, identity_source=a)
    with pytest.raises(mtls.InvalidArgument, match="expired"):
        source.set(expired)
    with pytest.raises(mtls.InvalidArgument, match="not valid before"):
        source.set(future)
    assert source.current.leaf.sha256_hex == a.leaf.sha256_hex
    assert [(e.kind, e.error, e.sha256) for e in events] == [
        ("reload_failed", mtls.InvalidArgument, expired.leaf.sha256_hex),
        ("reload_failed", mtls.InvalidArgument, future.leaf.sha256_hex)]
    server = ClaimServer(pki, ssl.TLSVersion.TLSv1_3)
    try:
        with mtls.Connection.connect("127.0.0.1", server.port, identity_source=source, policy=anchored(pki, "root.pem"),
                                     verify_as="server.test", handshake_timeout=10) as c:
            c.write(c.presented_identity.leaf.sha256_hex.encode())
            assert c.read(2) == b"ok"
    finally:
        server.close()
    assert server.seen == [a.leaf.sha256_hex]


def test_an_identity_the_context_refuses_keeps_the_last_good_one_and_is_reported(pki, tmp_path):
    """An RSA-1024 client certificate (OpenSSL's security level 2 refuses it): libmtls's context
    presents the last identity it could, whole, and says so once; with none before it, the
    connection fails with HandshakeError (as a fixed identity does)."""
    for name in ("int-a.pem", "int-a.key"):
        (tmp_path / name).write_bytes((pki / name).read_bytes())
    subprocess.run([str(PKI_SCRIPT), "--leaf", str(tmp_path), "weak", "rsa1024", "weak-client", "int-a"], check=True,
                   capture_output=True)
    weak = mtls.Identity.from_pem((tmp_path / "weak.pem").read_text() + (pki / "int-a.pem").read_text(),
                                  (tmp_path / "weak.key").read_text())
    a = identity(pki, "client-a")
    server = ClaimServer(pki, ssl.TLSVersion.TLSv1_3)
    policy = anchored(pki, "root.pem")

    def connect(source):
        with mtls.Connection.connect("127.0.0.1", server.port, identity_source=source, policy=policy,
                                     verify_as="server.test", handshake_timeout=10, resume=False) as c:
            c.write(c.presented_identity.leaf.sha256_hex.encode())
            assert c.read(2) == b"ok"

    try:
        with pytest.raises(mtls.HandshakeError, match="too small"):
            connect(IdentitySource(weak))  # nothing to fall back on
        source = IdentitySource(a)
        events = []
        source.set_event_callback(events.append)
        connect(source)
        source.set(weak)  # the source takes it: another context may present it
        connect(source)
        connect(source)
    finally:
        server.close()
    assert server.seen == [a.leaf.sha256_hex] * 3  # never no certificate, never the refused one
    failed = [e for e in events if e.kind == "reload_failed"]
    assert len(failed) == 1 and failed[0].sha256 == weak.leaf.sha256_hex and failed[0].error is mtls.HandshakeError
    assert "client-a" in failed[0].message


@pytest.mark.parametrize("max_tls", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_swap_loop_against_handshakes_from_many_threads(pki, max_tls):
    a, b = identity(pki, "client-a"), identity(pki, "client-a-rsa")
    source = IdentitySource(a)
    policy = anchored(pki, "root.pem")
    server = ClaimServer(pki, max_tls)
    stop = threading.Event()
    failures = []

    def swap():
        i = 0
        while not stop.is_set():
            source.set(b if i % 2 else a)
            i += 1
            time.sleep(0.001)

    def clients():
        for _ in range(12):
            try:
                with mtls.Connection.connect("127.0.0.1", server.port, identity_source=source, policy=policy,
                                             verify_as="server.test", handshake_timeout=10, io_timeout=10) as c:
                    c.write(c.presented_identity.leaf.sha256_hex.encode())
                    if c.read(2) != b"ok":
                        failures.append("server saw another certificate")
            except mtls.MTLSError as e:
                failures.append(e)

    swapper = threading.Thread(target=swap)
    swapper.start()
    workers = [threading.Thread(target=clients) for _ in range(5)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    swapper.join()
    server.close()
    assert failures == [] and server.mismatched == [] and server.failed == 0
    assert len(server.seen) == 60
    assert {a.leaf.sha256_hex, b.leaf.sha256_hex} <= set(server.seen)
    assert 0 < server.resumed < 60  # resumption was exercised, and so were full handshakes


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = f"{self.client_address[1]} {sha(self.connection.getpeercert(binary_form=True))} " \
               f"{int(self.connection.session_reused)}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.path == "/close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def https_server(pki):
    """A keep-alive HTTPS server (Python's http.server over ssl, TLS 1.3 tickets) that answers
    "client-port client-certificate-sha256 resumed"."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.socket = server_context(pki, ssl.TLSVersion.TLSv1_3).wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def answer(text):
    port, cert, resumed = text.split()
    return int(port), cert, resumed == "1"


def swapped(pki):
    a, b = identity(pki, "client-a"), identity(pki, "client-a-rsa")
    return IdentitySource(a), a.leaf.sha256_hex, b, b.leaf.sha256_hex


def test_requests_pool_keeps_a_kept_alive_connection_and_new_ones_present_the_new_identity(pki, https_server):
    source, a, b, b_hex = swapped(pki)
    url = f"https://127.0.0.1:{https_server}"
    with requests.Session() as s:
        s.mount("https://", mtls.requests.Adapter(identity_source=source, policy=anchored(pki, "root.pem"),
                                                  verify_as="server.test"))
        port1, cert, _ = answer(s.get(url + "/", timeout=10).text)
        assert cert == a
        source.set(b)
        # The pooled connection made with A goes on (the server closes it after this answer).
        port2, cert, _ = answer(s.get(url + "/close", timeout=10).text)
        assert (port2, cert) == (port1, a)
        # A new connection presents B, in full: the session made with A is not resumed.
        port3, cert, resumed = answer(s.get(url + "/", timeout=10).text)
        assert port3 != port1 and cert == b_hex and not resumed


def test_httpx_pool_keeps_a_kept_alive_connection_and_new_ones_present_the_new_identity(pki, https_server):
    source, a, b, b_hex = swapped(pki)
    url = f"https://127.0.0.1:{https_server}"
    with httpx.Client(transport=mtls.httpx.Transport(identity_source=source, policy=anchored(pki, "root.pem"),
                                                      verify_as="server.test")) as client:
        port1, cert, _ = answer(client.get(url + "/").text)
        assert cert == a
        source.set(b)
        port2, cert, _ = answer(client.get(url + "/close").text)
        assert (port2, cert) == (port1, a)
        port3, cert, resumed = answer(client.get(url + "/").text)
        assert port3 != port1 and cert == b_hex and not resumed


def test_httpx_async_pool_keeps_a_kept_alive_connection_and_new_ones_present_the_new_identity(pki, https_server):
    source, a, b, b_hex = swapped(pki)
    url = f"https://127.0.0.1:{https_server}"

    async def run():
        transport = mtls.httpx.AsyncTransport(identity_source=source, policy=anchored(pki, "root.pem"),
                                              verify_as="server.test")
        async with httpx.AsyncClient(transport=transport) as client:
            port1, cert, _ = answer((await client.get(url + "/")).text)
            assert cert == a
            source.set(b)
            port2, cert, _ = answer((await client.get(url + "/close")).text)
            assert (port2, cert) == (port1, a)
            port3, cert, resumed = answer((await client.get(url + "/")).text)
            assert port3 != port1 and cert == b_hex and not resumed

    asyncio.run(run())


def test_urllib_and_http_client_present_the_identity_in_force_at_each_connection(pki, https_server):
    source, a, b, b_hex = swapped(pki)
    opts = dict(identity_source=source, policy=anchored(pki, "root.pem"), verify_as="server.test")
    opener = urllib.request.build_opener(mtls.http.HTTPSHandler(**opts))
    url = f"https://127.0.0.1:{https_server}/"
    assert answer(opener.open(url, timeout=10).read().decode())[1] == a
    source.set(b)
    _, cert, resumed = answer(opener.open(url, timeout=10).read().decode())
    assert cert == b_hex and not resumed
    conn = mtls.http.HTTPSConnection("127.0.0.1", https_server, timeout=10, **opts)
    conn.request("GET", "/")
    assert answer(conn.getresponse().read().decode())[1] == b_hex
    conn.close()


def test_asyncio_streams_present_the_identity_in_force_at_each_connection(pki):
    source, a, b, b_hex = swapped(pki)
    server = ClaimServer(pki, ssl.TLSVersion.TLSv1_3)
    policy = anchored(pki, "root.pem")  # one object: sessions resume only under the policy that judged them

    async def once():
        reader, writer = await mtls.asyncio.open_connection("127.0.0.1", server.port, identity_source=source,
                                                            policy=policy, verify_as="server.test")
        writer.write(writer.get_extra_info("presented_identity").leaf.sha256_hex.encode())
        assert await reader.readexactly(2) == b"ok"
        resumed = writer.get_extra_info("resumed")
        writer.close()
        await writer.wait_closed()
        return resumed

    try:
        asyncio.run(once())
        assert asyncio.run(once()) is True  # the same identity resumes
        source.set(b)
        assert asyncio.run(once()) is False  # the new one does not resume the old one's session
    finally:
        server.close()
    assert server.seen == [a, a, b_hex] and server.mismatched == []
