"""asyncio over libmtls: mtls.asyncio's streams and server, and mtls.httpx.AsyncTransport under
httpx.AsyncClient, against nginx with `ssl_verify_client on` (customer A's clients only) and
Python's own ssl server. Token identities are SoftHSM2 keys (conftest's tokens); the heartbeat
test measures how long the event loop stalls while token-key handshakes run."""
import asyncio
import gc
import os
import random
import socket
import ssl
import threading
import time

import httpx
import pytest

import mtls
import mtls.asyncio
import mtls.httpx
import mtls._httpx_proxy
from conftest import SOFTHSM_MODULE, identity

CUSTOMER_A = "CN=Customer A CA,O=libmtls test"


def run(coro):
    """Runs a test coroutine on a fresh loop (asyncio.run) within a minute."""
    return asyncio.run(asyncio.wait_for(coro, 60))


def server_policy(pki, anchor="root.pem"):
    """Trust only `anchor` for servers, validated as server.test (nginx and the ssl servers here
    present server.test, reached at 127.0.0.1)."""
    return mtls.Policy(anchors=[mtls.Certificate.load(pki / anchor)], anchors_only=True, verify_as="server.test")


def open_fds():
    # Garbage of earlier tests (an exception chain holding a socket) is collected first, so that
    # its descriptors are not counted before and closed during the test.
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def sockets_to(port):
    """This process's descriptors that are TCP sockets connected to `port` (on any address): the
    leak a connection can make, counted without the descriptors other threads of the process (an
    earlier test's server finishing, a worker) open or close meanwhile."""
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
        count += target.startswith("socket:[") and target[8:-1] in inodes
    return count


def registered(loop):
    """Descriptors registered with the loop's selector (its readers and writers), besides the
    loop's own wake-up socket."""
    own = loop._ssock.fileno()  # type: ignore[attr-defined]
    return len([k for k in loop._selector.get_map() if k != own])  # type: ignore[attr-defined]


@pytest.fixture
def nginx(pki, start_nginx):
    return start_nginx(str(pki / "int-a.pem"), issuer_dn=CUSTOMER_A)


