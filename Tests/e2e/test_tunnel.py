"""`mtls tunnel` (issue 39): curl and Python clients → `tunnel client` → `tunnel server` → a plain
Python http.server, TLS 1.3 and 1.2; refusals (untrusted, revoked by CRL); the plaintext-address
rule; PROXY protocol v2 read by nginx and by a decoder written here from the specification;
half-close; the status endpoint with the backend down; SIGTERM's drain; stunnel (Debian) as the
other end both ways. Every server listens on 127.0.0.1, on ephemeral ports."""
import http.client
import http.server
import json
import os
import re
import pathlib
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import CLI, free_port, require_tool, run_cli, wait_port, write_secret
from serve_support import Serve
from waits import wait_until


def ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0, f"mtls {' '.join(map(str, args))}: {r.stderr}"
    return r


class Tunnel(Serve):
    """`mtls tunnel ARGS`, its log lines in a queue (Serve's reading and waiting)."""

    def __init__(self, *args):  # noqa: super().__init__ would start `mtls serve`
        import queue
        self.proc = subprocess.Popen([CLI, "tunnel", *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = queue.Queue()
        self.seen = []
        self.timed = False
        threading.Thread(target=self._pump, daemon=True).start()

    def port_of(self, what):
        return int(self.wait_for(lambda line: line.startswith(f"{what} on ")).rsplit(":", 1)[1])


class Backend(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve_in_thread(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class ProxyDecoder(socketserver.BaseRequestHandler):
    """Reads a PROXY v2 header (proxy-protocol.txt 2.2, decoded here independently of libmtls)
    and answers with what it says as JSON."""

    def handle(self):
        def exactly(n):
            data = b""
            while len(data) < n:
                chunk = self.request.recv(n - len(data))
                if not chunk:
                    raise EOFError
                data += chunk
            return data
        head = exactly(16)
        assert head[:12] == b"\r\n\r\n\x00\r\nQUIT\n"
        ver_cmd, fam, length = head[12], head[13], struct.unpack("!H", head[14:16])[0]
        body = exactly(length)
        out = {"version": ver_cmd >> 4, "command": ver_cmd & 0xF, "family": fam}
        if fam == 0x11:
            src, dst, sport, dport = body[0:4], body[4:8], *struct.unpack("!HH", body[8:12])
            out.update(src=socket.inet_ntoa(src), dst=socket.inet_ntoa(dst), sport=sport, dport=dport)
            tlvs = body[12:]
        else:
            tlvs = b""
        while tlvs:
            t, n = tlvs[0], struct.unpack("!H", tlvs[1:3])[0]
            value, tlvs = tlvs[3:3 + n], tlvs[3 + n:]
            if t == 0x20:
                out["ssl_client"], out["ssl_verify"] = value[0], struct.unpack("!I", value[1:5])[0]
                sub = value[5:]
                while sub:
                    st, sn = sub[0], struct.unpack("!H", sub[1:3])[0]
                    out[{0x21: "ssl_version", 0x22: "ssl_cn", 0x23: "ssl_cipher", 0x24: "ssl_sig_alg",
                         0x25: "ssl_key_alg"}.get(st, hex(st))] = sub[3:3 + sn].decode()
                    sub = sub[3 + sn:]
            elif t == 0xE0:
                out["cert_der_hex"] = value.hex()
        self.request.recv(65536)  # the request itself
        answer = json.dumps(out).encode()
        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


class Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # 64 connections at once: socketserver's backlog of 5 overflows, and the backend then resets
    # some of them ("Connection reset by peer" on the tunnel's plaintext side).
    request_queue_size = 256


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Root → Customer A (publishing its CRL on 127.0.0.1) → server, alice, bob (revoked);
    Customer B → mallory. Each identity also as a .p12 (password file `pw`)."""
    base = tmp_path_factory.mktemp("tunnel")
    d, pw, www = base / "D", base / "pw", base / "www"
    write_secret(pw, "p12\n")
    crl_port = free_port()
    url = f"http://127.0.0.1:{crl_port}"
    ok("pki", "init", "--dir", d, "--name", "Tunnel Root", "--crl-url", f"{url}/root.crl")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A", "--crl-url", f"{url}/customer-a.crl")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer B")
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1",
       "--name", "server", "--p12", base / "server.p12", "--password-file", pw)
    for name, ca in (("alice", "Customer A"), ("bob", "Customer A"), ("mallory", "Customer B")):
        ok("pki", "issue", "client", "--dir", d, "--ca", ca, "--name", name, "--p12", base / f"{name}.p12",
           "--password-file", pw)
    ok("pki", "revoke", "--dir", d, "--ca", "Customer A", "--name", "bob", "--reason", "keyCompromise")
    ok("pki", "crl", "--dir", d, "--out", www)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(www))  # noqa: E731
    crl_server = serve_in_thread(Threaded(("127.0.0.1", crl_port), handler))

    class P:
        pass
    p = P()
    p.base, p.dir, p.pw = base, d, pw
    p.root = d / "root" / "cert.pem"
    p.int_a = d / "ca" / "customer-a" / "cert.pem"
    p.issued = lambda name, ca="customer-a": d / "ca" / ca / "issued" / name
    yield p
    crl_server.shutdown()


@pytest.fixture(scope="module")
def backend():
    server = serve_in_thread(Threaded(("127.0.0.1", 0), Backend))
    yield server.server_address[1]
    server.shutdown()


def identity(pki, name):
    return ["--identity", pki.base / f"{name}.p12", "--password-file", pki.pw]


def start_server(pki, target, *extra):
    t = Tunnel("server", "--listen", "127.0.0.1:0", "--target", target, *identity(pki, "server"),
               "--client-anchor", pki.int_a, *extra)
    return t, t.listening()


def start_client(pki, server_port, name="alice", *extra):
    t = Tunnel("client", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{server_port}", *identity(pki, name),
               "--anchor", pki.root, *extra)
    return t, t.listening()


@pytest.fixture(scope="module")
def tunnels(pki, backend):
    """One tunnel server (revocation hard, status and metrics endpoints) and two clients (TLS 1.3, 1.2)."""
    server, port = start_server(pki, f"127.0.0.1:{backend}", "--revocation", "hard", "--status-port", "0",
                                "--metrics-port", "0")
    status_port, metrics_port = server.port_of("status"), server.port_of("metrics")
    c13, p13 = start_client(pki, port)
    c12, p12 = start_client(pki, port, "alice", "--tls-max", "1.2")

    class T:
        pass
    t = T()
    t.server, t.port, t.status_port, t.metrics_port = server, port, status_port, metrics_port
    t.client = {"1.3": p13, "1.2": p12}
    t.client_proc = {"1.3": c13, "1.2": c12}
    yield t
    for proc in (c13, c12, server):
        proc.stop()


def get(port, path="/", timeout=20):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read().decode()


@pytest.mark.parametrize("version", ["1.3", "1.2"])
def test_curl_through_client_and_server_tunnels(tunnels, version):
    r = subprocess.run(["curl", "-sS", "--max-time", "20", f"http://127.0.0.1:{tunnels.client[version]}/curl-{version}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"hello /curl-{version}\n"
    line = tunnels.server.wait_for(lambda x: x.startswith("accepted ") and f"TLSv{version}" in x)
    assert "CN=alice" in line and "trusted" in line


def test_64_concurrent_python_streams(tunnels):
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda i: get(tunnels.client["1.3"], f"/stream/{i}"), range(64)))
    assert results == [(200, f"hello /stream/{i}\n") for i in range(64)]


def open_held_streams(port, n, streams):
    """Opens n streams to the tunnel client on `port`, each with a request head half sent (the
    backend holds it open), appended to `streams`."""
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(f"GET /held/{i} HTTP/1.0\r\nHost: x\r\n".encode())
        streams.append(s)


def finish_held_streams(streams):
    """Ends each held request head; every stream gets its whole answer."""
    for s in streams:
        s.sendall(b"\r\n")
    for i, s in enumerate(streams):
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        assert data.startswith(b"HTTP/1.0 200") and data.endswith(f"hello /held/{i}\n".encode()), (i, data)


def threads_of(proc):
    return len(os.listdir(f"/proc/{proc.proc.pid}/task"))


def test_64_open_streams_add_no_thread_to_either_tunnel(tunnels):
    """Forwarding costs no thread per connection (issue 39): with 64 streams held open through
    tunnel client → tunnel server (each request head left unfinished, so the backend waits), neither
    process has more threads than when idle, give or take a small constant."""
    client = tunnels.client_proc["1.3"]
    assert get(tunnels.client["1.3"], "/warm") == (200, "hello /warm\n")
    status = lambda: json.loads(get(tunnels.status_port, "/_status")[1])
    wait_until(lambda: status()["connections"] == 0, what="no connection open before the test")
    idle = {"client": threads_of(client), "server": threads_of(tunnels.server)}
    socks = []
    try:
        open_held_streams(tunnels.client["1.3"], 64, socks)
        wait_until(lambda: status()["connections"] >= 64, what="64 streams forwarded by the server")
        busy = {"client": threads_of(client), "server": threads_of(tunnels.server)}
        assert busy["client"] <= idle["client"] + 4, (idle, busy)
        assert busy["server"] <= idle["server"] + 4, (idle, busy)
        finish_held_streams(socks)
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("side", ["server", "client"])
def test_max_connections_holds_new_connections_until_one_closes(pki, backend, side):
    """--max-connections 2: two streams held open fill the tunnel; a third connection is not taken
    (the limit is logged, the status says 2 open) until one of the two closes, then it is
    forwarded and answered. Nothing is refused or lost."""
    limited = ["--max-connections", "2", "--status-port", "0"]
    server, port = start_server(pki, f"127.0.0.1:{backend}", *(limited if side == "server" else []))
    client, cport = start_client(pki, port, "alice", *(limited if side == "client" else []))
    watched = server if side == "server" else client
    status_port = watched.port_of("status")
    status = lambda: json.loads(get(status_port, "/_status")[1])  # noqa: E731
    held = []
    try:
        # listening() made sure the client tunnel's port answers: that probe is a connection too,
        # carried to the server and closed; it must be gone before the limit is counted.
        watched.wait_for(lambda x: x.startswith("closed "))
        open_held_streams(cport, 2, held)
        wait_until(lambda: status()["connections"] == 2, what="two streams forwarded")
        assert "2 connections open" in watched.wait_for(lambda x: x.startswith("connection limit reached"))
        third = socket.create_connection(("127.0.0.1", cport), timeout=30)
        third.sendall(b"GET /third HTTP/1.0\r\nHost: x\r\n\r\n")
        if side == "server":
            # The client tunnel's handshake with the server's listener ended: the connection is
            # there (the client's 4th: the probe, the two held streams, this one).
            while sum(line.startswith("connected ") for line in client.seen) < 4:
                client.wait_for(lambda x: x.startswith("connected "))
        else:
            # Not accepted: it waits in the listening socket's queue (ss's Recv-Q).
            def queued():
                out = subprocess.run(["ss", "-Hltn", f"sport = :{cport}"], capture_output=True, text=True).stdout.split()
                return int(out[1]) if len(out) > 1 else -1
            wait_until(lambda: queued() == 1, what="the third connection queued, not accepted")
        assert status()["connections"] == 2, watched.seen
        finish_held_streams(held[:1])
        held[0].close()
        data = b""
        while chunk := third.recv(65536):
            data += chunk
        third.close()
        assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"hello /third\n"), data
        held[1].sendall(b"\r\n")
        data = b""
        while chunk := held[1].recv(65536):
            data += chunk
        assert data.endswith(b"hello /held/1\n"), data
    finally:
        for s in held:
            s.close()
        client.stop()
        server.stop()


def test_max_connections_is_checked(pki, backend):
    r = run_cli("tunnel", "server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                "--client-anchor", pki.int_a, "--max-connections=-1")
    assert r.returncode != 0 and "--max-connections must not be negative" in r.stderr, r.stderr


def test_half_closed_client_still_gets_the_answer(tunnels):
    with socket.create_connection(("127.0.0.1", tunnels.client["1.3"]), timeout=20) as s:
        s.sendall(b"GET /half HTTP/1.0\r\nHost: x\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"hello /half\n")


@pytest.mark.parametrize("name, reason", [("bob", "revoked"), ("mallory", "unknown_issuer")])
def test_revoked_and_untrusted_clients_are_refused(pki, tunnels, name, reason):
    client, port = start_client(pki, tunnels.port, name)
    try:
        r = subprocess.run(["curl", "-sS", "--max-time", "20", f"http://127.0.0.1:{port}/"], capture_output=True, text=True)
        assert r.returncode != 0 and "hello" not in r.stdout
        line = tunnels.server.wait_for(lambda x: x.startswith("rejected ") and reason in x)
        assert "[untrusted]" in line and (name == "mallory" or f'"{name}"' in line), line
    finally:
        client.stop()


def test_crl_revocation_under_64_open_streams_refuses_the_revoked_client_and_breaks_no_stream(pki):
    """64 streams of alice are open (each request head half sent, so the backend holds it) while
    dave's certificate is revoked and the CRL republished; SIGHUP drops the cached CRLs; dave's
    next connection is refused with `revoked` named, and every one of alice's streams then
    finishes its request."""
    ok("pki", "issue", "client", "--dir", pki.dir, "--ca", "Customer A", "--name", "dave", "--p12", pki.base / "dave.p12",
       "--password-file", pki.pw)
    backend = serve_in_thread(Threaded(("127.0.0.1", 0), Backend))
    server, port = start_server(pki, f"127.0.0.1:{backend.server_address[1]}", "--revocation", "hard")
    alice, aport = start_client(pki, port)
    dave, dport = start_client(pki, port, "dave")
    streams = []
    try:
        assert get(dport, "/dave-before") == (200, "hello /dave-before\n")
        open_held_streams(aport, 64, streams)
        wait_until(lambda: sum(1 for line in server.seen + list(server.lines.queue) if line.startswith("accepted ")) >= 65,
                   what="64 streams of alice accepted")
        ok("pki", "revoke", "--dir", pki.dir, "--ca", "Customer A", "--name", "dave", "--reason", "keyCompromise")
        ok("pki", "crl", "--dir", pki.dir, "--out", pki.base / "www")
        server.proc.send_signal(signal.SIGHUP)
        server.wait_for(lambda x: x.startswith("SIGHUP"))

        def dave_refused():
            try:
                get(dport, "/dave-after", timeout=10)
                return False
            except (OSError, urllib.error.URLError, http.client.HTTPException):
                return True
        wait_until(dave_refused, what="dave refused")
        line = server.wait_for(lambda x: x.startswith("rejected ") and "revoked" in x)
        assert "dave" in line and "[untrusted]" in line, line
        finish_held_streams(streams)
        assert get(aport, "/alice-after") == (200, "hello /alice-after\n")
    finally:
        for s in streams:
            s.close()
        for proc in (dave, alice, server):
            proc.stop()
        backend.shutdown()


def test_tunnel_server_allow_list_admits_one_client_and_names_the_rule_refusing_another(pki, backend):
    """--allow-cn on the tunnel server: alice (allowed) reaches the backend; a trusted client that is
    not on the list (carol, same customer CA) is refused and the log names the flag."""
    ok("pki", "issue", "client", "--dir", pki.dir, "--ca", "Customer A", "--name", "carol",
       "--p12", pki.base / "carol.p12", "--password-file", pki.pw)
    server, port = start_server(pki, f"127.0.0.1:{backend}", "--allow-cn", "alice")
    try:
        alice, alice_port = start_client(pki, port, "alice")
        carol, carol_port = start_client(pki, port, "carol")
        try:
            assert get(alice_port, "/allowed") == (200, "hello /allowed\n")
            r = subprocess.run(["curl", "-sS", "--max-time", "20", f"http://127.0.0.1:{carol_port}/"],
                               capture_output=True, text=True)
            assert r.returncode != 0 and "hello" not in r.stdout
            line = server.wait_for(lambda x: x.startswith("rejected ") and "not_allowed" in x)
            assert "carol" in line and "--allow-cn" in line, line
        finally:
            alice.stop()
            carol.stop()
    finally:
        server.stop()


def test_tunnel_client_allow_list_refuses_a_server_it_does_not_name(pki, tunnels):
    """--allow-dns on the tunnel client: the server's certificate (DNS localhost) must match."""
    good, good_port = start_client(pki, tunnels.port, "alice", "--allow-dns", "localhost")
    bad, bad_port = start_client(pki, tunnels.port, "alice", "--allow-dns", "*.example.com")
    try:
        assert get(good_port, "/dns-ok") == (200, "hello /dns-ok\n")
        r = subprocess.run(["curl", "-sS", "--max-time", "20", f"http://127.0.0.1:{bad_port}/"],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "hello" not in r.stdout
        line = bad.wait_for(lambda x: "not_allowed" in x or "not allowed" in x)
        assert "--allow-dns" in line, line
    finally:
        good.stop()
        bad.stop()


def test_status_and_metrics_endpoints(pki, tunnels):
    assert get(tunnels.client["1.3"], "/m")[0] == 200
    status, body = get(tunnels.status_port, "/_status?check=target")
    assert status == 200
    doc = json.loads(body)
    assert doc["status"] == "ok" and doc["target_reachable"] is True
    status, text = get(tunnels.metrics_port, "/metrics")
    assert status == 200
    assert 'mtls_tunnel_bytes_total{direction="from_tls"}' in text
    assert "mtls_tunnel_certificate_not_after_seconds{" in text
    assert "mtls_listener_handshakes_accepted_total" in text


def test_backend_down_makes_status_503(pki):
    dead = free_port()
    server, _ = start_server(pki, f"127.0.0.1:{dead}", "--status-port", "0")
    try:
        status_port = server.port_of("status")
        assert get(status_port, "/_status")[0] == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            get(status_port, "/_status?check=target")
        assert e.value.code == 503
        assert json.loads(e.value.read())["target_reachable"] is False
    finally:
        server.stop()


@pytest.mark.parametrize("args, flag", [
    (["server", "--listen", "127.0.0.1:0", "--target", "192.0.2.10:80"], "--unsafe-target"),
    (["server", "--listen", "127.0.0.1:0", "--target", "db.example:5432"], "--unsafe-target"),
    (["client", "--listen", "0.0.0.0:0", "--target", "127.0.0.1:1"], "--unsafe-listen"),
    (["client", "--listen", "[::]:0", "--target", "127.0.0.1:1"], "--unsafe-listen"),
])
def test_plaintext_off_loopback_is_refused(pki, args, flag):
    r = run_cli("tunnel", *args, *identity(pki, "server"), "--client-anchor" if args[0] == "server" else "--anchor", pki.root)
    assert r.returncode != 0
    assert flag in r.stderr and "plaintext" in r.stderr


def test_unsafe_listen_allows_it(pki):
    client = Tunnel("client", "--listen", "0.0.0.0:0", "--unsafe-listen", "--target", "127.0.0.1:1",
                    *identity(pki, "alice"), "--anchor", pki.root)
    try:
        assert client.listening() > 0
    finally:
        client.stop()


def test_proxy_protocol_v2_decoded_with_the_client_subject(pki):
    decoder = serve_in_thread(Threaded(("127.0.0.1", 0), ProxyDecoder))
    server, port = start_server(pki, f"127.0.0.1:{decoder.server_address[1]}", "--proxy-protocol",
                                "--proxy-protocol-certificate")
    client, cport = start_client(pki, port)
    try:
        status, body = get(cport, "/pp")
        out = json.loads(body)
        assert (out["version"], out["command"], out["family"]) == (2, 1, 0x11)
        assert out["src"] == "127.0.0.1" and out["dst"] == "127.0.0.1" and out["dport"] == port
        assert out["ssl_cn"] == "alice" and out["ssl_version"] == "TLSv1.3" and out["ssl_verify"] == 0
        assert out["ssl_client"] & 0x07 == 0x07 and out["ssl_key_alg"] == "EC256"
        assert out["ssl_cipher"] and out["ssl_sig_alg"] == "ecdsa-with-SHA256"
        der = subprocess.run(["openssl", "x509", "-in", pki.issued("alice") / "cert.pem", "-outform", "DER"],
                             capture_output=True, check=True).stdout
        assert bytes.fromhex(out["cert_der_hex"]) == der
    finally:
        client.stop()
        server.stop()
        decoder.shutdown()


def test_proxy_protocol_v2_read_by_nginx(pki, tmp_path):
    """nginx (Debian's 1.22: `listen ... proxy_protocol`, `$proxy_protocol_addr`; its TLV
    variables need 1.23.2) answers with the client address the header gave it."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    require_tool(os.path.exists(nginx), "nginx")
    nport = free_port()
    (tmp_path / "logs").mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"""
daemon off; worker_processes 1; pid {tmp_path}/nginx.pid; error_log {tmp_path}/logs/error.log;
events {{ worker_connections 64; }}
http {{
  access_log {tmp_path}/logs/access.log;
  client_body_temp_path {tmp_path}; proxy_temp_path {tmp_path}; fastcgi_temp_path {tmp_path};
  uwsgi_temp_path {tmp_path}; scgi_temp_path {tmp_path};
  server {{
    listen 127.0.0.1:{nport} proxy_protocol;
    location / {{ return 200 "from $proxy_protocol_addr:$proxy_protocol_port to $proxy_protocol_server_port\\n"; }}
  }}
}}
""")
    proc = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(conf)], stderr=subprocess.PIPE)
    server = client = None
    try:
        wait_port(nport, proc)
        server, port = start_server(pki, f"127.0.0.1:{nport}", "--proxy-protocol")
        client, cport = start_client(pki, port)
        status, body = get(cport, "/")
        assert status == 200
        assert body.startswith("from 127.0.0.1:") and body.endswith(f" to {port}\n"), body
    finally:
        for t in (client, server):
            if t:
                t.stop()
        proc.terminate()
        proc.wait(10)


def test_sigterm_drains_open_connections_and_refuses_new_ones(pki):
    echo = serve_in_thread(Threaded(("127.0.0.1", 0), Echo))
    server, port = start_server(pki, f"127.0.0.1:{echo.server_address[1]}", "--drain-timeout", "30")
    try:
        ctx = ssl.create_default_context(cafile=str(pki.root))
        ctx.load_cert_chain(str(pki.issued("alice") / "cert.pem"), str(pki.issued("alice") / "key.pem"))
        raw = socket.create_connection(("127.0.0.1", port), timeout=20)
        conn = ctx.wrap_socket(raw, server_hostname="localhost")
        conn.sendall(b"ping\n")
        assert conn.recv(100) == b"ping\n"
        server.proc.send_signal(signal.SIGTERM)
        server.wait_line("draining: SIGTERM")

        def refused():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return False
            except ConnectionRefusedError:
                return True
        wait_until(refused, what="new connections refused during the drain")
        conn.sendall(b"still here\n")
        assert conn.recv(100) == b"still here\n"
        assert server.proc.poll() is None
        conn.close()
        server.wait_line("drained: every connection finished")
        assert server.proc.wait(20) == 0
    finally:
        server.stop()
        echo.shutdown()


def stunnel(tmp_path, name, lines):
    binary = shutil.which("stunnel4") or shutil.which("stunnel")
    require_tool(binary, "stunnel4")
    conf = tmp_path / f"{name}.conf"
    conf.write_text("foreground = yes\npid =\ndebug = 4\n" + "\n".join(lines) + "\n")
    return subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_stunnel_client_to_tunnel_server(pki, backend, tmp_path):
    server, port = start_server(pki, f"127.0.0.1:{backend}")
    sport = free_port()
    alice = pki.issued("alice")
    proc = stunnel(tmp_path, "client", [
        "[c]", "client = yes", f"accept = 127.0.0.1:{sport}", f"connect = 127.0.0.1:{port}",
        f"cert = {alice / 'cert.pem'}", f"key = {alice / 'key.pem'}", f"CAfile = {pki.root}",
        "verifyChain = yes", "checkHost = localhost"])
    try:
        wait_port(sport, proc)
        assert get(sport, "/via-stunnel") == (200, "hello /via-stunnel\n")
        assert "CN=alice" in server.wait_line("accepted ")
    finally:
        proc.terminate()
        proc.wait(10)
        server.stop()


def test_tunnel_client_to_stunnel_server(pki, backend, tmp_path):
    sport = free_port()
    srv = pki.issued("server")
    proc = stunnel(tmp_path, "server", [
        "[s]", f"accept = 127.0.0.1:{sport}", f"connect = 127.0.0.1:{backend}",
        f"cert = {srv / 'chain.pem'}", f"key = {srv / 'key.pem'}", f"CAfile = {pki.root}",
        "verifyChain = yes", "requireCert = yes"])
    client = None
    try:
        wait_port(sport, proc)
        client, cport = start_client(pki, sport)
        assert get(cport, "/to-stunnel") == (200, "hello /to-stunnel\n")
        assert "TLSv1.3" in client.wait_line("connected ")
    finally:
        if client:
            client.stop()
        proc.terminate()
        proc.wait(10)


def test_store_label_rotation_under_64_concurrent_streams_breaks_none(pki, backend, tmp_path):
    """The server's identity is a store label; another process replaces it while 64 clients
    stream requests through both tunnels: every request succeeds, and the new certificate is
    the one presented afterwards (the tunnel client's log names the server it reached)."""
    secret = tmp_path / "secret"
    write_secret(secret, "store passphrase\n")
    store = ["--store", tmp_path / "s.db", "--secret-file", secret]
    ok("store", *store, "--kdf-log-n", "10", "import", pki.base / "server.p12", "--label", "srv", "--password-file", pki.pw)
    ok("pki", "issue", "server", "--dir", pki.dir, "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1",
       "--name", "server-two", "--p12", tmp_path / "two.p12", "--password-file", pki.pw)
    server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", "--identity", "srv", *store,
                    "--client-anchor", pki.int_a)
    port = server.listening()
    client, cport = start_client(pki, port)
    stop = threading.Event()
    failures, done = [], []

    def worker(i):
        n = 0
        while not stop.is_set():
            try:
                assert get(cport, f"/w{i}/{n}") == (200, f"hello /w{i}/{n}\n")
                done.append(1)
            except Exception as e:  # noqa: BLE001 (every failure is reported)
                failures.append(f"{i}/{n}: {e!r}")
            n += 1
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(64)]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: len(done) >= 64, what="64 requests through before the rotation")
        ok("store", *store, "import", tmp_path / "two.p12", "--label", "srv", "--replace", "--password-file", pki.pw)
        assert "server-two" in server.wait_line("rotated:")
        before = len(done)
        wait_until(lambda: len(done) >= before + 128, what="128 requests through after the rotation")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        client.stop()
        server.stop()
    assert failures == []
    assert any("server CN=server-two" in line for line in client.seen + list(client.lines.queue))


@pytest.mark.usefixtures("softhsm_installed")
@pytest.mark.parametrize("tls", ["1.3", "1.2"])
def test_token_identity_in_the_tunnel_client(pki, backend, tmp_path_factory, tls):
    """The tunnel client presents a key that never leaves a SoftHSM2 token (scripts/softhsm-token.sh),
    its certificate read from the token."""
    from conftest import softhsm_conf
    d = tmp_path_factory.mktemp("hsm-tunnel")
    subprocess.run([str(pathlib.Path(__file__).resolve().parents[2] / "scripts" / "softhsm-token.sh"), str(d)], check=True)
    with softhsm_conf(d / "softhsm2.conf"):
        server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                        "--client-anchor", d / "ca.pem")
        port = server.listening()
        client = Tunnel("client", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{port}",
                        "--identity", "pkcs11:token=mtls-test;id=%02", "--pin-file", d / "pin", "--anchor", pki.root,
                        "--tls-max", tls)
        try:
            cport = client.listening()
            assert get(cport, "/token") == (200, "hello /token\n")
            assert f"TLSv{tls}: trusted" in server.wait_for(lambda x: x.startswith("accepted ") and "TLSv" in x and "trusted" in x)
        finally:
            client.stop()
            server.stop()


def presented_sha256(pki, port, name):
    """The SHA-256 of the certificate the tunnel server on `port` presents to alice asking for `name`."""
    import hashlib
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.root)
    ctx.load_cert_chain(pki.issued("alice") / "chain.pem", pki.issued("alice") / "key.pem")
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=20), server_hostname=name) as c:
        return hashlib.sha256(c.getpeercert(binary_form=True)).hexdigest()


