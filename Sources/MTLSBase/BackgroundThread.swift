package import COpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// The library's threads, made one way: 512 KiB stack, named by their job for `top -H` and
/// /proc/<pid>/task/*/comm (at most 15 characters: `mtls-revocation`, `mtls-watch`,
/// `mtls-handshakes`...). Detached for work that ends on its own (CRL refresh, the lifecycle
/// watcher, the metrics endpoint), joinable for work its owner waits for (a listener's
/// thread, the ACME challenge responders).
package enum BackgroundThread {
    private final class Body {
        let run: @Sendable () -> Void
        let name: String
        init(_ name: String, _ run: @escaping @Sendable () -> Void) { self.name = name; self.run = run }
    }

    /// Runs `body` on a new detached thread named `name`; false when no thread could be made.
    package static func start(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
        spawn(name: name, detached: true, body) != nil
    }

    /// Runs `body` on a new joinable thread named `name`; nil when no thread could be made. The
    /// caller joins it.
    package static func startJoinable(name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t? {
        spawn(name: name, detached: false, body)
    }

    private static func spawn(name: String, detached: Bool, _ body: @escaping @Sendable () -> Void) -> pthread_t? {
        let box = Unmanaged.passRetained(Body(name, body)).toOpaque()
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        defer { pthread_attr_destroy(&attr) }
        pthread_attr_setstacksize(&attr, 512 * 1024)
        if detached { pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED)) }
        var tid = pthread_t()
        let rc = pthread_create(&tid, &attr, { arg in
            guard let arg else { return nil }
            let b = Unmanaged<Body>.fromOpaque(arg).takeRetainedValue()
            mtls_set_thread_name(b.name)
            b.run()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<Body>.fromOpaque(box).release()
            return nil
        }
        return tid
    }
}
