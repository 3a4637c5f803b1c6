"""`make demo`'s script, run against the installed CLI: every step's outcome, from its output."""
import os
import re
import subprocess
import time

from conftest import CLI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_runs_every_step_and_shows_each_refusal_with_its_reason():
    started = time.monotonic()
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo.sh"), CLI], capture_output=True, text=True,
                       timeout=120)
    elapsed = time.monotonic() - started
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    results = [line.strip()[3:] for line in out.splitlines() if line.strip().startswith("=> ")]
    # 1. the PKI
    assert "root CA made: pki/root/cert.pem" in results
    assert any(s.startswith("server certificate for api.customer-a.internal and 127.0.0.1") for s in results)
    assert any(s.startswith("client certificate 'alice' from Customer A") for s in results)
    # 2. the store
    assert any("'alice' (identity" in s and "'demo-root' (certificate)" in s for s in results)
    # 3. the server
    assert any(re.match(r"server listening on 127\.0\.0\.1:\d+$", s) for s in results)
    # 4. the mutual-TLS connection, with the server's view of the client
    assert any(s.startswith("connected: the server is trusted") for s in results), out
    assert re.search(r"server: accepted .*CN=alice", out), out
    # 5-7. the refusals, each with a reason
    refusals = [s for s in results if s.startswith("refused (")]
    assert [s.split(")")[0] + ")" for s in refusals] == [
        "refused (wrong pin)", "refused (client from another customer)", "refused (no client certificate)"], out
    for s in refusals:
        assert len(s.split("): ", 1)[1]) > 5, s
    assert "pin" in refusals[0]
    # The server says why it refused the two clients.
    assert "| server: " in refusals[1] and "| server: " in refusals[2], out
    assert "FAILED" not in out
    assert results[-1] == "demo finished"
    # cleaned up
    work = re.search(r"working in (\S+)", out).group(1)
    assert not os.path.exists(work)
    assert elapsed < 60, f"the demo took {elapsed:.0f} s"
