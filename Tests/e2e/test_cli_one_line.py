"""Output read line by line stays one line per item whatever a peer or a certificate puts in
its names: `mtls serve`'s "accepted"/"rejected" lines (scripts count them) and `mtls store list` /
`mtls store check` (one item per line, tab-separated). A common name or a label holding line
breaks, tabs or other control characters has them as blanks there; `--json` keeps them exact."""
import json
import socket
import ssl

from conftest import run_cli
from serve_support import Serve, hostile_certificate, make_pki, ok

FORGED = "x\naccepted 10.0.0.1 client CN=admin: ok\r\u0085\u2028\tforged"


def test_a_rejected_client_whose_name_holds_line_breaks_is_one_rejected_line(tmp_path):
    store = make_pki(tmp_path)
    ok(*store, "import", tmp_path / "one.p12", "--label", "srv", "--password-file", tmp_path / "pw")
    hostile_certificate(tmp_path / "h.pem", FORGED, key_path=tmp_path / "h.key")
    serve = Serve("--port", "0", "--identity", "srv", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret",
                  "--client-anchor", tmp_path / "D" / "root" / "cert.pem")
    try:
        port = serve.listening()
        ctx = ssl.create_default_context(cafile=str(tmp_path / "D" / "root" / "cert.pem"))
        ctx.check_hostname = False
        ctx.load_cert_chain(str(tmp_path / "h.pem"), str(tmp_path / "h.key"))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
                    ctx.wrap_socket(s, server_hostname="server.test") as t:
                t.sendall(b"ping")
                t.recv(10)
        except (ssl.SSLError, OSError):
            pass
        serve.wait_line("rejected ")
        lines = serve.seen + serve.next_lines(1.5)
    finally:
        serve.stop()
    rejected = [line for line in lines if line.startswith("rejected ")]
    assert len(rejected) == 1, lines
    assert not [line for line in lines if line.startswith("accepted ") or line.lstrip().startswith("forged")], lines


def test_store_list_and_check_print_one_line_per_item(tmp_path):
    store = make_pki(tmp_path)
    hostile_certificate(tmp_path / "h.pem", FORGED, days=3)
    ok(*store, "add-cert", tmp_path / "h.pem", "--label", "hostile\nforged\tlabel")
    ok(*store, "import", tmp_path / "one.p12", "--label", "srv", "--password-file", tmp_path / "pw")
    listed = ok(*store, "list").stdout.splitlines()
    assert len(listed) == 2 and all(len(line.split("\t")) == 4 for line in listed), listed
    assert any(line.startswith("hostile forged label\t") for line in listed), listed
    r = run_cli(*store, "check", "--within", "10", "--json")
    assert r.returncode == 1, r.stderr
    item = json.loads(r.stdout)["expiring"][0]
    assert item["label"] == "hostile\nforged\tlabel" and "\u2028" in item["subject"], item  # JSON: exact
    r = run_cli(*store, "check", "--within", "10")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0].split("\t")) == 5, lines
