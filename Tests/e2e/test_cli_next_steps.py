"""Issue 38 (items 2, 3, 6, 8): one name per idea (the old names kept as hidden aliases), errors
that say what to do next, re-issue and repackaging, and serve's log. Real `mtls` runs, servers on
127.0.0.1 ephemeral ports."""
import json
import os
import re
import socket
import subprocess

import pytest

from conftest import CLI, run_cli, write_secret
from serve_support import Serve

FAST = ["--kdf-log-n", "10"]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def ok(*args, env=None):
    if env is None:
        r = run_cli(*args, timeout=120)
    else:
        r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def fails(*args):
    r = run_cli(*args, timeout=60)
    assert r.returncode != 0, (args, r.stdout)
    lines = [line for line in r.stderr.splitlines() if line.strip() and "warning" not in line]
    assert len(lines) == 1 and lines[0].startswith("mtls: "), r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("next")
    write_secret(d / "pw", "pw\n")
    write_secret(d / "secret", "store secret\n")
    p = d / "pki"
    ok("pki", "init", "--dir", p, "--name", "Root")
    ok("pki", "intermediate", "--dir", p, "--name", "Customer A")
    ok("pki", "intermediate", "--dir", p, "--name", "Other")
    ok("pki", "issue", "server", "--dir", p, "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1",
       "--p12", d / "server.p12", "--password-file", d / "pw")
    ok("pki", "issue", "client", "--dir", p, "--ca", "Customer A", "--name", "alice", "--p12", d / "alice.p12",
       "--password-file", d / "pw")
    ok("pki", "issue", "client", "--dir", p, "--ca", "Other", "--name", "bob", "--p12", d / "bob.p12",
       "--password-file", d / "pw")
    return d


def store(d, name="s.db"):
    write_secret(d / "secret", "store secret\n")
    return ["store", "--store", d / name, "--secret-file", d / "secret", *FAST]


def serve(d, *extra, password=("--password-file", "{d}/pw"), env=None):
    """`mtls serve` with the client anchor of "Customer A", its lines as printed (times kept)."""
    return Serve("--port", 0, "--identity", d / "server.p12", *[a.format(d=d) for a in password],
                 "--client-anchor", d / "pki" / "ca" / "customer-a" / "cert.pem", *extra, timed=True, env=env)


@pytest.fixture
def server(pki):
    s = serve(pki)
    s.port = s.listening()
    yield s
    s.stop()


# ---- Item 2: one name per idea, the old names hidden aliases.

HIDDEN = [(["pki", "init"], "--key "), (["pki", "issue", "server"], "--key "), (["store", "check"], "--within"),
          (["connect"], "--cacert"), (["verify"], "--cacert"), (["pki", "revoke"], "--crl-days")]


@pytest.mark.parametrize("command, old", HIDDEN, ids=[" ".join(c) + " " + o for c, o in HIDDEN])
def test_old_names_are_hidden_from_help(command, old):
    r = ok(*command, "--help")
    assert old not in r.stdout, r.stdout


def test_key_type_and_its_hidden_alias_key(tmp_path):
    ok("pki", "init", "--dir", tmp_path / "a", "--name", "A", "--key-type", "ec-p384", "--json")
    old = json.loads(ok("pki", "init", "--dir", tmp_path / "b", "--name", "B", "--key", "ec-p384", "--json").stdout)
    assert old["key_type"] == "p384", old
    assert "--key-type" in fails("pki", "init", "--dir", tmp_path / "c", "--name", "C", "--key", "ec-p256",
                                 "--key-type", "ec-p256")


def test_store_check_days_defaults_to_30_and_within_still_works(pki, tmp_path):
    s = store(tmp_path)
    ok(*s, "import", pki / "alice.p12", "--label", "alice", "--password-file", pki / "pw")
    assert json.loads(ok(*s, "check", "--json").stdout)["within_days"] == 30
    assert json.loads(ok(*s, "check", "--days", "7", "--json").stdout)["within_days"] == 7
    assert json.loads(ok(*s, "check", "--within", "9", "--json").stdout)["within_days"] == 9


