import AsyncHTTPClient
import MTLSNIOSSL
import NIOCore

extension HTTPClient.Configuration {
    /// An AsyncHTTPClient configuration whose connections present `tls`'s identity and whose
    /// servers libmtls alone judges (``MTLSNIOSSL/MTLSClientTLS``'s policy: host rules, pinned
    /// anchors, pins, verify-as), with connection retries off; the rest is AsyncHTTPClient's
    /// default.
    ///
    /// Retries off (`connectionPool.retryConnectionEstablishment = false`): a server that refuses
    /// the connection, or that libmtls refuses, fails the request at once with its error, where
    /// AsyncHTTPClient's default would retry with a backoff and report it only at the request's
    /// deadline. A refusal by libmtls is a policy decision that a retry does not change. Set it
    /// back to `true` for servers whose connections are flaky at scale.
    ///
    /// ```swift
    /// let tls = try MTLSClientTLS(identity: identity, policy: policy)
    /// let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(mtls: tls))
    /// ```
    /// See ``useMTLS(_:)`` for how the decision is made and what a refused request throws.
    public init(mtls tls: MTLSClientTLS) {
        self.init(tlsConfiguration: tls.tlsConfigurationDecidedByLibmtls)
        connectionPool.retryConnectionEstablishment = false
        useMTLS(tls)
    }

    /// Makes this configuration's TLS `tls`'s: its identity, and libmtls's decision about every
    /// server. The other settings are kept.
    ///
    /// AsyncHTTPClient takes no verification callback, so BoringSSL's own check is turned off and
    /// libmtls judges each new connection (HTTP/1.1 and HTTP/2) after its handshake and before its
    /// first request (``MTLSNIOSSL/MTLSPeerVerifier/verifyEstablishedConnection(_:peer:)``). A
    /// refused server fails the request with ``MTLSNIOSSL/MTLSPeerRejected``, whose
    /// `result.reasons` carry libmtls's stable codes and messages (`unknown_issuer` or
    /// `untrusted_root` for a server outside the pinned anchors, `pin_mismatch`,
    /// `name_mismatch`...); with connection retries on (AsyncHTTPClient's default, which
    /// ``init(mtls:)`` turns off) the request fails with it only at its deadline. No request byte reaches a server before libmtls trusts it,
    /// but the handshake has completed, so the client's certificate has been presented to it.
    ///
    /// Connection initializers already set run after libmtls's (and only for a trusted server).
    public mutating func useMTLS(_ tls: MTLSClientTLS) {
        tlsConfiguration = tls.tlsConfigurationDecidedByLibmtls
        let verify = tls.connectionVerifier
        http1_1ConnectionDebugInitializer = Self.verifyingFirst(verify, then: http1_1ConnectionDebugInitializer)
        http2ConnectionDebugInitializer = Self.verifyingFirst(verify, then: http2ConnectionDebugInitializer)
    }

    /// `verify`, then `next` (if any) once the server is trusted.
    private static func verifyingFirst(_ verify: @escaping @Sendable (Channel) -> EventLoopFuture<Void>,
                                       then next: (@Sendable (Channel) -> EventLoopFuture<Void>)?)
        -> @Sendable (Channel) -> EventLoopFuture<Void> {
        guard let next else { return verify }
        return { channel in verify(channel).flatMap { next(channel) } }
    }
}