def test_renewal_in_process_rotates_the_followed_label(pki, backend):
    """--renew runs `mtls renew --loop` for the identity's label inside the tunnel (here forced at
    start, --renew-force, as the local CA's certificates last days): the renewal event is logged,
    new connections are presented the renewed certificate and the expiry metric names it."""
    import mtls
    write_secret(pki.base / "renew-secret", "renew secret\n")
    # The store beside the pki folder: Landlock lets the tunnel write beneath the store's folder,
    # where the local CA records what it issues.
    store = ["--store", pki.base / "renew.db", "--secret-file", pki.base / "renew-secret"]
    ok("enroll", "pki", "--dir", pki.dir, "--ca", "Customer A", "--ip", "127.0.0.1", "--label", "renewing", *store)
    with mtls.Store(pki.base / "renew.db", secret_file=pki.base / "renew-secret") as st:
        old = st.info("renewing").leaf_sha256
    server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", "--identity", "renewing",
                    *store, "--client-anchor", pki.int_a, "--metrics-port", "0", "--renew", "--renew-force")
    try:
        port = server.listening()
        metrics = server.port_of("metrics")
        assert "renewing" in server.wait_for(lambda x: "renew" in x and "renewing" in x and "fail" not in x)
        with mtls.Store(pki.base / "renew.db", secret_file=pki.base / "renew-secret") as st:
            new = st.info("renewing").leaf_sha256
        assert new != old
        wait_until(lambda: presented_sha256(pki, port, "127.0.0.1") == new, timeout=20)
        assert f'sha256="{new}"' in get(metrics, "/metrics")[1]
    finally:
        server.stop()
    assert not any("renewal stopped" in line for line in server.seen)


