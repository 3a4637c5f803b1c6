"""Trust decisions bound to the peer reached (issue 9), end to end with the installed CLI, the
libcurl example and real peers (openssl s_server) on 127.0.0.1: host rules chosen by host and
port (never by the verify-as name), command-line pins enforced beside that rule, invalid policies
refused, path building, servers that never trust the system store for clients by default."""
import datetime
import json
import pathlib
import socket
import subprocess
import time

import pytest

from conftest import CLI, free_port, run_cli
from test_tls import Peer, curl_fetch, peers, pki, s_client, s_server, server_log, verdicts, wait_port  # noqa: F401 (fixtures)

TRUST_PKI = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "test-pki.sh"
# Two days ahead: the one-day certificates of the path-building cases have expired.
AT2 = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
WRONG_PINS = ["sha256/" + "A" * 43 + "=", "sha256/" + "B" * 43 + "="]


@pytest.fixture(scope="module")
def tpki(tmp_path_factory):
    d = tmp_path_factory.mktemp("trust-pki")
    subprocess.run([str(TRUST_PKI), "--trust", str(d)], check=True, capture_output=True)
    return d


def spki_pin(path):
    r = run_cli("cert", "show", path, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)[0]["spki_pin"]


def connect_json(*args):
    r = run_cli("connect", *args, "--json", "--timeout", "5")
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"no JSON: {r.stdout!r} {r.stderr!r}")


def identity(pki):
    return ["--identity", pki("client-a.p12"), "--password-file", pki("password.txt")]


def write_policy(tmp_path, pki, rules):
    p = tmp_path / "policy.json"
    p.write_text(json.dumps({"version": 1, "anchors": [pki("root.pem")], "anchors_only": True, "hosts": rules}))
    return p


@pytest.mark.parametrize("pattern", ["127.0.0.1:{port}", "127.0.0.1"])
def test_ip_rule_pins_hold_when_validated_as_another_name(pki, peers, tmp_path, pattern):
    port = s_server(pki, peers)
    policy = write_policy(tmp_path, pki, [{"host": pattern.format(port=port), "pins": WRONG_PINS}])
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--verify-as", "server.test")
    assert not out["connected"], out
    codes = [r["code"] for r in out["evaluation"]["reasons"]]
    assert codes == ["pin_mismatch"], out
    assert out["evaluation"]["rule"]["host"] == pattern.format(port=port)
    # The right pin (the intermediate's) under the same rule: trusted, and --json names the rule.
    policy = write_policy(tmp_path, pki, [{"host": pattern.format(port=port), "pins": [spki_pin(pki("int-a.pem")), WRONG_PINS[0]]}])
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--verify-as", "server.test")
    assert out["connected"], out
    assert out["evaluation"]["rule"]["pins"][0] == spki_pin(pki("int-a.pem"))


@pytest.mark.parametrize("spelling", ["127.1", "0177.0.0.1", "0x7f.0.0.1", "2130706433", "[::ffff:127.0.0.1]",
                                      "[::ffff:7f00:1]"])
def test_ip_rule_pins_hold_however_the_address_is_spelt(pki, peers, tmp_path, spelling):
    """The resolver takes these spellings without a lookup and the socket reaches 127.0.0.1: the
    rule for 127.0.0.1 is the one that applies (it used to be skipped, and its pins with it)."""
    port = s_server(pki, peers)
    policy = write_policy(tmp_path, pki, [{"host": "127.0.0.1", "pins": WRONG_PINS}])
    out = connect_json(f"{spelling}:{port}", *identity(pki), "--policy", policy, "--verify-as", "server.test")
    assert not out["connected"], out
    assert [r["code"] for r in out["evaluation"]["reasons"]] == ["pin_mismatch"], out
    assert out["evaluation"]["rule"]["host"] == "127.0.0.1"
    # And `mtls verify` reads the host the same way, with the port: a host:port rule applies too.
    policy = write_policy(tmp_path, pki, [{"host": "127.0.0.1:8443", "pins": WRONG_PINS}])
    r = run_cli("verify", pki("server-chain.pem"), "--host", f"{spelling}:8443", "--verify-as", "server.test",
                "--policy", policy, "--json")
    assert r.returncode == 1 and [x["code"] for x in json.loads(r.stdout)["reasons"]] == ["pin_mismatch"], r


