import Synchronization

/// Bytes moved by forwarding loops, shared by all the connections of a tunnel (for its metrics).
public final class ForwardCounters: Sendable {
    private let fromTLS_ = Atomic<UInt64>(0)
    private let toTLS_ = Atomic<UInt64>(0)
    /// Counters at zero.
    public init() {}
    /// Bytes read from TLS peers and written to plaintext sockets.
    public var bytesFromTLS: UInt64 { fromTLS_.load(ordering: .relaxed) }
    /// Bytes read from plaintext sockets and written to TLS peers.
    public var bytesToTLS: UInt64 { toTLS_.load(ordering: .relaxed) }
    func addFromTLS(_ n: Int) { fromTLS_.add(UInt64(n), ordering: .relaxed) }
    func addToTLS(_ n: Int) { toTLS_.add(UInt64(n), ordering: .relaxed) }
}
