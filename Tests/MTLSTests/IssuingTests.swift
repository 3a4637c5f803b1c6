import Foundation
import XCTest
@testable import MTLS
@testable import MTLSX509

final class IssuingTests: XCTestCase {
    /// A fixed clock: 2030-01-01T00:00:00Z.
    let now = Date(timeIntervalSince1970: 1_893_456_000)

    func makeChain(_ spec: KeySpec = .ecP256) throws -> (root: CertificateAuthority, inter: CertificateAuthority) {
        let root = try CertificateAuthority.makeRoot(commonName: "Test Root", key: PrivateKey.generate(spec), now: now)
        let inter = try root.issueIntermediate(commonName: "Customer A", key: PrivateKey.generate(spec), now: now)
        return (root, inter)
    }

    func testRootIsASelfSignedCAWithSKIAndTwentyYears() throws {
        let root = try makeChain().root.certificate
        XCTAssertTrue(root.isSelfSigned)
        XCTAssertEqual(root.basicConstraints, BasicConstraints(isCA: true, pathLength: nil, critical: true))
        XCTAssertEqual(root.keyUsage, [.keyCertSign, .cRLSign])
        XCTAssertEqual(root.version, 3)
        XCTAssertEqual(root.notBefore, now.addingTimeInterval(-300))
        XCTAssertEqual(root.notAfter.timeIntervalSince(now), TimeInterval(CertificateProfile.root.defaultValidityDays) * 86400)
        XCTAssertEqual(root.signatureAlgorithm, "ecdsa-with-SHA256")
    }

    func testIntermediateHasPathLengthZeroAndTenYears() throws {
        let inter = try makeChain().inter.certificate
        XCTAssertEqual(inter.basicConstraints, BasicConstraints(isCA: true, pathLength: 0, critical: true))
        XCTAssertEqual(inter.keyUsage, [.keyCertSign, .cRLSign])
        XCTAssertEqual(inter.issuer, "CN=Test Root")
        XCTAssertEqual(inter.notAfter.timeIntervalSince(now), TimeInterval(CertificateProfile.intermediate.defaultValidityDays) * 86400)
    }

    func testServerCertificateCarriesServerAuthAndNames() throws {
        let (_, inter) = try makeChain()
        let key = try PrivateKey.generate(.ecP256)
        let leaf = try inter.issue(CertificateRequest(profile: .server, commonName: "api.example.com",
                                                      dnsNames: ["api.example.com", "*.api.example.com"],
                                                      ipAddresses: ["127.0.0.1", "::1"]), for: key, now: now)
        XCTAssertEqual(leaf.extendedKeyUsages, [ExtendedKeyUsage.serverAuth])
        XCTAssertEqual(leaf.keyUsage, [.digitalSignature])
        XCTAssertEqual(leaf.basicConstraints?.isCA, false)
        XCTAssertEqual(leaf.subjectAltNames.map(\.description),
                       ["DNS:api.example.com", "DNS:*.api.example.com", "IP:127.0.0.1", "IP:::1"])
        XCTAssertEqual(leaf.notAfter.timeIntervalSince(now), TimeInterval(3 * 365 + 1) * 86400)
        XCTAssertTrue(key.matches(leaf))
    }

    func testRSAServerKeyAlsoGetsKeyEncipherment() throws {
        let (_, inter) = try makeChain()
        let leaf = try inter.issue(CertificateRequest(profile: .server, commonName: "s", dnsNames: ["s.example"]),
                                   for: PrivateKey.generate(.rsa(bits: 2048)), now: now)
        XCTAssertEqual(leaf.keyUsage, [.digitalSignature, .keyEncipherment])
    }

    func testClientCertificateCarriesClientAuthOnly() throws {
        let (_, inter) = try makeChain()
        let leaf = try inter.issue(CertificateRequest(profile: .client, commonName: "alice", validityDays: 30),
                                   for: PrivateKey.generate(.ed25519), now: now)
        XCTAssertEqual(leaf.extendedKeyUsages, [ExtendedKeyUsage.clientAuth])
        XCTAssertEqual(leaf.keyType, .ed25519)
        XCTAssertEqual(leaf.notAfter.timeIntervalSince(now), 30 * 86400)
    }

    func testEveryKeyKindSignsAndIsSigned() throws {
        for name in KeySpec.issuingNames where name != "rsa-4096" && name != "rsa-3072" {
            let (root, inter) = try makeChain(try KeySpec(issuingName: name))
            let leaf = try inter.issue(CertificateRequest(profile: .client, commonName: "c"),
                                       for: PrivateKey.generate(try KeySpec(issuingName: name)), now: now)
            XCTAssertTrue(root.certificate.isSelfSigned, name)
            let chain = Identity.buildChain(from: leaf, using: [root.certificate, inter.certificate]).0
            XCTAssertEqual(chain, [inter.certificate, root.certificate], name)
        }
    }

    func testSerialsAreRandomPositiveAndUpTo128Bits() throws {
        let (_, inter) = try makeChain()
        let key = try PrivateKey.generate(.ecP256)
        var serials = Set<String>()
        for _ in 0..<20 {
            let c = try inter.issue(CertificateRequest(profile: .client, commonName: "c"), for: key, now: now)
            XCTAssertLessThanOrEqual(c.serialHex.count, 32)
            serials.insert(c.serialHex)
        }
        XCTAssertEqual(serials.count, 20)
    }

