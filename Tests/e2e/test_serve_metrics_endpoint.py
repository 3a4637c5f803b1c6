"""`mtls serve --metrics-port P` as a Prometheus target that clients other than Prometheus reach
(issue 26): the text parses with prometheus_client's own parser whatever the labels and subjects
hold; silent, slow, huge and garbage requests neither block scrapes nor the TLS port; methods
other than GET/HEAD and paths other than / and /metrics are refused; it listens on 127.0.0.1 only."""
import collections
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_support import Serve, hostile_certificate, make_pki, ok

# A label meant to start lines of its own in the exposition if it were not escaped.
EVIL_LABEL = 'evil\nfake_metric{x="1"} 1\n# TYPE fake_metric gauge'
HOSTILE_CN = 'we"ird\\x\ny} 1\nfake 2 \u00e9\r\t\x00z'
FAMILIES = {"mtls_listener_handshakes_accepted", "mtls_listener_handshakes_resumed", "mtls_listener_handshakes_refused",
            "mtls_listener_connections", "mtls_certificate_not_after_seconds", "mtls_certificate_not_before_seconds"}


@pytest.fixture
def served(tmp_path):
    store = make_pki(tmp_path, names=("one",))
    ok(*store, "import", tmp_path / "one.p12", "--label", "srv", "--password-file", tmp_path / "pw")
    ok(*store, "import", tmp_path / "one.p12", "--label", EVIL_LABEL, "--password-file", tmp_path / "pw")
    hostile_certificate(tmp_path / "hostile.pem", HOSTILE_CN)
    ok(*store, "add-cert", tmp_path / "hostile.pem", "--label", 'a"b\\c,d=e}\u00e9')
    serve = Serve("--port", 0, "--identity", "srv", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret",
                  "--metrics-port", 0)
    try:
        port = serve.listening()
        metrics = int(serve.wait_line("metrics on 127.0.0.1:").rsplit(":", 1)[1])
        yield tmp_path, port, metrics
    finally:
        serve.stop()


def scrape(port, path="/metrics", timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def raw(port, request, timeout=10):
    """Sends `request` as is; returns every byte answered until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def tls_handshake(port, tmp_path):
    """The leaf the TLS port presents (a real handshake with Python's ssl)."""
    ctx = ssl.create_default_context(cafile=str(tmp_path / "D" / "root" / "cert.pem"))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s, ctx.wrap_socket(s) as t:
        return t.getpeercert(binary_form=True)


def test_the_exposition_parses_and_nothing_in_a_label_or_subject_starts_a_line(served):
    _, _, metrics = served
    status, content_type, text = scrape(metrics)
    assert status == 200 and content_type == "text/plain; version=0.0.4"
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == FAMILIES, "no family but libmtls's own: " + ", ".join(sorted(families))
    for name in ("mtls_certificate_not_after_seconds", "mtls_certificate_not_before_seconds"):
        samples = families[name].samples
        assert all(set(s.labels) == {"label", "class", "subject", "sha256"} for s in samples)
        assert {s.labels["label"] for s in samples} == {"srv", EVIL_LABEL, 'a"b\\c,d=e}\u00e9'}
        # No series twice: Prometheus refuses a whole scrape with a duplicate.
        assert len({tuple(sorted(s.labels.items())) for s in samples}) == len(samples)
        hostile = [s for s in samples if s.labels["class"] == "certificate"]
        assert len(hostile) == 1 and "CN=we\\\"ird" in hostile[0].labels["subject"] and "\n" not in hostile[0].labels["subject"]
    # HELP and TYPE once per family.
    for kind in ("# HELP ", "# TYPE "):
        names = collections.Counter(line.split(" ")[2] for line in text.splitlines() if line.startswith(kind))
        assert set(names.values()) == {1} and len(names) == len(FAMILIES), names


def test_silent_slow_and_huge_clients_block_neither_scrapes_nor_tls(served):
    tmp_path, port, metrics = served
    silent = [socket.create_connection(("127.0.0.1", metrics)) for _ in range(100)]
    slow = socket.create_connection(("127.0.0.1", metrics))
    slow.sendall(b"GET /metr")  # and never the rest
    try:
        for _ in range(3):
            status, _, text = scrape(metrics, timeout=3)
            assert status == 200 and "mtls_listener_connections" in text
        assert tls_handshake(port, tmp_path)
        # A request head of 1 MB: refused, and the endpoint goes on.
        try:
            answer = raw(metrics, b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 431 ")
        except ConnectionError:
            pass  # the server may close (reset, broken pipe) while the client still writes its megabyte
        assert scrape(metrics, timeout=3)[0] == 200
    finally:
        for s in silent + [slow]:
            s.close()


def test_methods_paths_and_garbage(served):
    _, _, metrics = served
    answer = raw(metrics, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    assert answer.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET, HEAD\r\n" in answer
    assert raw(metrics, b"DELETE / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(metrics, "/nope")
    assert e.value.code == 404
    assert raw(metrics, b"\x16\x03\x01\x00\x05hello\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(metrics, b"GET /metrics\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    head = raw(metrics, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n"), "HEAD: the headers, no body"
    status, _, text = scrape(metrics, "/?name[]=x")
    assert status == 200 and "mtls_listener_handshakes_accepted_total" in text


def test_listens_on_the_loopback_address_only(served):
    _, _, metrics = served
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    listening = [r[1] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == metrics]
    assert listening == ["0100007F:%04X" % metrics]
    with open("/proc/net/tcp6") as f:
        assert not [line for line in f.readlines()[1:] if line.split()[3] == "0A" and int(line.split()[1].split(":")[1], 16) == metrics]


def test_an_unreadable_store_leaves_one_comment_line(served):
    tmp_path, _, metrics = served
    # A row whose label holds line feeds, changed behind the store's back: the store's error
    # message names it, and it must not become lines of the exposition.
    subprocess.run(["sqlite3", str(tmp_path / "s.db"), "UPDATE items SET subject = 'CN=x' WHERE label LIKE 'evil%'"],
                   check=True, timeout=30)
    time.sleep(0.3)
    status, _, text = scrape(metrics)
    assert status == 200
    families = {f.name for f in text_string_to_metric_families(text)}
    assert "fake_metric" not in families and "mtls_listener_handshakes_accepted" in families
    comments = [line for line in text.splitlines() if line.startswith("# store metrics failed: ")]
    assert len(comments) == 1 and "tampered" in comments[0]
    assert not any(line.startswith("fake") for line in text.splitlines())
