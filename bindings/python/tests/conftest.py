"""Shared fixtures of the Python tests: the connection test PKI (scripts/test-pki.sh), SoftHSM2
tokens (scripts/softhsm-token.sh), and nginx requiring client certificates, each made in a
temporary folder and, for nginx, started on 127.0.0.1 (an ephemeral port) and stopped after."""
import gc
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Callable, Iterator, List

import pytest

import mtls

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "Tests" / "support"))
from ports import free_port, wait_port  # noqa: E402,F401 (the shared helpers, used here and by the tests)
import nginx_server  # noqa: E402 (the one nginx harness: tests, e2e and benchmarks)
from nginx_server import Nginx, stop_process  # noqa: E402,F401 (stop_process: used by the tests)
PKI_SCRIPT = REPO / "scripts" / "test-pki.sh"
TOKEN_SCRIPT = REPO / "scripts" / "softhsm-token.sh"
SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"
INSTALL_HINT = "run scripts/install-deps.sh (as root), which installs every tool the tests need"


def require_tool(found: object, what: str) -> None:
    """Fails (never skips) when a tool the tests need is missing."""
    assert found, f"{what} is not installed: {INSTALL_HINT}"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """scripts/test-pki.sh's PKI: root ─ int-a ─ server (DNS:server.test), client-a, client-a-rsa;
    root ─ int-b ─ client-b; other-root ─ other-server; root-2 ─ int-c ─ client-c. NAME.pem,
    NAME.key, NAME-chain.pem, NAME.p12 (password "pw")."""
    d = tmp_path_factory.mktemp("tls-pki")
    subprocess.run([str(PKI_SCRIPT), str(d)], check=True, capture_output=True)
    return d


def identity(pki: pathlib.Path, name: str, intermediate: str = "int-a") -> mtls.Identity:
    """NAME's identity with its intermediate, from the PEM files."""
    chain = (pki / f"{name}.pem").read_text() + (pki / f"{intermediate}.pem").read_text()
    return mtls.Identity.from_pem(chain, (pki / f"{name}.key").read_text())


def anchored(pki: pathlib.Path, anchor: str) -> mtls.Policy:
    """A policy trusting only the certificate in the file `anchor`."""
    return mtls.Policy(anchors=[mtls.Certificate.load(pki / anchor)], anchors_only=True)


@pytest.fixture(scope="session")
def token_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The SoftHSM2 tokens of scripts/softhsm-token.sh (user PIN 1234), made once."""
    require_tool(os.path.exists(SOFTHSM_MODULE), f"SoftHSM2 ({SOFTHSM_MODULE})")
    d = tmp_path_factory.mktemp("softhsm")
    subprocess.run([str(TOKEN_SCRIPT), str(d)], check=True, capture_output=True)
    return d


def _release_token_sessions() -> None:
    """Drops what keeps a token session (and the module with the SOFTHSM2_CONF it read) alive:
    identities held by collected objects and by cached TLS contexts."""
    gc.collect()
    mtls.clear_session_cache()


@pytest.fixture
def tokens(token_dir: pathlib.Path) -> Iterator[pathlib.Path]:
    """token_dir, with SOFTHSM2_CONF naming it during the test (other tests make tokens of their
    own: the module reads its configuration again once no session holds it)."""
    _release_token_sessions()
    old = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(token_dir / "softhsm2.conf")
    yield token_dir
    _release_token_sessions()
    if old is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = old


@pytest.fixture
def start_nginx(pki: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[Callable[..., Nginx]]:
    """start_nginx(client_ca, issuer_dn=None) -> Nginx: requires client certificates issued by
    `client_ca` (a file: the CA names sent, and trusted together with the test root), and with
    `issuer_dn` only those whose issuer is that DN (others get 403). Its server certificate is
    the test PKI's server.test, under root via int-a.

    GET / answers "hello <client DN> conn=<connection serial> req=<request number on it>
    session=<TLS session id>"; /old redirects to /; POST /upload logs the request body
    (body_log()); responses to clients accepting gzip are gzipped and chunked."""
    require_tool(shutil.which("nginx"), "nginx")
    started: List[Nginx] = []

    def start(client_ca: str, issuer_dn: str = "") -> Nginx:
        srv = nginx_server.start(tmp_path / f"nginx-{len(started)}", server_chain=pki / "server-chain.pem",
                                 server_key=pki / "server.key", client_ca=client_ca, trusted=pki / "root.pem",
                                 issuer_dn=issuer_dn, gzip=True)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
