import XCTest
@testable import MTLS

/// The facts written once: key-type names (the header's `MTLS_KEY_TYPE_*`) and the error codes'
/// names. `make test-abi` checks the same against the header and the Python package.
final class ConstantsTests: XCTestCase {
    func testKeyTypesHaveOneSpellingAndAcceptTheReportedNamesAsAliases() throws {
        XCTAssertEqual(KeySpec.issuingNames, ["ec-p256", "ec-p384", "rsa-2048", "rsa-3072", "rsa-4096", "ed25519"])
        for (alias, canonical) in [("rsa2048", "rsa-2048"), ("RSA-3072", "rsa-3072"), ("rsa4096", "rsa-4096"),
                                   ("p256", "ec-p256"), ("P384", "ec-p384"), ("Ed25519", "ed25519")] {
            XCTAssertEqual(try KeySpec(issuingName: alias).issuingName, canonical, alias)
        }
        expectCode(.invalidArgument) { _ = try KeySpec(issuingName: "rsa-1024") }
    }

    func testTokenKeyTypesShareTheIssuingNames() {
        XCTAssertEqual(TokenKeyType.allCases.map(\.rawValue), ["ec-p256", "ec-p384", "rsa-2048", "rsa-3072", "ed25519"])
        XCTAssertEqual(TokenKeyType(rawValue: "rsa2048"), .rsa2048)  // the spelling before 0.2.0
        XCTAssertEqual(TokenKeyType(rawValue: "rsa-3072"), .rsa3072)
        XCTAssertNil(TokenKeyType(rawValue: "rsa-4096"))  // issuing makes it, tokens do not
        XCTAssertNil(TokenKeyType(rawValue: "dsa"))
    }

    func testEveryErrorCodeHasOneNumberAndOneName() {
        let all = MTLSError.Code.all
        XCTAssertEqual(Set(all.map(\.0.rawValue)).count, all.count)
        XCTAssertEqual(Set(all.map(\.1)).count, all.count)
        XCTAssertEqual(MTLSError.Code.limitExceeded.rawValue, -16)
        XCTAssertEqual(MTLSError.Code.limitExceeded.name, "limit_exceeded")
        XCTAssertEqual(MTLSError.Code.pinIncorrect.rawValue, -51)
        XCTAssertEqual(MTLSError.Code.pinRequired.rawValue, -56)
    }
}
