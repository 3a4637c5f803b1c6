"""`mtls serve` and the listener's ClientHello deadline (issue 35 item 8): --client-hello-timeout
closes a client that sent a part of a ClientHello and stalled, a real client is served
meanwhile, --ipv6-source-prefix-length is checked, and serve raises its soft limit of open files
to the hard limit (a socket per client: the library never does this, the program does)."""
import resource
import socket
import ssl
import subprocess
import time

from conftest import CLI
from serve_support import Serve, make_pki


def _soft_and_hard_open_files(pid):
    for line in open(f"/proc/{pid}/limits"):
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no open files limit in /proc/PID/limits")


def test_serve_closes_a_stalled_client_hello_and_serves_a_real_client(tmp_path):
    make_pki(tmp_path, names=("one",))
    # serve starts with the usual soft limit (inherited), below its hard limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024, hard - 1) if hard != resource.RLIM_INFINITY else 1024, hard))
    try:
        serve = Serve("--identity", tmp_path / "one.p12", "--password-file", tmp_path / "pw",
                      "--client-hello-timeout", "0.5", "--ipv6-source-prefix-length", "56")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        port = serve.listening()
        soft, hard = _soft_and_hard_open_files(serve.proc.pid)
        assert soft == hard, (soft, hard)
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall(b"\x16")  # the first byte of a ClientHello, and nothing more
        sent = time.monotonic()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10)) as real:
            real.sendall(b"ping\n")
            assert real.recv(100) == b"ping\n"
        stalled.settimeout(10)
        try:
            assert stalled.recv(1) == b""
        except ConnectionResetError:
            pass  # closed with its byte unread
        waited = time.monotonic() - sent
        assert 0.4 <= waited < 5, waited
        stalled.close()
    finally:
        serve.stop()


def test_serve_refuses_an_ipv6_prefix_longer_than_an_address(tmp_path):
    make_pki(tmp_path, names=("one",))
    r = subprocess.run([CLI, "serve", "--identity", str(tmp_path / "one.p12"), "--password-file", str(tmp_path / "pw"),
                        "--ipv6-source-prefix-length", "129"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "prefix" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
