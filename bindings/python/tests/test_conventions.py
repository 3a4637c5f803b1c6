"""One convention for timeouts and limits in every front end (issue 25): as in C and in the core's
TLSDefaults, 0 (like None) is the library's default and a negative value is no limit. Python's
max_handshakes_per_address=0 used to mean "no limit" and a timeout of 0 one millisecond."""
import asyncio
import threading

import mtls
import mtls.asyncio
from mtls import tls
from conftest import anchored, identity


def _listener_options_sent(monkeypatch, pki, **kwargs):
    """The mtls_listener_options a Listener built with `kwargs` hands to mtls_listener_new."""
    sent = {}
    real = tls.lib.mtls_listener_new

    def spy(address, port, opts, out):
        o = opts._obj  # ctypes.byref's target: the structure itself
        sent.update(max_handshakes_per_address=o.max_handshakes_per_address,
                    first_byte_timeout_ms=o.first_byte_timeout_ms, handshake_timeout_ms=o.handshake_timeout_ms,
                    io_timeout_ms=o.io_timeout_ms, client_hello_timeout_ms=o.client_hello_timeout_ms,
                    ipv6_source_prefix_length=o.ipv6_source_prefix_length)
        return real(address, port, opts, out)

    monkeypatch.setattr(tls.lib, "mtls_listener_new", spy)
    with mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"), **kwargs):
        pass
    return sent


def test_listener_zero_is_the_default_and_negative_no_limit_as_in_c(monkeypatch, pki):
    zero = _listener_options_sent(monkeypatch, pki, max_handshakes_per_address=0, first_byte_timeout=0,
                                  handshake_timeout=0, io_timeout=0, client_hello_timeout=0, ipv6_source_prefix_length=0)
    assert zero == dict(max_handshakes_per_address=0, first_byte_timeout_ms=0, handshake_timeout_ms=0,
                        io_timeout_ms=0, client_hello_timeout_ms=0, ipv6_source_prefix_length=0)
    # C's 0: the core's default (32 handshakes, 5 s, 30 s, none, 10 s, /64)
    none = _listener_options_sent(monkeypatch, pki, max_handshakes_per_address=-1, first_byte_timeout=-1,
                                  handshake_timeout=float("inf"), io_timeout=-5, client_hello_timeout=-1,
                                  ipv6_source_prefix_length=-1)
    assert none == dict(max_handshakes_per_address=-1, first_byte_timeout_ms=-1, handshake_timeout_ms=-1,
                        io_timeout_ms=-1, client_hello_timeout_ms=-1, ipv6_source_prefix_length=-1)
    given = _listener_options_sent(monkeypatch, pki, max_handshakes_per_address=3, first_byte_timeout=0.25,
                                   client_hello_timeout=1.5, ipv6_source_prefix_length=56)
    assert given["max_handshakes_per_address"] == 3 and given["first_byte_timeout_ms"] == 250
    assert given["client_hello_timeout_ms"] == 1500 and given["ipv6_source_prefix_length"] == 56
    assert _listener_options_sent(monkeypatch, pki)["max_handshakes_per_address"] == 0  # not given: the default


def test_library_defaults_are_read_from_the_library_not_retyped():
    assert tls.default_timeout("connect_timeout_ms") > 0
    assert tls.effective_timeout(0, "handshake_timeout_ms") == tls.default_timeout("handshake_timeout_ms")
    assert tls.effective_timeout(None, "connect_timeout_ms") == mtls.asyncio.DEFAULT_TIMEOUT
    assert tls.effective_timeout(-1, "connect_timeout_ms") is None
    assert tls.effective_timeout(float("inf"), "connect_timeout_ms") is None
    assert tls.effective_timeout(2.5, "connect_timeout_ms") == 2.5


def _echo_listener(pki):
    listener = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))

    def serve():
        with listener.accept(timeout=30) as c:
            c.write(c.read())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return listener, t


def test_zero_timeouts_of_a_connection_are_the_defaults_not_a_millisecond(pki):
    listener, t = _echo_listener(pki)
    with listener:
        with mtls.connect("127.0.0.1", listener.port, identity=identity(pki, "client-a"),
                          policy=anchored(pki, "root.pem"), verify_as="server.test",
                          connect_timeout=0, handshake_timeout=0, io_timeout=0) as c:
            c.write(b"zero")
            assert c.read() == b"zero"
        t.join(10)


def test_zero_timeouts_of_asyncio_open_connection_are_the_defaults(pki):
    listener, t = _echo_listener(pki)

    async def main():
        r, w = await mtls.asyncio.open_connection("127.0.0.1", listener.port, identity=identity(pki, "client-a"),
                                                  policy=anchored(pki, "root.pem"), verify_as="server.test",
                                                  connect_timeout=0, handshake_timeout=0)
        w.write(b"zero")
        await w.drain()
        assert await r.read(4) == b"zero"
        w.close()
        await w.wait_closed()

    with listener:
        asyncio.run(asyncio.wait_for(main(), 60))
        t.join(10)
