"""examples/swift: a Swift package outside libmtls that depends on it by path and uses public API
only (plain `import MTLS`), built here and run against nginx with `ssl_verify_client on`: the seed
scenario (identity from a .p12, the root pinned, connect by IP and validate as the name)."""
import os
import subprocess

import pytest

import nginx_server
from conftest import REPO, run_cli, write_secret

EXAMPLE = os.path.join(REPO, "examples", "swift")


def ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0, f"mtls {' '.join(map(str, args))}: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def example():
    """The example's executable, built with SwiftPM in the example's own folder."""
    build = subprocess.run(["swift", "build", "-c", "debug", "--package-path", EXAMPLE], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "@testable" not in open(os.path.join(EXAMPLE, "Sources", "mtls-swift-example", "main.swift")).read()
    bin_path = subprocess.run(["swift", "build", "-c", "debug", "--package-path", EXAMPLE, "--show-bin-path"],
                              capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(bin_path, "mtls-swift-example")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A PKI made with `mtls pki` (the server's certificate names only api.customer-a.internal)
    and nginx serving it, requiring a client certificate from customer A's intermediate."""
    base = tmp_path_factory.mktemp("swift-example")
    d = base / "D"
    pw = base / "p12pw"
    write_secret(pw, "p12-secret\n")
    ok("pki", "init", "--dir", d, "--name", "Example Root")
    ok("pki", "intermediate", "--dir", d, "--name", "Customer A")
    ok("pki", "issue", "server", "--dir", d, "--ca", "Customer A", "--dns", "api.customer-a.internal")
    ok("pki", "issue", "client", "--dir", d, "--ca", "Customer A", "--name", "alice",
       "--p12", base / "alice.p12", "--password-file", pw)
    server = d / "ca" / "customer-a" / "issued" / "api.customer-a.internal"
    client_ca = base / "client-ca.pem"
    client_ca.write_bytes((d / "ca" / "customer-a" / "cert.pem").read_bytes() + (d / "root" / "cert.pem").read_bytes())
    srv = nginx_server.start(base / "nginx", server_chain=server / "chain.pem", server_key=server / "key.pem",
                             client_ca=client_ca)
    yield base, d / "root" / "cert.pem", srv.port
    srv.stop()


def test_example_connects_by_ip_validating_as_the_name_with_p12_identity(example, served):
    base, root, port = served
    r = subprocess.run([example, f"127.0.0.1:{port}", base / "alice.p12", base / "p12pw", root, "api.customer-a.internal"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "evaluation: trusted" in r.stdout
    assert "200 OK" in r.stdout and "hello" in r.stdout and "CN=alice" in r.stdout, r.stdout


def test_example_refuses_when_the_name_is_not_the_certificates(example, served):
    base, root, port = served
    # Validated as the address it connected to, which the certificate does not name.
    r = subprocess.run([example, f"127.0.0.1:{port}", base / "alice.p12", base / "p12pw", root, "127.0.0.1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: untrusted" in r.stdout and "name_mismatch" in r.stdout, r.stdout


def test_swift_guide_example_is_the_example_package():
    """The Swift guide's program (docs/guides/swift.md) is examples/swift's, which the tests above
    build and run: the guide's example compiles and works as written."""
    guide = open(os.path.join(REPO, "docs", "guides", "swift.md")).read()
    first = guide.split("# Using it from Swift", 1)[1].split("```swift\n", 1)[1].split("```", 1)[0]
    assert first == open(os.path.join(EXAMPLE, "Sources", "mtls-swift-example", "main.swift")).read()
