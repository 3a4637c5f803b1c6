"""Revocation for a private PKI (issue 28): `mtls pki` publishes where each CA's CRL lives, what it
issues carries the distribution point, and `mtls pki crl --out DIR` writes every CA's CRL for a
web server; checking fetches them from a real HTTP server on 127.0.0.1."""
import json
import os
import select
import socketserver
import subprocess
import threading
import time

import pytest

from conftest import free_port, run_cli, untimed, wait_port


def ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0, f"mtls {' '.join(map(str, args))}: {r.stderr}"
    return r


def ext_text(cert):
    r = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-ext",
                        "crlDistributionPoints,authorityInfoAccess"], capture_output=True, text=True, check=True)
    return r.stdout


@pytest.fixture(scope="module")
def crl_port():
    return free_port()


@pytest.fixture(scope="module")
def pki(tmp_path_factory, crl_port):
    """A root and customer A publishing CRLs at 127.0.0.1:crl_port; customer B publishes nothing."""
    base = tmp_path_factory.mktemp("revoke")
    d = base / "D"
    url = f"http://127.0.0.1:{crl_port}"
    ok("pki", "init", "--dir", d, "--name", "Revoke Root", "--crl-url", f"{url}/root.crl")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A", "--crl-url", f"{url}/customer-a.crl",
       "--ocsp-url", "http://127.0.0.1:9/ocsp")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer B")
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1")
    for name in ("alice", "bob", "laptop"):
        ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", name)
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer B", "--name", "mallory")

    class P:
        pass
    p = P()
    p.base, p.dir, p.url = base, d, url
    p.root = d / "root" / "cert.pem"
    p.inter = d / "ca" / "customer-a"
    p.issued = lambda name, ca="customer-a": d / "ca" / ca / "issued" / name
    return p


def test_issued_certificates_carry_their_issuers_crl_url(pki):
    # The intermediate carries the root's distribution point, the leaves the intermediate's.
    assert f"URI:{pki.url}/root.crl" in ext_text(pki.inter / "cert.pem")
    leaf = ext_text(pki.issued("laptop") / "cert.pem")
    assert f"URI:{pki.url}/customer-a.crl" in leaf
    assert "OCSP - URI:http://127.0.0.1:9/ocsp" in leaf
    assert "CRL Distribution Points" not in ext_text(pki.issued("mallory", "customer-b") / "cert.pem")
    assert "CRL Distribution Points" not in ext_text(pki.root)
    # The JSON of a new CA says where it publishes.
    r = ok("pki", "intermediate", "--dir", pki.dir, "--name", "Customer C", "--crl-url", f"{pki.url}/c.crl", "--json")
    out = json.loads(r.stdout)
    assert out["publishes_crl_at"] == f"{pki.url}/c.crl"
    assert out["crl_distribution_points"] == [f"{pki.url}/root.crl"]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "https://x/a.crl", "http://x/a.crl,URI:file:///y", "http://x/"])
def test_bad_crl_urls_are_refused_before_anything_is_made(tmp_path, url):
    r = run_cli("pki", "init", "--dir", tmp_path / "D", "--name", "R", "--crl-url", url)
    assert r.returncode != 0 and "http://" in r.stderr
    assert not (tmp_path / "D" / "root").exists()


def test_pki_crl_out_writes_every_publishing_cas_crl_in_der(pki, tmp_path):
    www = tmp_path / "www"
    r = ok("pki", "crl", "--dir", pki.dir, "--out", www, "--json")
    out = json.loads(r.stdout)
    files = sorted(os.path.basename(c["file"]) for c in out["crls"])
    assert "root.crl" in files and "customer-a.crl" in files and "c.crl" in files
    for name, issuer in (("root.crl", "Revoke Root"), ("customer-a.crl", "Customer A")):
        text = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", www / name, "-noout", "-issuer"],
                              capture_output=True, text=True, check=True).stdout
        assert issuer in text
        # verified against its CA with OpenSSL
        ca = pki.root if name == "root.crl" else pki.inter / "cert.pem"
        v = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", www / name, "-noout", "-CAfile", ca],
                           capture_output=True, text=True)
        assert "verify OK" in v.stderr + v.stdout
    assert oct(os.stat(www / "customer-a.crl").st_mode & 0o777) == "0o644"
    # neither --ca nor --out
    assert run_cli("pki", "crl", "--dir", pki.dir).returncode != 0


# ---- checking, against real HTTP servers on 127.0.0.1 ---------------------------------------



