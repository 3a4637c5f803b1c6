#!/usr/bin/env python3
"""Python bindings: HTTPS requests per second through mtls.requests.Adapter against requests with
Python's own ssl (same certificates, same nginx with ssl_verify_client on, both connecting to
127.0.0.1 and validating the server as server.test under the test root), with keep-alive and
with a new connection per request; the per-call cost of a trust evaluation from Python against
the same evaluation from C; and RSS growth over 100,000 create/free cycles of each handle type
(10,000 for a type whose one cycle costs over a millisecond here).
Needs MTLS_PREFIX (an installed release build), nginx, requests. Every figure is measured in
this run."""
import gc
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

from _cbench import build, quartiles, row
import nginx_server  # Tests/support, on the path _cbench sets: the one nginx harness

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX")
if not PREFIX:
    sys.exit("bench_python: set MTLS_PREFIX to an installed libmtls")
os.environ["MTLS_LIBRARY"] = os.path.join(PREFIX, "lib", "libmtls.so")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))

import requests  # noqa: E402
from requests.adapters import HTTPAdapter  # noqa: E402

import mtls  # noqa: E402
import mtls.requests  # noqa: E402

LEAK_CYCLES = int(os.environ.get("MTLS_BENCH_LEAK_CYCLES", "100000"))



class SSLAdapter(HTTPAdapter):
    """requests over Python's ssl, configured once as a careful user would: a context trusting the
    test root with the client certificate loaded, validating the server as server.test."""

    def __init__(self, context, **kw):
        self._context = context
        super().__init__(**kw)

    def init_poolmanager(self, connections, maxsize, block=False, **pool_kwargs):
        super().init_poolmanager(connections, maxsize, block, ssl_context=self._context,
                                 server_hostname="server.test", **pool_kwargs)

    def cert_verify(self, conn, url, verify, cert):
        pass  # the context above is complete; do not reload CA files per connection


