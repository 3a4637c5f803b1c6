import Foundation
import XCTest
@testable import MTLS

/// The one cleaner of outside text on its way to a terminal or a log (issue 41 item 4), the JSON
/// escaping that keeps the same characters out of JSON text, and the ACME client's checks of a
/// CA's authorizations and the webroot's files (issue 35 item 11).
final class OneLineTests: XCTestCase {
    /// Every character a terminal must not see raw: C0, DEL, C1 (U+009B is a CSI, U+0085 NEL),
    /// the line and paragraph separators, every bidirectional control.
    static let unsafe: [Unicode.Scalar] =
        (0x00...0x1F).map { Unicode.Scalar(UInt8($0)) } + (0x7F...0x9F).map { Unicode.Scalar(UInt8($0)) }
        + [0x2028, 0x2029, 0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]
            .map { Unicode.Scalar(UInt32($0))! }

    func testEveryUnsafeCharacterBecomesABlank() {
        for u in Self.unsafe {
            XCTAssertTrue(OneLine.isUnsafe(u), String(u.value, radix: 16))
            XCTAssertEqual(OneLine.text("a\(Character(u))b"), "a b", String(u.value, radix: 16))
        }
    }

    func testOrdinaryTextIsKeptAsItIs() {
        // Letters of every script, joiners (used inside words and emoji), quotes, U+FFFD.
        let text = "CN=Ünïcødé 日本語 עברית العربية \u{200D}\u{200C} \"q\" 'a,b=c+d' \u{FFFD} 👩‍💻"
        XCTAssertEqual(OneLine.text(text), text)
        for u in text.unicodeScalars { XCTAssertFalse(OneLine.isUnsafe(u), String(u.value, radix: 16)) }
    }

    func testAForgedLineCannotStartAndEscapesCannotReachTheTerminal() {
        let hostile = "bad\u{1B}[31m red \u{9B}2J \u{202E}evil\r\nrenewal_succeeded forged\u{2028}x\u{85}y\u{2066}z"
        let clean = OneLine.text(hostile)
        XCTAssertEqual(clean, "bad [31m red  2J  evil  renewal_succeeded forged x y z")
        XCTAssertFalse(clean.unicodeScalars.contains(where: OneLine.isUnsafe))
    }

    func testBytesThatAreNotUTF8BecomeReplacementCharacters() {
        // A lone continuation byte, a truncated sequence, an overlong encoding of "/", a C1 in UTF-8.
        let bytes: [UInt8] = [0x61, 0x80, 0x62, 0xE2, 0x80, 0x63, 0xC0, 0xAF, 0x64, 0xC2, 0x9B, 0x65]
        let text = OneLine.text(utf8: bytes)
        XCTAssertFalse(text.unicodeScalars.contains(where: OneLine.isUnsafe), text)
        XCTAssertTrue(text.hasPrefix("a\u{FFFD}b"), text)
        XCTAssertTrue(text.hasSuffix("d e"), text)
    }

