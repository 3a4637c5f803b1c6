import Foundation
import XCTest
@testable import MTLS
@testable import MTLSEnrollment
import COpenSSL

/// The parts of enrollment that need no CA: JWS encoding, the tls-alpn-01 certificate, the
/// enrollment record in the store, the renewal schedule, URL parsing of hostile input, and the
/// proof a renewed identity must pass. The protocol against a real ACME server is in
/// Tests/e2e/test_enroll.py (pebble).
final class EnrollmentTests: XCTestCase {
    func testES256SignatureIsRawRAndSAndVerifiesWithOpenSSL() throws {
        let key = try PrivateKey.generate(.ecP256)
        let input = Array("header.payload".utf8)
        let sig = try JWS.es256(input, key: key)
        XCTAssertEqual(sig.count, 64)
        // Re-encode r || s as DER with OpenSSL and verify with the public key.
        let ecdsa = try XCTUnwrap(ECDSA_SIG_new())
        defer { ECDSA_SIG_free(ecdsa) }
        let r = BN_bin2bn(sig, 32, nil), s = sig.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        XCTAssertEqual(ECDSA_SIG_set0(ecdsa, r, s), 1)
        let der = try XCTUnwrap(derEncode { i2d_ECDSA_SIG(ecdsa, $0) })
        let md = try XCTUnwrap(EVP_MD_CTX_new())
        defer { EVP_MD_CTX_free(md) }
        XCTAssertEqual(EVP_DigestVerifyInit_ex(md, nil, "SHA256", LibraryContext.shared.ctx, nil, key.pkey, nil), 1)
        XCTAssertEqual(EVP_DigestVerify(md, der, der.count, input, input.count), 1)
        var tampered = input
        tampered[0] ^= 1
        XCTAssertEqual(EVP_MD_CTX_reset(md), 1)
        XCTAssertEqual(EVP_DigestVerifyInit_ex(md, nil, "SHA256", LibraryContext.shared.ctx, nil, key.pkey, nil), 1)
        XCTAssertNotEqual(EVP_DigestVerify(md, der, der.count, tampered, tampered.count), 1)
    }

    func testAccountKeyMustBeP256() throws {
        XCTAssertThrowsError(try JWS.jwk(PrivateKey.generate(.ecP384))) { XCTAssertEqual(($0 as? MTLSError)?.code, .unsupported) }
        let jwk = try JWS.jwk(PrivateKey.generate(.ecP256)).text
        XCTAssertTrue(jwk.hasPrefix("{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\""), jwk)
    }

    func testBase64URLRoundTripsWithoutPadding() {
        let bytes: [UInt8] = [0xfb, 0xff, 0xfe, 0x00, 0x3e]
        let text = Base64URL.encode(bytes)
        XCTAssertFalse(text.contains("=") || text.contains("+") || text.contains("/"))
        XCTAssertEqual(Base64URL.decode(text), bytes)
        XCTAssertNil(Base64URL.decode("a=b"))
    }

    func testTLSALPNCertificateCarriesTheCriticalAcmeIdentifier() throws {
        let identity = try ChallengeResponder.alpnIdentity(identifier: "a.test", keyAuthorization: "token.thumb")
        XCTAssertEqual(identity.leaf.subjectAltNames, [.dns("a.test")])
        let oid = try XCTUnwrap(OBJ_txt2obj("1.3.6.1.5.5.7.1.31", 1))
        defer { ASN1_OBJECT_free(oid) }
        let index = X509_get_ext_by_OBJ(identity.leaf.x509, oid, -1)
        XCTAssertGreaterThanOrEqual(index, 0)
        let ext = try XCTUnwrap(X509_get_ext(identity.leaf.x509, index))
        XCTAssertEqual(X509_EXTENSION_get_critical(ext), 1)
        let data = try XCTUnwrap(X509_EXTENSION_get_data(ext))
        let value = Array(UnsafeBufferPointer(start: ASN1_STRING_get0_data(data), count: Int(ASN1_STRING_length(data))))
        XCTAssertEqual(value, [0x04, 0x20] + Encoding.sha256(Array("token.thumb".utf8)))
        let ip = try ChallengeResponder.alpnIdentity(identifier: "192.0.2.7", keyAuthorization: "k")
        XCTAssertEqual(ip.leaf.subjectAltNames, [.ip("192.0.2.7")])
    }

