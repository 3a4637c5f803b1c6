import Synchronization

// This file owns the client contexts shared by connections with the same settings: a bounded
// process-wide cache of `TLSContext`s keyed by versions, identity and policy.

extension TLSContext {
    // MARK: shared client contexts

    private static let cacheLock = Mutex<Void>(())
    nonisolated(unsafe) private static var clientContexts: [ContextKey: (TLSContext, [AnyObject])] = [:]

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
    static func sharedClient(_ options: TLSClientOptions) throws -> TLSContext {
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
        return try cacheLock.withLock { _ in
            if let (c, _) = clientContexts[key] { return c }
            let c = try client(options)
            // Bounded: a program that makes a new identity or policy per connection does not
            // keep every old key alive here (contexts hold their identity's key).
            if clientContexts.count >= maxSharedContexts { clientContexts.removeAll() }
            clientContexts[key] = (c, keep)
            return c
        }
    }

    static let maxSharedContexts = 16

    /// Drops every shared client context with its session cache (and its references to
    /// identities and policies). Connections still open keep theirs.
    static func clearSharedClients() {
        let dropped = cacheLock.withLock { _ -> [ContextKey: (TLSContext, [AnyObject])] in
            let all = clientContexts
            clientContexts.removeAll()
            return all
        }
        _ = dropped // released outside the lock
    }
}
