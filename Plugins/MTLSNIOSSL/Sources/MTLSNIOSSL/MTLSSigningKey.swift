import MTLS
import NIOCore
import NIOPosix
import NIOSSL

/// An MTLS identity's private key as swift-nio-ssl's custom private key: BoringSSL runs the
/// handshake and asks this key for each signature, which libmtls makes
/// (``MTLS/PrivateKey/sign(_:tlsSignatureScheme:)``) — on the PKCS#11 token when the key lives on
/// one, the key never leaving it.
///
/// A signature on a token can take tens of milliseconds (or wait for a PIN), so it is never made
/// on the event loop: it runs on a thread pool (``threadPool``) and completes the handshake's
/// future from there.
public final class MTLSSigningKey: NIOSSLCustomPrivateKey, Hashable, Sendable {
    /// The key that signs.
    public let key: MTLS.PrivateKey
    /// The schemes offered to the peer: those libmtls can make with ``key`` (for a token key,
    /// those its token has mechanisms for).
    public let signatureAlgorithms: [SignatureAlgorithm]
    /// Where signatures are made.
    public let threadPool: NIOThreadPool

    /// Wraps `key`; `threadPool` makes the signatures (the process-wide singleton by default).
    /// Throws ``MTLS/MTLSError`` (`unsupported`) when the key cannot make TLS signatures.
    public init(_ key: MTLS.PrivateKey, threadPool: NIOThreadPool = .singleton) throws {
        self.key = key
        self.signatureAlgorithms = try key.tlsSignatureSchemes().map(SignatureAlgorithm.init(rawValue:))
        self.threadPool = threadPool
    }

    /// Signs `data` with the algorithm BoringSSL chose, on ``threadPool``; the future completes
    /// on the channel's event loop.
    public func sign(channel: Channel, algorithm: SignatureAlgorithm, data: ByteBuffer) -> EventLoopFuture<ByteBuffer> {
        let message = Array(data.readableBytesView)
        let key = self.key
        return threadPool.runIfActive(eventLoop: channel.eventLoop) {
            try key.sign(message, tlsSignatureScheme: algorithm.rawValue)
        }.map { ByteBuffer(bytes: $0) }
    }

    /// RSA key exchange is not offered (TLS 1.2 ECDHE and TLS 1.3 only sign): always fails.
    public func decrypt(channel: Channel, data: ByteBuffer) -> EventLoopFuture<ByteBuffer> {
        channel.eventLoop.makeFailedFuture(MTLSError(.unsupported, "libmtls keys do not decrypt (RSA key exchange is not offered)"))
    }

    /// Identity: two wrappers are equal when they wrap the same key object.
    public static func == (a: MTLSSigningKey, b: MTLSSigningKey) -> Bool { a.key === b.key }

    /// Hashes the key object's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(key)) }
}
