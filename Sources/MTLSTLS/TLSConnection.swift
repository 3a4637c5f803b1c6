internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// One mutual-TLS connection, client or server side, over OpenSSL's libssl.
///
/// Used by one thread at a time. Blocking by default, each step bounded by the options'
/// timeouts; in non-blocking mode, ``handshake()-2mgoe``, ``read(into:)`` and ``write(_:)-1rbio`` throw
/// ``MTLSError/Code/wantRead`` or ``MTLSError/Code/wantWrite``: wait for ``fileDescriptor`` to
/// be readable or writable and call again.
public final class TLSConnection {
    let ssl: OpaquePointer
    let context: TLSContext
    let state: TLSHandshakeState
    /// The socket under the connection.
    public private(set) var fileDescriptor: Int32
    private let ownsFileDescriptor: Bool
    /// True on the accepting side.
    public let isServer: Bool
    /// The host connected to (client) or the client's address (server).
    public let peerAddress: String
    private var nonBlocking: Bool
    /// Whether this connection was made non-blocking (`options.nonBlocking`): its handshake and I/O
    /// return want-read / want-write instead of waiting.
    package var isNonBlocking: Bool { nonBlocking }
    private let handshakeTimeout: Double?
    private let ioTimeout: Double?
    private var handshakeDeadline: Deadline?
    private var closed = false
    /// The counters of the listener that accepted this connection: its current connections
    /// count this one until it is freed.
    var listenerCounters: ListenerCounters?
    /// Set by a listener for the handshake it runs: told each time the handshake's state machine
    /// moves (a message read or written), so the listener knows which handshakes are stalled.
    var handshakeProgress: HandshakeProgress?
    private var lastHandshakeState: OSSL_HANDSHAKE_STATE?
    /// Whether the handshake has finished.
    public private(set) var isHandshakeComplete = false
    /// After a failed handshake, read or write: the side that failed or refused — the peer when
    /// it sent an alert, hung up or did not answer in time; this side when our evaluation, our
    /// identity or our token stopped it.
    public private(set) var failureSide: TLSSide?
    /// The policy version this connection started under (its context's policy, which judges
    /// the peer): see ``isPolicyChanged``.
    private let policyVersionAtStart: UInt64
    /// Whether the policy that judges this connection's peer has changed since the connection
    /// was made (``TrustPolicy/replaceSettings(from:)`` / `mtls_policy_replace`, a followed
    /// policy file's reload, any setting). The peer was judged under the old settings: pools
    /// that keep connections alive drop an idle one for which this is true (the Python
    /// adapters do), as a new connection is judged under the policy in force.
    public var isPolicyChanged: Bool { context.config.policy.version != policyVersionAtStart }
    /// Whether a step of this connection's handshake, or its close, may wait for something other
    /// than its socket, the fact an event loop needs to run the steps on its own thread
    /// (`mtls_conn_may_block`). True when: the connection is blocking (each step waits for the
    /// socket within its timeouts); it is a listener's (its identity is not looked at); the
    /// identity it presents, or one it may choose, has its key on a token (a signature, the
    /// token's lock, a PIN callback) or is loaded only once chosen (a store or token read); the
    /// policy that judges the peer checks revocation (a CRL or OCSP fetch). False for a
    /// non-blocking client connection with no identity or keys in memory under a policy without
    /// revocation: each step is then CPU work over a socket that does not wait (the chain
    /// evaluation included), and closing sends close_notify only if the socket takes it now.
    /// Read again when needed: a replaced policy may turn revocation on.
    public var mayBlock: Bool {
        if isServer || !nonBlocking { return true }
        if context.config.policy.checksRevocation { return true }
        let onToken: (Identity) -> Bool = { $0.privateKey.tokenURI != nil }
        if context.config.identitySource != nil {
            // The source's identity was taken when the connection was made (init).
            return state.presentedIdentity.map(onToken) ?? true
        }
        switch context.config.identity {
        case .none: return false
        case .identity(let id): return onToken(id)
        case .automatic(let ids): return ids.contains(where: onToken)
        case .candidates: return true
        }
    }
    /// Non-blocking connect: the TCP connect may still be under way when the handshake starts.
    private var connecting = false
    /// A blocking ``connect(host:port:options:)`` to an IP literal (`peerAddress`, `connectPort`):
    /// the TCP connect is not known to have gone through until the ClientHello's write says so
    /// (``Socket/connectNow(host:port:)``); until then `handshakeDeadline` is the connect's.
    private var connectUnconfirmed = false
    private var connectPort: UInt16 = 0
    /// Set when a cancelled async operation shut the socket down under a call: the connection
    /// is in no state to go on with (a record may be half read or half written).
    private var abandoned = false

    // MARK: making connections

