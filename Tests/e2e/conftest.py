"""Shared fixtures for end-to-end tests: the installed mtls CLI, temp dirs, free ports."""
import os
import socket
import subprocess

import pytest

CLI = os.environ.get("MTLS_CLI", "mtls")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args, check=False, input=None, timeout=60):
    """Runs the mtls CLI; returns the CompletedProcess (text mode)."""
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, input=input,
                          timeout=timeout, check=check)


@pytest.fixture
def cli():
    return run_cli
