import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// IP address text and bytes (internal: the public API takes and gives addresses as text).
package enum IPAddress {
    /// Text of a 4- or 16-byte address, or nil for another length.
    package static func text(_ bytes: [UInt8]) -> String? {
        let family: Int32
        switch bytes.count {
        case 4: return dotted(bytes)
        case 16: family = AF_INET6
        default: return nil
        }
        // On the stack, not an array per call (issue 40: a client's host is normalised per connection).
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { buf in
            bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, buf.baseAddress, socklen_t(buf.count)) }
                .map { String(cString: $0) }
        }
    }

    /// The bytes of an IPv4 or IPv6 literal (brackets allowed around IPv6), or nil if `text` is
    /// not an IP literal.
    package static func bytes(_ text: String) -> [UInt8]? {
        let t = HostLiteral.unbracketed(text)
        // Read on the stack; an array made only for an address (issue 40: a client's host is
        // read per connection, and most hosts are names).
        var a = in6_addr()
        if inet_pton(AF_INET, t, &a) == 1 { return withUnsafeBytes(of: &a) { Array($0.prefix(4)) } }
        if inet_pton(AF_INET6, t, &a) == 1 { return withUnsafeBytes(of: &a) { Array($0) } }
        return nil
    }

    /// The dotted-decimal text of an IPv4 address (`inet_ntop`'s, written without its `sprintf`:
    /// issue 40, about 1,700 instructions per client connection).
    private static func dotted(_ b: [UInt8]) -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { buf in
            var n = 0
            for (i, byte) in b.enumerated() {
                if i > 0 { buf[n] = UInt8(ascii: "."); n += 1 }
                if byte >= 100 { buf[n] = UInt8(ascii: "0") + byte / 100; n += 1 }
                if byte >= 10 { buf[n] = UInt8(ascii: "0") + byte / 10 % 10; n += 1 }
                buf[n] = UInt8(ascii: "0") + byte % 10; n += 1
            }
            return String(decoding: UnsafeBufferPointer(rebasing: buf[..<n]), as: UTF8.self)
        }
    }

    /// An address with its IPv6 zone (scope) id kept apart: `fe80::1%eth0` and `[::1%1]` are
    /// the addresses `fe80::1` and `::1` with the zones `eth0` and `1`. The zone picks the link a
    /// link-local address is on; it is not part of the address, so host rules for the address
    /// apply to it (a rule may name a zone too, see ``HostPattern``). Any spelling
    /// ``reached(_:)`` takes is taken for the address; a zone is allowed only after an IPv6
    /// literal and must be an interface name or index (1–64 characters, none of
    /// `%`, `:`, `/`, `[`, `]`, space or control). nil for a name, an IPv4 address with a zone, or
    /// a malformed zone.
    package static func scoped(_ text: String) -> (address: [UInt8], zone: String?)? {
        let t = HostLiteral.unbracketed(text)
        guard let percent = t.utf8.firstIndex(of: UInt8(ascii: "%")) else { return reached(t).map { ($0, nil) } }
        let address = String(t[..<percent]), zone = String(t[t.index(after: percent)...])
        guard address.contains(":"), isValidZone(zone), let bytes = reached(address) else { return nil }
        return (bytes, zone)
    }

    /// Interface names on Linux are at most 15 bytes and interface indexes are decimal; the
    /// limit and the refused characters keep a zone from carrying a port, a path or a second
    /// address.
    static func isValidZone(_ zone: String) -> Bool {
        !zone.isEmpty && zone.utf8.count <= 64
            && zone.utf8.allSatisfy { c in c > 0x20 && c < 0x7f && !"%:/[]".utf8.contains(c) }
    }

    /// Whether two zones name the same link: the same text, or an interface name and an index
    /// (or two spellings) the system maps to the same interface. nil zones are equal only to
    /// each other.
    package static func sameZone(_ a: String?, _ b: String?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        if a == b { return true }
        func index(_ z: String) -> UInt32 {
            if let n = UInt32(z) { return n }
            return if_nametoindex(z)
        }
        let ia = index(a)
        return ia != 0 && ia == index(b)
    }

    /// The address a socket reaches when given `text` as a host: any numeric form the system's
    /// resolver takes without a lookup (`127.1`, `0177.0.0.1`, `0x7f.0.0.1`, `2130706433`,
    /// `0:0::1`), an IPv4-mapped IPv6 address (`::ffff:10.0.0.5`) being the IPv4 address. nil for
    /// a name.
    static func reached(_ text: String) -> [UInt8]? {
        let t = HostLiteral.unbracketed(text)
        var b = bytes(t)
        if b == nil, t.contains(where: \.isNumber), t.allSatisfy({ $0.isHexDigit || "xX.:".contains($0) }) {
            var hints = addrinfo()
            hints.ai_flags = AI_NUMERICHOST
            var list: UnsafeMutablePointer<addrinfo>? = nil
            if getaddrinfo(t, nil, &hints, &list) == 0, let a = list?.pointee, let sa = a.ai_addr {
                switch a.ai_family {
                case AF_INET:
                    b = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { p in
                        withUnsafeBytes(of: p.pointee.sin_addr) { Array($0) }
                    }
                case AF_INET6:
                    b = sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
                        withUnsafeBytes(of: p.pointee.sin6_addr) { Array($0) }
                    }
                default: break
                }
            }
            if list != nil { freeaddrinfo(list) }
        }
        if let v6 = b, v6.count == 16, v6[0..<10].allSatisfy({ $0 == 0 }), v6[10] == 0xff, v6[11] == 0xff {
            return Array(v6[12..<16])
        }
        return b
    }
}
