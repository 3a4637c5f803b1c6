import FoundationEssentials

/// The one parser of the URLs libmtls connects to: `mtls connect https://...`, the ACME
/// directory and every URL in its answers, the EST server's URL (all through `HTTPClient`), CRL
/// distribution points and OCSP responders (``HTTPURL``). Each reads the host, port and zone
/// the same way and refuses the same malformed ones with the same message.
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
        let parts = try parse(url, scheme: "https", defaultPort: 443)
        return (parts.host, parts.port)
    }

    /// The host and port of an `http://` URL (port 80 by default), read as
    /// ``hostAndPort(https:)`` reads an `https://` one.
    public static func hostAndPort(http url: String) throws -> (host: String, port: UInt16) {
        let parts = try parse(url, scheme: "http", defaultPort: 80)
        return (parts.host, parts.port)
    }

    /// `url` (`scheme://host[:port][/path][?query][#fragment]`, the scheme case-insensitive)
    /// split: the host (an IPv6 literal without brackets, its zone decoded as `%zone`), the port
    /// (`defaultPort` when absent or empty) and the request target (path and query, starting
    /// with "/"; the fragment dropped). Throws ``MTLSError/Code/invalidArgument`` for another
    /// scheme, user information, a missing host, an unbracketed IPv6 address, a malformed port
    /// or zone.
    ///
    /// Whatever its source (a command line, an ACME directory or any URL learned after it, a
    /// CRL distribution point, an OCSP responder, an EST base URL, a redirect), a URL is at most
    /// ``maxLength`` bytes of printable ASCII: a control character (CR LF would become header
    /// lines of the request), a space or a non-ASCII byte anywhere refuses it, and the message
    /// then never quotes it raw.
    package static func parse(_ url: String, scheme: String, defaultPort: UInt16) throws -> (host: String, port: UInt16, target: String) {
        guard url.utf8.count <= maxLength, url.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw MTLSError(.invalidArgument, "not a usable \(scheme):// URL (at most \(maxLength) printable ASCII characters, "
                + "no spaces or control characters): \(printable(url))")
        }
        func bad(_ why: String) -> MTLSError { MTLSError(.invalidArgument, "\(why): \(printable(url))") }
        let prefix = scheme + "://"
        guard url.count > prefix.count, url.prefix(prefix.count).lowercased() == prefix else { throw bad("not an \(prefix) URL") }
        var authority = Substring(url.dropFirst(prefix.count))
        var target = "/"
        if let end = authority.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            var rest = authority[end...]
            if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
            target = rest.hasPrefix("/") ? String(rest) : "/" + rest
            authority = authority[..<end]
        }
        guard !authority.contains("@") else { throw bad("a URL with a user name cannot be a peer") }
        let split: HostLiteral.Authority
        do { split = try HostLiteral.split(authority, emptyPort: true) } catch let why as HostLiteral.Malformed {
            switch why {
            case .unclosedBracket: throw bad("an IPv6 address without its closing bracket")
            case .textAfterBracket: throw bad("unexpected text after the IPv6 address")
            case .badPort: throw bad(authority.hasPrefix(":") || authority.hasPrefix("[]") ? "a URL without a host" : "a malformed port")
            }
        }
        var host = split.host
        if split.bracketed, let percent = host.firstIndex(of: "%") {
            let address = host[..<percent]
            var zone = Substring(host[host.index(after: percent)...])
            if zone.hasPrefix("25"), zone.count > 2 {
                guard let decoded = percentDecoded(zone.dropFirst(2)) else { throw bad("a malformed percent-encoding in the IPv6 zone") }
                zone = Substring(decoded)
            }
            guard !zone.isEmpty else { throw bad("an empty IPv6 zone") }
            host = address + "%" + zone
        }
        // "http://::1:80/" could be read several ways: RFC 3986 brackets IPv6 literals.
        guard split.bracketed || !host.contains(":") else { throw bad("an IPv6 address must be written in brackets ([::1]:port)") }
        guard !host.isEmpty else { throw bad("a URL without a host") }
        return (host, split.port ?? defaultPort, target)
    }

    /// The longest URL accepted, in bytes.
    static let maxLength = 2048

    /// A URL that may hold anything, as an error message may show it: one line (``OneLine``),
    /// at most 120 characters.
    static func printable(_ url: String) -> String {
        let line = OneLine.text(url)
        return line.count > 120 ? String(line.prefix(120)) + "..." : line
    }

    /// `host` as a URL writes it: an IPv6 literal in brackets, its zone as RFC 6874 encodes it
    /// (`[fe80::1%25eth0]`), so that ``parse(_:scheme:defaultPort:)`` reads it back unchanged.
    package static func uriHost(_ host: String) -> String {
        guard host.contains(":") else { return host }
        guard let percent = host.firstIndex(of: "%") else { return "[\(host)]" }
        var zone = ""
        for b in host[host.index(after: percent)...].utf8 {
            let c = Character(Unicode.Scalar(b))
            if b < 0x80, c.isLetter || c.isNumber || "-._~".contains(c) { zone.append(c) } else {
                zone += "%" + String(b, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return "[\(host[..<percent])%25\(zone)]"
    }

    /// The value of an HTTP `Host` header for `host` and `port`: an IPv6 literal in brackets and
    /// without its zone (the zone names a link on this machine, nothing the server knows; curl
    /// leaves it out too), the port only when it is not `defaultPort`.
    package static func hostHeader(_ host: String, port: UInt16, defaultPort: UInt16) -> String {
        let bare = host.contains(":") ? "[\(host.split(separator: "%", maxSplits: 1).first.map(String.init) ?? host)]" : host
        return bare + (port == defaultPort ? "" : ":\(port)")
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

private extension String {
    func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
