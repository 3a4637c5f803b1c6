internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Forwards many (TLS connection, plaintext socket) pairs on a small fixed set of threads, each
/// an epoll loop: no thread per connection. Every pair runs the state machine of
/// ``TLSConnection/forward(to:idleTimeout:counters:requestRewriter:)`` (half-close passed both
/// ways, truncation marked, idle timeout, the optional ``HTTPRequestRewriter``, byte counters).
///
/// An idle pair holds no buffer: each thread reads into one 16 KiB scratch buffer and a pair
/// keeps only the bytes a short write left pending.
///
/// When a pair ends, the forwarder closes both its sockets (the connection with
/// ``TLSConnection/close()``, the plaintext socket with close(2)) and then calls its completion
/// with the ``ForwardResult``, on the forwarder's thread: the completion must return quickly and
/// must not call ``close(drainTimeout:)``'s waiting form (from a completion, `close` only asks
/// the threads to stop and returns).
public final class TLSForwarder: @unchecked Sendable {
    /// One thread unless told otherwise: a thread moves several GB/s of TLS on loopback.
    public static let defaultThreads = 1

    private let loops: [Loop]
    private let shared: Shared
    private let next = Atomic<Int>(0)

    final class Shared: Sendable {
        let active = Atomic<Int>(0)
    }

    /// Starts `threads` (at least 1) forwarding threads named `name` (at most 15 characters, for
    /// `top -H` and /proc/PID/task/*/comm). Throws when a thread, an epoll instance or an
    /// eventfd cannot be made.
    public init(threads: Int = TLSForwarder.defaultThreads, name: String = "mtls-forward") throws {
        let shared = Shared()
        var loops: [Loop] = []
        for _ in 0..<max(1, threads) {
            do {
                loops.append(try Loop(shared: shared, name: name))
            } catch {
                for l in loops { l.stop(cutAt: 0, join: true) }
                throw error
            }
        }
        self.loops = loops
        self.shared = shared
    }

    deinit { close() }

    /// Pairs being forwarded now (added and not yet completed).
    public var active: Int { shared.active.load(ordering: .relaxed) }

    /// Hands `conn` (its handshake done; a handshake still to do is run here, blocking, or for a
    /// non-blocking connection on the forwarding thread, without blocking) and the
    /// plaintext socket `plain` to a forwarding thread. From here on the forwarder owns both: it
    /// closes them when the pair ends and then calls `completion` on its thread.
    ///
    /// - `prefix`: bytes written to `plain` before any forwarded byte (a PROXY protocol v2
    ///   header); not counted in the result's byte counts.
    /// - `connectTimeout`: non-nil when `plain` is a socket whose non-blocking connect is still
    ///   under way (``TunnelAddress/startConnect(timeout:)``): the pair waits for it to become writable,
    ///   reads SO_ERROR, and ends with a `.connect` error (or `.timeout` after this many seconds)
    ///   if it did not connect.
    ///
    /// After ``close(drainTimeout:)`` the pair ends at once, on the calling thread, with a
    /// `.closed` error.
    public func add(_ conn: TLSConnection, plain: Int32, idleTimeout: Double? = nil, counters: ForwardCounters? = nil,
                    requestRewriter: HTTPRequestRewriter? = nil, prefix: [UInt8] = [], connectTimeout: Double? = nil,
                    completion: @escaping @Sendable (ForwardResult) -> Void) {
        shared.active.add(1, ordering: .relaxed)
        var failed: MTLSError?
        // A non-blocking connection's handshake is finished by the pair's first steps.
        if !conn.isNonBlocking {
            do { try conn.handshake() } catch {
                failed = error as? MTLSError ?? MTLSError(.io, "\(error)")
            }
        }
        let pair = ForwardPair(conn: conn, plain: plain, idleTimeout: idleTimeout, counters: counters, requestRewriter: requestRewriter,
                               prefix: prefix, connectDeadline: connectTimeout.map { Deadline.now() + max($0, 0) })
        let entry = Entry(pair, completion)
        if let failed {
            pair.fail(failed)
        } else {
            let i = next.add(1, ordering: .relaxed).newValue % loops.count
            if loops[i].enqueue(entry) { return }
            pair.fail(MTLSError(.closed, "the forwarder is closed"))
        }
        entry.finish(shared)
    }

