internal import COpenSSL
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// async/await entry points. The blocking work runs on a thread of the library's own
// (BackgroundThread, named `mtls-async`), never on Swift's cooperative pool, whose few threads a
// blocking poll would hold. A cancelled task does not wait for the peer:
// - an operation on a connection (handshake, read, write) has its socket shut down
//   (`shutdown(2)`, the descriptor stays open), which wakes the blocked call at once; the task
//   then throws `CancellationError`, and the connection is abandoned: every later call throws
//   ``MTLSError/Code/closed`` and ``TLSConnection/close()`` frees it as usual;
// - a connect returns at once with `CancellationError`; the TCP connect (bounded by the connect
//   time limit) finishes on its own thread, which closes what it made;
// - an accept throws `CancellationError` at once; its thread stops waiting within a quarter of a
//   second (a client whose handshake finishes in that moment is closed).

/// How many async operations are running on library threads right now (tests wait on it to
/// know that a call is under way before they cancel it).
package enum AsyncOperations {
    static let running = Atomic<Int>(0)
    /// The number running now.
    package static var inFlight: Int { running.load(ordering: .acquiring) }
}

/// A value handed between the awaiting task and the library thread that works on it. The task
/// waits for the thread, so the value is never used by both at once.
package struct HandedOver<Value>: @unchecked Sendable {
    package let value: Value
    package init(value: Value) { self.value = value }
}

/// One blocking call made for an async caller on a library thread, and its cancellation.
///
/// What the thread did happens before the caller goes on: the caller is answered through a
/// `CheckedContinuation`, an ordering ThreadSanitizer does not see on Linux (it reported a
/// connection abandoned on the thread, then used by the caller, as a race). So every answer
/// is announced to TSan (`answer`, a release on this call) and the caller acquires it when its
/// wait ends (`run`); outside a TSan build both do nothing (COpenSSL/shim.h).
package final class LibraryThreadCall<Value>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<HandedOver<Value>, any Error>?
        var finished = false
        var cancelled = false
        /// Whether cancelling shut the socket down (the operation was then cut short).
        var interrupted = false
    }
    private let state = Locked(State())
    /// The socket shut down on cancellation; nil: the caller is answered at once instead and the
    /// thread's result is given to `discard`.
    private let interruptFD: Int32?
    private let discard: (@Sendable (HandedOver<Value>) -> Void)?

    private init(interruptFD: Int32?, discard: (@Sendable (HandedOver<Value>) -> Void)?) {
        self.interruptFD = interruptFD
        self.discard = discard
    }

    /// Whether the caller's task was cancelled (read by a body that waits in slices).
    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Runs `body` on a library thread. With `interruptFD`, cancelling shuts that socket down and
    /// the caller waits for `body` to return (then `abandon` runs on the thread and the caller
    /// gets `CancellationError`); without, the caller gets `CancellationError` at once and a
    /// result `body` still makes is given to `discard`.
    package static func run(interrupting interruptFD: Int32? = nil,
                    abandon: (@Sendable () -> Void)? = nil,
                    discard: (@Sendable (HandedOver<Value>) -> Void)? = nil,
                    _ body: @escaping @Sendable (LibraryThreadCall<Value>) throws -> HandedOver<Value>) async throws -> Value {
        try Task.checkCancellation()
        let call = LibraryThreadCall(interruptFD: interruptFD, discard: discard)
        defer { mtls_tsan_acquire(call.token) } // what the answer's thread did happened before this
        let result = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HandedOver<Value>, any Error>) in
                let (startNow, interrupted) = call.state.withLock { st -> (Bool, Bool) in
                    if st.cancelled { st.finished = true; return (false, st.interrupted) }
                    st.continuation = continuation
                    return (true, false)
                }
                guard startNow else {
                    // Cancelled before the thread started; a socket shut down already is abandoned.
                    if interrupted { abandon?() }
                    call.answer(continuation, .failure(CancellationError()))
                    return
                }
                AsyncOperations.running.add(1, ordering: .releasing)
                let started = BackgroundThread.start(name: "mtls-async") {
                    let outcome = Result { try body(call) }
                    AsyncOperations.running.subtract(1, ordering: .releasing)
                    call.finish(outcome, abandon: abandon)
                }
                if !started {
                    AsyncOperations.running.subtract(1, ordering: .releasing)
                    let taken = call.state.withLock { st in defer { st.continuation = nil; st.finished = true }; return st.continuation }
                    if let taken { call.answer(taken, .failure(MTLSError(.noMemory, "cannot start a thread for the operation"))) }
                }
            }
        } onCancel: {
            call.cancel()
        }
        return result.value
    }

    private func cancel() {
        let answerNow: CheckedContinuation<HandedOver<Value>, any Error>? = state.withLock { st in
            guard !st.cancelled else { return nil }
            st.cancelled = true
            guard !st.finished else { return nil }
            if let fd = interruptFD {
                // The operation still runs, so its connection (and this descriptor) is open.
                st.interrupted = true
                Glibc.shutdown(fd, Int32(SHUT_RDWR))
                return nil
            }
            defer { st.continuation = nil }
            return st.continuation
        }
        if let answerNow { answer(answerNow, .failure(CancellationError())) }
    }

    /// This call's address: what the answering thread releases and the caller acquires.
    private var token: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// Resumes the caller, after telling ThreadSanitizer that what this thread did comes first.
    private func answer(_ continuation: CheckedContinuation<HandedOver<Value>, any Error>, _ outcome: Result<HandedOver<Value>, any Error>) {
        mtls_tsan_release(token)
        continuation.resume(with: outcome)
    }

    private func finish(_ outcome: Result<HandedOver<Value>, any Error>, abandon: (@Sendable () -> Void)?) {
        let (continuation, interrupted) = state.withLock { st in
            st.finished = true
            defer { st.continuation = nil }
            return (st.continuation, st.interrupted)
        }
        if interrupted { abandon?() }
        guard let continuation else {
            // The caller was answered already: what was made is nobody's.
            if case .success(let value) = outcome { discard?(value) }
            return
        }
        answer(continuation, interrupted ? .failure(CancellationError()) : outcome)
    }
}

