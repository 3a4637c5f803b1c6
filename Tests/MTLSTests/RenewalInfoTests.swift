import Foundation
import XCTest
@testable import MTLS
@testable import MTLSEnrollment

/// ACME Renewal Information (RFC 9773) without a server: the certificate identifier (the RFC's
/// own example) and the point picked in a window. Against a server: Tests/e2e/test_renewal.py.
final class RenewalInfoTests: XCTestCase {
    /// RFC 9773 §4.1's example: AKI keyIdentifier 69:88:5B:...:C8:D4 and serial 0x87654321 (its
    /// top bit set, so the DER INTEGER's content octets start with a zero).
    static let rfcExample = """
-----BEGIN CERTIFICATE-----
MIIBYjCCAQigAwIBAgIFAIdlQyEwCgYIKoZIzj0EAwIwDjEMMAoGA1UEAwwDYXJp
MB4XDTI2MTEyNjEzNTM1MVoXDTI2MTIwMTEzNTM1MVowDjEMMAoGA1UEAwwDYXJp
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE67WOpc2lHNNzzjSQ94AchsAqyQ2S
x7/K6oYpqdYF3BNN1jFo5quw4FEXrsnuXDQvvQgAH8/f2niGI3gUUEEtBaNTMFEw
DwYDVR0TAQH/BAUwAwEB/zAdBgNVHQ4EFgQUaYhba4dGQEHhs3uEe6CuLN4ByNQw
HwYDVR0jBBgwFoAUaYhba4dGQEHhs3uEe6CuLN4ByNQwCgYIKoZIzj0EAwIDSAAw
RQIhAIjDZq6fEYuPz6By9uDXmygxqFD3O4cmhJdCHABsYjawAiBIvWptrXJgxi1f
Oja9wfH38Xq6XzPoypzZpeGkqPQbAQ==
-----END CERTIFICATE-----
"""
    /// No authority key identifier (made with `-addext authorityKeyIdentifier=none`).
    static let noAKI = """
-----BEGIN CERTIFICATE-----
MIIBNDCB26ADAgECAhR5NQvc/OGbOiCDG8L77In3i4cscjAKBggqhkjOPQQDAjAQ
MQ4wDAYDVQQDDAVub2FraTAeFw0yNjExMjYxMzUzNTRaFw0yNjEyMDExMzUzNTRa
MBAxDjAMBgNVBAMMBW5vYWtpMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE2izw
pu3x/UeYlANT8JPBCC2oHY6u6lz+0Tyld3TStJmWNwUcCbvJTz0O8rf0x5mDh2sa
CFGomi66eYtbnATYb6MTMBEwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNI
ADBFAiEA/+vZkcR07Xpr/lWnWJk+AgqrxsIo6U5PaTPvj2jr/40CIF43hJS5reEi
H46wxugNhwVZHanC3IhNG+Yw2b82Fup2
-----END CERTIFICATE-----
"""

    func testIdentifierIsTheRFCExample() throws {
        let cert = try XCTUnwrap(Certificate.parseAll(Array(RenewalInfoTests.rfcExample.utf8)).first)
        XCTAssertEqual(try ACMERenewalInfo.identifier(of: cert), "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
    }

    func testCertificateWithoutAKIHasNoIdentifier() throws {
        let cert = try XCTUnwrap(Certificate.parseAll(Array(RenewalInfoTests.noAKI.utf8)).first)
        expectCode(.unsupported) { _ = try ACMERenewalInfo.identifier(of: cert) }
    }

    func testChosenTimeIsInTheWindowAndTheSameForTheSameCertificate() throws {
        let a = try XCTUnwrap(Certificate.parseAll(Array(RenewalInfoTests.rfcExample.utf8)).first)
        let b = try XCTUnwrap(Certificate.parseAll(Array(RenewalInfoTests.noAKI.utf8)).first)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let info = ACMERenewalInfo(identifier: "x", windowStart: start, windowEnd: start.addingTimeInterval(86400),
                                   retryAfter: nil, explanationURL: nil)
        let ta = info.chosenTime(for: a), tb = info.chosenTime(for: b)
        for t in [ta, tb] { XCTAssertTrue(t >= info.windowStart && t <= info.windowEnd) }
        XCTAssertEqual(info.chosenTime(for: a), ta)
        XCTAssertNotEqual(ta, tb)  // spread by each certificate's hash
    }

    func testRFC3339TimesWithAndWithoutFractions() {
        XCTAssertEqual(ACMEClient.parseTime("2025-01-02T04:00:00Z")?.timeIntervalSince1970, 1_735_790_400)
        XCTAssertEqual(ACMEClient.parseTime("2025-01-02T04:00:00.500Z")?.timeIntervalSince1970, 1_735_790_400.5)
        XCTAssertNil(ACMEClient.parseTime("tomorrow"))
    }

    /// Without Retry-After the ACME poll starts at a quarter second and doubles to a cap (it was
    /// a flat second, which made every renewal a second slower).
    func testPollDelayStartsShortAndBacksOffToACap() {
        XCTAssertEqual(ACMEClient.pollDelay(attempt: 0), 0.25)
        XCTAssertEqual(ACMEClient.pollDelay(attempt: 1), 0.5)
        XCTAssertEqual(ACMEClient.pollDelay(attempt: 2), 1.0)
        XCTAssertEqual(ACMEClient.pollDelay(attempt: 4), ACMEClient.maxPollDelay)
        XCTAssertEqual(ACMEClient.pollDelay(attempt: 1000), ACMEClient.maxPollDelay)
        XCTAssertEqual(ACMEClient.pollDelay(attempt: -3), 0.25)
    }
}
