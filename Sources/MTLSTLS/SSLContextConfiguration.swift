internal import COpenSSL

// This file owns the public configuration of an OpenSSL `SSL_CTX` the application owns
// (SSLContextConfiguration): its identity and policy, and the peer of its `SSL`s.

/// Configuring an OpenSSL `SSL_CTX` that belongs to the application (or to libcurl, through
/// `CURLOPT_SSL_CTX_FUNCTION`). The pointers are OpenSSL 3 objects of the libssl libmtls links
/// (the system's); the application keeps owning them and frees them as usual.
public enum SSLContextConfiguration {
    /// Makes `sslContext` (an `SSL_CTX *`) present `identity` and judge its peers with `policy`
    /// through libmtls's evaluator. `purpose` is `.serverAuth` for a context that connects to
    /// servers, `.clientAuth` for one that accepts clients. The validation name is the one the
    /// application set on each `SSL` (`SSL_set1_host`), else its SNI.
    /// `overrides` (see ``TrustOverrides``) apply on top of `policy` to every peer of the
    /// context, in the same evaluator. A `.clientAuth` context requests client certificates and
    /// keeps the application's own verify flags (require, once, post-handshake).
    ///
    /// The context holds its own references to `identity` and `policy` (released when it is
    /// freed); calling again replaces the configuration. Configure a context before it is used
    /// by other threads. Throws ``MTLSError/Code/invalidPolicy`` for invalid overrides, or a
    /// `.clientAuth` context whose policy has no client anchors (the system store is never
    /// trusted for clients unless the policy says so), and the identity's errors when OpenSSL
    /// refuses its certificate or key.
    public static func configure(sslContext: UnsafeMutableRawPointer, identity: Identity?, policy: TrustPolicy?,
                                 purpose: TrustPurpose = .serverAuth, overrides: TrustOverrides? = nil) throws {
        try overrides?.validate()
        try TLSContext.configure(sslContext: OpaquePointer(sslContext), identity: identity, policy: policy, purpose: purpose,
                                 overrides: overrides.flatMap { $0.isEmpty ? nil : $0 })
    }

    /// Like ``configure(sslContext:identity:policy:purpose:overrides:)``, presenting the identity
    /// of `identitySource`: each `SSL` of the context takes the one in force when its handshake
    /// starts, whole, and its sessions are bound to it. The context holds a reference to the
    /// source. Throws as ``configure(sslContext:identity:policy:purpose:overrides:)``.
    public static func configure(sslContext: UnsafeMutableRawPointer, identitySource: IdentitySource, policy: TrustPolicy?,
                                 purpose: TrustPurpose = .serverAuth, overrides: TrustOverrides? = nil) throws {
        try overrides?.validate()
        try TLSContext.configure(sslContext: OpaquePointer(sslContext), identity: identitySource.current, policy: policy, purpose: purpose,
                                 overrides: overrides.flatMap { $0.isEmpty ? nil : $0 }, identitySource: identitySource)
    }
}

extension SSLContextConfiguration {
    /// Tells libmtls which peer one `SSL` (an `SSL *` made from a configured context) reaches:
    /// its host and port select the host rule, its verify-as (else its host) is the name checked.
    /// Call before the handshake. Without it, the host is what the application set with
    /// `SSL_set1_host` (else its SNI) and there is no port, so only port-less rules apply.
    /// The `SSL` keeps the peer until it is freed; call from the thread that uses it.
    public static func setPeer(ssl: UnsafeMutableRawPointer, _ peer: TrustPeer) {
        let ssl = OpaquePointer(ssl)
        if let state = TLSHandshakeState.of(ssl) {
            state.peer = peer
        } else {
            let state = TLSHandshakeState()
            state.peer = peer
            state.attach(to: ssl)
        }
    }

    /// Tells libmtls the peer of every `SSL` made from `sslContext` that was not given one with
    /// ``setPeer(ssl:_:)`` (for libcurl, whose `CURLOPT_SSL_CTX_FUNCTION` sees only the context,
    /// which it makes per connection). Replaces a peer set before; the context keeps the peer
    /// until it is freed. Call before the context's `SSL`s start their handshakes.
    public static func setPeer(sslContext: UnsafeMutableRawPointer, _ peer: TrustPeer) {
        let ctx = OpaquePointer(sslContext)
        let previous = SSL_CTX_get_ex_data(ctx, TLSExData.ctxPeer)
        SSL_CTX_set_ex_data(ctx, TLSExData.ctxPeer, Unmanaged.passRetained(PeerBox(peer)).toOpaque())
        if let previous { Unmanaged<PeerBox>.fromOpaque(previous).release() }
    }
}
