"""What people install: self-contained binaries, the Debian packages and the Python wheel.

`make test` builds the packages first (`make deb wheel`) and points MTLS_OUT at them; these tests
fail, never skip, when they are missing.
"""
import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, free_port, require_tool, sh, write_secret
from test_tls import PKI_SCRIPT, wait_port

OUT = os.environ.get("MTLS_OUT", os.path.join(REPO, "out"))
PREFIX = os.environ["MTLS_PREFIX"]
TOOLCHAIN = "/opt/swift"
DEBIAN_LIBS = ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1",
               "libssl.so.3", "libcrypto.so.3", "libp11-kit.so.0", "libsqlite3.so.0")


def artifacts(pattern, what):
    found = sorted(glob.glob(os.path.join(OUT, pattern)))
    assert found, f"no {what} in {OUT} ({pattern}): run `make deb wheel` first (make test does)"
    return found


def dynamic_section(path):
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    needed = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]
    paths = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(RUNPATH)" in l or "(RPATH)" in l]
    return needed, paths


@pytest.mark.parametrize("binary", ["lib/libmtls.so", "bin/mtls"])
def test_binaries_need_only_debian_libraries(binary):
    path = os.path.join(PREFIX, binary)
    needed, search = dynamic_section(path)
    assert set(needed) <= set(DEBIAN_LIBS), f"{binary} needs {sorted(set(needed) - set(DEBIAN_LIBS))}"
    assert not any(TOOLCHAIN in p for p in search), f"{binary} searches the toolchain: {search}"


def test_library_leaves_no_symbol_undefined():
    """Static Swift archives whose autolink entries miss a library would leave symbols for the
    loader to fail on at the first call: ldd -r resolves every one."""
    r = subprocess.run(["ldd", "-r", os.path.join(PREFIX, "lib", "libmtls.so")], capture_output=True, text=True)
    undefined = [l for l in (r.stdout + r.stderr).splitlines() if "undefined symbol" in l]
    assert r.returncode == 0 and not undefined, undefined[:10]


def test_library_exports_only_the_c_abi():
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(PREFIX, "lib", "libmtls.so")],
                         check=True, capture_output=True, text=True).stdout
    exported = [l.split()[2] for l in out.splitlines() if len(l.split()) == 3 and l.split()[1].isupper()
                and l.split()[1] != "A"]
    assert exported and all(name.startswith("mtls_") for name in exported), \
        [n for n in exported if not n.startswith("mtls_")][:10]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("packaging-pki")
    subprocess.run([PKI_SCRIPT, str(d)], check=True)
    write_secret((d / "pw.txt"), "pw\n")
    return d


@pytest.fixture
def s_server(pki):
    """openssl s_server that asks for a client certificate under the test root."""
    port = free_port()
    proc = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-www", "-quiet",
                             "-cert", str(pki / "server.pem"), "-key", str(pki / "server.key"),
                             "-cert_chain", str(pki / "int-a.pem"), "-CAfile", str(pki / "root.pem"),
                             "-Verify", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield port
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A fresh venv with nothing but the wheel installed."""
    wheel = artifacts("wheel/mtls-*-py3-none-*.whl", "wheel")[-1]
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # Without PYTHONPATH: pip would take the source tree's bindings (an egg-info there) as installed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", wheel],
                   check=True, env=env)
    return venv


WHEEL_CLIENT = textwrap.dedent("""
    import os, sys, mtls
    pki, port = sys.argv[1], int(sys.argv[2])
    identity = mtls.Identity.from_pkcs12(open(pki + "/client-a.p12", "rb").read(), "pw")
    policy = mtls.Policy(anchors=[mtls.Certificate.load(pki + "/root.pem")], anchors_only=True)
    with mtls.connect("127.0.0.1", port, identity=identity, policy=policy, verify_as="server.test") as conn:
        conn.write(b"GET / HTTP/1.0\\r\\n\\r\\n")
        reply = conn.read(4096)
    assert mtls.__file__.startswith(sys.prefix), mtls.__file__  # the wheel's package, not the source tree
    # the library inside the wheel, found beside the package with no MTLS_LIBRARY
    loaded = sys.modules["mtls._lib"].lib._name
    assert loaded == os.path.join(os.path.dirname(mtls.__file__), "libmtls.so"), loaded
    print("wheel", mtls.__version__, reply.split(b"\\r\\n")[0].decode())
