internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A TLS server socket: listens on an address and port and accepts clients with the server's
/// identity and its client policy. ``accept(timeout:)`` may be called from several threads.
///
/// Handshakes run concurrently: from the first ``accept(timeout:)`` on, a listener thread accepts
/// sockets and runs each client's handshake on a thread of its own (a handshake thread that
/// finished waits, up to ``maxIdleThreads`` of them, for the next client instead of exiting), so
/// one slow or stalled client never holds up the others (each is bounded by the handshake timeout). ``accept(timeout:)``
/// returns handshaken clients, and throws for rejected ones, in the order they finish. At most
/// ``maxPending`` clients are handshaking or waiting to be accepted; beyond that the kernel's
/// backlog holds them.
public final class TLSListener: Sendable {
    /// The port listened on (the one the system picked when 0 was asked for).
    public let port: UInt16
    /// The listening socket.
    public let fileDescriptor: Int32
    let context: TLSContext
    let options: TLSServerOptions
    private let core: ListenerCore
    /// The most clients handshaking or handshaken and not yet accepted at once.
    public static let maxPending = 256
    /// The most handshake threads kept waiting for the next client.
    public static let maxIdleThreads = 16

    /// Listens on `address` (nil: every IPv4 address; "127.0.0.1", "::1"...) and `port` (0 for
    /// an ephemeral port).
    public init(address: String? = nil, port: UInt16 = 0, options: TLSServerOptions) throws {
        context = try TLSContext.server(options)
        self.options = options
        (fileDescriptor, self.port) = try Socket.listen(address: address, port: port)
        Socket.setNonBlocking(fileDescriptor, true)
        do {
            core = try ListenerCore(listenFD: fileDescriptor, context: context, options: options)
        } catch {
            Glibc.close(fileDescriptor)
            throw error
        }
    }

    deinit { close() }

    /// Waits for a client (up to `timeout` seconds; nil waits forever) whose handshake finished.
    /// Throws when the client is rejected — the error says why (``MTLSError/Code/untrusted``
    /// with our evaluation's reasons, no certificate when one is required, the client's alert) —
    /// and ``MTLSError/Code/timeout`` when no client finished in time.
    public func accept(timeout: Double? = nil) throws -> TLSConnection {
        try core.next(deadline: Deadline(seconds: timeout), timeout: timeout)
    }

    /// Stops listening. Clients handshaken and not accepted are closed.
    public func close() { core.close() }
}

/// The state a listener shares with its threads (they hold this, not the listener, so the
/// listener's deinit runs when the application drops it).
final class ListenerCore: Sendable {
    private struct State {
        var ready: [Finished] = []
        var inFlight = 0
        var started = false
        var closed = false
        var acceptorRunning = false
        /// Handshake threads waiting on `workSignal`, and the clients handed to them.
        var idleThreads = 0
        var jobs: [(fd: Int32, peer: String)] = []
    }

    /// A finished handshake: moved from its handshake thread to the thread that accepts it.
    private final class Finished: @unchecked Sendable {
        // One thread touches the connection at a time: the handshake thread until it queues
        // this, then the accepting thread that dequeues it.
        nonisolated(unsafe) var connection: TLSConnection?
        let error: (any Error)?
        init(_ connection: TLSConnection?, _ error: (any Error)?) { self.connection = connection; self.error = error }
    }

    private let listenFD: Int32
    private let context: TLSContext
    private let options: TLSServerOptions
    private let state = Mutex(State())
    /// Readable while finished handshakes are queued (one byte per queued result).
    private let wakeRead: Int32
    private let wakeWrite: Int32
    /// Posted once for each client handed to an idle handshake thread, and once for each idle
    /// thread when the listener closes. Allocated once, freed in deinit (no thread holds the
    /// core then).
    nonisolated(unsafe) private let workSignal: UnsafeMutablePointer<sem_t>

