"""A TPM 2.0 as the token: swtpm (a software TPM on 127.0.0.1 ports of the test's own), tpm2-abrmd
as its resource manager on a private D-Bus session bus, tpm2-pkcs11 as the PKCS#11 module with its
store in the test's own directory (TPM2_PKCS11_STORE), a token made with tpm2_ptool. End to end:
keygen (EC P-256, RSA-2048), CSR, `mtls pki sign`, import-cert with the chain, mutual TLS against
`openssl s_server -Verify` over TLS 1.3 and 1.2, a wrong PIN (the TPM's dictionary-attack lockout
cleared in this TPM afterwards), swtpm stopped (token_not_present) and started again, a stored
token identity, `mtls serve` with a TPM key, Python's generate_key and make_csr.

tpm2-pkcs11 keys always sign and decrypt: a key template saying CKA_DECRYPT=false made keygen
fail (CKR_GENERAL_ERROR) before libmtls left its usage preferences out when a module refuses them.
"""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import free_port, require_tool, run_cli, server_pki, stop, wait_port, write_secret
from test_tls import Peer

KEY_TYPES = ["ec-p256", "rsa-2048"]
TOKEN = "tpm-card"


def tpm2_pkcs11_module():
    """The module file the Debian package libtpm2-pkcs11-1 installs."""
    found = sorted(glob.glob("/usr/lib/*/pkcs11/libtpm2_pkcs11.so") + glob.glob("/usr/lib/pkcs11/libtpm2_pkcs11.so"))
    require_tool(found, "tpm2-pkcs11 (libtpm2-pkcs11-1)")
    return found[0]


def two_free_ports():
    """A port P with P+1 free too: swtpm's TCTI talks to the TPM on P and to its control channel on P+1."""
    for _ in range(50):
        p = free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


