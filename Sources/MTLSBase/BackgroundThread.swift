internal import COpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// Detached, named background threads for the library's own work (CRL refresh, the
/// lifecycle watcher), made one way: 512 KiB stack, detached, named for `top -H`.
package enum BackgroundThread {
    private final class Body {
        let run: @Sendable () -> Void
        let name: String
        init(_ name: String, _ run: @escaping @Sendable () -> Void) { self.name = name; self.run = run }
    }

    /// Runs `body` on a new detached thread named `name`; false when no thread could be made.
    package static func start(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Body(name, body)).toOpaque()
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        defer { pthread_attr_destroy(&attr) }
        pthread_attr_setstacksize(&attr, 512 * 1024)
        pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
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
            return false
        }
        return true
    }
}
