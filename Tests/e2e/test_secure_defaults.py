"""Issue 35, items 1-4, through the CLI (and Python where the front end is Python): anchors mean
those anchors only (system store only with --system-anchors / "system_anchors": true), a server
that names client anchors requires a client certificate, no identity is presented unless named
(--identity auto for automatic selection), enrollment records are never offered as identities.

The "system store" is a bundle named by SSL_CERT_FILE holding the root that signs the server:
what a client with only its own anchors must not trust."""
import glob
import json
import os
import subprocess

import pytest

from conftest import CLI, write_secret
from serve_support import Serve, ok

PW = "p12\n"


@pytest.fixture
def world(tmp_path):
    """Two PKIs: "Real Root" signs the server and a client; "Other Root" signs nothing here."""
    write_secret(tmp_path / "pw", PW)
    real, other = tmp_path / "real", tmp_path / "other"
    ok("pki", "init", "--dir", real, "--name", "Real Root")
    ok("pki", "intermediate", "--dir", real, "--name", "Real CA")
    ok("pki", "issue", "server", "--dir", real, "--ca", "Real CA", "--dns", "server.test", "--name", "server",
       "--p12", tmp_path / "server.p12", "--password-file", tmp_path / "pw")
    ok("pki", "issue", "client", "--dir", real, "--ca", "Real CA", "--name", "alice",
       "--p12", tmp_path / "alice.p12", "--password-file", tmp_path / "pw")
    ok("pki", "init", "--dir", other, "--name", "Other Root")
    chain = glob.glob(str(real / "ca" / "*" / "issued" / "server" / "chain.pem"))
    assert len(chain) == 1, chain
    return {"dir": tmp_path, "real_root": real / "root" / "cert.pem", "other_root": other / "root" / "cert.pem",
            "server_chain": chain[0]}


def run(args, env_extra=None, timeout=60):
    env = dict(os.environ)
    env.pop("MTLS_STORE", None)
    env.update(env_extra or {})
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def serving(world, *args):
    d = world["dir"]
    s = Serve("--identity", d / "server.p12", "--password-file", d / "pw", *args)
    return s, s.listening()


def test_anchors_mean_those_anchors_only_in_verify_connect_and_policy_files(world):
    d = world["dir"]
    system = {"SSL_CERT_FILE": str(world["real_root"])}
    # verify: the system store (the bundle) trusts the chain without anchors; with another
    # anchor, only that anchor counts, unless --system-anchors.
    base = ["verify", world["server_chain"], "--host", "server.test", "--json"]
    assert json.loads(run(base, system).stdout)["trusted"] is True
    r = run(base + ["--anchor", world["other_root"]], system)
    assert json.loads(r.stdout)["trusted"] is False, r.stdout
    assert json.loads(run(base + ["--anchor", world["other_root"], "--system-anchors"], system).stdout)["trusted"] is True
    assert json.loads(run(base + ["--anchor", world["other_root"], "--anchors-only"], system).stdout)["trusted"] is False
    assert run(base + ["--anchor", world["other_root"], "--anchors-only", "--system-anchors"], system).returncode != 0

    s, port = serving(world)
    try:
        target = f"127.0.0.1:{port}"
        conn = ["connect", target, "--verify-as", "server.test", "--json", "--timeout", "10"]
        r = run(conn + ["--anchor", world["other_root"]], system)
        out = json.loads(r.stdout)
        assert out["connected"] is False and out["error_code"] == "untrusted", r.stdout
        out = json.loads(run(conn + ["--anchor", world["other_root"], "--system-anchors"], system).stdout)
        assert out["connected"] is True, out
        # A policy file with anchors: the same rule; "system_anchors": true opts in; the old
        # spelling "anchors_only": false keeps its meaning.
        for extra, trusted in [({}, False), ({"system_anchors": True}, True), ({"anchors_only": False}, True)]:
            policy = d / "policy.json"
            policy.write_text(json.dumps({"anchors": [str(world["other_root"])], **extra}))
            out = json.loads(run(conn + ["--policy", policy], system).stdout)
            assert out["connected"] is trusted, (extra, out)
        # A host rule's own anchors too.
        policy.write_text(json.dumps({"hosts": [{"host": "127.0.0.1", "anchors": [str(world["other_root"])]}]}))
        assert json.loads(run(conn + ["--policy", policy], system).stdout)["connected"] is False
    finally:
        s.stop()


