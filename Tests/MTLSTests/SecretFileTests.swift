import Foundation
import XCTest
@testable import MTLS

/// The one secret-file reader (issue 23, defect 10): modes, the empty-file rule per kind, the
/// size limit, and every kind of secret file going through it.
final class SecretFileTests: XCTestCase {
    func file(_ text: String, mode: Int) throws -> String {
        let path = try TestPKI.tempDir() + "/secret"
        try TestPKI.writeSecret(text, to: path, mode: mode)
        return path
    }

    func testModesOthersCanWriteOrEveryoneCanReadAreRefusedWithTheChmodThatFixesThem() throws {
        for mode in [0o666, 0o644, 0o604, 0o620, 0o602, 0o660] {
            let path = try file("1234\n", mode: mode)
            _ = LibraryWarnings.take()
            XCTAssertThrowsError(try FileIO.readSecret(path, kind: .pin), String(mode, radix: 8)) { e in
                let m = (e as? MTLSError)?.message ?? ""
                XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
                XCTAssertTrue(m.contains(path) && m.contains("chmod 600 \(path)") && m.contains("PIN"), m)
            }
            XCTAssertEqual(LibraryWarnings.take(), [])
        }
    }

    /// A file of another user is theirs to change whatever its mode: refused, naming the file
    /// and its owner (the tests run as root, who may chown a file to any uid).
    func testAFileOwnedByAnotherUserIsRefused() throws {
        let path = try file("1234\n", mode: 0o600)
        guard geteuid() == 0 else { throw XCTSkip("needs root to give a file to another user") }
        XCTAssertEqual(chown(path, 4242, 4242), 0)
        XCTAssertThrowsError(try FileIO.readSecret(path, kind: .pin)) { e in
            let m = (e as? MTLSError)?.message ?? ""
            XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
            XCTAssertTrue(m.contains(path) && m.contains("owned by another user (uid 4242)") && m.contains("PIN"), m)
        }
        XCTAssertEqual(chown(path, 0, 0), 0)  // root's own files are the user's
        XCTAssertEqual(try FileIO.readSecret(path, kind: .pin).count, 4)
    }

    func testGroupReadableIsUsedWithAWarningAndOwnerOnlySilently() throws {
        let grouped = try file("1234\n", mode: 0o640)
        _ = LibraryWarnings.take()
        XCTAssertEqual(try FileIO.readSecret(grouped, kind: .pin).count, 4)
        let warnings = LibraryWarnings.take()
        XCTAssertEqual(warnings.count, 1)
        XCTAssertTrue(warnings[0].contains(grouped) && warnings[0].contains("group") && warnings[0].contains("chmod 600"), warnings[0])
        XCTAssertEqual(LibraryWarnings.take(), [], "taken warnings are cleared")
        for mode in [0o600, 0o400] {
            XCTAssertEqual(try FileIO.readSecret(try file("1234\n", mode: mode), kind: .pin).count, 4)
        }
        XCTAssertEqual(LibraryWarnings.take(), [])
    }

    func testTheEmptyFileRuleIsPerKind() throws {
        let empty = try file("", mode: 0o600), emptyLine = try file("\n", mode: 0o600)
        for kind in [FileIO.SecretKind.pin, .storeSecret, .storeKey, .privateKey] {
            XCTAssertThrowsError(try FileIO.readSecret(empty, kind: kind)) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument) }
        }
        XCTAssertThrowsError(try FileIO.readSecret(emptyLine, kind: .pin))
        XCTAssertEqual(try FileIO.readSecret(empty, kind: .password).count, 0)  // the empty password
        XCTAssertEqual(try FileIO.readSecret(emptyLine, kind: .password).count, 0)
        XCTAssertEqual(try FileIO.readSecret(try file("pw\r\nsecond\n", mode: 0o600), kind: .password).count, 2)
        XCTAssertEqual(try FileIO.readSecret(try file("key\nbytes", mode: 0o600), kind: .storeKey).count, 9)  // whole file
    }

    func testOneSizeLimit() throws {
        let big = try file(String(repeating: "x", count: FileIO.maxSecretSize + 1), mode: 0o600)
        XCTAssertThrowsError(try FileIO.readSecret(big, kind: .password)) { XCTAssertEqual(($0 as? MTLSError)?.code, .limitExceeded) }
    }

    func testEverySecretFileGoesThroughTheReader() throws {
        let open = try file("a passphrase\n", mode: 0o644)
        for load in [{ _ = try StoreSecret.load(path: open) }, { _ = try StoreSecret.loadKey(path: open) },
                     { _ = try Token.readPINSource("file:" + open) }] {
            XCTAssertThrowsError(try load()) { XCTAssertTrue("\($0)".contains("chmod 600"), "\($0)") }
        }
        // A private key file (as OpenSSH refuses an unprotected key); the certificate file beside
        // it is no secret and keeps any mode.
        let dir = try TestPKI.tempDir()
        try TestPKI.make("--chain", dir)
        try TestPKI.sh("chmod 644 \(dir)/leaf.pem \(dir)/leaf.key")
        XCTAssertThrowsError(try Identity(certificatePath: "\(dir)/leaf.pem", keyPath: "\(dir)/leaf.key")) {
            XCTAssertTrue("\($0)".contains("chmod 600 \(dir)/leaf.key"), "\($0)")
        }
        try TestPKI.sh("chmod 600 \(dir)/leaf.key")
        XCTAssertNoThrow(try Identity(certificatePath: "\(dir)/leaf.pem", keyPath: "\(dir)/leaf.key"))
    }
}