@pytest.mark.usefixtures("softhsm_installed")
def test_renewal_in_process_of_a_token_identity_deletes_the_replaced_key_when_asked(pki, backend, tmp_path):
    """A token identity renewed inside the tunnel (--renew, forced at start) gets a new key on the
    token; --renew-delete-previous-keys-after 0 deletes the key it replaced, as `mtls renew
    --delete-previous-keys-after` does (before, the tunnel had no such flag and kept every old key).
    New connections are presented the renewed certificate, signed by the new token key.
    The token's files are not beneath the store's folder (as /var/lib/softhsm/tokens is not): under
    Landlock the tunnel lets SoftHSM2 write its token folder, read from SOFTHSM2_CONF, when a token
    is used (before, the new key's files were denied and the renewal failed)."""
    import mtls
    from conftest import SOFTHSM_MODULE, softhsm_conf
    d = pki.base / "token-renew"
    d.mkdir()
    (tmp_path / "tokens").mkdir()
    (d / "softhsm2.conf").write_text(f"directories.tokendir = {tmp_path}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    write_secret(d / "pin", "1234\n")
    write_secret(d / "secret", "token renew secret\n")
    store = ["--store", d / "renew.db", "--secret-file", d / "secret"]

    def private_keys():
        out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "tunnel-renew", "--login",
                              "--pin", "1234", "--list-objects", "--type", "privkey"], capture_output=True, text=True)
        return out.stdout.count("Private Key Object")
    with softhsm_conf(d / "softhsm2.conf"):
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "tunnel-renew", "--pin", "1234",
                        "--so-pin", "5678"], check=True, capture_output=True)
        uri = "pkcs11:token=tunnel-renew;object=svc;id=%01"
        ok("token", "keygen", uri, "--type", "ec-p256", "--pin-file", d / "pin", "--module", SOFTHSM_MODULE)
        # A name of its own: the module's PKI is shared, and a name is issued once by a CA.
        ok("enroll", "pki", "--dir", pki.dir, "--ca", "Customer A", "--dns", "token-renew.test", "--label", "svc",
           "--token-uri", uri, "--pin-file", d / "pin", *store)
        assert private_keys() == 1
        with mtls.Store(d / "renew.db", secret_file=d / "secret") as st:
            old = st.info("svc").leaf_sha256
        server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", "--identity", "svc",
                        *store, "--pin-file", d / "pin", "--client-anchor", pki.int_a, "--renew", "--renew-force",
                        "--renew-delete-previous-keys-after", "0")
        try:
            port = server.listening()
            assert "svc" in server.wait_for(lambda x: "renew" in x and "svc" in x)
            assert any(line.startswith("landlock: applied") for line in server.seen), server.seen
            with mtls.Store(d / "renew.db", secret_file=d / "secret") as st:
                new = st.info("svc").leaf_sha256
            assert new != old, server.seen
            assert private_keys() == 1
            wait_until(lambda: presented_sha256(pki, port, "token-renew.test") == new, timeout=20)
        finally:
            server.stop()
    # (p11-kit also loads the machine's other modules, whose own complaints may be in the log.)
    assert not any("renewal stopped" in line or ("svc" in line and "fail" in line) for line in server.seen), server.seen


