import Foundation
import XCTest
@testable import MTLS

final class PKCS12Tests: XCTestCase {
    func testOpenSSLDefaultFileGivesIdentityWithChain() throws {
        let f = try P12Fixture.make()
        let c = try PKCS12.load(path: f.opensslP12(""), password: SecretBytes("pw"))
        XCTAssertEqual(c.identities.count, 1)
        let id = c.identities[0]
        XCTAssertEqual(id.leaf, try f.leaf)
        XCTAssertEqual(id.chain, [try f.intermediate, try f.root])
        XCTAssertEqual(id.privateKey.keyType.shortName, "p256")
        XCTAssertEqual(c.certificates.count, 3)
    }

    func testExportRoundTripsModernAndLegacy() throws {
        let f = try P12Fixture.make(leafKey: "rsa:2048")
        let id = try f.identity
        for options in [PKCS12ExportOptions.modern, .legacy] {
            var o = options
            o.friendlyName = "exported"
            let der = try PKCS12.export(id, password: SecretBytes("s3cret"), options: o)
            let back = try PKCS12.parse(der, password: SecretBytes("s3cret"))
            XCTAssertEqual(back.identities.count, 1)
            XCTAssertEqual(back.identities[0].leaf, id.leaf)
            XCTAssertEqual(back.identities[0].chain, id.chain)
            XCTAssertTrue(back.identities[0].privateKey.matches(id.leaf))
        }
    }
}