def rates(sessions, url, n, close, rounds=9):
    """Requests per second of each session (a dict), one figure per round; the sessions take
    turns within each round, so that a change in the machine's load hits them alike (compare
    them round by round)."""
    headers = {"Connection": "close"} if close else {}
    for s in sessions.values():
        for _ in range(max(5, n // 20)):
            assert s.get(url, headers=headers).status_code == 200
    runs = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, s in sessions.items():
            t0 = time.perf_counter()
            for _ in range(n):
                r = s.get(url, headers=headers)
                if r.status_code != 200:
                    sys.exit(f"bench_python: HTTP {r.status_code}")
            runs[name].append(n / (time.perf_counter() - t0))
    return runs


def http_rows(pki, tmp):
    # The tests' nginx, sized for a benchmark: clients of int-a, verified up to the root.
    srv = nginx_server.start(os.path.join(tmp, "nginx"), server_chain=os.path.join(pki, "server-chain.pem"),
                             server_key=os.path.join(pki, "server.key"), client_ca=os.path.join(pki, "int-a.pem"),
                             trusted=os.path.join(pki, "root.pem"), worker_connections=256, keepalive_requests=1000000)
    url = srv.url + "/"
    try:
        ctx = ssl.create_default_context(cafile=os.path.join(pki, "root.pem"))
        ctx.load_cert_chain(os.path.join(pki, "client-a-chain.pem"), os.path.join(pki, "client-a.key"))
        policy = mtls.Policy(anchors=[os.path.join(pki, "root.pem")], verify_as="server.test")
        ident = mtls.Identity.from_pkcs12(open(os.path.join(pki, "client-a.p12"), "rb").read(), "pw")
        clients = {}
        for name, adapter in (("ssl", SSLAdapter(ctx)),
                              ("mtls", mtls.requests.Adapter(identity=ident, policy=policy)),
                              ("mtls-noresume", mtls.requests.Adapter(identity=ident, policy=policy, resume=False))):
            s = requests.Session()
            # Without this, requests takes REQUESTS_CA_BUNDLE from the environment and has urllib3
            # load that whole bundle into the context again for every new connection.
            s.trust_env = False
            s.mount("https://", adapter)
            clients[name] = s
        for label, n, close in (("keep-alive", 500, False), ("new connection per request", 100, True)):
            runs = rates(clients, url, n, close)
            base = statistics.median(runs["ssl"])
            for name, what in (("mtls", label), ("mtls-noresume", "new connection per request, resumption off")):
                if name == "mtls-noresume" and not close:
                    continue
                ours = statistics.median(runs[name])
                # the cost ratio of each round (ssl's rate over ours, measured side by side)
                cost, spread = quartiles([b / m for b, m in zip(runs["ssl"], runs[name])])
                print(f"requests GET {what:<27} mtls {ours:8.0f}/s  ssl {base:8.0f}/s  cost {cost:5.3f}x "
                      f"(spread {spread:.3f}, target <= 1.0x)", flush=True)
                row("python https", f"requests GET, {what}", cost, 1.0, mtls=round(ours, 1), baseline=round(base, 1),
                    unit="req/s", baseline_name="requests + Python ssl", spread=spread)
        for s in clients.values():
            s.close()
    finally:
        srv.stop()


def eval_rows(pki, tmp):
    exe = build("bench_python_eval", tmp, PREFIX)
    n = 200000
    out = subprocess.run([exe, os.path.join(pki, "root.pem"), os.path.join(pki, "server.pem"),
                          os.path.join(pki, "int-a.pem"), "server.test", str(n)], check=True, capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}).stdout
    c_cached, c_uncached = (float(x) for x in out.split())
    policy = mtls.Policy(anchors=[os.path.join(pki, "root.pem")])
    chain = [mtls.Certificate.load(os.path.join(pki, "server.pem")), mtls.Certificate.load(os.path.join(pki, "int-a.pem"))]

    def per_call(count):
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(count):
                if not policy.evaluate(chain, host="server.test").trusted:
                    sys.exit("bench_python: not trusted")
            runs.append((time.perf_counter() - t0) / count * 1e9)
        return statistics.median(runs)
    assert policy.evaluate(chain, host="server.test").trusted
    py_cached = per_call(n // 10)
    policy.set_cache(False)
    py_uncached = per_call(n // 100)
    print(f"evaluate from Python, cached      {py_cached / 1000:8.2f} us/call  C {c_cached / 1000:8.2f} us/call  "
          f"ratio {py_cached / c_cached:5.2f}x (Python's per-call overhead: {(py_cached - c_cached) / 1000:.2f} us)")
    print(f"evaluate from Python, uncached    {py_uncached / 1000:8.2f} us/call  C {c_uncached / 1000:8.2f} us/call  "
          f"ratio {py_uncached / c_uncached:5.2f}x")
    row("python https", "evaluate a chain from Python, cached", py_cached / c_cached, None,
        mtls=round(py_cached / 1000, 2), baseline=round(c_cached / 1000, 2), unit="us/call", baseline_name="the same from C")
    row("python https", "evaluate a chain from Python, uncached", py_uncached / c_uncached, 1.25,
        mtls=round(py_uncached / 1000, 2), baseline=round(c_uncached / 1000, 2), unit="us/call", baseline_name="the same from C")


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def leak_rows(pki, tmp):
    """RSS growth over LEAK_CYCLES create/free cycles of each handle type, after a warm-up of a
    tenth of them."""
    subprocess.run(["openssl", "pkcs12", "-export", "-inkey", f"{pki}/client-a.key", "-in", f"{pki}/client-a.pem",
                    "-certfile", f"{pki}/int-a.pem", "-passout", "pass:pw", "-noiter", "-nomaciter",
                    "-out", f"{tmp}/fast.p12"], check=True, capture_output=True)
    p12 = open(f"{tmp}/fast.p12", "rb").read()
    pem = open(f"{pki}/server.pem", "rb").read()
    chain_pem = open(f"{pki}/client-a.pem").read() + open(f"{pki}/int-a.pem").read()
    key_pem = open(f"{pki}/client-a.key").read()
    ident = mtls.Identity.from_pem(chain_pem, key_pem)
    server = mtls.Identity.from_pem(open(f"{pki}/server-chain.pem").read(), open(f"{pki}/server.key").read())
    chain = [mtls.Certificate.from_pem(pem), mtls.Certificate.load(f"{pki}/int-a.pem")]
    root = mtls.Certificate.load(f"{pki}/root.pem")
    policy = mtls.Policy(anchors=[root])
    clients = mtls.Policy(anchors=chain[1:])  # a listener's clients: customer A's intermediate
    key = mtls.StoreKey(b"k" * 32)
    store = mtls.Store(f"{tmp}/s.db", key, create=True)
    store.put_identity("alice", ident)
    issuer = mtls.IssuedCertificate.root("Bench Root")
    a, b = socket.socketpair()

    def pkcs12():
        for i in mtls.PKCS12.parse(p12, "pw").identities:
            i.close()

    cases = [
        ("mtls_cert (parse PEM)", lambda: mtls.Certificate.from_pem(pem).close()),
        ("mtls_identity (PEM + key)", lambda: mtls.Identity.from_pem(chain_pem, key_pem).close()),
        ("mtls_pkcs12 (import)", pkcs12),
        ("mtls_policy (+ report callback)", lambda: mtls.Policy(anchors=[root], report=lambda *a: None).close()),
        ("mtls_trust_result (evaluate)", lambda: policy.evaluate(chain, host="server.test")),
        ("mtls_store (open, raw key)", lambda: mtls.Store(f"{tmp}/s.db", key).close()),
        ("mtls_store_item (info)", lambda: store.info("alice")),
        ("mtls_conn (wrap, no handshake)", lambda: mtls.Connection.wrap(a, "server.test", 443, identity=ident,
                                                                        policy=policy, non_blocking=True).close()),
        ("mtls_listener", lambda: mtls.Listener(server, client_policy=clients).close()),
        ("mtls_issued (issue a client)", lambda: issuer.issue_client("bench").close()),
    ]
    for name, cycle in cases:
        # Every type runs LEAK_CYCLES cycles, except those whose one cycle costs over a
        # millisecond (a key parse, a KDF, a key generation on a loaded machine): a tenth of them.
        t0 = time.perf_counter()
        for _ in range(100):
            cycle()
        n = LEAK_CYCLES if (time.perf_counter() - t0) / 100 < 1e-3 else max(LEAK_CYCLES // 10, 1000)
        for _ in range(n // 10):
            cycle()
        gc.collect()
        before = rss_kb()
        t0 = time.perf_counter()
        for _ in range(n - n // 10):
            cycle()
        gc.collect()
        grew = rss_kb() - before
        print(f"leak check {name:<34} {n:6d} cycles: RSS {grew:+6d} KB ({grew * 1024 / n:6.1f} B/cycle, "
              f"{(time.perf_counter() - t0) / (n - n // 10) * 1e6:7.1f} us/cycle)", flush=True)
    store.close()
    a.close()
    b.close()


def main():
    if not shutil.which("nginx"):
        sys.exit("bench_python: nginx is not installed (scripts/install-deps.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        pki = os.path.join(tmp, "pki")
        subprocess.run([os.path.join(ROOT, "scripts", "test-pki.sh"), pki], check=True, capture_output=True)
        http_rows(pki, tmp)
        eval_rows(pki, tmp)
        leak_rows(pki, tmp)


if __name__ == "__main__":
    main()
