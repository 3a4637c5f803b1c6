import Foundation
import XCTest
@testable import MTLS
@testable import MTLSX509

final class CertificateTests: XCTestCase {
    func testParsesPEMWithEveryField() throws {
        let dir = try TestPKI.tempDir()
        try TestPKI.sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout \(dir)/k.pem -out \(dir)/c.pem -subj '/CN=swift.example/O=T' -days 3 -addext 'subjectAltName=DNS:swift.example,IP:10.0.0.1' -addext 'extendedKeyUsage=serverAuth' -addext 'basicConstraints=critical,CA:FALSE'")
        let certs = try Certificate.load(path: "\(dir)/c.pem")
        XCTAssertEqual(certs.count, 1)
        let c = certs[0]
        XCTAssertEqual(c.subject, "O=T,CN=swift.example")
        XCTAssertEqual(c.commonName, "swift.example")
        XCTAssertEqual(c.subjectAltNames, [.dns("swift.example"), .ip("10.0.0.1")])
        XCTAssertEqual(c.keyType, .rsa(bits: 2048))
        XCTAssertEqual(c.extendedKeyUsages, [ExtendedKeyUsage.serverAuth])
        XCTAssertEqual(c.basicConstraints, BasicConstraints(isCA: false, pathLength: nil, critical: true))
        XCTAssertEqual(c.notAfter.timeIntervalSince(c.notBefore), 3 * 86400)
        XCTAssertTrue(c.spkiPin.hasPrefix("sha256/"))
        XCTAssertEqual(try Certificate(der: c.der), c)
    }

    func testParsesPKCS7Bundle() throws {
        let dir = try TestPKI.tempDir()
        try TestPKI.sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -keyout \(dir)/k.pem -out \(dir)/c.pem -subj '/CN=a' -days 1")
        try TestPKI.sh("openssl crl2pkcs7 -nocrl -certfile \(dir)/c.pem -certfile \(dir)/c.pem -outform DER -out \(dir)/b.p7b")
        let certs = try Certificate.load(path: "\(dir)/b.p7b")
        XCTAssertEqual(certs.count, 2)
        XCTAssertEqual(certs[0].keyType.shortName, "p384")
    }

    func testGarbageIsAParseError() {
        XCTAssertThrowsError(try Certificate.parseAll(Array("hello".utf8))) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .parse)
        }
        XCTAssertThrowsError(try Certificate.parseAll([])) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .parse)
        }
    }
}
