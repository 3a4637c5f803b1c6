import Synchronization

// This file owns a listener's contexts for the identity in force: one SSL_CTX per identity of
// its source, made when the identity is put in force (or by the first handshake that finds it).

/// A listener's TLS context for the identity in force (issue 26): one `SSL_CTX` per identity of
/// the listener's ``IdentitySource``, made when the source puts a new identity in force (or by a
/// handshake that finds it first), so every handshake starts from a context that already holds
/// its identity.
///
/// Why: installing an identity on each `SSL` (`SSL_use_cert_and_key`: a key–certificate match, the
/// security checks of each certificate, a chain copy) is work a fixed identity never did per
/// handshake. With a context per identity, a handshake costs one reference read here and one in
/// the source, whatever the source (fixed, swapped, or following a store), before and after any
/// number of rotations. The context of the previous identity is freed when the last connection
/// made from it is (a connection holds its context); its session tickets are not accepted by the
/// new one (each `SSL_CTX` has its own ticket keys), so a client resumes nothing made under the
/// old identity. If a new context cannot be made, handshakes go on from the previous one and
/// install the new identity on each `SSL` (``TLSHandshakeState/takeIdentity(from:ssl:server:config:)``).
package final class ListenerContexts: Sendable, IdentityObserver {
    private let source: IdentitySource
    private let options: TLSServerOptions
    private let context: Locked<TLSContext>
    /// The last identity no context could be made for: handshakes do not try again for it (each
    /// try builds a whole `SSL_CTX`), they go on from the previous context and install it on
    /// their `SSL` (or present the last good one). Another identity put in force is tried.
    private let unusable = Locked<Identity?>(nil)

    /// Starts with `first`, made for `source`'s identity in force now.
    package init(_ first: TLSContext, source: IdentitySource, options: TLSServerOptions) {
        self.source = source
        self.options = options
        context = Locked(first)
        source.observe(self)
    }

    /// Makes the context of a new identity at once, on the thread that put it in force: the
    /// watcher's (`mtls-watch`) for a change in the store. So its long-lived allocations come from
    /// that thread's malloc arena, which serves only rotations, not from a handshake thread's,
    /// where they would sit among each handshake's short-lived ones and keep freed memory from
    /// being reused (RSS that steps up with rotations although the live heap does not grow).
    /// A handshake that starts before it is made makes it itself (``current()``).
    package func identityReplaced(_ identity: Identity) {
        _ = current()
    }

    /// The context whose `SSL_CTX` holds the identity in force now.
    package func current() -> TLSContext {
        let id = source.current
        let ctx = context.withLock { $0 }
        if ctx.config.installedIdentity === id { return ctx }
        if unusable.withLock({ $0 === id }) { return ctx }
        guard let fresh = try? TLSContext.server(options, identitySource: source),
              let made = fresh.config.installedIdentity else {
            unusable.withLock { $0 = id }
            return ctx
        }
        // Two handshakes may make one each at once: keep the newer one, and never put back an
        // identity the source has already left.
        context.withLock { cur in
            if cur.config.installedIdentity !== source.current, made === source.current { cur = fresh }
        }
        return fresh // its identity was in force when this handshake started, or came after
    }
}
