#!/usr/bin/env python3
"""Writes BetterTLS's two certificate-validation suites as x509-limbo suites, so `mtls limbo` can
be scored on them with the same rules as limbo's own cases. Both are rebuilt here with
pyca/cryptography from BetterTLS's description (github.com/Netflix/bettertls, test-suites/).

nameconstraints (8,748 server validations): a trust root, a local root under it, an intermediate
carrying the name constraints (critical), and a leaf. Each case varies the client's hostname
(test.localhost or 127.0.0.1), the leaf's common name (none, or a valid or invalid DNS name or
IP), its DNS and IP SANs (none, valid, invalid) and the intermediate's permitted and excluded DNS
and IP subtrees (none, valid, invalid). The expected result follows BetterTLS's rules; its soft
passes are expected to succeed and its soft failures to fail, as x509-limbo's own BetterTLS import
does. The peer name is given as kind DNS even for the IP, as limbo's import does.

pathbuilding (81 server validations): the trust graphs of RFC 4158 (linear, two roots, figure 7,
the bridge-CA PKI), one certificate per edge, the trusted node replaced by the suite's root, every
certificate but the leaf sent as an untrusted intermediate, in graph order. Some edges are made
invalid (expired, name constraints excluding the host, an e-mail-only EKU, no basicConstraints,
not a CA, ECDSA with SHA-1); a case succeeds exactly when a path of valid edges leads from the
trusted node to the leaf, as BetterTLS decides it.

Usage: scripts/bettertls.py nameconstraints|pathbuilding OUT.json
       scripts/bettertls.py --score OUT.json RESULTS.json   (every case must pass; lists failures)"""
import datetime
import ipaddress
import itertools
import json
import os
import subprocess
import sys
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NONE, VALID, INVALID = 0, 1, 2
VALID_DNS, INVALID_DNS = "test.localhost", "bad.example.com"
VALID_IP, INVALID_IP = "127.0.0.1", "1.1.1.1"
VALID_TREE, INVALID_TREE = "localhost", "example.com"
VALID_RANGE, INVALID_RANGE = ipaddress.ip_network("127.0.0.0/24"), ipaddress.ip_network("1.1.1.0/24")


def expected(host, cn_type, cn, dns_san, ip_san, ipw, dnw, ipb, dnb):
    """BetterTLS's NameConstraintsTestCase.ExpectedResult: PASS, FAIL, SOFT_PASS or SOFT_FAIL."""
    soft_fail = soft_pass = False
    if host == "DNS":
        if dns_san != VALID:
            if cn_type != "DNS" or cn != VALID:
                return "FAIL"
            soft_fail = True
    elif ip_san != VALID:
        if cn_type != "IP" or cn != VALID:
            return "FAIL"
        soft_fail = True
    if host == "DNS" and (dnw == INVALID or dnb == VALID):
        return "FAIL"
    if host == "IP" and (ipw == INVALID or ipb == VALID):
        return "FAIL"
    san_violation = ((dns_san == VALID and (dnw == INVALID or dnb == VALID))
                     or (dns_san == INVALID and (dnw == VALID or dnb == INVALID))
                     or (ip_san == VALID and (ipw == INVALID or ipb == VALID))
                     or (ip_san == INVALID and (ipw == VALID or ipb == INVALID)))
    cn_violation = ((cn_type == "DNS" and cn == VALID and (dnw == INVALID or dnb == VALID))
                    or (cn_type == "DNS" and cn == INVALID and (dnw == VALID or dnb == INVALID))
                    or (cn_type == "IP" and cn == VALID and (ipw == INVALID or ipb == VALID))
                    or (cn_type == "IP" and cn == INVALID and (ipw == VALID or ipb == INVALID)))
    if san_violation:
        soft_fail = True
    elif cn_violation:
        soft_pass = True
    return "SOFT_FAIL" if soft_fail else "SOFT_PASS" if soft_pass else "PASS"


