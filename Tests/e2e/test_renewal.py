"""Renewal against real certificate authorities, the parts of issue 27 after enrollment:

- ACME Renewal Information (RFC 9773). Debian's pebble (2.4.0) offers no `renewalInfo` in its
  directory, so `ARIFront` is a small real HTTPS server next to pebble: it serves pebble's own
  directory (read from pebble) with `renewalInfo` added, pointing at itself, and answers the
  renewalInfo GETs with the window the test sets. Every other request goes to pebble itself.
- ACME revoke (`mtls enroll revoke`), checked with pebble's management API.
- Renewal events through the lifecycle event mechanism: `mtls renew --loop` prints them, C and
  Python receive them from an mtls_renewer (pebble stopped → failure events with the backoff,
  the old identity still served; a chain the program's policy refuses → not installed).
- Enrollment records out of `mtls store list` (unless --enrollments), `store check` and metrics.
- Deleting a token key a renewal replaced, after a grace period (default: kept)."""
import base64
import datetime
import http.server
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest
from cryptography import x509

from conftest import free_port, run_cli, write_secret, needs_softhsm, softhsm_conf, SOFTHSM_MODULE
from test_enroll import Pebble, enroll_acme, show, _loop_lines


@pytest.fixture(scope="module")
def pebble(tmp_path_factory):
    p = Pebble(tmp_path_factory.mktemp("pebble-renewal"))
    yield p
    p.stop()


@pytest.fixture
def store(tmp_path):
    write_secret(tmp_path / "secret", "renewal secret\n")
    return ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]


def _b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def ari_id(pem):
    """RFC 9773 §4.1, computed here with the `cryptography` package (not libmtls): base64url of
    the AKI keyIdentifier, ".", base64url of the serial's DER INTEGER content octets."""
    cert = x509.load_pem_x509_certificate(pem)
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    n = cert.serial_number
    serial = n.to_bytes((n.bit_length() + 8) // 8, "big")  # a leading 0 when the top bit is set
    return _b64url(aki) + "." + _b64url(serial)


def _rfc3339(d):
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


class ARIFront:
    """HTTPS on a free 127.0.0.1 port with pebble's own certificate: GET /dir is pebble's
    directory plus "renewalInfo"; GET /renewal-info/ID answers `self.window` (start, end) with
    `self.retry_after`, or `self.status` when it is not 200. Records the IDs asked for."""

    def __init__(self, pebble):
        self.pebble = pebble
        self.port = free_port()
        self.window = None
        self.status = 200
        self.retry_after = None
        self.seen = []
        # When set, the directory's newAccount is this front's, which refuses every request as a
        # server wanting a contact does (and counts them): the recorded account must be used.
        self.refuse_new_account = False
        self.new_account_posts = 0
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body, headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/dir":
                    ctx = ssl.create_default_context(cafile=str(front.pebble.https_root))
                    ctx.check_hostname = False
                    with urllib.request.urlopen(front.pebble.directory, context=ctx, timeout=10) as r:
                        d = json.loads(r.read())
                    d["renewalInfo"] = f"https://127.0.0.1:{front.port}/renewal-info"
                    if front.refuse_new_account:
                        d["newAccount"] = f"https://127.0.0.1:{front.port}/new-account"
                    return self._send(200, json.dumps(d).encode(), [("Content-Type", "application/json")])
                if self.path.startswith("/renewal-info/"):
                    front.seen.append(self.path[len("/renewal-info/"):])
                    if front.status != 200:
                        return self._send(front.status, b'{"type":"urn:ietf:params:acme:error:serverInternal","detail":"down"}',
                                          [("Content-Type", "application/problem+json")])
                    start, end = front.window
                    body = json.dumps({"suggestedWindow": {"start": _rfc3339(start), "end": _rfc3339(end)}}).encode()
                    headers = [("Content-Type", "application/json")]
                    if front.retry_after is not None:
                        headers.append(("Retry-After", str(front.retry_after)))
                    return self._send(200, body, headers)
                self._send(404, b"")

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/new-account":
                    front.new_account_posts += 1
                    return self._send(400, b'{"type":"urn:ietf:params:acme:error:malformed",'
                                           b'"detail":"Contact information is missing"}',
                                      [("Content-Type", "application/problem+json")])
                self._send(404, b"")

        issued = pebble.d / "pki" / "ca" / "acme" / "issued" / "localhost"
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(issued / "chain.pem"), str(issued / "key.pem"))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.directory = f"https://127.0.0.1:{self.port}/dir"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ari(pebble):
    f = ARIFront(pebble)
    yield f
    f.stop()