    func testJSONTextEscapesWhatATerminalMustNotSeeAndKeepsTheValue() throws {
        let value = "a\u{1B}b\u{7F}c\u{9B}d\u{2028}e\u{2029}f\u{202E}g\u{2066}h\"\\\n"
        let quoted = JSONText.quoted(value)
        XCTAssertFalse(quoted.unicodeScalars.contains(where: OneLine.isUnsafe), quoted)
        XCTAssertEqual(quoted, #""a\u001bb\u007fc\u009bd\u2028e\u2029f\u202eg\u2066h\"\\\n""#)
        let decoded = try JSONSerialization.jsonObject(with: Data(quoted.utf8), options: .fragmentsAllowed) as? String
        XCTAssertEqual(decoded, value)
    }

    func testJSONFromAnotherEncoderIsEscapedTheSameWay() throws {
        let value = "x\u{9B}\u{202E}\u{2028}\u{1B}y"
        let data = try JSONSerialization.data(withJSONObject: ["k": value], options: [.sortedKeys])
        let escaped = OneLine.escapingJSON(String(decoding: data, as: UTF8.self))
        XCTAssertFalse(escaped.unicodeScalars.contains(where: OneLine.isUnsafe), escaped)
        let decoded = try JSONSerialization.jsonObject(with: Data(escaped.utf8)) as? [String: String]
        XCTAssertEqual(decoded?["k"], value)
    }

    /// Every front end (the CLI's stderr, `mtls_last_error`, Python's exceptions) prints an
    /// error's message: whatever it quotes, it is one clean line.
    func testAnErrorMessageIsCleanedAsItIsMade() {
        let e = MTLSError(.caRejected, "the ACME server answered 403 unauthorized: \u{1B}]0;title\u{7}\u{202E}x\r\nrenewal_succeeded")
        XCTAssertFalse(e.message.unicodeScalars.contains(where: OneLine.isUnsafe), e.message)
        XCTAssertTrue(e.message.hasSuffix("x  renewal_succeeded"), e.message)
        LibraryWarnings.emit("a warning about \"file\u{202E}\nname\"")
        XCTAssertEqual(LibraryWarnings.take(), ["a warning about \"file  name\""])
    }

    // MARK: ACME authorizations and the webroot (issue 35 item 11)

    func authorization(_ type: String, _ value: String, wildcard: Bool = false) throws -> JSONValue {
        let json = "{\"identifier\":{\"type\":\"\(type)\",\"value\":\"\(value)\"}\(wildcard ? ",\"wildcard\":true" : "")}"
        return try JSONValue.parse(Array(json.utf8), "test")
    }

    func testAnAuthorizationForAnIdentifierNotOrderedIsRefused() throws {
        let ordered = ["www.example.test", "*.apps.example.test", "192.0.2.7", "2001:db8::1"]
        XCTAssertEqual(ACMEClient.orderedIdentifier(of: try authorization("dns", "WWW.example.test"), among: ordered), "WWW.example.test")
        XCTAssertEqual(ACMEClient.orderedIdentifier(of: try authorization("dns", "apps.example.test", wildcard: true), among: ordered),
                       "apps.example.test")
        XCTAssertEqual(ACMEClient.orderedIdentifier(of: try authorization("ip", "192.0.2.7"), among: ordered), "192.0.2.7")
        XCTAssertEqual(ACMEClient.orderedIdentifier(of: try authorization("ip", "2001:0db8:0:0::1"), among: ordered), "2001:0db8:0:0::1")
        // Names never ordered, a wildcard's base without the wildcard, a wildcard not ordered,
        // a name dressed as an address and the other way round, an unknown type.
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try authorization("dns", "evil.example"), among: ordered))
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try authorization("dns", "apps.example.test"), among: ordered))
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try authorization("dns", "example.test", wildcard: true), among: ordered))
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try authorization("dns", "192.0.2.7"), among: ordered))
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try authorization("ip", "192.0.2.8"), among: ordered))
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try authorization("email", "www.example.test"), among: ordered))
        XCTAssertNil(ACMEClient.orderedIdentifier(of: try JSONValue.parse(Array("{}".utf8), "test"), among: ordered))
    }

    func testAWebrootFileIsNotWrittenThroughAPlantedLink() throws {
        let root = try TestPKI.tempDir()
        let target = root + "/target"
        try Data("original".utf8).write(to: URL(fileURLWithPath: target))
        try FileManager.default.createDirectory(atPath: root + "/www/.well-known/acme-challenge", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/www/.well-known/acme-challenge/tok", withDestinationPath: target)
        XCTAssertThrowsError(try WebrootFile(directory: root + "/www", token: "tok", contents: Array("key-authz".utf8))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .io)
        }
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "original")

        // A folder on the way that is a link is not followed either.
        try FileManager.default.createDirectory(atPath: root + "/elsewhere", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/www2/.well-known", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/www2/.well-known/acme-challenge", withDestinationPath: root + "/elsewhere")
        XCTAssertThrowsError(try WebrootFile(directory: root + "/www2", token: "tok", contents: Array("key-authz".utf8)))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root + "/elsewhere"), [])

        // The ordinary case: folders made under the webroot, the file written, then removed.
        try FileManager.default.createDirectory(atPath: root + "/www3", withIntermediateDirectories: true)
        let file = try WebrootFile(directory: root + "/www3", token: "tok", contents: Array("key-authz".utf8))
        XCTAssertEqual(try String(contentsOfFile: root + "/www3/.well-known/acme-challenge/tok", encoding: .utf8), "key-authz")
        file.remove()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root + "/www3/.well-known/acme-challenge"), [])
    }

    /// fuzz_crl: a CRL whose issuer name holds U+202E and an escape, served (over plain HTTP,
    /// so by anyone on the path) for a certificate of another issuer. The refusal quotes the
    /// CRL's issuer; it did so raw (the signature is not checked before the names are compared).
    func testACRLIssuerNameIsQuotedCleanInTheRevocationProblem() throws {
        let crlPEM = """
-----BEGIN X509 CRL-----
MIG1MFwCAQEwCgYIKoZIzj0EAwIwHTEbMBkGA1UEAwwSRXZpbOKArmdwai5leGUb
WzJKFw0yNjExMjgyMjU0NDhaFw0yNjEyMjgyMjU0NDhaoA4wDDAKBgNVHRQEAwIB
ATAKBggqhkjOPQQDAgNJADBGAiEA07Nc0OrErbmj+Aj7dQbZc2QdkYM2Yz+ksW+V
/ErmQ8ECIQC+soW6Nb9/7GIVuc3dig07gJQvaWMmTShXTU/24l8zkg==
-----END X509 CRL-----
"""
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let issuer = try XCTUnwrap(try Certificate.parseAll(FileIO.read(repo.appendingPathComponent("fuzz/data/ca.pem").path)).first)
        let crl = try XCTUnwrap(try RevocationList.parseAll(Array(crlPEM.utf8)).first)
        do {
            try CRLCheck.verify(crl.crl, issuer: issuer, time: Date(), maxAge: RevocationFetchOptions.defaultMaxAge)
            XCTFail("a CRL of another issuer was accepted")
        } catch let p as RevocationProblem {
            XCTAssertTrue(p.description.contains("Evil"), p.description)
            XCTAssertFalse(p.description.unicodeScalars.contains(where: OneLine.isUnsafe), p.description)
        }
    }
}
