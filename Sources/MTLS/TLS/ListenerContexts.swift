import Synchronization

// This file owns a listener's contexts for the identity in force: one SSL_CTX per identity of
// its source, made at the first handshake that finds a new one.

/// A listener's TLS context for the identity in force (issue 26): one `SSL_CTX` per identity of
/// the listener's ``IdentitySource``, made when a handshake first finds a new identity in force,
/// so every handshake starts from a context that already holds its identity.
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
final class ListenerContexts: Sendable {
    private let source: IdentitySource
    private let options: TLSServerOptions
    private let context: Mutex<TLSContext>

    /// Starts with `first`, made for `source`'s identity in force now.
    init(_ first: TLSContext, source: IdentitySource, options: TLSServerOptions) {
        self.source = source
        self.options = options
        context = Mutex(first)
    }

    /// The context whose `SSL_CTX` holds the identity in force now.
    func current() -> TLSContext {
        let id = source.current
        let ctx = context.withLock { $0 }
        if ctx.config.installedIdentity === id { return ctx }
        guard let fresh = try? TLSContext.server(options, identitySource: source),
              let made = fresh.config.installedIdentity else { return ctx }
        // Two handshakes may make one each at once: keep the newer one, and never put back an
        // identity the source has already left.
        context.withLock { cur in
            if cur.config.installedIdentity !== source.current, made === source.current { cur = fresh }
        }
        return fresh // its identity was in force when this handshake started, or came after
    }
}
