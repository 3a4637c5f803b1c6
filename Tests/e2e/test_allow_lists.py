"""Who may connect (issue 39), end to end: `mtls serve --allow-*` accepts one client and refuses
another for each kind of allow-list, naming the rule that refused, whatever the client (mtls
connect, openssl s_client, the Python binding); `mtls connect --allow-uri` judges the server; a
policy file's "allow" does the same; a malformed pattern is refused at start; `mtls doctor`
names the flag to change. PKI: scripts/test-pki.sh --allow."""
import json
import os
import subprocess

import pytest

from conftest import REPO, run_cli
from serve_support import Serve

PKI_SCRIPT = os.path.join(REPO, "scripts", "test-pki.sh")


@pytest.fixture(scope="module")
def apki(tmp_path_factory):
    d = tmp_path_factory.mktemp("allow-pki")
    subprocess.run([PKI_SCRIPT, "--allow", str(d)], check=True, capture_output=True)
    return d


def serve(apki, *args):
    """`mtls serve` with the allow PKI's server identity, trusting both roots for clients."""
    s = Serve("--cert", apki / "server-chain.pem", "--key", apki / "server.key",
              "--client-anchor", apki / "root.pem", "--client-anchor", apki / "root-2.pem", *args)
    return s, s.listening()


def connect(apki, port, who, *args):
    return run_cli("connect", f"127.0.0.1:{port}", "--cert", apki / f"{who}-chain.pem", "--key", apki / f"{who}.key",
                   "--anchor", apki / "root.pem", "--verify-as", "server.test", *args, timeout=30)


def spki_pin(path):
    import mtls
    return mtls.Certificate.load(path).spki_pin


KINDS = [
    # flag, value (a callable of the PKI folder), accepted, refused, what the refusal says
    ("--allow-cn", lambda d: "alice", "alice", "bob", 'CN "bob" matches no --allow-cn'),
    ("--allow-ou", lambda d: "eng", "alice", "bob", 'OU ["ops"] match no --allow-ou'),
    ("--allow-dns", lambda d: "*.svc.example", "alice", "bob", "DNS SANs [bob.other.example] match no --allow-dns"),
    ("--allow-uri", lambda d: "spiffe://example.org/ns/*/sa/**", "alice", "bob",
     "URI SANs [spiffe://other.org/ns/prod/sa/bob] match no --allow-uri"),
    ("--allow-spki", lambda d: spki_pin(d / "alice.pem"), "alice", "bob", "matches no --allow-spki"),
    ("--allow-issuer", lambda d: d / "root-2.pem", "carol", "alice", 'anchor "Allow Root"'),
]


@pytest.mark.parametrize("flag,value,accepted,refused,says", KINDS, ids=[k[0] for k in KINDS])
def test_serve_accepts_one_client_and_refuses_another_naming_the_rule(apki, flag, value, accepted, refused, says):
    s, port = serve(apki, flag, value(apki))
    try:
        r = connect(apki, port, accepted)
        assert r.returncode == 0, r.stdout + r.stderr
        line = s.wait_line("accepted")
        assert f"CN={accepted}" in line
        r = connect(apki, port, refused)
        assert r.returncode != 0
        assert "bad certificate" in r.stdout + r.stderr
        line = s.wait_line("rejected")
        assert "not_allowed" in line and says in line, line
        assert "the client certificate is not allowed by the allow-list given for this connection, listener" in line
    finally:
        s.stop()


def test_openssl_and_python_clients_are_judged_alike(apki):
    import mtls
    s, port = serve(apki, "--allow-uri", "spiffe://example.org/ns/prod/sa/*")
    try:
        ok = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-cert", apki / "alice.pem",
                             "-key", apki / "alice.key", "-CAfile", apki / "root.pem", "-quiet"],
                            input="ping\n", capture_output=True, text=True, timeout=30)
        assert "ping" in ok.stdout, ok.stderr
        assert "CN=alice" in s.wait_line("accepted")
        subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-cert", apki / "carol.pem",
                        "-key", apki / "carol.key", "-CAfile", apki / "root.pem", "-quiet"],
                       input="ping\n", capture_output=True, text=True, timeout=30)
        line = s.wait_line("rejected")
        assert "URI SANs [spiffe://example.org/ns/dev/sa/carol/x] match no --allow-uri" in line, line

        ident = mtls.Identity.from_pem((apki / "bob-chain.pem").read_text(), (apki / "bob.key").read_text())
        with pytest.raises(mtls.MTLSError):
            with mtls.Connection.connect("127.0.0.1", port, identity=ident, verify_as="server.test",
                                         policy=mtls.Policy(anchors=[apki / "root.pem"]), handshake_timeout=10) as c:
                c.write(b"ping\n")
                c.read()
        line = s.wait_line("rejected")
        assert "URI SANs [spiffe://other.org/ns/prod/sa/bob] match no --allow-uri" in line and "not_allowed" in line
    finally:
        s.stop()


