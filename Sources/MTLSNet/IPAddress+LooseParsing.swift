#if canImport(Glibc)
import Glibc
#endif

// This file owns loose IP address parsing: every textual form a resolver accepts, to recognise
// an address written in a common name (the strict forms are IPAddress in IPAddress.swift).

extension IPAddress {
    /// Parses every textual IP form a resolver accepts (`inet_aton`: hex, octal, short forms;
    /// `inet_pton` for IPv6), to recognise an IP written in a common name.
    package static func parseLoose(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_aton(text, &v4) != 0 { return withUnsafeBytes(of: v4.s_addr) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }
}
