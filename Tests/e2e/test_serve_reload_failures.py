"""`mtls serve` following a store label whose row another process breaks (issue 26): one
"reload failed" line saying why (the row is tampered), none more while other labels are written,
one again on SIGHUP, the last good identity serving throughout, and a rotation once the label is
stored again."""
import hashlib
import signal
import socket
import ssl
import subprocess

from serve_support import Serve, make_pki, ok


def presented(port, tmp_path):
    """The SHA-256 of the leaf the TLS port presents."""
    ctx = ssl.create_default_context(cafile=str(tmp_path / "D" / "root" / "cert.pem"))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s, ctx.wrap_socket(s) as t:
        return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()


def leaf_sha256(store, label):
    import json
    return json.loads(ok(*store, "show", label, "--json").stdout)["leaf_sha256"]


def test_a_tampered_row_is_one_line_and_sighup_says_it_again(tmp_path):
    store = make_pki(tmp_path)
    pw = tmp_path / "pw"
    ok(*store, "import", tmp_path / "one.p12", "--label", "srv", "--password-file", pw)
    one = leaf_sha256(store, "srv")
    serve = Serve("--port", 0, "--identity", "srv", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret")
    try:
        port = serve.listening()
        assert presented(port, tmp_path) == one
        # Someone who can write the file but lacks the secret edits the row.
        subprocess.run(["sqlite3", str(tmp_path / "s.db"), "UPDATE items SET subject = 'CN=evil' WHERE label = 'srv'"],
                       check=True, timeout=30)
        line = serve.wait_line("reload failed")
        assert "[corrupt]" in line and "tampered" in line, line
        # Other labels written by other processes: no more lines about the same failure.
        ok(*store, "add-cert", tmp_path / "D" / "root" / "cert.pem", "--label", "root")
        ok(*store, "add-cert", tmp_path / "D" / "ca" / "customer-a" / "cert.pem", "--label", "customer")
        assert [x for x in serve.next_lines(1.5) if x.startswith("reload failed")] == []
        assert presented(port, tmp_path) == one, "the last good identity serves"
        # SIGHUP: the operator hears that the reload failed, once.
        serve.proc.send_signal(signal.SIGHUP)
        serve.wait_line("SIGHUP: reloading")
        failed = [x for x in serve.next_lines(1.5) if x.startswith("reload failed")]
        assert len(failed) == 1 and "[corrupt]" in failed[0], serve.seen
        # Stored again (another identity): rotated, one line.
        ok(*store, "import", tmp_path / "two.p12", "--label", "srv", "--replace", "--password-file", pw)
        assert "two" in serve.wait_line("rotated:")
        assert presented(port, tmp_path) == leaf_sha256(store, "srv") != one
        assert serve.proc.poll() is None
    finally:
        serve.stop()


def test_recovered_says_which_thing_recovered_and_another_things_reload_is_not_a_recovery(tmp_path):
    """The identity fails; the policy file then reloads: no recovered line (the identity still
    fails). The policy file fails and is fixed: `recovered: policy ...`. The identity is stored
    again: `recovered: identity srv ...`. One line per event, each with its RFC 3339 time."""
    import json
    import re
    store = make_pki(tmp_path)
    pw = tmp_path / "pw"
    ok(*store, "import", tmp_path / "one.p12", "--label", "srv", "--password-file", pw)
    policy = tmp_path / "clients.json"
    anchor = tmp_path / "D" / "ca" / "customer-a" / "cert.pem"
    policy.write_text(json.dumps({"anchors": [str(anchor)], "anchors_only": True}))
    serve = Serve("--port", 0, "--identity", "srv", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret",
                  "--policy", policy, timed=True)
    rfc3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")

    def wait(word):
        return serve.wait_for(lambda line: word in line, f"with {word!r}", timeout=20)

    try:
        serve.listening()
        subprocess.run(["sqlite3", str(tmp_path / "s.db"), "UPDATE items SET subject = 'CN=evil' WHERE label = 'srv'"],
                       check=True, timeout=30)
        assert "[corrupt]" in wait("reload failed")
        # Another thing (the policy file) reloads: the identity has not recovered.
        policy.write_text(json.dumps({"anchors": [str(anchor)], "anchors_only": False}))
        wait("policy reloaded")
        # The policy file fails, then is fixed: the policy recovered.
        policy.write_text("{ broken")
        wait("reload failed")
        policy.write_text(json.dumps({"anchors": [str(anchor)], "anchors_only": True}))
        recovered_policy = wait("recovered:")
        assert rfc3339.match(recovered_policy), recovered_policy
        assert "recovered: policy " in recovered_policy and str(policy) in recovered_policy, recovered_policy
        # The identity is stored again: it recovered.
        ok(*store, "import", tmp_path / "two.p12", "--label", "srv", "--replace", "--password-file", pw)
        wait("rotated:")
        recovered_identity = wait("recovered:")
        assert "recovered: identity srv" in recovered_identity, recovered_identity
    finally:
        serve.stop()
    seen = serve.seen + serve.next_lines(0.5)
    # After the first line (`listening on ADDRESS:PORT`, documented as the one without a time).
    assert seen[0].startswith("listening on ") and all(rfc3339.match(x) for x in seen[1:]), seen
    recovered = [x for x in seen if "recovered:" in x]
    assert len(recovered) == 2, seen
    # The policy reload while the identity was failing said nothing about recovering.
    first_policy_reload = next(i for i, x in enumerate(seen) if "policy reloaded" in x)
    assert "recovered:" not in seen[first_policy_reload + 1], seen
