"""A peer that hangs up never kills the mtls command (nor any program linking libmtls): before
libmtls wrote with MSG_NOSIGNAL, `mtls connect --send` to a TLS 1.3 server that refused its
certificate died by SIGPIPE (exit 141, nothing printed) most of the time, and a client that sent a
request and hung up killed `mtls serve`. Peers are started here on 127.0.0.1 and stopped after."""
import json
import os
import signal
import socket
import ssl
import struct

import pytest

from conftest import free_port, run_cli
from test_tls import Peer, peers, pki  # noqa: F401  (fixtures)

TRIES = 10


def refusing_gnutls_server(pki, peers):
    """gnutls-serv requiring a client certificate under `root` (client-c is under root-2)."""
    port = free_port()
    p = Peer(["gnutls-serv", "--port", str(port), "--x509certfile", pki("server-chain.pem"),
              "--x509keyfile", pki("server.key"), "--x509cafile", pki("root.pem"),
              "--require-client-cert", "--verify-client-cert"], port)
    peers.append(p)
    return port


def refusing_s_server(pki, peers):
    port = free_port()
    p = Peer(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-quiet", "-cert", pki("server.pem"),
              "-cert_chain", pki("int-a.pem"), "-key", pki("server.key"), "-Verify", "1",
              "-CAfile", pki("root.pem"), "-verify_return_error"], port)
    peers.append(p)
    return port


def connect_and_send(pki, port, version):
    return run_cli("connect", f"127.0.0.1:{port}", "--json", "--timeout", "5", "--identity", pki("client-c.p12"),
                   "--password-file", pki("password.txt"), "--anchor", pki("root.pem"), "--anchors-only",
                   "--verify-as", "server.test", "--tls-min", version, "--tls-max", version,
                   "--send", "GET / HTTP/1.0\\r\\n\\r\\n")


@pytest.mark.parametrize("server", [refusing_gnutls_server, refusing_s_server])
@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_connect_send_to_server_refusing_our_certificate_survives(pki, peers, server, version):
    port = server(pki, peers)
    for _ in range(TRIES):
        r = connect_and_send(pki, port, version)
        assert r.returncode != -signal.SIGPIPE and r.returncode != 128 + signal.SIGPIPE, r
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        out = json.loads(r.stdout)
        assert not out["connected"]
        assert out["error_code"] in ("peer_alert", "closed", "handshake"), out
        assert out["side"] == "server", out


def tls_client_context(pki):
    ctx = ssl.create_default_context(cafile=pki("root.pem"))
    ctx.load_cert_chain(pki("client-a-chain.pem"), pki("client-a.key"))
    return ctx


def hang_up_with_reset(tls):
    """Closes without close_notify and with a TCP reset, so the server's next write meets EPIPE."""
    tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    tls.close()


def test_clients_hanging_up_do_not_kill_mtls_serve(pki, peers):
    port = free_port()
    serve = Peer([os.environ.get("MTLS_CLI", "mtls"), "serve", "--port", str(port), "--identity", pki("server.p12"),
                  "--password-file", pki("password.txt"), "--client-anchor", pki("int-a.pem"),
                  "--require-client-cert"], port)
    peers.append(serve)
    ctx = tls_client_context(pki)
    for i in range(TRIES):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            tls = ctx.wrap_socket(s, server_hostname="server.test")
            if i % 2:
                tls.sendall(b"GET / HTTP/1.0\r\n\r\n")   # the server answers a request...
            else:
                tls.sendall(b"x" * 200000)              # ...or echoes what it reads
            hang_up_with_reset(tls)
        assert serve.proc.poll() is None, serve.stop()
    # still serving
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="server.test") as tls:
            tls.sendall(b"GET / HTTP/1.0\r\n\r\n")
            reply = b""
            while True:
                chunk = tls.recv(4096)
                if not chunk:
                    break
                reply += chunk
    assert b"200 OK" in reply and b"hello client-a" in reply, reply
    assert serve.proc.poll() is None, serve.stop()
