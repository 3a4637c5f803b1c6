internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// This file owns the listener: its socket, the threads that accept and handshake clients
// (ListenerCore; the threads come from BackgroundThread), and its counters. The configuration of an application's own `SSL_CTX`
// is in SSLContextConfiguration.swift.

/// A TLS server socket: listens on an address and port and accepts clients with the server's
/// identity and its client policy. ``accept(timeout:)`` may be called from several threads.
///
/// No hand-off per handshake (issue 40): the thread calling ``accept(timeout:)`` takes the turn
/// when no other thread holds it: it accepts, reads the ClientHello and runs the handshake
/// itself, non-blocking. A handshake that must wait for its client is parked; the turn holder
/// watches the listening socket, the sockets without a whole ClientHello and the parked
/// handshakes with one `poll`, and leaves the turn (to another accept caller waiting for it)
/// with the next thing to do. When no accept call holds the turn and work is left, or none has
/// held it for 250 ms (clients are still handshaken while the application is busy elsewhere),
/// the listener's one thread ("mtls-handshakes", started as the first accept returns, ended by
/// ``close()``) holds it and queues what it finishes. So callbacks that run on a handshake's
/// thread (policy reports and events, identity source events, a token's PIN at a signature) run, for a
/// listener's client, inside ``accept(timeout:)`` or on "mtls-handshakes", never with a lock of
/// the listener held, possibly on several threads at once; they must not close the listener.
/// One slow or stalled client never holds up the others (each is bounded by the handshake
/// timeout). ``accept(timeout:)`` returns handshaken clients, and throws for rejected ones, in
/// the order they finish. At most ``maxPending`` clients are handshaking or waiting to be
/// accepted; beyond that the kernel's backlog holds them.
///
/// A client takes a handshake slot only once its whole ClientHello has arrived:
/// until then the thread holding the turn watches it with the listening socket (one
/// `poll` over every such socket, at most ``maxWaitingForFirstByte`` of them, the oldest closed
/// first when more come; a socket with part of a ClientHello wakes the poll only when the rest
/// has come, `SO_RCVLOWAT`), and closes it when ``TLSServerOptions/firstByteTimeout`` is over
/// with nothing sent (silently: it is no client), or ``TLSServerOptions/clientHelloTimeout`` with
/// the ClientHello not whole (reported by ``accept(timeout:)`` as ``MTLSError/Code/timeout``).
/// One source (an IPv4 address, an IPv6 /64: ``TLSServerOptions/ipv6SourcePrefixLength``) has
/// at most ``TLSServerOptions/maxHandshakesPerAddress`` handshakes under way. When every slot
/// (or every slot of its source) is taken and a client with a whole ClientHello waits, the
/// handshake that has made no progress for longest (at least ``stalledAfter`` seconds) is cut
/// short for it: it fails with ``MTLSError/Code/timeout``. So connections that send nothing, a
/// byte, or a ClientHello and then nothing cannot keep real clients waiting.
public final class TLSListener: Sendable {
    /// The port listened on (the one the system picked when 0 was asked for).
    public let port: UInt16
    /// The listening socket.
    public let fileDescriptor: Int32
    let options: TLSServerOptions
    private let core: ListenerCore
    /// The identity each handshake presents: ``TLSServerOptions/identitySource``, else a source
    /// made of ``TLSServerOptions/identity`` that ``setIdentity(_:)`` swaps.
    public let identitySource: IdentitySource
    /// Handshakes accepted, refused (by reason), resumed, and connections open. A client that
    /// sent a part of a ClientHello and left, or was closed when its time was over, counts as
    /// refused (``MTLSError/Code/handshake``, ``MTLSError/Code/timeout``) though it never took a
    /// slot; one that never sent a byte counts nowhere.
    public let counters = ListenerCounters()
    /// The most clients handshaking or handshaken and not yet accepted at once.
    public static let maxPending = 256
    /// Unused since issue 40 (the listener has one thread of its own, and accept callers run
    /// handshakes themselves); kept for source compatibility.
    public static let maxIdleThreads = 16
    /// The most accepted sockets waiting for their first byte or the rest of their ClientHello;
    /// when another comes, the oldest whose ClientHello is not whole is closed.
    public static let maxWaitingForFirstByte = 4096
    /// Seconds without progress (no handshake message read or written) after which a handshake
    /// under way counts as stalled: it is cut short when a client with a whole ClientHello waits
    /// for its slot (the stalest first).
    public static let stalledAfter: Double = 1
    /// The most bytes of a ClientHello waited for before it takes a slot: a longer one (over
    /// several records) goes to its handshake once this much has arrived.
    package static let clientHelloWaitLimit = 16 * 1024 + 5 + 4

    /// Listens on `address` (nil: every IPv4 address; "127.0.0.1", "::1"...) and `port` (0 for
    /// an ephemeral port).
    public convenience init(address: String? = nil, port: UInt16 = 0, options: TLSServerOptions) throws {
        try self.init(options: options) { try Socket.listen(address: address, port: port) }
    }

    /// Serves on a TCP socket that is already listening, such as the one systemd passes under
    /// socket activation (file descriptor 3). The listener owns it from then on (and closes it);
    /// ``MTLSError/Code/invalidArgument`` when `fd` is not a listening TCP socket.
    public convenience init(listeningSocket fd: Int32, options: TLSServerOptions) throws {
        try self.init(options: options) {
            guard let port = Socket.listeningPort(fd) else {
                throw MTLSError(.invalidArgument, "file descriptor \(fd) is not a listening TCP socket")
            }
            return (fd, port)
        }
    }

