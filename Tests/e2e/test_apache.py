"""`mtls connect` against Apache httpd (mod_ssl) on 127.0.0.1: client authentication for the whole
server over TLS 1.2 and 1.3, and for one location only, which Apache asks for after the handshake —
TLS 1.3 post-handshake authentication, which libmtls answers, or TLS 1.2 renegotiation, which
libmtls refuses with an error that says so."""
import json
import os
import shutil
import tempfile

import pytest

from conftest import free_port, require_tool, run_cli
from test_tls import Peer, peers, pki  # noqa: F401 (fixtures)

MODULES = "/usr/lib/apache2/modules"


@pytest.fixture
def cleanup():
    done = []
    yield done
    for f in done:
        f()


def apache(pki, tmp_path, peers, cleanup, whole_server):  # noqa: F811
    """Apache in the foreground (stopped with the test), answering every request with a 404 that
    carries the verified client's subject (mod_headers) — no document has to be readable."""
    require_tool(shutil.which("apache2"), "Apache httpd (apache2-bin)")
    port = free_port()
    # Apache's children run as nobody and must be able to walk to the document root.
    docroot = tempfile.mkdtemp(prefix="mtls-apache-")
    os.chmod(docroot, 0o755)
    cleanup.append(lambda: shutil.rmtree(docroot, ignore_errors=True))
    verify = "SSLVerifyClient require\nSSLVerifyDepth 3\n"
    (tmp_path / "httpd.conf").write_text(f"""
ServerRoot {tmp_path}
PidFile {tmp_path}/httpd.pid
DefaultRuntimeDir {tmp_path}
Listen 127.0.0.1:{port}
LoadModule mpm_event_module {MODULES}/mod_mpm_event.so
LoadModule authz_core_module {MODULES}/mod_authz_core.so
LoadModule ssl_module {MODULES}/mod_ssl.so
LoadModule headers_module {MODULES}/mod_headers.so
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
    peers.append(Peer(["apache2", "-f", str(tmp_path / "httpd.conf"), "-D", "FOREGROUND"], port))
    return port


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
def test_whole_server_client_authentication(pki, tmp_path, peers, cleanup, version):  # noqa: F811
    port = apache(pki, tmp_path, peers, cleanup, whole_server=True)
    r, out = get(pki, port, "/", version)
    assert r.returncode == 0 and out["tls_version"] == f"TLSv{version}", out
    assert client_dn(out) == ["CN=client-a,O=libmtls test"], out["response"]
    # A client of another customer's root: Apache refuses it, and the error is the server's alert.
    r, out = get(pki, port, "/", version, identity="client-c")
    assert r.returncode != 0 and out["error_code"] == "peer_alert", out


def test_per_location_client_authentication_over_tls13(pki, tmp_path, peers, cleanup):  # noqa: F811
    port = apache(pki, tmp_path, peers, cleanup, whole_server=False)
    r, out = get(pki, port, "/", "1.3")
    assert r.returncode == 0 and client_dn(out) == ["(null)"], out  # no certificate asked for
    r, out = get(pki, port, "/private/", "1.3")
    assert r.returncode == 0, out
    assert client_dn(out) == ["CN=client-a,O=libmtls test"], out["response"]


def test_per_location_client_authentication_over_tls12_says_renegotiation_is_refused(pki, tmp_path, peers, cleanup):  # noqa: F811
    port = apache(pki, tmp_path, peers, cleanup, whole_server=False)
    r, out = get(pki, port, "/", "1.2")
    assert r.returncode == 0, out
    r, out = get(pki, port, "/private/", "1.2")
    assert r.returncode != 0, out
    assert "the server asked to renegotiate (TLS 1.2), which libmtls refuses" in out["error"], out
    assert "needs TLS 1.3" in out["error"], out
