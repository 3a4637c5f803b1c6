package import COpenSSL
import Synchronization

/// The library's lock: `Synchronization.Mutex`, made visible to ThreadSanitizer. On Linux, Mutex
/// locks with futex system calls that TSan does not intercept, so TSan sees no ordering between
/// two threads that take the same Mutex in turn: every access made under it is reported as a
/// race (Tests/tsan/mutex_false_positive.swift shows it with no libmtls at all), and a hand-off
/// through it (a pair queued for the forwarder's thread, a finished handshake) looks unordered
/// too. `withLock` tells TSan "acquired" after the lock is taken and "released" before it is
/// given back, on the Mutex's own address (it lives in place, in the object holding it), so TSan
/// orders what Mutex orders and still reports what it does not (an access made without the lock).
/// Only in a TSan build (`-DMTLS_TSAN`); elsewhere `Locked` is Mutex (below). Same layout and API
/// as Mutex: use it in its place.
#if MTLS_TSAN
package struct Locked<Value: ~Copyable>: ~Copyable, @unchecked Sendable {
    @usableFromInline let mutex: Mutex<Value>

    @inlinable
    package init(_ initialValue: consuming sending Value) { mutex = Mutex(initialValue) }

    /// Runs `body` with the lock held, as `Mutex.withLock` does.
    @inlinable
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        // The Mutex's address, stable: a Mutex is never moved (it holds its lock word in place).
        let token = withUnsafePointer(to: mutex) { UnsafeMutableRawPointer(mutating: $0) }
        return try mutex.withLock { (value: inout sending Value) throws(E) -> sending Result in
            mtls_tsan_acquire(token)
            defer { mtls_tsan_release(token) }
            return try body(&value)
        }
    }
}
#else
/// Outside a TSan build (`make tsan` and `make test-tsan` build with `-DMTLS_TSAN`), Mutex
/// itself: nothing to tell TSan, and no wrapper between a caller and Mutex's inlined `withLock`
/// (issue 40: the wrapper was not inlined across modules, and its unspecialized generic cost
/// about 7,500 instructions per client connection, metadata lookups included).
package typealias Locked<Value: ~Copyable> = Mutex<Value>
#endif