    /// Connects to `host` (a DNS name or an IPv4/IPv6 literal) on `port` and, unless
    /// `options.nonBlocking`, completes the handshake.
    ///
    /// Errors: ``MTLSError/Code/connect`` (refused, unreachable, no such host),
    /// ``MTLSError/Code/timeout``, ``MTLSError/Code/untrusted`` (our evaluation of the server
    /// failed; the message has its reasons and ``evaluation`` on the error's connection is not
    /// available, so they are spelled out), ``MTLSError/Code/peerAlert`` (the server refused us,
    /// with its alert), ``MTLSError/Code/noMatchingIdentity``, ``MTLSError/Code/handshake``.
    /// Every error from the connect or the handshake says which side failed
    /// (``MTLSError/side``), and a handshake's error carries what the failed connection learnt
    /// (``MTLSError/connectionFailure``: the peer's chain, our evaluation, the alert), as
    /// ``open(host:port:options:)`` followed by ``handshake()-2mgoe`` does.
    public static func connect(host: String, port: UInt16, options: TLSClientOptions = TLSClientOptions()) throws -> TLSConnection {
        // Blocking: the handshake follows at once, so the connect to an IP literal is not waited
        // for apart: the ClientHello's write tells (one poll less per connection, issue 40). Its
        // errors are the connect's own, as open's (open alone returns a connected socket).
        let conn = try open(host: host, port: port, options: options, writeTellsConnect: !options.nonBlocking)
        if !options.nonBlocking { try conn.handshake() }
        return conn
    }

    /// Prepares TLS, then connects the socket, without starting the handshake;
    /// ``handshake()-2mgoe`` runs it. Options the TLS side refuses are thrown before any TCP
    /// connection is made. Lets the caller read ``evaluation`` and ``peerChain`` when the
    /// handshake fails.
    public static func open(host: String, port: UInt16, options: TLSClientOptions = TLSClientOptions()) throws -> TLSConnection {
        try open(host: host, port: port, options: options, writeTellsConnect: false)
    }

    /// ``open(host:port:options:)``; `writeTellsConnect`: for a blocking handshake that follows at
    /// once, the TCP connect to an IP literal is started and not waited for (``connectUnconfirmed``).
    private static func open(host: String, port: UInt16, options: TLSClientOptions, writeTellsConnect: Bool) throws -> TLSConnection {
        guard !host.isEmpty else { throw MTLSError(.invalidArgument, "host must not be empty") }
        let reading = try ClientHost.reading(host)  // "h:443" is refused here, not by name resolution
        if let unknown = options.groups?.first(where: { !TLSContext.groupIsKnown($0) }) {
            throw MTLSError(.unsupported, "this OpenSSL has no key-exchange group \"\(unknown)\"")
        }
        // The TLS side first (issue 40): what runs between the TCP connect and the ClientHello
        // keeps a server that has already accepted waiting (a spin there costs the raw OpenSSL
        // client about 1.5 times its length per resumed handshake, before the connect 1 time), and a
        // set-up that fails (an ALPN list, a server name, an identity source) opens no connection.
        // Making the TLS side of the connection failed: ours (the TCP connect's errors say theirs).
        func ours(_ error: any Error) -> any Error {
            guard let e = error as? MTLSError, e.side == nil else { return error }
            return MTLSError(e, side: .client, attachment: e.attachment)
        }
        let conn: TLSConnection
        do { conn = try TLSConnection(clientHost: host, reading, port: port, ownsSocket: true, options: options) } catch { throw ours(error) }
        let deadline = Deadline(seconds: options.connectSeconds)
        let fd: Int32
        if writeTellsConnect, let started = try Socket.connectNow(host: host, port: port) {
            fd = started.fd
            if !started.connected {
                conn.connectUnconfirmed = true
                conn.handshakeDeadline = deadline
            }
        } else {
            fd = try Socket.connect(host: host, port: port, deadline: deadline, waitForConnection: !options.nonBlocking)
        }
        do { try conn.attachSocket(fd) } catch { throw ours(error) }
        conn.connecting = options.nonBlocking
        conn.connectPort = port
        return conn
    }

    /// Runs TLS over a connected socket the caller owns (the caller closes it after this
    /// connection is closed). `host` and `port` name the server for SNI, validation and the
    /// session cache. The socket is switched to non-blocking mode.
    public static func wrap(fileDescriptor fd: Int32, host: String, port: UInt16 = 0,
                            options: TLSClientOptions = TLSClientOptions()) throws -> TLSConnection {
        guard fd >= 0 else { throw MTLSError(.invalidArgument, "file descriptor \(fd) is not valid") }
        let reading = try ClientHost.reading(host)
        let conn = try TLSConnection(clientHost: host, reading, port: port, ownsSocket: false, options: options)
        Socket.setNonBlocking(fd, true)  // as documented above, once the TLS side is made
        try conn.attachSocket(fd)
        if !options.nonBlocking { try conn.handshake() }
        return conn
    }

