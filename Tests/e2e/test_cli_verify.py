"""End to end: `mtls verify` and `mtls limbo` with the installed CLI."""
import datetime
import json
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "test-pki.sh"
AT = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify-pki")
    subprocess.run([str(SCRIPT), "--trust", str(d)], check=True, capture_output=True)
    return d


def sha256_of(path):
    out = subprocess.run(["openssl", "x509", "-in", str(path), "-noout", "-fingerprint", "-sha256"],
                         capture_output=True, text=True, check=True).stdout
    return out.split("=", 1)[1].strip().replace(":", "").lower()


def test_verify_json_trusted(cli, pki):
    r = cli("verify", pki / "chain.pem", "--host", "server.test", "--anchor", pki / "root.pem",
            "--anchors-only", "--at", AT, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"trusted", "kind", "reasons", "chain"} <= set(out) and out["rule"] is None
    assert out["trusted"] is True and out["kind"] == "proceed" and out["reasons"] == []
    assert out["chain"] == [sha256_of(pki / "server.pem"), sha256_of(pki / "inter.pem"), sha256_of(pki / "root.pem")]


def test_verify_json_name_mismatch_exits_nonzero(cli, pki):
    r = cli("verify", pki / "chain.pem", "--host", "wrong.test", "--anchor", pki / "root.pem",
            "--anchors-only", "--at", AT, "--json")
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["trusted"] is False and out["kind"] == "recoverable_failure"
    assert {"code": "name_mismatch", "cert_index": 0} == {k: out["reasons"][0][k] for k in ("code", "cert_index")}
    assert isinstance(out["reasons"][0]["message"], str)


def test_verify_wrong_purpose_is_listed_once_per_certificate(cli, pki):
    # OpenSSL (error 26) and libmtls's EKU check both see it: one failure, one reason.
    r = cli("verify", pki / "chain.pem", "--purpose", "client", "--anchor", pki / "root.pem",
            "--anchors-only", "--at", AT, "--json")
    assert r.returncode != 0
    reasons = json.loads(r.stdout)["reasons"]
    wrong = [x for x in reasons if x["code"] == "wrong_purpose" and x["cert_index"] == 0]
    assert len(wrong) == 1, reasons
    assert "clientAuth" in wrong[0]["message"], reasons
    pairs = [(x["code"], x["cert_index"]) for x in reasons]
    assert len(pairs) == len(set(pairs)), reasons


def test_verify_without_host_checks_no_name(cli, pki):
    # Without --host, `mtls verify` asks for no name check explicitly, even with a policy file
    # whose name check is on; the library would otherwise fail closed with no_peer_name.
    (pki / "ssl-policy.json").write_text(json.dumps({"anchors": ["root.pem"], "anchors_only": True,
                                                      "name_check": "ssl"}))
    for extra in (["--anchor", pki / "root.pem", "--anchors-only"], ["--policy", pki / "ssl-policy.json"]):
        r = cli("verify", pki / "chain.pem", *extra, "--at", AT, "--json")
        assert r.returncode == 0, r.stdout
        assert json.loads(r.stdout)["reasons"] == []


def test_verify_pins_and_purpose_and_policy_file(cli, pki):
    inter_pin = subprocess.run(
        f"openssl x509 -in {pki / 'inter.pem'} -pubkey -noout | openssl pkey -pubin -outform DER "
        "| openssl dgst -sha256 -binary | base64", shell=True, capture_output=True, text=True, check=True).stdout.strip()
    base = ["verify", pki / "chain.pem", "--host", "server.test", "--anchor", pki / "root.pem", "--anchors-only",
            "--at", AT, "--json"]
    assert cli(*base, "--pin", f"sha256/{inter_pin}").returncode == 0
    bad = cli(*base, "--pin", "sha256/" + "A" * 43 + "=")
    assert bad.returncode != 0 and json.loads(bad.stdout)["reasons"][0]["code"] == "pin_mismatch"
    client = cli("verify", pki / "client-chain.pem", "--purpose", "client", "--anchor", pki / "root.pem",
                 "--anchors-only", "--at", AT, "--json")
    assert client.returncode == 0, client.stdout
    (pki / "policy.json").write_text(json.dumps({
        "anchors": ["root.pem"], "anchors_only": True,
        "hosts": [{"host": "10.9.8.7", "verify_as": "server.test"}]}))
    r = cli("verify", pki / "chain.pem", "--host", "10.9.8.7", "--policy", pki / "policy.json", "--at", AT, "--json")
    assert r.returncode == 0, r.stdout
    bad_policy = cli("verify", pki / "chain.pem", "--policy", pki / "chain.pem")
    assert bad_policy.returncode != 0 and bad_policy.stderr.startswith("mtls: ")


def test_limbo_runs_a_suite_from_stdin(cli, pki):
    root = (pki / "root.pem").read_text()
    suite = {"version": 1, "testcases": [{
        "id": "local::ok", "validation_kind": "SERVER", "trusted_certs": [root],
        "untrusted_intermediates": [(pki / "inter.pem").read_text()],
        "peer_certificate": (pki / "server.pem").read_text(), "validation_time": AT,
        "expected_peer_name": {"kind": "DNS", "value": "server.test"}, "extended_key_usage": [],
        "max_chain_depth": None, "crls": [], "features": [], "expected_result": "SUCCESS"}]}
    r = cli("limbo", input=json.dumps(suite))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    version = subprocess.run([str(SCRIPT.parent / "version.sh")], check=True, capture_output=True,
                             text=True).stdout.strip()
    assert out["harness"] == f"libmtls-{version}"
    assert out["results"][0]["id"] == "local::ok" and out["results"][0]["actual_result"] == "SUCCESS"