def enroll_via(front, pebble, store, label, name):
    r = run_cli("enroll", "acme", "--directory", front.directory, "--anchor", pebble.https_root,
                "--chain-anchor", pebble.issuing_ca, "--name", name, "--label", label, "--http-port", pebble.http_port,
                "--listen-address", "127.0.0.1", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def leaf_pem(store, label, tmp_path):
    """The stored leaf, exported through the CLI (a PKCS#12 read back by openssl)."""
    write_secret(tmp_path / "p12pass", "p12\n")
    out = tmp_path / f"{label}.p12"
    if out.exists():
        out.unlink()
    r = run_cli("store", "export", label, "--out", out, "--password-file", tmp_path / "p12pass", *store)
    assert r.returncode == 0, r.stdout + r.stderr
    return subprocess.run(["openssl", "pkcs12", "-in", out, "-clcerts", "-nokeys", "-passin", "pass:p12"],
                          capture_output=True, check=True).stdout


def test_ari_window_in_the_past_renews_now_and_the_order_replaces_the_certificate(pebble, ari, store, tmp_path):
    first = enroll_via(ari, pebble, store, "ari-now", "ari-now.test")
    expected = ari_id(leaf_pem(store, "ari-now", tmp_path))
    now = datetime.datetime.now(datetime.timezone.utc)
    ari.window = (now - datetime.timedelta(hours=2), now - datetime.timedelta(hours=1))
    # Not --force: a fresh certificate, far from two thirds of its lifetime, renewed because the
    # server's window says so.
    r = run_cli("renew", "ari-now", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["renewed"] is True and out["due_source"] == "ari", out
    assert out["serial"] != first["serial"]
    assert expected in ari.seen, (expected, ari.seen)
    assert out["replaces"] == expected, out
    assert show(store, "ari-now")["leaf_sha256"] == out["leaf_sha256"]


def test_ari_window_in_the_future_is_not_due_and_retry_after_says_when_to_ask_again(pebble, ari, store, tmp_path):
    first = enroll_via(ari, pebble, store, "ari-later", "ari-later.test")
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now + datetime.timedelta(days=10), now + datetime.timedelta(days=11)
    ari.window = (start, end)
    ari.retry_after = 3600
    r = run_cli("renew", "ari-later", *store, "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["renewed"] is False and out["due_source"] == "ari", out
    due = datetime.datetime.fromisoformat(out["due_at"].replace("Z", "+00:00"))
    assert start - datetime.timedelta(seconds=1) <= due <= end + datetime.timedelta(seconds=1), out
    again = datetime.datetime.fromisoformat(out["check_again_at"].replace("Z", "+00:00"))
    assert abs((again - now).total_seconds() - 3600) < 120, out
    assert out["ari_id"] == ari_id(leaf_pem(store, "ari-later", tmp_path))
    # The same certificate and window: the same point in it (jitter per certificate, not per check).
    again_out = json.loads(run_cli("renew", "ari-later", *store, "--json", timeout=60).stdout)
    assert again_out["due_at"] == out["due_at"]
    assert show(store, "ari-later")["leaf_sha256"] == first["leaf_sha256"]


def test_ari_failing_falls_back_to_two_thirds_of_the_lifetime(pebble, ari, store):
    first = enroll_via(ari, pebble, store, "ari-down", "ari-down.test")
    ari.status = 500
    r = run_cli("renew", "ari-down", *store, "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["renewed"] is False and out["due_source"] == "lifetime", out
    assert "500" in out["renewal_info_error"], out
    assert ari.seen, "the renewal information was not asked for"
    # Two thirds of the lifetime, less up to 5 % jitter.
    not_after = datetime.datetime.fromisoformat(first["not_after"].replace("Z", "+00:00"))
    due = datetime.datetime.fromisoformat(out["due_at"].replace("Z", "+00:00"))
    assert due < not_after
    assert show(store, "ari-down")["leaf_sha256"] == first["leaf_sha256"]


def test_pebble_without_renewal_information_uses_two_thirds_and_sends_no_replaces(pebble, store):
    r = enroll_acme(pebble, store, "plain", ["plain.test"], "--http-port", pebble.http_port)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(run_cli("renew", "plain", *store, "--json", timeout=60).stdout)
    assert out["renewed"] is False and out["due_source"] == "lifetime" and "renewal_info_error" not in out, out
    r = run_cli("renew", "plain", "--force", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replaces" not in json.loads(r.stdout)


def test_renew_and_revoke_use_the_recorded_account_not_a_new_account_request(pebble, ari, store):
    """Renewal and revoke sign with the recorded account URL as kid: a server whose newAccount
    wants a contact (or an external account binding) is not asked again. Before, both sent
    newAccount with only termsOfServiceAgreed and failed with "Contact information is missing"."""
    first = enroll_via(ari, pebble, store, "kid", "kid.test")
    ari.window = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2),
                  datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1))
    ari.refuse_new_account = True
    r = run_cli("renew", "kid", "--force", *store, "--json", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    renewed = json.loads(r.stdout)
    assert renewed["renewed"] and renewed["serial"] != first["serial"], renewed
    r = run_cli("enroll", "revoke", "kid", *store, "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["revoked"] is True
    assert ari.new_account_posts == 0


def _cert_status(pebble, serial_hex):
    ctx = ssl.create_default_context(cafile=str(pebble.https_root))
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{pebble.mgmt}/cert-status-by-serial/{serial_hex}", context=ctx,
                                timeout=10) as r:
        return json.loads(r.read())


def test_acme_revoke_is_reported_revoked_by_pebble(pebble, store):
    r = enroll_acme(pebble, store, "gone", ["gone.test"], "--http-port", pebble.http_port)
    assert r.returncode == 0, r.stdout + r.stderr
    serial = json.loads(r.stdout)["serial"]
    assert _cert_status(pebble, serial)["Status"] == "Valid"
    r = run_cli("enroll", "revoke", "gone", "--reason", "keyCompromise", *store, "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["revoked"] is True and out["serial"] == serial and out["reason"] == 1, out
    status = _cert_status(pebble, serial)
    assert status["Status"] == "Revoked" and status["Reason"] == 1, status
    # A second revocation is the CA's refusal, with its problem detail.
    r = run_cli("enroll", "revoke", "gone", *store, "--json", timeout=60)
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "ca_rejected", r.stdout
    # Not a CRLReason: refused before anything is sent.
    r = run_cli("enroll", "revoke", "gone", "--reason", "7", *store, "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "invalid_argument", r.stdout


def test_revoke_refuses_an_identity_not_enrolled_with_acme(store, tmp_path):
    pki = tmp_path / "pki"
    assert run_cli("pki", "init", "--dir", pki, "--name", "Rv Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Rv CA").returncode == 0
    assert run_cli("enroll", "pki", "--dir", pki, "--ca", "Rv CA", "--name", "rv.local", "--label", "rv", *store).returncode == 0
    r = run_cli("enroll", "revoke", "rv", *store, "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["error"] == "unsupported", r.stdout


def test_renewer_events_when_pebble_is_stopped_and_the_old_identity_is_still_served(tmp_path_factory, store, tmp_path):
    """Python → C mtls_renewer: pebble gone → a "renewal_failed" event with the error and the
    backoff's next attempt; a listener following the label keeps serving the old identity."""
    import mtls
    p = Pebble(tmp_path_factory.mktemp("pebble-stopped"))
    try:
        r = enroll_acme(p, store, "svc", ["127.0.0.1"], "--http-port", p.http_port)
        assert r.returncode == 0, r.stdout + r.stderr
        enrolled = json.loads(r.stdout)
    finally:
        p.stop()
    events = []
    with mtls.Store(tmp_path / "store.db", secret_file=tmp_path / "secret") as st:
        source = mtls.IdentitySource.follow(st, "svc")
        renewer = mtls.Renewer(st, "svc")
        renewer.set_event_callback(events.append)
        before = time.time()
        renewed, wake = renewer.run_once(force=True)
        assert renewed == 0
        failed = [e for e in events if e.kind == "renewal_failed"]
        assert len(failed) == 1, events
        e = failed[0]
        assert e.label == "svc" and e.error is mtls.errors.ConnectError, e
        # First retry: 30 s ± 20 %, in whole seconds (mtls_event.next_attempt: the fraction is cut
        # off, so 24 s after `before` may read 23.1 s).
        assert 23 <= e.next_attempt.timestamp() - before <= 37, e
        assert wake == e.next_attempt
        # Not due again yet: nothing is tried, no event.
        events.clear()
        assert renewer.run_once() == (0, wake) and events == []
        assert source.current.leaf.sha256_hex == enrolled["leaf_sha256"]
        assert st.info("svc").leaf_sha256 == enrolled["leaf_sha256"]


def test_renewer_not_installed_event_when_the_chain_fails_the_policy(store, tmp_path):
    import mtls
    pki, other = tmp_path / "pki", tmp_path / "other"
    assert run_cli("pki", "init", "--dir", pki, "--name", "Ev Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Ev CA").returncode == 0
    assert run_cli("pki", "init", "--dir", other, "--name", "Unrelated Root").returncode == 0
    r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Ev CA", "--name", "ev.local", "--label", "ev", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    events = []
    with mtls.Store(tmp_path / "store.db", secret_file=tmp_path / "secret") as st:
        before = st.info("ev").leaf_sha256
        wrong = mtls.Policy(anchors=[mtls.Certificate.load(str(other / "root" / "cert.pem"))], anchors_only=True)
        renewer = mtls.Renewer(st, "ev", policy=wrong)
        renewer.set_event_callback(events.append)
        assert renewer.run_once(force=True)[0] == 0
        kinds = [e.kind for e in events]
        assert kinds == ["renewal_not_installed"], events
        assert events[0].error is mtls.ChallengeFailed and "not installed" in events[0].message
        assert events[0].next_attempt is not None
        assert st.info("ev").leaf_sha256 == before
        # The program's own policy: installed, with the succeeded and scheduled events.
        events.clear()
        good = mtls.Renewer(st, "ev", policy=mtls.Policy(anchors=[mtls.Certificate.load(str(pki / "root" / "cert.pem"))]))
        good.set_event_callback(events.append)
        assert good.run_once(force=True)[0] == 1
        assert [e.kind for e in events] == ["renewal_succeeded", "renewal_scheduled"], events
        assert events[0].sha256 == st.info("ev").leaf_sha256 != before
        assert events[1].next_attempt > datetime.datetime.now(datetime.timezone.utc)


def test_renew_loop_prints_the_library_events(pebble, store):
    """`mtls renew --loop --json`: one line per event (the same events the C callback gets)."""
    r = enroll_acme(pebble, store, "looped", ["looped.test"], "--http-port", pebble.http_port)
    assert r.returncode == 0, r.stdout + r.stderr
    before = show(store, "looped")["leaf_sha256"]
    lines = _loop_lines(store, 2, timeout=180)
    assert [line["event"] for line in lines] == ["renewal_succeeded", "renewal_scheduled"], lines
    assert lines[0]["label"] == "looped" and lines[0]["renewed"] is True
    assert lines[0]["leaf_sha256"] == show(store, "looped")["leaf_sha256"] != before
    assert lines[1]["next_attempt"] is not None


def test_enrollment_records_are_not_listed_as_identities(store, tmp_path):
    pki = tmp_path / "pki"
    assert run_cli("pki", "init", "--dir", pki, "--name", "Ls Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Ls CA").returncode == 0
    assert run_cli("enroll", "pki", "--dir", pki, "--ca", "Ls CA", "--name", "ls.local", "--label", "ls", *store).returncode == 0
    listed = json.loads(run_cli("store", "list", *store, "--json").stdout)
    assert [(i["label"], i["class"]) for i in listed] == [("ls", "identity")], listed
    r = run_cli("store", "list", *store)
    assert "mtls-enrollment" not in r.stdout, r.stdout
    listed = json.loads(run_cli("store", "list", "--enrollments", *store, "--json").stdout)
    kinds = {i["label"]: i["kind"] for i in listed}
    assert kinds == {"ls": "identity", "mtls-enrollment:ls": "enrollment"}, listed
    record = next(i for i in listed if i["kind"] == "enrollment")
    assert record["enrolled_label"] == "ls" and record["class"] == "identity"
    # Its carrier certificate (100 years) is no certificate anyone presents: not in check or metrics.
    check = json.loads(run_cli("store", "check", "--within", "40000", *store, "--json").stdout)
    assert {i["label"] for i in check["expiring"]} == {"ls"}, check
    metrics = run_cli("store", "metrics", *store).stdout
    assert 'label="ls"' in metrics and "mtls-enrollment" not in metrics, metrics


def _objects(label, kind):
    return subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", label, "--login", "--pin", "1234",
                           "--list-objects", "--type", kind], capture_output=True, text=True).stdout


def _privkeys(label):
    out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", label, "--login", "--pin", "1234",
                          "--list-objects", "--type", "privkey"], capture_output=True, text=True)
    return out.stdout.count("Private Key Object")


@needs_softhsm
def test_previous_token_key_deleted_after_the_grace_period_only_when_asked(pebble, store, tmp_path):
    d = tmp_path
    (d / "tokens").mkdir()
    (d / "softhsm2.conf").write_text(f"directories.tokendir = {d}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
    write_secret(d / "pin", "1234\n")
    with softhsm_conf(d / "softhsm2.conf"):
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "grace-card", "--pin", "1234",
                        "--so-pin", "5678"], check=True, capture_output=True)
        uri = "pkcs11:token=grace-card;object=svc;id=%01"
        pin = ["--pin-file", d / "pin"]
        r = run_cli("token", "keygen", uri, "--type", "ec-p256", *pin, "--module", SOFTHSM_MODULE)
        assert r.returncode == 0, r.stdout + r.stderr
        r = enroll_acme(pebble, store, "svc", ["grace.test"], "--http-port", pebble.http_port,
                        extra=("--token-uri", uri, *pin))
        assert r.returncode == 0, r.stdout + r.stderr
        # Default: the key a renewal replaces stays on the token.
        r = run_cli("renew", "svc", "--force", *pin, *store, "--json", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _privkeys("grace-card") == 2
        r = run_cli("renew", "svc", *pin, *store, "--json", timeout=60)
        assert r.returncode == 0 and _privkeys("grace-card") == 2, r.stdout + r.stderr
        # A grace period that has not passed yet: still kept.
        r = run_cli("renew", "svc", "--delete-previous-keys-after", "86400", *pin, *store, "--json", timeout=60)
        assert r.returncode == 0 and _privkeys("grace-card") == 2, r.stdout + r.stderr
        # Passed: the previous key goes with its public key and its certificate; the current one stays.
        certs = _objects("grace-card", "cert").count("Certificate Object")
        assert _objects("grace-card", "pubkey").count("Public Key Object") == 2
        r = run_cli("renew", "svc", "--delete-previous-keys-after", "0", *pin, *store, "--json", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _privkeys("grace-card") == 1
        assert _objects("grace-card", "pubkey").count("Public Key Object") == 1
        assert _objects("grace-card", "cert").count("Certificate Object") == certs - 1
        current = show(store, "svc")["token_uri"]
        assert _objects("grace-card", "privkey").count("label:      svc~") == 1
        # The identity on the token still works: a renewal with it signs a new CSR there.
        r = run_cli("renew", "svc", "--force", *pin, *store, "--json", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["token_uri"] != current