def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def suite_name(suite):
    return "pathbuilding" if suite and suite[0]["id"].startswith("bettertls-pb::") else "name constraints"


def limbo_case(tid, result, description, root, intermediates, leaf, time, peer):
    return {"id": tid, "conflicts_with": [], "features": [], "importance": "undetermined",
            "description": description, "validation_kind": "SERVER",
            "trusted_certs": [pem(root)], "untrusted_intermediates": [pem(c) for c in intermediates],
            "peer_certificate": pem(leaf), "peer_certificate_key": None,
            "validation_time": time.isoformat(), "signature_algorithms": [], "key_usage": [],
            "extended_key_usage": [], "expected_result": "SUCCESS" if result else "FAILURE",
            "expected_peer_name": {"kind": "DNS", "value": peer}, "expected_peer_names": [],
            "max_chain_depth": None, "crls": []}


def write(out, cases):
    with open(out, "w") as f:
        json.dump({"version": 1, "testcases": cases}, f)
    print(f"{len(cases)} cases written to {out}")


def score(suite_path, results_path):
    suite = json.load(open(suite_path))["testcases"]
    actual = {r["id"]: r for r in json.load(open(results_path))["results"]}
    counts = {"pass": 0, "false_accept": 0, "false_reject": 0, "skipped": 0}
    for t in suite:
        r = actual.get(t["id"], {"actual_result": "SKIPPED", "context": "missing"})
        got, want = r["actual_result"], t["expected_result"]
        kind = "pass" if got == want else "skipped" if got == "SKIPPED" else \
            "false_accept" if got == "SUCCESS" else "false_reject"
        counts[kind] += 1
        if kind != "pass":
            print(f"{kind}  {t['id']}  [expected {want}]  {r.get('context', '')[:160]}")
    ok = counts["pass"] == len(suite)
    print(f"bettertls {suite_name(suite)}: {len(suite)} cases, " + ", ".join(f"{k}={v}" for k, v in counts.items()) +
          (" -- ok" if ok else " -- FAILED"))
    return 0 if ok else 1


def nameconstraints(out):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    not_before, not_after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in range(4)]
    root_key, local_key, ica_key, leaf_key = keys
    serial = itertools.count(1000)

    def name(cn):
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bettertls")]
        if cn:
            attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
        attrs.append(x509.NameAttribute(NameOID.SERIAL_NUMBER, str(next(serial))))
        return x509.Name(attrs)

    def make(subject, issuer_name, issuer_key, key, ca, extra=(), issuer_ski=None):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(key.public_key())
             .serial_number(next(serial)).not_valid_before(not_before).not_valid_after(not_after)
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
        if issuer_ski is not None:
            b = b.add_extension(x509.AuthorityKeyIdentifier(issuer_ski.digest, None, None), critical=False)
        if ca:
            b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, False, False, False), critical=True)
        else:
            b = b.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        for ext, critical in extra:
            b = b.add_extension(ext, critical=critical)
        return b.sign(issuer_key, hashes.SHA256())

    root_name = name("bettertls_trust_root")
    root = make(root_name, root_name, root_key, root_key, True)
    ski = lambda k: x509.SubjectKeyIdentifier.from_public_key(k.public_key())  # noqa: E731
    local_name = name("local_root")
    local = make(local_name, root_name, root_key, local_key, True, issuer_ski=ski(root_key))
    icas = {}
    cases = []
    trinary = (NONE, VALID, INVALID)
    for host, cn_type, cn, dns_san, ip_san, dnw, ipw, dnb, ipb in itertools.product(
            ("DNS", "IP"), ("DNS", "IP"), trinary, trinary, trinary, trinary, trinary, trinary, trinary):
        nc = (dnw, ipw, dnb, ipb)
        if nc not in icas:
            permitted, excluded = [], []
            if dnw:
                permitted.append(x509.DNSName(VALID_TREE if dnw == VALID else INVALID_TREE))
            if ipw:
                permitted.append(x509.IPAddress(VALID_RANGE if ipw == VALID else INVALID_RANGE))
            if dnb:
                excluded.append(x509.DNSName(VALID_TREE if dnb == VALID else INVALID_DNS))
            if ipb:
                excluded.append(x509.IPAddress(VALID_RANGE if ipb == VALID else INVALID_RANGE))
            extra = []
            if permitted or excluded:
                extra.append((x509.NameConstraints(permitted or None, excluded or None), True))
            icas[nc] = make(name("local_ica"), local_name, local_key, ica_key, True, extra, issuer_ski=ski(local_key))
        common = None
        if cn:
            common = (VALID_DNS if cn == VALID else INVALID_DNS) if cn_type == "DNS" else (VALID_IP if cn == VALID else INVALID_IP)
        sans = []
        if dns_san:
            sans.append(x509.DNSName(VALID_DNS if dns_san == VALID else INVALID_DNS))
        if ip_san:
            sans.append(x509.IPAddress(ipaddress.ip_address(VALID_IP if ip_san == VALID else INVALID_IP)))
        extra = [(x509.SubjectAlternativeName(sans), False)] if sans else []
        leaf = make(name(common), icas[nc].subject, ica_key, leaf_key, False, extra, issuer_ski=ski(ica_key))
        result = expected(host, cn_type, cn, dns_san, ip_san, ipw, dnw, ipb, dnb)
        tid = f"bettertls-nc::{host}-host::cn-{cn_type}-{cn}::san-dns{dns_san}-ip{ip_san}::nc-pd{dnw}-pi{ipw}-xd{dnb}-xi{ipb}"
        cases.append(limbo_case(tid, result in ("PASS", "SOFT_PASS"), f"BetterTLS name constraints: {result}", root,
                                [icas[nc], local], leaf, not_before + datetime.timedelta(seconds=1),
                                VALID_DNS if host == "DNS" else VALID_IP))
    write(out, cases)