def s_server_v6(pki, peers):
    """openssl s_server on [::1] (loopback, IPv6): its port, once it accepts there."""
    port = free_port()
    args = ["openssl", "s_server", "-accept", f"[::1]:{port}", "-quiet", "-www", "-cert", pki("server.pem"),
            "-key", pki("server.key"), "-cert_chain", pki("int-a.pem"), "-Verify", "1", "-CAfile", pki("root.pem"),
            "-verify_return_error"]
    peer = Peer.__new__(Peer)
    peer.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peer.port, peer.seen = port, ""
    peers.append(peer)
    for _ in range(300):
        assert peer.proc.poll() is None, "s_server on [::1] exited early"
        try:
            socket.create_connection(("::1", port), timeout=0.5).close()
            return port
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on [::1]:{port}")


def test_a_zone_on_the_address_does_not_skip_its_rule(pki, peers, tmp_path):
    """Issue 23, defect 5: `[::1%1]:P` reaches ::1, so the rule for ::1 (pins the chain does not
    carry) applies; it used to be read as the DNS name "::1%1", no rule matched and the chain was
    trusted. (glibc takes an interface name only after a link-local address, so ::1 is written
    with the loopback interface's index.)"""
    port = s_server_v6(pki, peers)
    policy = write_policy(tmp_path, pki, [{"host": "::1", "pins": WRONG_PINS}])
    lo = socket.if_nametoindex("lo")
    for target in (f"[::1]:{port}", f"[::1%{lo}]:{port}"):
        out = connect_json(target, *identity(pki), "--policy", policy, "--verify-as", "server.test")
        assert not out["connected"], (target, out)
        assert [r["code"] for r in out["evaluation"]["reasons"]] == ["pin_mismatch"], (target, out)
        assert out["evaluation"]["rule"]["host"] == "::1", (target, out)
    # Without the rule the same connection is trusted: the refusal above is the rule's.
    out = connect_json(f"[::1%{lo}]:{port}", *identity(pki), "--policy", write_policy(tmp_path, pki, []),
                       "--verify-as", "server.test")
    assert out["connected"], out
    # A % that is no zone cannot be matched to a rule: invalid_host, never the default.
    policy = write_policy(tmp_path, pki, [{"host": "::1", "pins": WRONG_PINS}])
    r = run_cli("verify", pki("server-chain.pem"), "--host", "server.test%lo", "--verify-as", "server.test",
                "--policy", policy, "--json")
    assert r.returncode == 1 and [x["code"] for x in json.loads(r.stdout)["reasons"]] == ["invalid_host"], r


@pytest.mark.parametrize("pattern, hint", [("::1:8443", "[::1]:8443"), ("2001:db8::7:443", "[2001:db8::7]:443"),
                                           ("fe80::1%lo:443", "[fe80::1%lo]:443")])
def test_an_ambiguous_ipv6_pattern_is_an_invalid_policy(pki, tmp_path, pattern, hint):
    policy = write_policy(tmp_path, pki, [{"host": pattern, "pins": WRONG_PINS}])
    r = run_cli("verify", pki("server-chain.pem"), "--host", "server.test", "--policy", policy, "--json")
    assert r.returncode != 0 and "ambiguous host pattern" in r.stderr and hint in r.stderr, r
    for fine in ("[::1]:8443", "::1", "2001:db8:0:0:0:0:0:8443"):
        policy = write_policy(tmp_path, pki, [{"host": fine, "pins": WRONG_PINS}])
        r = run_cli("verify", pki("server-chain.pem"), "--host", "server.test", "--policy", policy, "--json")
        assert r.returncode == 0, (fine, r)


def test_a_unicode_host_cannot_slip_past_its_a_label_rule(pki, tmp_path):
    policy = write_policy(tmp_path, pki, [{"host": "xn--bcher-kva.example", "pins": WRONG_PINS},
                                          {"host": "*.example", "verify_as": "server.test"}])
    r = run_cli("verify", pki("server-chain.pem"), "--host", "bücher.example", "--verify-as", "server.test",
                "--policy", policy, "--json")
    assert r.returncode == 1, r
    reasons = json.loads(r.stdout)["reasons"]
    assert [x["code"] for x in reasons] == ["invalid_host"] and "xn--" in reasons[0]["message"], reasons


