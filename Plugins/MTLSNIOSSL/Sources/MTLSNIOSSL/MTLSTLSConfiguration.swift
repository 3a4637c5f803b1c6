import MTLS
import NIOCore
import NIOPosix
import NIOSSL

/// How an identity's key reaches BoringSSL.
public enum MTLSKeyUse: Sendable {
    /// A key in memory is handed to BoringSSL (it signs itself, the fastest); a key on a token
    /// signs through ``MTLSSigningKey`` (off the event loop, on the token).
    case boringSSLWhenInMemory
    /// Every signature is made by libmtls through ``MTLSSigningKey``.
    case alwaysLibmtls
}

extension Identity {
    /// The identity's certificates for a `TLSConfiguration`: the leaf, then its chain up to but
    /// excluding a self-signed root (a peer never needs it sent), as libmtls's own connections do.
    func nioCertificateChain() throws -> [NIOSSLCertificateSource] {
        try ([leaf] + chain.filter { !$0.isSelfSigned }).map { .certificate(try NIOSSLCertificate(bytes: $0.der, format: .der)) }
    }

    /// The identity's key for a `TLSConfiguration` (see ``MTLSKeyUse``).
    func nioPrivateKey(_ use: MTLSKeyUse, threadPool: NIOThreadPool) throws -> NIOSSLPrivateKeySource {
        if case .boringSSLWhenInMemory = use, privateKey.tokenURI == nil {
            let der = try privateKey.pkcs8DER()
            return .privateKey(try der.withBytes { try NIOSSLPrivateKey(bytes: Array($0), format: .der) })
        }
        return .privateKey(NIOSSLPrivateKey(customPrivateKey: try MTLSSigningKey(privateKey, threadPool: threadPool)))
    }
}

extension TrustPolicy {
    /// Every anchor the policy or `overrides` names (the policy's, its host rules', the
    /// overrides'), for BoringSSL's trust store.
    func allAnchors(_ overrides: TrustOverrides?) -> [Certificate] {
        var seen = Set<Certificate>()
        return (anchors + hostRules.flatMap { $0.anchors ?? [] } + (overrides?.anchors ?? [])).filter { seen.insert($0).inserted }
    }
}

/// A client's TLS for swift-nio-ssl made from MTLS parts in one call: the identity presented (a
/// `.p12`, a store label or a token, signing on the token off the event loop) and the server
/// judged by an MTLS ``MTLS/TrustPolicy`` (host rules, pinned anchors, pins, verify-as).
///
/// With AsyncHTTPClient, use the `MTLSAsyncHTTPClient` product:
/// `HTTPClient.Configuration(mtls: tls)` lets libmtls make the whole decision, so a refused
/// server fails the request with ``MTLSPeerRejected`` and libmtls's reasons (`untrusted_root`,
/// `unknown_issuer`, `pin_mismatch`, `name_mismatch`...).
///
/// ``tlsConfiguration`` used alone (with a stack that takes no verification callback) still fails
/// closed: BoringSSL checks during the handshake that the server chains to one of the policy's
/// anchors (no name check, since verify-as may name another name), and ``connectionVerifier``
/// adds libmtls's decision before the first request — but a server outside the anchors is then
/// refused with BoringSSL's reason (`CERTIFICATE_VERIFY_FAILED`). With NIO directly,
/// ``makeClientHandler(context:peer:)`` gives libmtls the whole decision during the handshake.
public struct MTLSClientTLS: Sendable {
    /// The configuration: the identity's chain and key, BoringSSL's trust store from the
    /// policy's anchors (anchors only when the policy says so), TLS 1.2 and 1.3. Change it
    /// freely (versions, ALPN) before use.
    public var tlsConfiguration: TLSConfiguration
    /// The verifier that judges servers (purpose server authentication).
    public let verifier: MTLSPeerVerifier
    /// The peer every connection is judged as; nil: the address and port connected to.
    public let peer: TrustPeer?

    /// Makes the client side.
    ///
    /// - Parameters:
    ///   - identity: the client identity presented when the server asks; nil presents none.
    ///   - policy: how servers are judged.
    ///   - peer: the peer as the application names it (host and port select the host rule, its
    ///     verify-as the name checked); nil: judged by the address connected to.
    ///   - overrides: anchors, pins and verify-as added for these connections (pins always
    ///     enforced).
    ///   - intermediates: issuing CAs of your servers, for rebuilding the path from the leaf in
    ///     ``connectionVerifier`` (the identity's own chain is always offered).
    ///   - keyUse: where signatures are made (``MTLSKeyUse``).
    ///   - threadPool: where token signatures and evaluations run.
    public init(identity: Identity?, policy: TrustPolicy, peer: TrustPeer? = nil, overrides: TrustOverrides? = nil,
                intermediates: [Certificate] = [], keyUse: MTLSKeyUse = .boringSSLWhenInMemory,
                threadPool: NIOThreadPool = .singleton) throws {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let identity {
            configuration.certificateChain = try identity.nioCertificateChain()
            configuration.privateKey = try identity.nioPrivateKey(keyUse, threadPool: threadPool)
        }
        configuration.certificateVerification = .noHostnameVerification
        let anchors = policy.allAnchors(overrides).map { NIOSSLCertificate.fromDER($0) }
        if !anchors.isEmpty, policy.anchorsOnly || overrides?.anchorsOnly == true {
            configuration.trustRoots = .certificates(try anchors.map { try $0.get() })
        } else if !anchors.isEmpty {
            configuration.additionalTrustRoots = [.certificates(try anchors.map { try $0.get() })]
        }
        self.tlsConfiguration = configuration
        self.peer = peer
        let known = (identity.map { $0.chain + $0.extraCertificates } ?? []) + intermediates
        self.verifier = MTLSPeerVerifier(policy: policy, purpose: .serverAuth, overrides: overrides, intermediates: known,
                                         threadPool: threadPool)
    }

