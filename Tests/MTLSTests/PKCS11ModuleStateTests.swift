import XCTest
import Foundation
@testable import MTLS

/// The software modules' token folders the tunnel's Landlock lets a module write when a token key
/// is used (`PKCS11ModuleState`).
final class PKCS11ModuleStateTests: XCTestCase {
    func testSoftHSMTokenFolderIsReadAsSoftHSMReadsItsConf() {
        XCTAssertEqual(PKCS11ModuleState.softHSMTokenFolder(conf: "# a comment\n  directories.tokendir =  /var/lib/softhsm/tokens/ \nobjectstore.backend = file\n"),
                       "/var/lib/softhsm/tokens/")
        XCTAssertEqual(PKCS11ModuleState.softHSMTokenFolder(conf: "directories.tokendir=/t\r\n"), "/t")
        XCTAssertNil(PKCS11ModuleState.softHSMTokenFolder(conf: "# directories.tokendir = /commented\n"))
        XCTAssertNil(PKCS11ModuleState.softHSMTokenFolder(conf: "directories.tokendir =\n"))
        XCTAssertNil(PKCS11ModuleState.softHSMTokenFolder(conf: ""))
    }

    func testFoldersComeFromTheEnvironmentAndOnlyThoseThatExist() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("module-state-\(getpid())")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("tokens"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("tpm"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let conf = dir.appendingPathComponent("softhsm2.conf")
        try "directories.tokendir = \(dir.path)/tokens\n".write(to: conf, atomically: true, encoding: .utf8)
        XCTAssertEqual(PKCS11ModuleState.folders(environment: ["SOFTHSM2_CONF": conf.path, "TPM2_PKCS11_STORE": dir.path + "/tpm"]),
                       [dir.path + "/tokens", dir.path + "/tpm"])
        // A conf or a store that names no existing folder adds nothing.
        XCTAssertEqual(PKCS11ModuleState.folders(environment: ["SOFTHSM2_CONF": dir.path + "/missing.conf",
                                                               "TPM2_PKCS11_STORE": dir.path + "/none"]), [])
        XCTAssertEqual(PKCS11ModuleState.folders(environment: ["SOFTHSM2_CONF": dir.path + "/missing.conf", "HOME": dir.path]), [])
    }
}
