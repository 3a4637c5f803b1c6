// The core enums whose raw values are a header macro family (issue 25, one place for each fact):
// Swift raw values must be literals, so they are written twice; this test is what keeps the two
// the same. Each `macro` closure is an exhaustive switch, so a new case does not compile until
// its macro is named here, and every case's raw value is compared with that macro.
import XCTest
import CMTLSHeader
@testable import MTLS

final class HeaderEnumTests: XCTestCase {
    /// Every case of `E` has the raw value of the header macro `macro` gives for it.
    private func assertRawValuesAreTheHeaders<E: CaseIterable & RawRepresentable>(
        _ type: E.Type, _ family: String, file: StaticString = #filePath, line: UInt = #line,
        macro: (E) -> Int32) where E.RawValue: BinaryInteger {
        for c in E.allCases {
            XCTAssertEqual(Int(c.rawValue), Int(macro(c)), "\(E.self).\(c) differs from the header's \(family) macro",
                           file: file, line: line)
        }
    }

    func testStoreItemClassRawValuesAreTheHeadersMTLSStoreMacros() {
        assertRawValuesAreTheHeaders(StoreItemClass.self, "MTLS_STORE_*") {
            switch $0 {
            case .identity: MTLS_STORE_IDENTITY
            case .certificate: MTLS_STORE_CERTIFICATE
            case .tokenIdentity: MTLS_STORE_TOKEN_IDENTITY
            }
        }
    }

    func testLifecycleEventKindRawValuesAreTheHeadersMTLSEventMacros() {
        assertRawValuesAreTheHeaders(LifecycleEventKind.self, "MTLS_EVENT_*") {
            switch $0 {
            case .identityRotated: MTLS_EVENT_IDENTITY_ROTATED
            case .policyReloaded: MTLS_EVENT_POLICY_RELOADED
            case .reloadFailed: MTLS_EVENT_RELOAD_FAILED
            case .expiryWarning: MTLS_EVENT_EXPIRY_WARNING
            case .renewalScheduled: MTLS_EVENT_RENEWAL_SCHEDULED
            case .renewalSucceeded: MTLS_EVENT_RENEWAL_SUCCEEDED
            case .renewalFailed: MTLS_EVENT_RENEWAL_FAILED
            case .renewalNotInstalled: MTLS_EVENT_RENEWAL_NOT_INSTALLED
            case .revocationFetchFailed: MTLS_EVENT_REVOCATION_FETCH_FAILED
            }
        }
    }

    func testClientAuthenticationRawValuesAreTheHeadersMTLSClientAuthMacros() {
        assertRawValuesAreTheHeaders(ClientAuthentication.self, "MTLS_CLIENT_AUTH_*") {
            switch $0 {
            case .none: MTLS_CLIENT_AUTH_NONE
            case .optional: MTLS_CLIENT_AUTH_OPTIONAL
            case .require: MTLS_CLIENT_AUTH_REQUIRE
            }
        }
    }

    func testTLSVersionRawValuesAreTheHeadersMTLSTLSMacros() {
        assertRawValuesAreTheHeaders(TLSVersion.self, "MTLS_TLS_*") {
            switch $0 {
            case .tls12: MTLS_TLS_1_2
            case .tls13: MTLS_TLS_1_3
            }
        }
    }
}
