import Foundation

/// Helpers for tests that make their own certificates at run time.
enum TestPKI {
    /// A new empty directory under the system temp dir.
    static func tempDir() throws -> String {
        let path = NSTemporaryDirectory() + "mtls-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs scripts/test-pki.sh, the one maker of every suite's test PKI (see its header):
    /// `make("--trust", dir)`, `make(dir)`, `make("--chain", dir, "rsa2048")`...
    static func make(_ arguments: String...) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/test-pki.sh").path
        try sh(([script] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " "))
    }

    /// Writes a secret file (PIN, password, store secret or key) owner-only, mode 0600 (or
    /// `mode`): libmtls refuses a secret file that everyone can read or others can write.
    static func writeSecret(_ text: String, to path: String, mode: Int = 0o600) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    /// Runs a shell command; throws with its stderr when it fails.
    @discardableResult
    static func sh(_ command: String) throws -> String {
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
            throw NSError(domain: "sh", code: Int(p.terminationStatus),
                          userInfo: [NSLocalizedDescriptionKey: "\(command): \(String(decoding: e, as: UTF8.self))"])
        }
        return String(decoding: o, as: UTF8.self)
    }
}
