"""Where the package finds libmtls.so: beside the package first (a wheel ships it there), then
MTLS_LIBRARY, then the linker's search."""
import os
import pathlib
import shutil
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "mtls"
PROBE = "import mtls; print(mtls._lib._name)"


def run(pythonpath, env_lib):
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    env.pop("MTLS_LIBRARY", None)
    if env_lib:
        env["MTLS_LIBRARY"] = env_lib
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)


def test_beside_the_package_then_mtls_library(tmp_path):
    installed = os.environ["MTLS_LIBRARY"]
    pkg = tmp_path / "site" / "mtls"
    shutil.copytree(SRC, pkg)
    # No library beside the package: MTLS_LIBRARY.
    r = run(pkg.parent, installed)
    assert r.returncode == 0 and r.stdout.strip() == installed, r.stderr
    # A library beside the package wins over MTLS_LIBRARY (here a path that does not exist).
    shutil.copy(installed, pkg / "libmtls.so")
    r = run(pkg.parent, str(tmp_path / "nowhere" / "libmtls.so"))
    assert r.returncode == 0 and r.stdout.strip() == str(pkg / "libmtls.so"), r.stderr
