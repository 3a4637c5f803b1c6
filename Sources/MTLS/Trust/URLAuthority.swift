import FoundationEssentials

/// The host and port of an `https://` URL, as a peer to connect to (`mtls connect https://...`).
///
/// An IPv6 literal's zone is read as RFC 6874 writes it in a URI: `[fe80::1%25eth0]` is the
/// address `fe80::1` on the link `eth0` ("%25" is the percent-encoded "%"; the zone after it is
/// itself percent-decoded). As RFC 6874 section 4 advises user agents, and as Python's urllib,
/// httpx and urllib3 do, a bare "%" not followed by "25" is taken as the zone's delimiter
/// (`[fe80::1%eth0]`); an empty zone, or a zone with a broken percent-encoding, is refused.
public enum URLAuthority {
    /// The host (an IPv6 literal without its brackets, with `%zone` when it has one) and port
    /// (443 when the URL names none) of `url`. Throws ``MTLSError/Code/invalidArgument`` when
    /// `url` is not an `https://` URL with a host, or its port or zone is malformed.
    public static func hostAndPort(https url: String) throws -> (host: String, port: UInt16) {
        func bad(_ why: String) -> MTLSError { MTLSError(.invalidArgument, "\(why): \(url)") }
        let scheme = "https://"
        guard url.count > scheme.count, url.prefix(scheme.count).lowercased() == scheme else { throw bad("not an https:// URL") }
        var authority = Substring(url.dropFirst(scheme.count))
        if let end = authority.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { authority = authority[..<end] }
        guard !authority.contains("@") else { throw bad("a URL with a user name cannot be a peer") }
        var host: String
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw bad("an IPv6 address without its closing bracket") }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let rest = authority[authority.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw bad("unexpected text after the IPv6 address") }
                portText = rest.dropFirst()
            }
            if let percent = host.firstIndex(of: "%") {
                let address = host[..<percent]
                var zone = Substring(host[host.index(after: percent)...])
                if zone.hasPrefix("25"), zone.count > 2 {
                    guard let decoded = percentDecoded(zone.dropFirst(2)) else { throw bad("a malformed percent-encoding in the IPv6 zone") }
                    zone = Substring(decoded)
                }
                guard !zone.isEmpty else { throw bad("an empty IPv6 zone") }
                host = address + "%" + zone
            }
        } else {
            if let colon = authority.lastIndex(of: ":") {
                portText = authority[authority.index(after: colon)...]
                authority = authority[..<colon]
            }
            host = String(authority)
        }
        guard !host.isEmpty else { throw bad("a URL without a host") }
        guard let portText, !portText.isEmpty else { return (host, 443) }
        guard portText.allSatisfy(\.isASCII), let port = UInt16(portText), port > 0 else { throw bad("a malformed port") }
        return (host, port)
    }

    /// `text` with each %HH decoded; nil when a "%" is not followed by two hexadecimal digits or
    /// the result is not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        var out: [UInt8] = []
        var bytes = Array(text.utf8)[...]
        while let b = bytes.popFirst() {
            guard b == UInt8(ascii: "%") else { out.append(b); continue }
            let pair = Array(bytes.prefix(2))
            guard pair.count == 2, let hi = hexValue(pair[0]), let lo = hexValue(pair[1]) else { return nil }
            out.append(hi << 4 | lo)
            bytes = bytes.dropFirst(2)
        }
        let decoded = String(decoding: out, as: UTF8.self)
        return Array(decoded.utf8) == out ? decoded : nil
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
