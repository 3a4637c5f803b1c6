"""`mtls serve` follows its policy file and its store label, reloads on SIGHUP, prints one line
per rotation or failed reload, and serves Prometheus text on --metrics-port (issue 26)."""
import queue
import signal
import subprocess
import threading
import time
import urllib.request

from conftest import CLI, free_port, untimed, wait_port, write_secret

FAST = ["--kdf-log-n", "10"]


def ok(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def test_serve_reloads_policy_and_identity_and_serves_metrics(tmp_path):
    d, pw = tmp_path / "D", tmp_path / "pw"
    write_secret(pw, "p12\n")
    write_secret(tmp_path / "secret", "store passphrase\n")
    ok("pki", "init", "--dir", d, "--name", "Serve Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    for name in ("one", "two"):
        ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "server.test", "--name", name,
           "--p12", tmp_path / f"{name}.p12", "--password-file", pw)
    store = ["store", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret", *FAST]
    ok(*store, "import", tmp_path / "one.p12", "--label", "srv", "--password-file", pw)
    policy = tmp_path / "clients.json"
    anchor = d / "ca" / "customer-a" / "cert.pem"
    policy.write_text('{"anchors": ["%s"], "anchors_only": true}' % anchor)
    port, metrics = free_port(), free_port()
    serve = subprocess.Popen([CLI, "serve", "--port", str(port), "--identity", "srv", "--store", tmp_path / "s.db",
                              "--secret-file", tmp_path / "secret", "--policy", policy, "--metrics-port", str(metrics)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(untimed(line.rstrip("\n"))) for line in serve.stdout], daemon=True).start()

    def wait_line(prefix, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}")

    try:
        wait_port(port, serve)
        wait_line("metrics on 127.0.0.1:")
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
        assert "mtls_listener_handshakes_accepted_total 0" in text
        assert 'mtls_certificate_not_after_seconds{label="srv",class="identity"' in text

        # A broken policy file keeps the old policy: one line says so.
        policy.write_text("{ broken")
        assert "reload failed" in wait_line("reload failed")
        policy.write_text('{"anchors": ["%s"], "anchors_only": false}' % anchor)
        wait_line("policy reloaded")

        # The store label replaced by another process: one line per rotation.
        ok(*store, "import", tmp_path / "two.p12", "--label", "srv", "--replace", "--password-file", pw)
        assert "two" in wait_line("rotated:")

        serve.send_signal(signal.SIGHUP)
        wait_line("SIGHUP: reloading")
        assert serve.poll() is None, "SIGHUP does not stop the server"
    finally:
        serve.terminate()
        serve.wait(10)


def test_serve_client_anchor_from_the_store_follows_the_store(tmp_path):
    """`--client-anchor LABEL` (a stored certificate) follows the store: once another process
    replaces the certificate under the label, new clients are judged by the new anchor."""
    d, pw = tmp_path / "D", tmp_path / "pw"
    write_secret(pw, "p12\n")
    write_secret(tmp_path / "secret", "store passphrase\n")
    ok("pki", "init", "--dir", d, "--name", "Serve Root")
    for ca in ("Customer A", "Customer B"):
        ok("pki", "intermediate", "--dir", d, "--name", ca)
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "server.test", "--name", "srv",
       "--p12", tmp_path / "srv.p12", "--password-file", pw)
    for name, ca in (("alice", "Customer A"), ("bob", "Customer B")):
        ok("pki", "issue", "client", "--dir", d, "--ca", ca, "--name", name, "--p12", tmp_path / f"{name}.p12",
           "--password-file", pw)
    store = ["--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret", *FAST]
    ok("store", *store, "import", tmp_path / "srv.p12", "--label", "srv", "--password-file", pw)
    ok("store", *store, "add-cert", d / "ca" / "customer-a" / "cert.pem", "--label", "customers")
    port = free_port()
    serve = subprocess.Popen([CLI, "serve", "--port", str(port), "--identity", "srv", *map(str, store[:4]),
                              "--client-anchor", "customers", "--require-client-cert", "--no-session-tickets"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(untimed(line.rstrip("\n"))) for line in serve.stdout], daemon=True).start()

    def wait_line(*prefixes, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line.startswith(prefixes):
                return line
        raise AssertionError(f"no line starting with {prefixes!r}")

    def client(name):
        """Connects as `name` and returns serve's verdict line for it."""
        r = subprocess.run([CLI, "connect", f"127.0.0.1:{port}", "--identity", str(tmp_path / f"{name}.p12"),
                            "--password-file", str(pw), "--anchor", str(d / "root" / "cert.pem"), "--anchors-only",
                            "--verify-as", "server.test", "--send", "GET / HTTP/1.0\r\n\r\n"],
                           capture_output=True, text=True, timeout=60)
        return wait_line("accepted", "rejected"), r

    try:
        wait_port(port, serve)
        line, r = client("alice")
        assert line.startswith("accepted") and "alice" in line and "hello alice" in r.stdout, (line, r.stdout, r.stderr)
        line, r = client("bob")
        assert line.startswith("rejected") and "hello" not in r.stdout, (line, r.stdout)

        # Another process replaces the stored anchor: customer B's CA instead of A's.
        ok("store", *store, "add-cert", d / "ca" / "customer-b" / "cert.pem", "--label", "customers", "--replace")
        assert "customers" in wait_line("policy reloaded")
        line, r = client("bob")
        assert line.startswith("accepted") and "bob" in line and "hello bob" in r.stdout, (line, r.stdout, r.stderr)
        line, r = client("alice")
        assert line.startswith("rejected") and "hello" not in r.stdout, (line, r.stdout)
    finally:
        serve.terminate()
        serve.wait(10)
