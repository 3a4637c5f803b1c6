"""A new user's first hour: every quick start of README.md runs as written, extracted from the
README (so the front door cannot drift), and the guides' full C and Python examples too.

The operator's block runs in a fresh folder, one shell, with `mtls` on the PATH. Two things are
the test's own: the port (8443 in the README) is an ephemeral one, and between commands the test
waits for what a user would watch for in the server's output (`listening on`, `rotated:`,
`policy reloaded:`) before the next command. The C, libcurl, Python and Swift blocks then run in
that folder against the server the operator's block left running, as the README says."""
import os
import re
import shutil
import signal
import subprocess

import pytest

from conftest import CLI, REPO, free_port, run_cli, write_secret

PREFIX = os.environ.get("MTLS_PREFIX")
README = os.path.join(REPO, "README.md")
SWIFT_EXAMPLE = os.path.join(REPO, "examples", "swift")


def quickstart(name):
    """The fenced block after `<!-- quickstart: NAME -->` in README.md."""
    text = open(README).read()
    m = re.search(rf"<!-- quickstart: {re.escape(name)} -->\n```\w+\n(.*?)```", text, re.S)
    assert m, f"README.md has no {name} quick start"
    return m.group(1)


def longest_block(page, lang):
    text = open(os.path.join(REPO, "docs", page)).read()
    blocks = re.findall(rf"```{lang}\n(.*?)```", text, re.S)
    assert blocks, f"no {lang} block in docs/{page}"
    return max(blocks, key=len)


def on_port(text, port):
    assert "8443" in text
    return text.replace("8443", str(port))


# What the operator's block waits for after a command, as a user watching serve's output would:
# (the command's beginning, the line serve prints once it has taken effect).
WAITS = [("mtls serve ", "listening on "),
         ("mtls store import server-2.p12", "rotated: "),
         ("mtls pki revoke ", "policy reloaded: ")]


