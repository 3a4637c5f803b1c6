"""A running `mtls serve` for e2e tests: its output lines as they come, and a cheap store and PKI
made with `mtls pki` (issue 26's serve tests)."""
import bisect
import datetime
import hashlib
import os
import queue
import subprocess
import threading
import time

from conftest import CLI, untimed, wait_port, write_secret

FAST = ["--kdf-log-n", "10"]


def ok(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def make_pki(tmp_path, names=("one", "two")):
    """A root, an intermediate "Customer A", server certificates `names` as .p12 files (password
    file `pw`), a store secret file; returns the store command prefix."""
    d, pw = tmp_path / "D", tmp_path / "pw"
    write_secret(pw, "p12\n")
    write_secret(tmp_path / "secret", "store passphrase\n")
    ok("pki", "init", "--dir", d, "--name", "Serve Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    for name in names:
        ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "server.test", "--name", name,
           "--p12", tmp_path / f"{name}.p12", "--password-file", pw)
    return ["store", "--store", tmp_path / "s.db", "--secret-file", tmp_path / "secret", *FAST]


def hostile_certificate(path, common_name, days=5, key_path=None):
    """A self-signed certificate (PEM at `path`) whose common name is `common_name` as given
    (NUL, line feeds, quotes...), valid from now for `days` days (negative: expired); its key
    (PEM) at `key_path` when given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, 'a,b=c+d"e')])
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = (now, now + datetime.timedelta(days=days)) if days > 0 else \
        (now + datetime.timedelta(days=days - 30), now + datetime.timedelta(days=days))
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key_path is not None:
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return cert


class Serve:
    """`mtls serve ARGS` with its output lines in a queue (without the time that starts each
    line, unless `timed`); stop() ends it."""

    def __init__(self, *args, timed=False, env=None):
        self.proc = subprocess.Popen([CLI, "serve", *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.lines = queue.Queue()
        self.seen = []
        self.timed = timed
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.put(line if self.timed else untimed(line))

    def next_lines(self, seconds):
        """Every line printed within `seconds` from now."""
        out, end = [], time.time() + seconds
        while time.time() < end:
            try:
                out.append(self.lines.get(timeout=0.1))
            except queue.Empty:
                pass
        self.seen += out
        return out

    def wait_line(self, prefix, timeout=15):
        return self.wait_for(lambda line: line.startswith(prefix), f"starting with {prefix!r}", timeout)

    def wait_for(self, want, what="wanted", timeout=15):
        """The next line for which `want(line)` holds."""
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.seen.append(line)
            if want(line):
                return line
        raise AssertionError(f"no line {what}; seen {self.seen!r}")

    def listening(self):
        """The TLS port (waits for it to accept)."""
        port = int(self.wait_for(lambda line: "listening on " in line).rsplit(":", 1)[1])
        wait_port(port, self.proc)
        return port

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def der_sha256(pem_path):
    """The SHA-256 (hex) of the DER of the certificate in the PEM file `pem_path`."""
    der = subprocess.run(["openssl", "x509", "-in", str(pem_path), "-outform", "DER"], capture_output=True,
                         check=True).stdout
    return hashlib.sha256(der).hexdigest()


def rss_kib(pid):
    """The resident set size of process `pid`, KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def expected(record, started, ended):
    """The certificates a handshake that ran from `started` to `ended` may present, and whether
    one is bound: `record` lists the replacements of a served identity, one after the other, as
    (started, finished, name) (time.monotonic()). Allowed are the one of the last replacement
    finished more than a second before the handshake started, and any replacement that was under
    way in the last second before it started or while it ran."""
    finished = [r[1] for r in record]  # in order: the replacements do not overlap
    first_recent = bisect.bisect_right(finished, started - 1.0)  # finished after started - 1 s from here on
    allowed = {record[first_recent - 1][2]} if first_recent else set()
    starts = [r[0] for r in record]
    allowed |= {r[2] for r in record[first_recent:bisect.bisect_left(starts, ended)]}
    return allowed, first_recent > 0