def wait_for(what, check, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        r = check()
        if r:
            return r
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not happen within {timeout}s")


class TPM:
    def __init__(self, d):
        self.dir = d
        self.module = tpm2_pkcs11_module()
        self.procs = []
        self.env_before = {}

    def start(self):
        for tool in ("swtpm", "tpm2-abrmd", "dbus-daemon", "tpm2_ptool", "tpm2_dictionarylockout"):
            require_tool(shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}"), tool)
        d = self.dir
        (d / "state").mkdir()
        (d / "store").mkdir()
        port = two_free_ports()
        self.port = port
        bus = self.spawn(["dbus-daemon", "--session", "--nofork", "--print-address=1", f"--address=unix:path={d}/bus"],
                         stdout=subprocess.PIPE)
        address = bus.stdout.readline().strip()
        assert address.startswith("unix:"), address
        self.bus_name = f"com.intel.tss2.Tabrmd.mtls{os.getpid()}"
        tcti = f"tabrmd:bus_type=session,bus_name={self.bus_name}"
        self.setenv(DBUS_SESSION_BUS_ADDRESS=address, TPM2TOOLS_TCTI=tcti, TPM2_PKCS11_TCTI=tcti,
                    TPM2_PKCS11_STORE=str(d / "store"), TPM2_PKCS11_LOG_LEVEL="0")
        self.launch()
        self.run(["tpm2_ptool", "init"])
        self.run(["tpm2_ptool", "addtoken", "--pid=1", f"--label={TOKEN}", "--userpin=1234", "--sopin=5678"])

    def launch(self):
        """swtpm on its state directory, and tpm2-abrmd in front of it; back when a command goes through."""
        d, port = self.dir, self.port
        self.swtpm = self.spawn(["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={d}/state",
                                 "--server", f"type=tcp,port={port},bindaddr=127.0.0.1",
                                 "--ctrl", f"type=tcp,port={port + 1},bindaddr=127.0.0.1",
                                 "--flags", "not-need-init,startup-clear"])
        wait_port(port, self.swtpm)
        abrmd = shutil.which("tpm2-abrmd") or "/usr/sbin/tpm2-abrmd"
        self.abrmd = self.spawn([abrmd, *(["--allow-root"] if os.geteuid() == 0 else []), "--session",
                                 f"--dbus-name={self.bus_name}", f"--tcti=swtpm:host=127.0.0.1,port={port}", "--flush-all"])
        wait_for("tpm2-abrmd on the session bus", lambda: subprocess.run(
            ["tpm2_getcap", "properties-fixed"], capture_output=True).returncode == 0)

    def halt(self):
        """Stops tpm2-abrmd and swtpm (the TPM's state stays in its directory)."""
        for p in (self.abrmd, self.swtpm):
            p.terminate()
            p.wait(10)
            self.procs.remove(p)

    def spawn(self, args, stdout=subprocess.DEVNULL):
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        return p

    def setenv(self, **env):
        for k, v in env.items():
            self.env_before.setdefault(k, os.environ.get(k))
            os.environ[k] = v

    def run(self, args):
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{args}: {r.stdout} {r.stderr}"
        return r

    def stop(self):
        stop(*reversed(self.procs))
        for k, v in self.env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def tpm(tmp_path_factory):
    """swtpm + tpm2-abrmd + a tpm2-pkcs11 token "tpm-card" (user PIN 1234), and a PKI: root,
    "Customer A", server localhost."""
    d = tmp_path_factory.mktemp("tpm")
    t = TPM(d)
    try:
        t.start()
        write_secret(d / "pin", "1234\n")
        write_secret(d / "bad-pin", "0000\n")
        server_pki(d, "TPM Root")
        yield t
    finally:
        t.stop()


def token_args(t, pin="pin"):
    return ["--pin-file", t.dir / pin, "--module", t.module]


def enroll(t, name, key_type, profile="client", *sign_args):
    """keygen → CSR → `mtls pki sign` → import-cert with the intermediate; the identity's URI."""
    d = t.dir
    uri = f"pkcs11:token={TOKEN};object={name}"
    r = run_cli("token", "keygen", uri, "--type", key_type, *token_args(t), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    key_uri = json.loads(r.stdout)["key_uri"]
    # The token's NUL-padded model is trimmed (the random id may hold a %00 of its own).
    assert key_uri.startswith("pkcs11:model=SW%20%20%20TPM;"), key_uri
    r = run_cli("token", "csr", uri, "--subject", f"CN={name}", *token_args(t), "--out", d / f"{name}.csr")
    assert r.returncode == 0, r.stdout + r.stderr
    v = subprocess.run(["openssl", "req", "-in", d / f"{name}.csr", "-noout", "-verify"], capture_output=True, text=True)
    assert "verify OK" in v.stdout + v.stderr, v
    r = run_cli("pki", "sign", profile, "--dir", d / "pki", "--ca", "Customer A", "--csr", d / f"{name}.csr",
                *sign_args, "--out", d / f"{name}.pem")
    assert r.returncode == 0, r.stdout + r.stderr
    (d / f"{name}-chain.pem").write_text((d / f"{name}.pem").read_text() + (d / "int.pem").read_text())
    r = run_cli("token", "import-cert", uri, "--cert", d / f"{name}-chain.pem", *token_args(t))
    assert r.returncode == 0, r.stdout + r.stderr
    return uri


@pytest.fixture(scope="module")
def enrolled(tpm):
    return {k: enroll(tpm, f"tpm-{k}", k) for k in KEY_TYPES}


def s_server(t, version):
    """openssl s_server trusting only the root: the client must send its intermediate (from the token)."""
    d = t.dir
    port = free_port()
    return Peer(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", d / "server.pem", "-key", d / "server.key",
                 "-cert_chain", d / "int.pem", "-CAfile", d / "root.pem", "-Verify", "2", "-verify_return_error",
                 f"-tls{version.replace('.', '_')}"], port)


def connect(t, port, identity, version, *extra, pin="pin"):
    r = run_cli("connect", f"127.0.0.1:{port}", "--identity", identity, "--pin-file", t.dir / pin,
                "--anchor", t.dir / "root.pem", "--anchors-only", "--verify-as", "localhost",
                "--tls-min", version, "--tls-max", version, "--send", f"hello from the TPM over {version}\\n",
                "--timeout", "3", "--json", *extra)
    return r


def handshake(t, identity, version, *extra, pin="pin"):
    """`mtls connect` with `identity` to a fresh s_server; (the CLI's result, s_server's output)."""
    s = s_server(t, version)
    try:
        r = connect(t, s.port, identity, version, *extra, pin=pin)
        if r.returncode == 0:
            s.output_until(lambda log: "hello from the TPM" in log, timeout=20)
    finally:
        log = s.stop()
    return r, log


def test_keygen_on_the_tpm_makes_sign_keys_and_uris_without_padding(tpm, enrolled):
    r = run_cli("token", "list", "--module", tpm.module, "--json")
    assert r.returncode == 0, r.stderr
    tokens = [x for x in json.loads(r.stdout) if x.get("label") == TOKEN]
    assert len(tokens) == 1, r.stdout
    # tpm2-pkcs11's model is NUL-padded; the URI is trimmed as for blank padding.
    assert "%00" not in tokens[0]["uri"] and "model=SW%20%20%20TPM;" in tokens[0]["uri"], tokens[0]
    r = run_cli("token", "objects", "--token", f"pkcs11:token={TOKEN}", *token_args(tpm), "--json")
    assert r.returncode == 0, r.stderr
    labels = {o.get("label") for o in json.loads(r.stdout)}
    assert {"tpm-ec-p256", "tpm-rsa-2048"} <= labels, r.stdout
    assert "TPM%00" not in r.stdout, r.stdout


@pytest.mark.parametrize("key_type", KEY_TYPES)
@pytest.mark.parametrize("version", ["1.3", "1.2"])
def test_mutual_tls_with_a_tpm_key(tpm, enrolled, key_type, version):
    r, log = handshake(tpm, enrolled[key_type], version)
    assert r.returncode == 0, r.stdout + r.stderr + log
    out = json.loads(r.stdout)
    assert out["connected"] and out["tls_version"] == f"TLSv{version}", out
    assert f"subject=CN = tpm-{key_type}" in log and "hello from the TPM" in log, log


def test_wrong_pin_is_pin_incorrect_and_the_right_pin_works_after_the_lockout_is_cleared(tpm, enrolled):
    r, _ = handshake(tpm, enrolled["ec-p256"], "1.3", pin="bad-pin")
    assert r.returncode != 0
    assert "pin_incorrect" in r.stdout + r.stderr or "wrong PIN" in r.stdout + r.stderr, r.stdout + r.stderr
    # tpm2-pkcs11 never reports the PIN-count flags: the error says the final-try protection cannot work.
    assert "does not report its PIN tries" in r.stdout + r.stderr, r.stdout + r.stderr
    # A TPM locks its dictionary-attack protection after a few wrong tries: clear it in this TPM.
    tpm.run(["tpm2_dictionarylockout", "--clear-lockout"])
    r, log = handshake(tpm, enrolled["ec-p256"], "1.3")
    assert r.returncode == 0, r.stdout + r.stderr + log


def test_swtpm_stopped_is_an_error_and_after_a_restart_the_identity_works_again(tpm, enrolled):
    tpm.halt()
    try:
        r, _ = handshake(tpm, enrolled["ec-p256"], "1.3")
        assert r.returncode != 0, r.stdout
        assert json.loads(r.stdout)["error_code"] == "token_not_present", r.stdout + r.stderr
    finally:
        tpm.launch()
    r, log = handshake(tpm, enrolled["ec-p256"], "1.2")
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert "subject=CN = tpm-ec-p256" in log, log


def test_stored_token_identity_on_the_tpm(tpm, enrolled, tmp_path):
    store = ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]
    write_secret(tmp_path / "secret", "store secret\n")
    # The module from p11-kit's registry, which the Debian package fills (a stored reference names no file).
    r = run_cli("store", *store, "add-token", enrolled["rsa-2048"] + ";type=private", "--label", "tpm",
                "--pin-file", tpm.dir / "pin")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_cli("store", *store, "list", "--json")
    item = next(i for i in json.loads(r.stdout) if i["label"] == "tpm")
    assert item["class"] == "token-identity" and item["subject"] == "CN=tpm-rsa-2048", item
    r, log = handshake(tpm, "tpm", "1.3", *store)
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert "subject=CN = tpm-rsa-2048" in log, log


