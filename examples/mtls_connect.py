#!/usr/bin/env python3
"""mtls_connect.py: a mutual-TLS request from Python through libmtls.

Presents a client identity (a .p12 file, or a label in a libmtls store), trusts only a pinned
anchor, validates the server as a DNS name even when connecting by IP, sends one request and
prints the reply, the server's chain and libmtls's evaluation of it.

  PYTHONPATH=bindings/python/src python3 examples/mtls_connect.py 127.0.0.1:8443 \\
      --p12 alice.p12 --password-file p12.pw --anchor root.pem --verify-as api.customer-a.internal
  python3 examples/mtls_connect.py 127.0.0.1:8443 --store store.db --secret-file store.secret \\
      --label alice --anchor root.pem --verify-as api.customer-a.internal
"""
import argparse
import sys

import mtls


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", help="HOST:PORT")
    ap.add_argument("--p12"), ap.add_argument("--password-file")
    ap.add_argument("--store"), ap.add_argument("--secret-file"), ap.add_argument("--label")
    ap.add_argument("--anchor", required=True, help="the pinned root, intermediate or server certificate")
    ap.add_argument("--verify-as", help="validate the server as this name")
    ap.add_argument("--send", default="GET / HTTP/1.0\r\n\r\n")
    args = ap.parse_args()
    host, _, port = args.target.rpartition(":")

    if args.p12:
        password = open(args.password_file).readline().rstrip("\r\n") if args.password_file else None
        identity = mtls.Identity.load_pkcs12(args.p12, password)
    elif args.store and args.secret_file and args.label:
        with mtls.Store(args.store, secret_file=args.secret_file, create=False) as store:
            identity = store[args.label]
    else:
        ap.error("give --p12, or --store, --secret-file and --label")

    # Only the pinned anchor(s); the server is validated as --verify-as (else the host).
    policy = mtls.Policy(anchors=[args.anchor], anchors_only=True, verify_as=args.verify_as)

    try:
        with mtls.connect(host.strip("[]"), int(port), identity=identity, policy=policy,
                          handshake_timeout=10, io_timeout=10) as conn:
            print(f"connected: {conn.tls_version}, resumed: {conn.resumed}")
            for i, cert in enumerate(conn.peer_chain):
                print(f"  peer[{i}] {cert.subject}")
            print(f"evaluation: {'trusted' if conn.evaluation.trusted else 'NOT trusted'}")
            conn.write(args.send.encode())
            reply = b""
            while True:
                chunk = conn.read()
                if not chunk:
                    break
                reply += chunk
            sys.stdout.write(reply.decode("utf-8", "replace"))
    except mtls.TrustError as e:  # our policy refused the server: libmtls's reasons
        print(f"mtls_connect: {e.name}: {e.message}", file=sys.stderr)
        for r in e.reasons:
            print(f"  {r.code}: {r.message}", file=sys.stderr)
        return 1
    except mtls.Error as e:  # PeerAlert, ConnectError, Timeout, BadPassword...
        print(f"mtls_connect: {e.name}: {e.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
