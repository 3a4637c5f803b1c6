import FoundationEssentials

/// Where the software PKCS#11 modules libmtls is tested with keep their tokens' files: what a
/// process that restricts its own writes (the tunnel's Landlock) must still let a module write
/// when it uses a token key, since the module writes from inside the process: SoftHSM2 a new
/// key's object files in its token folder, tpm2-pkcs11 its store's lock file on every session.
/// Hardware tokens keep nothing in files. Other modules' folders are the operator's to name
/// (`mtls tunnel --landlock-writable`).
package enum PKCS11ModuleState {
    /// The folders, those that exist, read from `environment` as the modules read it:
    /// - SoftHSM2: `directories.tokendir` in `$SOFTHSM2_CONF`, else `/etc/softhsm/softhsm2.conf`;
    /// - tpm2-pkcs11: `$TPM2_PKCS11_STORE`, else `$HOME/.tpm2_pkcs11`.
    package static func folders(environment: [String: String]) -> [String] {
        var found: [String] = []
        let conf = environment["SOFTHSM2_CONF"].flatMap { $0.isEmpty ? nil : $0 } ?? "/etc/softhsm/softhsm2.conf"
        if let text = try? String(contentsOfFile: conf, encoding: .utf8), let dir = softHSMTokenFolder(conf: text) {
            found.append(dir)
        }
        if let store = environment["TPM2_PKCS11_STORE"].flatMap({ $0.isEmpty ? nil : $0 }) {
            found.append(store)
        } else if let home = environment["HOME"], !home.isEmpty {
            found.append(home + "/.tpm2_pkcs11")
        }
        return found.filter { FileManager.default.fileExists(atPath: $0) }
    }

    /// `directories.tokendir` of a softhsm2.conf text (`name = value` lines, `#` comments).
    package static func softHSMTokenFolder(conf: String) -> String? {
        func trimmed(_ t: Substring) -> Substring {
            let text: (Character) -> Bool = { $0 != " " && $0 != "\t" }
            guard let first = t.firstIndex(where: text), let last = t.lastIndex(where: text) else { return "" }
            return t[first...last]
        }
        for raw in conf.split(whereSeparator: \.isNewline) {
            let line = trimmed(raw)
            guard !line.hasPrefix("#"), let eq = line.firstIndex(of: "=") else { continue }
            guard trimmed(line[..<eq]) == "directories.tokendir" else { continue }
            let value = trimmed(line[line.index(after: eq)...])
            return value.isEmpty ? nil : String(value)
        }
        return nil
    }
}
