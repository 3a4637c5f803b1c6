import Foundation
import XCTest
@testable import MTLS

final class PrivateKeyTests: XCTestCase {
    func testGeneratesEveryKeySpec() throws {
        XCTAssertEqual(try PrivateKey.generate(.ecP256).keyType.shortName, "p256")
        XCTAssertEqual(try PrivateKey.generate(.ecP384).keyType.shortName, "p384")
        XCTAssertEqual(try PrivateKey.generate(.rsa(bits: 2048)).keyType.shortName, "rsa2048")
        XCTAssertEqual(try PrivateKey.generate(.ed25519).keyType.shortName, "ed25519")
        expectCode(.invalidArgument) { _ = try PrivateKey.generate(.rsa(bits: 512)) }
    }

    func testEncryptedPEMRoundTripsAndNeedsThePassword() throws {
        let key = try PrivateKey.generate(.ecP256)
        let pem = try key.encryptedPEM(password: SecretBytes("pässwörd"))
        XCTAssertTrue(pem.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        let back = try PrivateKey(pem: Array(pem.utf8), password: SecretBytes("pässwörd"))
        XCTAssertEqual(try back.pkcs8DER().withBytes(Array.init), try key.pkcs8DER().withBytes(Array.init))
        expectCode(.badPassword) { _ = try PrivateKey(pem: Array(pem.utf8), password: SecretBytes("wrong")) }
        expectCode(.badPassword) { _ = try PrivateKey(pem: Array(pem.utf8)) }
    }

    func testReadsTraditionalAndPKCS8PEMAndDER() throws {
        let dir = try TestPKI.tempDir()
        try TestPKI.sh("cd \(dir) && openssl genrsa -traditional -out rsa.pem 2048 2>/dev/null && openssl ecparam -name secp384r1 -genkey -noout -out ec.pem && openssl genpkey -algorithm ed25519 -out ed.pem && openssl pkcs8 -topk8 -nocrypt -in ec.pem -outform DER -out ec.der && openssl pkey -in rsa.pem -aes256 -passout pass: -out rsa-empty.pem")
        XCTAssertEqual(try PrivateKey(pem: bytes(of: "\(dir)/rsa.pem")).keyType.shortName, "rsa2048")
        let ec = try PrivateKey(pem: bytes(of: "\(dir)/ec.pem"))
        XCTAssertEqual(ec.keyType.shortName, "p384")
        XCTAssertEqual(try PrivateKey(pem: bytes(of: "\(dir)/ed.pem")).keyType.shortName, "ed25519")
        let der = try bytes(of: "\(dir)/ec.der")
        XCTAssertEqual(try PrivateKey(pkcs8DER: der).pkcs8DER().withBytes(Array.init), der)
        XCTAssertEqual(try PrivateKey(pem: bytes(of: "\(dir)/rsa-empty.pem"), password: SecretBytes("")).keyType.shortName, "rsa2048")
        expectCode(.parse) { _ = try PrivateKey(pem: Array("hello".utf8)) }
        expectCode(.parse) { _ = try PrivateKey(pkcs8DER: der + [0]) }
    }
}
