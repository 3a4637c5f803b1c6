"""System calls libmtls's client makes per resumed mutual-TLS handshake (issue 40), counted with
strace against the raw OpenSSL C client in the same test (bench/bench_listener.py's counting
code). Counts, not times: they do not depend on the machine's load, except for the reads that
find nothing yet (EAGAIN, then a poll), which depend on how the server's answer arrives. The raw
client blocks in its connect and reads; libmtls's socket is non-blocking (its time limits), so it
polls where the raw client waits inside a call: after the connect, and when a read finds
nothing."""
import os
import shutil
import sys

import pytest

from conftest import REPO, require_tool

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_listener  # noqa: E402


@pytest.mark.parametrize("version", [13, 12])
def test_a_resumed_client_handshake_costs_a_poll_per_wait_more_than_raw_openssl(tmp_path, version):
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
    # Every other call beyond the raw client's is a poll after a read that found nothing: at
    # most one such read per answer waited for (the server's flight, its tickets, its reply), and every poll is
    # the connect's or one of those.
    reads = calls.get("recvfrom", 0) + calls.get("read", 0)
    raw_reads = raw_calls.get("read", 0) + raw_calls.get("recvfrom", 0)
    waits = reads - raw_reads
    assert waits <= 3.0, (calls, raw_calls)
    assert calls.get("poll", 0) <= 1 + waits + 0.05, (calls, raw_calls)
    assert total <= raw_total + 1 + 2 * waits + 0.05, (total, calls, raw_total, raw_calls)