def test_python_policy_with_anchors_refuses_a_system_root(world):
    import mtls
    os.environ["SSL_CERT_FILE"] = str(world["real_root"])
    try:
        chain = mtls.Certificate.load_all(world["server_chain"])
        assert mtls.Policy().evaluate(chain, host="server.test").trusted
        assert not mtls.Policy(anchors=[world["other_root"]]).evaluate(chain, host="server.test").trusted
        assert mtls.Policy(anchors=[world["other_root"]], system_anchors=True).evaluate(chain, host="server.test").trusted
        assert mtls.Policy(anchors=[world["other_root"]], anchors_only=False).evaluate(chain, host="server.test").trusted
    finally:
        del os.environ["SSL_CERT_FILE"]


def test_serve_with_client_anchors_requires_a_client_certificate(world):
    d = world["dir"]
    conn_args = ["--anchor", world["real_root"], "--verify-as", "server.test", "--timeout", "10", "--send", "hi\\n"]
    s, port = serving(world, "--client-anchor", world["real_root"], "--count", "2")
    try:
        r = run(["connect", f"127.0.0.1:{port}", *conn_args])
        assert r.returncode != 0, r.stdout
        s.wait_line("rejected ")
        r = run(["connect", f"127.0.0.1:{port}", *conn_args, "--identity", d / "alice.p12", "--password-file", d / "pw"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert "presented" in r.stdout
    finally:
        s.stop()
    # Optional client certificates only when asked for by name.
    s, port = serving(world, "--client-anchor", world["real_root"], "--optional-client-cert", "--count", "1")
    try:
        r = run(["connect", f"127.0.0.1:{port}", *conn_args])
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no certificate" in s.wait_line("accepted ")
    finally:
        s.stop()
    r = run(["serve", "--identity", d / "server.p12", "--password-file", d / "pw", "--client-anchor",
             world["real_root"], "--optional-client-cert", "--require-client-cert"])
    assert r.returncode != 0 and "not both" in r.stderr


def test_connect_presents_no_identity_unless_named_or_auto(world):
    d = world["dir"]
    write_secret(d / "secret", "store passphrase\n")
    store = ["--store", d / "s.db", "--secret-file", d / "secret"]
    ok("store", *store, "--kdf-log-n", "10", "import", d / "alice.p12", "--label", "alice", "--password-file", d / "pw")
    env = {"MTLS_STORE": str(d / "s.db"), "MTLS_STORE_SECRET_FILE": str(d / "secret")}
    conn_args = ["--anchor", world["real_root"], "--verify-as", "server.test", "--timeout", "10", "--send", "hi\\n"]
    s, port = serving(world, "--client-anchor", world["real_root"], "--optional-client-cert", "--count", "2")
    try:
        r = run(["connect", f"127.0.0.1:{port}", *conn_args], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no client certificate" in r.stdout, r.stdout
        assert "no certificate" in s.wait_line("accepted ")
        r = run(["connect", f"127.0.0.1:{port}", *conn_args, "--identity", "auto"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "presented" in r.stdout and "alice" in r.stdout, r.stdout
        assert "alice" in s.wait_line("accepted ")
    finally:
        s.stop()
    r = run(["connect", "127.0.0.1:1", "--identity", "auto"])
    assert r.returncode != 0 and "store" in r.stderr


def test_enrollment_records_are_never_identities(world):
    import mtls
    d = world["dir"]
    write_secret(d / "secret", "store passphrase\n")
    store = ["--store", d / "s.db", "--secret-file", d / "secret"]
    r = run(["enroll", "pki", "--dir", d / "real", "--ca", "Real CA", "--name", "svc.local", "--label", "svc", *store])
    assert r.returncode == 0, r.stdout + r.stderr
    with mtls.Store(d / "s.db", secret_file=d / "secret") as st:
        labels = [i.friendly_name for i in st.identities()]
    assert labels == ["svc"], labels
