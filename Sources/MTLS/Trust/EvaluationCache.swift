import FoundationEssentials
import Synchronization

/// Recent evaluations of one policy, so that a server verifying the same client chain again (or
/// a client reconnecting) pays a hash lookup instead of parsing and path validation.
///
/// It never changes an answer: an entry is keyed by the exact presented chain (DER), the host,
/// the purpose, the policy version and a time bucket, and is used only while the evaluation time
/// stays inside the window in which no validity date of an involved certificate and no pin
/// expiry falls. Evaluations with CRLs are not cached. Thread-safe.
final class EvaluationCache: Sendable {
    struct Key: Hashable {
        let chain: [[UInt8]]
        /// The peer as it selects the rule and the name checked (host, zone, port, verify-as; the
        /// SNI selects nothing), and the overrides' ``TrustOverrides/cacheKey``: fields, not one
        /// string, so that a lookup formats nothing.
        let peer: TrustPeer
        let overrides: String?
        let purpose: TrustPurpose
        let version: UInt64
        let bucket: Int64

        init(chain: [[UInt8]], peer: TrustPeer, overrides: String?, purpose: TrustPurpose, version: UInt64, second: Int64) {
            self.chain = chain
            var peer = peer
            peer.sni = nil
            self.peer = peer
            self.overrides = overrides
            self.purpose = purpose
            self.version = version
            bucket = second >= 0 ? second / EvaluationCache.bucketSeconds : (second + 1) / EvaluationCache.bucketSeconds - 1
            self.second = second
        }
        /// Not part of equality: the exact second is checked against the entry's window.
        let second: Int64
        static func == (a: Key, b: Key) -> Bool {
            a.version == b.version && a.bucket == b.bucket && a.purpose == b.purpose && a.peer == b.peer
                && a.overrides == b.overrides && a.chain == b.chain
        }
        func hash(into h: inout Hasher) {
            h.combine(version); h.combine(bucket); h.combine(purpose); h.combine(peer); h.combine(overrides); h.combine(chain)
        }
    }

    struct Entry {
        let result: TrustResult
        let window: ClosedRange<Date>
    }

    static let bucketSeconds: Int64 = 300
    /// At most this many entries; the cache is emptied when full (cheap, and simple to reason about).
    static let capacity = 4096

    private let entries = Mutex<[Key: Entry]>([:])

    /// The entry for `key`, when the key's second is inside its window.
    func lookup(_ key: Key) -> Entry? {
        entries.withLock { e in
            guard let entry = e[key] else { return nil }
            return entry.window.contains(Date(timeIntervalSince1970: TimeInterval(key.second))) ? entry : nil
        }
    }

    func store(_ key: Key, _ result: TrustResult, stableUntil window: ClosedRange<Date>?) {
        guard let window else { return }
        entries.withLock { e in
            if e.count >= Self.capacity { e.removeAll(keepingCapacity: true) }
            // Older versions can never be asked for again.
            if let any = e.keys.first, any.version != key.version { e.removeAll(keepingCapacity: true) }
            e[key] = Entry(result: result, window: window)
        }
    }

    /// Forgets every entry.
    func removeAll() { entries.withLock { $0.removeAll() } }
}

/// How long an evaluation's answer stands without being made again: while the policy keeps the
/// version it was made under and the evaluation time stays inside `window` (in which no validity
/// date of a certificate involved and no pin expiry falls — the same window as the cache's), or
/// for good when the policy has a fixed time. An evaluation whose answer can change otherwise
/// (CRLs, revocation checking, a report-only rule that reports) has none.
struct EvaluationStanding: Sendable {
    let window: ClosedRange<Date>
    /// The policy has a fixed time: its answer does not move with the clock.
    let fixedTime: Bool

    /// Whether the answer still stands at `now` (under the same policy version), to the second
    /// as evaluations are made.
    func holds(at now: Date) -> Bool {
        fixedTime || window.contains(Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down)))
    }
}