def test_command_line_pin_holds_beside_a_host_port_rule(pki, peers, tmp_path):
    port = s_server(pki, peers)
    policy = write_policy(tmp_path, pki, [{"host": f"127.0.0.1:{port}", "verify_as": "server.test"}])
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--pin", WRONG_PINS[0])
    assert not out["connected"] and [r["code"] for r in out["evaluation"]["reasons"]] == ["pin_mismatch"], out
    # The rule kept its verify_as (no name_mismatch for 127.0.0.1); the pin is an override beside it.
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--pin", spki_pin(pki("root.pem")))
    assert out["connected"], out
    rule = out["evaluation"]["rule"]
    assert rule["host"] == f"127.0.0.1:{port}" and rule["verify_as"] == "server.test"
    assert rule["pins"] == []  # the policy's rule as written: nothing merged into it
    assert out["evaluation"]["provenance"]["pins"] == [{"from": "override", "enforced": True,
                                                        "matched": spki_pin(pki("root.pem"))}]
    # A --verify-as is an override over the rule's, said so in the provenance (issue 23).
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--policy", policy, "--verify-as", "other.test")
    assert not out["connected"] and out["evaluation"]["provenance"]["name_from"] == "override", out


@pytest.mark.parametrize("rule", [{"verify_as": ""}, {"verify_as": "  "}, {"pins": ["sha256/abc"]},
                                  {"pins": ["sha256/" + "A" * 43 + "=="]}])
def test_invalid_rules_are_refused_naming_the_rule(pki, tmp_path, tpki, rule):
    policy = write_policy(tmp_path, pki, [dict(rule, host="10.0.0.5")])
    r = run_cli("verify", tpki / "chain.pem", "--host", "10.0.0.5", "--policy", policy)
    assert r.returncode != 0
    assert "10.0.0.5" in r.stderr and ("verify_as" in r.stderr or "pin" in r.stderr), r.stderr
    assert "trusted" not in r.stdout


