"""`mtls connect` tells a complete reply from a cut one (issue 23, defect 9): a server that hangs
up without close_notify gives exit status 1 and JSON with "error" set (error_code "truncated"),
"connected" false (as with every non-zero exit) with the handshake's facts and the partial
"response"; one that ends with close_notify is a success. The
server is Python's ssl, which sends close_notify on unwrap() and skips it on shutdown()."""
import json
import os
import socket
import ssl
import subprocess
import threading

import pytest

from conftest import run_cli

HERE = os.path.dirname(os.path.abspath(__file__))
PKI_SCRIPT = os.path.join(HERE, "..", "..", "scripts", "test-pki.sh")
REPLY = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + "x" * 2000 + "end"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("trunc-pki")
    subprocess.run([PKI_SCRIPT, str(d)], check=True, capture_output=True)
    (d / "server-with-int.pem").write_text((d / "server.pem").read_text() + (d / "int-a.pem").read_text())
    return d


@pytest.fixture
def server(pki):
    """start(clean) -> port of a server answering REPLY to one request, then closing with or
    without close_notify; stopped after the test."""
    started = []

    def start(clean):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki / "server-with-int.pem"), str(pki / "server.key"))
        sock = socket.create_server(("127.0.0.1", 0))

        def run():
            try:
                raw, _ = sock.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(raw, server_side=True) as s:
                    s.recv(4096)
                    s.sendall(REPLY.encode())
                    if clean:
                        s.unwrap()
                    else:
                        s.shutdown(socket.SHUT_RDWR)
            except (OSError, ssl.SSLError):
                pass

        t = threading.Thread(target=run, daemon=True)
        t.start()
        started.append((sock, t))
        return sock.getsockname()[1]
    yield start
    for sock, t in started:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        t.join(5)


def connect(pki, port):
    return run_cli("connect", f"127.0.0.1:{port}", "--anchor", pki / "root.pem", "--anchors-only",
                   "--verify-as", "server.test", "--send", "GET / HTTP/1.0\\r\\n\\r\\n", "--json", "--timeout", "10")


def test_connect_reports_a_reply_cut_without_close_notify(pki, server):
    r = connect(pki, server(clean=False))
    assert r.returncode != 0, r.stdout
    out = json.loads(r.stdout)
    assert out["error"] and "close_notify" in out["error"]
    assert out["error_code"] == "truncated" and out["side"] == "server"
    assert out["connected"] is False and out["evaluation"]["trusted"] is True and out["tls_version"]
    assert out["response"] == REPLY  # what came before the hang-up, kept
    for key in ("tls_version", "alpn", "peer_chain"):
        assert key in out


def test_connect_succeeds_when_the_reply_ends_with_close_notify(pki, server):
    r = connect(pki, server(clean=True))
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["error"] is None and out["connected"] is True and out["response"] == REPLY


def test_connect_without_json_says_truncated_in_one_line(pki, server):
    r = run_cli("connect", f"127.0.0.1:{server(clean=False)}", "--anchor", pki / "root.pem", "--anchors-only",
                "--verify-as", "server.test", "--send", "GET / HTTP/1.0\\r\\n\\r\\n", "--timeout", "10")
    assert r.returncode != 0
    assert "close_notify" in r.stderr