    func testLeafNeverOutlivesItsIssuer() throws {
        let root = try CertificateAuthority.makeRoot(commonName: "Short Root", key: PrivateKey.generate(.ecP256),
                                                     validityDays: 10, now: now)
        let leaf = try root.issue(CertificateRequest(profile: .client, commonName: "c", validityDays: 365),
                                  for: PrivateKey.generate(.ecP256), now: now)
        XCTAssertEqual(leaf.notAfter, root.certificate.notAfter)
    }

    func testBadRequestsAreRefusedWithInvalidArgument() throws {
        let (root, inter) = try makeChain()
        let key = try PrivateKey.generate(.ecP256)
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .server, commonName: "s"), for: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .server, commonName: "s", dnsNames: ["bad name"]), for: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .server, commonName: "s", dnsNames: ["a,DNS:evil.com"]), for: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .server, commonName: "s", ipAddresses: ["300.1.1.1"]), for: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .client, commonName: ""), for: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .client, commonName: String(repeating: "x", count: 65)), for: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try inter.issue(CertificateRequest(profile: .client, commonName: "c", validityDays: 0), for: key, now: self.now) }
        // pathlen 0: an intermediate cannot make another CA.
        expectCode(.invalidArgument) { _ = try inter.issueIntermediate(commonName: "Sub", key: key, now: self.now) }
        expectCode(.invalidArgument) { _ = try root.issue(CertificateRequest(profile: .root, commonName: "r"), for: key, now: self.now) }
        // A leaf is not a CA; a key that does not match is refused.
        let leaf = try inter.issue(CertificateRequest(profile: .client, commonName: "c"), for: key, now: now)
        expectCode(.invalidArgument) { _ = try CertificateAuthority(certificate: leaf, privateKey: key) }
        expectCode(.keyMismatch) { _ = try CertificateAuthority(certificate: inter.certificate, privateKey: key) }
        expectCode(.invalidArgument) { _ = try KeySpec(issuingName: "rsa-1024") }
    }

    func testCRLListsRevokedSerialsAndVerifiesWithOpenSSL() throws {
        let dir = try TestPKI.tempDir()
        let pki = PKIDirectory(path: dir)
        _ = try pki.initRoot(commonName: "Root")
        _ = try pki.makeIntermediate(commonName: "Customer A")
        let alice = try pki.issue(CertificateRequest(profile: .client, commonName: "alice"), caName: "Customer A")
        let bob = try pki.issue(CertificateRequest(profile: .client, commonName: "bob"), caName: "Customer A")
        try pki.revoke(alice.identity.leaf, caName: "Customer A", reason: .keyCompromise, keyPassword: nil)
        expectCode(.duplicate) { try pki.revoke(alice.identity.leaf, caName: "Customer A", keyPassword: nil) }
        XCTAssertEqual(try pki.revocations(caName: "Customer A").map(\.serialHex), [alice.identity.leaf.serialHex])
        let crl = "\(dir)/ca/customer-a/crl.pem"
        let check = "openssl verify -crl_check -CRLfile \(crl) -CAfile \(dir)/root/cert.pem -untrusted \(dir)/ca/customer-a/cert.pem"
        XCTAssertNoThrow(try TestPKI.sh("\(check) \(bob.certificatePath)"))
        XCTAssertThrowsError(try TestPKI.sh("\(check) \(alice.certificatePath)"))
        let text = try TestPKI.sh("openssl crl -in \(crl) -noout -text")
        XCTAssertTrue(text.contains("Key Compromise"), text)
        XCTAssertTrue(text.contains("CRL Number"), text)
        // A certificate from another intermediate cannot be revoked here.
        _ = try pki.makeIntermediate(commonName: "Customer B")
        let carol = try pki.issue(CertificateRequest(profile: .client, commonName: "carol"), caName: "Customer B")
        expectCode(.invalidArgument) { try pki.revoke(carol.identity.leaf, caName: "Customer A", keyPassword: nil) }
        let inventory = try pki.inventory()
        XCTAssertEqual(inventory.map { "\($0.profile.rawValue):\($0.certificate.subjectSummary):\($0.revocation != nil)" },
                       ["root:Root:false", "intermediate:Customer A:false", "client:alice:true", "client:bob:false",
                        "intermediate:Customer B:false", "client:carol:false"])
    }

    func testFolderKeysAre0600AndEncryptedWithAPassword() throws {
        let dir = try TestPKI.tempDir()
        let pki = PKIDirectory(path: dir)
        let pw = SecretBytes("kp")
        let root = try pki.initRoot(commonName: "Root", keyPassword: pw)
        let keyText = String(decoding: try FileIO.read(root.keyPath), as: UTF8.self)
        XCTAssertTrue(keyText.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        let attrs = try FileManager.default.attributesOfItem(atPath: root.keyPath)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        expectCode(.badPassword) { _ = try pki.makeIntermediate(commonName: "A") }
        expectCode(.badPassword) { _ = try pki.makeIntermediate(commonName: "A", keyPassword: SecretBytes("wrong")) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/ca/a"))
        _ = try pki.makeIntermediate(commonName: "A", keyPassword: pw)
        expectCode(.duplicate) { _ = try pki.initRoot(commonName: "Again") }
        expectCode(.duplicate) { _ = try pki.makeIntermediate(commonName: "A", keyPassword: pw) }
        expectCode(.notFound) { _ = try pki.issue(CertificateRequest(profile: .client, commonName: "c"), caName: "Nope", keyPassword: pw) }
        // Nothing temporary is left behind.
        let leftovers = try FileManager.default.subpathsOfDirectory(atPath: dir).filter { $0.contains(".tmp-") }
        XCTAssertEqual(leftovers, [])
    }
}
