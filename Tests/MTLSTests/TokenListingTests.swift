import Foundation
import XCTest
@testable import MTLS

/// Token listing through p11-kit against a SoftHSM2 token made in a temporary folder.
final class TokenListingTests: XCTestCase {
    static let module = "/usr/lib/softhsm/libsofthsm2.so"

    /// A token "swift-test" (user PIN 1234) holding a client key and certificate under id 07.
    func makeToken() throws -> (dir: String, leaf: Certificate) {
        guard FileManager.default.fileExists(atPath: Self.module) else {
            throw MTLSError(.notFound, "SoftHSM2 is not installed at \(Self.module): run scripts/install-deps.sh")
        }
        let dir = try TestPKI.tempDir()
        try FileManager.default.createDirectory(atPath: dir + "/tokens", withIntermediateDirectories: true)
        try "directories.tokendir = \(dir)/tokens\nobjectstore.backend = file\nlog.level = ERROR\n"
            .write(toFile: dir + "/softhsm2.conf", atomically: true, encoding: .utf8)
        setenv("SOFTHSM2_CONF", dir + "/softhsm2.conf", 1)
        try TestPKI.sh("softhsm2-util --init-token --free --label swift-test --so-pin 5678 --pin 1234")
        let pki = PKIDirectory(path: dir + "/pki")
        _ = try pki.initRoot(commonName: "Token Root")
        _ = try pki.makeIntermediate(commonName: "Customer T")
        let item = try pki.issue(CertificateRequest(profile: .client, commonName: "token-user"), caName: "Customer T")
        try TestPKI.sh("""
            openssl pkcs8 -topk8 -nocrypt -in \(item.keyPath) -outform DER -out \(dir)/key.der && \
            openssl x509 -in \(item.certificatePath) -outform DER -out \(dir)/cert.der && \
            pkcs11-tool --module \(Self.module) --login --pin 1234 --write-object \(dir)/key.der --type privkey --id 07 --label token-user && \
            pkcs11-tool --module \(Self.module) --login --pin 1234 --write-object \(dir)/cert.der --type cert --id 07 --label token-user
            """)
        return (dir, item.identity.leaf)
    }

    func testListsTheTokenAndItsObjectsWithURIs() throws {
        let (_, leaf) = try makeToken()
        let modules = try PKCS11Modules(modulePath: Self.module)
        let tokens = try modules.tokens()
        XCTAssertEqual(tokens.map(\.label), ["swift-test"])
        XCTAssertTrue(tokens[0].uri.hasPrefix("pkcs11:") && tokens[0].uri.contains("token=swift-test"), tokens[0].uri)
        XCTAssertTrue(tokens[0].loginRequired)

        let publicOnly = try modules.objects()
        XCTAssertEqual(publicOnly.map(\.kind), [.certificate])
        XCTAssertEqual(publicOnly[0].certificate, leaf)
        XCTAssertEqual(publicOnly[0].id, [0x07])
        XCTAssertTrue(publicOnly[0].uri.contains("id=%07") && publicOnly[0].uri.contains("type=cert"), publicOnly[0].uri)

        let all = try modules.objects(tokenURI: "pkcs11:token=swift-test", pin: SecretBytes("1234"))
        XCTAssertTrue(all.contains { $0.kind == .privateKey && $0.label == "token-user" && $0.id == [0x07] })
    }

    // MARK: A PIN goes to one token (issue 23, defect 8)

    /// A second token "swift-other" (user PIN 4321) beside `makeToken`'s, holding a certificate
    /// under id 08.
    func addOtherToken(_ dir: String) throws {
        try TestPKI.sh("""
            softhsm2-util --init-token --free --label swift-other --so-pin 5678 --pin 4321 >/dev/null && \
            pkcs11-tool --module \(Self.module) --token-label swift-other --login --pin 4321 --write-object \(dir)/cert.der --type cert --id 08 --label other-user >/dev/null
            """)
    }

    /// Whether the token labelled `label` has seen a wrong PIN (SoftHSM sets CKF_USER_PIN_COUNT_LOW
    /// after a failed login), read through a fresh module load.
    func sawAWrongPIN(_ label: String) throws -> Bool {
        try XCTUnwrap(try PKCS11Modules(modulePath: Self.module).tokens().first { $0.label == label }).userPINCountLow
    }

    func testAListingPINGoesOnlyToTheTokenNamedOrHoldingTheObject() throws {
        let (dir, _) = try makeToken()
        try addOtherToken(dir)
        let pinA = SecretBytes("1234")
        // No token named: the PIN is refused before any token sees it (the old code logged in to
        // every token, and the other token counted a wrong PIN).
        expectCode(.invalidArgument) { _ = try PKCS11Modules(modulePath: Self.module).objects(pin: pinA) }
        expectCode(.invalidArgument) { _ = try PKCS11Modules(modulePath: Self.module).objects(tokenURI: "pkcs11:type=private", pin: pinA) }
        XCTAssertFalse(try sawAWrongPIN("swift-other"), "swift-test's PIN reached swift-other")
        // A URI that matches both tokens: a PIN belongs to one.
        expectCode(.badURI) { _ = try PKCS11Modules(modulePath: Self.module).objects(tokenURI: "pkcs11:model=SoftHSM%20v2", pin: pinA) }
        // Named by its label: that token only; the other is not even listed.
        let named = try PKCS11Modules(modulePath: Self.module).objects(tokenURI: "pkcs11:token=swift-test", pin: pinA)
        XCTAssertTrue(named.contains { $0.kind == .privateKey && $0.id == [0x07] })
        XCTAssertEqual(Set(named.map(\.token.label)), ["swift-test"])
        // Named by the object it shows without a login: that token is logged in to, the other is
        // listed without a login.
        let byObject = try PKCS11Modules(modulePath: Self.module).objects(tokenURI: "pkcs11:id=%07", pin: pinA)
        XCTAssertTrue(byObject.contains { $0.kind == .privateKey && $0.token.label == "swift-test" })
        let everything = try PKCS11Modules(modulePath: Self.module).objects(tokenURI: "pkcs11:object=other-user", pin: SecretBytes("4321"))
        XCTAssertEqual(everything.map(\.token.label), ["swift-other"])
        expectCode(.notFound) { _ = try PKCS11Modules(modulePath: Self.module).objects(tokenURI: "pkcs11:id=%99", pin: pinA) }
        XCTAssertFalse(try sawAWrongPIN("swift-other"), "swift-test's PIN reached swift-other")
        XCTAssertFalse(try sawAWrongPIN("swift-test"))
        // Without a PIN both tokens are listed, as before.
        XCTAssertEqual(Set(try PKCS11Modules(modulePath: Self.module).objects().map(\.token.label)), ["swift-test", "swift-other"])
    }

    func testTokenErrorsHaveTheirCodes() throws {
        _ = try makeToken()
        let modules = try PKCS11Modules(modulePath: Self.module)
        expectCode(.pinIncorrect) { _ = try modules.objects(tokenURI: "pkcs11:token=swift-test", pin: SecretBytes("0000")) }
        expectCode(.tokenNotPresent) { _ = try modules.objects(tokenURI: "pkcs11:token=absent") }
        expectCode(.badURI) { _ = try modules.objects(tokenURI: "pkcs11:token=%zz") }
        expectCode(.badURI) { _ = try modules.objects(tokenURI: "file:///etc/passwd") }
        expectCode(.notFound) { _ = try PKCS11Modules(modulePath: "/nonexistent/libnothing.so") }
    }
}