    /// The client side of a connection to `host` (`reading`: its ``ClientHost``), without its
    /// socket yet (``attachSocket(_:)``).
    private init(clientHost host: String, _ reading: ClientHost, port: UInt16, ownsSocket owned: Bool,
                 options: TLSClientOptions) throws {
        context = try TLSContext.sharedClient(options)
        policyVersionAtStart = context.config.policy.version
        guard let ssl = SSL_new(context.ctx) else { throw MTLSError.openSSL(.noMemory, "cannot create a TLS connection") }
        self.ssl = ssl
        fileDescriptor = -1
        ownsFileDescriptor = owned
        isServer = false
        peerAddress = host
        nonBlocking = options.nonBlocking
        handshakeTimeout = options.handshakeSeconds
        ioTimeout = options.ioSeconds
        state = TLSHandshakeState()
        state.attach(to: ssl)
        do {
            let bareHost = reading.bare
            if let source = options.identitySource {
                try state.takeIdentity(from: source, ssl: ssl, server: false, config: context.config)
            } else if case .identity(let id) = options.identity { state.presentedIdentity = id }
            _ = mtls_ossl_SSL_set_mode(ssl, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
            let kept = reading.kept
            let sni: String? = options.serverName.map { $0.isEmpty ? nil : $0 } ?? (kept.isAddress ? nil : bareHost)
            // The peer reached: its host and port select the host rule; verify-as changes only
            // the name checked. Port 0 (a wrapped socket without one): only port-less rules.
            state.peer = TrustPeer(kept: kept, port: port == 0 ? nil : Int(port), sni: sni, verifyAs: options.validationName)
            try options.overrides?.validate()
            state.overrides = options.overrides.flatMap { $0.isEmpty ? nil : $0 }
            // withCString: a name of up to 15 bytes is kept inside the String, and passing it as
            // a C string argument would copy it to a new array; withCString uses the stack.
            if let sni, sni.withCString({ mtls_ossl_SSL_set_tlsext_host_name(ssl, $0) }) != 1 {
                throw MTLSError.openSSL(.invalidArgument, "cannot send \"\(sni)\" as the server name")
            }
            if let groups = options.groups {
                let list = groups.joined(separator: ":")
                guard !groups.isEmpty, list.withCString({ SSL_ctrl(ssl, SSL_CTRL_SET_GROUPS_LIST, 0, UnsafeMutableRawPointer(mutating: $0)) }) == 1 else {
                    throw MTLSError.openSSL(.unsupported, "this OpenSSL refused the key-exchange groups \(list)")
                }
            }
            if !options.alpn.isEmpty {
                let wire = try ALPN.wire(options.alpn)
                guard SSL_set_alpn_protos(ssl, wire, UInt32(wire.count)) == 0 else {
                    throw MTLSError.openSSL(.invalidArgument, "cannot set ALPN protocols")
                }
            }
            if options.sessionResumption {
                // The overrides are part of the key: a session judged under other anchors, pins or
                // verify-as is never resumed.
                let key = SessionKey(host: bareHost, port: port, sni: sni, verifyAs: options.validationName,
                                     overrides: state.overrides?.cacheKey)
                state.sessionCache = context.sessions
                state.sessionKey = key
                let binding = ServerTickets.currentBinding(state, context.config)
                if let (session, evaluation) = context.sessions.lookup(key, binding: binding, policy: context.config.policy,
                                                                       peer: state.peer) {
                    _ = SSL_set_session(ssl, session)
                    SSL_SESSION_free(session)
                    state.resumedEvaluation = evaluation
                }
            }
        } catch {
            closed = true
            throw error
        }
        SSL_set_connect_state(ssl)
    }

    /// A client connection's connected (or connecting) non-blocking socket, under its TLS side. An
    /// owned socket is closed with the connection from here on, even when this fails.
    private func attachSocket(_ fd: Int32) throws {
        fileDescriptor = fd
        try SocketBIO.attach(ssl, fd: fd, flightReads: true)
        // Blocking mode waits with its own poll: a read right after a write (the server's
        // answer to a flight, to a request) polls first instead of failing a recv (issue 40).
        if !nonBlocking { SocketBIO.setWaitAfterWrite(ssl, true) }
    }

    /// The server side of an accepted socket (owned by the connection). `clientHello`: for a
    /// listener's connection, the bytes it already read from the socket (its ClientHello), which
    /// the handshake reads first.
    init(serverFD fd: Int32, peer: String, client: TrustPeer? = nil, context: TLSContext, options: TLSServerOptions,
         clientHello: [UInt8]? = nil) throws {
        self.context = context
        policyVersionAtStart = context.config.policy.version
        guard let ssl = SSL_new(context.ctx) else { throw MTLSError.openSSL(.noMemory, "cannot create a TLS connection") }
        self.ssl = ssl
        fileDescriptor = fd
        ownsFileDescriptor = true
        isServer = true
        peerAddress = peer
        nonBlocking = false
        handshakeTimeout = options.handshakeSeconds
        ioTimeout = options.ioSeconds
        state = TLSHandshakeState()
        state.attach(to: ssl)
        // Selects the client's rule; never a name it must carry. A listener read it already.
        state.peer = client ?? TrustPeer.client(address: peer)
        state.presentedIdentity = options.identity
        // The socket is non-blocking from its accept (Socket.acceptNow, accept4): blocking mode
        // waits with poll, so no fcntl here.
        if let source = context.config.identitySource {
            do { try state.takeIdentity(from: source, ssl: ssl, server: true, config: context.config) } catch {
                closed = true // the caller closes the socket
                throw error
            }
        }
        do { try SocketBIO.attach(ssl, fd: fd, prefix: clientHello) } catch {
            closed = true // the caller closes the socket
            throw error
        }
        // RELEASE_BUFFERS: an idle accepted connection gives OpenSSL's read and write buffers
        // back (about 34 KiB each way) until its next record (issue 40).
        _ = mtls_ossl_SSL_set_mode(ssl, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                                             | SSL_MODE_RELEASE_BUFFERS))
        SSL_set_accept_state(ssl)
    }

    deinit {
        listenerCounters?.connectionEnded()
        SSL_free(ssl)
        if ownsFileDescriptor, !closed, fileDescriptor >= 0 { Glibc.close(fileDescriptor) }  // -1: never attached
    }

