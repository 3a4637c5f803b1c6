import Foundation
import XCTest
@testable import MTLS

/// SoftHSM2 tokens of their own for the PIN-safety tests (their flags are what the tests read):
///   pin-holder: id 01 "pin-key" P-256 key with its certificate
///   pin-other:  id 01 "other-key" P-256 key with its certificate (an object pin-holder lacks)
///   pin-empty:  no objects
///   pin-final:  id 01 "final-key", and the token reports CKF_USER_PIN_FINAL_TRY
/// User PIN 1234 everywhere.
enum PINSafetyFixture {
    static let dir: String = {
        let dir = try! TestPKI.tempDir()
        let module = SoftHSMFixture.module
        let script = """
            set -e
            cd '\(dir)'
            mkdir -p tokens
            printf 'directories.tokendir = %s/tokens\\nobjectstore.backend = file\\nlog.level = ERROR\\nslots.removable = false\\n' "$PWD" > softhsm2.conf
            export SOFTHSM2_CONF=$PWD/softhsm2.conf
            for t in pin-holder pin-other pin-empty pin-final; do
                softhsm2-util --init-token --free --label $t --pin 1234 --so-pin 5678 >/dev/null
            done
            put() { # token label
                openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $2.key -out $2.pem \\
                    -subj "/CN=$2" -days 30 2>/dev/null
                openssl pkcs8 -topk8 -nocrypt -in $2.key -outform DER -out $2.key.der
                openssl x509 -in $2.pem -outform DER -out $2.der
                pkcs11-tool --module '\(module)' --token-label $1 --login --pin 1234 --write-object $2.key.der \\
                    --type privkey --id 01 --label $2 >/dev/null 2>&1
                pkcs11-tool --module '\(module)' --token-label $1 --login --pin 1234 --write-object $2.der \\
                    --type cert --id 01 --label $2 >/dev/null 2>&1
            }
            put pin-holder pin-key
            put pin-other other-key
            put pin-final final-key
            """
        try! TestPKI.sh(script)
        return dir
    }()

    /// Sets CKF_USER_PIN_FINAL_TRY on pin-final as a token at its final try reports it (SoftHSM
    /// never sets it itself, and a good login clears it): CKA_OS_TOKENFLAGS (0x8000534b, an
    /// 8-byte big-endian CK_ULONG after its type tag) |= 0x20000.
    static func markFinalTry() throws {
        try TestPKI.sh("""
            cd '\(dir)'
            python3 - "$(grep -l pin-final tokens/*/token.object)" <<'PY'
            import sys
            path = sys.argv[1]
            data = bytearray(open(path, "rb").read())
            tag = bytes.fromhex("000000008000534b0000000000000002")
            at = data.find(tag) + len(tag)
            assert at >= len(tag)
            flags = int.from_bytes(data[at:at + 8], "big") | 0x20000
            data[at:at + 8] = flags.to_bytes(8, "big")
            open(path, "wb").write(data)
            PY
            """)
    }
}

final class TokenPINSafetyTests: XCTestCase {
    var module: String { SoftHSMFixture.module }

    override func setUpWithError() throws {
        setenv("SOFTHSM2_CONF", PINSafetyFixture.dir + "/softhsm2.conf", 1)
        guard FileManager.default.fileExists(atPath: module) else {
            throw MTLSError(.notFound, "SoftHSM2 is not installed at \(module): run scripts/install-deps.sh")
        }
        TokenLogin.forgetRefusedPINs()
        try clearCountLow("pin-holder")
        try clearCountLow("pin-other")
    }

    override func tearDown() {
        setenv("SOFTHSM2_CONF", SoftHSMFixture.dir + "/softhsm2.conf", 1)
    }

    private func token(_ label: String) throws -> TokenInfo {
        try XCTUnwrap(PKCS11Modules(modulePath: module).tokens().first { $0.label == label }, label)
    }

    /// A good login clears the token's "wrong PINs were entered" flag.
    private func clearCountLow(_ label: String) throws {
        _ = try PKCS11Modules(modulePath: module).objects(tokenURI: "pkcs11:token=\(label)", pin: SecretBytes("1234"))
    }

