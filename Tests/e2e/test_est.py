"""EST (RFC 7030) end to end against an endpoint made of real parts (issue 27): nginx (TLS, basic
auth for /simpleenroll, client certificates for /simplereenroll) in front of fcgiwrap running a
small CGI that signs with `openssl x509 -req` and answers with `openssl crl2pkcs7 -nocrl` — so
the wire format is the one OpenSSL produces. `mtls enroll est`, then `mtls renew --force`
re-enrolls over mutual TLS with the current identity."""
import json
import os
import shutil
import subprocess
import types

import pytest

from conftest import free_port, wait_port, run_cli, write_secret, require_tool, stop, store_args
from waits import wait_until

CGI = r"""#!/bin/sh
# EST over CGI: /cacerts, /simpleenroll, /simplereenroll (nginx decides who may call which).
set -e
D="$EST_DIR"
printf 'Content-Type: application/pkcs7-mime\r\nContent-Transfer-Encoding: base64\r\n\r\n'
case "$SCRIPT_NAME" in
  */cacerts)
    openssl crl2pkcs7 -nocrl -certfile "$D/chain.pem" -outform DER | base64
    ;;
  *)
    t=$(mktemp -d "$D/req.XXXXXX")
    head -c "${CONTENT_LENGTH:-0}" | base64 -d > "$t/req.der"
    openssl req -inform DER -in "$t/req.der" -out "$t/req.pem" 2>/dev/null
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' > "$t/ext"
    openssl x509 -req -in "$t/req.pem" -CA "$D/ca.pem" -CAkey "$D/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 30 -sha256 -extfile "$t/ext" -out "$t/cert.pem" 2>/dev/null
    openssl crl2pkcs7 -nocrl -certfile "$t/cert.pem" -outform DER | base64
    rm -rf "$t"
    ;;
esac
"""


