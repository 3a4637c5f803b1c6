/// The one reader of an HTTP/1.x request line (RFC 9112 section 3), `METHOD SP request-target SP
/// HTTP/1.1` (or `HTTP/1.0`): what the small responder (metrics, status, ACME challenges) and the
/// tunnel's request rewriter both accept. A method is a token, a target is visible ASCII, the parts
/// are separated by single spaces. What each caller asks on top (the responder: an origin-form
/// target; the rewriter: no CONNECT) is its own.
package struct HTTPRequestLine: Sendable {
    package var method: ArraySlice<UInt8>
    package var target: ArraySlice<UInt8>
    package var version: ArraySlice<UInt8>

    /// `line` (without its CR LF) read, or nil when it is no HTTP/1.x request line.
    package static func parse(_ line: ArraySlice<UInt8>) -> HTTPRequestLine? {
        let parts = line.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, parts[0].allSatisfy(isTokenByte),
              !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 != 0x7F }),
              parts[2].elementsEqual("HTTP/1.1".utf8) || parts[2].elementsEqual("HTTP/1.0".utf8) else { return nil }
        return HTTPRequestLine(method: parts[0], target: parts[1], version: parts[2])
    }

    /// A token byte (RFC 9110 section 5.6.2: a method, a header field name).
    package static func isTokenByte(_ b: UInt8) -> Bool {
        switch b {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
        default: return Array("!#$%&'*+-.^_`|~".utf8).contains(b)
        }
    }
}
