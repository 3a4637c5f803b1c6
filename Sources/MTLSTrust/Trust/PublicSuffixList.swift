// This file owns the public suffix list: read once from the system's copy, asked whether a
// name is a public suffix (ChainCheck.referenceName refuses a wildcard over one).

/// The public suffix list (`/usr/share/publicsuffix`, Debian package `publicsuffix`), read once.
/// When the file is missing no name is a public suffix.
final class PublicSuffixList: Sendable {
    static let shared = PublicSuffixList()
    private let rules: Set<String>
    private let exceptions: Set<String>

    private init() {
        var rules = Set<String>(), exceptions = Set<String>()
        for path in ["/usr/share/publicsuffix/public_suffix_list.dat", "/usr/share/publicsuffix/effective_tld_names.dat"] {
            guard let bytes = try? FileIO.read(path, limit: 16 << 20) else { continue }
            for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
                let l = trimmedASCII(String(line)).lowercased()
                if l.isEmpty || l.hasPrefix("//") { continue }
                if l.hasPrefix("!") { exceptions.insert(String(l.dropFirst())) } else { rules.insert(l) }
            }
            break
        }
        self.rules = rules
        self.exceptions = exceptions
    }

    /// Whether `name` (lowercase, no trailing dot) is a public suffix.
    func isPublicSuffix(_ name: String) -> Bool {
        if exceptions.contains(name) { return false }
        if rules.contains(name) { return true }
        if let dot = name.firstIndex(of: ".") {
            return rules.contains("*." + name[name.index(after: dot)...])
        }
        // A single label is a top-level domain.
        return true
    }
}
