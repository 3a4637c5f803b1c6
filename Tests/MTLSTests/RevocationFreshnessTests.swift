import Foundation
import XCTest
@testable import MTLS

/// The one freshness rule of every revocation answer (issue 35) and the one order of CRLs of an
/// issuer (issue 36), as the revocation checks use them.
final class RevocationFreshnessTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_893_456_000) // 2030-01-01
    let day: TimeInterval = 86400

    func problem(this: Date, next: Date?, maxAge: TimeInterval = RevocationFetchOptions.defaultMaxAge, at time: Date) -> String? {
        do {
            try RevocationFreshness.check("the OCSP response", thisUpdate: this, nextUpdate: next, maxAge: maxAge, time: time)
            return nil
        } catch {
            return (error as? RevocationProblem)?.description ?? "\(error)"
        }
    }

    func testAnAnswerWithoutNextUpdateIsCurrentForTheMaximumAgeOnly() {
        XCTAssertNil(problem(this: now, next: nil, at: now.addingTimeInterval(6 * day)))
        let stale = problem(this: now.addingTimeInterval(-400 * day), next: nil, at: now)
        XCTAssertTrue(stale?.contains("no nextUpdate") == true && stale?.contains("maximum age") == true, stale ?? "accepted")
        XCTAssertNotNil(problem(this: now, next: nil, maxAge: 3600, at: now.addingTimeInterval(3601)))
        XCTAssertEqual(RevocationFreshness.validUntil(thisUpdate: now, nextUpdate: nil, maxAge: 3600), now.addingTimeInterval(3600))
    }

    func testNextUpdateBoundsAnAnswerWhateverItsAge() {
        XCTAssertNil(problem(this: now.addingTimeInterval(-400 * day), next: now.addingTimeInterval(60), at: now))
        let stale = problem(this: now.addingTimeInterval(-2 * day), next: now.addingTimeInterval(-60), at: now)
        XCTAssertTrue(stale?.contains("nextUpdate") == true && stale?.contains("stale") == true, stale ?? "accepted")
    }

    func testAThisUpdateInTheFutureBeyondTheSkewIsRefused() {
        XCTAssertNil(problem(this: now.addingTimeInterval(240), next: nil, at: now))
        XCTAssertTrue(problem(this: now.addingTimeInterval(600), next: nil, at: now)?.contains("not valid yet") == true)
    }

    func testTheMaximumAgeIsBounded() throws {
        var o = RevocationFetchOptions()
        XCTAssertEqual(o.maxAge, 7 * day)
        try o.setMaxAge(seconds: 3600)
        XCTAssertEqual(o.maxAge, 3600)
        try o.setMaxAge(seconds: 0)
        XCTAssertEqual(o.maxAge, 7 * day)
        XCTAssertThrowsError(try o.setMaxAge(seconds: -1))
        XCTAssertThrowsError(try o.setMaxAge(seconds: 400 * 86400))
        XCTAssertThrowsError(try TrustPolicy(json: Array(#"{"revocation": {"mode": "hard", "max_age_seconds": 0}}"#.utf8)))
        XCTAssertEqual(try TrustPolicy(json: Array(#"{"revocation": {"mode": "hard", "max_age_seconds": 60}}"#.utf8)).revocationFetch.maxAge, 60)
    }

    func testCRLsOfOneIssuerAreOrderedByNumberElseThisUpdate() throws {
        let root = try CertificateAuthority.makeRoot(commonName: "Root", key: PrivateKey.generate(.ecP256), now: now)
        let two = try XCTUnwrap(RevocationList.parseAll(try root.makeCRL(revokedSerials: [], number: 2, now: now)).first)
        let ten = try XCTUnwrap(RevocationList.parseAll(try root.makeCRL(revokedSerials: [], number: 10,
                                                                         now: now.addingTimeInterval(-day))).first)
        let big = try XCTUnwrap(RevocationList.parseAll(try root.makeCRL(revokedSerials: [], number: 256, now: now)).first)
        XCTAssertEqual(two.number, [2])
        XCTAssertEqual(big.number, [1, 0])
        // The number decides, not thisUpdate; a longer number is larger.
        XCTAssertTrue(CRLCheck.isOlder(two, than: ten))
        XCTAssertFalse(CRLCheck.isOlder(ten, than: two))
        XCTAssertTrue(CRLCheck.isOlder(ten, than: big))
        XCTAssertFalse(CRLCheck.isOlder(two, than: two))
    }
}