@pytest.mark.parametrize("flags", [["--renew-delete-previous-keys-after", "60"],
                                   ["--renew", "--renew-delete-previous-keys-after=-1"]])
def test_renew_delete_previous_keys_after_is_checked(pki, backend, flags):
    r = run_cli("tunnel", "server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                "--client-anchor", pki.int_a, *flags)
    assert r.returncode != 0
    assert ("0 seconds or more" if "--renew" in flags else "go with --renew") in r.stderr, r.stderr


def test_renew_needs_a_store_label(pki, backend):
    r = run_cli("tunnel", "server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                "--client-anchor", pki.int_a, "--renew")
    assert r.returncode != 0 and "--renew needs --identity LABEL" in r.stderr, r.stderr


@pytest.fixture
def redis(tmp_path):
    """Debian's redis-server on 127.0.0.1, an ephemeral port, nothing saved."""
    require_tool(shutil.which("redis-server") and shutil.which("redis-cli"), "redis-server and redis-cli (Debian redis-server)")
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path), "--protected-mode", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def test_redis_cli_through_client_and_server_tunnels(pki, redis, tmp_path):
    """A real plaintext protocol besides HTTP: redis-cli → tunnel client → tunnel server →
    redis-server; PING, then a 1 MiB value SET and read back whole."""
    server, port = start_server(pki, f"127.0.0.1:{redis}")
    client, cport = start_client(pki, port)
    try:
        def cli(*args, stdin=None):
            r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(cport), *args], input=stdin,
                               capture_output=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout
        assert cli("PING") == b"PONG\n"
        value = os.urandom(512 * 1024).hex().encode()  # 1 MiB
        assert cli("-x", "SET", "big", stdin=value) == b"OK\n"
        assert cli("STRLEN", "big") == b"1048576\n"
        assert cli("--no-raw", "GET", "big") == b'"' + value + b'"\n'
        assert "CN=alice" in server.wait_for(lambda x: x.startswith("accepted "))
    finally:
        client.stop()
        server.stop()