    func testEnrollmentRecordIsKeptSealedBesideTheIdentity() throws {
        let dir = try TestPKI.tempDir()
        let store = try CredentialStore(path: dir + "/s.db", secret: .passphrase(SecretBytes("pw")), options: {
            var o = CredentialStore.Options(); o.kdf.logN = 10; return o
        }())
        let record = EnrollmentRecord(source: "acme", url: "https://ca.test/dir", account: "https://ca.test/acct/1",
                                      identifiers: ["a.test", "192.0.2.1"], keyType: "p256", tokenURI: nil,
                                      challenge: ACMEChallengeMethod.tlsALPN01(address: "127.0.0.1", port: 8443).recorded,
                                      profile: "server", directoryAnchors: [], chainAnchors: [], enrolledAt: 1)
        let account = try PrivateKey.generate(.ecP256)
        try store.putIdentity(try record.carrier(key: account), label: EnrollmentRecord.label(for: "web"))
        XCTAssertEqual(try store.enrollmentRecord(label: "web"), record)
        XCTAssertEqual(try store.enrollmentRecordAndKey(label: "web").accountKey.matches(try store.identity(label: "mtls-enrollment:web").leaf), true)
        XCTAssertEqual(try store.enrolledLabels(), ["web"])
        XCTAssertEqual(try ACMEChallengeMethod(recorded: record.challenge ?? ""), .tlsALPN01(address: "127.0.0.1", port: 8443))
        XCTAssertThrowsError(try store.enrollmentRecord(label: "other")) { XCTAssertEqual(($0 as? MTLSError)?.code, .notFound) }

        // The record (and its account key) is never offered to a server by automatic selection.
        let other = try CertificateAuthority.newRoot(commonName: "plain client")
        try store.putIdentity(other, label: "plain")
        guard case .candidates(let candidates) = try ClientIdentity.automatic(from: store) else { return XCTFail("not candidates") }
        XCTAssertEqual(candidates.map(\.leaf), [other.leaf])
        // Issue 35 item 4: nor by the store's identities (mtls_store_identities and Python's
        // Store.identities() are this call), nor counted among expiring certificates.
        XCTAssertEqual(try store.identities().map(\.leaf), [other.leaf])
        XCTAssertEqual(try store.list(itemClass: .identity).filter(\.isEnrollmentRecord).map(\.label), ["mtls-enrollment:web"])
        XCTAssertFalse(try store.expiry().contains { $0.label == "mtls-enrollment:web" })
    }