    /// Stops taking pairs, lets the active ones run for up to `drainTimeout` seconds, then ends
    /// every pair still running with a `.closed` error (completions called) and waits for the
    /// threads to end. Idempotent. Called from a completion (a forwarder thread), it only asks the
    /// threads to stop and returns without waiting.
    public func close(drainTimeout: Double = 0) {
        let cutAt = Deadline.now() + max(drainTimeout, 0)
        let me = pthread_self()
        let onOwnThread = loops.contains { $0.runs(on: me) }
        for l in loops { l.stop(cutAt: cutAt, join: false) }
        if !onOwnThread { for l in loops { l.stop(cutAt: cutAt, join: true) } }
    }

    /// A pair and what to call when it ends; its registration in the loop's epoll set. Handed from
    /// the adding thread to one loop through the loop's inbox lock; used by that loop only after.
    final class Entry: @unchecked Sendable {
        let pair: ForwardPair
        let completion: @Sendable (ForwardResult) -> Void
        var tlsEvents: UInt32 = 0, plainEvents: UInt32 = 0
        var id: UInt64 = 0

        init(_ pair: ForwardPair, _ completion: @escaping @Sendable (ForwardResult) -> Void) {
            self.pair = pair
            self.completion = completion
        }

        /// Closes both sockets and reports the result.
        func finish(_ shared: Shared) {
            pair.conn.close()
            Glibc.close(pair.plain)
            shared.active.subtract(1, ordering: .relaxed)
            completion(pair.result)
        }
    }

    /// One forwarding thread: its epoll set, the eventfd that wakes it, the pairs it runs.
    final class Loop: @unchecked Sendable {
        private let ep: Int32
        private let wake: Int32
        private let shared: Shared
        /// Pairs handed over and not yet taken by the thread; whether the forwarder is closing
        /// and when it cuts the pairs still running.
        private let inbox = Locked<(entries: [Entry], cutAt: Double?)>(([], nil))
        private let thread = Locked<pthread_t?>(nil)
        private var pairs: [UInt64: Entry] = [:]
        private var nextID: UInt64 = 1

        init(shared: Shared, name: String) throws {
            self.shared = shared
            ep = mtls_epoll_create()
            guard ep >= 0 else { throw MTLSError(.io, "epoll_create1: \(String(cString: strerror(errno)))") }
            wake = mtls_eventfd()
            guard wake >= 0 else {
                let e = errno
                Glibc.close(ep)
                throw MTLSError(.io, "eventfd: \(String(cString: strerror(e)))")
            }
            _ = mtls_epoll_ctl(ep, 0, wake, UInt32(POLLIN), 0)
            guard let t = BackgroundThread.startJoinable(name: name, { [self] in run() }) else {
                Glibc.close(ep)
                Glibc.close(wake)
                throw MTLSError(.io, "cannot start a forwarding thread")
            }
            thread.withLock { $0 = t }
        }

        func runs(on t: pthread_t) -> Bool { thread.withLock { $0.map { pthread_equal($0, t) != 0 } ?? false } }

        /// False when the loop is closing.
        func enqueue(_ e: Entry) -> Bool {
            let taken = inbox.withLock { box -> Bool in
                guard box.cutAt == nil else { return false }
                box.entries.append(e)
                return true
            }
            if taken { signal() }
            return taken
        }

        private func signal() {
            var one: UInt64 = 1
            _ = Glibc.write(wake, &one, 8)
        }

        func stop(cutAt: Double, join: Bool) {
            inbox.withLock { box in box.cutAt = min(box.cutAt ?? cutAt, cutAt) }
            signal()
            guard join, let t = thread.withLock({ t -> pthread_t? in defer { t = nil }; return t }) else { return }
            pthread_join(t, nil)
            Glibc.close(ep)
            Glibc.close(wake)
        }