@pytest.fixture
def postgres():
    """Debian's PostgreSQL: initdb into a temporary folder, started by pg_ctl on a UNIX socket in
    that folder (no TCP), trust authentication; as the `postgres` user when the tests run as root
    (initdb refuses root)."""
    import glob
    import tempfile
    bindir = next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)), None)
    require_tool(bindir and shutil.which("psql"), "PostgreSQL (Debian postgresql)")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="mtls-pg-"))
    as_user = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    pg_ctl = [*as_user, f"{bindir}/pg_ctl", "-D", str(folder / "data")]
    try:
        subprocess.run([*as_user, f"{bindir}/initdb", "-D", str(folder / "data"), "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*pg_ctl, "-o", f"-c listen_addresses='' -k {folder}", "-l", str(folder / "log"), "-w", "start"],
                       check=True, capture_output=True, timeout=120)
        yield folder / ".s.PGSQL.5432"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def test_psql_through_the_tunnels_to_a_unix_socket_target(pki, postgres):
    """psql → tunnel client → tunnel server → PostgreSQL's UNIX socket (the target `unix:PATH`)."""
    server, port = start_server(pki, f"unix:{postgres}")
    client, cport = start_client(pki, port)
    try:
        r = subprocess.run(["psql", f"host=127.0.0.1 port={cport} user=postgres dbname=postgres sslmode=disable",
                            "-XAtc", "select 'through ' || 'the tunnel', current_setting('port')"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "through the tunnel|5432\n"
        assert "CN=alice" in server.wait_for(lambda x: x.startswith("accepted "))
    finally:
        client.stop()
        server.stop()


def test_systemd_socket_activation_and_notify(pki, backend, tmp_path):
    """Started as systemd starts a `Type=notify` service with socket activation: the listening
    socket is fd 3 ($LISTEN_FDS, $LISTEN_PID), READY=1, WATCHDOG=1 and STOPPING=1 go to the
    datagram socket $NOTIFY_SOCKET names."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(16)
    port = listening.getsockname()[1]
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(20)
    fd = listening.fileno()
    command = " ".join(f"'{a}'" for a in [CLI, "tunnel", "server", "--listen", "127.0.0.1:1", "--target",
                                          f"127.0.0.1:{backend}", *identity(pki, "server"), "--client-anchor", pki.int_a])
    env = {**os.environ, "LISTEN_FDS": "1", "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "200000"}
    proc = subprocess.Popen(["bash", "-c", f"exec 3<&{fd}; LISTEN_PID=$$ exec {command}"], pass_fds=(fd,), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    listening.close()  # the child's copy is the one that listens
    try:
        seen = set()
        while not {"READY=1", "WATCHDOG=1"} <= seen:
            try:
                seen.add(notify.recv(100).decode())
            except TimeoutError:
                proc.kill()
                raise AssertionError(f"{seen}: {proc.communicate()[0]}")
        client, cport = start_client(pki, port)
        try:
            assert get(cport, "/activated") == (200, "hello /activated\n")
        finally:
            client.stop()
        proc.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in seen:
            seen.add(notify.recv(100).decode())
        assert proc.wait(20) == 0
        assert f"listening on 127.0.0.1:{port}" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        notify.close()


def activated(sock, *args, **popen):
    """`mtls tunnel ARGS` started with `sock` as its socket-activated fd 3 ($LISTEN_FDS, $LISTEN_PID)."""
    fd = sock.fileno()
    command = " ".join(f"'{a}'" for a in [CLI, "tunnel", *map(str, args)])
    return subprocess.Popen(["bash", "-c", f"exec 3<&{fd}; LISTEN_PID=$$ exec {command}"], pass_fds=(fd,),
                            env={**os.environ, "LISTEN_FDS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def listening_line(proc):
    """The `listening on` line an activated tunnel prints (its other lines before it skipped)."""
    for line in proc.stdout:
        if line.startswith("listening on "):
            return line.strip()
    raise AssertionError(f"exited {proc.wait()} without listening")


def listening_line_after(proc, start):
    """The activated tunnel's next log line that starts with `start` (after its time)."""
    for line in proc.stdout:
        text = line.split(" ", 1)[1] if re.match(r"\d{4}-\d\d-\d\dT", line) else line
        if text.startswith(start):
            return text.strip()
    raise AssertionError(f"exited {proc.wait()} without a line {start!r}")


def not_listening_sockets():
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))  # bound, never listen()
    return {"udp": udp, "tcp-not-listening": tcp}


@pytest.mark.parametrize("kind", ["udp", "tcp-not-listening"])
@pytest.mark.parametrize("side", ["client", "server"])
def test_activated_socket_that_does_not_listen_is_refused(pki, kind, side):
    """fd 3 must be a listening stream socket (SO_ACCEPTCONN, SO_TYPE), on both sides."""
    socks = not_listening_sockets()
    try:
        args = (["client", "--listen", "127.0.0.1:1", "--target", "127.0.0.1:1", *identity(pki, "alice"), "--anchor", pki.root]
                if side == "client" else
                ["server", "--listen", "127.0.0.1:1", "--target", "127.0.0.1:1", *identity(pki, "server"), "--client-anchor", pki.int_a])
        out = activated(socks[kind], *args).communicate(timeout=60)[0]
        assert "file descriptor 3 is not a listening" in out, out
    finally:
        for sock in socks.values():
            sock.close()


def test_activated_client_socket_off_loopback_needs_unsafe_listen(pki, tunnels):
    """The plaintext rule judges the activated socket by its bound address: 0.0.0.0 is refused
    without --unsafe-listen (naming it) and served with it."""
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    args = ["client", "--listen", "127.0.0.1:1", "--target", f"127.0.0.1:{tunnels.port}", *identity(pki, "alice"), "--anchor", pki.root]
    try:
        proc = activated(sock, *args)
        out = proc.communicate(timeout=60)[0]
        assert proc.returncode != 0
        assert "the activated socket (fd 3) 0.0.0.0:" in out and "--unsafe-listen" in out and "plaintext" in out, out
        proc = activated(sock, *args, "--unsafe-listen")
        try:
            assert listening_line(proc) == f"listening on 0.0.0.0:{port}"
            assert get(port, "/activated-any") == (200, "hello /activated-any\n")
        finally:
            proc.terminate()
            proc.wait(20)
    finally:
        sock.close()


def test_activated_client_unix_socket_is_plaintext_safe(pki, tunnels, tmp_path):
    path = str(tmp_path / "plain.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    sock.listen(16)
    proc = activated(sock, "client", "--listen", "127.0.0.1:1", "--target", f"127.0.0.1:{tunnels.port}",
                     *identity(pki, "alice"), "--anchor", pki.root)
    try:
        assert listening_line(proc) == f"listening on unix:{path}"
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(20)
            c.connect(path)
            c.sendall(b"GET /over-unix HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := c.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"hello /over-unix\n")
        assert listening_line_after(proc, "connected ").startswith("connected local client → ")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except Exception:
            proc.kill()
            raise AssertionError(proc.stdout.read())
        sock.close()


def test_json_log_and_sighup_reload(pki, backend, tmp_path):
    """--json: one object per line with an RFC 3339 time; SIGHUP rereads the policy file and the
    tunnel goes on serving."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"anchors": [str(pki.int_a)]}))
    server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                    "--policy", policy, "--json")
    client = None
    try:
        port = json.loads(server.wait_for(lambda x: x.startswith('{"listening"')))["listening"]["port"]
        wait_port(port, server.proc)
        client, cport = start_client(pki, port)
        assert get(cport, "/json") == (200, "hello /json\n")
        event = json.loads(server.wait_for(lambda x: '"event":"accepted"' in x.replace(" ", "")))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", event["time"]) and "CN=alice" in event["message"]
        server.proc.send_signal(signal.SIGHUP)
        assert json.loads(server.wait_for(lambda x: "SIGHUP" in x))["event"] == "SIGHUP"
        assert get(cport, "/after-hup") == (200, "hello /after-hup\n")
    finally:
        if client:
            client.stop()
        server.stop()


def kernel_has_landlock():
    import ctypes
    return ctypes.CDLL(None, use_errno=True).syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint(1)) >= 1


def test_landlock_is_applied_where_the_kernel_has_it(pki, backend, tmp_path):
    """By default the tunnel restricts itself with Landlock (no_new_privs set, writes only beneath
    the store's folder and the policy's CRL cache) and says so; the CRL cache is still written;
    --no-landlock leaves it off."""
    cache = tmp_path / "crl-cache"
    cache.mkdir()
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"anchors": [str(pki.int_a)], "revocation": {"mode": "hard", "cache_dir": str(cache)}}))
    server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                    "--policy", policy)
    client = None
    try:
        port = server.listening()
        line = server.wait_line("landlock: ")
        with open(f"/proc/{server.proc.pid}/status") as f:
            no_new_privs = [x.split()[1] for x in f if x.startswith("NoNewPrivs:")]
        if kernel_has_landlock():
            assert line.startswith("landlock: applied (ABI "), line
            assert no_new_privs == ["1"]
        else:
            assert line.startswith("landlock: not applied: "), line
        client, cport = start_client(pki, port)
        assert get(cport, "/landlocked") == (200, "hello /landlocked\n")
        wait_until(lambda: any(cache.iterdir()), what="the CRL cached in the policy's cache_dir")
    finally:
        if client:
            client.stop()
        server.stop()
    off = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                 "--client-anchor", pki.int_a, "--no-landlock")
    try:
        off.listening()
        assert off.wait_line("landlock: ") == "landlock: off (--no-landlock)"
    finally:
        off.stop()


def test_landlock_denies_a_write_outside_the_allowed_folders(pki, backend, tmp_path):
    """Landlock really denies, with no hook: the folders the tunnel may write beneath are fixed at
    start (the store's, the policy's CRL cache `a`). The policy file, followed, is then changed to
    cache CRLs in `b`; the next handshake fetches the CRL and writes it there (best effort). Under
    Landlock the write is denied and `b` stays empty although the handshake succeeded; with
    --no-landlock, or with `b` named by --landlock-writable, the same run writes the CRL into `b`."""
    def run(name, *extra):
        a, b = tmp_path / f"{name}-a", tmp_path / f"{name}-b"
        a.mkdir()
        b.mkdir()
        policy = tmp_path / f"{name}.json"
        doc = {"anchors": [str(pki.int_a)], "revocation": {"mode": "hard", "cache_dir": str(a)}}
        policy.write_text(json.dumps(doc))
        server = Tunnel("server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{backend}", *identity(pki, "server"),
                        "--policy", policy, *extra)
        client = None
        try:
            port = server.listening()
            doc["revocation"]["cache_dir"] = str(b)
            policy.write_text(json.dumps(doc))
            server.proc.send_signal(signal.SIGHUP)  # rereads the policy and drops the cached CRLs
            server.wait_for(lambda x: x.startswith("policy reloaded"))
            client, cport = start_client(pki, port)
            assert get(cport, f"/{name}") == (200, f"hello /{name}\n")
            assert "trusted" in server.wait_for(lambda x: x.startswith("accepted "))
            return list(b.iterdir())
        finally:
            if client:
                client.stop()
            server.stop()

    if kernel_has_landlock():
        assert run("landlocked") == []
        # --landlock-writable names one more folder: the same write is then allowed, Landlock on.
        assert len(run("widened", "--landlock-writable", tmp_path / "widened-b")) == 1
    assert len(run("free", "--no-landlock")) == 1


class HeaderEcho(http.server.BaseHTTPRequestHandler):
    """Answers (keep-alive, HTTP/1.1) with JSON: every X-Client-Cert-Subject it received, the
    client port of the connection, and the body's length and text (chunked bodies decoded here)."""
    protocol_version = "HTTP/1.1"

    def answer(self, body=b""):
        out = json.dumps({"values": self.headers.get_all("X-Client-Cert-Subject") or [],
                          "port": self.client_address[1], "body": body.decode(),
                          "trailer_seen": getattr(self, "trailer", None)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        self.answer()

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    break
                body += self.rfile.read(size)
                assert self.rfile.read(2) == b"\r\n"
            self.trailer = []
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                self.trailer.append(line.decode().strip())
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.answer(body)

    def log_message(self, *args):
        pass


def send_and_read_to_end(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


@pytest.fixture(scope="module")
def header_tunnels(pki):
    echo = serve_in_thread(Threaded(("127.0.0.1", 0), HeaderEcho))
    server, port = start_server(pki, f"127.0.0.1:{echo.server_address[1]}", "--http-client-header", "X-Client-Cert-Subject")
    client, cport = start_client(pki, port)
    yield server, cport
    client.stop()
    server.stop()
    echo.shutdown()


def test_http_client_header_carries_the_subject_and_replaces_a_forged_one_on_every_keep_alive_request(header_tunnels):
    _, cport = header_tunnels
    conn = http.client.HTTPConnection("127.0.0.1", cport, timeout=20)
    try:
        conn.request("GET", "/one")
        first = json.loads(conn.getresponse().read())
        conn.putrequest("GET", "/two")
        conn.putheader("X-Client-Cert-Subject", "CN=admin")
        conn.putheader("x-client-cert-subject", "CN=root")
        conn.endheaders()
        second = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    for out in (first, second):
        assert len(out["values"]) == 1, out
        assert "CN=alice" in out["values"][0] and "admin" not in out["values"][0] and "root" not in out["values"][0]
    assert first["port"] == second["port"]  # one connection to the backend: keep-alive


def test_http_client_header_passes_a_chunked_post_intact(header_tunnels):
    _, cport = header_tunnels
    pieces = [b"first piece;", b"x" * 70000, b"\r\n0\r\n\r\n not an end"]
    conn = http.client.HTTPConnection("127.0.0.1", cport, timeout=20)
    try:
        conn.request("POST", "/chunked", body=iter(pieces), encode_chunked=True)
        out = json.loads(conn.getresponse().read())
        conn.request("POST", "/plain", body=b"GET /smuggled HTTP/1.1\r\n\r\n")
        plain = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    assert out["body"] == b"".join(pieces).decode()
    assert len(out["values"]) == 1 and "CN=alice" in out["values"][0]
    assert plain["body"] == "GET /smuggled HTTP/1.1\r\n\r\n" and len(plain["values"]) == 1


def test_http_client_header_refuses_content_length_with_transfer_encoding(header_tunnels):
    server, cport = header_tunnels
    data = send_and_read_to_end(cport, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 400 ")
    server.wait_for(lambda x: x.startswith("closed ") and "both Transfer-Encoding and Content-Length" in x)


def test_http_client_header_closes_a_stream_that_is_not_http(header_tunnels):
    server, cport = header_tunnels
    data = send_and_read_to_end(cport, b"SSH-2.0-OpenSSH_9.6\r\n")
    assert data.startswith(b"HTTP/1.1 400 ")
    server.wait_for(lambda x: x.startswith("closed ") and "not an HTTP/1.x request" in x)
