"""A Python ssl server that asks for the client's certificate only after the handshake (TLS 1.3
post-handshake authentication, as Apache httpd does for a per-location SSLVerifyClient): the one
copy, used by Tests/e2e and bindings/python/tests."""
import socket
import ssl
import threading


def start(chain, key, root):
    """Serves one client on 127.0.0.1: reads its request, asks for its certificate, writes
    b"asked\\n" (the CertificateRequest goes out with it), reads the client's answer, then writes
    b"hello <CN>\\n". Returns (port, seen, thread); `seen` gets "request", "during handshake" (the
    certificate then: None), "after" (the subject's CN) or "error"."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(str(chain), str(key))
    ctx.load_verify_locations(str(root))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.post_handshake_auth = True  # no certificate asked for during the handshake
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(15)
    seen = {}

    def serve():
        try:
            raw, _ = sock.accept()
            with ctx.wrap_socket(raw, server_side=True) as s:
                s.settimeout(5)
                seen["request"] = s.recv(100)
                seen["during handshake"] = s.getpeercert()
                s.verify_client_post_handshake()
                s.sendall(b"asked\n")
                s.settimeout(0.5)
                try:
                    s.recv(100)  # reads the client's Certificate, CertificateVerify and Finished
                except TimeoutError:
                    pass
                seen["after"] = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
                s.sendall(f"hello {seen['after']}\n".encode())
                # close_notify ends the reply cleanly (without it, the client reads a truncated
                # reply); its own close_notify back is not waited for.
                try:
                    s.unwrap()
                except (ssl.SSLError, OSError):
                    pass
        except Exception as e:  # noqa: BLE001 - reported to the test
            seen["error"] = e
        finally:
            sock.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return sock.getsockname()[1], seen, t