""")


def test_c_program_cli_and_wheel_run_with_the_toolchain_hidden(pki, s_server, wheel_venv, tmp_path):
    require_tool(shutil.which("unshare"), "unshare (util-linux)")
    connect = tmp_path / "connect"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls"], check=True, capture_output=True, text=True,
                           env={**os.environ, "PKG_CONFIG_PATH": os.path.join(PREFIX, "lib", "pkgconfig")}).stdout
    sh(f"cc -std=c11 -Wall -Werror -o {connect} {REPO}/examples/connect.c {flags}", tmp_path)
    (tmp_path / "client.py").write_text(WHEEL_CLIENT)
    clean_env = {k: v for k, v in os.environ.items()
                 if k not in ("MTLS_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH", "MTLS_PREFIX")}
    # In a private mount namespace, /opt/swift is an empty tmpfs: anything that reaches for the
    # toolchain fails there. `ls` proves the toolchain is hidden.
    script = f"""
        set -e
        mount -t tmpfs none {TOOLCHAIN}
        test -z "$(ls -A {TOOLCHAIN})"
        {PREFIX}/bin/mtls --version
        {connect} --p12 {pki}/client-a.p12 --password-file {pki}/pw.txt --anchor {pki}/root.pem \\
            --verify-as server.test --send 'GET / HTTP/1.0\\r\\n\\r\\n' 127.0.0.1 {s_server}
        cd {tmp_path} && {wheel_venv}/bin/python client.py {pki} {s_server}
    """
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, env=clean_env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].strip() == subprocess.run(
        [os.path.join(REPO, "scripts", "version.sh")], capture_output=True, text=True).stdout.strip()
    assert "HTTP/1.0 200 ok" in r.stdout
    assert "wheel " in r.stdout and "HTTP/1.0 200 ok" in r.stdout.split("wheel ", 1)[1]


def test_wheel_is_tagged_for_the_platform_and_carries_the_library():
    import zipfile
    wheel = artifacts("wheel/mtls-*-py3-none-*.whl", "wheel")[-1]
    assert "-py3-none-linux_" in os.path.basename(wheel)
    names = zipfile.ZipFile(wheel).namelist()
    assert "mtls/libmtls.so" in names and "mtls/__init__.py" in names


def test_debian_packages_are_lintian_clean():
    debs = artifacts("deb/*.deb", "Debian packages")
    assert {os.path.basename(d).split("_")[0] for d in debs} == {"libmtls0", "libmtls-dev", "mtls"}
    require_tool(shutil.which("lintian"), "lintian")
    r = subprocess.run(["lintian", "--fail-on", "error", *debs], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    depends = subprocess.run(["dpkg-deb", "-f", next(d for d in debs if "libmtls0_" in d), "Depends"],
                             capture_output=True, text=True).stdout
    for lib in ("libc6", "libssl3", "libp11-kit0", "libsqlite3-0"):
        assert lib in depends, depends
    assert "swift" not in depends.lower()


def test_mtls_deb_has_a_man_page_per_command(tmp_path):
    """The mtls package carries mtls(1) and one page per command (mtls-connect(1),
    mtls-store-import(1)...), each made from that command's --help: its NAME is the help's first
    sentence and its text has the command's options."""
    deb = artifacts("deb/mtls_*.deb", "the mtls package")[0]
    subprocess.run(["dpkg-deb", "-x", deb, str(tmp_path)], check=True)
    man1 = tmp_path / "usr" / "share" / "man" / "man1"
    cli = os.environ["MTLS_CLI"]
    commands = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gen-docs.py"), "--list-commands", cli],
                              check=True, capture_output=True, text=True).stdout.split("\n")
    commands = [c for c in commands if c]
    assert {"connect", "serve", "store import", "pki issue server"} <= set(commands), commands
    pages = {p.name for p in man1.iterdir()}
    expected = {"mtls.1.gz"} | {"mtls-" + c.replace(" ", "-") + ".1.gz" for c in commands}
    assert expected <= pages, sorted(expected - pages)
    text = subprocess.run(["man", "-l", "-P", "cat", str(man1 / "mtls-store-import.1.gz")], capture_output=True, text=True,
                          env=dict(os.environ, MANWIDTH="200")).stdout
    overview = subprocess.run([cli, "store", "import", "--help"], capture_output=True, text=True, check=True).stdout
    first_sentence = " ".join(overview.split("\n\n")[0].split()).removeprefix("OVERVIEW: ").split(". ")[0].rstrip(".")
    assert f"mtls-store-import - {first_sentence}" in " ".join(text.split()), text
    assert "--password-file" in text and "--replace" in text, text
    top = subprocess.run(["man", "-l", "-P", "cat", str(man1 / "mtls.1.gz")], capture_output=True, text=True,
                         env=dict(os.environ, MANWIDTH="200")).stdout
    assert "mtls-connect(1)" in top, top


