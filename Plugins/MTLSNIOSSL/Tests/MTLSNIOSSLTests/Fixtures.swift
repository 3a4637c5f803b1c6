import Foundation
import MTLS

/// The repository the plugin lives in (Plugins/MTLSNIOSSL/Tests/MTLSNIOSSLTests/ → up five).
let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

/// Runs a shell command; throws with its stderr when it fails.
@discardableResult
func sh(_ command: String) throws -> String {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/bash")
    p.arguments = ["-c", command]
    let out = Pipe(), err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let o = out.fileHandleForReading.readDataToEndOfFile()
    let e = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
        throw MTLSError(.io, "\(command): exit \(p.terminationStatus): \(String(decoding: o + e, as: UTF8.self))")
    }
    return String(decoding: o, as: UTF8.self)
}

/// The suite's PKI (scripts/test-pki.sh, the one maker of every suite's: root → int-a → server
/// (DNS:server.test), client-a; int-b → client-b; other-root → other-server) and SoftHSM2 tokens
/// (scripts/softhsm-token.sh: keys generated on the token), made once per test process.
enum Fixture {
    static let made: Result<String, Error> = Result {
        let d = NSTemporaryDirectory() + "mtls-niossl-" + UUID().uuidString
        try sh("'\(repository)/scripts/test-pki.sh' '\(d)/pki' && '\(repository)/scripts/softhsm-token.sh' '\(d)/hsm'")
        // nginx trusts both customers' chains and the token CA for clients.
        try sh("cd '\(d)' && cat pki/int-a.pem pki/root.pem hsm/ca.pem > client-cas.pem")
        setenv("SOFTHSM2_CONF", d + "/hsm/softhsm2.conf", 1)
        return d
    }
    /// Fails the test (not the process) when the fixtures could not be made.
    static func make() throws { _ = try made.get() }
    static var dir: String { (try? made.get()) ?? "/nonexistent" }
    static var pki: String { dir + "/pki" }
    static var hsm: String { dir + "/hsm" }
    static var module: String {
        ((try? String(contentsOfFile: hsm + "/module", encoding: .utf8)) ?? "/usr/lib/softhsm/libsofthsm2.so")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
    static func certificate(_ name: String) throws -> Certificate { try Certificate.load(path: "\(pki)/\(name).pem")[0] }
}

/// An nginx the test started (Tests/support/nginx_server.py, the one copy of the harness), on
/// 127.0.0.1 with `ssl_verify_client on`; ends when `stop()` closes the helper's stdin.
final class NginxServer: @unchecked Sendable {
    let process = Process()
    let input = Pipe()
    let port: Int

    init(name: String, serverChain: String, serverKey: String, clientCAs: String) throws {
        let script = """
        import sys; sys.path.insert(0, sys.argv[1]); import nginx_server
        s = nginx_server.start(sys.argv[2], server_chain=sys.argv[3], server_key=sys.argv[4], client_ca=sys.argv[5])
        print(s.port, flush=True); sys.stdin.read(); s.stop()
        """
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, repository + "/Tests/support", Fixture.dir + "/nginx-" + name + "-" + UUID().uuidString,
                             serverChain, serverKey, clientCAs]
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line += byte
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            throw MTLSError(.connect, "nginx did not start (helper said \"\(String(decoding: line, as: UTF8.self))\")")
        }
        self.port = port
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
