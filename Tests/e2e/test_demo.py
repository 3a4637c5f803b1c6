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
    assert "root CA made: pki/root/cert.pem (keys encrypted with pki-key.pw)" in results
    assert any(s.startswith("server certificate for api.customer-a.internal only") for s in results)
    # The keys are encrypted: no "written unencrypted" warning from mtls pki.
    assert "unencrypted" not in out
    assert any(s.startswith("client certificate 'alice' from Customer A") for s in results)
    # 2. the store
    assert any("'alice' (identity" in s and "'demo-root' (certificate)" in s for s in results)
    # 3. the server
    assert any(re.match(r"server listening on 127\.0\.0\.1:\d+$", s) for s in results)
    # 4. the mutual-TLS connection, with the server's view of the client
    assert any(s.startswith("connected: the server is trusted") for s in results), out
    assert re.search(r"server: accepted .*CN=alice", out), out
    # The pinned root is the one stored under 'demo-root', named by its label.
    assert "--anchor demo-root" in out, out
    # 5-8. the refusals, each with a reason
    refusals = [s for s in results if s.startswith("refused (")]
    assert [s.split(")")[0] + ")" for s in refusals] == [
        "refused (name mismatch)", "refused (wrong pin)", "refused (client from another customer)",
        "refused (no client certificate)"], out
    for s in refusals:
        assert len(s.split("): ", 1)[1]) > 5, s
    # Without --verify-as, the certificate (DNS name only) does not match 127.0.0.1.
    assert "127.0.0.1" in refusals[0] or "name" in refusals[0].lower(), refusals[0]
    assert "pin" in refusals[1]
    # The server says why it refused the two clients.
    assert "| server: " in refusals[2] and "| server: " in refusals[3], out
    assert "FAILED" not in out
    assert results[-1] == "demo finished"
    # cleaned up
    work = re.search(r"working in (\S+)", out).group(1)
    assert not os.path.exists(work)
    assert elapsed < 60, f"the demo took {elapsed:.0f} s"
