"""`mtls store check --within DAYS [--json]` and `mtls store metrics` (issue 26) on a store whose
items expire in 3, 20 and 400 days (made with `mtls pki ... --days`)."""
import json
import re

import pytest

from conftest import run_cli, write_secret

FAST = ["--kdf-log-n", "10"]


def ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    base = tmp_path_factory.mktemp("expiry")
    d = base / "D"
    pw = base / "pw"
    write_secret(pw, "p12-secret\n")
    write_secret(base / "secret", "store passphrase\n")
    ok("pki", "init", "--dir", d, "--name", "Expiry Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", "soon", "--days", "3",
       "--p12", base / "soon.p12", "--password-file", pw)
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", "mid", "--days", "20",
       "--p12", base / "mid.p12", "--password-file", pw)
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "far.example", "--days", "400")
    st = ["store", "--store", base / "store.db", "--secret-file", base / "secret", *FAST]
    ok(*st, "import", base / "soon.p12", "--label", "soon", "--password-file", pw)
    ok(*st, "import", base / "mid.p12", "--label", 'mi"d', "--password-file", pw)
    far = next((d / "ca" / "customer-a" / "issued").glob("far.example*"))
    far_cert = far / "cert.pem" if far.is_dir() else far
    ok(*st, "add-cert", far_cert, "--label", "far")
    return st


def test_check_exit_status_and_listing(store):
    r = run_cli(*store, "check", "--within", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_cli(*store, "check", "--within", "10", "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert [(i["label"], i["class"], i["position"]) for i in out["expiring"]] == [("soon", "identity", 0)]
    soon = out["expiring"][0]
    assert soon["subject"] == "CN=soon" and soon["days_left"] in (2, 3) and soon["not_after"].endswith("Z")
    r = run_cli(*store, "check", "--within", "30", "--json")
    assert r.returncode == 1
    assert [i["label"] for i in json.loads(r.stdout)["expiring"]] == ["soon", 'mi"d']
    r = run_cli(*store, "check", "--within", "500")
    assert r.returncode == 1
    labels = [line.split("\t")[0] for line in r.stdout.splitlines()]
    assert labels == ["soon", 'mi"d', "far"], r.stdout
    assert "days left" in r.stdout


def test_check_fails_with_status_2_on_a_missing_store(tmp_path):
    write_secret(tmp_path / "s", "x\n")
    r = run_cli("store", "--store", tmp_path / "none.db", "--secret-file", tmp_path / "s", "check", "--within", "1")
    assert r.returncode == 2 and r.stderr.strip()


def test_metrics_are_prometheus_text(store):
    r = ok(*store, "metrics")
    lines = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    after = [line for line in lines if line.startswith("mtls_certificate_not_after_seconds{")]
    before = [line for line in lines if line.startswith("mtls_certificate_not_before_seconds{")]
    # Every certificate counts: the identities' chains too, not only the three leaves.
    assert len(after) == len(before) >= 3
    pattern = re.compile(r'^mtls_certificate_not_after_seconds\{label="((?:[^"\\]|\\.)*)",class="([a-z-]+)",'
                         r'subject="((?:[^"\\]|\\.)*)",sha256="([0-9a-f]{64})"\} (\d+)$')
    parsed = [pattern.match(line) for line in after]
    assert all(parsed), after
    labels = {m.group(1) for m in parsed}
    assert labels == {"soon", 'mi\\"d', "far"}
    classes = {m.group(1): m.group(2) for m in parsed}
    assert classes["far"] == "certificate" and classes["soon"] == "identity"
    assert "# TYPE mtls_certificate_not_after_seconds gauge" in r.stdout


# ---- Audit (issue 26): bad DAYS, hostile subjects, expired and not yet valid certificates.

def test_check_refuses_a_bad_days_count_with_status_64(store):
    for days in ("-1", "=-1", "abc", "1.5", "99999999999999999999", "", "0x10"):
        args = ["--within" + days] if days.startswith("=") else ["--within", days]
        r = run_cli(*store, "check", *args, "--json")
        assert r.returncode == 64, (days, r.returncode, r.stdout, r.stderr)
        assert "--within" in r.stderr, (days, r.stderr)
        assert not r.stdout or "error" in json.loads(r.stdout), r.stdout  # never a listing
    # A negative count is named as such, not as a missing value.
    assert "0 or more" in run_cli(*store, "check", "--within", "-1").stderr


def test_check_and_metrics_read_a_certificate_whose_subject_holds_nul_line_feeds_and_quotes(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from serve_support import hostile_certificate
    write_secret(tmp_path / "secret", "store passphrase\n")
    st = ["store", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret", *FAST]
    cn = 'we"ird\\x\ny} 1\nfake 2 \u00e9\r\t\x00z'
    hostile_certificate(tmp_path / "h.pem", cn, days=5)
    ok(*st, "add-cert", tmp_path / "h.pem", "--label", "hostile")
    r = run_cli(*st, "check", "--within", "10", "--json")
    assert r.returncode == 1, r.stderr
    [item] = json.loads(r.stdout)["expiring"]
    assert item["label"] == "hostile" and item["days_left"] in (4, 5)
    assert "\n" not in item["subject"] and "\x00" not in item["subject"]
    text = ok(*st, "metrics").stdout
    families = list(text_string_to_metric_families(text))
    assert [f.name for f in families] == ["mtls_certificate_not_after_seconds", "mtls_certificate_not_before_seconds"]
    assert all(len(f.samples) == 1 and f.samples[0].labels["label"] == "hostile" for f in families)
    assert ok(*st, "list", "--json").stdout


def test_check_counts_expired_certificates_and_not_yet_valid_ones_by_their_end(tmp_path):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from serve_support import hostile_certificate
    write_secret(tmp_path / "secret", "store passphrase\n")
    st = ["store", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret", *FAST]
    hostile_certificate(tmp_path / "old.pem", "expired", days=-2)
    ok(*st, "add-cert", tmp_path / "old.pem", "--label", "old")
    # Valid from next week for a year: not expiring, whatever its start.
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "later")])
    now = datetime.datetime.now(datetime.timezone.utc)
    later = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
             .serial_number(7).not_valid_before(now + datetime.timedelta(days=7))
             .not_valid_after(now + datetime.timedelta(days=372)).sign(key, hashes.SHA256()))
    (tmp_path / "later.pem").write_bytes(later.public_bytes(serialization.Encoding.PEM))
    ok(*st, "add-cert", tmp_path / "later.pem", "--label", "later")
    r = run_cli(*st, "check", "--within", "0", "--json")
    assert r.returncode == 1, r.stderr
    [item] = json.loads(r.stdout)["expiring"]
    assert item["label"] == "old" and item["days_left"] in (-3, -2)
    r = run_cli(*st, "check", "--within", "400", "--json")
    assert r.returncode == 1 and [i["label"] for i in json.loads(r.stdout)["expiring"]] == ["old", "later"]


def test_check_with_a_wrong_secret_is_status_2_and_says_so(store, tmp_path):
    write_secret(tmp_path / "wrong", "not the passphrase\n")
    st = list(store)
    st[st.index("--secret-file") + 1] = tmp_path / "wrong"
    r = run_cli(*st, "check", "--within", "1")
    assert r.returncode == 2 and "wrong store secret" in r.stderr, r.stderr
    r = run_cli(*st, "check", "--within", "1", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"] == "bad_secret", r.stdout