def test_curl_example_pins_hold_for_the_ip_and_port_reached(pki, peers, curl_fetch, tmp_path):  # noqa: F811
    port = s_server(pki, peers)
    args = [curl_fetch, "--p12", pki("client-a.p12"), "--password-file", pki("password.txt"),
            "--verify-as", "server.test", f"https://127.0.0.1:{port}/"]
    policy = write_policy(tmp_path, pki, [{"host": f"127.0.0.1:{port}", "pins": WRONG_PINS}])
    r = subprocess.run(args + ["--policy", str(policy)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "<HTML>" not in r.stdout, r.stdout
    policy = write_policy(tmp_path, pki, [{"host": f"127.0.0.1:{port}", "pins": [spki_pin(pki("root.pem")), WRONG_PINS[0]]}])
    r = subprocess.run(args + ["--policy", str(policy)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "<HTML>" in r.stdout


def test_serve_requiring_client_certs_needs_client_anchors(pki):
    port = free_port()
    r = run_cli("serve", "--port", str(port), "--identity", pki("server.p12"), "--password-file",
                pki("password.txt"), "--require-client-cert", "--count", "1", timeout=20)
    assert r.returncode != 0
    assert "client anchors" in r.stderr, r.stderr


def test_refusal_names_the_anchor_first(pki, peers):
    port = s_server(pki, peers)
    out = connect_json(f"127.0.0.1:{port}", *identity(pki), "--anchor", pki("other-root.pem"), "--anchors-only",
                       "--verify-as", "server.test")
    assert not out["connected"]
    messages = [r["message"] for r in out["evaluation"]["reasons"]]
    assert any(m.startswith('not issued under the anchor "') for m in messages), messages


@pytest.mark.parametrize("chain", ["pb-bag.pem", "pb-expired-chain.pem", "pb-wrongeku-chain.pem",
                                   "pb-notca-chain.pem", "pb-sha1-chain.pem", "pb-nonanchor-chain.pem"])
def test_verify_builds_the_good_path(tpki, chain):
    r = run_cli("verify", tpki / chain, "--host", "server.test", "--anchor", tpki / "root.pem",
                "--anchors-only", "--at", AT2, "--json")
    assert r.returncode == 0, r.stdout
    out = json.loads(r.stdout)
    assert out["trusted"] and len(out["chain"]) == 3


def test_verify_accepts_what_openssl_req_x509_makes(tpki):
    r = run_cli("verify", tpki / "reqx509.pem", "--host", "server.internal", "--anchor", tpki / "reqx509.pem",
                "--anchors-only", "--json")
    assert r.returncode == 0, r.stdout
    subprocess.run(["openssl", "verify", "-CAfile", tpki / "reqx509.pem", tpki / "reqx509.pem"], check=True,
                   capture_output=True)


def test_verify_common_name_is_not_a_name(tpki):
    r = run_cli("verify", tpki / "cnparent-chain.pem", "--host", "server.test", "--anchor", tpki / "root.pem",
                "--anchors-only", "--json")
    assert r.returncode == 0, r.stdout
    # With SANs, a CN outside the name constraints is not a name and no reason to refuse ...
    r = run_cli("verify", tpki / "nccn-chain.pem", "--host", "api.allowed.test", "--anchor", tpki / "root.pem",
                "--anchors-only", "--json")
    assert r.returncode == 0, r.stdout
    # ... but a client certificate without SANs is judged by its DNS-like CN.
    r = run_cli("verify", tpki / "nccnonly-chain.pem", "--purpose", "client", "--anchor", tpki / "root.pem",
                "--anchors-only", "--json")
    assert r.returncode != 0
    assert "name_constraint_violation" in [x["code"] for x in json.loads(r.stdout)["reasons"]]


def test_verify_selects_the_rule_by_host_and_port_and_merges_pins(tpki, tmp_path):
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps({"version": 1, "anchors": [str(tpki / "root.pem")], "anchors_only": True,
                                  "hosts": [{"host": "10.0.0.5:8443", "verify_as": "server.test"}]}))
    base = ["verify", tpki / "chain.pem", "--policy", policy, "--json"]
    r = run_cli(*base, "--host", "10.0.0.5:8443")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["rule"]["host"] == "10.0.0.5:8443"
    # --pin holds beside that rule (an override, not merged into it), which keeps its verify_as.
    r = run_cli(*base, "--host", "10.0.0.5:8443", "--pin", WRONG_PINS[0])
    out = json.loads(r.stdout)
    assert r.returncode != 0 and [x["code"] for x in out["reasons"]] == ["pin_mismatch"], out
    assert out["rule"]["verify_as"] == "server.test" and out["rule"]["pins"] == []
    assert out["provenance"]["rule"] == "10.0.0.5:8443" and out["provenance"]["name_from"] == "rule"
    # Another port: the rule does not apply; --verify-as gives the name to check.
    r = run_cli(*base, "--host", "10.0.0.5:9443", "--verify-as", "server.test")
    assert r.returncode == 0 and json.loads(r.stdout)["rule"] is None, r.stdout
    r = run_cli(*base, "--host", "10.0.0.5:9443")
    assert r.returncode != 0 and "name_mismatch" in [x["code"] for x in json.loads(r.stdout)["reasons"]]


@pytest.mark.parametrize("rule, accepted", [
    ({"host": "127.0.0.1", "pins": WRONG_PINS}, False),          # the rule for the client's address holds
    ({"host": "10.9.9.9", "pins": WRONG_PINS}, True),            # another address's rule does not apply
    ({"host": "127.0.0.1", "pins": ["INT_A"]}, True),             # its pins name the client's CA
    ({"host": "127.0.0.1", "anchors": ["int-b.pem"]}, False),     # its anchors replace the policy's
    ({"host": "127.0.0.1", "verify_as": "nobody.test"}, False),  # a name the client must carry
    ({"host": "127.0.0.1:1", "pins": WRONG_PINS}, True),         # a rule with a port never matches a client
])
def test_listener_judges_a_client_by_the_rule_for_its_address(pki, peers, tmp_path, rule, accepted):
    rule = dict(rule)
    if rule.get("pins") == ["INT_A"]:
        rule["pins"] = [spki_pin(pki("int-a.pem"))]
    if "anchors" in rule:
        rule["anchors"] = [pki(a) for a in rule["anchors"]]
    policy = tmp_path / "clients.json"
    policy.write_text(json.dumps({"version": 1, "anchors": [pki("int-a.pem")], "anchors_only": True, "hosts": [rule]}))
    port = free_port()
    server = Peer([CLI, "serve", "--port", str(port), "--identity", pki("server.p12"), "--password-file",
                      pki("password.txt"), "--policy", str(policy), "--require-client-cert"], port)
    peers.append(server)
    r = s_client(pki, port, "-cert", pki("client-a.pem"), "-key", pki("client-a.key"), "-cert_chain", pki("int-a.pem"))
    word = "accepted" if accepted else "rejected"
    log = server_log(server, lambda log: verdicts(log, word))
    assert verdicts(log, word), log
    assert (b"hello" in r.stdout) == accepted, (r, log)
