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

    func testTokenErrorsHaveTheirCodes() throws {
        _ = try makeToken()
        let modules = try PKCS11Modules(modulePath: Self.module)
        expectCode(.pinIncorrect) { _ = try modules.objects(pin: SecretBytes("0000")) }
        expectCode(.tokenNotPresent) { _ = try modules.objects(tokenURI: "pkcs11:token=absent") }
        expectCode(.badURI) { _ = try modules.objects(tokenURI: "pkcs11:token=%zz") }
        expectCode(.badURI) { _ = try modules.objects(tokenURI: "file:///etc/passwd") }
        expectCode(.notFound) { _ = try PKCS11Modules(modulePath: "/nonexistent/libnothing.so") }
    }
}
