import Foundation
@testable import MTLS

/// A small PKI: root → intermediate → client leaf (`scripts/test-pki.sh --chain`).
struct P12Fixture {
    let dir: String
    /// `leafKey`: the leaf's key type, `p256`, `p384`, `rsa2048`, `rsa4096` or `ed25519`.
    static func make(leafKey: String = "p256", cn: String = "client.example") throws -> P12Fixture {
        let dir = try TestPKI.tempDir()
        try TestPKI.make("--chain", dir, leafKey, cn)
        return P12Fixture(dir: dir)
    }

    /// Runs `openssl pkcs12 -export` with extra arguments; the output path is returned.
    func opensslP12(_ args: String, password: String = "pw", name: String = "out.p12") throws -> String {
        let out = "\(dir)/\(name)"
        try TestPKI.sh("cd \(dir) && openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile chain.pem -name 'my id' -passout 'pass:\(password)' \(args) -out \(out)")
        return out
    }

    var leaf: Certificate { get throws { try Certificate.load(path: "\(dir)/leaf.pem")[0] } }
    var intermediate: Certificate { get throws { try Certificate.load(path: "\(dir)/int.pem")[0] } }
    var root: Certificate { get throws { try Certificate.load(path: "\(dir)/root.pem")[0] } }
    var key: PrivateKey { get throws { try PrivateKey(pem: FileIO.read("\(dir)/leaf.key")) } }
    var identity: Identity { get throws { try Identity(privateKey: key, leaf: leaf, certificates: [root, intermediate]) } }
}

func bytes(of path: String) throws -> [UInt8] { try FileIO.read(path) }

func expectCode(_ code: MTLSError.Code, _ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) {
    do {
        try body()
        XCTFail("expected \(code), got success", file: file, line: line)
    } catch let e as MTLSError {
        XCTAssertEqual(e.code, code, "message: \(e.message)", file: file, line: line)
    } catch {
        XCTFail("expected MTLSError \(code), got \(error)", file: file, line: line)
    }
}

import XCTest
