"""Records what a real TLS server (Python ssl, OpenSSL underneath) sends to a client, as seeds of
the fuzz_tls_client target: one file per protocol version holding the server's bytes of the
first flight(s). Usage: record_server.py DATA_DIR OUT_DIR."""
import os, socket, ssl, sys, threading

data, out = sys.argv[1], sys.argv[2]


def record(version, name):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ctx.maximum_version = version
    ctx.load_cert_chain(os.path.join(data, "server.pem"), os.path.join(data, "server.key"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(os.path.join(data, "ca.pem"))
    a, b = socket.socketpair()
    # The "client" is a plain ssl client over b; we capture what the server writes to it.
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.check_hostname = False
    cctx.verify_mode = ssl.CERT_NONE
    captured = bytearray()
    srv_in, srv_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    cli_in, cli_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = ctx.wrap_bio(srv_in, srv_out, server_side=True)
    c = cctx.wrap_bio(cli_in, cli_out, server_hostname="localhost")
    for _ in range(6):
        for obj in (c, s):
            try:
                obj.do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass
        srv_in.write(cli_out.read())
        chunk = srv_out.read()
        captured += chunk
        cli_in.write(chunk)
    a.close(); b.close()
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(captured))


record(ssl.TLSVersion.TLSv1_3, "tls13-flight")
record(ssl.TLSVersion.TLSv1_2, "tls12-flight")
