"""A listener's counters under clients that go wrong (issue 26): each refusal counted under its
reason (untrusted, peer_alert, handshake, timeout), connections open never negative nor left
behind after clients that drop mid-handshake, and the Prometheus text saying the same."""
import socket
import ssl
import threading
import time

import mtls

from conftest import anchored, identity


def wait_counters(listener, want, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        c = listener.counters
        if all(c[k] == v for k, v in want.items()):
            return c
        time.sleep(0.02)
    return listener.counters


def context(pki, certificate=True, trusting="root.pem"):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(str(pki / trusting))
    if certificate:
        (pki / "client-a-full.pem").write_text((pki / "client-a.pem").read_text() + (pki / "int-a.pem").read_text())
        ctx.load_cert_chain(str(pki / "client-a-full.pem"), str(pki / "client-a.key"))
    return ctx


def test_refusals_are_counted_by_reason_and_connections_never_leak(pki):
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"),
                             handshake_timeout=1.5, first_byte_timeout=1)
    port = listener.port
    held = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(listener.accept(timeout=0.5))
            except mtls.MTLSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        def connect():
            return socket.create_connection(("127.0.0.1", port), timeout=10)

        # Accepted, and held open by the application: one connection open.
        s = context(pki).wrap_socket(connect())
        s.write(b"x")
        c = wait_counters(listener, {"accepted": 1, "current_connections": 1})
        assert (c["accepted"], c["current_connections"], c["refused"]) == (1, 1, 0)
        s.close()

        # No certificate where one is required: untrusted.
        try:
            with context(pki, certificate=False).wrap_socket(connect()) as s:
                s.write(b"x")
                s.read()
        except (ssl.SSLError, OSError):
            pass
        wait_counters(listener, {"refused": 1})
        assert listener.refused_count(mtls.Untrusted) == 1

        # The client refuses our certificate: its alert.
        try:
            context(pki, trusting="other-root.pem").wrap_socket(connect()).close()
        except ssl.SSLError:
            pass
        wait_counters(listener, {"refused": 2})
        assert listener.refused_count(mtls.PeerAlert) == 1

        # Not TLS; a ClientHello cut short then a close; then a reset; a ClientHello sent whole and
        # the connection dropped before the end of the handshake: handshake failures, each once.
        with connect() as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.recv(100)
        with connect() as s:
            s.sendall(b"\x16\x03\x01\x02\x00\x01")
        s = connect()
        s.sendall(b"\x16\x03\x01\x02\x00\x01")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
        raw, incoming, outgoing = connect(), ssl.MemoryBIO(), ssl.MemoryBIO()
        half = context(pki).wrap_bio(incoming, outgoing)
        try:
            half.do_handshake()
        except ssl.SSLWantReadError:
            pass
        raw.sendall(outgoing.read())
        raw.recv(65536)
        raw.close()
        wait_counters(listener, {"refused": 6})
        assert listener.refused_count(mtls.HandshakeError) == 4

        # A ClientHello begun and never finished: the handshake timeout.
        with connect() as s:
            s.sendall(b"\x16\x03\x01\x02\x00\x01")
            wait_counters(listener, {"refused": 7}, seconds=5)
        assert listener.refused_count(mtls.Timeout) == 1

        # A client that never sends a byte is no handshake: nothing counted.
        with connect():
            time.sleep(1.3)  # past the 1 s first-byte timeout: the time passing is what is tested

        # The one accepted connection counts as open until the application closes it.
        assert listener.counters["current_connections"] == 1
        for conn in held:
            conn.close()
        c = wait_counters(listener, {"current_connections": 0})
        assert c == {"accepted": 1, "resumed": 0, "refused": 7, "current_connections": 0}, c
        text = listener.metrics()
        for line in ('mtls_listener_handshakes_refused_total{reason="untrusted"} 1',
                     'mtls_listener_handshakes_refused_total{reason="peer_alert"} 1',
                     'mtls_listener_handshakes_refused_total{reason="handshake"} 4',
                     'mtls_listener_handshakes_refused_total{reason="timeout"} 1',
                     "mtls_listener_connections 0"):
            assert line in text.splitlines(), text
    finally:
        stop.set()
        t.join(5)
        listener.close()
