import Foundation
import XCTest
@testable import MTLS

/// Issued certificates judged by libmtls's own evaluator: accepted for their purpose under the
/// pinned anchors, refused for the wrong purpose, another customer, or once revoked.
final class IssuingTrustTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_893_456_000) // 2030-01-01

    func testIssuedChainsAreTrustedForTheirPurposeOnly() throws {
        let root = try CertificateAuthority.makeRoot(commonName: "Root", key: PrivateKey.generate(.ecP256), now: now)
        let a = try root.issueIntermediate(commonName: "Customer A", key: PrivateKey.generate(.ecP256), now: now)
        let b = try root.issueIntermediate(commonName: "Customer B", key: PrivateKey.generate(.ecP256), now: now)
        let server = try a.issue(CertificateRequest(profile: .server, commonName: "api.a.internal",
                                                    dnsNames: ["api.a.internal"], ipAddresses: ["127.0.0.1"]),
                                 for: PrivateKey.generate(.ecP256), now: now)
        let alice = try a.issue(CertificateRequest(profile: .client, commonName: "alice"), for: PrivateKey.generate(.ecP256), now: now)
        let mallory = try b.issue(CertificateRequest(profile: .client, commonName: "mallory"), for: PrivateKey.generate(.ecP256), now: now)
        let later = now.addingTimeInterval(3600)

        // The client's view: the root pinned, anchors only, the server validated by name and by IP.
        let clientPolicy = TrustPolicy(anchors: [root.certificate], anchorsOnly: true)
        XCTAssertTrue(clientPolicy.evaluate(chain: [server, a.certificate], host: "api.a.internal", at: later).trusted)
        XCTAssertTrue(clientPolicy.evaluate(chain: [server, a.certificate], host: "127.0.0.1", at: later).trusted)
        XCTAssertFalse(clientPolicy.evaluate(chain: [server, a.certificate], host: "other.internal", at: later).trusted)
        // A client certificate presented as a server certificate is refused.
        let aliceAsServer = clientPolicy.evaluate(chain: [alice, a.certificate], host: "api.a.internal", purpose: .serverAuth, at: later)
        XCTAssertFalse(aliceAsServer.trusted)
        XCTAssertTrue(aliceAsServer.reasonCodes.contains(TrustReason.Code.wrongPurpose), "\(aliceAsServer.reasons)")

        // The server's view: only Customer A's intermediate is an anchor.
        let serverPolicy = TrustPolicy(anchors: [a.certificate], anchorsOnly: true, purpose: .clientAuth, nameCheck: .none)
        XCTAssertTrue(serverPolicy.evaluate(chain: [alice], host: nil, at: later).trusted)
        XCTAssertFalse(serverPolicy.evaluate(chain: [mallory, b.certificate], host: nil, at: later).trusted)
        XCTAssertFalse(serverPolicy.evaluate(chain: [server], host: nil, at: later).trusted)

        // Revoked by Customer A's CRL: refused.
        let crl = try a.makeCRL(revocations: [Revocation(serialHex: alice.serialHex, date: now)], number: 1, now: now)
        let withCRL = TrustPolicy(anchors: [a.certificate], anchorsOnly: true, purpose: .clientAuth, nameCheck: .none,
                                  crls: try RevocationList.parseAll(crl))
        let revoked = withCRL.evaluate(chain: [alice], host: nil, at: later)
        XCTAssertFalse(revoked.trusted)
        XCTAssertTrue(revoked.reasons.contains { $0.code.contains("revoked") }, "\(revoked.reasons)")
    }
}
