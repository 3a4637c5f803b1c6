"""pebble, the ACME test server (Debian package `pebble`), with pebble-challtestsrv as its DNS, on
free 127.0.0.1 ports: the one copy of the harness, used by Tests/e2e (test_enroll.py,
test_enroll_api.py, test_renewal_load.py) and bench/bench_renewal.py. Its HTTPS certificate is made
with `mtls pki` (the CLI at `cli`, default $MTLS_CLI), its issuing root and intermediate are read
from its management endpoint; its default 5 % of nonces are rejected unless `nonce_reject` says
otherwise; `eab_keys` ({kid: base64url key}) makes external account binding required. stop() ends
both processes."""
import json
import os
import signal
import ssl
import subprocess
import urllib.request

from ports import free_port, wait_port


class Pebble:
    """pebble + pebble-challtestsrv on free 127.0.0.1 ports, with their own config."""

    def __init__(self, d, nonce_reject=None, eab_keys=None, cli=None):
        if not os.path.exists("/usr/bin/pebble"):  # fail, never skip: scripts/install-deps.sh installs it
            raise RuntimeError("pebble is not installed (/usr/bin/pebble): run scripts/install-deps.sh")
        self.d = d
        pki = d / "pki"
        for args in (["init", "--name", "Pebble HTTPS Root"], ["intermediate", "--name", "ACME"],
                     ["issue", "server", "--ca", "ACME", "--dns", "localhost", "--ip", "127.0.0.1"]):
            r = subprocess.run([cli or os.environ.get("MTLS_CLI", "mtls"), "pki", *args, "--dir", str(pki)],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"mtls pki {args[0]} failed: {r.stderr}")
        issued = pki / "ca" / "acme" / "issued" / "localhost"
        self.https_root = pki / "root" / "cert.pem"
        self.port, self.mgmt = free_port(), free_port()
        self.http_port, self.tls_port = free_port(), free_port()
        self.dns_port, self.dns_mgmt = free_port(), free_port()
        (d / "pebble.json").write_text(json.dumps({"pebble": {
            "listenAddress": f"127.0.0.1:{self.port}", "managementListenAddress": f"127.0.0.1:{self.mgmt}",
            "certificate": str(issued / "chain.pem"), "privateKey": str(issued / "key.pem"),
            "httpPort": self.http_port, "tlsPort": self.tls_port, "ocspResponderURL": "",
            "externalAccountBindingRequired": bool(eab_keys), "externalAccountMACKeys": eab_keys or {}}}))
        self.log = open(d / "pebble.log", "w")
        self.dns = subprocess.Popen(["pebble-challtestsrv", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
                                     "-dns01", f"127.0.0.1:{self.dns_port}", "-http01", "", "-https01", "",
                                     "-tlsalpn01", "", "-management", f"127.0.0.1:{self.dns_mgmt}"],
                                    stdout=self.log, stderr=subprocess.STDOUT)
        env = dict(os.environ, PEBBLE_VA_NOSLEEP="1")  # the 5 % bad-nonce default stays on
        if nonce_reject is not None:
            env["PEBBLE_WFE_NONCEREJECT"] = str(nonce_reject)
        self.proc = subprocess.Popen(["pebble", "-config", str(d / "pebble.json"), "-dnsserver",
                                      f"127.0.0.1:{self.dns_port}"], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_port(self.dns_mgmt, self.dns)
        wait_port(self.port, self.proc)
        wait_port(self.mgmt, self.proc)
        self.directory = f"https://127.0.0.1:{self.port}/dir"
        # The root pebble issues under, from its management endpoint (a TLS cert of its own).
        ctx = ssl.create_default_context(cafile=str(self.https_root))
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        # Its root carries an EKU, which libmtls's policy refuses on a self-signed anchor
        # (anchor_has_eku), so renewed chains are checked against its intermediate.
        self.issuing_root = d / "pebble-root.pem"
        self.issuing_ca = d / "pebble-intermediate.pem"
        for path, url in ((self.issuing_root, "roots/0"), (self.issuing_ca, "intermediates/0")):
            with urllib.request.urlopen(f"https://127.0.0.1:{self.mgmt}/{url}", context=ctx, timeout=10) as r:
                path.write_bytes(r.read())
        self.hook = d / "dns-hook.sh"
        self.hook.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = present ]; then exec curl -sf -d "{{\\"host\\":\\"$2.\\",\\"value\\":\\"$3\\"}}" '
            f"http://127.0.0.1:{self.dns_mgmt}/set-txt\n"
            f'else exec curl -sf -d "{{\\"host\\":\\"$2.\\"}}" http://127.0.0.1:{self.dns_mgmt}/clear-txt; fi\n')
        self.hook.chmod(0o755)

    def stop(self):
        for p in (self.proc, self.dns):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()
