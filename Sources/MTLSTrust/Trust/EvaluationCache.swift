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
        /// The result with revocation checking's outcome, as a warm revocation cache gave it.
        var revocation: RevocationMemo? = nil
    }

    /// An evaluation's revocation outcome kept with its cached path decision: valid while the
    /// revocation caches have not changed (``CRLStore/generation``) and before `until` (the
    /// earliest time at which a CRL or response used is due for refresh), so a handshake with
    /// a warm cache pays one more comparison, not the checks. Only outcomes read entirely from
    /// memory (or from CRL files) with every status known are kept.
    struct RevocationMemo {
        let generation: UInt64
        let until: Date
        let result: TrustResult
    }

    static let bucketSeconds: Int64 = 300
    /// At most this many entries; the cache is emptied when full (cheap, and simple to reason about).
    static let capacity = 4096

    private let entries = Locked<[Key: Entry]>([:])

    /// The cached result for `key` when the key's time is inside its window, with that window.
    /// With a revocation cache `memo` generation: the memoized result with revocation's outcome
    /// instead (`memoized` true) when it was made under that generation and `time` is before its
    /// end. Decided under the lock, so the warm path copies one result, as a plain lookup does.
    func lookup(_ key: Key, memo generation: UInt64? = nil, at time: Date = Date())
        -> (result: TrustResult, window: ClosedRange<Date>, memoized: Bool)? {
        entries.withLock { e in
            guard let entry = e[key], entry.window.contains(Date(timeIntervalSince1970: TimeInterval(key.second))) else {
                return nil
            }
            if let generation, let memo = entry.revocation, memo.generation == generation, time < memo.until {
                return (memo.result, entry.window, true)
            }
            return (entry.result, entry.window, false)
        }
    }

    /// Keeps `memo` with the entry for `key` (if it is still there).
    func memoize(_ key: Key, _ memo: RevocationMemo) {
        entries.withLock { e in
            guard e[key] != nil else { return }
            e[key]?.revocation = memo
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
package struct EvaluationStanding: Sendable {
    let window: ClosedRange<Date>
    /// The policy has a fixed time: its answer does not move with the clock.
    package let fixedTime: Bool

    /// Whether the answer still stands at `now` (under the same policy version), to the second
    /// as evaluations are made.
    package func holds(at now: Date) -> Bool {
        fixedTime || window.contains(Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down)))
    }
}