# ---- pathbuilding: BetterTLS's trust graphs (edges: issuer -> subject) and explicit cases.
GRAPHS = {
    "LINEAR": [("ICA", "EE"), ("Trust Anchor", "ICA")],
    "FIGURE_SEVEN": [("B", "EE"), ("C", "B"), ("A", "B"), ("C", "A"), ("A", "C"), ("Trust Anchor", "C"),
                     ("Trust Anchor", "A")],
    "TWO_ROOTS": [("ICA", "EE"), ("Root1", "ICA"), ("Root2", "ICA")],
    "BRIDGE_CA_PKI": [("F", "H"), ("F", "G"), ("G", "F"), ("H", "I"), ("I", "H"), ("G", "I"), ("TA W", "F"),
                      ("TA W", "G"), ("J", "K"), ("N", "EE"), ("L", "N"), ("L", "M"), ("TA X", "J"), ("TA X", "L"),
                      ("B", "E"), ("B", "D"), ("A", "B"), ("C", "B"), ("A", "C"), ("C", "A"), ("TA Y", "A"),
                      ("TA Y", "C"), ("R", "S"), ("O", "R"), ("O", "Q"), ("P", "S"), ("TA Z", "O"), ("TA Z", "P"),
                      ("TA W", "Bridge CA"), ("Bridge CA", "TA W"), ("TA X", "Bridge CA"), ("Bridge CA", "TA X"),
                      ("TA Y", "Bridge CA"), ("Bridge CA", "TA Y"), ("TA Z", "Bridge CA"), ("Bridge CA", "TA Z")],
}
REASONS = ["EXPIRED", "NAME_CONSTRAINTS", "BAD_EKU", "MISSING_BASIC_CONSTRAINTS", "NOT_A_CA", "DEPRECATED_CRYPTO"]
# (graph, trusted node, leaf node, invalid edges, reason or None: every reason)
EXPLICIT = [
    ("LINEAR", "Trust Anchor", "EE", [], None),
    ("LINEAR", "Trust Anchor", "EE", [("Trust Anchor", "ICA")], None),
    ("LINEAR", "ICA", "EE", [("Trust Anchor", "ICA")], None),
    ("TWO_ROOTS", "Root1", "EE", [], None),
    ("TWO_ROOTS", "Root2", "EE", [], None),
    ("TWO_ROOTS", "Root1", "EE", [("Root2", "ICA")], None),
    ("TWO_ROOTS", "Root2", "EE", [("Root1", "ICA")], None),
    ("TWO_ROOTS", "Root1", "EE", [("Root1", "ICA")], None),
    ("TWO_ROOTS", "Root2", "EE", [("Root2", "ICA")], None),
    ("FIGURE_SEVEN", "Trust Anchor", "EE", [], None),
    ("FIGURE_SEVEN", "Trust Anchor", "EE", [("Trust Anchor", "C"), ("A", "B")], None),
    ("FIGURE_SEVEN", "Trust Anchor", "EE", [("Trust Anchor", "A"), ("C", "B")], None),
    ("BRIDGE_CA_PKI", "TA Z", "D", [], None),
    ("BRIDGE_CA_PKI", "TA Z", "EE", [], None),
    ("BRIDGE_CA_PKI", "TA Z", "EE", [("TA X", "Bridge CA")], None),
    ("BRIDGE_CA_PKI", "TA Z", "EE", [("Bridge CA", "TA X")], None),
    ("BRIDGE_CA_PKI", "TA Z", "EE", [("TA Z", "Bridge CA")], None),
]