def test_debian_packages_install_build_run_and_purge_clean(pki, s_server, tmp_path):
    debs = artifacts("deb/*.deb", "Debian packages")
    names = ["libmtls0", "libmtls-dev", "mtls"]
    env = {k: v for k, v in os.environ.items() if k not in ("PKG_CONFIG_PATH", "LD_LIBRARY_PATH")}
    env["DEBIAN_FRONTEND"] = "noninteractive"
    subprocess.run(["apt-get", "install", "-y", "-qq", *debs], check=True, capture_output=True, env=env)
    try:
        files = []
        for n in names:
            listed = subprocess.run(["dpkg", "-L", n], check=True, capture_output=True, text=True).stdout.split()
            files += [f for f in listed if os.path.isfile(f) or os.path.islink(f)]
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls"], check=True, capture_output=True,
                               text=True, env=env).stdout
        assert "-lmtls" in flags and "rpath" not in flags, flags
        connect = tmp_path / "connect"
        subprocess.run(f"cc -std=c11 -Wall -Werror -o {connect} {REPO}/examples/connect.c {flags}", shell=True,
                       check=True, env=env)
        r = subprocess.run([str(connect), "--p12", str(pki / "client-a.p12"), "--password-file", str(pki / "pw.txt"),
                            "--anchor", str(pki / "root.pem"), "--verify-as", "server.test",
                            "--send", "GET / HTTP/1.0\\r\\n\\r\\n", "127.0.0.1", str(s_server)],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0 and "HTTP/1.0 200 ok" in r.stdout, r.stdout + r.stderr
        which = subprocess.run(["sh", "-c", "command -v mtls && mtls --version"], capture_output=True, text=True,
                               env={**env, "PATH": "/usr/bin:/bin"})
        assert which.stdout.split() == ["/usr/bin/mtls", artifacts("deb/mtls_*.deb", "")[0].split("_")[1].split("-")[0]]
        man = subprocess.run(["dpkg", "-L", "mtls"], capture_output=True, text=True).stdout
        assert "/usr/share/man/man1/mtls.1.gz" in man and "/usr/share/man/man1/mtls-connect.1.gz" in man
    finally:
        subprocess.run(["apt-get", "purge", "-y", "-qq", *names], check=True, capture_output=True, env=env)
    left = [f for f in files if os.path.lexists(f)]
    assert not left, f"left behind after purge: {left}"
    for n in names:
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", n], capture_output=True, text=True).stdout
        assert "installed" not in status.replace("not-installed", ""), (n, status)


def test_every_version_agrees_with_the_header():
    """The version is written once (include/mtls.h's macros); everything else derives from it or
    is checked here: pyproject.toml, the Makefile, mtls.pc, the library, the CLI, the packages."""
    import re
    import tomllib
    version = subprocess.run([os.path.join(REPO, "scripts", "version.sh")], check=True, capture_output=True,
                             text=True).stdout.strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    with open(os.path.join(REPO, "bindings", "python", "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["version"] == version, "bindings/python/pyproject.toml"
    make = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "print-version"], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert make == version, "Makefile VERSION"
    pc = subprocess.run(["pkg-config", "--modversion", "mtls"], check=True, capture_output=True, text=True,
                        env={**os.environ, "PKG_CONFIG_PATH": os.path.join(PREFIX, "lib", "pkgconfig")}).stdout
    assert pc.strip() == version, "mtls.pc"
    cli = subprocess.run([os.path.join(PREFIX, "bin", "mtls"), "--version"], check=True, capture_output=True,
                         text=True).stdout
    assert cli.strip() == version, "mtls --version"
    import ctypes
    lib = ctypes.CDLL(os.path.join(PREFIX, "lib", "libmtls.so"))
    lib.mtls_version.restype = ctypes.c_char_p
    assert lib.mtls_version().decode() == version, "mtls_version()"
    assert os.path.realpath(os.path.join(PREFIX, "lib", "libmtls.so")).endswith(f"libmtls.so.{version}")
    for deb in artifacts("deb/*.deb", "Debian packages"):
        assert os.path.basename(deb).split("_")[1] == f"{version}-1", deb
    wheel = artifacts("wheel/mtls-*.whl", "wheel")[-1]
    assert os.path.basename(wheel).startswith(f"mtls-{version}-py3-none-"), wheel
