// This file owns the common-name rule: when a host-like CN conflicts with a leaf's DNS SANs
// (ChainCheck.commonNameConsistency applies it).

/// How a host-like common name relates to a leaf's DNS SANs (see `commonNameConsistency`).
package enum CommonNameRule {
    /// Why `cn` conflicts with the DNS SANs, or nil when it does not.
    package static func conflict(_ cn: String, dnsNames: [String]) -> String? {
        func related(_ a: String, _ d: String) -> Bool {
            if a == d || d.hasSuffix("." + a) || a.hasSuffix("." + d) { return true }
            if d.hasPrefix("*.") {
                let base = String(d.dropFirst(2))
                if a == base || base.hasSuffix("." + a) { return true }
                if a.hasSuffix("." + base), !a.dropLast(base.count + 1).contains(".") { return true }
            }
            return false
        }
        if dnsNames.contains(where: { related(cn, $0) }) { return nil }
        let lower = cn.lowercased()
        if let d = dnsNames.first(where: { related(lower, $0.lowercased()) }) {
            return "common name \(cn) is the subject alternative name \(d) written another way"
        }
        func parent(_ name: String) -> String? {
            guard let dot = name.firstIndex(of: ".") else { return nil }
            let rest = name[name.index(after: dot)...]
            return rest.isEmpty ? nil : String(rest)
        }
        guard let cnParent = parent(lower) else { return nil }
        if let d = dnsNames.first(where: { !$0.hasPrefix("*.") && parent($0.lowercased()) == cnParent }) {
            return "common name \(cn) names another host than the subject alternative names (\(d) is in the same domain)"
        }
        return nil
    }
}