    private init(options: TLSServerOptions, listen: () throws -> (Int32, UInt16)) throws {
        identitySource = options.identitySource ?? IdentitySource(options.identity)
        if let bits = options.ipv6SourcePrefixLength, bits > 128 {
            throw MTLSError(.invalidArgument, "the IPv6 source prefix length must be 1 to 128 bits, not \(bits)")
        }
        // The first of the listener's contexts (one per identity, ListenerContexts).
        let context = try TLSContext.server(options, identitySource: identitySource)
        self.options = options
        (fileDescriptor, self.port) = try listen()
        Socket.setNonBlocking(fileDescriptor, true)
        do {
            core = try ListenerCore(listenFD: fileDescriptor, contexts: ListenerContexts(context, source: identitySource, options: options),
                                    options: options, counters: counters)
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

    /// Waits for a client as ``accept(timeout:)`` does, at most `timeLimit`.
    public func accept(timeLimit: TLSTimeLimit) throws -> TLSConnection {
        try accept(timeout: timeLimit.seconds)
    }

    /// Stops listening. Clients handshaken and not accepted are closed, handshakes under way are
    /// cut short, and the listener's thread has ended when this returns (so a program may exit,
    /// and OpenSSL clean up, right after it).
    public func close() { core.close() }

    /// Presents `identity` from the next handshake on; handshakes under way and connections
    /// accepted keep the identity they started with. Reported to ``events`` as a rotation.
    /// (When the listener follows a store label, the next change in the store replaces it again.)
    /// Throws as ``IdentitySource/replace(with:)`` for an identity outside its validity.
    public func setIdentity(_ identity: Identity) throws { try identitySource.replace(with: identity) }

    /// The listener's lifecycle events (those of its identity source): rotations, failed
    /// reloads, its identity within the warning window of expiry.
    public var events: LifecycleEvents { identitySource.events }
}

/// A listener's counters, read at any time from any thread.
public final class ListenerCounters: Sendable {
    private let accepted_ = Atomic<UInt64>(0)
    private let resumed_ = Atomic<UInt64>(0)
    private let current_ = Atomic<Int64>(0)
    private let refused_ = Locked<[MTLSError.Code: UInt64]>([:])

    /// Only a listener counts (``TLSListener/counters``): a counter of no listener means nothing.
    init() {}

    /// Handshakes that succeeded (resumed ones included).
    public var accepted: UInt64 { accepted_.load(ordering: .relaxed) }
    /// Handshakes that resumed a session.
    public var resumed: UInt64 { resumed_.load(ordering: .relaxed) }
    /// Connections accepted and not yet freed by the application.
    public var currentConnections: Int64 { current_.load(ordering: .relaxed) }
    /// Refused handshakes by reason: the error code they failed with (``MTLSError/Code/untrusted``,
    /// ``MTLSError/Code/handshake``, ``MTLSError/Code/timeout``...).
    public var refused: [MTLSError.Code: UInt64] { refused_.withLock { $0 } }

    func handshakeSucceeded(resumed: Bool) {
        accepted_.add(1, ordering: .relaxed)
        if resumed { resumed_.add(1, ordering: .relaxed) }
        current_.add(1, ordering: .relaxed)
    }
    func handshakeRefused(_ code: MTLSError.Code) {
        refused_.withLock { $0[code, default: 0] += 1 }
    }
    func connectionEnded() { current_.subtract(1, ordering: .relaxed) }
}

/// The state a listener shares with the threads that drive it (they hold this, not the listener,
/// so the listener's deinit runs when the application drops it).
///
/// No hand-off per handshake (issue 40): one thread at a time holds the turn — the listening
/// socket, the accepted sockets whose ClientHello is not whole, and the handshakes waiting for
/// their peer (parked), watched with one poll. A thread calling accept takes the turn when no
/// other holds it; it leaves the turn with the first thing to do (a client whose ClientHello
/// came and that may take a slot, or a parked handshake whose socket is ready), handing the turn
/// to another accept caller waiting for it or, when none waits and work is left, to the
/// listener's one thread (started at its first need), and does that thing itself: the next
/// non-blocking step of that handshake. A handshake that finishes is what that accept call
/// returns; one that waits for its peer again is parked. The listener's thread queues what it
/// finishes for the accept callers, who wait on a condition variable (no pipe).
final class ListenerCore: Sendable {
    fileprivate struct State {
        var ready: [Finished] = []
        /// Items of `ready` that hold a connection: with `inFlight`, what takes the slots (a
        /// queued refusal holds nothing).
        var queuedConnections = 0
        var inFlight = 0
        var closed = false
        /// A thread holds the turn (it may be polling the listening socket now).
        var turnHeld = false
        /// The listener's thread holds it, and whether an accept caller asked it to leave it.
        var turnByDriver = false
        var driverAsked = false
        /// Accept callers waiting on `acceptCond` for the turn or a finished handshake.
        var acceptWaiters = 0
        /// The listener's thread (joined by close), and whether it waits on `driverCond`.
        var driver: pthread_t?
        var driverWaiting = false
        /// When the turn was last left (``Deadline/now()``).
        var turnFreeSince = 0.0
        /// Client sockets in a handshake (stepped by a thread, or parked). A socket leaves this
        /// before it is closed, so every socket here is open while the lock is held: close shuts
        /// them down, cutting their handshakes short, and so does the eviction of a stalled one.
        var handshaking: [Int32: Handshaking] = [:]
        /// Handshakes waiting for their peer, with no thread: the turn holder polls them.
        var parked: [Int32: Pending] = [:]
        /// Accepted sockets that take no handshake slot yet: those whose ClientHello is not whole
        /// (silent ones, and those with a part of it), watched by the turn holder, and ready ones
        /// (their ClientHello came) waiting for a slot or for their source to be under its cap.
        var waiting: [Int32: WaitingClient] = [:]
        /// Clients in a handshake (in `handshaking`), by source.
        var handshakesBySource: [String: Int] = [:]

        /// Work no thread may be looking at: what the listener's thread is for.
        var hasWork: Bool { !parked.isEmpty || !waiting.isEmpty }
    }

    /// A handshake under way.
    fileprivate struct Handshaking {
        let source: String
        let progress: HandshakeProgress
    }

    /// A handshake begun: its connection, and what its socket must become before its next step.
    fileprivate final class Pending: @unchecked Sendable {
        // One thread touches the connection at a time: the one stepping it, or (parked) the
        // lock's holder, which only moves it.
        let connection: TLSConnection
        let fd: Int32
        let peer: String
        let progress: HandshakeProgress
        /// When its handshake timeout is over (``Deadline/now()``), if ever.
        let deadline: Double?
        var wantsWrite = false
        init(_ connection: TLSConnection, fd: Int32, peer: String, progress: HandshakeProgress, deadline: Double?) {
            self.connection = connection
            self.fd = fd
            self.peer = peer
            self.progress = progress
            self.deadline = deadline
        }
    }

    /// An accepted socket before its handshake.
    fileprivate struct WaitingClient {
        /// Its address as text ("127.0.0.1:40404"), and the source that the per-source cap
        /// counts (``ListenerSource``).
        let peer: String
        /// The client as its handshake's rule is chosen for (``TrustPeer/client(numericHost:)``).
        let client: TrustPeer
        let source: String
        /// When it must have sent its first byte, and its whole ClientHello (``Deadline/now()``),
        /// if ever.
        let firstByteDeadline: Double?
        let helloDeadline: Double?
        /// Accepted in this order (the oldest not ready goes first when too many wait).
        let order: UInt64
        /// Bytes of its ClientHello seen so far, read from the socket: its handshake reads them
        /// first (issue 40: read once, not peeked at and read again).
        var hello: [UInt8] = []
        var received: Int { hello.count }
        /// The socket's `SO_RCVLOWAT` (1, the system's, unless a part of the ClientHello came:
        /// then the bytes still missing).
        var lowWater = 1
        /// Its ClientHello came whole: it takes a slot as soon as one (and its source) allows.
        var ready = false

        /// When it is closed if its ClientHello is still not whole.
        var deadline: Double? {
            if ready { return nil }
            let limits = received == 0 ? [firstByteDeadline, helloDeadline] : [helloDeadline]
            return limits.compactMap { $0 }.min()
        }
    }

    /// A finished handshake, or a refusal: returned by the accept call that stepped it, or
    /// queued for the next one.
    fileprivate final class Finished: @unchecked Sendable {
        // One thread touches the connection at a time: the one that finished the handshake
        // until it queues this, then the accepting thread that dequeues it.
        nonisolated(unsafe) var connection: TLSConnection?
        let error: (any Error)?
        let holdsConnection: Bool
        init(_ connection: TLSConnection?, _ error: (any Error)?) {
            self.connection = connection
            self.error = error
            holdsConnection = connection != nil
        }
    }

    /// What the turn holder leaves the turn for.
    private enum Work {
        /// A client whose ClientHello came, with its slot taken.
        case start(fd: Int32, peer: String, client: TrustPeer, progress: HandshakeProgress, hello: [UInt8])
        /// A parked handshake whose socket is ready.
        case step(Pending)
        /// A parked handshake whose time is over.
        case expired(Pending)
    }

    private enum TurnEnd {
        case work(Work)
        case timedOut
        case closed
        /// The listener's thread leaves the turn to an accept caller, or an accept caller
        /// leaves it for a queued item.
        case yield
    }

    private let listenFD: Int32
    private let contexts: ListenerContexts
    private let options: TLSServerOptions
    private let counters: ListenerCounters
    private let state = StateLock(State())
    /// Readable when the turn holder should look again: a handshake was parked or ended (a slot,
    /// or an address under its cap, may be free), an accept caller waits for the listener's
    /// thread to leave the turn, or the listener closed.
    private let turnWakeRead: Int32
    private let turnWakeWrite: Int32
    private let accepted = Atomic<UInt64>(0)
    /// TCP_NODELAY comes with each accepted socket from the listening socket (issue 40).
    private let noDelay: AcceptedNoDelay
    /// Where the turn holder reads ClientHellos (one thread holds the turn at a time; the
    /// state lock orders one holder after the next). Freed in deinit.
    nonisolated(unsafe) private let peekBuffer: UnsafeMutableRawBufferPointer

    init(listenFD: Int32, contexts: ListenerContexts, options: TLSServerOptions, counters: ListenerCounters) throws {
        self.counters = counters
        self.listenFD = listenFD
        noDelay = AcceptedNoDelay(listener: listenFD)
        self.contexts = contexts
        self.options = options
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw MTLSError(.io, "pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            Socket.setNonBlocking(fd, true)
        }
        turnWakeRead = fds[0]
        turnWakeWrite = fds[1]
        peekBuffer = .allocate(byteCount: TLSListener.clientHelloWaitLimit, alignment: 8)
    }

    deinit {
        Glibc.close(turnWakeRead)
        Glibc.close(turnWakeWrite)
        peekBuffer.deallocate()
    }

    private func wakeTurnHolder() {
        var b: UInt8 = 0
        _ = write(turnWakeWrite, &b, 1)
    }

    /// The next handshaken client for an accept call (or the refusal of one), as described on
    /// the type.
    func next(deadline: Deadline, timeout: Double?) throws -> TLSConnection {
        let end = deadline.remaining.map { Deadline.now() + $0 }
        while true {
            enum Next { case item(Finished), closed, turn, timedOut }
            state.lock()
            var n: Next
            while true {
                if !state.value.ready.isEmpty {
                    let item = state.value.ready.removeFirst()
                    if item.holdsConnection { state.value.queuedConnections -= 1 }
                    n = .item(item)
                    break
                }
                if state.value.closed { n = .closed; break }
                if !state.value.turnHeld {
                    state.value.turnHeld = true
                    state.value.turnByDriver = false
                    n = .turn
                    break
                }
                if let end, Deadline.now() >= end { n = .timedOut; break }
                if state.value.turnByDriver && !state.value.driverAsked {
                    state.value.driverAsked = true
                    wakeTurnHolder()
                }
                state.value.acceptWaiters += 1
                state.wait(state.acceptCond, until: end)
                state.value.acceptWaiters -= 1
            }
            if case .turn = n {} else { handOffLocked() }
            state.unlock()
            switch n {
            case .item(let item):
                // What the thread that finished it wrote before queueing the item happened before this.
                mtls_tsan_acquire(Unmanaged.passUnretained(item).toOpaque())
                if let c = item.connection { item.connection = nil; return c }
                throw item.error ?? MTLSError(.io, "client handshake failed")
            case .closed:
                throw MTLSError(.io, "the listener is closed")
            case .timedOut:
                throw MTLSError(.timeout, "accept timed out")
            case .turn:
                let work: Work
                switch takeTurn(until: end, byDriver: false) {
                case .work(let w): work = w
                case .timedOut: throw MTLSError(.timeout, "accept timed out")
                case .closed, .yield: continue
                }
                guard let result = perform(work) else { continue } // parked: the loop takes the turn again, or waits
                state.lock()
                let closed = state.value.closed
                handOffLocked()
                state.unlock()
                if closed {
                    result.connection = nil
                    continue
                }
                if let c = result.connection { result.connection = nil; return c }
                throw result.error ?? MTLSError(.io, "client handshake failed")
            }
        }
    }

    /// After a turn was left no accept call holding it, the listener's thread takes it once it
    /// has been free this long (seconds), or at once when work is left: so clients are accepted
    /// and handshaken while the application is not in accept, as from its first accept on, and
    /// an accept loop (back within this time) keeps the turn to itself.
    static let backgroundAfter = 0.25

    /// With the lock held, when no thread holds the turn and no accept caller waits for it: the
    /// listener's thread is started if it never was; it is woken when work is left (parked
    /// handshakes, waiting sockets), else it takes the turn after ``backgroundAfter``.
    private func handOffLocked() {
        guard !state.value.closed, !state.value.turnHeld, state.value.acceptWaiters == 0 else { return }
        if state.value.driver == nil {
            // Started under the lock: it waits for the lock before it looks at anything.
            state.value.driver = BackgroundThread.startJoinable(name: "mtls-handshakes", { [self] in driverRun() })
        } else if state.value.hasWork && state.value.driverWaiting {
            pthread_cond_signal(state.driverCond)
        }
    }

    /// The listener's thread: holds the turn while no accept caller wants it and work is left or
    /// the turn has been free for ``backgroundAfter``, and queues the handshakes it finishes
    /// (and the refusals) for the accept callers.
    private func driverRun() {
        while true {
            state.lock()
            var go = false
            while true {
                if state.value.closed { break }
                let now = Deadline.now()
                let free = !state.value.turnHeld && state.value.acceptWaiters == 0
                if free, state.value.hasWork || now - state.value.turnFreeSince >= ListenerCore.backgroundAfter {
                    state.value.turnHeld = true
                    state.value.turnByDriver = true
                    state.value.driverAsked = false
                    go = true
                    break
                }
                state.value.driverWaiting = true
                // Looks again when the turn has been free long enough (or, while it is held, a
                // while later).
                state.wait(state.driverCond, until: (free ? state.value.turnFreeSince : now) + ListenerCore.backgroundAfter)
                state.value.driverWaiting = false
            }
            state.unlock()
            guard go else { return }
            switch takeTurn(until: nil, byDriver: true) {
            case .work(let work):
                if let result = perform(work) { queue(result) }
            case .closed:
                return
            case .timedOut, .yield:
                continue
            }
        }
    }

    /// Queues a finished handshake for the accept callers (dropped once the listener closed).
    private func queue(_ result: Finished) {
        mtls_tsan_release(Unmanaged.passUnretained(result).toOpaque())
        let queued: Bool = state.withLock { st in
            guard !st.closed else { return false }
            st.ready.append(result)
            if result.holdsConnection { st.queuedConnections += 1 }
            return true
        }
        if queued { signalAcceptCaller() } else { result.connection = nil }
    }

    private func signalAcceptCaller() {
        state.lock()
        if state.value.acceptWaiters > 0 { pthread_cond_signal(state.acceptCond) }
        state.unlock()
    }

    /// Holds the turn (taken by the caller) until there is work or `end`, then leaves it.
    private func takeTurn(until end: Double?, byDriver: Bool) -> TurnEnd {
        let result = holdTurn(until: end, byDriver: byDriver)
        state.lock()
        state.value.turnHeld = false
        state.value.turnByDriver = false
        state.value.driverAsked = false
        state.value.turnFreeSince = Deadline.now()
        if state.value.acceptWaiters > 0 {
            pthread_cond_signal(state.acceptCond)
        } else if !byDriver {
            handOffLocked()
        }
        state.unlock()
        return result
    }

    /// Runs one step of a handshake: the finished handshake (or its refusal), or nil when it
    /// waits for its peer again (parked).
    private func perform(_ work: Work) -> Finished? {
        let pending: Pending
        switch work {
        case .start(let fd, let peer, let client, let progress, let hello):
            let c: TLSConnection
            do {
                c = try TLSConnection(serverFD: fd, peer: peer, client: client, context: contexts.current(), options: options,
                                      clientHello: hello)
            } catch {
                return finish(nil, error, fd: fd, peer: peer, progress: progress)
            }
            c.handshakeProgress = progress
            // Its steps poll before reading an answer to a flight they just wrote (issue 40).
            SocketBIO.setWaitAfterWrite(c.ssl, true)
            let limit = options.handshakeTimeout.flatMap { $0 > 0 ? $0 : nil }
            pending = Pending(c, fd: fd, peer: peer, progress: progress, deadline: limit.map { Deadline.now() + $0 })
        case .step(let p):
            pending = p
        case .expired(let p):
            return finish(p.connection, p.connection.handshakeTimedOut(), fd: p.fd, peer: p.peer, progress: p.progress)
        }
        let c = pending.connection
        do {
            switch try c.handshakeStep() {
            case .done:
                c.handshakeProgress = nil
                SocketBIO.setWaitAfterWrite(c.ssl, false)
                c.state.handshakeDone()
                return finish(c, nil, fd: pending.fd, peer: pending.peer, progress: pending.progress)
            case .wantRead: pending.wantsWrite = false
            case .wantWrite: pending.wantsWrite = true
            }
        } catch {
            return finish(c, error, fd: pending.fd, peer: pending.peer, progress: pending.progress)
        }
        let parked: Bool = state.withLock { st in
            guard !st.closed else { return false }
            st.parked[pending.fd] = pending
            // The turn holder polls without it: it looks again.
            if st.turnHeld { wakeTurnHolder() }
            return true
        }
        if parked { return nil }
        return finish(c, MTLSError(.io, "the listener is closed"), fd: pending.fd, peer: pending.peer, progress: pending.progress)
    }

    func close() {
        let closing: (dropped: [Finished], turnHeld: Bool, waiting: [Int32], parked: [Pending], driver: pthread_t?)? = state.withLock { st in
            guard !st.closed else { return nil }
            st.closed = true
            let d = st.ready
            st.ready = []
            st.queuedConnections = 0
            for fd in st.handshaking.keys { _ = shutdown(fd, Int32(SHUT_RDWR)) } // open: see `handshaking`
            var waiting: [Int32] = []
            var parked: [Pending] = []
            // The turn holder owns the waiting sockets and the parked handshakes (it may be
            // polling them now): it closes them as it leaves. Else they are closed here.
            if !st.turnHeld {
                waiting = Array(st.waiting.keys)
                st.waiting.removeAll()
                parked = Array(st.parked.values)
                st.parked.removeAll()
            }
            pthread_cond_broadcast(state.acceptCond)
            pthread_cond_broadcast(state.driverCond)
            let driver = st.driver
            st.driver = nil
            return (d, st.turnHeld, waiting, parked, driver)
        }
        guard let closing else { return }
        for d in closing.dropped { d.connection = nil }
        // The turn holder closes the socket when it leaves (it may be polling it now); shutdown
        // wakes it at once and refuses new clients.
        if closing.turnHeld {
            _ = shutdown(listenFD, Int32(SHUT_RDWR))
            wakeTurnHolder()
        } else {
            closeListenFD()
        }
        for fd in closing.waiting { Glibc.close(fd) }
        for p in closing.parked {
            _ = finish(p.connection, MTLSError(.io, "the listener is closed"), fd: p.fd, peer: p.peer, progress: p.progress)
        }
        // The listener's thread ends promptly now (no turn, its client sockets shut down): wait
        // for it, so that it is not inside OpenSSL when the program goes on (or exits).
        if let t = closing.driver, pthread_equal(t, pthread_self()) == 0 { pthread_join(t, nil) }
    }

    private let fdClosed = Locked(false)
    private func closeListenFD() {
        fdClosed.withLock { done in
            guard !done else { return }
            done = true
            Glibc.close(listenFD)
        }
    }

    /// The turn: until there is work — the oldest client whose ClientHello has arrived and that
    /// may take a slot (fewer than ``TLSListener/maxPending`` in flight, its source under its
    /// cap), with the slot taken, or a parked handshake whose socket is ready or whose time is
    /// over — or `end`, or the listener closes (its waiting sockets and parked handshakes are
    /// then closed here). Meanwhile accepts new clients into `waiting`, watches those whose
    /// ClientHello is not whole (one poll over all of them, the parked handshakes, the listening
    /// socket and the wake pipe), closes those whose time is over, and cuts stalled handshakes
    /// short for clients that wait for a slot.
    private func holdTurn(until end: Double?, byDriver: Bool) -> TurnEnd {
        let perSource = options.maxHandshakesPerAddress ?? 0  // 0: no limit
        while true {
            let now = Deadline.now()
            var expired: [Int32] = []
            var dropped: [Pending] = []
            var fds: [pollfd] = []
            var parkedFrom = 0
            var nearest: Double?
            var refusals: [MTLSError] = []
            let picked: TurnEnd? = state.withLock { st in
                if st.closed {
                    expired = Array(st.waiting.keys)
                    st.waiting.removeAll()
                    dropped = Array(st.parked.values)
                    st.parked.removeAll()
                    return .closed
                }
                if byDriver && st.acceptWaiters > 0 { return .yield }
                // A refusal queued (by this turn, or the listener's thread): the accept caller
                // takes it.
                if !byDriver && !st.ready.isEmpty { return .yield }
                // A parked handshake whose time is over.
                for (fd, p) in st.parked {
                    guard let d = p.deadline else { continue }
                    if now >= d {
                        st.parked[fd] = nil
                        return .work(.expired(p))
                    }
                    nearest = min(nearest ?? d, d)
                }
                // One pass: the expired, the oldest ready client that may start, how many ready
                // ones may start, and the sources whose ready clients wait for their cap.
                var first: (fd: Int32, order: UInt64)?
                var startable = 0
                var capped: Set<String> = []
                for (fd, w) in st.waiting {
                    if w.ready {
                        if perSource > 0 && st.handshakesBySource[w.source, default: 0] >= perSource {
                            capped.insert(w.source)
                            continue
                        }
                        startable += 1
                        if first.map({ w.order < $0.order }) ?? true { first = (fd, w.order) }
                    } else if let d = w.deadline {
                        if now >= d {
                            expired.append(fd)
                            if w.received > 0 {
                                refusals.append(MTLSError(.timeout, "client \(w.peer): its ClientHello did not arrive whole in time "
                                                          + "(\(w.received) bytes came)"))
                            }
                        } else { nearest = min(nearest ?? d, d) }
                    }
                }
                for fd in expired { st.waiting[fd] = nil }
                if let first, st.inFlight + st.queuedConnections < TLSListener.maxPending, let w = st.waiting.removeValue(forKey: first.fd) {
                    let progress = HandshakeProgress()
                    st.inFlight += 1
                    st.handshaking[first.fd] = Handshaking(source: w.source, progress: progress)
                    st.handshakesBySource[w.source, default: 0] += 1
                    return .work(.start(fd: first.fd, peer: w.peer, client: w.client, progress: progress, hello: w.hello))
                }
                if let end, now >= end { return .timedOut }
                // Clients wait for a slot: the stalled handshakes go first, one for each waiting
                // client (less those already cut short and not yet ended).
                if startable > 0 { evictStalled(&st, count: startable, source: nil, now: now) }
                for source in capped { evictStalled(&st, count: 1, source: source, now: now) }
                fds.append(pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0))
                fds.append(pollfd(fd: turnWakeRead, events: Int16(POLLIN), revents: 0))
                for (fd, w) in st.waiting where !w.ready {
                    fds.append(pollfd(fd: fd, events: Int16(POLLIN) | ListenerCore.pollReadHangUp, revents: 0))
                }
                parkedFrom = fds.count
                for (fd, p) in st.parked {
                    fds.append(pollfd(fd: fd, events: Int16(p.wantsWrite ? POLLOUT : POLLIN), revents: 0))
                }
                return nil
            }
            for fd in expired { Glibc.close(fd) }
            // A ClientHello begun and not finished in time is a refused handshake, as it was when
            // it took a slot (one that never sent a byte is none).
            refuse(refusals)
            if case .closed = picked {
                for p in dropped {
                    _ = finish(p.connection, MTLSError(.io, "the listener is closed"), fd: p.fd, peer: p.peer, progress: p.progress)
                }
                closeListenFD()
            }
            if let picked { return picked }
            // Wake up for the nearest deadline, and at least every 250 ms (a slot freed by the
            // application accepting, or a handshake that now counts as stalled, is seen then).
            if let end { nearest = min(nearest ?? end, end) }
            let wait = min(250, nearest.map { max(0, Int32(($0 - now) * 1000) + 1) } ?? 250)
            let n = poll(&fds, nfds_t(fds.count), wait)
            if n < 0 {
                if errno != EINTR { usleep(10_000) }
                continue
            }
            if n == 0 { continue }
            if fds[1].revents != 0 {
                var buf = [UInt8](repeating: 0, count: 256)
                while read(turnWakeRead, &buf, buf.count) > 0 {}
            }
            // A parked handshake whose socket is ready: its next step (the others stay parked;
            // poll, level-triggered, shows them to the next turn).
            for p in fds[parkedFrom...] where p.revents != 0 {
                let ready: Pending? = state.withLock { $0.parked.removeValue(forKey: p.fd) }
                if let ready { return .work(.step(ready)) }
            }
            var gone: [Int32] = []
            var left: [(fd: Int32, sentSome: Bool)] = []
            var arrived: [(fd: Int32, hello: [UInt8], lowWater: Int, ready: Bool)] = []
            for p in fds[2..<parkedFrom] where p.revents != 0 {
                let seen = state.withLock { $0.waiting[p.fd].map { ($0.hello, $0.lowWater) } }
                guard let (before, lowWater) = seen else { continue }
                switch look(at: p.fd, hungUp: p.revents & (ListenerCore.pollReadHangUp | Int16(POLLHUP) | Int16(POLLERR)) != 0,
                            before: before, lowWater: lowWater) {
                case .gone(let sentSome):
                    gone.append(p.fd)
                    left.append((p.fd, sentSome || !before.isEmpty))
                case .waiting(let hello, let low): arrived.append((p.fd, hello, low, false))
                case .whole(let hello): arrived.append((p.fd, hello, 1, true))
                }
            }
            let ended: [MTLSError] = state.withLock { st in
                for a in arrived {
                    st.waiting[a.fd]?.hello = a.hello
                    st.waiting[a.fd]?.lowWater = a.lowWater
                    st.waiting[a.fd]?.ready = a.ready
                }
                return left.compactMap { l in
                    guard let w = st.waiting.removeValue(forKey: l.fd), l.sentSome else { return nil }
                    return MTLSError(.handshake, "client \(w.peer): the connection ended before its ClientHello was whole")
                }
            }
            for fd in gone { Glibc.close(fd) } // connected and left without a whole ClientHello
            refuse(ended)
            if fds[0].revents != 0 { acceptWaiting() }
        }
    }

    private enum Arrival {
        /// Closed (or reset) before its ClientHello was whole; whether it had sent a part of it.
        case gone(sentSome: Bool)
        /// The bytes so far; the socket wakes poll when `lowWater` more have come.
        case waiting(hello: [UInt8], lowWater: Int)
        /// The ClientHello is whole (or the bytes are no ClientHello worth waiting for: its
        /// handshake answers them at once).
        case whole(hello: [UInt8])
    }

    /// What has arrived on a waiting socket that poll found readable, after the bytes `before`
    /// read from it already: reads them (its handshake reads them from the listener, not the
    /// socket: one read, issue 40) and sets `SO_RCVLOWAT` to the bytes still missing, or back to
    /// 1 once the ClientHello is whole.
    private func look(at fd: Int32, hungUp: Bool, before: [UInt8], lowWater: Int) -> Arrival {
        let limit = TLSListener.clientHelloWaitLimit
        let had = min(before.count, limit)
        if had > 0 { before.withUnsafeBytes { peekBuffer.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: had) } }
        var r = 0
        if had < limit {
            r = recv(fd, peekBuffer.baseAddress! + had, limit - had, Int32(MSG_DONTWAIT))
            if r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) { return .gone(sentSome: false) }
        }
        if r < 0 {
            if hungUp { return .gone(sentSome: false) }
            return .waiting(hello: before, lowWater: lowWater)
        }
        let total = had + r
        let hello = [UInt8](unsafeUninitializedCapacity: total) { b, n in  // memcpy, in debug builds too
            if total > 0 { UnsafeMutableRawPointer(b.baseAddress!).copyMemory(from: peekBuffer.baseAddress!, byteCount: total) }
            n = total
        }
        let needed = ClientHelloArrival.bytesNeeded(UnsafeRawBufferPointer(rebasing: peekBuffer[..<total]), limit: limit)
        guard let needed else {
            if lowWater > 1 { setLowWater(fd, 1) }
            return .whole(hello: hello)
        }
        if hungUp { return .gone(sentSome: true) }  // it cannot finish a handshake it stopped sending for
        // Readable with nothing new and no hang-up: the socket woke poll for a reason the
        // low-water mark did not foresee. Never spin on it: its handshake takes it from here
        // (a slot that stalls is cut short as any other stalled handshake).
        if r == 0 {
            if lowWater > 1 { setLowWater(fd, 1) }
            return .whole(hello: hello)
        }
        let missing = max(1, needed - total)
        if missing != lowWater { setLowWater(fd, missing) }
        return .waiting(hello: hello, lowWater: missing)
    }

    /// POLLRDHUP (Linux, <poll.h> under _GNU_SOURCE, which the importer does not see): the peer
    /// shut its sending side down.
    private static let pollReadHangUp: Int16 = 0x2000

    private func setLowWater(_ fd: Int32, _ bytes: Int) {
        var v = Int32(bytes)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Cuts short up to `count` handshakes (of `source`, or any) that have made no progress for
    /// ``TLSListener/stalledAfter`` seconds, the stalest first, less those already cut short and
    /// not yet ended. The socket is shut down under the lock (so it is open, see `handshaking`);
    /// its handshake fails at once and frees the slot.
    private func evictStalled(_ st: inout State, count: Int, source: String?, now: Double) {
        var pending = 0
        var candidates: [(fd: Int32, last: Double)] = []
        for (fd, h) in st.handshaking where source == nil || h.source == source {
            if h.progress.isEvicted { pending += 1; continue }
            let last = h.progress.lastProgress
            if now - last >= TLSListener.stalledAfter { candidates.append((fd, last)) }
        }
        let wanted = count - pending
        guard wanted > 0, !candidates.isEmpty else { return }
        for c in candidates.sorted(by: { $0.last < $1.last }).prefix(wanted) {
            st.handshaking[c.fd]?.progress.evict(stalledFor: now - c.last)
            _ = shutdown(c.fd, Int32(SHUT_RDWR))
        }
    }

    /// Accepts every client the kernel holds into `waiting`. When too many wait (or no file
    /// descriptor is left), the oldest whose ClientHello is not whole is closed to make room.
    private func acceptWaiting() {
        let firstByte = limit(options.firstByteSeconds)
        let hello = limit(options.clientHelloSeconds)
        let prefix = options.ipv6SourcePrefixLength ?? 128
        while true {
            if state.withLock({ $0.waiting.count >= TLSListener.maxWaitingForFirstByte }) { evictOldestUnready() }
            let next: (fd: Int32, peer: String, host: String?)?
            do {
                next = try Socket.acceptClient(listenFD, noDelay: noDelay)
            } catch {
                if state.withLock({ $0.closed }) { return }
                // EMFILE and the like: a waiting socket gives its descriptor to a newcomer; with
                // none to close, let handshakes finish.
                if !evictOldestUnready() { usleep(10_000) }
                return
            }
            guard let (fd, peer, host) = next else { return } // non-blocking and close-on-exec from accept4
            let now = Deadline.now()
            // The peer read once: it keys the per-source cap and chooses the client's rule.
            let peerRule = host.map { TrustPeer.client(numericHost: $0) } ?? TrustPeer.client(address: peer)
            var client = WaitingClient(peer: peer, client: peerRule,
                                       source: ListenerSource.key(client: peerRule, peer: peer, ipv6PrefixLength: prefix),
                                       firstByteDeadline: firstByte.map { now + $0 }, helloDeadline: hello.map { now + $0 },
                                       order: accepted.add(1, ordering: .relaxed).newValue)
            // A client's ClientHello has mostly come with its connection: look at once rather than
            // after one more poll (issue 40: a poll saved per handshake). One that sent nothing yet
            // is watched as before.
            switch look(at: fd, hungUp: false, before: [], lowWater: 1) {
            case .gone:  // connected and left without a byte: no client, counted nowhere
                Glibc.close(fd)
                continue
            case .waiting(let hello, let low):
                client.hello = hello
                client.lowWater = low
            case .whole(let hello):
                client.hello = hello
                client.ready = true
            }
            let kept: Bool = state.withLock { st in
                guard !st.closed else { return false }
                st.waiting[fd] = client
                return true
            }
            if !kept { Glibc.close(fd); return }
            // A client ready for its handshake: take it now (the listening socket, level-triggered,
            // wakes the next poll at once if more wait), rather than ask accept for one more.
            if client.ready { return }
        }
    }

    /// Counts and reports clients refused before their handshake began (a ClientHello begun and
    /// not finished), as a failed handshake is: ``TLSListener/accept(timeout:)`` throws them, in
    /// turn. A refusal holds no slot; beyond ``TLSListener/maxWaitingForFirstByte`` unaccepted
    /// items, refusals are only counted (an application that does not accept cannot make them
    /// pile up).
    private func refuse(_ errors: [MTLSError]) {
        guard !errors.isEmpty else { return }
        for e in errors { counters.handshakeRefused(e.code) }
        state.withLock { st in
            guard !st.closed else { return }
            let room = max(0, TLSListener.maxWaitingForFirstByte - st.ready.count)
            for e in errors.prefix(room) { st.ready.append(Finished(nil, e)) }
            if room > 0 && st.acceptWaiters > 0 { pthread_cond_broadcast(state.acceptCond) }
        }
    }

    /// Seconds a client has for its first byte or its ClientHello (`timeout`), never more than
    /// the handshake timeout (a client cannot take longer to begin its handshake than to finish it).
    private func limit(_ timeout: Double?) -> Double? {
        [timeout, options.handshakeSeconds].compactMap { $0.flatMap { $0 > 0 ? $0 : nil } }.min()
    }

    /// Closes the socket accepted first among those whose ClientHello is not whole; false when
    /// there is none.
    @discardableResult
    private func evictOldestUnready() -> Bool {
        let evicted: (fd: Int32, peer: String?)? = state.withLock { st in
            var oldest: (fd: Int32, order: UInt64)?
            for (fd, w) in st.waiting where !w.ready && (oldest.map { w.order < $0.order } ?? true) { oldest = (fd, w.order) }
            guard let oldest, let w = st.waiting.removeValue(forKey: oldest.fd) else { return nil }
            return (oldest.fd, w.received > 0 ? w.peer : nil)
        }
        guard let (fd, peer) = evicted else { return false }
        Glibc.close(fd)
        if let peer {
            refuse([MTLSError(.timeout, "client \(peer): closed before its ClientHello was whole, to make room for newer clients")])
        }
        return true
    }


    /// Ends a handshake (its slot freed) with its connection or its failure: what its accept
    /// call returns or throws. A failed handshake's connection is closed here, after the alert.
    private func finish(_ conn: TLSConnection?, _ error: (any Error)?, fd: Int32, peer: String, progress: HandshakeProgress) -> Finished {
        var failure = error
        if failure != nil, let stalled = progress.evictedAfter {
            failure = MTLSError(.timeout, "its handshake made no progress for \((stalled * 10).rounded() / 10) s while clients waited "
                                + "for a handshake slot; it was cut short to serve them")
        }
        // Out of `handshaking` before the socket can be closed (below, or by the connection).
        let someoneWaits: Bool = state.withLock { st in
            st.inFlight -= 1
            guard let h = st.handshaking.removeValue(forKey: fd) else { return false }
            let left = st.handshakesBySource[h.source, default: 1] - 1
            st.handshakesBySource[h.source] = left > 0 ? left : nil
            return st.turnHeld && st.waiting.values.contains { $0.ready }
        }
        // A client whose ClientHello came may be waiting for this slot: wake the turn holder.
        // (With no holder, the next one sees it.)
        if someoneWaits { wakeTurnHolder() }
        switch (conn, failure) {
        case (let c?, nil):
            counters.handshakeSucceeded(resumed: c.isResumed)
            c.listenerCounters = counters
            return Finished(c, nil)
        case (let c?, let e as MTLSError):
            counters.handshakeRefused(e.code)
            c.closeAfterRejecting()
            return Finished(nil, MTLSError(e.code, "client \(peer): \(e.message)"))
        case (let c, let e):
            counters.handshakeRefused((e as? MTLSError)?.code ?? .io)
            if c == nil { Glibc.close(fd) } // else the connection closes it as it goes
            return Finished(nil, e ?? MTLSError(.io, "client handshake failed"))
        }
    }
}

