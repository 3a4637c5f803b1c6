"""Shared fixtures for end-to-end tests: the installed mtls CLI, temp dirs, free ports."""
import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "Tests", "support"))
from ports import free_port, wait_port  # noqa: E402,F401 (the shared helpers, for the tests)
from nginx_server import stop_process  # noqa: E402
DEFAULT_PREFIX = os.path.join(REPO, "out", "prefix")


def _default_to_repo_prefix():
    """Outside `make test-e2e` (which sets them), MTLS_PREFIX, MTLS_CLI and MTLS_LIBRARY default to
    what `make install CONFIG=debug PREFIX=$PWD/out/prefix` put in the repository's out/prefix, so
    `pytest Tests/e2e/test_x.py` tests this checkout, not whatever `mtls` is on PATH."""
    prefix = os.environ.get("MTLS_PREFIX") or DEFAULT_PREFIX
    defaults = {"MTLS_PREFIX": prefix, "MTLS_CLI": os.path.join(prefix, "bin", "mtls"),
                "MTLS_LIBRARY": os.path.join(prefix, "lib", "libmtls.so")}
    missing = [f"{name}={path}" for name, path in defaults.items()
               if not os.environ.get(name) and not os.path.exists(path)]
    if missing:
        raise RuntimeError("libmtls is not installed where the e2e tests look for it (" + ", ".join(missing)
                           + "): run `make install CONFIG=debug PREFIX=$PWD/out/prefix DESTDIR=` in "
                           + REPO + ", or set MTLS_PREFIX, MTLS_CLI and MTLS_LIBRARY")
    for name, path in defaults.items():
        if not os.environ.get(name):
            os.environ[name] = path
    # The Python binding of this checkout, for tests that import it or run the README's example.
    src = os.path.join(REPO, "bindings", "python", "src")
    if src not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        sys.path.insert(0, src)


# At import, before any test module reads the variables.
try:
    _default_to_repo_prefix()
    _SETUP_ERROR = None
except RuntimeError as e:
    _SETUP_ERROR = str(e)


def pytest_configure(config):
    if _SETUP_ERROR:
        pytest.exit(_SETUP_ERROR, returncode=4)


CLI = os.environ.get("MTLS_CLI", "mtls")
# The one maker of every suite's test PKIs (see its header for its shapes).
TEST_PKI = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts",
                        "test-pki.sh")
SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"
INSTALL_HINT = "run scripts/install-deps.sh (as root), which installs every tool the tests need"


def require_tool(found, what):
    """Fails (never skips) when a tool the tests need is missing: a skip would stand in for a feature."""
    assert found, f"{what} is not installed: {INSTALL_HINT}"


@pytest.fixture
def softhsm_installed():
    require_tool(os.path.exists(SOFTHSM_MODULE), f"SoftHSM2 ({SOFTHSM_MODULE})")


needs_softhsm = pytest.mark.usefixtures("softhsm_installed")


def sh(cmd, cwd):
    """Runs a shell command in `cwd` quietly; raises if it fails (for making test files)."""
    subprocess.run(cmd, shell=True, cwd=cwd, check=True, capture_output=True)


def fresh_copy(made, tmp_path):
    """A copy, for one test, of files a module made once (keys, certificates, .p12 files: seconds
    to make, milliseconds to copy), modes kept: each test gets its own, as when it made them."""
    return pathlib.Path(shutil.copytree(made, tmp_path / made.name, symlinks=True))


@contextlib.contextmanager
def softhsm_conf(conf):
    """SOFTHSM2_CONF=conf in this process (the library and the CLI read it) for the block, then
    back to what it was."""
    old = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SOFTHSM2_CONF", None)
        else:
            os.environ["SOFTHSM2_CONF"] = old


def run_cli(*args, check=False, input=None, timeout=60):
    """Runs the mtls CLI; returns the CompletedProcess (text mode)."""
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, input=input,
                          timeout=timeout, check=check)


def stop(*procs):
    """Stops each process a fixture started (nginx_server.stop_process: SIGTERM, SIGKILL after 10 s)."""
    for p in procs:
        stop_process(p)


def store_args(d, secret):
    """The CLI arguments of a store in `d` whose secret file holds `secret`."""
    write_secret(d / "secret", secret + "\n")
    return ["--store", d / "store.db", "--secret-file", d / "secret"]


def server_pki(d, root_name):
    """A PKI made with `mtls pki` in d/pki: root `root_name`, intermediate "Customer A", a server
    certificate for localhost and 127.0.0.1; written beside it as server.pem, server.key,
    server-chain.pem (leaf + intermediate), int.pem and root.pem."""
    pki = d / "pki"
    for args in (["init", "--name", root_name], ["intermediate", "--name", "Customer A"],
                 ["issue", "server", "--ca", "Customer A", "--dns", "localhost", "--ip", "127.0.0.1"]):
        r = run_cli("pki", *args, "--dir", pki)
        assert r.returncode == 0, r.stderr
    issued = pki / "ca" / "customer-a" / "issued" / "localhost"
    intermediate = (pki / "ca" / "customer-a" / "cert.pem").read_text()
    (d / "server.pem").write_text((issued / "cert.pem").read_text())
    (d / "server.key").write_text((issued / "key.pem").read_text())
    (d / "server-chain.pem").write_text((issued / "cert.pem").read_text() + intermediate)
    (d / "int.pem").write_text(intermediate)
    (d / "root.pem").write_text((pki / "root" / "cert.pem").read_text())


@pytest.fixture
def cli():
    return run_cli


def write_secret(path, data):
    """Writes a secret file (PIN, password, store secret or key) owner-only, mode 0600: libmtls
    refuses a secret file that everyone can read or others can write (and warns on a
    group-readable one), as OpenSSH does with a private key."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


# `mtls serve` starts each log line with its RFC 3339 UTC time (issue 38).
SERVE_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", re.M)


def untimed(text):
    """`mtls serve` output (a line or many) without the time at the start of each line."""
    return SERVE_TIMESTAMP.sub("", text)
