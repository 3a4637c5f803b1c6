"""Where the package finds libmtls.so (MTLS_LIBRARY when set, else beside the package, else the
system's by its SONAME), found without running any program; which library versions it accepts;
and a package whose modules import without cycles or imports inside functions."""
import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import mtls

_lib = sys.modules["mtls._lib"]  # the module (mtls._lib is the package's name for the CDLL)

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "mtls"
PROBE = "import sys, mtls; print(sys.modules['mtls._lib'].path)"
INSTALLED = os.environ["MTLS_LIBRARY"]


def run(pythonpath, env_lib=None, **extra):
    env = dict(os.environ, PYTHONPATH=str(pythonpath), **extra)
    env.pop("MTLS_LIBRARY", None)
    env.pop("LD_LIBRARY_PATH", None) if "LD_LIBRARY_PATH" not in extra else None
    if env_lib:
        env["MTLS_LIBRARY"] = env_lib
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)


@pytest.fixture
def package(tmp_path):
    """A copy of the package with no library beside it."""
    pkg = tmp_path / "site" / "mtls"
    shutil.copytree(SRC, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    return pkg


def test_mtls_library_comes_first_when_set(package):
    shutil.copy(INSTALLED, package / "libmtls.so")
    r = run(package.parent, INSTALLED)
    assert r.returncode == 0 and r.stdout.strip() == INSTALLED, r.stderr


def test_mtls_library_that_does_not_load_is_an_error_not_a_fallback(package, tmp_path):
    shutil.copy(INSTALLED, package / "libmtls.so")  # would load, but MTLS_LIBRARY is the choice
    r = run(package.parent, str(tmp_path / "nowhere" / "libmtls.so"))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "MTLS_LIBRARY names a library that does not load" in r.stderr, r.stderr


def test_beside_the_package_without_mtls_library(package):
    shutil.copy(INSTALLED, package / "libmtls.so")
    r = run(package.parent)
    assert r.returncode == 0 and r.stdout.strip() == str(package / "libmtls.so"), r.stderr


def spy_path(tmp_path):
    """A PATH whose compiler and binutils leave a mark when run (ctypes.util.find_library runs
    ldconfig, gcc, cc, ld and objdump when the library is not in the linker cache)."""
    bin_dir = tmp_path / "spy-bin"
    bin_dir.mkdir()
    mark = tmp_path / "ran"
    for tool in ("gcc", "cc", "ld", "objdump", "ldconfig", "ld.bfd", "x86_64-linux-gnu-gcc"):
        p = bin_dir / tool
        p.write_text(f"#!/bin/sh\necho {tool} >> {mark}\nexit 1\n")
        p.chmod(0o755)
    return bin_dir, mark


def test_system_library_by_its_soname_without_running_a_program(package, tmp_path):
    bin_dir, mark = spy_path(tmp_path)
    lib_dir = os.path.dirname(INSTALLED)  # holds libmtls.so.0, the SONAME
    r = run(package.parent, LD_LIBRARY_PATH=lib_dir, PATH=str(bin_dir))
    assert r.returncode == 0 and r.stdout.strip() == "libmtls.so.0", r.stderr
    assert not mark.exists(), mark.read_text()


def test_no_library_anywhere_is_a_clear_import_error_without_running_a_program(package, tmp_path):
    bin_dir, mark = spy_path(tmp_path)
    r = run(package.parent, PATH=str(bin_dir), LD_LIBRARY_PATH=str(tmp_path / "empty"))
    if r.returncode == 0:  # this machine has libmtls installed system-wide: it was found by SONAME
        assert r.stdout.strip() == "libmtls.so.0"
    else:
        assert "ImportError: cannot load libmtls: install it" in r.stderr and "MTLS_LIBRARY" in r.stderr, r.stderr
        assert "libmtls.so.0" in r.stderr
    assert not mark.exists(), mark.read_text()


@pytest.mark.parametrize("number,accepted", [
    (_lib.ABI_VERSION[0] * 10000 + _lib.ABI_VERSION[1] * 100, True),         # the bindings' own ABI
    (_lib.ABI_VERSION[0] * 10000 + _lib.ABI_VERSION[1] * 100 + 7, True),     # a later patch
    (_lib.ABI_VERSION[0] * 10000 + (_lib.ABI_VERSION[1] + 1) * 100, True),   # a later minor adds only
    (_lib.ABI_VERSION[0] * 10000 + (_lib.ABI_VERSION[1] - 1) * 100, False),  # older: lacks what we call
    ((_lib.ABI_VERSION[0] + 1) * 10000, False),                              # another major
])
def test_version_check_refuses_a_library_older_than_the_bindings_abi(number, accepted):
    if accepted:
        _lib.check_version(number, "x", "here")
    else:
        with pytest.raises(ImportError, match="not compatible with these bindings"):
            _lib.check_version(number, "x", "here")


def test_bindings_abi_is_the_loaded_library_version():
    assert _lib.ABI_VERSION == tuple(int(x) for x in mtls.__version__.split(".")[:2])


def test_no_import_inside_a_function():
    """Every module imports what it needs at its top (no cycle forces a lazy import); the only
    exception is mtls.__getattr__, which loads the optional extras (requests, httpx) by name."""
    found = []
    for path in sorted(SRC.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        found.append(f"{path.name}:{inner.lineno} in {node.name}()")
    assert found == []


@pytest.mark.parametrize("module", sorted(p.stem for p in SRC.glob("*.py")
                                          if p.stem not in ("__init__", "requests", "httpx")))
def test_each_module_imports_first_and_alone(module):
    """Importing any module first, in a fresh interpreter, works: no import cycle."""
    r = subprocess.run([sys.executable, "-c", f"import mtls.{module}"], env=dict(os.environ, PYTHONPATH=str(SRC.parent)),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_identity_lives_in_identity_and_keeps_its_old_names():
    from mtls.identity import Identity
    from mtls.pkcs12 import Identity as FromPKCS12, ChainCheck
    assert mtls.Identity is Identity is FromPKCS12 and Identity.__module__ == "mtls.identity"
    assert mtls.ChainCheck is ChainCheck
