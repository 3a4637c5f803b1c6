"""The CA names of `mtls serve`'s certificate request: the client anchors (default), none
(--no-ca-names) or a list (--ca-names FILE), and the field case that needs none: an Erlang/OTP 25
TLS 1.3 client whose certificate an intermediate issued sends no certificate to a server naming
that intermediate (it matches the names against its chain without the leaf)."""
import os
import shutil
import subprocess

import pytest

from conftest import TEST_PKI, free_port, require_tool, run_cli
from test_tls import Peer, peers, server_log, verdicts  # noqa: F401 (peers: the fixture)

ERLANG_CLIENT = r"""
ssl:start(),
Opts = [{versions, ['tlsv1.3']}, {certfile, "%(dir)s/client-a.pem"}, {keyfile, "%(dir)s/client-a.key"},
        {cacertfile, "%(dir)s/client-a-cas.pem"}, {verify, verify_peer}, {server_name_indication, "server.test"},
        {active, false}],
Result = case ssl:connect("127.0.0.1", %(port)d, Opts, 10000) of
    {ok, S} ->
        Reply = case ssl:send(S, <<"hello erlang\n">>) of
            ok -> ssl:recv(S, 0, 10000);
            E1 -> E1
        end,
        ssl:close(S),
        Reply;
    E2 -> E2
end,
io:format("RESULT ~p~n", [Result]),
halt(0).
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca-names-pki")
    subprocess.run([TEST_PKI, str(d)], check=True)
    return d


def serve(pki, peers, *extra):
    """`mtls serve` for customer A's clients only (anchor: its intermediate, int-a), a client
    certificate required."""
    port = free_port()
    p = Peer([os.environ.get("MTLS_CLI", "mtls"), "serve", "--port", str(port), "--identity", str(pki / "server.p12"),
              "--password-file", str(pki / "password.txt"), "--client-anchor", str(pki / "int-a.pem"),
              "--require-client-cert", *extra], port)
    peers.append(p)
    return p


def erlang_client(pki, port):
    """Customer A's client (certificate issued by int-a) as Erlang/OTP's ssl over TLS 1.3; the
    Erlang term it ended with ({ok, Reply} or {error, Why})."""
    require_tool(shutil.which("erl"), "Erlang/OTP (erlang-nox)")
    r = subprocess.run(["erl", "-noshell", "-eval", ERLANG_CLIENT % {"dir": pki, "port": port}],
                       capture_output=True, text=True, timeout=60)
    [line] = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")] or [f"no result: {r}"]
    return line[len("RESULT "):]


@pytest.mark.parametrize("names", ["--no-ca-names", "--ca-names=root.pem"])
def test_erlang_tls13_client_is_accepted_when_ca_names_are_left_out(pki, peers, names):
    # Left out, or a list naming the root instead of the client's issuer (Erlang then finds the
    # root as the issuer of the intermediate in its chain).
    flag, _, file = names.partition("=")
    server = serve(pki, peers, flag, *([str(pki / file)] if file else []))
    result = erlang_client(pki, server.port)
    assert result == '{ok,"hello erlang\\n"}', result
    log = server_log(server, lambda log: verdicts(log, "accepted"))
    [line] = verdicts(log, "accepted")
    # The server saw customer A's certificate and trusted it: leaving the names out changed what
    # the client sends, not who is trusted.
    assert "TLSv1.3" in line and "CN=client-a" in line and "trusted" in line, log


def test_erlang_tls13_client_sends_no_certificate_to_the_default_ca_names(pki, peers):
    # The field bug, as Erlang/OTP 25 has it: the request names int-a, the client's issuer, and the
    # client sends no certificate. If a later OTP fixes it, this test says so by failing.
    server = serve(pki, peers)
    result = erlang_client(pki, server.port)
    assert not result.startswith("{ok,"), result
    log = server_log(server, lambda log: verdicts(log, "rejected"))
    [line] = verdicts(log, "rejected")
    assert "no certificate" in line, log


def s_client_ca_names(pki, port, version):
    """What openssl s_client reports of the certificate request's CA names (its output text)."""
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "server.test",
                        f"-{version}", "-cert", str(pki / "client-a.pem"), "-key", str(pki / "client-a.key"),
                        "-cert_chain", str(pki / "int-a.pem")],
                       input=b"", capture_output=True, timeout=20)
    out = r.stdout.decode(errors="replace")
    assert "Server certificate" in out, out
    return out


@pytest.mark.parametrize("version", ["tls1_3", "tls1_2"])
def test_serve_sends_the_anchors_no_names_or_the_given_list(pki, peers, version):
    default = s_client_ca_names(pki, serve(pki, peers).port, version)
    assert "Acceptable client certificate CA names" in default and "CN = Customer A CA" in default, default

    none = s_client_ca_names(pki, serve(pki, peers, "--no-ca-names").port, version)
    assert "No client certificate CA names sent" in none, none

    given = s_client_ca_names(pki, serve(pki, peers, "--ca-names", str(pki / "root.pem")).port, version)
    names = given.split("Acceptable client certificate CA names", 1)[1].split("Requested Signature", 1)[0]
    assert "CN = Test Root" in names and "Customer A CA" not in names, given


def test_no_ca_names_and_ca_names_together_are_refused(pki):
    r = run_cli("serve", "--port", "0", "--identity", pki / "server.p12", "--password-file", pki / "password.txt",
                "--no-ca-names", "--ca-names", pki / "root.pem")
    assert r.returncode != 0 and "--no-ca-names or --ca-names" in r.stderr, r