    /// Switches the connection to non-blocking mode (`true`) or back to blocking mode: from then
    /// on ``handshake()-2mgoe``, ``read(into:)``, ``write(_:)-1rbio`` and ``shutdown()`` behave as in that
    /// mode (see the type). Made for accepted connections, which a ``TLSListener`` hands over in
    /// blocking mode, so that an event loop can drive them. The socket itself is non-blocking
    /// (O_NONBLOCK) in both modes — blocking mode waits with poll within the timeouts — so the
    /// switch changes no descriptor state the caller could race with, and whatever OpenSSL holds
    /// (input already decrypted, a record partly written) is kept: a write that returned
    /// ``MTLSError/Code/wantWrite`` is retried with the same bytes, as OpenSSL requires.
    public func setNonBlocking(_ on: Bool) throws {
        try ensureOpen()
        Socket.setNonBlocking(fileDescriptor, true)
        nonBlocking = on
        // A non-blocking caller may wait for an edge: its reads always look at the socket.
        if !isServer { SocketBIO.setWaitAfterWrite(ssl, !on) }
    }

    /// Forgets every cached TLS session and the shared OpenSSL contexts behind them (with their
    /// references to identities, whose keys are then freed once the caller drops them too).
    /// libmtls keeps the contexts of the 16 most recent (identity, policy, versions)
    /// combinations so that repeated connections resume their sessions.
    public static func clearSessionCache() {
        TLSContext.clearSharedClients()
    }

    // MARK: handshake

