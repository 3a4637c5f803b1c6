"""`mtls connect` against Apache httpd (mod_ssl) on 127.0.0.1: client authentication for the whole
server over TLS 1.2 and 1.3, and for one location only, which Apache asks for after the handshake —
TLS 1.3 post-handshake authentication, which libmtls answers, or TLS 1.2 renegotiation, which
libmtls refuses with an error that says so."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import free_port, require_tool, run_cli
from test_tls import Peer, mtls_server, peers, pki, server_log, verdicts  # noqa: F401 (fixtures)

MODULES = "/usr/lib/apache2/modules"


@pytest.fixture
def docroot():
    """An empty document root Apache's children (user nobody) can walk to: pytest's own
    temporary folders are readable by root only."""
    with tempfile.TemporaryDirectory(prefix="mtls-apache-") as d:
        os.chmod(d, 0o755)
        yield d


def start_apache(tmp_path, peers, docroot, modules, body):  # noqa: F811
    """Apache in the foreground on a free port of 127.0.0.1 (stopped with the test), with the
    modules and configuration given; its children run as nobody."""
    require_tool(shutil.which("apache2"), "Apache httpd (apache2-bin)")
    port = free_port()
    load = "\n".join(f"LoadModule {m}_module {MODULES}/mod_{m}.so" for m in ("mpm_event", "authz_core", "ssl", *modules))
    (tmp_path / "httpd.conf").write_text(f"""
ServerRoot {tmp_path}
PidFile {tmp_path}/httpd.pid
DefaultRuntimeDir {tmp_path}
Listen 127.0.0.1:{port}
{load}
ServerName 127.0.0.1
User nobody
Group nogroup
Mutex posixsem
ErrorLog {tmp_path}/error.log
LogLevel info
DocumentRoot {docroot}
<Directory />
  AllowOverride None
  Require all granted
</Directory>
{body}
""")
    peers.append(Peer(["apache2", "-f", str(tmp_path / "httpd.conf"), "-D", "FOREGROUND"], port))
    return port


def apache(pki, tmp_path, peers, docroot, whole_server):  # noqa: F811
    """Apache serving TLS, answering every request with a 404 that carries the verified client's
    subject (mod_headers) — no document has to be readable."""
    verify = "SSLVerifyClient require\nSSLVerifyDepth 3\n"
    return start_apache(tmp_path, peers, docroot, ["headers"], f"""
SSLEngine on
SSLCertificateFile {pki("server.pem")}
SSLCertificateKeyFile {pki("server.key")}
SSLCertificateChainFile {pki("int-a.pem")}
SSLCACertificateFile {pki("root.pem")}
Header always set X-Client-DN "%{{SSL_CLIENT_S_DN}}s"
{verify if whole_server else ""}
<Location /private>
  {verify if not whole_server else ""}
</Location>
""")


def get(pki, port, path, version, identity="client-a"):
    r = run_cli("connect", f"127.0.0.1:{port}", "--json", "--timeout", "5", "--tls-max", version,
                "--identity", pki(f"{identity}.p12"), "--password-file", pki("password.txt"),
                "--anchor", pki("root.pem"), "--anchors-only", "--verify-as", "server.test",
                "--send", f"GET {path} HTTP/1.1\\r\\nHost: server.test\\r\\nConnection: close\\r\\n\\r\\n")
    return r, json.loads(r.stdout)


def client_dn(out):
    head = (out["response"] or "").split("\r\n\r\n")[0]
    return [line.split(": ", 1)[1] for line in head.split("\r\n") if line.lower().startswith("x-client-dn:")]


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_whole_server_client_authentication(pki, tmp_path, peers, docroot, version):  # noqa: F811
    port = apache(pki, tmp_path, peers, docroot, whole_server=True)
    r, out = get(pki, port, "/", version)
    assert r.returncode == 0 and out["tls_version"] == f"TLSv{version}", out
    assert client_dn(out) == ["CN=client-a,O=libmtls test"], out["response"]
    # A client of another customer's root: Apache refuses it, and the error is the server's alert.
    r, out = get(pki, port, "/", version, identity="client-c")
    assert r.returncode != 0 and out["error_code"] == "peer_alert", out


def test_per_location_client_authentication_over_tls13(pki, tmp_path, peers, docroot):  # noqa: F811
    port = apache(pki, tmp_path, peers, docroot, whole_server=False)
    r, out = get(pki, port, "/", "1.3")
    assert r.returncode == 0 and client_dn(out) == ["(null)"], out  # no certificate asked for
    r, out = get(pki, port, "/private/", "1.3")
    assert r.returncode == 0, out
    assert client_dn(out) == ["CN=client-a,O=libmtls test"], out["response"]


def test_per_location_client_authentication_over_tls12_says_renegotiation_is_refused(pki, tmp_path, peers, docroot):  # noqa: F811
    port = apache(pki, tmp_path, peers, docroot, whole_server=False)
    r, out = get(pki, port, "/", "1.2")
    assert r.returncode == 0, out
    r, out = get(pki, port, "/private/", "1.2")
    assert r.returncode != 0, out
    assert "the server asked to renegotiate (TLS 1.2), which libmtls refuses" in out["error"], out
    assert "needs TLS 1.3" in out["error"], out


@pytest.mark.parametrize("identity, accepted", [("client-a", True), ("client-b", False)])
def test_apache_reverse_proxy_presents_its_certificate_to_mtls_serve(pki, tmp_path, peers, docroot, mtls_server,  # noqa: F811
                                                                     identity, accepted):
    """Apache as a mutual-TLS client (mod_proxy with SSLProxyMachineCertificateFile) of `mtls
    serve`, which accepts customer A's clients only."""
    (tmp_path / "machine.pem").write_text(open(pki(f"{identity}.pem")).read() + open(pki(f"{identity}.key")).read())
    port = start_apache(tmp_path, peers, docroot, ["proxy", "proxy_http"], f"""
SSLProxyEngine on
SSLProxyMachineCertificateFile {tmp_path}/machine.pem
SSLProxyCACertificateFile {pki("root.pem")}
SSLProxyVerify require
SSLProxyVerifyDepth 3
ProxyPass / https://localhost:{mtls_server.port}/
""")
    r = subprocess.run(["curl", "-s", "-o", "-", "-w", "%{http_code}", f"http://127.0.0.1:{port}/"],
                       capture_output=True, text=True, timeout=30)
    if accepted:
        assert r.stdout == f"hello {identity}\n200", r
    else:
        assert r.stdout.endswith("502"), r  # Apache's proxy error: the backend refused its certificate
    word = "accepted" if accepted else "rejected"
    log = server_log(mtls_server, lambda log: len(verdicts(log, word)) >= 1)
    lines = verdicts(log, word)
    assert len(lines) == 1 and (f"CN={identity}" in lines[0] if accepted else "[untrusted]" in lines[0]), log
