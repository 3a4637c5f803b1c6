#!/usr/bin/env python3
"""Python asyncio: HTTPS requests per second through httpx.AsyncClient with
mtls.httpx.AsyncTransport against httpx.AsyncClient with Python's own ssl context (same
certificates, same nginx with ssl_verify_client on, both connecting to 127.0.0.1 and validating the
server as server.test under the test root), 50 concurrent tasks on one event loop, with keep-alive
and with a new connection per request. Both clients get the same pool limits (50 connections, 50
kept alive). httpx with Python's ssl does not resume TLS sessions across connections; libmtls
does by default, so the new-connection figure is also given with resumption off. Needs MTLS_PREFIX (an installed release build), nginx, httpx. Every figure is measured
in this run."""
import asyncio
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

from _cbench import quartiles, row

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREFIX = os.environ.get("MTLS_PREFIX")
if not PREFIX:
    sys.exit("bench_python_async: set MTLS_PREFIX to an installed libmtls")
os.environ["MTLS_LIBRARY"] = os.path.join(PREFIX, "lib", "libmtls.so")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))

import httpx  # noqa: E402

import mtls  # noqa: E402
import mtls.httpx  # noqa: E402
import nginx_server  # noqa: E402 - Tests/support, on the path _cbench sets: the one nginx harness, as the synchronous rows use

TASKS = 50
SNI = {"sni_hostname": "server.test"}  # both clients reach 127.0.0.1 and check server.test


async def rate(client, url, n, close):
    """Requests per second of n requests made by TASKS tasks at once."""
    headers = {"Connection": "close"} if close else {}

    async def worker(count):
        for _ in range(count):
            r = await client.get(url, headers=headers, extensions=SNI)
            if r.status_code != 200:
                sys.exit(f"bench_python_async: HTTP {r.status_code}")

    t0 = time.perf_counter()
    await asyncio.gather(*[worker(n // TASKS) for _ in range(TASKS)])
    return (n // TASKS * TASKS) / (time.perf_counter() - t0)


async def measure(pki, url):
    limits = httpx.Limits(max_connections=TASKS, max_keepalive_connections=TASKS)
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "root.pem"))
    ctx.load_cert_chain(os.path.join(pki, "client-a-chain.pem"), os.path.join(pki, "client-a.key"))
    policy = mtls.Policy(anchors=[os.path.join(pki, "root.pem")], verify_as="server.test")
    ident = mtls.Identity.from_pkcs12(open(os.path.join(pki, "client-a.p12"), "rb").read(), "pw")
    clients = {
        "ssl": httpx.AsyncClient(verify=ctx, limits=limits, trust_env=False),
        "mtls": httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(
            identity=ident, policy=policy, max_connections=TASKS, max_keepalive=TASKS), trust_env=False),
        "mtls-noresume": httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(
            identity=ident, policy=policy, max_connections=TASKS, max_keepalive=TASKS, resume=False), trust_env=False),
    }
    try:
        for label, n, close in (("keep-alive", 1000, False), ("new connection per request", 500, True)):
            names = ["ssl", "mtls", "mtls-noresume"] if close else ["ssl", "mtls"]
            for name in names:  # warm up: connections, sessions, worker threads
                await rate(clients[name], url, TASKS * 2, close)
            runs = {name: [] for name in names}
            for _ in range(7):
                for name in names:  # side by side, round by round
                    runs[name].append(await rate(clients[name], url, n, close))
            base = sorted(runs["ssl"])[len(runs["ssl"]) // 2]
            for name in names[1:]:
                what = label if name == "mtls" else "new connection per request, resumption off"
                ours = sorted(runs[name])[len(runs[name]) // 2]
                cost, spread = quartiles([b / m for b, m in zip(runs["ssl"], runs[name])])
                print(f"httpx.AsyncClient GET, {TASKS} tasks, {what:<42} mtls {ours:8.0f}/s  ssl {base:8.0f}/s  "
                      f"cost {cost:5.3f}x (spread {spread:.3f}, target <= 1.0x)", flush=True)
                row("python asyncio https", f"httpx.AsyncClient GET, {TASKS} concurrent tasks, {what}", cost, 1.0,
                    mtls=round(ours, 1), baseline=round(base, 1), unit="req/s",
                    baseline_name="httpx.AsyncClient + Python ssl (no session reuse)", spread=spread)
    finally:
        for c in clients.values():
            await c.aclose()


def main():
    if not shutil.which("nginx"):
        sys.exit("bench_python_async: nginx is not installed (scripts/install-deps.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        pki = os.path.join(tmp, "pki")
        subprocess.run([os.path.join(ROOT, "scripts", "test-pki.sh"), pki], check=True, capture_output=True)
        # The same nginx as the synchronous rows: clients of int-a, verified up to the root.
        srv = nginx_server.start(os.path.join(tmp, "nginx"), server_chain=os.path.join(pki, "server-chain.pem"),
                                 server_key=os.path.join(pki, "server.key"), client_ca=os.path.join(pki, "int-a.pem"),
                                 trusted=os.path.join(pki, "root.pem"), worker_connections=256,
                                 keepalive_requests=1000000)
        try:
            asyncio.run(measure(pki, srv.url + "/"))
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
