"""System calls libmtls's client makes per resumed mutual-TLS handshake (issue 40), counted with
strace against the raw OpenSSL C client in the same test (bench/bench_listener.py's counting
code). Counts, not times: they do not depend on the machine's load, except for the reads that
find nothing yet (EAGAIN, then a poll), which depend on how the server's answer arrives. The raw
client blocks in its connect and reads; libmtls's socket is non-blocking (its time limits), so it
polls where the raw client waits inside a call: after the connect, and when a read finds
nothing. It reads the server's flight at once (a peek, then one read of its whole records), where
the raw client reads each record's header and body."""
import os
import shutil
import sys

import pytest

from conftest import REPO, require_tool

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_listener  # noqa: E402


@pytest.mark.parametrize("version", [13, 12])
def test_a_resumed_client_handshake_reads_the_servers_flight_at_once(tmp_path, version):
    require_tool(shutil.which("strace"), "strace")
    require_tool(shutil.which("cc") and shutil.which("pkg-config"), "a C compiler and pkg-config")
    p, _, _ = bench_listener.programs(str(tmp_path), os.environ["MTLS_PREFIX"])
    cg = bench_listener.client_program(str(tmp_path), os.environ["MTLS_PREFIX"])
    raw_total, raw_calls = bench_listener.count_client_syscalls(cg, p, str(tmp_path), "raw", version)
    total, calls = bench_listener.count_client_syscalls(cg, p, str(tmp_path), "mtls", version)
    # The connect: one poll, and no getsockopt(SO_ERROR) when poll showed the socket writable and
    # nothing else (29a644d: one per connection).
    assert calls.get("getsockopt", 0) < 0.1, calls
    assert calls.get("connect", 0) == raw_calls.get("connect", 0) == 1, (calls, raw_calls)
    # The server's flight is read at once: a peek, then one read of its whole records, where the
    # raw client reads each record's header and body (TLS 1.2 resumed: ServerHello,
    # ChangeCipherSpec, Finished, 6 reads; d896778 and before: 1 more read than the raw client, 9.1 against 8).
    reads = calls.get("recvfrom", 0) + calls.get("read", 0)
    raw_reads = raw_calls.get("read", 0) + raw_calls.get("recvfrom", 0)
    assert reads <= raw_reads - 2, (calls, raw_calls)
    # A poll for the connect and one per answer waited for (the server's flight, its tickets, its
    # reply), where the raw client waits inside its connect and reads.
    assert calls.get("poll", 0) <= 4.5, (calls, raw_calls)
    # In all, within 3 calls of the raw client (0daf145: 3.7 more in TLS 1.3, 2.5 in TLS 1.2).
    assert total <= raw_total + 3, (total, calls, raw_total, raw_calls)