    /// Runs (or, in non-blocking mode, continues) the handshake. Does nothing once complete.
    public func handshake() throws {
        try throwIfAbandoned()
        if isHandshakeComplete { return }
        try ensureOpen()
        if handshakeDeadline == nil { handshakeDeadline = Deadline(seconds: handshakeTimeout) }
        if connecting {
            // Opened non-blocking, maybe switched to blocking since (setNonBlocking(false)).
            while try !Socket.finishConnect(fileDescriptor, host: peerAddress, port: connectPort) {
                if nonBlocking { throw MTLSError(.wantWrite, "the TCP connection is still being established") }
                try Socket.wait(fileDescriptor, forWriting: true, deadline: handshakeDeadline!, what: "connecting to \(peerAddress)")
            }
            connecting = false
        }
        while true {
            OpenSSLErrorQueue.clear()
            let r = SSL_do_handshake(ssl)
            if r == 1 { break }
            let cause = errno
            let err = SSL_get_error(ssl, r)
            if connectUnconfirmed {
                // The ClientHello's write tells how the TCP connect went.
                if err == SSL_ERROR_WANT_WRITE {
                    // Still under way: waited for as open does, within the connect's deadline.
                    try Socket.awaitConnection(fileDescriptor, literal: peerAddress, port: connectPort, deadline: handshakeDeadline!)
                } else if err == SSL_ERROR_SYSCALL,
                          let e = Socket.connectError(afterWrite: cause, fileDescriptor, literal: peerAddress, port: connectPort) {
                    OpenSSLErrorQueue.clear()
                    throw e
                }
                // Connected (the ClientHello went out, or the wait saw it): the handshake's time
                // starts now, as after open's wait.
                connectUnconfirmed = false
                handshakeDeadline = Deadline(seconds: handshakeTimeout)
                if err == SSL_ERROR_WANT_WRITE { continue }
            }
            switch err {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                let writing = err == SSL_ERROR_WANT_WRITE
                if let progress = handshakeProgress {
                    // Progress is a message, not a byte: a peer that sends its flight a byte at a
                    // time does not look busy.
                    let now = SSL_get_state(ssl)
                    if now != lastHandshakeState { lastHandshakeState = now; progress.advanced() }
                }
                // A listener's step (handshakeStep): return, saying what the socket must become.
                if let progress = handshakeProgress, progress.stepping {
                    progress.steppedWant = writing ? .wantWrite : .wantRead
                    return
                }
                if nonBlocking {
                    throw MTLSError(writing ? .wantWrite : .wantRead, "the handshake is waiting for the socket")
                }
                do {
                    try Socket.wait(fileDescriptor, forWriting: writing, deadline: handshakeDeadline!, what: "TLS handshake with \(peerAddress)")
                } catch let e as MTLSError where e.code == .timeout {
                    if let key = state.sessionKey { state.sessionCache?.remove(key) }
                    throw failed(e, peerSide)
                }
            default:
                let e = handshakeError(err)
                // A failed handshake must not resume later without a fresh evaluation.
                if let key = state.sessionKey { state.sessionCache?.remove(key) }
                throw failed(e, side(of: e))
            }
        }
        // A TLS 1.2 verification that left revocation for the status callback: should OpenSSL
        // not have made it, the check is made now, before any application data (fail closed).
        if state.revocationAwaitingStaple {
            let config = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), TLSExData.ctx)
            if TLSContext.clientStatusCallback(ssl, config) == 0 || state.revocationAwaitingStaple {
                let why = state.evaluation.map { TLSConnection.describe($0) } ?? "the revocation check could not be made"
                throw failed(MTLSError(.untrusted, "our evaluation rejected the \(peerRole)'s certificate: \(why)"), ownSide)
            }
        }
        isHandshakeComplete = true
        if !isServer { SocketBIO.setFlightReads(ssl, false) }
        // A resumed session reports the evaluation it was admitted with (its chain re-checked
        // at the policy's time when it was offered); a listener's ticket set it already.
        if !isServer, SSL_session_reused(ssl) == 1 { state.evaluation = state.resumedEvaluation }
    }

    /// Records that `side` failed and returns `error` saying so, with what this connection
    /// learnt attached (``MTLSError/connectionFailure``).
    private func failed(_ error: MTLSError, _ side: TLSSide) -> MTLSError {
        failureSide = side
        return MTLSError(error, side: side, attachment: TLSConnectionFailure(self))
    }

    /// What a listener's handshake step waits for (``handshakeStep()``).
    enum HandshakeStep { case done, wantRead, wantWrite }

    /// One step of a listener's handshake, never waiting for the socket (issue 40: the
    /// listener drives its handshakes with its own poll): `.done`, or what the socket must
    /// become before the next step. Throws as ``handshake()`` does; the connection stays in
    /// blocking mode for its application.
    /// (The step's state lives in the listener's ``HandshakeProgress``: no stored property is
    /// added here, so code built against this class's layout stays valid.)
    func handshakeStep() throws -> HandshakeStep {
        guard let progress = handshakeProgress else {
            try handshake()
            return .done
        }
        progress.stepping = true
        progress.steppedWant = nil
        defer { progress.stepping = false }
        try handshake()
        return progress.steppedWant ?? .done
    }

    /// A listener's handshake whose time is over while it waited for the client: failed as a
    /// blocking handshake's deadline fails it.
    func handshakeTimedOut() -> MTLSError {
        if let key = state.sessionKey { state.sessionCache?.remove(key) }
        return failed(MTLSError(.timeout, "TLS handshake with \(peerAddress) timed out"), peerSide)
    }

    private var peerRole: String { isServer ? "client" : "server" }
    private var peerSide: TLSSide { isServer ? .client : .server }
    private var ownSide: TLSSide { isServer ? .server : .client }

    /// Who failed, from the code of a handshake or I/O error made by this connection.
    private func side(of error: MTLSError) -> TLSSide {
        switch error.code {
        case .peerAlert, .closed, .timeout, .connect, .truncated: return peerSide
        case .handshake where state.sentAlert == nil && state.receivedAlert == nil: return peerSide
        default: return ownSide
        }
    }

    /// After a peer's alert: why the identity we presented did not fit the server's certificate
    /// request, when it asked for one (for want of a signature scheme for the key OpenSSL sent no
    /// certificate at all; otherwise the server got one it had not asked for). Worked out only
    /// here, from what the SSL kept of the request, so a handshake that succeeds pays nothing.
    private var mismatchNote: String {
        guard !isServer, let id = state.presentedIdentity,
              SSL_get_client_CA_list(ssl) != nil || SSL_get_sigalgs(ssl, -1, nil, nil, nil, nil, nil) > 0,
              let why = IdentitySelection.mismatch(leaf: id.leaf, certificates: [id.leaf] + id.chain,
                                                   IdentitySelection.request(of: ssl), Date()) else { return "" }
        return "; our certificate does not fit its certificate request: \(why)"
    }

    /// After we refused the peer's request to renegotiate, the peer usually gives up on the
    /// connection: say that this is why.
    private var renegotiationNote: String {
        guard state.refusedRenegotiation else { return "" }
        if isServer { return "; the client asked to renegotiate (TLS 1.2), which libmtls refuses" }
        return "; the server asked to renegotiate (TLS 1.2), which libmtls refuses: a server that asks for a client "
            + "certificate only for some paths (Apache's per-directory SSLVerifyClient) needs TLS 1.3, where it asks "
            + "after the handshake, or client authentication for the whole server"
    }

    /// Says which side failed and why.
    private func handshakeError(_ err: Int32) -> MTLSError {
        // A token key that could not sign (token removed, login lost...) says so with its own code.
        if let tokenFailure = TokenKey.takeFailure() {
            OpenSSLErrorQueue.clear()
            return MTLSError(tokenFailure.code, "TLS handshake with \(peerAddress) failed: \(tokenFailure.message)")
        }
        if let e = state.selectionError {
            OpenSSLErrorQueue.clear()
            return MTLSError(e.code, "TLS handshake with \(peerAddress) failed: the identity chosen for the server's certificate request cannot be used: \(e.message)")
        }
        if let names = state.unmatchedCANames {
            OpenSSLErrorQueue.clear()
            let list = names.isEmpty ? "(no CA names)" : names.map { "\"\($0)\"" }.joined(separator: ", ")
            let schemes = state.unmatchedSchemes.map { ", signed with one of: \($0)" } ?? ""
            return MTLSError(.noMatchingIdentity, "no identity matches the server's certificate request; it accepts certificates from: \(list)\(schemes)")
        }
        if let evaluation = state.evaluation, !evaluation.trusted {
            OpenSSLErrorQueue.clear()
            return MTLSError(.untrusted, "our evaluation rejected the \(peerRole)'s certificate: \(TLSConnection.describe(evaluation))")
        }
        if let alert = state.receivedAlert {
            OpenSSLErrorQueue.clear()
            return MTLSError(.peerAlert, "the \(peerRole) refused the handshake with alert \"\(alert)\"\(mismatchNote)")
        }
        // Only OpenSSL's own "no certificate" verdict: any other alert we sent before the client's
        // Certificate (an oversized or malformed hello...) is reported as what it was.
        if isServer, state.sentAlert != nil, SSL_get0_peer_certificate(ssl) == nil,
           (SSL_get_verify_mode(ssl) & SSL_VERIFY_FAIL_IF_NO_PEER_CERT) != 0,
           OpenSSLErrorQueue.peekLastReason() == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE {
            OpenSSLErrorQueue.clear()
            return MTLSError(.untrusted, "the client presented no certificate, and one is required")
        }
        if err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN || Self.isUnexpectedEOF(err, 0) {
            let stack = err == SSL_ERROR_SSL ? [] : OpenSSLErrorQueue.drain()
            OpenSSLErrorQueue.clear()
            return MTLSError(.handshake, "the \(peerRole) closed the connection during the TLS handshake" + (stack.isEmpty ? "" : ": " + stack.joined(separator: "; ")))
        }
        // A client that sent an HTTP request to a TLS port: say so in words, not OpenSSL's reason text.
        if isServer, err == SSL_ERROR_SSL,
           [SSL_R_HTTP_REQUEST, SSL_R_HTTPS_PROXY_REQUEST].contains(OpenSSLErrorQueue.peekLastReason()) {
            OpenSSLErrorQueue.clear()
            return MTLSError(.handshake, "TLS handshake with \(peerAddress) failed: the client spoke plain HTTP, not TLS (use https:// or a TLS client)")
        }
        let sent = state.sentAlert.map { " (we sent alert \"\($0)\")" } ?? ""
        return MTLSError.openSSL(.handshake, "TLS handshake with \(peerAddress) failed\(sent)")
    }

    /// One line listing an evaluation's reasons.
    static func describe(_ result: TrustResult) -> String {
        if result.reasons.isEmpty { return result.trusted ? "trusted" : "not trusted" }
        return result.reasons.map { r in "\(r.message) [\(r.code)" + (r.certIndex.map { ", certificate \($0)" } ?? "") + "]" }.joined(separator: "; ")
    }

    // MARK: I/O

    /// Whether the connection is in non-blocking mode (the async operations refuse it).
    var nonBlockingMode: Bool { nonBlocking }

    /// Marks the connection unusable after a cancelled async operation cut a call short.
    func abandon() {
        abandoned = true
        failureSide = ownSide
    }

    func throwIfAbandoned() throws {
        if abandoned {
            throw MTLSError(.closed, "the connection was abandoned when a task waiting on it was cancelled: close it", side: ownSide)
        }
    }

    func ensureOpen() throws {
        if closed { throw MTLSError(.closed, "the connection is closed") }
    }

    /// Reads up to `buffer.count` bytes; returns 0 when the peer closed the connection cleanly
    /// (close_notify). A peer that closes without close_notify is ``MTLSError/Code/truncated``:
    /// what was read may be cut short (a reply delimited by the end of the connection, as an
    /// HTTP/1.0 body without Content-Length, is then incomplete or forged short).
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        try read(into: buffer, deadline: Deadline(seconds: ioTimeout))
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int {
        try handshake()
        guard buffer.count > 0 else { return 0 }
        while true {
            OpenSSLErrorQueue.clear()
            var n = 0
            let r = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &n)
            if r == 1 { return n }
            let cause = errno
            let err = SSL_get_error(ssl, r)
            switch err {
            case SSL_ERROR_ZERO_RETURN:
                return 0
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                let writing = err == SSL_ERROR_WANT_WRITE
                if nonBlocking { throw MTLSError(writing ? .wantWrite : .wantRead, "the read is waiting for the socket") }
                do {
                    try Socket.wait(fileDescriptor, forWriting: writing, deadline: deadline, what: "reading from \(peerAddress)")
                } catch let e as MTLSError {
                    throw failed(e, side(of: e))
                }
            default:
                // A peer that hangs up without close_notify may have been cut off mid-reply (or
                // cut by someone between us): not the clean end of data that 0 means.
                if state.receivedAlert == nil, Self.isUnexpectedEOF(err, cause) {
                    OpenSSLErrorQueue.clear()
                    throw failed(MTLSError(.truncated, "the \(peerRole) closed the connection without close_notify: what was read may be cut short"),
                                 peerSide)
                }
                let e = ioError(err, cause, "reading from")
                throw failed(e, side(of: e))
            }
        }
    }

    /// Whether a failed `SSL_read` met the end of the stream without close_notify (OpenSSL 3:
    /// `SSL_R_UNEXPECTED_EOF_WHILE_READING`; a syscall error with errno 0 on the way there).
    static func isUnexpectedEOF(_ err: Int32, _ cause: Int32) -> Bool {
        if err == SSL_ERROR_SYSCALL { return cause == 0 && OpenSSLErrorQueue.peekLastReason() == 0 }
        return err == SSL_ERROR_SSL && OpenSSLErrorQueue.peekLastReason() == SSL_R_UNEXPECTED_EOF_WHILE_READING
    }

    /// Reads up to `maxLength` bytes (empty when the peer closed the connection with
    /// close_notify; ``MTLSError/Code/truncated`` when it closed without).
    /// `timeout` (seconds) overrides the options' I/O timeout for this call.
    public func read(maxLength: Int = 16384, timeout: Double? = nil) throws -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: max(maxLength, 1))
        let deadline = Deadline(seconds: timeout ?? ioTimeout)  // negative: no deadline
        let n = try buf.withUnsafeMutableBytes { try read(into: $0, deadline: deadline) }
        return Array(buf[0..<n])
    }

    /// Reads up to `maxLength` bytes as ``read(maxLength:timeout:)`` does, waiting at most
    /// `timeLimit` (instead of the options' ``TLSClientOptions/ioTimeLimit``).
    public func read(maxLength: Int = 16384, timeLimit: TLSTimeLimit) throws -> [UInt8] {
        try read(maxLength: maxLength, timeout: timeLimit.seconds ?? -1)
    }

    /// Writes bytes. Blocking mode writes them all and returns the count; non-blocking mode
    /// may write part and returns how much.
    @discardableResult
    public func write(_ bytes: UnsafeRawBufferPointer) throws -> Int {
        try write(bytes, deadline: Deadline(seconds: ioTimeout))
    }

    /// ``write(_:)-(UnsafeRawBufferPointer)`` under the caller's deadline (the HTTP client's one
    /// deadline for a whole exchange).
    @discardableResult
    package func write(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws -> Int {
        try handshake()
        var off = 0
        while off < bytes.count {
            OpenSSLErrorQueue.clear()
            var n = 0
            let r = SSL_write_ex(ssl, bytes.baseAddress! + off, bytes.count - off, &n)
            if r == 1 {
                off += n
                if nonBlocking { return off }
                continue
            }
            let cause = errno
            let err = SSL_get_error(ssl, r)
            switch err {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                let writing = err == SSL_ERROR_WANT_WRITE
                if nonBlocking {
                    if off > 0 { return off }
                    throw MTLSError(writing ? .wantWrite : .wantRead, "the write is waiting for the socket")
                }
                do {
                    try Socket.wait(fileDescriptor, forWriting: writing, deadline: deadline, what: "writing to \(peerAddress)")
                } catch let e as MTLSError {
                    throw failed(e, side(of: e))
                }
            default:
                if err == SSL_ERROR_SYSCALL, state.receivedAlert == nil, cause == EPIPE || cause == ECONNRESET {
                    collectPendingAlert()
                }
                let e = ioError(err, cause, "writing to")
                throw failed(e, side(of: e))
            }
        }
        return off
    }

    /// After a write found the connection gone: the peer often said why first (TLS 1.3: a server
    /// that refuses our certificate sends its alert after our handshake ended), and the alert may
    /// still wait in the socket's receive buffer. One non-blocking read picks it up.
    private func collectPendingAlert() {
        // This read must look at the socket, though it follows a write.
        let waiting = SocketBIO.setWaitAfterWrite(ssl, false)
        defer { if waiting { SocketBIO.setWaitAfterWrite(ssl, true) } }
        var byte: UInt8 = 0
        var n = 0
        OpenSSLErrorQueue.clear()
        _ = SSL_read_ex(ssl, &byte, 1, &n)
        OpenSSLErrorQueue.clear()
    }

    /// Writes bytes (see ``write(_:)-(UnsafeRawBufferPointer)``).
    @discardableResult
    public func write(_ bytes: [UInt8]) throws -> Int {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// `cause` is errno as the failed call left it.
    func ioError(_ err: Int32, _ cause: Int32, _ verb: String) -> MTLSError {
        let e = ioErrorWithoutNote(err, cause, verb)
        let note = renegotiationNote
        return note.isEmpty ? e : MTLSError(e.code, e.message + note)
    }

    private func ioErrorWithoutNote(_ err: Int32, _ cause: Int32, _ verb: String) -> MTLSError {
        if let alert = state.receivedAlert {
            OpenSSLErrorQueue.clear()
            // TLS 1.3: a server that rejects our certificate says so after our handshake ended.
            return MTLSError(.peerAlert, "the \(peerRole) closed the connection with alert \"\(alert)\"\(mismatchNote)")
        }
        if err == SSL_ERROR_SYSCALL {
            let e = cause
            OpenSSLErrorQueue.clear()
            if e == 0 { return MTLSError(.closed, "the \(peerRole) closed the connection without close_notify") }
            if e == EPIPE || e == ECONNRESET { return MTLSError(.closed, "the \(peerRole) reset the connection") }
            return MTLSError(.io, "\(verb) \(peerAddress): \(String(cString: strerror(e)))")
        }
        return MTLSError.openSSL(.io, "\(verb) \(peerAddress) failed")
    }

    /// Sends close_notify (once); the socket stays open until ``close()``.
    public func shutdown() throws {
        guard !closed, isHandshakeComplete else { return }
        OpenSSLErrorQueue.clear()
        let r = SSL_shutdown(ssl)
        if r < 0 {
            let err = SSL_get_error(ssl, r)
            if nonBlocking, err == SSL_ERROR_WANT_WRITE { throw MTLSError(.wantWrite, "shutdown is waiting for the socket") }
            OpenSSLErrorQueue.clear()
        }
    }

    /// Sends close_notify if possible and closes the socket (if the connection owns it).
    public func close() {
        guard !closed else { return }
        if isHandshakeComplete {
            SocketBIO.setClosing(ssl)
            _ = SSL_shutdown(ssl)
        }
        OpenSSLErrorQueue.clear()
        closed = true
        if ownsFileDescriptor { Glibc.close(fileDescriptor) }
    }

    /// Closes after a failed handshake without losing the alert we sent: a close with unread
    /// input makes the kernel send a reset, which can discard the alert before the peer reads
    /// it. So: stop writing, drain what the peer still sends (briefly), then close.
    func closeAfterRejecting() {
        guard !closed else { return }
        closed = true
        OpenSSLErrorQueue.clear()
        guard ownsFileDescriptor else { return }
        Glibc.shutdown(fileDescriptor, Int32(SHUT_WR))
        let deadline = Deadline(seconds: 0.5)
        var buf = [UInt8](repeating: 0, count: 4096)
        while (try? Socket.wait(fileDescriptor, forWriting: false, deadline: deadline, what: "drain")) != nil {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fileDescriptor, $0.baseAddress, $0.count) }
            if n <= 0, !(n < 0 && (errno == EAGAIN || errno == EINTR)) { break }
        }
        Glibc.close(fileDescriptor)
    }

    // MARK: what was negotiated

    /// The peer's certificate, if it sent one.
    public var peerCertificate: Certificate? {
        guard let x = SSL_get0_peer_certificate(ssl) else { return nil }
        return try? Certificate(borrowing: x)
    }

    /// The chain the peer presented, leaf first, as sent.
    public var peerChain: [Certificate] {
        if SSL_get0_peer_certificate(ssl) == nil { return state.presentedChain }
        var out: [Certificate] = []
        if let leaf = peerCertificate { out.append(leaf) }
        if let sk = SSL_get_peer_cert_chain(ssl) {
            for i in 0..<mtls_ossl_sk_X509_num(sk) {
                guard let x = mtls_ossl_sk_X509_value(sk, i), let c = try? Certificate(borrowing: x) else { continue }
                if out.first != c { out.append(c) }
            }
        }
        return out
    }

    /// Our evaluation of the peer's chain (for a resumed session, the one made when the session
    /// was established). Nil when the peer sent no certificate.
    public var evaluation: TrustResult? { state.evaluation }

    /// The ALPN protocol agreed on, if any.
    public var alpn: String? {
        var p: UnsafePointer<UInt8>? = nil
        var n: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &p, &n)
        guard let p, n > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: p, count: Int(n)), as: UTF8.self)
    }

    /// The TLS version negotiated; nil before the handshake has agreed on one (OpenSSL's
    /// `TLS_ANY_VERSION` until the hello messages are exchanged).
    public var tlsVersion: TLSVersion? {
        switch SSL_version(ssl) {
        case TLS1_3_VERSION: return .tls13
        case TLS1_2_VERSION: return .tls12
        default: return nil
        }
    }

    /// OpenSSL's name for the version negotiated ("TLSv1.2", "TLSv1.3"), what ``tlsVersion`` was
    /// before 0.3.0.
    public var tlsVersionName: String { String(cString: SSL_get_version(ssl)) }

    /// The key-exchange group the handshake used, in OpenSSL's name ("X25519", "secp256r1",
    /// "ffdhe2048"), nil before one is agreed (or for a TLS 1.2 handshake without (EC)DHE).
    package var negotiatedGroup: String? {
        let id = Int32(truncatingIfNeeded: SSL_ctrl(ssl, SSL_CTRL_GET_NEGOTIATED_GROUP, 0, nil))
        guard id > 0, let name = SSL_group_to_name(ssl, id) else { return nil }
        return String(cString: name)
    }

    /// The negotiated cipher suite's name.
    public var cipherSuite: String? {
        guard let c = SSL_get_current_cipher(ssl) else { return nil }
        return String(cString: SSL_CIPHER_get_name(c))
    }

    /// Whether the handshake resumed an earlier session.
    public var isResumed: Bool { SSL_session_reused(ssl) == 1 }

    /// The identity we presented (for automatic selection, the one chosen), if any.
    public var presentedIdentity: Identity? {
        if !isServer, SSL_get_certificate(ssl) == nil { return nil }
        return state.presentedIdentity
    }

    /// The alert the peer sent, if any ("certificate required").
    public var receivedAlert: String? { state.receivedAlert }

    /// What the server asked of our certificate (a client connection whose server sent a
    /// CertificateRequest), nil when it asked for none or on a server connection. Read from what
    /// OpenSSL kept of the request, also after a failed handshake.
    public var clientCertificateRequest: ClientCertificateRequest? {
        guard !isServer, SSL_get_client_CA_list(ssl) != nil || SSL_get_sigalgs(ssl, -1, nil, nil, nil, nil, nil) > 0 else {
            return nil
        }
        return ClientCertificateRequest(IdentitySelection.request(of: ssl))
    }
}

