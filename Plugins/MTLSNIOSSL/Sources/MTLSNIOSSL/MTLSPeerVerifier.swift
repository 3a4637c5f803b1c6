import MTLS
import NIOCore
import NIOPosix
import NIOSSL

/// A peer libmtls refused: the peer as evaluated and the evaluation, whose reasons (stable codes
/// such as `pin_mismatch`, `untrusted_root`, `name_mismatch`) say why.
public struct MTLSPeerRejected: Error, CustomStringConvertible, Sendable {
    /// The peer as it was evaluated (host and port select the host rule; verify-as the name).
    public let peer: TrustPeer
    /// libmtls's evaluation of the peer's chain.
    public let result: TrustResult

    /// Makes the error for `peer` and its evaluation.
    public init(peer: TrustPeer, result: TrustResult) {
        self.peer = peer
        self.result = result
    }

    /// `libmtls refused PEER: code: message; ...`.
    public var description: String {
        "libmtls refused \(peer): " + result.reasons.map { "\($0.code): \($0.message)" }.joined(separator: "; ")
    }
}

/// Judges a TLS peer with an MTLS ``MTLS/TrustPolicy`` for swift-nio-ssl: host rules chosen by
/// the host and port reached, pinned anchors, SPKI pins, verify-as, EKU and key checks — the
/// evaluation libmtls's own connections make (``MTLS/TrustPolicy/evaluate(derChain:peer:purpose:at:overrides:)``),
/// so a NIO connection and an `mtls connect` can never disagree.
///
/// - For a NIO client or server you build yourself, ``verificationCallback(peer:)`` and
///   ``verificationCallback(clientOf:)`` give a `NIOSSLCustomVerificationCallback` for
///   `NIOSSLClientHandler`/`NIOSSLServerHandler`: libmtls's decision replaces BoringSSL's.
/// - AsyncHTTPClient builds its TLS handlers itself and takes no verification callback: there,
///   ``verifyEstablishedConnection(_:peer:)`` judges each new connection before its first
///   request (see ``MTLSClientTLS`` and the `MTLSAsyncHTTPClient` product).
///
/// Evaluations run on ``threadPool`` when one is given (a cold evaluation builds paths and may
/// read CRL files), never blocking the event loop. Safe to share across connections and threads.
public final class MTLSPeerVerifier: Sendable {
    /// The policy in force; changes made to it later apply to the next handshakes.
    public let policy: TrustPolicy
    /// Server authentication (clients judging servers) or client authentication (servers
    /// judging clients).
    public let purpose: TrustPurpose
    /// What this verifier adds to the policy for every peer (anchors, pins — always enforced —,
    /// verify-as).
    public let overrides: TrustOverrides?
    /// Where evaluations run; nil evaluates on the event loop.
    public let threadPool: NIOThreadPool?
    /// Certificates offered to path building besides the peer's leaf in
    /// ``verifyEstablishedConnection(_:peer:)`` (AsyncHTTPClient shows only the leaf).
    public let intermediates: [Certificate]
    /// ``intermediates`` as DER, made once.
    private let intermediateDERs: [[UInt8]]
    /// Told of every refusal (for logs and metrics), on the thread that evaluated.
    let onRefusal: (@Sendable (MTLSPeerRejected) -> Void)?

    /// Makes a verifier. `purpose` is `.serverAuth` for a client, `.clientAuth` for a server;
    /// `onRefusal` hears every peer refused, with libmtls's reasons.
    public init(policy: TrustPolicy, purpose: TrustPurpose = .serverAuth, overrides: TrustOverrides? = nil,
                intermediates: [Certificate] = [], threadPool: NIOThreadPool? = .singleton,
                onRefusal: (@Sendable (MTLSPeerRejected) -> Void)? = nil) {
        self.policy = policy
        self.purpose = purpose
        self.overrides = overrides
        self.intermediates = intermediates
        self.intermediateDERs = intermediates.map(\.der)
        self.threadPool = threadPool
        self.onRefusal = onRefusal
    }

