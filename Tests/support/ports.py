"""Ports on 127.0.0.1 for the peers that tests and benchmarks start: the one copy of these helpers,
imported by Tests/e2e, bindings/python/tests and bench."""
import fcntl
import os
import random
import socket
import tempfile
import time

# Ports handed out by free_port, one file each, shared by every test worker and run of this user:
# a port is not handed out again while its claim is younger than _CLAIM_SECONDS.
_CLAIMS = os.path.join(tempfile.gettempdir(), f"mtls-test-ports-{os.getuid()}")
_CLAIM_SECONDS = 1800


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
    Chosen at random and claimed (see _claim): a port free now is bound later by its peer, and
    another worker could otherwise pick it meanwhile (pebble-challtestsrv then found its port
    taken, and the hook's requests went to the other worker's server)."""
    low, high = _ephemeral_range()
    ports = range(10000, low) if low - 10000 >= 2000 else range(high + 1, 65536)
    for _ in range(500):
        port = random.choice(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (listening, or a connection's local port)
        if _claim(port):
            return port
    with socket.socket() as s:  # every try in use: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _claim(port):
    """Claims `port` for this worker unless another claimed it less than _CLAIM_SECONDS ago (one
    lock serializes the workers' claims)."""
    os.makedirs(_CLAIMS, mode=0o700, exist_ok=True)
    path = os.path.join(_CLAIMS, str(port))
    with open(os.path.join(_CLAIMS, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if time.time() - os.stat(path).st_mtime < _CLAIM_SECONDS:
                return False
        except FileNotFoundError:
            pass
        with open(path, "w"):
            pass
        os.utime(path)
        return True


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