        private func run() {
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: TLSConnection.forwardBufferSize, alignment: 16)
            defer { scratch.deallocate() }
            var events = [UInt32](repeating: 0, count: 64), data = [UInt64](repeating: 0, count: 64)
            // No pair's deadline comes before this (deadlines only move later as bytes move).
            var nextSweep = Double.infinity
            while true {
                let (entries, cutAt) = inbox.withLock { box in
                    defer { box.entries.removeAll() }
                    return (box.entries, box.cutAt)
                }
                for e in entries {
                    e.id = nextID
                    nextID += 1
                    pairs[e.id] = e
                    service(e, scratch, &nextSweep)
                }
                let now = Deadline.now()
                if let cutAt {
                    if pairs.isEmpty && inbox.withLock({ $0.entries.isEmpty }) { return }
                    if now >= cutAt {
                        for e in Array(pairs.values) {
                            e.pair.fail(MTLSError(.closed, "the forwarder closed with the pair still running"))
                            end(e)
                        }
                        // Pairs added between the last take and the cut end the same way.
                        let late = inbox.withLock { box in defer { box.entries.removeAll() }; return box.entries }
                        for e in late {
                            e.pair.fail(MTLSError(.closed, "the forwarder is closed"))
                            e.finish(shared)
                        }
                        return
                    }
                }
                if now >= nextSweep {
                    nextSweep = .infinity
                    for e in Array(pairs.values) {
                        if e.pair.expired(now: now) { end(e) } else if let d = e.pair.deadline { nextSweep = min(nextSweep, d) }
                    }
                }
                let until = min(nextSweep, cutAt ?? .infinity)
                let timeout: Int32 = until == .infinity ? -1 : Int32(min(max((until - Deadline.now()) * 1000 + 1, 0), 3_600_000))
                let n = events.withUnsafeMutableBufferPointer { ev in
                    data.withUnsafeMutableBufferPointer { mtls_epoll_wait(ep, ev.baseAddress, $0.baseAddress, 64, timeout) }
                }
                if n < 0 {
                    if errno == EINTR { continue }
                    // Cannot happen with a valid epoll set; end everything rather than spin.
                    let e = MTLSError(.io, "epoll_wait: \(String(cString: strerror(errno)))")
                    for p in Array(pairs.values) { p.pair.fail(e); end(p) }
                    inbox.withLock { box in box.cutAt = box.cutAt ?? 0 }
                    continue
                }
                for i in 0..<Int(n) {
                    let key = data[i]
                    if key == 0 {
                        var v: UInt64 = 0
                        _ = Glibc.read(wake, &v, 8)
                        continue
                    }
                    if let e = pairs[key >> 1] { service(e, scratch, &nextSweep) }
                }
            }
        }

        /// Steps the pair; ends it, or waits for what it asks.
        private func service(_ e: Entry, _ scratch: UnsafeMutableRawBufferPointer, _ nextSweep: inout Double) {
            switch e.pair.step(scratch: scratch) {
            case .done:
                end(e)
            case .wait(let tls, let plain):
                guard let t = watch(e.pair.conn.fileDescriptor, key: e.id << 1, had: e.tlsEvents, want: UInt32(UInt16(bitPattern: tls))) else {
                    return fail(e, "the TLS socket")
                }
                e.tlsEvents = t
                guard let p = watch(e.pair.plain, key: e.id << 1 | 1, had: e.plainEvents, want: UInt32(UInt16(bitPattern: plain))) else {
                    return fail(e, "the plaintext socket")
                }
                e.plainEvents = p
                if let d = e.pair.deadline { nextSweep = min(nextSweep, d) }
            }
        }

        /// Ends a pair whose socket epoll refused (a file descriptor that is no socket, such as a
        /// regular file a C caller handed over): it could never be woken.
        private func fail(_ e: Entry, _ what: String) {
            e.pair.fail(MTLSError(.invalidArgument, "\(what) cannot be waited on: \(String(cString: strerror(errno)))"))
            end(e)
        }

        /// Adds, changes or removes `fd` in the epoll set (level-triggered). A socket waited on
        /// for nothing is removed, so its hang-up does not wake the loop for ever. nil when epoll
        /// refuses the descriptor.
        private func watch(_ fd: Int32, key: UInt64, had: UInt32, want: UInt32) -> UInt32? {
            if want == had { return had }
            let op: Int32 = had == 0 ? 0 : want == 0 ? 2 : 1
            if mtls_epoll_ctl(ep, op, fd, want, key) != 0 { return want == 0 ? 0 : nil }
            return want
        }

        private func end(_ e: Entry) {
            if e.tlsEvents != 0 { _ = mtls_epoll_ctl(ep, 2, e.pair.conn.fileDescriptor, 0, 0) }
            if e.plainEvents != 0 { _ = mtls_epoll_ctl(ep, 2, e.pair.plain, 0, 0) }
            e.tlsEvents = 0
            e.plainEvents = 0
            pairs.removeValue(forKey: e.id)
            e.finish(shared)
        }
    }
}
