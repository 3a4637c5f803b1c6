"""A renewal reaching a client that follows its store label (issues 26 and 27, client side): an
identity enrolled from a local `mtls pki` directory as a client, followed by an
mtls.IdentitySource in the same process; mtls.Renewer renews it through the same Store: the
source puts the new identity in force within a second ("identity_rotated"), and the next
connection to a Python ssl server that requires client certificates presents it, in full (the
session made with the old identity is not resumed)."""
import hashlib
import socket
import ssl
import threading
import time

import mtls

from conftest import run_cli, write_secret


def test_a_renewed_client_identity_reaches_the_next_connection(tmp_path):
    pki = tmp_path / "pki"
    write_secret(tmp_path / "secret", "rotation secret\n")
    store = ["--store", tmp_path / "store.db", "--secret-file", tmp_path / "secret"]
    assert run_cli("pki", "init", "--dir", pki, "--name", "Rr Root").returncode == 0
    assert run_cli("pki", "intermediate", "--dir", pki, "--name", "Rr CA").returncode == 0
    assert run_cli("pki", "issue", "server", "--dir", pki, "--ca", "Rr CA", "--name", "srv", "--dns",
                   "server.test").returncode == 0
    r = run_cli("enroll", "pki", "--dir", pki, "--ca", "Rr CA", "--name", "device-1", "--label", "device",
                "--profile", "client", *store)
    assert r.returncode == 0, r.stdout + r.stderr

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    issued = pki / "ca" / "rr-ca" / "issued" / "srv"
    ctx.load_cert_chain(issued / "chain.pem", issued / "key.pem")
    ctx.load_verify_locations(pki / "root" / "cert.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    listening = ctx.wrap_socket(socket.create_server(("127.0.0.1", 0)), server_side=True)
    seen = []

    def serve():
        while True:
            try:
                c, _ = listening.accept()
            except ssl.SSLError as e:
                seen.append(e)
                continue
            except OSError:
                return
            with c:
                c.recv(1)
                seen.append((hashlib.sha256(c.getpeercert(binary_form=True)).hexdigest(), c.session_reused))
                c.sendall(b"k")
                try:
                    c.unwrap()
                except (OSError, ValueError):
                    pass

    threading.Thread(target=serve, daemon=True).start()
    port = listening.getsockname()[1]
    policy = mtls.Policy(anchors=[mtls.Certificate.load(pki / "root" / "cert.pem")], anchors_only=True)

    def connect(source):
        with mtls.Connection.connect("127.0.0.1", port, identity_source=source, policy=policy,
                                     verify_as="server.test", handshake_timeout=10, io_timeout=10) as c:
            c.write(b"x")
            assert c.read(1) == b"k"
            return c.presented_identity.leaf.sha256_hex, c.resumed

    try:
        with mtls.Store(tmp_path / "store.db", secret_file=tmp_path / "secret") as st:
            source = mtls.IdentitySource.follow(st, "device")
            events = []
            source.set_event_callback(events.append)
            old = st.info("device").leaf_sha256
            assert connect(source) == (old, False)
            assert connect(source) == (old, True)  # the same identity resumes
            renewed, _ = mtls.Renewer(st, "device").run_once(force=True)
            assert renewed == 1
            new = st.info("device").leaf_sha256
            assert new != old
            # The identity is put in force first and the event is delivered after it (on the
            # watcher's thread): wait for both, not just the first, or a loaded machine sees the
            # new identity before its event.
            def rotated():
                return (source.current.leaf.sha256_hex == new
                        and any(e.kind == "identity_rotated" for e in events))
            deadline = time.monotonic() + 10
            while not rotated() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert source.current.leaf.sha256_hex == new
            assert [e.kind for e in events if e.kind != "expiry_warning"] == ["identity_rotated"], events
            assert connect(source) == (new, False)
    finally:
        listening.close()
    assert [s for s in seen] == [(old, False), (old, True), (new, False)]
