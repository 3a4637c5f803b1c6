"""System calls a libmtls listener makes per resumed TLS 1.3 mutual-TLS handshake (issue 40),
counted with strace against the raw OpenSSL C server in the same test, as bench/bench_listener.py
counts them (the same programs and the same counting code). Counts, not times: they do not depend
on the machine's load, except for a client whose ClientHello comes after its connection is
accepted (one read and one poll more), which the margins below allow for."""
import os
import shutil
import sys

from conftest import REPO, require_tool

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_listener  # noqa: E402
from _cbench import stop  # noqa: E402

HANDSHAKES = 60


def resumed_counts(tmp_path, version, mode="resumed"):
    """((raw total, raw calls), (total, calls)) per resumed (or full) TLS 1.`version` handshake."""
    require_tool(shutil.which("strace"), "strace")
    require_tool(shutil.which("cc") and shutil.which("pkg-config"), "a C compiler and pkg-config")
    p, exe, tls = bench_listener.programs(str(tmp_path), os.environ["MTLS_PREFIX"])
    procs = []
    try:
        return bench_listener.count_both(exe, tls, p, str(tmp_path), procs, HANDSHAKES, version, mode)
    finally:
        stop(procs)


def test_a_resumed_handshake_reads_each_byte_once_and_costs_no_more_calls_than_raw_openssl(tmp_path):
    (raw_total, raw_calls), (total, calls) = resumed_counts(tmp_path, 13)
    raw_reads = raw_calls.get("read", 0) + raw_calls.get("recvfrom", 0)
    # The ClientHello is read once (no MSG_PEEK and a second read), the client's ChangeCipherSpec
    # and the next record's header in one read, no read that must fail (EAGAIN) right after the
    # server's flight, and the client's close_notify in one read: fewer reads than the raw server
    # (8 per handshake; 11 on 6bdd1d3).
    assert calls.get("recvfrom", 0) <= raw_reads - 1, (calls, raw_calls)
    # In all, as many calls as the raw server (20 per handshake; 24 on 6bdd1d3): its blocking
    # accept and read wait in the call, the listener's poll waits for every socket it watches.
    assert total <= raw_total + 1, (total, calls, raw_total, raw_calls)
    # No setsockopt per connection: TCP_NODELAY comes with the accepted socket from the listening
    # one (the raw server sets it on each: 1 per handshake; so did the listener before).
    assert calls.get("setsockopt", 0) < 0.1, (calls, raw_calls)


def test_a_resumed_tls12_handshake_costs_no_more_calls_than_raw_openssl(tmp_path):
    (raw_total, raw_calls), (total, calls) = resumed_counts(tmp_path, 12)
    # 16 per handshake, as the raw server (the session ID or ticket, the server's flight first:
    # the ChangeCipherSpec and the next header in one read, the close_notify in one).
    assert total <= raw_total + 1, (total, calls, raw_total, raw_calls)
    assert calls.get("setsockopt", 0) < 0.1, (calls, raw_calls)


def test_a_full_tls12_handshake_reads_the_clients_flight_at_once(tmp_path):
    (raw_total, raw_calls), (total, calls) = resumed_counts(tmp_path, 12, "full")
    raw_reads = raw_calls.get("read", 0) + raw_calls.get("recvfrom", 0)
    # The client's second flight (certificate, key exchange, certificate verify, ChangeCipherSpec,
    # Finished) is five records: the raw server reads each header and body (10 reads, 14 in all
    # per handshake); the listener peeks once and takes the whole flight in one read (issue 40:
    # 29.2 calls per handshake against the raw server's 26 before).
    assert calls.get("recvfrom", 0) <= raw_reads - 6, (calls, raw_calls)
    assert total <= raw_total, (total, calls, raw_total, raw_calls)
