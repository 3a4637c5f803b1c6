#!/usr/bin/env python3
"""Writes the BetterTLS name-constraints matrix (8,754 server validations) as an x509-limbo
suite, so `mtls limbo` can be scored on it with limbo's scorer.

The matrix is BetterTLS's (github.com/Netflix/bettertls, test-suites/nameconstraints), rebuilt
here from its description with pyca/cryptography: a trust root, a local root under it, an
intermediate carrying the name constraints (critical), and a leaf. Each case varies the client's
hostname (test.localhost or 127.0.0.1), the leaf's common name (none, or a valid or invalid DNS
name or IP), its DNS and IP SANs (none, valid, invalid) and the intermediate's permitted and
excluded DNS and IP subtrees (none, valid, invalid). The expected result follows BetterTLS's
rules; its soft passes are expected to succeed and its soft failures to fail, as x509-limbo's own
BetterTLS import does. The peer name is given as kind DNS even for the IP, as limbo's import does.

Usage: scripts/bettertls-nc.py OUT.json
       scripts/bettertls-nc.py --score OUT.json RESULTS.json   (every case must pass; lists failures)"""
import datetime
import ipaddress
import itertools
import json
import sys

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
    print(f"bettertls name constraints: {len(suite)} cases, " + ", ".join(f"{k}={v}" for k, v in counts.items()) +
          (" -- ok" if ok else " -- FAILED"))
    return 0 if ok else 1


def main():
    if sys.argv[1] == "--score":
        sys.exit(score(sys.argv[2], sys.argv[3]))
    out = sys.argv[1]
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
        cases.append({
            "id": tid, "conflicts_with": [], "features": [], "importance": "undetermined",
            "description": f"BetterTLS name constraints: {result}", "validation_kind": "SERVER",
            "trusted_certs": [pem(root)], "untrusted_intermediates": [pem(icas[nc]), pem(local)],
            "peer_certificate": pem(leaf), "peer_certificate_key": None,
            "validation_time": (not_before + datetime.timedelta(seconds=1)).isoformat(),
            "signature_algorithms": [], "key_usage": [], "extended_key_usage": [],
            "expected_result": "SUCCESS" if result in ("PASS", "SOFT_PASS") else "FAILURE",
            "expected_peer_name": {"kind": "DNS", "value": VALID_DNS if host == "DNS" else VALID_IP},
            "expected_peer_names": [], "max_chain_depth": None, "crls": []})
    with open(out, "w") as f:
        json.dump({"version": 1, "testcases": cases}, f)
    print(f"{len(cases)} cases written to {out}")


if __name__ == "__main__":
    main()