/// A server's request for a client certificate, as the client saw it: the CA names it listed
/// and the signature schemes it accepts; ``mismatch(_:at:)`` says why an identity cannot answer
/// it, with the rule automatic selection uses.
public struct ClientCertificateRequest: Sendable {
    let request: IdentitySelection.Request

    init(_ request: IdentitySelection.Request) { self.request = request }

    /// The CA names the server listed (RFC 4514); empty when it named none (any CA).
    public var caNames: [String] { request.caNameTexts }
    /// The TLS names of the signature schemes it accepts ("ecdsa_secp256r1_sha256"), empty when unknown.
    public var signatureSchemes: [String] {
        request.signatureSchemes.sorted().map { IdentitySelection.schemeNames([$0]) }
    }

    /// Why `identity` cannot answer this request at `now` (not valid then, no clientAuth EKU, a
    /// key the server accepts no scheme for, no certificate on its path issued by a CA the server
    /// names), nil when it can.
    public func mismatch(_ identity: Identity, at now: Date = Date()) -> String? {
        mismatch(leaf: identity.leaf, chain: identity.chain, at: now)
    }

    /// The same for a certificate and its chain whose key is elsewhere (a token identity's).
    public func mismatch(leaf: Certificate, chain: [Certificate], at now: Date = Date()) -> String? {
        IdentitySelection.mismatch(leaf: leaf, certificates: [leaf] + chain, request, now)
    }
}