@pytest.fixture(scope="module")
def published(pki, crl_port, tmp_path_factory):
    """laptop revoked; `mtls pki crl --out www`; Python's http.server serving www on crl_port."""
    ok("pki", "revoke", "--dir", pki.dir, "--ca", "Customer A", "--name", "laptop", "--reason", "keyCompromise")
    ok("pki", "issue", "server", "--dir", pki.dir, "--ca", "Customer A", "--dns", "stolen.test", "--ip", "127.0.0.1",
       "--name", "stolen-server")
    ok("pki", "revoke", "--dir", pki.dir, "--ca", "Customer A", "--name", "stolen-server")
    www = tmp_path_factory.mktemp("www")
    ok("pki", "crl", "--dir", pki.dir, "--out", www)
    p = subprocess.Popen(["python3", "-m", "http.server", str(crl_port), "--bind", "127.0.0.1", "--directory", str(www)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(crl_port, p)
    yield www
    p.terminate()
    p.wait(10)


def cert_key(pki, name):
    d = pki.issued(name)
    return ["--cert", d / "chain.pem", "--key", d / "key.pem"]


class Serve:
    """`mtls serve` until stopped; ``finish`` stops it and returns what it printed (one line per
    client, flushed as each is judged)."""

    def __init__(self, *args):
        self.port = free_port()
        self.p = subprocess.Popen([os.environ["MTLS_CLI"], "serve", "--port", str(self.port), *map(str, args)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_port(self.port, self.p)

    def finish(self):
        time.sleep(0.5)  # the verdict of the last client is printed after its connection ends
        self.p.terminate()
        out, err = self.p.communicate(timeout=30)
        return out


def verdict_lines(out):
    # The readiness probe of wait_port is the first client, refused before any certificate.
    return [line for line in untimed(out).splitlines() if line.startswith(("accepted", "rejected")) and "CN=" in line
            or line.startswith("rejected") and "revok" in line]


def test_seed_story_listener_refuses_the_revoked_laptop_and_accepts_the_others(pki, published):
    srv = Serve(*cert_key(pki, "localhost"), "--client-anchor", pki.root, "--require-client-cert",
                "--revocation", "hard")
    results = {}
    for name in ("alice", "laptop", "bob"):
        r = run_cli("connect", f"127.0.0.1:{srv.port}", *cert_key(pki, name), "--anchor", pki.root, "--anchors-only",
                    "--verify-as", "localhost", "--send", "hi\\n", "--timeout", "10")
        results[name] = r
    out = srv.finish()
    assert results["alice"].returncode == 0 and results["bob"].returncode == 0, (results, out)
    assert results["laptop"].returncode != 0
    out = untimed(out)
    accepted = [line for line in out.splitlines() if line.startswith("accepted") and "CN=" in line]
    assert any("CN=alice" in line and line.endswith("trusted") for line in accepted), out
    assert any("CN=bob" in line for line in accepted), out
    [refused] = [line for line in out.splitlines() if line.startswith("rejected") and "revoked" in line]
    # Reason and date in the log line.
    assert '"laptop"' in refused and "keyCompromise" in refused and "since 20" in refused, refused
    assert not any("CN=laptop" in line for line in accepted)


def test_connect_refuses_a_server_whose_certificate_is_revoked(pki, published):
    srv = Serve(*cert_key(pki, "stolen-server"))
    r = run_cli("connect", f"127.0.0.1:{srv.port}", "--anchor", pki.root, "--anchors-only", "--verify-as", "stolen.test",
                "--revocation", "hard", "--json", "--timeout", "10")
    srv.finish()
    assert r.returncode != 0
    out = json.loads(r.stdout)
    codes = [x["code"] for x in out["evaluation"]["reasons"]]
    assert codes == ["revoked"], out
    assert out["evaluation"]["revocation"]["checks"][0]["status"] == "revoked"
    # Without revocation checking the same server is accepted: the refusal is the CRL's doing.
    srv = Serve(*cert_key(pki, "stolen-server"))
    r = run_cli("connect", f"127.0.0.1:{srv.port}", "--anchor", pki.root, "--anchors-only", "--verify-as", "stolen.test",
                "--send", "x", "--timeout", "10")
    srv.finish()
    assert r.returncode == 0, r.stderr


def verify(pki, name, *args, ca="customer-a"):
    r = run_cli("verify", pki.issued(name, ca) / "chain.pem", "--purpose", "client", "--anchor", pki.root,
                "--anchors-only", "--json", *args, timeout=60)
    return r, json.loads(r.stdout)


def test_verify_json_says_what_was_checked_from_where(pki, published):
    r, out = verify(pki, "alice", "--revocation", "hard")
    assert r.returncode == 0 and out["trusted"], out
    checks = out["revocation"]["checks"]
    assert [c["url"] for c in checks] == [f"{pki.url}/customer-a.crl", f"{pki.url}/root.crl"]
    assert all(c["status"] == "good" and c["fetched_from"] == "network" and c["fetched_at"] for c in checks)
    r, out = verify(pki, "laptop", "--revocation", "soft")
    assert r.returncode == 1 and [x["code"] for x in out["reasons"]] == ["revoked"]
    assert out["revocation"]["checks"][0]["reason"] == "keyCompromise"


def test_crl_server_stopped_hard_refuses_soft_accepts_and_says_so(pki, tmp_path):
    # A PKI whose CRL server is not running.
    d = tmp_path / "D"
    port = free_port()
    ok("pki", "init", "--dir", d, "--name", "Down Root", "--crl-url", f"http://127.0.0.1:{port}/root.crl")
    ok("pki", "intermediate", "--dir", d, "--name", "Down CA", "--crl-url", f"http://127.0.0.1:{port}/down.crl")
    ok("pki", "issue", "client", "--dir", d, "--ca", "Down CA", "--name", "carol")
    chain = d / "ca" / "down-ca" / "issued" / "carol" / "chain.pem"
    root = d / "root" / "cert.pem"
    hard = run_cli("verify", chain, "--purpose", "client", "--anchor", root, "--anchors-only", "--revocation", "hard", "--json")
    out = json.loads(hard.stdout)
    assert hard.returncode == 1 and {x["code"] for x in out["reasons"]} == {"revocation_unknown"}, out
    soft = run_cli("verify", chain, "--purpose", "client", "--anchor", root, "--anchors-only", "--revocation", "soft", "--json")
    out = json.loads(soft.stdout)
    assert soft.returncode == 0 and out["trusted"] and out["reasons"] == []
    assert len(out["warnings"]) == 2 and all("trusted anyway" in w for w in out["warnings"])
    assert [c["status"] for c in out["revocation"]["checks"]] == ["unknown", "unknown"]
    off = run_cli("verify", chain, "--purpose", "client", "--anchor", root, "--anchors-only")
    assert off.returncode == 0


class Hostile(socketserver.ThreadingTCPServer):
    """An HTTP server on 127.0.0.1 that answers each path in its own hostile way."""
    daemon_threads = True
    allow_reuse_address = True


def make_handler(files):
    class H(socketserver.StreamRequestHandler):
        def handle(self):
            line = self.rfile.readline().decode(errors="replace")
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            path = line.split(" ")[1] if " " in line else "/"
            w = self.wfile
            try:
                if path == "/big.crl":  # 100 MB, no Content-Length
                    w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    chunk = b"\0" * 65536
                    for _ in range(100 * 16):
                        w.write(chunk)
                elif path == "/big-declared.crl":
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 104857600\r\n\r\n" + b"\0" * 65536)
                elif path == "/trickle.crl":
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                    for _ in range(1000):
                        w.write(b"\x30")
                        w.flush()
                        time.sleep(1)
                elif path == "/redirect.crl":
                    w.write(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n")
                else:
                    body = files.get(path, b"")
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            except OSError:
                pass  # the client gave up: what the test wants
    return H


HOSTILE = {
    "big": "over the limit",
    "big-declared": "over the limit",
    "trickle": "timed out",
    "garbage": "did not serve a CRL",
    "other-sig": "another key",
    "other-issuer": "not by the certificate's issuer",
    # The Location is never quoted (issue 41: it may hold anything).
    "redirect": "redirects to a URL that is not http:",
}


@pytest.fixture(scope="module")
def hostile(pki, published, tmp_path_factory):
    """One intermediate (and client) per hostile behaviour, each publishing at the hostile server."""
    files = {}
    srv = Hostile(("127.0.0.1", 0), make_handler(files))
    port = srv.server_address[1]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    for case in HOSTILE:
        name = f"Hostile {case}"
        ok("pki", "intermediate", "--dir", pki.dir, "--name", name, "--crl-url", f"http://127.0.0.1:{port}/{case}.crl")
        ok("pki", "issue", "client", "--dir", pki.dir, "--ca", name, "--name", f"victim-{case}")
    files["/garbage.crl"] = os.urandom(3000)
    files["/other-issuer.crl"] = (published / "customer-a.crl").read_bytes()
    # Same issuer name, another key: a root named like the intermediate signs it.
    from mtls import IssuedCertificate
    files["/other-sig.crl"] = IssuedCertificate.root("Hostile other-sig").crl([])
    policy = tmp_path_factory.mktemp("hostile") / "policy.json"
    policy.write_text(json.dumps({"revocation": {"mode": "hard", "max_bytes": 1 << 20, "timeout_ms": 3000}}))
    yield policy
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_crl_servers_give_a_clear_unknown_within_the_limits(pki, hostile, case):
    slug = "hostile-" + case
    start = time.monotonic()
    r, out = verify(pki, f"victim-{case}", "--policy", hostile, ca=slug)
    elapsed = time.monotonic() - start
    # The issue asks for bounded time: 3 s fetch limit (+ process start and the root's CRL).
    assert elapsed < 15, elapsed
    assert r.returncode == 1 and not out["trusted"], out
    leaf = out["revocation"]["checks"][0]
    assert leaf["status"] == "unknown", leaf  # never "good"
    assert HOSTILE[case] in leaf["error"], leaf
    assert [x["code"] for x in out["reasons"] if x["cert_index"] == 0] == ["revocation_unknown"]


def test_stale_crl_counts_as_unknown(pki, tmp_path):
    from mtls import IssuedCertificate
    port = free_port()
    d = tmp_path / "S"
    ok("pki", "init", "--dir", d, "--name", "Stale Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Stale CA", "--crl-url", f"http://127.0.0.1:{port}/stale.crl")
    ok("pki", "issue", "client", "--dir", d, "--ca", "Stale CA", "--name", "dave")
    ca = IssuedCertificate.load(d / "ca" / "stale-ca" / "cert.pem", d / "ca" / "stale-ca" / "key.pem")
    www = tmp_path / "www"
    www.mkdir()
    # thisUpdate three days ago, nextUpdate two days ago.
    (www / "stale.crl").write_bytes(ca.crl([], now=int(time.time()) - 3 * 86400, days=1))
    p = subprocess.Popen(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(www)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, p)
        chain = d / "ca" / "stale-ca" / "issued" / "dave" / "chain.pem"
        # The intermediate names no CRL (the root publishes none): only the leaf is looked at here.
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", d / "ca" / "stale-ca" / "cert.pem",
                    "--anchors-only", "--revocation", "hard", "--json")
        out = json.loads(r.stdout)
        assert r.returncode == 1, out
        leaf = out["revocation"]["checks"][0]
        assert leaf["status"] == "unknown" and "stale" in leaf["error"], leaf
        assert [x["code"] for x in out["reasons"]] == ["revocation_unknown"]
    finally:
        p.terminate()
        p.wait(10)


# ---- OCSP: a real `openssl ocsp` responder -----------------------------------------------------

def openssl_time(epoch):
    return time.strftime("%y%m%d%H%M%SZ", time.gmtime(epoch))


def start_ocsp_responder(*args):
    """`openssl ocsp -port ...`, ready once it says it waits for clients. (Not probed with a
    connection: the OpenSSL 3.0 responder, one client at a time, stays stuck on a connection that
    closed without a request.)"""
    p = subprocess.Popen(["openssl", "ocsp", *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        line = p.stderr.readline()
        if "waiting for OCSP client connections" in line:
            return p
        assert line or p.poll() is None, "openssl ocsp exited"
    raise AssertionError("openssl ocsp did not start")


@pytest.fixture(scope="module")
def ocsp(tmp_path_factory):
    """A PKI whose intermediate names an OCSP responder: `openssl ocsp -index -CA -rsigner` started
    here, with an index that revokes "laptop" (keyCompromise) and knows "alice"."""
    base = tmp_path_factory.mktemp("ocsp")
    d = base / "D"
    port = free_port()
    ok("pki", "init", "--dir", d, "--name", "OCSP Root")
    ok("pki", "intermediate", "--dir", d, "--name", "OCSP CA", "--ocsp-url", f"http://127.0.0.1:{port}/")
    for name in ("alice", "laptop", "stranger"):
        ok("pki", "issue", "client", "--dir", d, "--ca", "OCSP CA", "--name", name)
    ca = d / "ca" / "ocsp-ca"
    lines = []
    for name, revoked in (("alice", False), ("laptop", True)):
        serial = subprocess.run(["openssl", "x509", "-in", ca / "issued" / name / "cert.pem", "-noout", "-serial"],
                                capture_output=True, text=True, check=True).stdout.strip().split("=")[1]
        exp = openssl_time(time.time() + 365 * 86400)
        rev = f"{openssl_time(time.time() - 3600)},keyCompromise" if revoked else ""
        lines.append(f"{'R' if revoked else 'V'}\t{exp}\t{rev}\t{serial}\tunknown\t/CN={name}")
    (base / "index.txt").write_text("\n".join(lines) + "\n")
    (base / "index.txt.attr").write_text("unique_subject = no\n")
    p = start_ocsp_responder("-index", base / "index.txt", "-port", port, "-rsigner", ca / "cert.pem",
                             "-rkey", ca / "key.pem", "-CA", ca / "cert.pem", "-nmin", "10")
    policy = base / "ocsp-policy.json"
    policy.write_text(json.dumps({"revocation": {"mode": "hard", "sources": ["ocsp"], "timeout_ms": 5000}}))

    class O:
        pass
    o = O()
    o.dir, o.ca, o.policy, o.port = d, ca, policy, port
    yield o
    p.terminate()
    p.wait(10)


def ocsp_verify(o, name):
    # The intermediate is the anchor: only the leaf names the responder.
    r = run_cli("verify", o.ca / "issued" / name / "chain.pem", "--purpose", "client", "--anchor", o.ca / "cert.pem",
                "--anchors-only", "--policy", o.policy, "--json", timeout=60)
    return r, json.loads(r.stdout)


def test_ocsp_responder_good_revoked_and_unknown(ocsp):
    r, out = ocsp_verify(ocsp, "alice")
    assert r.returncode == 0 and out["trusted"], out
    [c] = out["revocation"]["checks"]
    assert (c["status"], c["source"], c["url"], c["fetched_from"]) == ("good", "ocsp", f"http://127.0.0.1:{ocsp.port}/", "network")
    assert c["next_update"]
    r, out = ocsp_verify(ocsp, "laptop")
    assert r.returncode == 1 and [x["code"] for x in out["reasons"]] == ["revoked"], out
    [c] = out["revocation"]["checks"]
    assert c["status"] == "revoked" and c["reason"] == "keyCompromise" and c["revoked_at"]
    # Said as an OCSP answer, not a CRL's (issue 36).
    message = out["reasons"][0]["message"]
    assert f"(OCSP http://127.0.0.1:{ocsp.port}/)" in message and "CRL" not in message, message
    # Not in the responder's index: the responder says "unknown", which is no answer: hard refuses.
    r, out = ocsp_verify(ocsp, "stranger")
    assert r.returncode == 1 and [x["code"] for x in out["reasons"]] == ["revocation_unknown"], out
    assert "does not know the certificate" in out["revocation"]["checks"][0]["error"]


def test_ocsp_response_signed_by_another_ca_is_refused(ocsp, tmp_path):
    # A responder for the same index, signing with another CA's key, is not believed.
    other = tmp_path / "O"
    ok("pki", "init", "--dir", other, "--name", "Other OCSP Root")
    port = free_port()
    index = ocsp.policy.parent / "index.txt"
    p = start_ocsp_responder("-index", index, "-port", port, "-rsigner", other / "root" / "cert.pem",
                             "-rkey", other / "root" / "key.pem", "-CA", ocsp.ca / "cert.pem")
    try:
        # A leaf of the fixture's intermediate whose responder is the forging one.
        from mtls import IssuedCertificate
        ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
        leaf = ca.issue_client("forged-target", ocsp_url=f"http://127.0.0.1:{port}/")
        chain = tmp_path / "chain.pem"
        chain.write_text(leaf.chain_pem)
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--policy", ocsp.policy, "--json")
        out = json.loads(r.stdout)
        assert r.returncode == 1, out
        [c] = out["revocation"]["checks"]
        assert c["status"] == "unknown" and "not signed by" in c["error"], c
    finally:
        p.terminate()
        p.wait(10)


@pytest.mark.parametrize("eku, believed", [("OCSPSigning", True), ("clientAuth", False)])
def test_ocsp_delegated_responder_needs_ocsp_signing(ocsp, tmp_path, eku, believed):
    # A responder certificate issued by the intermediate (openssl x509 -req), with or without
    # id-kp-OCSPSigning, signs the answers.
    key, csr, crt, ext = (tmp_path / n for n in ("r.key", "r.csr", "r.pem", "ext.cnf"))
    ext.write_text(f"extendedKeyUsage={eku}\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n")
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", csr, "-subj", "/CN=delegated responder"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ocsp.ca / "cert.pem", "-CAkey", ocsp.ca / "key.pem",
                    "-CAcreateserial", "-out", crt, "-days", "30", "-extfile", ext], check=True, capture_output=True)
    port = free_port()
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    leaf = ca.issue_client(f"delegated-{eku}", ocsp_url=f"http://127.0.0.1:{port}/")
    index = tmp_path / "index.txt"
    serial = leaf.certificate.serial_hex.upper()
    serial = "0" * (len(serial) % 2) + serial  # whole bytes, as OpenSSL's index writes serials
    index.write_text(f"V\t{openssl_time(time.time() + 86400)}\t\t{serial}\tunknown\t/CN=x\n")
    p = start_ocsp_responder("-index", index, "-port", port, "-rsigner", crt, "-rkey", key, "-CA", ocsp.ca / "cert.pem")
    try:
        chain = tmp_path / "chain.pem"
        chain.write_text(leaf.chain_pem)
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--policy", ocsp.policy, "--json")
        out = json.loads(r.stdout)
        [c] = out["revocation"]["checks"]
        if believed:
            assert r.returncode == 0 and c["status"] == "good" and c["source"] == "ocsp", c
        else:
            assert r.returncode == 1
            assert c["status"] == "unknown" and "not signed by" in c["error"], c
    finally:
        p.terminate()
        p.wait(10)


def connect_to_openssl_stapling(ocsp, crt, key, ca_pem, resp, version, name):
    """`mtls connect --json` (the OCSP policy, hard) to `openssl s_server` stapling the response
    file `resp`: the CompletedProcess and its JSON."""
    port = free_port()
    p = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-cert", crt, "-key", key, "-cert_chain", ca_pem,
                          "-status_file", resp, version, "-quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_port(port, p)
        r = run_cli("connect", f"127.0.0.1:{port}", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--verify-as", name, "--policy", ocsp.policy, "--json", "--timeout", "10")
        return r, json.loads(r.stdout)
    finally:
        p.kill()
        p.wait(10)


def staple_files(ocsp, tmp_path, revoked):
    """A server certificate for staple.test naming a responder nothing listens on, its key, its
    CA and a fresh OCSP response for it (good, or revoked keyCompromise) made by `openssl ocsp`:
    only a staple can answer for it."""
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    dead = free_port()
    server = ca.issue_server("staple.test", dns=["staple.test"], ocsp_url=f"http://127.0.0.1:{dead}/")
    crt, key, chain, ca_pem = (tmp_path / n for n in ("s.pem", "s.key", "chain.pem", "ca.pem"))
    crt.write_text(server.certificate.pem)
    key.write_text(server.key_pem())
    os.chmod(key, 0o600)
    ca_pem.write_text(ca.certificate.pem)
    serial = server.certificate.serial_hex.upper()
    serial = "0" * (len(serial) % 2) + serial
    index = tmp_path / "index.txt"
    exp = openssl_time(time.time() + 86400)
    status = f"R\t{exp}\t{openssl_time(time.time() - 60)},keyCompromise" if revoked else f"V\t{exp}\t"
    index.write_text(f"{status}\t{serial}\tunknown\t/CN=staple.test\n")
    req, resp = tmp_path / "req.der", tmp_path / "resp.der"
    subprocess.run(["openssl", "ocsp", "-issuer", ca_pem, "-cert", crt, "-reqout", req, "-no_nonce"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "ocsp", "-index", index, "-rsigner", ocsp.ca / "cert.pem", "-rkey", ocsp.ca / "key.pem",
                    "-CA", ocsp.ca / "cert.pem", "-reqin", req, "-respout", resp, "-nmin", "10"],
                   check=True, capture_output=True)
    return crt, key, ca_pem, resp


@pytest.mark.parametrize("version", ["-tls1_3", "-tls1_2"])
@pytest.mark.parametrize("revoked", [False, True])
def test_client_checks_a_staple_from_openssl_s_server(ocsp, tmp_path, revoked, version):
    # TLS 1.2 sends the staple after the certificate, which OpenSSL verifies first: the check
    # waits for it (the status callback), so a good staple answers without any fetch (the
    # responder named is dead) and a revoked one refuses.
    crt, key, ca_pem, resp = staple_files(ocsp, tmp_path, revoked)
    r, out = connect_to_openssl_stapling(ocsp, crt, key, ca_pem, resp, version, "staple.test")
    ev = out["evaluation"]
    [c] = ev["revocation"]["checks"]
    assert c["source"] == "ocsp_staple" and c["fetched_from"] == "staple", c
    if revoked:
        assert r.returncode != 0 and c["status"] == "revoked" and c["reason"] == "keyCompromise", out
        assert [x["code"] for x in ev["reasons"]] == ["revoked"]
    else:
        assert r.returncode == 0 and out["connected"] and c["status"] == "good", out


def test_mtls_serve_staples_ocsp_for_its_own_certificate(ocsp, tmp_path):
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    port = free_port()
    server = ca.issue_server("stapler.test", dns=["stapler.test"], ocsp_url=f"http://127.0.0.1:{port}/")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_text(server.chain_pem)
    key.write_text(server.key_pem())
    os.chmod(key, 0o600)
    serial = server.certificate.serial_hex.upper()
    serial = "0" * (len(serial) % 2) + serial
    index = tmp_path / "index.txt"
    index.write_text(f"V\t{openssl_time(time.time() + 86400)}\t\t{serial}\tunknown\t/CN=stapler.test\n")
    responder = start_ocsp_responder("-index", index, "-port", port, "-rsigner", ocsp.ca / "cert.pem",
                                     "-rkey", ocsp.ca / "key.pem", "-CA", ocsp.ca / "cert.pem", "-nmin", "10")
    srv = Serve("--cert", chain, "--key", key)
    try:
        # The staple is fetched in the background, never on the handshake path: wait for it.
        text = ""
        end = time.monotonic() + 20
        while time.monotonic() < end:
            r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-servername", "stapler.test",
                                "-status", "-CAfile", ocsp.ca / "cert.pem"], input=b"", capture_output=True, timeout=20)
            text = r.stdout.decode(errors="replace")
            if "OCSP Response Status: successful" in text:
                break
            time.sleep(0.5)
        assert "OCSP Response Status: successful" in text, text
        assert "Cert Status: good" in text
        # A libmtls client checking OCSP takes the staple (the responder is up, but the staple
        # comes first).
        r = run_cli("connect", f"127.0.0.1:{srv.port}", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--verify-as", "stapler.test", "--policy", ocsp.policy, "--json", "--timeout", "10")
        out = json.loads(r.stdout)
        [c] = out["evaluation"]["revocation"]["checks"]
        assert r.returncode == 0 and c["source"] == "ocsp_staple" and c["status"] == "good", out
    finally:
        srv.finish()
        responder.terminate()
        responder.wait(10)


def stapling_lines(srv, within=30):
    """What `mtls serve` prints until its first "OCSP stapling" line (or `within` seconds). The
    stapler's first fetch may end before serve sets its event handler; the retry comes within 5 s."""
    seen = []
    end = time.monotonic() + within
    while time.monotonic() < end and not any("OCSP stapling" in line for line in seen):
        ready, _, _ = select.select([srv.p.stdout], [], [], 1)
        if ready:
            line = srv.p.stdout.readline()
            if not line:
                break
            seen.append(line)
    return seen


def test_mtls_serve_prints_its_staplers_fetch_failures(ocsp, tmp_path):
    """`mtls serve` with a certificate whose OCSP responder is down: the stapler's failed fetches
    are the listener's revocation_fetch_failed events, and serve prints each (before, the stapler
    could report nothing)."""
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    url = f"http://127.0.0.1:{free_port()}/"  # nobody listens there
    server = ca.issue_server("nostaple.test", dns=["nostaple.test"], ocsp_url=url)
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_text(server.chain_pem)
    key.write_text(server.key_pem())
    os.chmod(key, 0o600)
    srv = Serve("--cert", chain, "--key", key)
    try:
        seen = stapling_lines(srv)
    finally:
        out = srv.finish()
    lines = [untimed(line) for line in seen + out.splitlines() if "OCSP stapling" in line]
    assert lines, seen + out.splitlines()
    assert lines[0].startswith("revocation fetch failed [") and url in lines[0] and "nostaple.test" in lines[0], lines


def test_tls12_server_without_a_staple_is_checked_by_the_policys_other_sources(ocsp, tmp_path):
    # No staple in TLS 1.2 (the status callback is made without one): the check still happens —
    # the certificate names a dead responder, so hard refuses as unknown, never trusts unchecked.
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    dead = free_port()
    server = ca.issue_server("nostaple.test", dns=["nostaple.test"], ocsp_url=f"http://127.0.0.1:{dead}/")
    crt, key, ca_pem = tmp_path / "s.pem", tmp_path / "s.key", tmp_path / "ca.pem"
    crt.write_text(server.certificate.pem)
    key.write_text(server.key_pem())
    os.chmod(key, 0o600)
    ca_pem.write_text(ca.certificate.pem)
    port = free_port()
    p = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-cert", crt, "-key", key, "-cert_chain", ca_pem,
                          "-tls1_2", "-quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_port(port, p)
        r = run_cli("connect", f"127.0.0.1:{port}", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--verify-as", "nostaple.test", "--policy", ocsp.policy, "--json", "--timeout", "10")
        out = json.loads(r.stdout)
        ev = out["evaluation"]
        assert r.returncode != 0 and not out["connected"], out
        assert [x["code"] for x in ev["reasons"]] == ["revocation_unknown"], ev
        [c] = ev["revocation"]["checks"]
        assert c["status"] == "unknown" and c["url"] == f"http://127.0.0.1:{dead}/", c
    finally:
        p.kill()
        p.wait(10)


def _libssl():
    import ctypes
    import ctypes.util
    libssl = ctypes.CDLL(ctypes.util.find_library("ssl"))
    for name, res, args in (("TLS_method", ctypes.c_void_p, []), ("SSL_CTX_new", ctypes.c_void_p, [ctypes.c_void_p]),
                            ("SSL_CTX_free", None, [ctypes.c_void_p]), ("SSL_new", ctypes.c_void_p, [ctypes.c_void_p]),
                            ("SSL_free", None, [ctypes.c_void_p]), ("SSL_set_fd", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
                            ("SSL_accept", ctypes.c_int, [ctypes.c_void_p]), ("SSL_shutdown", ctypes.c_int, [ctypes.c_void_p])):
        f = getattr(libssl, name)
        f.restype, f.argtypes = res, args
    return libssl


class AppServer:
    """An application's own server SSL_CTX (OpenSSL through ctypes) accepting on 127.0.0.1 in a
    thread, as nginx- or Apache-style programs do, after `configure(ctx)` (libmtls configures it)."""

    def __init__(self, configure):
        import socket
        self.libssl = libssl = _libssl()
        self.ctx = libssl.SSL_CTX_new(libssl.TLS_method())
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.stop_event = threading.Event()
        configure(self.ctx)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        libssl = self.libssl
        while not self.stop_event.is_set():
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                continue
            conn.setblocking(True)  # accepted from a socket with a timeout: OpenSSL needs it blocking
            ssl = libssl.SSL_new(self.ctx)
            try:
                libssl.SSL_set_fd(ssl, conn.fileno())
                if libssl.SSL_accept(ssl) == 1:
                    libssl.SSL_shutdown(ssl)
            finally:
                libssl.SSL_free(ssl)
                conn.close()

    def status(self, ca, *args):
        """`openssl s_client -status` output against this server."""
        r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{self.port}", "-status", "-CAfile", ca, *args],
                           input=b"", capture_output=True, timeout=20)
        return r.stdout.decode(errors="replace")

    def stapled(self, ca, serial, *args, within=20):
        """Waits (the stapler fetches in the background) for a good staple for `serial`; the output."""
        text = ""
        end = time.monotonic() + within
        while time.monotonic() < end:
            text = self.status(ca, *args)
            if "Cert Status: good" in text and f"Serial Number: {serial}" in text:
                break
            time.sleep(0.5)
        return text

    def close(self):
        self.stop_event.set()
        self.thread.join(15)
        self.lsock.close()
        self.libssl.SSL_CTX_free(self.ctx)


def app_server_certificates(ocsp, tmp_path, names, port):
    """Server certificates for `names` naming the responder on `port`, and that responder
    (`openssl ocsp`) knowing each as good: (certificates, responder, CA)."""
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    servers = [ca.issue_server(n, dns=[n], ocsp_url=f"http://127.0.0.1:{port}/") for n in names]
    lines = []
    for n, server in zip(names, servers):
        serial = server.certificate.serial_hex.upper()
        lines.append(f"V\t{openssl_time(time.time() + 86400)}\t\t{'0' * (len(serial) % 2) + serial}\tunknown\t/CN={n}\n")
    index = tmp_path / "index.txt"
    index.write_text("".join(lines))
    (tmp_path / "index.txt.attr").write_text("unique_subject = no\n")
    responder = start_ocsp_responder("-index", index, "-port", port, "-rsigner", ocsp.ca / "cert.pem",
                                     "-rkey", ocsp.ca / "key.pem", "-CA", ocsp.ca / "cert.pem", "-nmin", "10")
    return servers, responder, ca


def test_application_ssl_ctx_staples_ocsp_for_its_own_certificate(ocsp, tmp_path):
    # An application's own SSL_CTX configured to accept clients (mtls_ssl_ctx_configure*) staples
    # as the listener does: the staple is fetched in the background from the certificate's
    # responder, and `openssl s_client -status` sees it.
    import mtls
    port = free_port()
    [server], responder, ca = app_server_certificates(ocsp, tmp_path, ["appctx.test"], port)
    app = None
    try:
        app = AppServer(lambda ctx: mtls.configure_ssl_ctx(ctx, server.identity, mtls.Policy(anchors=[ca.certificate]),
                                                           accepts_clients=True))
        serial = server.certificate.serial_hex.upper()
        text = app.stapled(ocsp.ca / "cert.pem", serial, "-servername", "appctx.test")
        assert "OCSP Response Status: successful" in text, text
        assert "Cert Status: good" in text
        assert "appctx.test" in text
        # TLS 1.2 too.
        assert "OCSP Response Status: successful" in app.status(ocsp.ca / "cert.pem", "-tls1_2")
    finally:
        if app is not None:
            app.close()
        responder.terminate()
        responder.wait(10)


def test_application_ssl_ctx_following_an_identity_source_staples_the_current_identity(ocsp, tmp_path):
    """Issue 37: an application's server SSL_CTX configured with an identity source staples for
    the identity in force, as a listener does: after the source changes to a new certificate,
    the staple is fetched for it (before, the stapler kept the first certificate's and nothing
    was stapled after a rotation)."""
    import mtls
    port = free_port()
    (first, second), responder, ca = app_server_certificates(ocsp, tmp_path, ["rot1.test", "rot2.test"], port)
    source = mtls.IdentitySource(first.identity)
    app = None
    try:
        app = AppServer(lambda ctx: mtls.configure_ssl_ctx(ctx, None, mtls.Policy(anchors=[ca.certificate]),
                                                           accepts_clients=True, identity_source=source))
        for server in (first, second):
            source.set(server.identity)
            for version in ("-tls1_3", "-tls1_2"):
                serial = server.certificate.serial_hex.upper()
                text = app.stapled(ocsp.ca / "cert.pem", serial, version)
                assert "Cert Status: good" in text and f"Serial Number: {serial}" in text, text
    finally:
        if app is not None:
            app.close()
        responder.terminate()
        responder.wait(10)


# ---- One freshness rule for every revocation answer (issue 35 item 5) -------------------------

def rfc3339(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def ocsp_leaf(ocsp, tmp_path, name, url, server=False):
    """A certificate of the OCSP CA naming the responder `url`: (issued, chain file, key file)."""
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(ocsp.ca / "cert.pem", ocsp.ca / "key.pem")
    leaf = (ca.issue_server(name, dns=[name], ocsp_url=url, days=60) if server
            else ca.issue_client(name, ocsp_url=url, days=60))
    chain, key = tmp_path / f"{name}-chain.pem", tmp_path / f"{name}-key.pem"
    chain.write_text(leaf.chain_pem)
    key.write_text(leaf.key_pem())
    os.chmod(key, 0o600)
    return leaf, chain, key


def signed_ocsp_answer(ocsp, leaf, this_update, next_update=None):
    """A genuine "good" OCSP response for `leaf`, signed by its CA, with the given dates and no
    nonce (cryptography's builder: `openssl ocsp` cannot backdate thisUpdate)."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509 import ocsp as cocsp
    issuer = x509.load_pem_x509_certificate((ocsp.ca / "cert.pem").read_bytes())
    key = serialization.load_pem_private_key((ocsp.ca / "key.pem").read_bytes(), None)
    cert = x509.load_pem_x509_certificate(leaf.certificate.pem.encode())

    def utc(epoch):
        return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).replace(tzinfo=None)
    b = cocsp.OCSPResponseBuilder().add_response(
        cert=cert, issuer=issuer, algorithm=hashes.SHA1(), cert_status=cocsp.OCSPCertStatus.GOOD,
        this_update=utc(this_update), next_update=utc(next_update) if next_update else None,
        revocation_time=None, revocation_reason=None).responder_id(cocsp.OCSPResponderEncoding.HASH, issuer)
    return b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


class ReplayResponder:
    """A plain-HTTP "responder" on 127.0.0.1 answering every POST with one recorded response
    (`body`, set once the certificate naming it exists), as someone in the path replaces the real
    responder's answer; `asked` is set at the first request."""

    def __init__(self):
        import http.server
        outer = self
        self.body = b""
        self.asked = threading.Event()

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/ocsp-response")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)
                outer.asked.set()

            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_ocsp_answer_without_next_update_is_current_for_the_maximum_age_only(ocsp, tmp_path):
    """`openssl ocsp` without -nmin/-ndays answers without nextUpdate: such an answer is current
    until its thisUpdate plus the maximum age (default 7 days; --revocation-max-age, policy
    max_age_seconds), then refused under hard. Before, it was accepted for ever."""
    port = free_port()
    leaf, chain, _ = ocsp_leaf(ocsp, tmp_path, "no-next", f"http://127.0.0.1:{port}/")
    serial = leaf.certificate.serial_hex.upper()
    serial = "0" * (len(serial) % 2) + serial
    index = tmp_path / "index.txt"
    index.write_text(f"V\t{openssl_time(time.time() + 365 * 86400)}\t\t{serial}\tunknown\t/CN=no-next\n")
    p = start_ocsp_responder("-index", index, "-port", port, "-rsigner", ocsp.ca / "cert.pem",
                             "-rkey", ocsp.ca / "key.pem", "-CA", ocsp.ca / "cert.pem")
    max_age_policy = tmp_path / "max-age.json"
    max_age_policy.write_text(json.dumps({"revocation": {"mode": "hard", "sources": ["ocsp"], "max_age_seconds": 3600}}))

    def check(*args, policy=ocsp.policy):
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--policy", policy, "--json", *args, timeout=60)
        out = json.loads(r.stdout)
        [c] = out["revocation"]["checks"]
        return r, out, c
    try:
        now = time.time()
        r, out, c = check("--at", rfc3339(now + 86400))
        assert r.returncode == 0 and c["status"] == "good" and c["next_update"] is None, out
        r, out, c = check("--at", rfc3339(now + 8 * 86400))
        assert r.returncode != 0 and c["status"] == "unknown", out
        assert "no nextUpdate" in c["error"] and "maximum age" in c["error"], c
        assert [x["code"] for x in out["reasons"]] == ["revocation_unknown"], out
        # The maximum age from the command line and from the policy file.
        r, out, c = check("--at", rfc3339(now + 7200), "--revocation-max-age", "3600")
        assert r.returncode != 0 and "maximum age of 3600 s" in c["error"], out
        r, out, c = check("--at", rfc3339(now + 7200), policy=max_age_policy)
        assert r.returncode != 0 and "maximum age of 3600 s" in c["error"], out
        r, out, c = check("--at", rfc3339(now + 1800), policy=max_age_policy)
        assert r.returncode == 0 and c["status"] == "good", out
        r = run_cli("verify", chain, "--revocation-max-age", "-5")
        assert r.returncode != 0 and "--revocation-max-age" in r.stderr, r.stderr
    finally:
        p.terminate()
        p.wait(10)


def test_an_old_ocsp_answer_replayed_over_plain_http_is_refused_under_hard(ocsp, tmp_path):
    """A genuine "good" answer 400 days old, without nextUpdate and nonce, served over plain HTTP
    in place of the responder: refused under hard, saying why. Before, it was trusted."""
    replay = ReplayResponder()
    try:
        leaf, chain, _ = ocsp_leaf(ocsp, tmp_path, "replayed", replay.url)
        replay.body = signed_ocsp_answer(ocsp, leaf, time.time() - 400 * 86400)
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--policy", ocsp.policy, "--json", timeout=60)
        out = json.loads(r.stdout)
        [c] = out["revocation"]["checks"]
        assert replay.asked.is_set()
        assert r.returncode != 0 and not out["trusted"] and c["status"] == "unknown", out
        assert "OCSP" in c["error"] and "no nextUpdate" in c["error"] and "maximum age" in c["error"], c
        # The same answer, 400 days old but with a nextUpdate still ahead, is current: the rule
        # is nextUpdate first.
        replay.body = signed_ocsp_answer(ocsp, leaf, time.time() - 400 * 86400, time.time() + 3600)
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--policy", ocsp.policy, "--json", timeout=60)
        out = json.loads(r.stdout)
        assert r.returncode == 0 and out["revocation"]["checks"][0]["status"] == "good", out
        # A thisUpdate an hour in the future (beyond the 5 minutes of clock skew) is refused.
        replay.body = signed_ocsp_answer(ocsp, leaf, time.time() + 3600, time.time() + 7200)
        r = run_cli("verify", chain, "--purpose", "client", "--anchor", ocsp.ca / "cert.pem", "--anchors-only",
                    "--policy", ocsp.policy, "--json", timeout=60)
        out = json.loads(r.stdout)
        assert r.returncode != 0 and "not valid yet" in out["revocation"]["checks"][0]["error"], out
    finally:
        replay.stop()


@pytest.mark.parametrize("version", ["-tls1_3", "-tls1_2"])
def test_client_refuses_a_stale_staple_from_openssl_s_server(ocsp, tmp_path, version):
    """A server stapling a genuine "good" answer 400 days old without nextUpdate: under hard the
    client refuses (the staple is stale, and the responder named is dead), TLS 1.3 and 1.2.
    Before, the staple was taken as good."""
    dead = free_port()
    leaf, chain, key = ocsp_leaf(ocsp, tmp_path, "stale-staple.test", f"http://127.0.0.1:{dead}/", server=True)
    crt, ca_pem, resp = tmp_path / "s.pem", tmp_path / "ca.pem", tmp_path / "resp.der"
    crt.write_text(leaf.certificate.pem)
    ca_pem.write_text((ocsp.ca / "cert.pem").read_text())
    resp.write_bytes(signed_ocsp_answer(ocsp, leaf, time.time() - 400 * 86400))
    r, out = connect_to_openssl_stapling(ocsp, crt, key, ca_pem, resp, version, "stale-staple.test")
    ev = out["evaluation"]
    [c] = ev["revocation"]["checks"]
    assert r.returncode != 0 and not out["connected"] and c["status"] == "unknown", out
    assert "stapled OCSP response" in c["error"] and "maximum age" in c["error"], c
    assert [x["code"] for x in ev["reasons"]] == ["revocation_unknown"], ev


def test_mtls_serve_does_not_staple_a_stale_answer(ocsp, tmp_path):
    """`mtls serve` whose responder (replayed) answers "good" with a thisUpdate 400 days old and
    no nextUpdate: nothing is stapled, and the refusal is printed as a stapling failure. Before,
    the stale answer was stapled to every handshake."""
    replay = ReplayResponder()
    try:
        leaf, chain, key = ocsp_leaf(ocsp, tmp_path, "stale-stapler.test", replay.url, server=True)
        replay.body = signed_ocsp_answer(ocsp, leaf, time.time() - 400 * 86400)
        srv = Serve("--cert", chain, "--key", key)
        try:
            # The failure is printed after what the stapler keeps was decided.
            seen = stapling_lines(srv)
            lines = [line for line in seen if "OCSP stapling" in line]
            assert lines and "maximum age" in lines[0], seen
            r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-servername",
                                "stale-stapler.test", "-status", "-CAfile", ocsp.ca / "cert.pem"],
                               input=b"", capture_output=True, timeout=20)
            text = r.stdout.decode(errors="replace")
            assert "OCSP response: no response sent" in text, text
        finally:
            srv.finish()
    finally:
        replay.stop()


# ---- The CRL cache folder, and one CRL acceptance rule (issue 35 item 7, issue 36) -------------

def cache_name(url):
    import hashlib
    return hashlib.sha256(url.encode()).hexdigest() + ".crl"


def cache_policy(tmp_path, cache):
    p = tmp_path / "cache-policy.json"
    p.write_text(json.dumps({"revocation": {"mode": "hard", "cache_dir": str(cache)}}))
    return p


def test_a_fifo_planted_in_the_crl_cache_folder_does_not_block_the_check(pki, published, tmp_path):
    """A FIFO under a URL's cache file name: the check does not wait on it (read only if a
    regular file, opened non-blocking, links not followed) and fetches. Before, it blocked for
    ever."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    for url in (f"{pki.url}/customer-a.crl", f"{pki.url}/root.crl"):
        os.mkfifo(cache / cache_name(url), 0o600)
    r, out = verify(pki, "alice", "--policy", cache_policy(tmp_path, cache))
    assert r.returncode == 0 and out["trusted"], out
    assert [c["fetched_from"] for c in out["revocation"]["checks"]] == ["network", "network"], out
    # The fetched CRLs replaced the FIFOs: a regular file, 0600, read by the next run.
    assert all(os.path.isfile(cache / cache_name(u)) for u in (f"{pki.url}/customer-a.crl", f"{pki.url}/root.crl"))
    r, out = verify(pki, "alice", "--policy", cache_policy(tmp_path, cache))
    assert [c["fetched_from"] for c in out["revocation"]["checks"]] == ["disk", "disk"], out


def test_a_crl_cache_folder_others_can_write_is_not_used(pki, published, tmp_path):
    """A cache folder anyone can write, holding a genuine older CRL that does not list the revoked
    laptop: not used (a warning says why and how to fix it); the CRL is fetched and laptop refused.
    Before, the planted CRL answered "good"."""
    from mtls import IssuedCertificate
    ca = IssuedCertificate.load(pki.inter / "cert.pem", pki.inter / "key.pem")
    cache = tmp_path / "open-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    (cache / cache_name(f"{pki.url}/customer-a.crl")).write_bytes(ca.crl([], number=1, days=30))
    r, out = verify(pki, "laptop", "--policy", cache_policy(tmp_path, cache))
    assert r.returncode != 0 and [x["code"] for x in out["reasons"]] == ["revoked"], out
    assert out["revocation"]["checks"][0]["fetched_from"] == "network", out
    assert "revocation cache folder" in r.stderr and "can be written by others" in r.stderr, r.stderr
    assert f"chmod 700 {cache}" in r.stderr, r.stderr
    # A symbolic link in the folder's place is not followed either.
    link = tmp_path / "link-cache"
    link.symlink_to(cache)
    r, out = verify(pki, "laptop", "--policy", cache_policy(tmp_path, link))
    assert [x["code"] for x in out["reasons"]] == ["revoked"] and "not a folder" in r.stderr, (out, r.stderr)


def crl_without_number(pki, revoked_names):
    """A genuine CRL of customer A without a CRL number (cryptography's builder, as many CAs
    that are not libmtls make them), listing `revoked_names`."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    issuer = x509.load_pem_x509_certificate((pki.inter / "cert.pem").read_bytes())
    key = serialization.load_pem_private_key((pki.inter / "key.pem").read_bytes(), None)
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    b = (x509.CertificateRevocationListBuilder().issuer_name(issuer.subject)
         .last_update(now - datetime.timedelta(minutes=1)).next_update(now + datetime.timedelta(days=1)))
    for name in revoked_names:
        cert = x509.load_pem_x509_certificate((pki.issued(name) / "cert.pem").read_bytes())
        b = b.add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(cert.serial_number)
                                      .revocation_date(now - datetime.timedelta(minutes=1)).build())
    return b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize("mode", ["off", "hard"])
def test_a_policy_crl_file_without_a_crl_number_is_used(pki, tmp_path, mode):
    """A CRL file given to the policy without a CRL number is used, as a fetched one is and as
    OpenSSL uses it: alice trusted, laptop refused as revoked, with revocation off or hard. Before,
    every chain of its issuer was refused (crl_invalid "the CRL has no CRL number"), even off."""
    crl = tmp_path / "no-number.crl"
    crl.write_bytes(crl_without_number(pki, ["laptop"]))
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps({"crls": [str(crl)], "revocation": {"mode": mode, "sources": ["crl"]}}))
    r, out = verify(pki, "alice", "--policy", policy)
    if mode == "hard":
        # The root's CRL comes from its distribution point, which nothing serves here: only
        # the leaf is asked about in the CRL file; the root CA's status is unknown.
        assert out["revocation"]["checks"][0]["source"] == "crl_file", out
        assert out["revocation"]["checks"][0]["status"] == "good", out
    else:
        assert r.returncode == 0 and out["trusted"], out
    assert "crl_invalid" not in [x["code"] for x in out["reasons"]], out
    r, out = verify(pki, "laptop", "--policy", policy)
    assert r.returncode != 0 and "revoked" in [x["code"] for x in out["reasons"]], out


@pytest.mark.parametrize("revoked", [False, True])
def test_application_client_ssl_ctx_uses_a_tls12_staple(ocsp, tmp_path, revoked):
    """Issue 37: an application's own client SSL_CTX (curl-style) configured by libmtls, with a
    hard OCSP policy, against `openssl s_server -status_file` over TLS 1.2 (the staple arrives
    after the certificate is verified): a good fresh staple completes the handshake without the
    responder (nothing listens there), a revoked one fails it."""
    import ctypes
    import socket
    import struct
    import mtls
    crt, key, ca_pem, resp = staple_files(ocsp, tmp_path, revoked)
    port = free_port()
    p = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-cert", crt, "-key", key, "-cert_chain", ca_pem,
                          "-status_file", resp, "-tls1_2", "-quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    libssl = _libssl()
    libssl.SSL_connect.restype, libssl.SSL_connect.argtypes = ctypes.c_int, [ctypes.c_void_p]
    ctx = libssl.SSL_CTX_new(libssl.TLS_method())
    try:
        wait_port(port, p)
        policy = mtls.Policy(anchors=[mtls.Certificate.load(str(ocsp.ca / "cert.pem"))],
                             revocation={"mode": "hard", "sources": ["ocsp"], "timeout_ms": 3000})
        mtls.configure_ssl_ctx(ctx, None, policy)
        mtls.set_ssl_ctx_peer(ctx, "127.0.0.1", port, verify_as="staple.test")
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.settimeout(None)  # OpenSSL needs the descriptor blocking; a stalled server still ends:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 20, 0))
            ssl = libssl.SSL_new(ctx)
            try:
                libssl.SSL_set_fd(ssl, sock.fileno())
                rc = libssl.SSL_connect(ssl)
                if rc == 1:
                    libssl.SSL_shutdown(ssl)
            finally:
                libssl.SSL_free(ssl)
        assert (rc == 1) == (not revoked), rc
    finally:
        libssl.SSL_CTX_free(ctx)
        p.kill()
        p.wait(10)
