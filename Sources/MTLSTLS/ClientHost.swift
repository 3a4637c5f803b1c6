import MTLSBase
import MTLSNet
import MTLSTrust

/// A client connection's host, read: refused if it carries a port (``HostLiteral/hostOnly(_:)``),
/// its brackets removed, and as its peer keeps it (``TrustPeer/kept(_:)``: an address in its
/// canonical text, its zone apart).
///
/// A program connects to the same host again and again, and the reading of its host is the same
/// each time: the last host read is kept with its reading, and a connection to a host of the same
/// bytes takes it (issue 40: about 60 of the 64-byte lines of code a resumed client handshake ran
/// went to reading its host, cold each time). Compared byte for byte, never as Swift compares
/// strings (canonical equivalence): two spellings of a name are two hosts. A host that is refused
/// is never kept.
package struct ClientHost: Sendable {
    /// Without brackets (`::1` for `[::1]`): what the socket connects to.
    package let bare: String
    /// As the connection's peer keeps it; `kept.isAddress`: no SNI by default.
    package let kept: TrustPeer.KeptHost

    private static let last = Locked<(host: String, reading: ClientHost)?>(nil)

    /// The reading of `host` (empty: no host, for a wrapped socket without one). Throws
    /// ``MTLSError/Code/invalidArgument`` for a host with a port or a malformed bracket.
    package static func reading(_ host: String) throws -> ClientHost {
        if let hit = last.withLock({ l -> ClientHost? in
            guard let l, sameBytes(l.host, host) else { return nil }
            return l.reading
        }) {
            return hit
        }
        if !host.isEmpty { _ = try HostLiteral.hostOnly(host) }  // "h:443" is refused here, not by name resolution
        let bare = HostLiteral.unbracketed(host)
        let reading = ClientHost(bare: bare, kept: TrustPeer.kept(bare))
        last.withLock { $0 = (host, reading) }
        return reading
    }

    /// Whether `a` and `b` are the same UTF-8 bytes (Swift's `==` is canonical equivalence).
    private static func sameBytes(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        return a.withUTF8 { x in b.withUTF8 { y in x.count == y.count && x.elementsEqual(y) } }
    }
}