@pytest.fixture(scope="module")
def est(tmp_path_factory):
    require_tool(shutil.which("fcgiwrap") or os.path.exists("/usr/sbin/fcgiwrap"), "fcgiwrap")
    d = tmp_path_factory.mktemp("est")
    pki = d / "pki"
    for args in (["init", "--name", "EST Root"], ["intermediate", "--name", "Devices"],
                 ["issue", "server", "--ca", "Devices", "--dns", "localhost", "--ip", "127.0.0.1"]):
        r = run_cli("pki", *args, "--dir", pki)
        assert r.returncode == 0, r.stderr
    ca = pki / "ca" / "devices"
    (d / "ca.pem").write_text((ca / "cert.pem").read_text())
    (d / "ca.key").write_text((ca / "key.pem").read_text())
    (d / "chain.pem").write_text((ca / "cert.pem").read_text() + (pki / "root" / "cert.pem").read_text())
    cgi = d / "est.cgi"
    cgi.write_text(CGI)
    cgi.chmod(0o755)
    (d / "htpasswd").write_text("device:{PLAIN}enroll-me\n")
    for sub in ("logs", "body", "proxy", "fcgi", "uwsgi", "scgi"):
        (d / sub).mkdir()
    sock = d / "fcgi.sock"
    fcgi = subprocess.Popen(["fcgiwrap", "-s", f"unix:{sock}"], env=dict(os.environ, EST_DIR=str(d)),
                            stdout=subprocess.DEVNULL, stderr=open(d / "logs" / "fcgi.log", "w"))
    port, port_auth = free_port(), free_port()
    issued = ca / "issued" / "localhost"
    fastcgi = f"""include /etc/nginx/fastcgi_params; fastcgi_param SCRIPT_FILENAME {cgi};
      fastcgi_param SCRIPT_NAME $uri; fastcgi_param EST_DIR {d}; fastcgi_pass unix:{sock};"""

    def server(listen, reenroll_auth):
        """One EST server block; `reenroll_auth` adds HTTP authentication to /simplereenroll."""
        auth = f'auth_basic "est"; auth_basic_user_file {d / "htpasswd"};' if reenroll_auth else ""
        return f"""
  server {{
    listen 127.0.0.1:{listen} ssl;
    ssl_certificate {issued / "chain.pem"}; ssl_certificate_key {issued / "key.pem"};
    ssl_client_certificate {d / "chain.pem"}; ssl_verify_client optional; ssl_verify_depth 3;
    location = /.well-known/est/cacerts {{ {fastcgi} }}
    location = /.well-known/est/simpleenroll {{ auth_basic "est"; auth_basic_user_file {d / "htpasswd"}; {fastcgi} }}
    location = /.well-known/est/simplereenroll {{
      if ($ssl_client_verify != SUCCESS) {{ return 403; }}
      {auth}
      {fastcgi}
    }}
  }}"""

    # port_auth: as Cisco libest's estserver by default (RFC 7030 §3.2.3), HTTP authentication on
    # /simplereenroll as well as the client certificate.
    (d / "nginx.conf").write_text(f"""
error_log {d}/logs/error.log;
pid {d}/nginx.pid;
events {{ worker_connections 64; }}
http {{
  access_log {d}/logs/access.log;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
{server(port, False)}
{server(port_auth, True)}
}}
""")
    nginx = subprocess.Popen(["nginx", "-c", str(d / "nginx.conf"), "-p", str(d), "-g", "daemon off; master_process off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_port(port, nginx)
        wait_port(port_auth, nginx)
        yield types.SimpleNamespace(dir=d, url=f"https://127.0.0.1:{port}/.well-known/est", root=pki / "root" / "cert.pem",
                                    url_auth=f"https://127.0.0.1:{port_auth}/.well-known/est")
    finally:
        stop(nginx, fcgi)


@pytest.fixture
def store(tmp_path):
    return store_args(tmp_path, "est secret")


def show(store, label):
    r = run_cli("store", "show", label, *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_est_enroll_with_basic_auth_then_reenroll_over_mutual_tls(est, store, tmp_path):
    write_secret(tmp_path / "pw", "enroll-me\n")
    r = run_cli("enroll", "est", "--url", est.url, "--anchor", est.root, "--user", "device", "--password-file", tmp_path / "pw",
                "--subject", "CN=device-1", "--label", "dev", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    assert first["source"] == "est" and first["identifiers"] == ["CN=device-1"] and len(first["chain"]) == 2
    shown = show(store, "dev")
    assert shown["leaf_sha256"] == first["leaf_sha256"] and "device-1" in shown["subject"]

    # Re-enrollment: no password; nginx lets /simplereenroll through only with a verified client
    # certificate, which is the identity being renewed.
    r = run_cli("renew", "dev", "--force", *store, "--json", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    renewed = json.loads(r.stdout)
    assert renewed["renewed"] is True and renewed["serial"] != first["serial"]
    assert show(store, "dev")["leaf_sha256"] == renewed["leaf_sha256"]
    # nginx writes its access log line after it sent the answer: wait for it.
    def reenrolled():
        access = (est.dir / "logs" / "access.log").read_text()
        return "POST /.well-known/est/simplereenroll" in access and '" 200 ' in access.split("simplereenroll")[-1]
    wait_until(reenrolled, timeout=10, what="nginx's access log line for the 200 /simplereenroll")


def test_est_wrong_password_is_ca_rejected_and_nothing_is_stored(est, store, tmp_path):
    write_secret(tmp_path / "pw", "wrong\n")
    r = run_cli("enroll", "est", "--url", est.url, "--anchor", est.root, "--user", "device", "--password-file", tmp_path / "pw",
                "--subject", "CN=device-2", "--label", "dev2", *store, "--json")
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["error"] == "ca_rejected" and "401" in out["message"], out
    assert not (tmp_path / "store.db").exists()


def test_est_reenroll_without_a_client_certificate_is_refused(est, store, tmp_path):
    """The same server refuses /simplereenroll to a client without a certificate: the renewal
    above is authenticated by the current identity, not by luck."""
    write_secret(tmp_path / "pw", "enroll-me\n")
    r = run_cli("enroll", "est", "--url", est.url, "--anchor", est.root, "--user", "device", "--password-file", tmp_path / "pw",
                "--subject", "CN=device-3", "--label", "dev3", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", est.root, "-X", "POST",
                        "--data-binary", "x", est.url + "/simplereenroll"], capture_output=True, text=True)
    assert r.stdout == "403", r.stdout + r.stderr


def test_est_reenroll_where_the_server_also_asks_for_http_auth_uses_the_kept_password(est, store, tmp_path):
    """Issue 37: a server that asks for HTTP authentication on /simplereenroll as well as the
    client certificate. With --keep-password the password is kept (sealed: it is nowhere in the
    store file in the clear) and renewal sends it; without it, renewal says what to do."""
    write_secret(tmp_path / "pw", "enroll-me\n")
    base = ["enroll", "est", "--url", est.url_auth, "--anchor", est.root, "--user", "device", "--password-file", tmp_path / "pw"]
    r = run_cli(*base, "--subject", "CN=device-4", "--label", "plain", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_cli("renew", "plain", "--force", *store, "--json", timeout=120)
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["error"] == "ca_rejected" and "401" in out["message"] and "--keep-password" in out["message"], out

    r = run_cli(*base, "--keep-password", "--subject", "CN=device-5", "--label", "kept", *store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads(r.stdout)
    assert b"enroll-me" not in (tmp_path / "store.db").read_bytes()
    for _ in range(2):  # the password stays kept across renewals
        r = run_cli("renew", "kept", "--force", *store, "--json", timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        renewed = json.loads(r.stdout)
        assert renewed["renewed"] is True and renewed["serial"] != first["serial"]
        first = renewed
    assert show(store, "kept")["leaf_sha256"] == renewed["leaf_sha256"]

