"""Ports on 127.0.0.1 for the peers that tests and benchmarks start: the one copy of these helpers,
imported by Tests/e2e, bindings/python/tests and bench."""
import random
import socket
import time


def _ephemeral_range():
    """The kernel's range of local ports for outgoing connections (and for a bind to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port():
    """A port nothing listens on now, on 127.0.0.1, for a peer that binds it itself. Outside the
    kernel's ephemeral range: a port from that range (a bind to port 0, closed) can be taken by
    any connection the machine makes meanwhile as its local port (the other test workers make
    thousands), and the peer then fails to bind (`openssl ocsp` exits, gnutls-serv never listens).
    Chosen at random, so that workers do not pick the same one."""
    low, high = _ephemeral_range()
    ports = range(10000, low) if low - 10000 >= 2000 else range(high + 1, 65536)
    for _ in range(500):
        port = random.choice(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (listening, or a connection's local port)
            return port
    with socket.socket() as s:  # every try in use: the kernel's choice
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