/// A listener's state under a pthread mutex, with the condition variables its threads wait on
/// (accept callers on `acceptCond`, the listener's thread on `driverCond`). `value` is read and
/// written only with the lock held.
private final class StateLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    let acceptCond: UnsafeMutablePointer<pthread_cond_t>
    let driverCond: UnsafeMutablePointer<pthread_cond_t>
    var value: ListenerCore.State

    init(_ value: ListenerCore.State) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        acceptCond = .allocate(capacity: 1)
        driverCond = .allocate(capacity: 1)
        pthread_cond_init(acceptCond, &attr)
        pthread_cond_init(driverCond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(acceptCond)
        pthread_cond_destroy(driverCond)
        pthread_mutex_destroy(mutex)
        acceptCond.deallocate()
        driverCond.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    func withLock<R>(_ body: (inout ListenerCore.State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// With the lock held: waits on `cond` until it is signalled, or until `end`
    /// (``Deadline/now()``; nil: no limit). The caller checks what it waits for again.
    func wait(_ cond: UnsafeMutablePointer<pthread_cond_t>, until end: Double?) {
        guard let end else {
            pthread_cond_wait(cond, mutex)
            return
        }
        let whole = end.rounded(.down)
        var ts = timespec(tv_sec: Int(whole), tv_nsec: Int(min(999_999_999, (end - whole) * 1e9)))
        pthread_cond_timedwait(cond, mutex, &ts)
    }
}

/// One handshake under way at a listener, as the listener sees it: when its state machine last
/// moved (``TLSConnection`` says so each time a message was read or written), and whether the
/// listener cut it short as stalled to give its slot to a waiting client.
final class HandshakeProgress: Sendable {
    /// ``Deadline/now()`` of the last progress, as its bit pattern.
    private let last = Atomic<UInt64>(Deadline.now().bitPattern)
    /// Seconds it had been stalled when it was cut short (bit pattern; 0: not cut short).
    private let evicted = Atomic<UInt64>(0)

    func advanced() { last.store(Deadline.now().bitPattern, ordering: .relaxed) }
    var lastProgress: Double { Double(bitPattern: last.load(ordering: .relaxed)) }

    func evict(stalledFor seconds: Double) { evicted.store(max(seconds, .leastNonzeroMagnitude).bitPattern, ordering: .relaxed) }
    var isEvicted: Bool { evicted.load(ordering: .relaxed) != 0 }
    var evictedAfter: Double? { isEvicted ? Double(bitPattern: evicted.load(ordering: .relaxed)) : nil }

    /// In ``TLSConnection/handshakeStep()``: the handshake returns when it would wait, saying for
    /// what. Only the thread stepping the handshake touches these (the listener's lock orders one
    /// stepping thread after the next).
    nonisolated(unsafe) var stepping = false
    nonisolated(unsafe) var steppedWant: TLSConnection.HandshakeStep?
}

/// The source a listener's per-source cap counts a client under: an IPv4 address (an
/// IPv4-mapped IPv6 address is its IPv4 address), or an IPv6 address's leading `ipv6PrefixLength`
/// bits ("2001:db8:1:2::/64"), since one IPv6 host may use any address of its network.
package enum ListenerSource {
    package static func key(peer: String, ipv6PrefixLength: Int) -> String {
        key(client: TrustPeer.client(address: peer), peer: peer, ipv6PrefixLength: ipv6PrefixLength)
    }

    /// ``key(peer:ipv6PrefixLength:)`` for a client whose peer was read already (the listener
    /// reads it once per connection, for this and its handshake's rule).
    package static func key(client: TrustPeer, peer: String, ipv6PrefixLength: Int) -> String {
        let host = client.host ?? peer
        guard ipv6PrefixLength < 128, let bytes = IPAddress.bytes(host), bytes.count == 16 else { return host }
        let bits = max(0, ipv6PrefixLength)
        var masked = bytes
        for i in 0..<16 {
            let keep = min(8, max(0, bits - i * 8))
            masked[i] &= keep == 8 ? 0xff : UInt8(truncatingIfNeeded: 0xff << (8 - keep))
        }
        return "\(IPAddress.text(masked) ?? host)/\(bits)"
    }
}

/// How much of a ClientHello has arrived, from the first bytes a client sent (TLS records of
/// RFC 8446 §5.1 carrying a handshake message of §4: type 1, a 24-bit length). Only framing is
/// read, to know when to stop waiting; OpenSSL parses the message.
package enum ClientHelloArrival {
    /// The most a record may hold (2^14 plus the expansion TLS 1.2 allows) and the longest
    /// ClientHello OpenSSL takes: beyond them OpenSSL refuses the bytes at once.
    private static let maxRecord = 16384 + 2048
    private static let maxClientHello = 131_396

    /// The number of bytes that must have arrived for the ClientHello to be whole (every record
    /// that carries a part of it), at most `limit`; nil when `prefix` holds it whole, when
    /// `limit` bytes have arrived, or when the bytes are no ClientHello a wait would help (not a
    /// handshake record, a length OpenSSL refuses): then the handshake reads them and answers.
    package static func bytesNeeded(_ prefix: UnsafeRawBufferPointer, limit: Int) -> Int? {
        if prefix.count >= limit { return nil }
        var offset = 0          // where the current record starts
        var header: [UInt8] = []  // the handshake message's first 4 bytes
        var total: Int?         // its whole length, header included
        var gathered = 0        // its bytes in the records before this one
        while true {
            guard prefix.count >= offset + 5 else { return min(offset + 5, limit) }
            guard prefix[offset] == 0x16 else { return nil }
            let length = Int(prefix[offset + 3]) << 8 | Int(prefix[offset + 4])
            guard length > 0, length <= maxRecord else { return nil }
            let body = offset + 5, end = body + length
            var i = body
            while header.count < 4, i < min(end, prefix.count) { header.append(prefix[i]); i += 1 }
            if total == nil, header.count == 4 {
                guard header[0] == 1 else { return nil }
                let m = Int(header[1]) << 16 | Int(header[2]) << 8 | Int(header[3])
                guard m <= maxClientHello else { return nil }
                total = 4 + m
            }
            // OpenSSL reads a record whole before it reads what the record holds.
            if prefix.count < end { return min(end, limit) }
            gathered += length
            if let total, gathered >= total { return nil }
            offset = end
        }
    }
}
