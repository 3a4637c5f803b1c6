import Foundation
@testable import MTLS

/// A small PKI made with the openssl command line at run time: root → intermediate → leaf.
struct P12Fixture {
    let dir: String
    /// Key algorithm arguments for `openssl req -newkey`, e.g. `rsa:2048`, `ec -pkeyopt ec_paramgen_curve:P-256`, `ed25519`.
    static func make(leafKey: String = "ec -pkeyopt ec_paramgen_curve:P-256", cn: String = "client.example") throws -> P12Fixture {
        let dir = try TestPKI.tempDir()
        try TestPKI.sh("""
        cd \(dir) && \
        printf 'basicConstraints=critical,CA:TRUE\\nkeyUsage=critical,keyCertSign,cRLSign\\nsubjectKeyIdentifier=hash\\nauthorityKeyIdentifier=keyid\\n' > ca.ext && \
        printf 'basicConstraints=critical,CA:FALSE\\nkeyUsage=critical,digitalSignature\\nextendedKeyUsage=clientAuth\\nauthorityKeyIdentifier=keyid\\n' > leaf.ext && \
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout root.key -out root.pem -subj '/CN=Test Root' -days 30 -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign' 2>/dev/null && \
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout int.key -out int.csr -subj '/CN=Test Intermediate' 2>/dev/null && \
        openssl x509 -req -in int.csr -CA root.pem -CAkey root.key -CAcreateserial -out int.pem -days 30 -extfile ca.ext 2>/dev/null && \
        openssl req -newkey \(leafKey) -nodes -keyout leaf.key -out leaf.csr -subj '/CN=\(cn)' 2>/dev/null && \
        openssl x509 -req -in leaf.csr -CA int.pem -CAkey int.key -CAcreateserial -out leaf.pem -days 30 -extfile leaf.ext 2>/dev/null && \
        cat int.pem root.pem > chain.pem
        """)
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
