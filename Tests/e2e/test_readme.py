"""The README's C and Python examples compile and run as written."""
import os
import re
import shutil
import subprocess

from conftest import CLI, run_cli, write_secret

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = os.environ.get("MTLS_PREFIX")


def block(lang):
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(rf"```{lang}\n(.*?)```", text, re.S)
    assert blocks, f"no {lang} block in README.md"
    return max(blocks, key=len)


def test_python_example_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python", "src"))
    r = subprocess.run(["python3", "-c", block("python")], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True TLSv1.3 hello alice"


def test_c_example_connects_to_mtls_serve(tmp_path):
    assert PREFIX, "MTLS_PREFIX (the installed prefix) is not set: run the tests through make test-e2e"
    assert "mtls_conn_connect" in open(os.path.join(PREFIX, "include", "mtls.h")).read()
    src = tmp_path / "client.c"
    src.write_text(block("c"))
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(PREFIX, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "client"), str(src),
                    *flags], check=True, capture_output=True)
    pw = tmp_path / "p12.pw"
    write_secret(pw, "demo-p12-password\n")
    d = tmp_path / "pki"
    for args in (["init", "--name", "Demo Root"], ["intermediate", "--name", "Customer A"],
                 ["issue", "server", "--ca", "Customer A", "--dns", "api.customer-a.internal", "--ip", "127.0.0.1",
                  "--p12", tmp_path / "server.p12", "--password-file", pw],
                 ["issue", "client", "--ca", "Customer A", "--name", "alice", "--p12", tmp_path / "alice.p12",
                  "--password-file", pw]):
        r = run_cli("pki", *args, "--dir", d)
        assert r.returncode == 0, r.stderr
    shutil.copy(d / "root" / "cert.pem", tmp_path / "root.pem")
    srv = subprocess.Popen([CLI, "serve", "--port", "0", "--identity", tmp_path / "server.p12", "--password-file", pw,
                            "--client-anchor", d / "ca" / "customer-a" / "cert.pem", "--require-client-cert"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = srv.stdout.readline()
        port = re.search(r":(\d+)$", line.strip()).group(1)
        r = subprocess.run([str(tmp_path / "client"), "127.0.0.1", port], cwd=tmp_path, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}, timeout=30)
        assert r.returncode == 0, r.stderr
        assert "hello alice" in r.stdout
    finally:
        srv.kill()
        srv.wait()