    /// Issue 37: an EST password kept for re-enrollment is sealed under the record's key and bound
    /// to its URL and user: it opens with that key only, is not in the carrier certificate in the
    /// clear, and a record with another URL (a moved record) does not open it.
    func testKeptESTPasswordIsSealedUnderTheRecordKey() throws {
        var record = EnrollmentRecord(source: "est", url: "https://est.test/.well-known/est", account: "device",
                                      identifiers: ["CN=d"], keyType: "p256", tokenURI: nil, challenge: nil, profile: "client",
                                      directoryAnchors: [], chainAnchors: [], enrolledAt: 0)
        XCTAssertFalse(record.keepsPassword)
        XCTAssertNil(try record.keptPassword(recordKey: PrivateKey.generate(.ecP256)))
        let key = try PrivateKey.generate(.ecP256)
        try record.keep(password: SecretBytes(Array("enroll-me".utf8)), recordKey: key)
        XCTAssertTrue(record.keepsPassword)
        try record.keptPassword(recordKey: key)?.withBytes { XCTAssertEqual(Array($0), Array("enroll-me".utf8)) }
        let carrier = try record.carrier(key: key)
        XCTAssertNil(carrier.leaf.der.firstRange(of: Array("enroll-me".utf8)))
        XCTAssertEqual(try EnrollmentRecord.read(carrier: carrier.leaf).keptPassword(recordKey: key)?.count, 9)
        XCTAssertThrowsError(try record.keptPassword(recordKey: PrivateKey.generate(.ecP256))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .corrupt)
        }
        var moved = record
        moved.url = "https://elsewhere.test/.well-known/est"
        XCTAssertThrowsError(try moved.keptPassword(recordKey: key)) { XCTAssertEqual(($0 as? MTLSError)?.code, .corrupt) }
    }

    func testRenewalIsDueAtTwoThirdsOfTheLifetimeLessJitter() throws {
        let cert = try CertificateAuthority.newRoot(commonName: "R", validityDays: 90).leaf
        let lifetime = cert.notAfter.timeIntervalSince(cert.notBefore)
        XCTAssertEqual(Enrollment.dueDate(cert, jitter: false).timeIntervalSince(cert.notBefore), lifetime * 2 / 3, accuracy: 1)
        for _ in 0..<50 {
            let due = Enrollment.dueDate(cert).timeIntervalSince(cert.notBefore)
            XCTAssertLessThanOrEqual(due, lifetime * 2 / 3 + 1)
            XCTAssertGreaterThanOrEqual(due, lifetime * (2.0 / 3 - 0.05) - 1)
        }
        XCTAssertLessThanOrEqual(Enrollment.backoff(attempt: 100), 3600 * 1.2)
        XCTAssertGreaterThanOrEqual(Enrollment.backoff(attempt: 1), 30 * 0.8)
    }

    func testHostileURLsAreRefusedNotTrapped() {
        for bad in ["http://a/", "https://", "https://[::1/", "https://a:0/", "https://a:99999/", "https://u@a/", "https://a/ b",
                    "https://:443/"] {
            XCTAssertThrowsError(try httpsParts(bad), bad)
        }
        XCTAssertEqual(try httpsParts("https://[::1]:8443/dir").host, "::1")
        XCTAssertEqual(try httpsParts("https://ca.test").target, "/")
    }

    func testProofRefusesAKeyThatIsNotTheCertificatesAndAChainOutsideThePolicy() throws {
        let ca = try CertificateAuthority.makeRoot(commonName: "Proof Root", key: PrivateKey.generate(.ecP256))
        let key = try PrivateKey.generate(.ecP256)
        let leaf = try ca.issue(CertificateRequest(profile: .server, commonName: "p.test", dnsNames: ["p.test"]), for: key)
        let record = EnrollmentRecord(source: "pki", url: "/x", account: "CA", identifiers: ["p.test"], keyType: "p256", tokenURI: nil,
                                      challenge: nil, profile: "server", directoryAnchors: [],
                                      chainAnchors: EnrollmentRecord.encode([ca.certificate]), enrolledAt: 0)
        XCTAssertNoThrow(try Enrollment.prove(key: key, leaf: leaf, chain: [ca.certificate], record: record, policy: nil))
        XCTAssertThrowsError(try Enrollment.prove(key: PrivateKey.generate(.ecP256), leaf: leaf, chain: [ca.certificate],
                                                  record: record, policy: nil)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .challengeFailed)
        }
        let other = try CertificateAuthority.newRoot(commonName: "Other Root").leaf
        XCTAssertThrowsError(try Enrollment.prove(key: key, leaf: leaf, chain: [ca.certificate], record: record,
                                                  policy: TrustPolicy(anchors: [other], anchorsOnly: true))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .challengeFailed)
        }
    }
}
