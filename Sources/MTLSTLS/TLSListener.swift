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
/// Handshakes run concurrently: from the first ``accept(timeout:)`` on, the listener's threads
/// take turns at accepting (leader and followers): the thread that accepts a client hands the
/// accepting on to a waiting thread (or a new one) and handshakes that client itself, with no
/// hand-off in between; a thread that finished waits, up to ``maxIdleThreads`` of them, for its
/// next turn instead of exiting. One slow or stalled client never holds up the others (each is
/// bounded by the handshake timeout). ``accept(timeout:)``
/// returns handshaken clients, and throws for rejected ones, in the order they finish. At most
/// ``maxPending`` clients are handshaking or waiting to be accepted; beyond that the kernel's
/// backlog holds them.
///
/// A client takes a handshake slot and a thread only once it has sent its first byte: until
/// then the thread holding the turn at accepting watches it with the listening socket (one
/// `poll` over every such socket, at most ``maxWaitingForFirstByte`` of them, the oldest closed
/// first when more come), and closes it when ``TLSServerOptions/firstByteTimeout`` is over.
/// One source address has at most ``TLSServerOptions/maxHandshakesPerAddress`` handshakes under
/// way. So connections that never send a ClientHello cannot keep real clients waiting.
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
    /// Handshakes accepted, refused (by reason), resumed, and connections open.
    public let counters = ListenerCounters()
    /// The most clients handshaking or handshaken and not yet accepted at once.
    public static let maxPending = 256
    /// The most handshake threads kept waiting for the next client.
    public static let maxIdleThreads = 16
    /// The most accepted sockets waiting for their first byte; when another comes, the oldest
    /// that has sent nothing is closed.
    public static let maxWaitingForFirstByte = 4096

    /// Listens on `address` (nil: every IPv4 address; "127.0.0.1", "::1"...) and `port` (0 for
    /// an ephemeral port).
    public init(address: String? = nil, port: UInt16 = 0, options: TLSServerOptions) throws {
        identitySource = options.identitySource ?? IdentitySource(options.identity)
        // The first of the listener's contexts (one per identity, ListenerContexts).
        let context = try TLSContext.server(options, identitySource: identitySource)
        self.options = options
        (fileDescriptor, self.port) = try Socket.listen(address: address, port: port)
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

    /// Stops listening. Clients handshaken and not accepted are closed, handshakes under way are
    /// cut short, and the listener's threads have ended when this returns (so a program may exit,
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
    private let refused_ = Mutex<[MTLSError.Code: UInt64]>([:])

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

/// The state a listener shares with its threads (they hold this, not the listener, so the
/// listener's deinit runs when the application drops it).
final class ListenerCore: Sendable {
    private struct State {
        var ready: [Finished] = []
        var inFlight = 0
        var started = false
        var closed = false
        /// A thread holds the turn at accepting, or has been handed it: true from the first
        /// accept until that thread sees the listener closed (and closes the socket).
        var acceptorRunning = false
        /// Threads waiting on `workSignal` for their next turn.
        var idleThreads = 0
        /// Turns handed to a waiting thread (posted on `workSignal`) and not yet taken.
        var turnsHanded = 0
        /// The listener's threads (joinable): running ones, and those that ended on their own
        /// and are not joined yet (joined at the next thread start, or by close).
        var threads: [pthread_t] = []
        var ended: [pthread_t] = []
        /// Client sockets in a handshake. A thread removes its socket before it closes it, so
        /// every socket here is open while the lock is held: close shuts them down, cutting
        /// their handshakes short.
        var handshaking: Set<Int32> = []
        /// The thread that closes joins the others; a second close returns at once.
        var joined = false
        /// Accepted sockets that take no handshake slot yet: silent ones, watched by the thread
        /// holding the turn at accepting, and ready ones (their first byte came) waiting for a
        /// slot or for their address to be under its cap. The turn holder closes them when the
        /// listener closes.
        var waiting: [Int32: WaitingClient] = [:]
        /// Clients in a handshake (in `handshaking`), by source address.
        var handshakesBySource: [String: Int] = [:]
    }

    /// An accepted socket before its handshake.
    private struct WaitingClient {
        /// Its address as text ("127.0.0.1:40404"), and the source address alone that the
        /// per-address cap counts.
        let peer: String
        let source: String
        /// When it must have sent its first byte (``Deadline/now()``), if ever.
        let deadline: Double?
        /// Accepted in this order (the oldest silent one goes first when too many wait).
        let order: UInt64
        /// Its first byte came: it takes a slot as soon as one (and its address) allows.
        var ready = false
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
    private let contexts: ListenerContexts
    private let options: TLSServerOptions
    private let counters: ListenerCounters
    private let state = Mutex(State())
    /// Readable while finished handshakes are queued (one byte per queued result).
    private let wakeRead: Int32
    private let wakeWrite: Int32
    /// Readable when the thread holding the turn at accepting should look again: a handshake
    /// ended (a slot, or an address under its cap, may be free) or the listener closed.
    private let turnWakeRead: Int32
    private let turnWakeWrite: Int32
    private let accepted = Atomic<UInt64>(0)
    /// Posted once for each turn at accepting handed to a waiting thread, and once for each
    /// waiting thread when the listener closes. Allocated once, freed in deinit (no thread holds the
    /// core then).
    nonisolated(unsafe) private let workSignal: UnsafeMutablePointer<sem_t>

    init(listenFD: Int32, contexts: ListenerContexts, options: TLSServerOptions, counters: ListenerCounters) throws {
        self.counters = counters
        self.listenFD = listenFD
        self.contexts = contexts
        self.options = options
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw MTLSError(.io, "pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            Socket.setNonBlocking(fd, true)
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        guard pipe(&fds) == 0 else {
            Glibc.close(wakeRead)
            Glibc.close(wakeWrite)
            throw MTLSError(.io, "pipe: \(String(cString: strerror(errno)))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            Socket.setNonBlocking(fd, true)
        }
        turnWakeRead = fds[0]
        turnWakeWrite = fds[1]
        workSignal = .allocate(capacity: 1)
        sem_init(workSignal, 0, 0)
    }

    deinit {
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
        Glibc.close(turnWakeRead)
        Glibc.close(turnWakeWrite)
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
            for fd in st.handshaking { _ = shutdown(fd, Int32(SHUT_RDWR)) } // open: see `handshaking`
            return (st.acceptorRunning, d, idle)
        }
        for d in dropped { d.connection = nil }
        for _ in 0..<idle { sem_post(workSignal) } // waiting threads wake, find no turn, exit
        // The thread holding the turn closes the socket when it stops (it may be polling it now);
        // shutdown wakes it at once and refuses new clients.
        if wasRunning { _ = shutdown(listenFD, Int32(SHUT_RDWR)) } else { closeListenFD() }
        var b: UInt8 = 0
        _ = write(wakeWrite, &b, 1) // wakes accepting threads so they see `closed`
        _ = write(turnWakeWrite, &b, 1) // and the turn holder, whatever it polls
        // Every thread ends promptly now (no turn, no client: their sockets are shut down); wait
        // for them, so that none is still inside OpenSSL when the program goes on (or exits).
        let joiner: Bool = state.withLock { st in
            guard !st.joined else { return false }
            st.joined = true
            return true
        }
        guard joiner else { return }
        while true {
            let threads: [pthread_t] = state.withLock { st in
                let t = st.threads + st.ended
                st.threads = []
                st.ended = []
                return t
            }
            if threads.isEmpty { break }
            for t in threads where !(pthread_equal(t, pthread_self()) != 0) { pthread_join(t, nil) }
        }
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
        if !spawnThread() {
            state.withLock { $0.started = false; $0.acceptorRunning = false }
            throw MTLSError(.io, "cannot start the listener thread")
        }
    }

    /// A listener thread. It starts holding the turn at accepting; when it accepts a client it
    /// hands the turn on (to a waiting thread, else a new one), handshakes that client, then waits
    /// for its next turn while fewer than ``TLSListener/maxIdleThreads`` threads wait. The thread
    /// holding the turn when the listener closes closes the socket; the others just end.
    private func run() {
        while true {
            // The client comes with its slot taken (inFlight, handshaking, its address's count).
            guard let (fd, peer, source) = acceptNext() else {
                state.withLock { $0.acceptorRunning = false }
                closeListenFD()
                return
            }
            let handOn: Bool = state.withLock { st in
                guard !st.closed, st.idleThreads > 0 else { return false }
                st.idleThreads -= 1
                st.turnsHanded += 1
                return true
            }
            // Closed meanwhile: the handshake ends at once (close shut the socket down).
            if handOn {
                sem_post(workSignal)
            } else if !spawnThread() {
                handshake(fd: fd, peer: peer, source: source) // no thread to spare: handshake here, keep the turn
                continue
            }
            handshake(fd: fd, peer: peer, source: source)
            guard waitForTurn() else {
                endOnItsOwn()
                return
            }
        }
    }

    /// Starts a listener thread holding the turn at accepting; false when none could be started
    /// or the listener closed. Joins the threads that ended on their own since the last start.
    private func spawnThread() -> Bool {
        let (started, ended): (Bool, [pthread_t]) = state.withLock { st in
            let ended = st.ended
            st.ended = []
            // Started under the lock, so the thread is registered before it can look itself up.
            guard !st.closed, let t = BackgroundThread.startJoinable(name: "mtls-listener", { [self] in run() }) else { return (false, ended) }
            st.threads.append(t)
            return (true, ended)
        }
        for t in ended { pthread_join(t, nil) } // they have left the lock for good: at most a moment
        return started
    }

    /// A thread that ends while the listener is open moves itself to `ended`, to be joined.
    /// (Once the listener closed, the closing thread has taken it from `threads` and joins it.)
    private func endOnItsOwn() {
        state.withLock { st in
            let me = pthread_self()
            guard let i = st.threads.firstIndex(where: { pthread_equal($0, me) != 0 }) else { return }
            st.threads.remove(at: i)
            st.ended.append(me)
        }
    }

    /// Waits for a turn at accepting; false when this thread should end instead (enough threads
    /// wait already, or the listener closed and the turn, if any, was handed to another thread).
    private func waitForTurn() -> Bool {
        let waits: Bool = state.withLock { st in
            guard !st.closed, st.idleThreads < TLSListener.maxIdleThreads else { return false }
            st.idleThreads += 1
            return true
        }
        guard waits else { return false }
        while sem_wait(workSignal) != 0 && errno == EINTR {}
        // Each post is either a turn (counted in turnsHanded) or a closing listener's wake-up;
        // which thread takes which does not matter, only that each turn is taken once.
        return state.withLock { st in
            guard st.turnsHanded > 0 else { return false }
            st.turnsHanded -= 1
            return true
        }
    }

    /// The accepting turn: the next client that has sent its first byte and may take a slot
    /// (fewer than ``TLSListener/maxPending`` in flight, its address under its cap), with the
    /// slot taken; nil when the listener closed. Meanwhile accepts new clients into `waiting`,
    /// watches the silent ones (one poll over all of them, the listening socket and the wake
    /// pipe) and closes those whose first-byte time is over.
    private func acceptNext() -> (Int32, String, String)? {
        let perSource = options.maxHandshakesPerAddress ?? 0  // 0: no limit
        while true {
            let now = Deadline.now()
            var expired: [Int32] = []
            var fds: [pollfd] = []
            let picked: (Int32, String, String)?? = state.withLock { st in
                if st.closed {
                    // The turn holder owns the waiting sockets: close them on the way out.
                    expired = Array(st.waiting.keys)
                    st.waiting.removeAll()
                    return .some(nil)
                }
                for (fd, w) in st.waiting where !w.ready && (w.deadline.map { now >= $0 } ?? false) {
                    expired.append(fd)
                }
                for fd in expired { st.waiting[fd] = nil }
                if st.inFlight + st.ready.count < TLSListener.maxPending,
                   let (fd, w) = st.waiting.filter({ $0.value.ready && (perSource <= 0 || st.handshakesBySource[$0.value.source, default: 0] < perSource) })
                    .min(by: { $0.value.order < $1.value.order }) {
                    st.waiting[fd] = nil
                    st.inFlight += 1
                    st.handshaking.insert(fd)
                    st.handshakesBySource[w.source, default: 0] += 1
                    return .some((fd, w.peer, w.source))
                }
                fds.append(pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0))
                fds.append(pollfd(fd: turnWakeRead, events: Int16(POLLIN), revents: 0))
                for (fd, w) in st.waiting where !w.ready { fds.append(pollfd(fd: fd, events: Int16(POLLIN), revents: 0)) }
                return nil
            }
            for fd in expired { Glibc.close(fd) }
            if let picked { return picked }
            // Wake up for the nearest first-byte deadline, and at least every 250 ms (a slot
            // freed by the application accepting is seen then).
            let nearest: Double? = state.withLock { st in st.waiting.values.compactMap { $0.ready ? nil : $0.deadline }.min() }
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
            var closedSilently: [Int32] = []
            var nowReady: [Int32] = []
            for p in fds.dropFirst(2) where p.revents != 0 {
                // Data, or the end: peek, so the handshake still reads the ClientHello whole.
                var byte: UInt8 = 0
                let r = recv(p.fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
                if r > 0 { nowReady.append(p.fd) } else if r == 0 || (errno != EAGAIN && errno != EINTR) { closedSilently.append(p.fd) }
            }
            state.withLock { st in
                for fd in nowReady { st.waiting[fd]?.ready = true }
                for fd in closedSilently { st.waiting[fd] = nil }
            }
            for fd in closedSilently { Glibc.close(fd) } // connected and left without a word
            if fds[0].revents != 0 { acceptWaiting() }
        }
    }

    /// Accepts every client the kernel holds into `waiting`. When too many wait (or no file
    /// descriptor is left), the oldest silent one is closed to make room.
    private func acceptWaiting() {
        while true {
            if state.withLock({ $0.waiting.count >= TLSListener.maxWaitingForFirstByte }) { evictOldestSilent() }
            let next: (Int32, String)?
            do {
                next = try Socket.acceptNow(listenFD)
            } catch {
                if state.withLock({ $0.closed }) { return }
                // EMFILE and the like: a silent socket gives its descriptor to a newcomer; with
                // none to close, let handshakes finish.
                if !evictOldestSilent() { usleep(10_000) }
                return
            }
            guard let (fd, peer) = next else { return }
            Socket.setNonBlocking(fd, true)
            let client = WaitingClient(peer: peer, source: TrustPeer.client(address: peer).host ?? peer,
                                       deadline: firstByteLimit.map { Deadline.now() + $0 },
                                       order: accepted.add(1, ordering: .relaxed).newValue)
            let kept: Bool = state.withLock { st in
                guard !st.closed else { return false }
                st.waiting[fd] = client
                return true
            }
            if !kept { Glibc.close(fd); return }
        }
    }

    /// Seconds a client has for its first byte: the first-byte timeout, and never more than the
    /// handshake timeout (a client cannot take longer to begin its handshake than to finish it).
    private var firstByteLimit: Double? {
        [options.firstByteTimeout, options.handshakeTimeout].compactMap { $0.flatMap { $0 > 0 ? $0 : nil } }.min()
    }

    /// Closes the silent socket accepted first; false when there is none.
    @discardableResult
    private func evictOldestSilent() -> Bool {
        let fd: Int32? = state.withLock { st in
            guard let (fd, _) = st.waiting.filter({ !$0.value.ready }).min(by: { $0.value.order < $1.value.order }) else { return nil }
            st.waiting[fd] = nil
            return fd
        }
        if let fd { Glibc.close(fd) }
        return fd != nil
    }

    private func handshake(fd: Int32, peer: String, source: String) {
        var conn: TLSConnection?
        var failure: (any Error)?
        do {
            let c = try TLSConnection(serverFD: fd, peer: peer, context: contexts.current(), options: options)
            conn = c
            try c.handshake()
        } catch {
            failure = error
        }
        // Out of `handshaking` before the socket can be closed (below, or by the connection).
        let someoneWaits: Bool = state.withLock { st in
            _ = st.handshaking.remove(fd)
            let left = st.handshakesBySource[source, default: 1] - 1
            st.handshakesBySource[source] = left > 0 ? left : nil
            return st.waiting.values.contains { $0.ready }
        }
        // A client that sent its first byte may be waiting for this slot: wake the turn holder.
        // (One that becomes ready later is seen by the turn holder itself, after this change.)
        if someoneWaits {
            var wake: UInt8 = 0
            _ = write(turnWakeWrite, &wake, 1)
        }
        let result: Finished
        switch (conn, failure) {
        case (let c?, nil):
            counters.handshakeSucceeded(resumed: c.isResumed)
            c.listenerCounters = counters
            result = Finished(c, nil)
        case (let c?, let e as MTLSError):
            counters.handshakeRefused(e.code)
            c.closeAfterRejecting()
            result = Finished(nil, MTLSError(e.code, "client \(peer): \(e.message)"))
        case (let c, let e):
            counters.handshakeRefused((e as? MTLSError)?.code ?? .io)
            if c == nil { Glibc.close(fd) } // else the connection closes it as it goes
            conn = nil
            result = Finished(nil, e ?? MTLSError(.io, "client handshake failed"))
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