    func testWrongStaticPINIsSentOnceUntilItChanges() throws {
        let uri = "pkcs11:token=pin-holder;object=pin-key?pin-value=0000"
        XCTAssertFalse(try token("pin-holder").userPINCountLow)
        XCTAssertThrowsError(try Token.identity(uri: uri, modulePath: module)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinIncorrect, "\($0)")
        }
        XCTAssertTrue(try token("pin-holder").userPINCountLow, "the wrong PIN reached the token")
        try clearCountLow("pin-holder")
        // The same PIN from the same source again (an unattended client's next handshake): refused
        // here, never sent, so the token counts no second wrong PIN.
        for _ in 0..<3 {
            XCTAssertThrowsError(try Token.identity(uri: uri, modulePath: module)) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .pinIncorrect, "\($0)")
                XCTAssertTrue("\($0)".contains("not sent again"), "\($0)")
            }
        }
        XCTAssertFalse(try token("pin-holder").userPINCountLow, "a refused static PIN was sent again")
        // A PIN file works the same way; a changed file is a new PIN and is sent.
        let pinFile = PINSafetyFixture.dir + "/pin-\(UUID().uuidString)"
        try TestPKI.writeSecret("0001\n", to: pinFile)
        let fileURI = "pkcs11:token=pin-holder;object=pin-key?pin-source=\(pinFile)"
        XCTAssertThrowsError(try Token.identity(uri: fileURI, modulePath: module))
        try clearCountLow("pin-holder")
        XCTAssertThrowsError(try Token.identity(uri: fileURI, modulePath: module)) {
            XCTAssertTrue("\($0)".contains("not sent again"), "\($0)")
        }
        XCTAssertFalse(try token("pin-holder").userPINCountLow)
        try TestPKI.writeSecret("1234\n", to: pinFile)
        let identity = try Token.identity(uri: fileURI, modulePath: module)
        XCTAssertEqual(identity.leaf.subjectSummary, "pin-key")
        // A PIN given by the caller is a static source too.
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=pin-other;object=other-key", modulePath: module, pin: SecretBytes("9999")))
        try clearCountLow("pin-other")
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=pin-other;object=other-key", modulePath: module, pin: SecretBytes("9999"))) {
            XCTAssertTrue("\($0)".contains("not sent again"), "\($0)")
        }
        XCTAssertFalse(try token("pin-other").userPINCountLow)
    }

    func testPINCallbackIsAskedAgainAfterAWrongPIN() throws {
        let asked = LockedBox(0)
        for _ in 0..<2 {
            XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=pin-other;object=other-key", modulePath: module) { _ in
                asked.mutate { $0 += 1 }
                return SecretBytes("4321")
            })
        }
        XCTAssertEqual(asked.value, 2, "a person typing a PIN may type it again")
    }

    func testPINGoesOnlyToTheTokenThatHoldsTheObject() throws {
        // No token= in the URI: four tokens match it, only pin-other holds "other-key".
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:object=other-key", modulePath: module, pin: SecretBytes("0000"))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinIncorrect, "\($0)")
        }
        XCTAssertTrue(try token("pin-other").userPINCountLow)
        XCTAssertFalse(try token("pin-holder").userPINCountLow, "the PIN went to a token without the object")
        XCTAssertFalse(try token("pin-empty").userPINCountLow, "the PIN went to a token without the object")
        let identity = try Token.identity(uri: "pkcs11:object=other-key", modulePath: module, pin: SecretBytes("1234"))
        XCTAssertEqual(identity.leaf.subjectSummary, "other-key")
        // An object no token shows: no PIN is sent anywhere.
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:object=nowhere", modulePath: module, pin: SecretBytes("0000"))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .notFound, "\($0)")
        }
        XCTAssertFalse(try token("pin-holder").userPINCountLow)
        XCTAssertFalse(try token("pin-empty").userPINCountLow)
    }

    func testStaticPINIsNotSentAtTheFinalTryUnlessAllowed() throws {
        try PINSafetyFixture.markFinalTry()
        XCTAssertTrue(try token("pin-final").userPINFinalTry)
        let uri = "pkcs11:token=pin-final;object=final-key?pin-value=1234"
        XCTAssertThrowsError(try Token.identity(uri: uri, modulePath: module)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinLocked, "\($0)")
            XCTAssertTrue("\($0)".contains("final"), "\($0)")
        }
        let identity = try Token.identity(uri: uri, modulePath: module, allowFinalTry: true)
        XCTAssertEqual(identity.leaf.subjectSummary, "final-key")
    }

    func testPINCallbackIsToldTheTokenFlags() throws {
        try PINSafetyFixture.markFinalTry()
        let requests = LockedBox<[TokenPINRequest]>([])
        _ = try Token.identity(uri: "pkcs11:token=pin-final;object=final-key", modulePath: module) { request in
            requests.mutate { $0.append(request) }
            return SecretBytes("1234")
        }
        let request = try XCTUnwrap(requests.value.first)
        XCTAssertEqual(requests.value.count, 1)
        XCTAssertTrue(request.finalTry)
        XCTAssertTrue(request.token.userPINFinalTry)
        XCTAssertTrue(request.token.loginRequired)
        XCTAssertTrue(request.token.userPINInitialized)
        XCTAssertEqual(request.token.label, "pin-final")
    }
}
