"""Ports on 127.0.0.1 for the peers that tests and benchmarks start: the one copy of these helpers,
imported by Tests/e2e, bindings/python/tests and bench."""
import socket
import time


def free_port():
    """A port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=15):
    """Waits until something accepts on 127.0.0.1:port; fails at once if `proc` (when given),
    the peer that should listen there, has exited."""
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the peer for port {port} exited early ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")