    /// Evaluates `derChain` (leaf first, as presented) for `peer`; throws ``MTLSPeerRejected``
    /// when libmtls does not trust it, and ``MTLS/MTLSError`` (`parse`) for a certificate that
    /// does not parse.
    public func verify(derChain: [[UInt8]], peer: TrustPeer) throws {
        let result = try policy.evaluate(derChain: derChain, peer: peer, purpose: purpose, overrides: overrides)
        guard result.trusted else {
            let rejected = MTLSPeerRejected(peer: peer, result: result)
            onRefusal?(rejected)
            throw rejected
        }
    }

    /// Runs ``verify(derChain:peer:)`` on ``threadPool`` (or at once), completing on `eventLoop`.
    func verify(derChain: [[UInt8]], peer: TrustPeer, on eventLoop: EventLoop) -> EventLoopFuture<Void> {
        guard let threadPool else {
            return eventLoop.makeCompletedFuture { try self.verify(derChain: derChain, peer: peer) }
        }
        return threadPool.runIfActive(eventLoop: eventLoop) { try self.verify(derChain: derChain, peer: peer) }
    }

    /// A `NIOSSLCustomVerificationCallback` judging the chain a server presents to a client that
    /// reached `peer` (its host and port as the application named them; its `verifyAs`, if any,
    /// the name the certificate must carry). Pass it to `NIOSSLClientHandler(context:serverHostname:customVerificationCallback:)`.
    public func verificationCallback(peer: TrustPeer) -> NIOSSLCustomVerificationCallback {
        { [self] certificates, promise in
            do {
                let ders = try certificates.map { try $0.toDERBytes() }
                verify(derChain: ders, peer: peer, on: promise.futureResult.eventLoop).whenComplete { result in
                    promise.succeed((try? result.get()) == nil ? .failed : .certificateVerified)
                }
            } catch {
                promise.succeed(.failed)
            }
        }
    }

    /// A `NIOSSLCustomVerificationCallback` judging the chain a client presents to a server on
    /// `channel`: the client's address selects its host rule (``MTLS/TrustPeer/client(address:)``).
    /// Pass it to `NIOSSLServerHandler(context:customVerificationCallback:)` in the child
    /// channel's initializer.
    public func verificationCallback(clientOf channel: Channel) -> NIOSSLCustomVerificationCallback {
        verificationCallback(peer: TrustPeer.client(address: channel.remoteAddress?.ipAddress))
    }

    /// Judges an established connection's server with libmtls, for stacks that build their TLS
    /// handler themselves (AsyncHTTPClient: `HTTPClient.Configuration(mtls:)` of the
    /// `MTLSAsyncHTTPClient` product sets it as `http1_1ConnectionDebugInitializer` and
    /// `http2ConnectionDebugInitializer`, which run before the connection's first request, and a
    /// failed future fails the request with ``MTLSPeerRejected``).
    ///
    /// swift-nio-ssl gives such a caller only the peer's leaf, so the path is rebuilt from the
    /// leaf and ``intermediates``; a server whose issuer is not among them is refused
    /// (`unknown_issuer`): fail closed. `peer` nil: the connection's remote address and port.
    public func verifyEstablishedConnection(_ channel: Channel, peer: TrustPeer? = nil) -> EventLoopFuture<Void> {
        let peer = peer ?? TrustPeer(host: channel.remoteAddress?.ipAddress, port: channel.remoteAddress?.port)
        let verdict = channel.nioSSL_peerCertificate().flatMap { [intermediateDERs] leaf in
            guard let leaf, let der = try? leaf.toDERBytes() else {
                return channel.eventLoop.makeFailedFuture(MTLSError(.handshake, "the server presented no certificate"))
            }
            return self.verify(derChain: [der] + intermediateDERs, peer: peer, on: channel.eventLoop)
        }.flatMapThrowing {
            // The server may have closed the connection meanwhile (a TLS 1.3 server refusing the
            // client's certificate does so after the client's handshake is complete): report it
            // as a failed connection, not a new one (AsyncHTTPClient then waits on it forever).
            guard channel.isActive else { throw ChannelError.ioOnClosedChannel }
        }
        // The connection is not closed here: AsyncHTTPClient's pool still tracks it (closing it
        // under the pool makes its backoff timer find an unknown connection and trap).
        return verdict
    }
}
