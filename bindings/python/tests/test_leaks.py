"""No leaks: create/free cycles of every libmtls handle type, from Python, keep the process's RSS
flat. After a warm-up (a tenth of the cycles: allocator pools, caches), the rest may grow RSS by
at most BOUND_KB — generous against allocator noise, yet far below what a handle leaking even a
few hundred bytes per cycle would add. Types cheap to make run 100,000 cycles here; the ones whose
making costs a key derivation, a key generation or a token session run fewer (all of them run
100,000 cycles in `make bench`, bench/bench_python.py, on the release build)."""
import gc
import socket
import subprocess

import pytest

import mtls
from mtls import _callbacks
from conftest import SOFTHSM_MODULE, identity

BOUND_KB = 6 * 1024


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def growth_kb(cycle, n):
    """RSS growth (KB) over the last 90% of n calls of cycle()."""
    for _ in range(n // 10):
        cycle()
    gc.collect()
    before = rss_kb()
    for _ in range(n - n // 10):
        cycle()
    gc.collect()
    return rss_kb() - before


@pytest.fixture(scope="module")
def material(pki, tmp_path_factory):
    d = tmp_path_factory.mktemp("leaks")
    # A PKCS#12 without KDF iterations, so that its import costs parsing, not PBKDF2.
    subprocess.run(["openssl", "pkcs12", "-export", "-inkey", pki / "client-a.key", "-in", pki / "client-a.pem",
                    "-certfile", pki / "int-a.pem", "-passout", "pass:pw", "-noiter", "-nomaciter",
                    "-out", d / "fast.p12"], check=True, capture_output=True)
    key = mtls.StoreKey(b"k" * 32)  # a raw key: opening costs no scrypt
    mtls.Store(d / "s.db", key, create=True).close()
    return {"dir": d, "p12": (d / "fast.p12").read_bytes(), "store_key": key,
            "pem": (pki / "server.pem").read_bytes(), "chain": [mtls.Certificate.load(pki / "server.pem"),
                                                                   mtls.Certificate.load(pki / "int-a.pem")],
            "client": identity(pki, "client-a"), "server": identity(pki, "server"),
            "client_pem": ((pki / "client-a.pem").read_text() + (pki / "int-a.pem").read_text(),
                           (pki / "client-a.key").read_text())}


def test_certificates(material):
    pem = material["pem"]
    assert growth_kb(lambda: mtls.Certificate.from_pem(pem).close(), 100_000) < BOUND_KB
    cert = material["chain"][0]
    assert growth_kb(lambda: mtls.Certificate(mtls._lib.mtls_cert_ref(cert._h)).close(), 100_000) < BOUND_KB


def test_policies_with_callbacks_and_trust_results(material, pki):
    base = _callbacks.live_count()

    def policy():
        p = mtls.Policy(anchors=material["chain"][1:], report=lambda *a: None)
        p.close()
    assert growth_kb(policy, 100_000) < BOUND_KB
    assert _callbacks.live_count() == base  # every registration was released by libmtls
    p = mtls.Policy(anchors=[pki / "root.pem"])
    chain = material["chain"]
    assert growth_kb(lambda: p.evaluate(chain, host="server.test"), 100_000) < BOUND_KB


def test_identities_and_pkcs12(material):
    ident = material["client"]
    assert growth_kb(lambda: mtls.Identity(mtls._lib.mtls_identity_ref(ident._h)).close(), 100_000) < BOUND_KB
    chain_pem, key_pem = material["client_pem"]
    assert growth_kb(lambda: mtls.Identity.from_pem(chain_pem, key_pem).close(), 5_000) < BOUND_KB
    p12 = material["p12"]

    def pkcs12():
        for i in mtls.PKCS12.parse(p12, "pw").identities:
            i.close()
    assert growth_kb(pkcs12, 5_000) < BOUND_KB


def test_stores_and_items(material):
    path, key = material["dir"] / "s.db", material["store_key"]
    assert growth_kb(lambda: mtls.Store(path, key).close(), 5_000) < BOUND_KB
    with mtls.Store(path, key) as st:
        st.put_identity("alice", material["client"], replace=True)
        assert growth_kb(lambda: st.info("alice"), 20_000) < BOUND_KB
        assert growth_kb(lambda: st.get_identity("alice").close(), 20_000) < BOUND_KB


def test_connections_and_listeners(material):
    a, b = socket.socketpair()
    client = material["client"]
    policy = mtls.Policy()
    # A connection over a socket we own, made without its handshake (non_blocking): the handle alone.
    assert growth_kb(lambda: mtls.Connection.wrap(a, "server.test", 443, identity=client, policy=policy,
                                                  non_blocking=True).close(), 100_000) < BOUND_KB
    a.close()
    b.close()
    server, clients = material["server"], mtls.Policy(anchors=material["chain"][1:])
    assert growth_kb(lambda: mtls.Listener(server, client_policy=clients).close(), 5_000) < BOUND_KB


def test_issued_certificates():
    root = mtls.IssuedCertificate.root("Leak Root")
    assert growth_kb(lambda: mtls.IssuedCertificate(mtls._lib.mtls_issued_ref(root._h)).close(), 100_000) < BOUND_KB
    assert growth_kb(lambda: root.issue_client("leak").close(), 2_000) < BOUND_KB


def test_tokens_and_token_objects(tokens):
    uri = "pkcs11:token=mtls-test"

    def listing():
        for t in mtls.list_tokens(SOFTHSM_MODULE):
            t.close()
        for o in mtls.token_objects(SOFTHSM_MODULE, uri):
            o.close()
    assert growth_kb(listing, 500) < BOUND_KB