    /// ``tlsConfiguration`` with BoringSSL's own verification off, for a stack where
    /// ``connectionVerifier`` runs on every connection before its first request and so makes the
    /// whole decision (`MTLSAsyncHTTPClient` installs both together; never used alone).
    package var tlsConfigurationDecidedByLibmtls: TLSConfiguration {
        var configuration = tlsConfiguration
        configuration.certificateVerification = .none
        return configuration
    }

    /// For AsyncHTTPClient's `http1_1ConnectionDebugInitializer` and
    /// `http2ConnectionDebugInitializer`: libmtls judges each new connection's server before its
    /// first request (``MTLSPeerVerifier/verifyEstablishedConnection(_:peer:)``).
    public var connectionVerifier: @Sendable (Channel) -> EventLoopFuture<Void> {
        { [verifier, peer] channel in verifier.verifyEstablishedConnection(channel, peer: peer) }
    }

    /// A `NIOSSLClientHandler` for a NIO client reaching `peer`, libmtls deciding during the
    /// handshake on the whole chain the server presented; SNI is the peer's host unless it is an
    /// IP address (then its verify-as name, if any).
    public func makeClientHandler(context: NIOSSLContext, peer: TrustPeer) throws -> NIOSSLClientHandler {
        let sni = [peer.host, peer.verifyAs].compactMap { $0 }.first { IPAddressText.isAddress($0) == false }
        return try NIOSSLClientHandler(context: context, serverHostname: sni,
                                       customVerificationCallback: verifier.verificationCallback(peer: peer))
    }
}

/// A server's TLS for swift-nio-ssl made from MTLS parts in one call: the server identity (its
/// key possibly on a token) and the clients judged by an MTLS ``MTLS/TrustPolicy`` (purpose
/// client authentication; the client's address selects its host rule).
///
/// ```swift
/// let tls = try MTLSServerTLS(identity: serverIdentity, clientPolicy: customerA)
/// let context = try NIOSSLContext(configuration: tls.tlsConfiguration)
/// ServerBootstrap(group: group).childChannelInitializer { channel in
///     channel.eventLoop.makeCompletedFuture {
///         try channel.pipeline.syncOperations.addHandler(tls.makeServerHandler(context: context, channel: channel))
///     }
/// }
/// ```
public struct MTLSServerTLS: Sendable {
    /// The configuration: the identity's chain and key; a client certificate required (or
    /// asked for), the policy's anchors sent as acceptable CA names.
    public var tlsConfiguration: TLSConfiguration
    /// The verifier that judges clients.
    public let verifier: MTLSPeerVerifier

    /// Makes the server side. `requireClientCertificate` false asks for a certificate but lets a
    /// client without one in (one that presents a certificate is still judged); `onRefusal`
    /// hears every refused client with libmtls's reasons.
    public init(identity: Identity, clientPolicy: TrustPolicy, requireClientCertificate: Bool = true,
                keyUse: MTLSKeyUse = .boringSSLWhenInMemory, threadPool: NIOThreadPool = .singleton,
                onRefusal: (@Sendable (MTLSPeerRejected) -> Void)? = nil) throws {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try identity.nioCertificateChain(),
            privateKey: try identity.nioPrivateKey(keyUse, threadPool: threadPool))
        configuration.minimumTLSVersion = .tlsv12
        configuration.certificateVerification = requireClientCertificate ? .noHostnameVerification : .optionalVerification
        let anchors = try clientPolicy.allAnchors(nil).map { try NIOSSLCertificate.fromDER($0).get() }
        // The custom callback decides; the trust store only names the acceptable CAs (and keeps
        // BoringSSL from loading the system store).
        configuration.trustRoots = .certificates(anchors)
        configuration.sendCANameList = !anchors.isEmpty
        self.tlsConfiguration = configuration
        self.verifier = MTLSPeerVerifier(policy: clientPolicy, purpose: .clientAuth, threadPool: threadPool, onRefusal: onRefusal)
    }

    /// A `NIOSSLServerHandler` for an accepted `channel`, libmtls judging its client during the
    /// handshake.
    public func makeServerHandler(context: NIOSSLContext, channel: Channel) -> NIOSSLServerHandler {
        NIOSSLServerHandler(context: context, customVerificationCallback: verifier.verificationCallback(clientOf: channel))
    }
}

extension NIOSSLCertificate {
    /// `certificate` as swift-nio-ssl's certificate.
    static func fromDER(_ certificate: Certificate) -> Result<NIOSSLCertificate, Error> {
        Result { try NIOSSLCertificate(bytes: certificate.der, format: .der) }
    }
}

/// Tells IP literals from names (SNI never carries an address).
enum IPAddressText {
    static func isAddress(_ text: String) -> Bool {
        (try? SocketAddress(ipAddress: text, port: 0)) != nil
    }
}
