"""The command line's trust flags are overrides the library composes on top of the policy (issue 23,
defect 2): `--pin` is always enforced — also under a host rule that is report-only or whose pins
expired with stop_enforcing — and `--verify-as`/`--anchor` never change the policy's rules. With
the installed CLI; `mtls connect` against openssl s_server on 127.0.0.1."""
import json

import pytest

from conftest import run_cli
from test_tls import peers, pki, s_server  # noqa: F401 (fixtures)
from test_trust_peer import WRONG_PINS, connect_json, identity, spki_pin, tpki  # noqa: F401 (fixtures)

PAST = "2020-01-01T00:00:00Z"
# A rule whose own pins never decide: report-only, or expired with stop_enforcing.
LAX_RULES = {
    "report_only": {"pins": [WRONG_PINS[1]], "enforcement": "report_only"},
    "expired_stop_enforcing": {"pins": [WRONG_PINS[1]], "pins_expire": PAST, "after_expiry": "stop_enforcing"},
}


def policy_file(tmp_path, anchor, host, rule, **top):
    p = tmp_path / "policy.json"
    p.write_text(json.dumps({"version": 1, "anchors": [str(anchor)], "anchors_only": True,
                             "hosts": [dict({"host": host}, **rule)], **top}))
    return p


@pytest.mark.parametrize("lax", sorted(LAX_RULES))
def test_verify_pin_is_enforced_under_a_lax_rule(tpki, tmp_path, lax):
    policy = policy_file(tmp_path, tpki / "root.pem", "server.test", LAX_RULES[lax])
    base = ["verify", tpki / "chain.pem", "--host", "server.test", "--policy", policy, "--json"]
    r = run_cli(*base)
    assert r.returncode == 0, r.stdout  # the rule's own pins do not decide
    r = run_cli(*base, "--pin", WRONG_PINS[0])
    out = json.loads(r.stdout)
    assert r.returncode != 0 and out["trusted"] is False, out
    assert "pin_mismatch" in [x["code"] for x in out["reasons"]], out
    assert {"from": "override", "enforced": True, "matched": None} in out["provenance"]["pins"], out
    assert out["provenance"]["rule"] == "server.test"
    # The rule is the policy file's, unchanged: the pin was not merged into it.
    assert len(out["rule"]["pins"]) == 1 and WRONG_PINS[0] not in out["rule"]["pins"], out
    # A --pin that matches (the intermediate's) is trusted.
    r = run_cli(*base, "--pin", spki_pin(tpki / "inter.pem"))
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["provenance"]["pins"][-1]["matched"] == spki_pin(tpki / "inter.pem")


def test_verify_pin_holds_without_a_host(tpki):
    # Pins given on the command line apply with or without --host.
    r = run_cli("verify", tpki / "chain.pem", "--anchor", tpki / "root.pem", "--anchors-only",
                "--pin", WRONG_PINS[0], "--json")
    assert r.returncode != 0 and "pin_mismatch" in [x["code"] for x in json.loads(r.stdout)["reasons"]], r.stdout


@pytest.mark.parametrize("lax", sorted(LAX_RULES))
def test_connect_pin_is_enforced_under_a_lax_rule(pki, peers, tmp_path, lax):
    port = s_server(pki, peers)
    rule = dict(LAX_RULES[lax], verify_as="server.test")
    policy = policy_file(tmp_path, pki("root.pem"), f"127.0.0.1:{port}", rule)
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy)
    assert out["connected"], out
    r = run_cli("connect", f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--pin", WRONG_PINS[0],
                "--json", "--timeout", "5")
    out = json.loads(r.stdout)
    assert r.returncode != 0 and not out["connected"], out
    assert out["evaluation"]["trusted"] is False and out["error_code"] == "untrusted", out
    assert "pin_mismatch" in [x["code"] for x in out["evaluation"]["reasons"]], out
    assert out["evaluation"]["provenance"]["pins"][-1] == {"from": "override", "enforced": True, "matched": None}


def test_connect_verify_as_is_an_override_over_the_rule(pki, peers, tmp_path):
    port = s_server(pki, peers)
    policy = policy_file(tmp_path, pki("root.pem"), f"127.0.0.1:{port}", {"verify_as": "server.test"})
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--verify-as", "other.test")
    assert not out["connected"], out
    assert "name_mismatch" in [x["code"] for x in out["evaluation"]["reasons"]], out
    prov = out["evaluation"]["provenance"]
    assert prov["name"] == "other.test" and prov["name_from"] == "override" and prov["rule"] == f"127.0.0.1:{port}"
    # The policy file's rule as it was.
    assert out["evaluation"]["rule"]["verify_as"] == "server.test"
