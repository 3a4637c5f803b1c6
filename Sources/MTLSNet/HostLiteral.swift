/// A host as written in a URL authority, a `host:port` target, a host rule or a peer: a DNS name
/// or an IP literal, an IPv6 literal in brackets (`[::1]`, `[fe80::1%eth0]`). The brackets come
/// off here and nowhere else; what an IP literal means is ``IPAddress``'s.
package enum HostLiteral {
    /// `host` without the brackets around an IPv6 literal (`[::1]` → `::1`); anything else as it
    /// is (a name, a bare address, a lone bracket).
    package static func unbracketed(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }
}