def reachable(edges, invalid, src, dst, seen=()):
    """BetterTLS's TrustGraph.Reachable: a path of valid edges from src to dst."""
    if src in seen:
        return False
    if src == dst:
        return True
    return any(reachable(edges, invalid, b, dst, seen + (src,)) for a, b in edges if a == src and (a, b) not in invalid)


def sha1_signed(cert, issuer_name, issuer_key, serial):
    """`cert` (signed by its own key, as `openssl x509 -CA` wants it) signed again by the issuer
    with ECDSA-SHA1: pyca no longer signs with SHA-1, the openssl command still does."""
    with tempfile.TemporaryDirectory() as d:
        issuer = (x509.CertificateBuilder().subject_name(issuer_name).issuer_name(issuer_name)
                  .public_key(issuer_key.public_key()).serial_number(1)
                  .not_valid_before(cert.not_valid_before_utc).not_valid_after(cert.not_valid_after_utc)
                  .add_extension(x509.SubjectKeyIdentifier.from_public_key(issuer_key.public_key()), critical=False)
                  .sign(issuer_key, hashes.SHA256()))
        files = {"in.pem": pem(cert), "ca.pem": pem(issuer),
                 "ca.key": issuer_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()).decode()}
        for n, text in files.items():
            with open(os.path.join(d, n), "w") as f:
                f.write(text)
        subprocess.run(["openssl", "x509", "-in", "in.pem", "-CA", "ca.pem", "-CAkey", "ca.key", "-sha1",
                        "-preserve_dates", "-set_serial", str(serial), "-out", "out.pem"], cwd=d, check=True)
        with open(os.path.join(d, "out.pem"), "rb") as f:
            return x509.load_pem_x509_certificate(f.read())


