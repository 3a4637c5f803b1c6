"""Builds a benchmark's C program (bench/c/<name>.c) against the libmtls installed at a prefix,
the way every bench_*.py does: pkg-config for the flags, the same compiler options for all."""
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def build(name, out_dir, prefix, pkgs=(), libs=()):
    """Compiles bench/c/<name>.c into out_dir/<name> with the flags of `mtls` and `pkgs` from the
    pkg-config files under `prefix`, plus `libs`; returns the executable's path."""
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mtls", *pkgs], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    exe = os.path.join(out_dir, name)
    subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-o", exe,
                    os.path.join(HERE, "c", name + ".c"), *flags, *libs], check=True)
    return exe