@pytest.mark.parametrize("version", ["1.3", "1.2"])
def test_serve_with_a_tpm_server_key(tpm, enrolled, version):
    uri = tpm.__dict__.get("server_uri")
    if uri is None:
        uri = tpm.server_uri = enroll(tpm, "tpm-server", "ec-p256", "server", "--dns", "localhost", "--ip", "127.0.0.1")
    port = free_port()
    # serve loads the module from p11-kit's registry (it has no --module).
    p = Peer([os.environ.get("MTLS_CLI", "mtls"), "serve", "--port", str(port), "--identity", uri,
              "--pin-file", str(tpm.dir / "pin")], port)
    try:
        r = subprocess.run(["curl", "-sS", "--cacert", str(tpm.dir / "root.pem"), f"--tlsv{version}", "--tls-max", version,
                            "--resolve", f"localhost:{port}:127.0.0.1", f"https://localhost:{port}/"],
                           capture_output=True, text=True, timeout=60)
    finally:
        log = p.stop()
    assert r.returncode == 0, r.stderr + log
    assert r.stdout == "hello anonymous\n", r.stdout


PYTHON_ENROLL = r"""
import sys, warnings
import mtls
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    uri = mtls.tokens.generate_key("pkcs11:token=tpm-card;object=py-p384", "ec-p384", pin="1234")
print("URI", uri)
print("WARN", " | ".join(str(w.message) for w in seen if issubclass(w.category, mtls.LibraryWarning)))
sys.stdout.write(mtls.tokens.make_csr("pkcs11:token=tpm-card;object=py-p384", "CN=python p384", pin="1234"))
"""


def test_python_generates_a_key_on_the_tpm_and_signs_a_csr(tpm, tmp_path):
    """Python's generate_key and make_csr (the C ABI, p11-kit's registered modules), in a process
    of their own so that tpm2-pkcs11 starts with this TPM's environment."""
    r = subprocess.run([sys.executable, "-c", PYTHON_ENROLL], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("URI pkcs11:model=SW%20%20%20TPM;"), r.stdout
    # tpm2-pkcs11 refused the template with CKA_DECRYPT=false; the warning says what the key has.
    assert "CKA_DECRYPT" in lines[1] and "ec-p384" in lines[1], r.stdout
    (tmp_path / "py.csr").write_text("\n".join(lines[2:]) + "\n")
    v = subprocess.run(["openssl", "req", "-in", tmp_path / "py.csr", "-noout", "-verify", "-subject"],
                       capture_output=True, text=True)
    assert "verify OK" in v.stdout + v.stderr and "CN = python p384" in v.stdout, v