def pathbuilding(out):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    not_before, not_after = now - datetime.timedelta(days=2), now + datetime.timedelta(days=30)
    serial = itertools.count(1)
    root_key = ec.generate_private_key(ec.SECP256R1())
    root_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bettertls"),
                           x509.NameAttribute(NameOID.COMMON_NAME, "bettertls_trust_root")])
    ski = lambda k: x509.SubjectKeyIdentifier.from_public_key(k.public_key())  # noqa: E731
    root = (x509.CertificateBuilder().subject_name(root_name).issuer_name(root_name).public_key(root_key.public_key())
            .serial_number(next(serial)).not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, False, False, False), critical=True)
            .add_extension(ski(root_key), critical=False).sign(root_key, hashes.SHA256()))
    host = "localhost"

    # Cases in BetterTLS's order: the sanity check, the two branching cases, one per invalid
    # reason on the linear graph, then the explicit cases (those with invalid edges, once per reason).
    plan = [("LINEAR", "Trust Anchor", "EE", [], None), ("TWO_ROOTS", "Root1", "EE", [], None),
            ("TWO_ROOTS", "Root2", "EE", [], None)]
    plan += [("LINEAR", "Trust Anchor", "EE", [("Trust Anchor", "ICA")], r) for r in REASONS]
    for g, src, dst, invalid, reason in EXPLICIT:
        plan += [(g, src, dst, invalid, r) for r in REASONS] if invalid and reason is None else [(g, src, dst, invalid, reason)]

    cases = []
    for index, (graph, src, dst, invalid, reason) in enumerate(plan):
        edges = GRAPHS[graph]
        nodes = sorted({n for e in edges for n in e})
        keys = {n: ec.generate_private_key(ec.SECP256R1()) for n in nodes}
        names = {n: x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bettertls"),
                               x509.NameAttribute(NameOID.COMMON_NAME, n),
                               x509.NameAttribute(NameOID.SERIAL_NUMBER, f"{index}-{n}")]) for n in nodes}
        keys[src], names[src] = root_key, root_name
        leaf, intermediates = None, []
        for a, b in edges:
            bad = (a, b) in invalid
            is_leaf = b == dst
            subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bettertls"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, dst),
                                 x509.NameAttribute(NameOID.SERIAL_NUMBER, f"{index}-leaf")]) if is_leaf else names[b]
            until = now - datetime.timedelta(days=1) if bad and reason == "EXPIRED" else not_after
            sha1 = bad and reason == "DEPRECATED_CRYPTO"
            bld = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject if sha1 else names[a])
                   .public_key(keys[b].public_key()).serial_number(next(serial))
                   .not_valid_before(not_before).not_valid_after(until))
            if not sha1:  # openssl x509 -CA adds it from the issuer's subjectKeyIdentifier
                bld = bld.add_extension(x509.AuthorityKeyIdentifier(ski(keys[a]).digest, None, None), critical=False)
            ca = not is_leaf and not (bad and reason == "NOT_A_CA")
            if not (bad and reason == "MISSING_BASIC_CONSTRAINTS"):
                bld = bld.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            if is_leaf:
                bld = (bld.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
                       .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False))
            else:
                bld = (bld.add_extension(x509.KeyUsage(False, False, False, False, False, True, False, False, False), critical=True)
                       .add_extension(ski(keys[b]), critical=False))
            if bad and reason == "BAD_EKU":
                bld = bld.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False)
            elif is_leaf:
                bld = bld.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            if bad and reason == "NAME_CONSTRAINTS":
                bld = bld.add_extension(x509.NameConstraints([x509.DNSName("bad.example.com")], None), critical=True)
            if sha1:
                cert = sha1_signed(bld.sign(keys[b], hashes.SHA256()), names[a], keys[a], next(serial))
            else:
                cert = bld.sign(keys[a], hashes.SHA256())
            if is_leaf:
                leaf = cert
            else:
                intermediates.append(cert)
        ok = reachable(edges, set(invalid), src, dst)
        label = "-".join(f"{a}>{b}" for a, b in invalid).replace(" ", "_") or "none"
        tid = f"bettertls-pb::{index:02d}::{graph.lower()}::trust-{src.replace(' ', '_')}::leaf-{dst}::invalid-{label}::{reason or 'none'}"
        cases.append(limbo_case(tid, ok, f"BetterTLS path building: {'a valid path exists' if ok else 'no valid path'}",
                                root, intermediates, leaf, now, host))
    write(out, cases)


def main():
    if sys.argv[1] == "--score":
        sys.exit(score(sys.argv[2], sys.argv[3]))
    {"nameconstraints": nameconstraints, "pathbuilding": pathbuilding}[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    main()
