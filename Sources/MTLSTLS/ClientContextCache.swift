import Synchronization

// This file owns the client contexts shared by connections with the same settings: a bounded
// process-wide cache of `TLSContext`s keyed by versions, identity and policy.

extension TLSContext {
    // MARK: shared client contexts

    private static let cacheLock = Locked<Void>(())
    nonisolated(unsafe) private static var clientContexts: [ContextKey: (TLSContext, [AnyObject])] = [:]
    /// The keys of `clientContexts`, least recently used first.
    nonisolated(unsafe) private static var recentUse: [ContextKey] = []
    /// The most recently used context with its key (the last of `recentUse`): a program that
    /// connects again with the same settings, the common case, finds it by comparing keys, without
    /// hashing one, probing the dictionary or reordering `recentUse` (issue 40: less code run per
    /// connection).
    nonisolated(unsafe) private static var latest: (key: ContextKey, context: TLSContext)?

    /// What makes two client contexts the same: versions, identity (or candidates) and policy,
    /// by object identity. The objects are kept alive with the context, so no identity is reused.
    private struct ContextKey: Hashable {
        var minVersion: Int, maxVersion: Int
        var automatic: Bool
        var identities: [ObjectIdentifier]
        var policy: ObjectIdentifier?
        var source: ObjectIdentifier?
    }

    /// The client context for `options`, shared by every connection with the same identity,
    /// policy and versions, so that handshakes reuse one `SSL_CTX` and its sessions.
    package static func sharedClient(_ options: TLSClientOptions) throws -> TLSContext {
        let (key, keep) = contextKey(options)
        return try cacheLock.withLock { _ in
            if let latest, latest.key == key { return latest.context }
            if let (c, _) = clientContexts[key] {
                markUsed(key)
                latest = (key, c)
                return c
            }
            let c = try client(options)
            // Bounded: a program that makes a new identity or policy per connection does not
            // keep every old key alive here (contexts hold their identity's key). The least
            // recently used combination goes; the most recent ones keep their sessions.
            while clientContexts.count >= maxSharedContexts, !recentUse.isEmpty {
                let gone = recentUse.removeFirst()
                clientContexts[gone] = nil
                if latest?.key == gone { latest = nil }
            }
            clientContexts[key] = (c, keep)
            markUsed(key)
            latest = (key, c)
            return c
        }
    }

    /// Moves `key` to the most recently used end of `recentUse` (called under `cacheLock`).
    private static func markUsed(_ key: ContextKey) {
        if let i = recentUse.firstIndex(of: key) { recentUse.remove(at: i) }
        recentUse.append(key)
    }

    /// Whether a shared client context for `options` is cached now (for tests of the eviction
    /// order); it does not count as a use.
    package static func hasSharedClient(_ options: TLSClientOptions) -> Bool {
        let key = contextKey(options).key
        return cacheLock.withLock { _ in clientContexts[key] != nil }
    }

    package static let maxSharedContexts = 16

    /// The cache key for `options` and the objects a cached context keeps alive with it.
    private static func contextKey(_ options: TLSClientOptions) -> (key: ContextKey, keep: [AnyObject]) {
        var keep: [AnyObject] = []
        var key = ContextKey(minVersion: options.minVersion.rawValue, maxVersion: options.maxVersion.rawValue,
                             automatic: false, identities: [], policy: nil)
        switch options.identity {
        case .none: break
        case .identity(let id): key.identities = [ObjectIdentifier(id)]; keep.append(id)
        case .automatic(let ids): key.automatic = true; key.identities = ids.map(ObjectIdentifier.init); keep += ids as [AnyObject]
        case .candidates(let cs): key.automatic = true; key.identities = cs.map(ObjectIdentifier.init); keep += cs as [AnyObject]
        }
        if let p = options.policy { key.policy = ObjectIdentifier(p); keep.append(p) }
        if let src = options.identitySource { key.source = ObjectIdentifier(src); key.identities = []; key.automatic = false; keep.append(src) }
        return (key, keep)
    }

    /// Drops every shared client context with its session cache (and its references to
    /// identities and policies). Connections still open keep theirs.
    package static func clearSharedClients() {
        let dropped = cacheLock.withLock { _ -> [ContextKey: (TLSContext, [AnyObject])] in
            let all = clientContexts
            clientContexts.removeAll()
            recentUse.removeAll()
            latest = nil
            return all
        }
        _ = dropped // released outside the lock
    }
}
