internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A TLS server socket: listens on an address and port and accepts clients with the server's
/// identity and its client policy. ``accept(timeout:)`` may be called from several threads.
public final class TLSListener: Sendable {
    /// The port listened on (the one the system picked when 0 was asked for).
    public let port: UInt16
    /// The listening socket.
    public let fileDescriptor: Int32
    let context: TLSContext
    let options: TLSServerOptions
    private let closed = Mutex(false)

    /// Listens on `address` (nil: every IPv4 address; "127.0.0.1", "::1"...) and `port` (0 for
    /// an ephemeral port).
    public init(address: String? = nil, port: UInt16 = 0, options: TLSServerOptions) throws {
        context = try TLSContext.server(options)
        self.options = options
        (fileDescriptor, self.port) = try Socket.listen(address: address, port: port)
        Socket.setNonBlocking(fileDescriptor, true)
    }

    deinit { close() }

    /// Waits for a client (up to `timeout` seconds; nil waits forever) and runs the handshake.
    /// Throws when the client is rejected — the error says why (``MTLSError/Code/untrusted``
    /// with our evaluation's reasons, no certificate when one is required, the client's alert).
    public func accept(timeout: Double? = nil) throws -> TLSConnection {
        let (fd, peer) = try Socket.accept(fileDescriptor, deadline: Deadline(seconds: timeout))
        let conn: TLSConnection
        do {
            conn = try TLSConnection(serverFD: fd, peer: peer, context: context, options: options)
        } catch {
            Glibc.close(fd)
            throw error
        }
        do {
            try conn.handshake()
        } catch let e as MTLSError {
            conn.closeAfterRejecting()
            throw MTLSError(e.code, "client \(peer): \(e.message)")
        }
        return conn
    }

    /// Stops listening.
    public func close() {
        closed.withLock { closed in
            guard !closed else { return }
            closed = true
            Glibc.close(fileDescriptor)
        }
    }
}

/// Configuring an OpenSSL `SSL_CTX` that belongs to the application (or to libcurl, through
/// `CURLOPT_SSL_CTX_FUNCTION`).
public enum SSLContextConfiguration {
    /// Makes `sslContext` (an `SSL_CTX *`) present `identity` and judge its peers with `policy`
    /// through libmtls's evaluator. `purpose` is `.serverAuth` for a context that connects to
    /// servers, `.clientAuth` for one that accepts clients. The validation name is the one the
    /// application set on each `SSL` (`SSL_set1_host`), else its SNI.
    public static func configure(sslContext: UnsafeMutableRawPointer, identity: Identity?, policy: TrustPolicy?,
                                 purpose: TrustPurpose = .serverAuth) throws {
        try TLSContext.configure(sslContext: OpaquePointer(sslContext), identity: identity, policy: policy, purpose: purpose)
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