def test_connect_allow_uri_judges_the_server(apki):
    s, port = serve(apki)
    try:
        r = connect(apki, port, "alice", "--allow-uri", "spiffe://example.org/ns/prod/sa/server")
        assert r.returncode == 0, r.stdout + r.stderr
        r = connect(apki, port, "alice", "--allow-uri", "spiffe://example.org/ns/prod/sa/db", "--json")
        assert r.returncode != 0
        out = json.loads(r.stdout)
        assert out["error_code"] == "untrusted"
        codes = [x["code"] for x in out["evaluation"]["reasons"]]
        assert codes == ["not_allowed"]
        assert "URI SANs [spiffe://example.org/ns/prod/sa/server] match no --allow-uri" in out["evaluation"]["reasons"][0]["message"]
    finally:
        s.stop()


def test_verify_judges_a_chain_offline(apki):
    base = ["verify", "--anchor", apki / "root.pem", "--purpose", "client", "--allow-uri", "spiffe://example.org/ns/*/sa/**"]
    assert run_cli(*base, apki / "alice-chain.pem").returncode == 0
    r = run_cli(*base, apki / "bob-chain.pem", "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert [x["code"] for x in out["reasons"]] == ["not_allowed"], out
    assert "URI SANs [spiffe://other.org/ns/prod/sa/bob] match no --allow-uri" in out["reasons"][0]["message"]


def test_policy_file_allow_refuses_with_the_policy_named(apki, tmp_path):
    policy = tmp_path / "clients.json"
    policy.write_text(json.dumps({"anchors": [str(apki / "root.pem")], "purpose": "client", "name_check": "none",
                                  "allow": {"dns": ["**.svc.example"]}}))
    s = Serve("--cert", apki / "server-chain.pem", "--key", apki / "server.key", "--policy", policy)
    port = s.listening()
    try:
        assert connect(apki, port, "alice").returncode == 0
        assert connect(apki, port, "bob").returncode != 0
        line = s.wait_line("rejected")
        assert "the policy's allow-list (\"allow\")" in line and "DNS SANs [bob.other.example]" in line, line
    finally:
        s.stop()


@pytest.mark.parametrize("flag,pattern,says", [
    ("--allow-uri", "spiffe://*.example.org/ns", "a wildcard in the authority (trust domain) is not allowed"),
    ("--allow-dns", "a*.example", "a wildcard must be a whole segment"),
    ("--allow-spki", "sha256/nope", "--allow-spki"),
    ("--allow-issuer", "/nonexistent/ca.pem", "--allow-issuer /nonexistent/ca.pem"),
])
def test_a_malformed_pattern_is_refused_at_start(apki, flag, pattern, says):
    r = run_cli("serve", "--cert", apki / "server-chain.pem", "--key", apki / "server.key",
                "--client-anchor", apki / "root.pem", flag, pattern, timeout=30)
    assert r.returncode != 0
    assert says in r.stderr and flag in r.stderr, r.stderr


def test_doctor_names_the_allow_list_to_change(apki):
    s, port = serve(apki, "--allow-cn", "alice")
    try:
        r = run_cli("doctor", f"127.0.0.1:{port}", "--cert", apki / "alice-chain.pem", "--key", apki / "alice.key",
                    "--anchor", apki / "root.pem", "--verify-as", "server.test",
                    "--allow-uri", "spiffe://example.org/ns/prod/sa/db", timeout=60)
        assert r.returncode == 1
        assert "not_allowed" in r.stdout or "not allowed" in r.stdout, r.stdout
        assert "add one of its names to the list that refused it (--allow-uri" in r.stdout, r.stdout
        # The server refuses bob: doctor says its allow-list may be why.
        r = run_cli("doctor", f"127.0.0.1:{port}", "--cert", apki / "bob-chain.pem", "--key", apki / "bob.key",
                    "--anchor", apki / "root.pem", "--verify-as", "server.test", timeout=60)
        assert r.returncode == 1
        assert "its allow-list" in r.stdout and "--allow-cn" in r.stdout, r.stdout
    finally:
        s.stop()