def operator_script(block, port, log):
    lines = []
    for line in on_port(block, port).split("\n"):
        lines.append(line)
        if line.startswith("mtls serve ") and line.split("#")[0].rstrip().endswith("&"):
            lines.append("echo $! > serve.pid")
        for start, mark in WAITS:
            if line.startswith(start):
                # A condition, polled: up to 60 s for serve's line to appear.
                lines.append(f"for _ in $(seq 1200); do grep -q '{mark}' '{log}' && break; sleep 0.05; done; "
                             f"grep -q '{mark}' '{log}' || {{ echo 'test: no \"{mark}\" from serve'; exit 99; }}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    """The operator's quick start, run; yields (folder, port, its output, its exit status) with the
    server it started still running."""
    d = tmp_path_factory.mktemp("quickstart")
    port = free_port()
    log = d / "quickstart.log"
    bindir = os.path.dirname(os.path.abspath(CLI))
    # A new user's shell: none of libmtls's variables set but those the block exports.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MTLS_")}
    env["PATH"] = bindir + os.pathsep + os.environ["PATH"]
    script = operator_script(quickstart("operator"), port, log)
    with open(log, "w") as out:
        r = subprocess.run(["bash", "-c", script], cwd=d, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=300)
    pid = int((d / "serve.pid").read_text()) if (d / "serve.pid").exists() else None
    try:
        yield d, port, log.read_text(), r.returncode
    finally:
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_operator_quickstart_runs_as_written(operator):
    d, port, out, rc = operator
    # The last command, `store check --within 30`, exits 0: nothing expires within 30 days.
    assert rc == 0, out
    assert f"listening on 127.0.0.1:{port}" in out, out
    # The first connection: alice presented, the server pinned by the stored root, validated as its name.
    assert "hello alice" in out and "accepted 127.0.0.1" in out and "client CN=alice: trusted" in out, out
    # The rotation (a re-issued certificate for the same name): serve presents it, and the next
    # client sees a certificate other than the first one.
    assert 'rotated: ' in out, out
    seen = re.findall(r"peer\[0\] CN=api\.customer-a\.internal\s+sha256=([0-9a-f]{64})", out)
    assert len(seen) == 2 and seen[0] != seen[1], out
    # The revocation: the CRL serve's policy names is re-read, and alice is refused.
    assert "policy reloaded: " in out, out
    assert re.search(r"rejected client .*certificate revoked", out), out
    assert 'alert "certificate revoked"' in out, out
    assert "nothing expires within 30 days" in out, out
    assert out.count("hello alice") == 1, out


def compile_c(d, name, source, *packages):
    assert PREFIX, "MTLS_PREFIX (the installed prefix) is not set: run the tests through make test-e2e"
    src = d / f"{name}.c"
    src.write_text(source)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(PREFIX, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls", *packages], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    r = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(d / name), str(src), *flags],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d / name


def run_in(d, argv, **kw):
    # No LD_LIBRARY_PATH: the program finds libmtls as an installed one would (mtls.pc's rpath).
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(kw.pop("env", {}))
    return subprocess.run([str(a) for a in argv], cwd=d, capture_output=True, text=True, env=env, timeout=60, **kw)


def test_c_quickstart_connects_to_the_operators_server(operator):
    d, port, out, _ = operator
    exe = compile_c(d, "app", on_port(quickstart("c"), port))
    r = run_in(d, [exe])
    assert r.returncode == 0, r.stderr
    assert "200 OK" in r.stdout and "hello bob" in r.stdout, r.stdout


def test_curl_quickstart_fetches_through_libcurl(operator):
    d, port, out, _ = operator
    exe = compile_c(d, "fetch", on_port(quickstart("curl"), port), "libcurl")
    r = run_in(d, [exe])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "hello bob", r.stdout


def test_python_quickstart_with_requests_and_httpx(operator):
    d, port, out, _ = operator
    r = run_in(d, ["python3", "-c", on_port(quickstart("python"), port)],
               env={"PYTHONPATH": os.path.join(REPO, "bindings", "python", "src")})
    assert r.returncode == 0, r.stderr
    assert [l for l in r.stdout.split("\n") if l] == ["hello bob", "hello bob"], r.stdout


def test_swift_quickstart_is_the_example_target_and_connects(operator):
    d, port, out, _ = operator
    main = os.path.join(SWIFT_EXAMPLE, "Sources", "mtls-quickstart", "main.swift")
    assert quickstart("swift") == open(main).read(), "README's Swift quick start differs from " + main
    build = subprocess.run(["swift", "build", "-c", "debug", "--package-path", SWIFT_EXAMPLE, "--product", "mtls-quickstart"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    bin_path = subprocess.run(["swift", "build", "-c", "debug", "--package-path", SWIFT_EXAMPLE, "--show-bin-path"],
                              capture_output=True, text=True, check=True).stdout.strip()
    # The port as its argument (the README's run uses the default, 8443).
    r = run_in(d, [os.path.join(bin_path, "mtls-quickstart"), str(port)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "200 OK" in r.stdout and "hello bob" in r.stdout, r.stdout


def test_readme_is_a_front_door():
    """README.md stays short, and every file it links is in the repository (the generated reference
    pages, which exist only once `make docs` has run, are named, not linked)."""
    text = open(README).read()
    assert len(text.split("\n")) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert "docs/guides/operator.md" in links
    for link in links:
        assert os.path.exists(os.path.join(REPO, link)), link


def test_operator_guide_walks_through_the_quick_start():
    """The operator's guide explains the README's story step by step: each of its commands is one of
    the quick start's, so the two tell the same story."""
    guide = open(os.path.join(REPO, "docs", "guides", "operator.md")).read().split("## The demo", 1)[0]
    story = quickstart("operator")
    for block in re.findall(r"```sh\n(.*?)```", guide, re.S):
        for line in block.strip().split("\n"):
            assert line.split("  #")[0].strip() in story, line


# The guides' complete examples (moved from the old README), run as written.

def test_python_guide_example_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "bindings", "python", "src"))
    r = subprocess.run(["python3", "-c", longest_block("guides/python.md", "python")], cwd=tmp_path,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True TLSv1.3 hello alice"


def test_c_guide_example_connects_to_mtls_serve(tmp_path):
    assert PREFIX, "MTLS_PREFIX (the installed prefix) is not set: run the tests through make test-e2e"
    assert "mtls_conn_connect" in open(os.path.join(PREFIX, "include", "mtls.h")).read()
    client = compile_c(tmp_path, "client", longest_block("guides/c.md", "c"))
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
        r = run_in(tmp_path, [client, "127.0.0.1", port])
        assert r.returncode == 0, r.stderr
        assert "hello alice" in r.stdout
    finally:
        srv.kill()
        srv.wait()
