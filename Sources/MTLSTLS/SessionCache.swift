internal import COpenSSL
import Synchronization

// This file owns the client session cache: sessions kept for resumption, each with its
// ResumptionRecord, admitted again only under the same binding.

/// What a client session is cached under: the host and port reached, the name sent (SNI), the
/// name verified, and the overrides it was judged under (a session judged under other anchors,
/// pins or verify-as is never resumed). Fields, not one text made per connection (issue 40).
struct SessionKey: Hashable, Sendable {
    let host: String
    let port: UInt16
    let sni: String?
    let verifyAs: String?
    let overrides: String?
}

/// Client sessions for resumption, keyed by host, port, names and identity; each carries its
/// ``ResumptionRecord`` (binding, presented chain, evaluation), checked before it is offered
/// again (a resumed handshake carries no certificate).
final class SessionCache: Sendable {
    /// A cached session and its record. An established `SSL_SESSION` is reference counted and
    /// not changed again, and OpenSSL lets threads resume from one session at once: sharing the
    /// pointer is safe.
    private struct Entry: @unchecked Sendable {
        var session: OpaquePointer
        var record: ResumptionRecord
    }
    /// The entries by key, and the one last stored or found with its key: a client that
    /// connects to one server again and again finds its session without hashing the key (issue
    /// 40: hashing its strings and probing the table ran ~35 of the 64-byte lines of code a
    /// resumed client handshake ran). `last` is always the map's entry for its key, or nil: every
    /// change to the map below keeps it so. It holds no reference of its own.
    private struct Entries: Sendable {
        var map: [SessionKey: Entry] = [:]
        var last: (key: SessionKey, entry: Entry)?

        mutating func find(_ key: SessionKey) -> Entry? {
            if let last, last.key == key { return last.entry }
            guard let e = map[key] else { return nil }
            last = (key, e)
            return e
        }

        /// Removes the entry for `key` (the caller frees its session).
        mutating func removeValue(forKey key: SessionKey) -> Entry? {
            if let l = last, l.key == key { last = nil }
            return map.removeValue(forKey: key)
        }
    }
    private let entries = Locked<Entries>(Entries())

    deinit { entries.withLock { for e in $0.map.values { SSL_SESSION_free(e.session) } } }

    /// A new reference to the cached session for `key`, with the evaluation it resumes with, if
    /// its record admits it under `binding` (same policy object and version, peer and identity;
    /// the chain still trusted at the policy's time). A session that does not is dropped.
    func lookup(_ key: SessionKey, binding: ResumptionBinding, policy: TrustPolicy, peer: TrustPeer) -> (OpaquePointer, TrustResult?)? {
        let found: (OpaquePointer, ResumptionRecord)? = entries.withLock { entries in
            guard let e = entries.find(key) else { return nil }
            SSL_SESSION_up_ref(e.session)
            return (e.session, e.record)
        }
        guard let (session, record) = found else { return nil }
        guard let admitted = record.admit(under: binding, policy: policy, peer: peer, purpose: .serverAuth) else {
            SSL_SESSION_free(session)
            remove(key, ifStill: session)
            return nil
        }
        return (session, admitted.evaluation)
    }

    /// Keeps `session` (taking the caller's reference) for `key`.
    func store(_ key: SessionKey, _ session: OpaquePointer, _ record: ResumptionRecord) {
        entries.withLock { entries in
            if let old = entries.map[key] { SSL_SESSION_free(old.session) }
            if entries.map.count >= 1024 {
                for e in entries.map.values { SSL_SESSION_free(e.session) }
                entries.map.removeAll()
            }
            let entry = Entry(session: session, record: record)
            entries.map[key] = entry
            entries.last = (key, entry)
        }
    }

    func remove(_ key: SessionKey) {
        entries.withLock { entries in
            if let old = entries.removeValue(forKey: key) { SSL_SESSION_free(old.session) }
        }
    }

    /// Removes the entry for `key` if it still holds `session` (another thread may have stored a
    /// newer one meanwhile).
    private func remove(_ key: SessionKey, ifStill session: OpaquePointer) {
        entries.withLock { entries in
            guard let old = entries.map[key], old.session == session else { return }
            _ = entries.removeValue(forKey: key)
            SSL_SESSION_free(old.session)
        }
    }

    /// OpenSSL's new-session callback: TLS 1.2 sessions after the handshake, TLS 1.3 tickets
    /// whenever they arrive. Returns 1 when the cache took the reference. A session without a
    /// record (no evaluation was made for it) is not kept.
    static func newSessionCallback(_ ssl: OpaquePointer?, _ session: OpaquePointer?) -> Int32 {
        guard let session, let state = TLSHandshakeState.of(ssl), let cache = state.sessionCache,
              let key = state.sessionKey, let record = ResumptionRecord.of(session),
              SSL_SESSION_is_resumable(session) == 1 else { return 0 }
        cache.store(key, session, record)
        return 1
    }
}