@pytest.fixture
def ssl_server(pki):
    """Python's blocking ssl server on a thread, requiring a client certificate under customer A's
    intermediate: per connection it answers each line with "echo <line>" and records the client
    CN and whether the client ended with close_notify (suppress_ragged_eofs=False: an EOF without
    it raises)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server-chain.pem", pki / "server.key")
    ctx.load_verify_locations(pki / "int-a.pem")
    ctx.load_verify_locations(pki / "root.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    seen = []

    def serve_one(raw):
        record = {}
        try:
            with ctx.wrap_socket(raw, server_side=True, suppress_ragged_eofs=False) as s:
                record["cn"] = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
                f = s.makefile("rb")
                for line in f:
                    s.sendall(b"echo " + line)
                record["close_notify"] = True
        except (ssl.SSLError, OSError) as e:
            record["error"] = repr(e)
        seen.append(record)

    def serve():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(raw,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1], seen
    listener.close()


# ---- streams

def test_open_connection_streams_with_python_ssl_server_and_closes_with_close_notify(pki, ssl_server):
    port, seen = ssl_server

    async def main():
        reader, writer = await mtls.asyncio.open_connection("127.0.0.1", port, identity=identity(pki, "client-a"),
                                                            policy=server_policy(pki))
        assert isinstance(reader, asyncio.StreamReader) and isinstance(writer, asyncio.StreamWriter)
        writer.write(b"one\n")
        writer.write(b"two\n" + b"x" * 100000 + b"\n")
        await writer.drain()
        assert await reader.readline() == b"echo one\n"
        assert await reader.readexactly(9) == b"echo two\n"
        assert await reader.readexactly(100006) == b"echo " + b"x" * 100000 + b"\n"
        info = {k: writer.get_extra_info(k) for k in ("peername", "sockname", "socket", "ssl_object", "peercert",
                                                      "peer_chain", "evaluation", "presented_identity", "alpn",
                                                      "tls_version", "resumed", "sslcontext")}
        assert info["peername"] == ("127.0.0.1", port)
        assert info["socket"].getsockname() == info["sockname"]
        assert isinstance(info["ssl_object"], mtls.Connection)
        assert info["peercert"].subject_summary == "server.test"
        assert [c.subject_summary for c in info["peer_chain"]] == ["server.test", "Customer A CA"]
        assert info["evaluation"].trusted and info["evaluation"].kind == "proceed"
        assert info["presented_identity"].leaf.subject_summary == "client-a"
        assert info["alpn"] is None and info["tls_version"] in ("TLSv1.2", "TLSv1.3")
        assert info["resumed"] is False and info["sslcontext"] is None
        writer.close()
        await writer.wait_closed()
        assert registered(asyncio.get_running_loop()) == 0
        assert info["ssl_object"]._h is None  # the connection is freed

    run(main())
    for _ in range(100):
        if seen:
            break
        time.sleep(0.05)
    assert seen == [{"cn": "client-a", "close_notify": True}], seen


def test_refused_server_raises_trust_error_in_the_awaiting_task(pki, ssl_server):
    port, _ = ssl_server

    async def main():
        with pytest.raises(mtls.TrustError) as e:
            await mtls.asyncio.open_connection("127.0.0.1", port, identity=identity(pki, "client-a"),
                                               policy=server_policy(pki, "other-root.pem"))
        assert e.value.evaluation is not None and not e.value.evaluation.trusted
        assert registered(asyncio.get_running_loop()) == 0
        with pytest.raises(mtls.ConnectError):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                closed_port = s.getsockname()[1]
            await mtls.asyncio.open_connection("127.0.0.1", closed_port, policy=server_policy(pki))

    run(main())


def test_handshake_timeout_raises_mtls_timeout_and_leaks_nothing(pki):
    """A server that accepts TCP and never answers the ClientHello."""
    mute = socket.create_server(("127.0.0.1", 0))
    mute.settimeout(10)  # its accept below fails, rather than hangs, should no client come

    async def main():
        port = mute.getsockname()[1]
        t0 = time.monotonic()
        task = asyncio.ensure_future(mtls.asyncio.open_connection("127.0.0.1", port, identity=identity(pki, "client-a"),
                                                                  policy=server_policy(pki), handshake_timeout=0.3))
        # The mute server takes the TCP connection (and never answers): the client's socket is seen.
        accepted, _ = await asyncio.get_running_loop().run_in_executor(None, mute.accept)
        try:
            assert sockets_to(port) == 1
            with pytest.raises(mtls.Timeout) as e:
                await task
        finally:
            accepted.close()
        assert isinstance(e.value, TimeoutError) and "handshake" in str(e.value)
        assert time.monotonic() - t0 < 5
        assert registered(asyncio.get_running_loop()) == 0
        assert sockets_to(port) == 0  # the connection's socket is closed

    try:
        run(main())
    finally:
        mute.close()


def test_thousand_cancelled_connects_leave_no_descriptor_and_no_reader(pki, nginx):
    """Connects cancelled at every point (TCP connect, the waits between handshake steps, each
    handshake step on the worker thread) and connects timed out by asyncio.wait_for. Half the
    connects run their handshake on the loop (a key in memory, no revocation), half on the worker
    thread (a policy with a revocation rule, for another host: mtls_conn_may_block says 1). (An
    address needs no name resolution on a thread since issue 40; a name's is cancelled as any
    await on the loop.)"""
    ident, policy = identity(pki, "client-a"), server_policy(pki)
    threaded = server_policy(pki)
    threaded.set_rule_revocation("elsewhere.test", "soft")  # no fetch for this peer, but steps on the thread
    policies = [policy, threaded]
    rng = random.Random(29)

    def connect(i):
        return mtls.asyncio.open_connection("127.0.0.1", nginx.port, identity=ident, policy=policies[i // 2 % 2],
                                            resume=False)

    async def attempt(i, delay):
        task = asyncio.ensure_future(connect(i))
        await asyncio.sleep(delay)  # cancelled this far into the handshake: the time is what is tested
        task.cancel()
        try:
            _, writer = await task
        except asyncio.CancelledError:
            return "cancelled"
        writer.close()  # it finished before the cancel arrived
        await writer.wait_closed()
        return "completed"

    async def timed_out(i, delay):
        try:
            _, writer = await asyncio.wait_for(connect(i), delay)
        except asyncio.TimeoutError:
            return "timed out"
        writer.close()
        await writer.wait_closed()
        return "completed"

    async def main():
        loop = asyncio.get_running_loop()
        # warm up: the worker threads and the shared TLS contexts exist before counting
        for p in policies:
            _, w = await mtls.asyncio.open_connection("127.0.0.1", nginx.port, identity=ident, policy=p)
            w.close()
            await w.wait_closed()
        # When the first quarter of 50 connects started at once have ended, here, now: the cancels
        # below fall before that, so most land before their connect ends. A fixed span is too long
        # where connects are faster (0 to 4 ms cancelled 95% of them before issue 40's first cuts
        # to the per-connection cost, 41% after), and one measured once goes stale when the load on
        # the machine changes: it is measured again every 5 batches, and batches run until 500
        # connects were interrupted. (Not half the span of the whole batch: handshakes that run on
        # the loop end in the loop's iterations one after another, and a cancel is only seen
        # between iterations, so a cancel in the first half of that span found most of them done.)
        async def measure():
            async def timed(i):
                t0 = time.monotonic()
                _, w = await connect(i)
                took = time.monotonic() - t0
                w.close()
                await w.wait_closed()
                return took
            return sorted(await asyncio.gather(*[timed(i) for i in range(50)]))[12]
        await measure()  # the first measure warms the workers' caches up
        before = open_fds()
        outcomes = []
        batch = 0
        while outcomes.count("cancelled") + outcomes.count("timed out") < 500:
            assert batch < 60, f"3,000 connects and fewer than 500 interrupted: {outcomes.count('completed')} completed first"
            if batch % 5 == 0:
                span = await measure()
            jobs = [attempt(i, rng.uniform(0, span)) if i % 2 else timed_out(i, rng.uniform(span / 20, span))
                    for i in range(50)]
            outcomes += await asyncio.gather(*jobs)
            batch += 1
        print(f"\n{len(outcomes)} connects: {outcomes.count('cancelled')} cancelled, {outcomes.count('timed out')} timed out, "
              f"{outcomes.count('completed')} completed first; descriptors {before} before, {open_fds()} after")
        assert outcomes.count("cancelled") > 0 and outcomes.count("timed out") > 0, outcomes
        assert registered(loop) == 0
        assert open_fds() == before, (before, open_fds())

    run(main())


# ---- servers

def test_start_server_accepts_customer_a_and_refuses_customer_b(pki):
    seen = []

    async def handler(reader, writer):
        line = await reader.readline()
        cert, evaluation = writer.get_extra_info("peercert"), writer.get_extra_info("evaluation")
        seen.append((cert.subject_summary, evaluation.trusted, writer.get_extra_info("peername")[0]))
        writer.write(b"hello " + cert.subject_summary.encode() + b": " + line)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await mtls.asyncio.start_server(
            handler, "127.0.0.1", 0, identity=identity(pki, "server"),
            client_policy=mtls.Policy(anchors=[mtls.Certificate.load(pki / "int-a.pem")], anchors_only=True))
        async with server:
            r, w = await mtls.asyncio.open_connection("127.0.0.1", server.port, identity=identity(pki, "client-a"),
                                                      policy=server_policy(pki))
            w.write(b"ping\n")
            await w.drain()
            assert await r.read() == b"hello client-a: ping\n"  # then EOF: the server closed
            w.close()
            await w.wait_closed()
            with pytest.raises(mtls.PeerAlert):  # in the handshake (TLS 1.2) or the first read (1.3)
                r, w = await mtls.asyncio.open_connection("127.0.0.1", server.port,
                                                          identity=identity(pki, "client-b", "int-b"),
                                                          policy=server_policy(pki))
                w.write(b"ping\n")
                await w.drain()
                await r.read()
            w.close()
            for _ in range(100):
                if server.rejected:
                    break
                await asyncio.sleep(0.02)
            assert len(server.rejected) == 1 and isinstance(server.rejected[0], mtls.Untrusted)
            assert "unknown_issuer" in str(server.rejected[0])
        assert seen == [("client-a", True, "127.0.0.1")]

    run(main())


def test_server_echoes_megabytes_with_flow_control_both_ways(pki):
    """4 MiB through a start_server echo: the server's writes wait for the client to read (drain),
    records left half-written by a full send buffer are finished later, the client writes while
    the server reads, and every byte comes back in order."""
    data = os.urandom(1 << 20) * 4

    async def echo(reader, writer):
        # A send buffer smaller than a TLS record: writes are left pending and written again.
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        while True:
            chunk = await reader.read(70000)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await mtls.asyncio.start_server(
            echo, "127.0.0.1", 0, identity=identity(pki, "server"),
            client_policy=mtls.Policy(anchors=[mtls.Certificate.load(pki / "int-a.pem")], anchors_only=True))
        async with server:
            r, w = await mtls.asyncio.open_connection("127.0.0.1", server.port, identity=identity(pki, "client-a"),
                                                      policy=server_policy(pki))

            async def send():
                for i in range(0, len(data), 300000):
                    w.write(data[i:i + 300000])
                    await w.drain()

            async def receive():
                got = bytearray()
                while len(got) < len(data):
                    got += await r.read(1 << 16)
                    if len(got) // (1 << 19) != (len(got) - 1) // (1 << 19) or len(got) < (1 << 16):
                        await asyncio.sleep(0.05)  # a slow reader: the server's writes wait for it
                return bytes(got)

            _, got = await asyncio.gather(send(), receive())
            assert got == data
            w.close()
            await w.wait_closed()

    run(main())


def test_server_loop_is_not_held_by_a_client_sending_half_a_record(pki):
    """A client (Python's ssl over a memory BIO) completes its handshake and sends half of a TLS
    record: the server's loop goes on serving another client and ticking, and the line arrives
    whole once the rest of the record does."""
    lines = []

    async def handler(reader, writer):
        line = await reader.readline()
        lines.append(line)
        writer.write(b"ok " + line)
        await writer.drain()
        writer.close()

    ctx = ssl.create_default_context(cafile=str(pki / "root.pem"))
    ctx.load_cert_chain(pki / "client-a-chain.pem", pki / "client-a.key")

    async def half_record_client(port):
        loop = asyncio.get_running_loop()
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname="server.test")
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await loop.sock_sendall(sock, outgoing.read())
                incoming.write(await loop.sock_recv(sock, 65536))
        await loop.sock_sendall(sock, outgoing.read())
        tls.write(b"slow line\n")
        record = outgoing.read()
        return sock, record

    async def main():
        server = await mtls.asyncio.start_server(
            handler, "127.0.0.1", 0, identity=identity(pki, "server"),
            client_policy=mtls.Policy(anchors=[mtls.Certificate.load(pki / "int-a.pem")], anchors_only=True))
        async with server:
            loop = asyncio.get_running_loop()
            sock, record = await half_record_client(server.port)
            await loop.sock_sendall(sock, record[:len(record) // 2])
            await asyncio.sleep(0.2)  # the server's loop has seen the half record
            t0 = time.perf_counter()
            r, w = await mtls.asyncio.open_connection("127.0.0.1", server.port, identity=identity(pki, "client-a"),
                                                      policy=server_policy(pki))
            w.write(b"quick line\n")
            assert await asyncio.wait_for(r.read(), 10) == b"ok quick line\n"
            w.close()
            await w.wait_closed()
            assert time.perf_counter() - t0 < 5
            assert lines == [b"quick line\n"]
            await loop.sock_sendall(sock, record[len(record) // 2:])
            for _ in range(200):
                if len(lines) == 2:
                    break
                await asyncio.sleep(0.01)
            assert lines == [b"quick line\n", b"slow line\n"]
            sock.close()

    run(main())


# ---- httpx.AsyncClient

TOKEN_EC = "pkcs11:token=mtls-test;object=ec-client?module-path=" + SOFTHSM_MODULE


async def hundred_requests(client, url):
    responses = await asyncio.gather(*[client.get(url + "/") for _ in range(100)])
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    return responses


@pytest.mark.parametrize("kind", ["p12", "store label", "token"])
def test_async_client_100_concurrent_requests(pki, tmp_path, start_nginx, tokens, kind):
    if kind == "token":
        srv = start_nginx(str(tokens / "ca.pem"))
        ident, store, expect = f"{TOKEN_EC}&pin-source=file:{tokens / 'pin'}", None, "CN=token ec-client"
    else:
        srv = start_nginx(str(pki / "int-a.pem"), issuer_dn=CUSTOMER_A)
        expect = "CN=client-a,O=libmtls test"
        store = None
        if kind == "p12":
            ident = mtls.Identity.from_pkcs12((pki / "client-a.p12").read_bytes(), "pw")
        else:
            store = mtls.Store(tmp_path / "store.db", secret="store secret", kdf_log_n=10, create=True)
            store.import_pkcs12("alice", (pki / "client-a.p12").read_bytes(), "pw")
            ident = "alice"

    async def main():
        transport = mtls.httpx.AsyncTransport(identity=ident, store=store, policy=server_policy(pki),
                                              max_connections=20, max_keepalive=20)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            responses = await hundred_requests(client, srv.url)
            assert all(r.text.startswith("hello " + expect) for r in responses), responses[0].text
            conns = {r.text.split("conn=")[1].split()[0] for r in responses}
            assert 1 <= len(conns) <= 20, conns  # pooled: at most max_connections, reused
            again = await client.get(srv.url + "/")
            assert again.text.split("conn=")[1].split()[0] in conns  # a kept-alive connection
            stream = again.extensions["network_stream"]
            assert stream.get_extra_info("evaluation").trusted
            assert stream.get_extra_info("presented_identity").leaf.subject_summary in expect

    try:
        run(main())
    finally:
        if store is not None:
            store.close()


def counted_c_calls(monkeypatch):
    """Counts the libmtls C calls made through the bindings from now on, by function name."""
    from mtls._lib import lib
    calls = {}
    for name, f in list(vars(lib).items()):
        if name.startswith("mtls_"):
            def counted(*args, _f=f, _name=name):
                calls[_name] = calls.get(_name, 0) + 1
                return _f(*args)
            monkeypatch.setattr(lib, name, counted)
    return calls


def test_a_new_connection_costs_no_repeated_reading_and_no_lookup_hop(pki, nginx, monkeypatch):
    """Issue 40, asyncio without resumption: what one new connection costs that it need not. The
    host's reading by the core (mtls_host_port) and ConnOptions' defaults (mtls_conn_options_init)
    do not change between connections, an IP address needs no lookup on a thread, and with no proxy
    anywhere no URL is built to choose one: a second connection to the same address asks none of
    them again (before: 6 host readings, 1 options init, a getaddrinfo thread hop, 2 routings)."""
    routed = []
    real_route = mtls._httpx_proxy.ProxyRoutes.route
    monkeypatch.setattr(mtls._httpx_proxy.ProxyRoutes, "route", lambda self, url: routed.append(url) or
                        real_route(self, url))

    async def main():
        loop = asyncio.get_running_loop()
        transport = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=server_policy(pki),
                                              resume=False, trust_env=False)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            close = {"Connection": "close"}  # a new connection per request
            assert (await client.get(nginx.url + "/", headers=close)).status_code == 200

            async def no_lookup(*args, **kwargs):
                raise AssertionError(f"getaddrinfo on a thread for an address: {args}")
            monkeypatch.setattr(loop, "getaddrinfo", no_lookup)
            del routed[:]
            calls = counted_c_calls(monkeypatch)
            r = await client.get(nginx.url + "/", headers=close)
            assert r.status_code == 200 and r.text.startswith("hello CN=client-a")
            assert calls.get("mtls_conn_wrap_fd") == 1, calls  # it was a new connection
            assert "mtls_host_port" not in calls and "mtls_conn_options_init" not in calls, calls
            assert len(routed) == 1, routed  # the request's own check, not a second one per connection
            # mtls.asyncio's own connect too: no lookup for an address
            conn, sock = await mtls.asyncio.connect("127.0.0.1", nginx.port,
                                                    identity=identity(pki, "client-a"), policy=server_policy(pki))
            await mtls.asyncio._off_loop(conn.close)
            sock.close()

    run(main())


def counted_thread_hops(loop):
    """Counts what goes to a thread from `loop` from now on (run_in_executor: mtls.asyncio's
    workers and the loop's default executor, getaddrinfo included), by the function's name."""
    hops = []
    real = loop.run_in_executor

    def counted(executor, fn, *args):
        hops.append(getattr(fn, "__name__", repr(fn)))
        return real(executor, fn, *args)
    loop.run_in_executor = counted
    return hops


def test_a_new_connection_with_a_key_in_memory_makes_no_thread_hop(pki, nginx, monkeypatch):
    """Issue 40, asyncio without resumption: a handshake whose key is in memory under a policy
    without revocation is CPU work over a socket that does not wait, as Python's ssl handshake is,
    which runs on the loop. libmtls says so (Connection.may_block False), and the connection is
    made, handshaken and freed on the loop: no thread hop per new connection (before: the first
    step, the further steps and the free each went to a worker thread, about 2.9 hops). Under a
    policy that checks revocation (a rule for another host is enough: the core does not guess which
    rule a peer meets before its handshake), every step and the free still go to a thread."""
    async def main():
        loop = asyncio.get_running_loop()
        close = {"Connection": "close"}  # a new connection per request
        transport = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=server_policy(pki),
                                              resume=False, trust_env=False)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            hops = counted_thread_hops(loop)
            calls = counted_c_calls(monkeypatch)
            for _ in range(5):
                r = await client.get(nginx.url + "/", headers=close)
                assert r.status_code == 200 and r.text.startswith("hello CN=client-a")
            assert calls.get("mtls_conn_wrap_fd") == 5 and calls.get("mtls_conn_free") == 5, calls
            assert hops == [], hops
            # The same through mtls.asyncio's streams, cancelled and failed handshakes included.
            r_, w = await mtls.asyncio.open_connection("127.0.0.1", nginx.port, identity=identity(pki, "client-a"),
                                                       policy=server_policy(pki), resume=False)
            assert w.get_extra_info("ssl_object")._on_loop
            w.write(b"GET / HTTP/1.0\r\nHost: server.test\r\n\r\n")
            await w.drain()
            assert (await r_.read()).startswith(b"HTTP/1.1 200")
            w.close()
            await w.wait_closed()
            with pytest.raises(mtls.TrustError):  # refused by our policy, on the loop
                await mtls.asyncio.open_connection("127.0.0.1", nginx.port, identity=identity(pki, "client-a"),
                                                   policy=server_policy(pki, "other-root.pem"), resume=False)
            assert hops == [], hops

        revocation = server_policy(pki)
        revocation.set_rule_revocation("elsewhere.test", "soft")
        transport = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=revocation,
                                              resume=False, trust_env=False)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            r = await client.get(nginx.url + "/", headers=close)
            assert r.status_code == 200
        # Made on the loop (the key is in memory), then every step and the free on a thread.
        assert hops[-1] == "close" and hops.count("close") == 1, hops
        assert hops[:-1] and set(hops[:-1]) == {"_handshake_step"}, hops

    run(main())


def test_the_core_says_which_connections_may_block(pki, nginx):
    """mtls_conn_may_block: 0 only for a non-blocking client connection whose key is in memory
    under a policy without revocation; a blocking connection, a policy checking revocation (asked
    again after the policy changed) say 1. A token key's connection says 1 too
    (test_heartbeat_never_stalls_while_token_key_handshakes_run shows its PIN callbacks off the
    loop)."""
    from mtls._lib import lib
    import ctypes
    policy = server_policy(pki)
    with mtls.connect("127.0.0.1", nginx.port, identity=identity(pki, "client-a"), policy=policy) as conn:
        assert conn.may_block  # blocking: each step waits for the socket
    with socket.create_connection(("127.0.0.1", nginx.port)) as sock:
        conn = mtls.Connection.wrap(sock, "127.0.0.1", nginx.port, identity=identity(pki, "client-a"),
                                    policy=policy, non_blocking=True)
        assert identity(pki, "client-a").key_in_memory
        assert conn.may_block is False
        policy.set_revocation("soft")  # a replaced or changed policy: asked before each step
        assert conn.may_block is True
        out = ctypes.c_int(7)
        assert lib.mtls_conn_may_block(None, ctypes.byref(out)) == mtls.errors.InvalidArgument.code
        assert lib.mtls_conn_may_block(conn._h, None) == mtls.errors.InvalidArgument.code
        assert out.value == 7
        conn.close()


def test_async_client_per_host_limit_streaming_bodies_and_timeouts(pki, nginx):
    async def main():
        transport = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=server_policy(pki),
                                              max_per_host=2)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            responses = await asyncio.gather(*[client.get(nginx.url + "/") for _ in range(30)])
            conns = {r.text.split("conn=")[1].split()[0] for r in responses}
            assert len(conns) <= 2, conns

            async def body():
                for part in (b"first,", b"second,", b"third"):
                    yield part
                    await asyncio.sleep(0.01)  # a body streamed in parts over time, as tested
            r = await client.post(nginx.url + "/upload", content=body())
            assert r.status_code == 200 and r.text == "stored\n"
            assert nginx.body_log(1).strip() == "first,second,third"
            async with client.stream("GET", nginx.url + "/", headers={"Accept-Encoding": "gzip"}) as r:
                parts = [p async for p in r.aiter_bytes()]
            assert b"".join(parts).startswith(b"hello CN=client-a")
        mute = socket.create_server(("127.0.0.1", 0))
        try:
            async with httpx.AsyncClient(transport=mtls.httpx.AsyncTransport(policy=server_policy(pki)),
                                         timeout=0.3, trust_env=False) as client:
                with pytest.raises(mtls.Timeout):
                    await client.get(f"https://127.0.0.1:{mute.getsockname()[1]}/")
        finally:
            mute.close()
        assert registered(asyncio.get_running_loop()) == 0

    run(main())


def test_async_client_refusals_raise_the_bindings_exceptions(pki, nginx, tokens):
    async def main():
        # our policy refuses the server (the other customer's root is pinned)
        t = mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), policy=server_policy(pki, "other-root.pem"))
        async with httpx.AsyncClient(transport=t, trust_env=False) as client:
            with pytest.raises(mtls.TrustError) as e:
                await client.get(nginx.url + "/")
            assert e.value.evaluation is not None and not e.value.evaluation.trusted
        # a wrong PIN for a token identity
        spare = "pkcs11:token=mtls-spare;object=spare?module-path=" + SOFTHSM_MODULE
        t = mtls.httpx.AsyncTransport(identity=spare, pin="0000", policy=server_policy(pki))
        async with httpx.AsyncClient(transport=t, trust_env=False) as client:
            with pytest.raises(mtls.PinIncorrect):
                await client.get(nginx.url + "/")
        # the other customer's client: nginx answers 403
        t = mtls.httpx.AsyncTransport(identity=identity(pki, "client-b", "int-b"), policy=server_policy(pki))
        async with httpx.AsyncClient(transport=t, trust_env=False) as client:
            r = await client.get(nginx.url + "/")
            assert r.status_code == 403 and r.text == "wrong customer\n"
        # a proxy libmtls cannot tunnel through (TLS to the proxy, SOCKS): refused when given
        # (http:// proxies are honoured: tests/test_proxy.py)
        for scheme in ("https", "socks5"):
            with pytest.raises(ValueError, match="http:// proxies"):
                mtls.httpx.AsyncTransport(identity=identity(pki, "client-a"), proxy=f"{scheme}://127.0.0.1:3128")

    run(main())


# ---- the loop never waits on a token

def test_heartbeat_never_stalls_while_token_key_handshakes_run(pki, start_nginx, tokens):
    """Full handshakes (no resumption) signing on SoftHSM keys — one whose PIN comes from a
    callback at every signature (CKA_ALWAYS_AUTHENTICATE) — run 4 at a time while a task on the
    same loop ticks every 2 ms. What is asserted is where the token work runs: every PIN callback
    (called from inside a signature) runs on a thread other than the loop's, and the loop kept
    beating while the handshakes ran. The beats' worst lateness is printed, not asserted: on a
    shared machine it measures the scheduler as much as this process."""
    srv = start_nginx(str(tokens / "ca.pem"))
    # The peer runs where a real one would not, on this machine's two cores: at a lower priority,
    # so that what is measured is this process's loop, not nginx's handshakes competing for a core.
    os.setpriority(os.PRIO_PROCESS, srv.proc.pid, 10)
    asked = []

    loop_thread = []

    def pin(label, uri, flags):
        asked.append((label, threading.get_ident()))
        time.sleep(0.005)  # a PIN source that takes its time (an agent, a prompt's IPC)
        return "1234"

    async def main():
        loop_thread.append(threading.get_ident())
        keys = [mtls.identity_from_pkcs11(f"pkcs11:token=mtls-test;object=ec-client?module-path={SOFTHSM_MODULE}",
                                          pin="1234"),
                mtls.identity_from_pkcs11(f"pkcs11:token=mtls-test;object=rsa-client?module-path={SOFTHSM_MODULE}",
                                          pin="1234"),
                mtls.identity_from_pkcs11(f"pkcs11:token=mtls-spare;id=%08?module-path={SOFTHSM_MODULE}", pin=pin)]
        policy = server_policy(pki)
        stop = asyncio.Event()
        worst = [0.0]
        late = []  # every beat's lateness during the handshakes

        async def heartbeat():
            period = 0.002
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(period)
                lateness = time.perf_counter() - t0 - period
                worst[0] = max(worst[0], lateness)
                late.append(lateness)

        async def one(i):
            r, w = await mtls.asyncio.open_connection("127.0.0.1", srv.port, identity=keys[i % 3], policy=policy,
                                                      resume=False)
            w.write(b"GET / HTTP/1.0\r\nHost: server.test\r\n\r\n")
            await w.drain()
            body = await r.read()
            w.close()
            await w.wait_closed()
            return body

        # The machine's own noise first: the same heartbeat with nothing else running.
        beat = asyncio.ensure_future(heartbeat())
        await asyncio.sleep(0.5)  # half a second of heartbeats measured: time is what is sampled
        stop.set()
        await beat
        idle, worst[0] = worst[0], 0.0
        late.clear()
        stop.clear()
        beat = asyncio.ensure_future(heartbeat())
        await asyncio.sleep(0.05)
        sem = asyncio.Semaphore(4)

        async def limited(i):
            async with sem:
                return await one(i)
        before = len(asked)  # making the identities logged in on this thread: not a handshake's work
        t0 = time.perf_counter()
        bodies = await asyncio.gather(*[limited(i) for i in range(120)])
        elapsed = time.perf_counter() - t0
        stop.set()
        await beat
        assert all(b.startswith(b"HTTP/1.1 200") and b"CN=token" in b for b in bodies), bodies[0]
        print(f"\nheartbeat: worst stall {worst[0] * 1000:.2f} ms during 120 token-key handshakes "
              f"({elapsed * 1000:.0f} ms, {len(asked)} PIN callbacks); {idle * 1000:.2f} ms with nothing running")
        assert len(asked) - before >= 40  # the always-authenticate key asked at each of its signatures
        # A loop that signed (or asked for a PIN) itself would run the callback on its own thread.
        on_loop = [label for label, thread in asked[before:] if thread == loop_thread[0]]
        assert not on_loop, f"{len(on_loop)} PIN callbacks ran on the event loop's thread"
        # ... and the loop went on beating while the handshakes ran.
        assert len(late) >= 10, f"the loop beat {len(late)} times during {elapsed * 1000:.0f} ms of handshakes"

    # This machine's other work (two cores shared by several builds) is not this process's: the
    # loop's thread runs ahead of it where the test may raise its priority (root), so the stall
    # measured is what this process does to its loop, including the worker threads' GIL use.
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, -10)
    except OSError:
        pass
    try:
        run(main())
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except OSError:
            pass