def test_enroll_pki_takes_dns_and_ip_like_pki_issue_server(pki, tmp_path):
    s = store(tmp_path)[1:]  # enroll takes the store options itself
    common = ["--dir", pki / "pki", "--ca", "Customer A", "--json"]
    out = json.loads(ok("enroll", "pki", *s, *common, "--dns", "api.test", "--label", "api").stdout)
    assert "api.test" in json.dumps(out), out
    ok("enroll", "pki", *s, *common, "--ip", "127.0.0.9", "--label", "ip")
    ok("enroll", "pki", *s, *common, "--name", "old.test", "--label", "old")  # the old spelling
    assert "--dns" in fails("enroll", "pki", *s, *common, "--label", "none")


def test_every_store_command_takes_json_and_fails_with_a_json_error(pki, tmp_path):
    s = store(tmp_path)
    out = json.loads(ok(*s, "import", pki / "alice.p12", "--label", "a", "--password-file", pki / "pw", "--json").stdout)
    assert out["label"] == "a" and out["chain_count"] == 2, out
    assert json.loads(ok(*s, "add-cert", pki / "pki" / "root" / "cert.pem", "--label", "r", "--json").stdout)["label"] == "r"
    out = json.loads(ok(*s, "export", "a", "--out", tmp_path / "a.p12", "--password-file", pki / "pw", "--json").stdout)
    assert out["out"] == str(tmp_path / "a.p12"), out
    assert json.loads(ok(*s, "delete", "r", "--json").stdout) == {"label": "r", "deleted": 1}
    metrics = json.loads(ok(*s, "metrics", "--json").stdout)
    assert {m["label"] for m in metrics} == {"a"}, metrics
    r = run_cli(*s, "import", pki / "alice.p12", "--label", "a", "--password-file", pki / "pw", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"] == "duplicate", r.stdout


def test_serve_takes_json(pki):
    p = subprocess.Popen([CLI, "serve", "--port", "0", "--identity", pki / "server.p12", "--password-file", pki / "pw",
                          "--count", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(p.stdout.readline())
        port = first["listening"]["port"]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            c.recv(100)
        event = json.loads(p.stdout.readline())
        assert event["event"] == "rejected" and RFC3339.match(event["time"] + " "), event
    finally:
        p.kill()
        p.wait(10)
    r = run_cli("serve", "--identity", pki / "missing.p12", "--password-file", pki / "pw", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"] == "not_found", r.stdout


def test_p12_password_from_the_environment_or_none_in_store_import(pki, tmp_path):
    s = store(tmp_path)
    ok(*s, "import", pki / "alice.p12", "--label", "env", env={"MTLS_P12_PASSWORD": "pw"})
    ok("p12", "create", "--cert", pki / "pki" / "ca" / "customer-a" / "issued" / "alice" / "cert.pem",
       "--key", pki / "pki" / "ca" / "customer-a" / "issued" / "alice" / "key.pem", "--out", tmp_path / "none.p12",
       "--no-password")
    ok(*s, "import", tmp_path / "none.p12", "--label", "none", "--no-password")

    # connect and serve read a .p12 the same way.
    srv = serve(pki, password=(), env={"MTLS_P12_PASSWORD": "pw"})
    try:
        port = srv.listening()
        r = run_cli("connect", f"127.0.0.1:{port}", "--anchor", pki / "pki" / "root" / "cert.pem",
                    "--identity", tmp_path / "none.p12", "--no-password")
        assert "no client certificate" not in r.stdout and "presented alice" in r.stdout, (r.stdout, r.stderr)
    finally:
        srv.stop()


def test_cacert_is_an_alias_of_anchor_and_curl_pins_are_accepted(pki, server):
    leaf = pki / "pki" / "ca" / "customer-a" / "issued" / "localhost" / "cert.pem"
    [shown] = json.loads(ok("cert", "show", leaf, "--json").stdout)
    pin = shown["spki_pin"]
    ok("connect", f"127.0.0.1:{server.port}", "--cacert", pki / "pki" / "root" / "cert.pem",
       "--identity", pki / "alice.p12", "--password-file", pki / "pw", "--pin", "sha256//" + pin[len("sha256/"):])


def test_verify_takes_cacert_too(pki):
    chain = pki / "pki" / "ca" / "customer-a" / "issued" / "localhost" / "chain.pem"
    out = json.loads(ok("verify", chain, "--cacert", pki / "pki" / "root" / "cert.pem", "--host", "localhost",
                        "--json").stdout)
    assert out["trusted"] is True, out


# ---- Item 3: every error says what to do next.

def test_name_mismatch_lists_the_names_and_verify_as(pki, server):
    line = fails("connect", f"127.0.0.1:{server.port}", "--anchor", pki / "pki" / "root" / "cert.pem",
                 "--verify-as", "other.test")
    assert "localhost, 127.0.0.1" in line and "--verify-as NAME" in line, line


def test_unknown_issuer_names_the_anchor_option(pki, server):
    line = fails("connect", f"127.0.0.1:{server.port}")
    assert "as an anchor" in line and "anchor option" in line and "--anchor FILE" in line, line
    # A code appears once, in its brackets.
    assert line.count("unknown_issuer") == 1, line


def test_a_malformed_pin_names_the_accepted_forms(pki, server):
    line = fails("connect", f"127.0.0.1:{server.port}", "--anchor", pki / "pki" / "root" / "cert.pem",
                 "--pin", "pin-sha256=abc")
    assert "sha256/BASE64" in line and "sha256//BASE64" in line, line


def test_a_p12_that_needs_a_password_names_password_file(pki, tmp_path):
    assert "--password-file" in fails(*store(tmp_path), "import", pki / "alice.p12", "--label", "x")


def test_a_duplicate_label_names_replace(pki, tmp_path):
    s = store(tmp_path)
    ok(*s, "add-cert", pki / "pki" / "root" / "cert.pem", "--label", "r")
    assert "--replace" in fails(*s, "add-cert", pki / "pki" / "root" / "cert.pem", "--label", "r")


def test_a_folder_given_as_the_store_says_so(pki, tmp_path):
    line = fails("store", "--store", tmp_path, "--secret-file", pki / "secret", "list")
    assert "is a folder" in line and "unable to open" not in line, line


def test_a_missing_output_folder_is_named_never_a_temporary_file(pki, tmp_path):
    s = store(tmp_path)
    ok(*s, "import", pki / "alice.p12", "--label", "a", "--password-file", pki / "pw")
    line = fails(*s, "export", "a", "--out", tmp_path / "nowhere" / "a.p12", "--password-file", pki / "pw")
    assert f"the folder {tmp_path / 'nowhere'} does not exist" in line and ".tmp-" not in line, line


def test_plain_http_to_serve_is_named(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.recv(100)
    line = server.wait_for(lambda x: "rejected" in x and "plain HTTP" in x)
    assert "the client spoke plain HTTP, not TLS" in line and "0A00009C" not in line, line


def test_a_path_looking_identity_is_a_missing_file_not_a_label(pki):
    line = fails("connect", "127.0.0.1:1", "--identity", "./alice-typo", "--store", pki / "none.db",
                 "--secret-file", pki / "secret")
    assert "no such file: ./alice-typo" in line, line


def test_a_refused_client_does_not_print_connected(pki, server):
    r = run_cli("connect", f"127.0.0.1:{server.port}", "--anchor", pki / "pki" / "root" / "cert.pem",
                "--identity", pki / "bob.p12", "--password-file", pki / "pw")
    assert r.returncode == 1, r.stdout
    assert "connected:" not in r.stdout, r.stdout


# ---- Item 6: re-issue and repackaging.

def test_pki_issue_reissue_keeps_the_old_certificate_for_revocation(tmp_path):
    p = tmp_path / "pki"
    ok("pki", "init", "--dir", p, "--name", "R")
    ok("pki", "intermediate", "--dir", p, "--name", "C")
    first = json.loads(ok("pki", "issue", "server", "--dir", p, "--ca", "C", "--dns", "api.test", "--json").stdout)
    assert "--reissue" in fails("pki", "issue", "server", "--dir", p, "--ca", "C", "--dns", "api.test")
    second = json.loads(ok("pki", "issue", "server", "--dir", p, "--ca", "C", "--dns", "api.test", "--reissue",
                           "--json").stdout)
    assert second["serial"] != first["serial"] and second["cert"] == first["cert"]
    kept = p / "ca" / "c" / "issued" / f"api.test@{first['serial']}" / "cert.pem"
    assert kept.exists()
    listed = json.loads(ok("pki", "list", "--dir", p, "--json").stdout)
    assert {e["serial"] for e in listed if e["kind"] == "server"} == {first["serial"], second["serial"]}
    ok("pki", "revoke", "--dir", p, "--ca", "C", "--cert", kept, "--days", "3")
    listed = json.loads(ok("pki", "list", "--dir", p, "--json").stdout)
    assert [e["revoked"] for e in listed if e["serial"] == first["serial"]] == [True]
    assert [e["revoked"] for e in listed if e["serial"] == second["serial"]] == [False]


def test_p12_create_from_certificate_key_and_chain(pki, tmp_path):
    issued = pki / "pki" / "ca" / "customer-a" / "issued" / "alice"
    out = tmp_path / "alice.p12"
    args = ["p12", "create", "--cert", issued / "cert.pem", "--key", issued / "key.pem",
            "--chain", pki / "pki" / "ca" / "customer-a" / "chain.pem", "--out", out, "--password-file", pki / "pw"]
    made = json.loads(ok(*args, "--json").stdout)
    assert made["chain_count"] == 2, made
    seen = json.loads(ok("p12", "inspect", out, "--password-file", pki / "pw", "--json").stdout)
    assert seen["identities"][0]["leaf_sha256"] == made["leaf_sha256"] and seen["identities"][0]["chain_count"] == 2
    assert "--force" in fails(*args)
    ok(*args, "--force", "--legacy")
    # the .p12's password as `pki issue --p12` names it works here too
    again = [a if a != "--password-file" else "--p12-password-file" for a in args]
    ok(*again, "--force")
    assert json.loads(ok("p12", "inspect", out, "--password-file", pki / "pw", "--json").stdout)["identities"]


def test_store_import_of_a_pem_certificate_and_key(pki, tmp_path):
    issued = pki / "pki" / "ca" / "customer-a" / "issued" / "alice"
    s = store(tmp_path)
    out = json.loads(ok(*s, "import", issued / "chain.pem", "--key", issued / "key.pem", "--label", "pem",
                        "--json").stdout)
    assert out["chain_count"] == 2, out
    both = tmp_path / "both.pem"
    write_secret(both, (issued / "key.pem").read_text() + (issued / "chain.pem").read_text())
    ok(*s, "import", both, "--label", "both")
    assert json.loads(ok(*s, "show", "both", "--json").stdout)["leaf_sha256"] == out["leaf_sha256"]


def test_store_export_refuses_to_overwrite_without_force(pki, tmp_path):
    s = store(tmp_path)
    ok(*s, "import", pki / "alice.p12", "--label", "a", "--password-file", pki / "pw")
    target = tmp_path / "out.p12"
    target.write_text("keep me")
    assert "--force" in fails(*s, "export", "a", "--out", target, "--password-file", pki / "pw")
    assert target.read_text() == "keep me"
    ok(*s, "export", "a", "--out", target, "--password-file", pki / "pw", "--force")
    assert target.read_bytes() != b"keep me"


# ---- Item 8: serve's log.

def test_serve_log_lines_have_rfc3339_times_and_say_rotated_once_and_recovered(pki, tmp_path):
    s = store(tmp_path)
    ok(*s, "import", pki / "server.p12", "--label", "srv", "--password-file", pki / "pw")
    policy = tmp_path / "clients.json"
    anchor = pki / "pki" / "ca" / "customer-a" / "cert.pem"
    policy.write_text(json.dumps({"anchors": [str(anchor)], "anchors_only": True}))
    srv = Serve("--port", 0, "--identity", "srv", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret",
                "--policy", policy, timed=True)

    def wait(word):
        return srv.wait_for(lambda line: word in line, f"with {word!r}", timeout=20)

    try:
        srv.listening()
        policy.write_text("{ broken")
        failed = wait("reload failed")
        assert RFC3339.match(failed), failed
        policy.write_text(json.dumps({"anchors": [str(anchor)], "anchors_only": False}))
        recovered = wait("recovered:")
        assert RFC3339.match(recovered), recovered
        ok("pki", "issue", "server", "--dir", pki / "pki", "--ca", "Customer A", "--dns", "rotated.test",
           "--p12", tmp_path / "two.p12", "--password-file", pki / "pw")
        ok(*s, "import", tmp_path / "two.p12", "--label", "srv", "--replace", "--password-file", pki / "pw")
        rotated = wait("rotated:")
        assert RFC3339.match(rotated) and "identity rotated" not in rotated and "now presenting" in rotated, rotated
    finally:
        srv.stop()
    seen = srv.seen + srv.next_lines(0.5)
    # One recovered line for the one failure.
    assert len([x for x in seen if "recovered:" in x]) == 1, seen