extension TLSConnection {
    /// Connects and handshakes as ``connect(host:port:options:)-877mc`` does, without blocking a
    /// thread of Swift's cooperative pool: the work runs on a library thread. Cancelling the
    /// task ends the wait at once with `CancellationError` (a TCP connect under way finishes on
    /// its own, within the connect time limit, and is closed; a handshake under way is cut
    /// short). The other errors are ``connect(host:port:options:)-877mc``'s, with ``MTLSError/side``
    /// and ``MTLSError/connectionFailure``.
    public static func connect(host: String, port: UInt16, options: TLSClientOptions = TLSClientOptions()) async throws -> TLSConnection {
        let opened = try await LibraryThreadCall<TLSConnection>.run(discard: { $0.value.close() }) { _ in
            HandedOver(value: try open(host: host, port: port, options: options))
        }
        if options.nonBlocking { return opened }
        do {
            try await opened.handshake()
        } catch {
            opened.close()
            throw error
        }
        return opened
    }

    /// Runs the handshake as ``handshake()-2mgoe`` does, on a library thread. Cancelling the task cuts
    /// it short: `CancellationError`, and the connection is left unusable (later calls throw
    /// ``MTLSError/Code/closed``; ``close()`` it). Not for connections in non-blocking mode,
    /// which never wait.
    public func handshake() async throws {
        try throwIfAbandoned()
        if isHandshakeComplete { return }
        try await onLibraryThread { try $0.handshake() }
    }

    /// Reads up to `maxLength` bytes as ``read(maxLength:timeout:)`` does, on a library thread,
    /// within `timeLimit` (nil: the options' ``TLSClientOptions/ioTimeLimit``). Empty when the
    /// peer closed the connection with close_notify. Cancelling the task ends the read at once:
    /// `CancellationError`, and the connection is left unusable (later calls throw
    /// ``MTLSError/Code/closed``; ``close()`` it).
    public func read(maxLength: Int = 16384, timeLimit: TLSTimeLimit? = nil) async throws -> [UInt8] {
        try await onLibraryThread { conn in
            if let timeLimit { return try conn.read(maxLength: maxLength, timeLimit: timeLimit) }
            return try conn.read(maxLength: maxLength)
        }
    }

    /// Writes all of `bytes` as ``write(_:)-1rbio`` does in blocking mode, on a library
    /// thread. Cancelling the task ends the write at once: `CancellationError` (part of the bytes
    /// may have been sent), and the connection is left unusable.
    @discardableResult
    public func write(_ bytes: [UInt8]) async throws -> Int {
        try await onLibraryThread { try $0.write(bytes) }
    }

    /// Runs `operation` on this connection on a library thread; cancellation shuts the socket
    /// down and abandons the connection.
    private func onLibraryThread<T>(_ operation: @escaping (TLSConnection) throws -> T) async throws -> T {
        if nonBlockingMode {
            throw MTLSError(.invalidArgument, "the async operations are for blocking connections; this one is in non-blocking mode")
        }
        try throwIfAbandoned()
        let me = HandedOver(value: self)
        let work = HandedOver(value: operation)
        return try await LibraryThreadCall<T>.run(interrupting: fileDescriptor, abandon: { me.value.abandon() }) { _ in
            HandedOver(value: try work.value(me.value))
        }
    }
}

extension TLSListener {
    /// Waits for a client as ``accept(timeout:)`` does, on a library thread, at most `timeLimit`.
    /// Cancelling the task ends the wait at once with `CancellationError`; the thread stops
    /// waiting within a quarter of a second (a client whose handshake finishes in that moment is
    /// closed, as if the server had gone away).
    public func accept(timeLimit: TLSTimeLimit = .forever) async throws -> TLSConnection {
        let me = HandedOver(value: self)
        return try await LibraryThreadCall<TLSConnection>.run(discard: { $0.value.close() }) { call in
            let deadline = Deadline(seconds: timeLimit.seconds)
            while true {
                if call.isCancelled { throw CancellationError() }
                let slice = min(deadline.remaining ?? 0.25, 0.25)
                do {
                    return HandedOver(value: try me.value.accept(timeout: max(slice, 0.001)))
                } catch let e as MTLSError where e.code == .timeout && deadline.remaining.map({ $0 > 0 }) ?? true {
                    continue // a slice ended, not the caller's limit
                }
            }
        }
    }
}
