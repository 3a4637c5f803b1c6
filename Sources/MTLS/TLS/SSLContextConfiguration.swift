internal import COpenSSL

// This file owns the public configuration of an OpenSSL `SSL_CTX` the application owns
// (SSLContextConfiguration): its identity and policy, and the peer of its `SSL`s.

/// Configuring an OpenSSL `SSL_CTX` that belongs to the application (or to libcurl, through
/// `CURLOPT_SSL_CTX_FUNCTION`).
public enum SSLContextConfiguration {
    /// Makes `sslContext` (an `SSL_CTX *`) present `identity` and judge its peers with `policy`
    /// through libmtls's evaluator. `purpose` is `.serverAuth` for a context that connects to
    /// servers, `.clientAuth` for one that accepts clients. The validation name is the one the
    /// application set on each `SSL` (`SSL_set1_host`), else its SNI.
    /// `overrides` (see ``TrustOverrides``) apply on top of `policy` to every peer of the
    /// context, in the same evaluator.
    public static func configure(sslContext: UnsafeMutableRawPointer, identity: Identity?, policy: TrustPolicy?,
                                 purpose: TrustPurpose = .serverAuth, overrides: TrustOverrides? = nil) throws {
        try overrides?.validate()
        try TLSContext.configure(sslContext: OpaquePointer(sslContext), identity: identity, policy: policy, purpose: purpose,
                                 overrides: overrides.flatMap { $0.isEmpty ? nil : $0 })
    }

    /// Like ``configure(sslContext:identity:policy:purpose:overrides:)``, presenting the identity
    /// of `identitySource`: each `SSL` of the context takes the one in force when its handshake
    /// starts, whole, and its sessions are bound to it.
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
    /// which it makes per connection). Replaces a peer set before.
    public static func setPeer(sslContext: UnsafeMutableRawPointer, _ peer: TrustPeer) {
        let ctx = OpaquePointer(sslContext)
        let previous = SSL_CTX_get_ex_data(ctx, TLSExData.ctxPeer)
        SSL_CTX_set_ex_data(ctx, TLSExData.ctxPeer, Unmanaged.passRetained(PeerBox(peer)).toOpaque())
        if let previous { Unmanaged<PeerBox>.fromOpaque(previous).release() }
    }
}