    init(listenFD: Int32, context: TLSContext, options: TLSServerOptions) throws {
        self.listenFD = listenFD
        self.context = context
        self.options = options
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw MTLSError(.io, "pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            Socket.setNonBlocking(fd, true)
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        workSignal = .allocate(capacity: 1)
        sem_init(workSignal, 0, 0)
    }

    deinit {
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
        sem_destroy(workSignal)
        workSignal.deallocate()
    }

    func next(deadline: Deadline, timeout: Double?) throws -> TLSConnection {
        try startIfNeeded()
        while true {
            let (item, closed): (Finished?, Bool) = state.withLock { st in
                (st.ready.isEmpty ? nil : st.ready.removeFirst(), st.closed)
            }
            if let item {
                // What the handshake thread wrote before queueing the item happened before this.
                mtls_tsan_acquire(Unmanaged.passUnretained(item).toOpaque())
                var byte: UInt8 = 0
                _ = read(wakeRead, &byte, 1)
                if let c = item.connection { item.connection = nil; return c }
                throw item.error ?? MTLSError(.io, "client handshake failed")
            }
            if closed { throw MTLSError(.io, "the listener is closed") }
            try Socket.wait(wakeRead, forWriting: false, deadline: deadline, what: "accept")
            // Readable. A handshake thread queues its item, then writes its byte; so a byte with
            // no item queued belongs to an item another accepting thread already took (and whose
            // own read came before the byte). Drain it, or the next wait would return at once,
            // forever: a spinning accept that never reaches its deadline.
            let stray = state.withLock { $0.ready.isEmpty && !$0.closed }
            if stray {
                var byte: UInt8 = 0
                _ = read(wakeRead, &byte, 1)
            }
        }
    }

    func close() {
        let (wasRunning, dropped, idle): (Bool, [Finished], Int) = state.withLock { st in
            guard !st.closed else { return (true, [], 0) }
            st.closed = true
            let d = st.ready
            st.ready = []
            let idle = st.idleThreads
            st.idleThreads = 0
            return (st.acceptorRunning, d, idle)
        }
        for d in dropped { d.connection = nil }
        for _ in 0..<idle { sem_post(workSignal) } // idle handshake threads wake, find no client, exit
        // The acceptor thread closes the socket when it stops (it may be polling it now);
        // shutdown wakes it at once and refuses new clients.
        if wasRunning { _ = shutdown(listenFD, Int32(SHUT_RDWR)) } else if dropped.isEmpty { closeListenFD() }
        var b: UInt8 = 0
        _ = write(wakeWrite, &b, 1) // wakes accepting threads so they see `closed`
    }

    private let fdClosed = Mutex(false)
    private func closeListenFD() {
        fdClosed.withLock { done in
            guard !done else { return }
            done = true
            Glibc.close(listenFD)
        }
    }

    private func startIfNeeded() throws {
        let start: Bool = state.withLock { st in
            guard !st.started, !st.closed else { return false }
            st.started = true
            st.acceptorRunning = true
            return true
        }
        guard start else { return }
        if !Threads.spawn({ [self] in acceptLoop() }) {
            state.withLock { $0.started = false; $0.acceptorRunning = false }
            throw MTLSError(.io, "cannot start the listener thread")
        }
    }

    private func acceptLoop() {
        defer {
            state.withLock { $0.acceptorRunning = false }
            closeListenFD()
        }
        while true {
            let (closed, full): (Bool, Bool) = state.withLock { st in
                (st.closed, st.inFlight + st.ready.count >= TLSListener.maxPending)
            }
            if closed { return }
            if full { usleep(10_000); continue }
            let accepted: (Int32, String)
            do {
                accepted = try Socket.accept(listenFD, deadline: Deadline(seconds: 0.25))
            } catch let e as MTLSError where e.code == .timeout {
                continue
            } catch {
                if state.withLock({ $0.closed }) { return }
                usleep(10_000) // EMFILE and the like: let handshakes finish, then try again
                continue
            }
            let (fd, peer) = accepted
            let handed: Bool = state.withLock { st in
                st.inFlight += 1
                guard st.idleThreads > 0 else { return false }
                st.idleThreads -= 1
                st.jobs.append((fd, peer))
                return true
            }
            if handed {
                sem_post(workSignal)
            } else if !Threads.spawn({ [self] in handshakeThread(fd: fd, peer: peer) }) {
                handshake(fd: fd, peer: peer) // no thread to spare: handshake on this one
            }
        }
    }

    /// A handshake thread: handshakes its client, then waits for the next one while fewer than
    /// ``TLSListener/maxIdleThreads`` threads wait; exits when the listener closes.
    private func handshakeThread(fd: Int32, peer: String) {
        var job: (fd: Int32, peer: String)? = (fd, peer)
        while let (fd, peer) = job {
            handshake(fd: fd, peer: peer)
            let waits: Bool = state.withLock { st in
                guard !st.closed, st.idleThreads < TLSListener.maxIdleThreads else { return false }
                st.idleThreads += 1
                return true
            }
            guard waits else { return }
            while sem_wait(workSignal) != 0 && errno == EINTR {}
            job = state.withLock { st in st.jobs.isEmpty ? nil : st.jobs.removeFirst() }
        }
    }

    private func handshake(fd: Int32, peer: String) {
        let result: Finished
        do {
            let conn: TLSConnection
            do {
                conn = try TLSConnection(serverFD: fd, peer: peer, context: context, options: options)
            } catch {
                Glibc.close(fd)
                throw error
            }
            do {
                try conn.handshake()
                result = Finished(conn, nil)
            } catch let e as MTLSError {
                conn.closeAfterRejecting()
                throw MTLSError(e.code, "client \(peer): \(e.message)")
            }
        } catch {
            result = Finished(nil, error)
        }
        mtls_tsan_release(Unmanaged.passUnretained(result).toOpaque())
        let queued: Bool = state.withLock { st in
            st.inFlight -= 1
            guard !st.closed else { return false }
            st.ready.append(result)
            return true
        }
        if queued {
            var b: UInt8 = 0
            _ = write(wakeWrite, &b, 1)
        } else {
            result.connection = nil
        }
    }
}

/// Detached threads for the listener (the library starts no other threads).
enum Threads {
    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Runs `body` on a new detached thread; false when no thread could be created.
    static func spawn(_ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        defer { pthread_attr_destroy(&attr) }
        pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
        pthread_attr_setstacksize(&attr, 512 * 1024)
        var tid = pthread_t()
        let rc = pthread_create(&tid, &attr, { arg in
            guard let arg else { return nil }
            Unmanaged<Body>.fromOpaque(arg).takeRetainedValue().run()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<Body>.fromOpaque(box).release()
            return false
        }
        return true
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
