internal import COpenSSL
import Synchronization

/// The OCSP staple of an application's server `SSL_CTX` that follows an ``IdentitySource``: the
/// stapler of the identity in force, started again when a handshake presents the source's new
/// identity (as a listener makes a new context, with its own stapler, when its identity changes),
/// the previous one stopped. The first handshakes after a change get no staple until it is fetched.
final class FollowingStapler: Sendable {
    /// The certificate last stapled for and its stapler (nil: it names no responder), so that
    /// a certificate without one is looked at once, not at every handshake.
    private let current: Locked<(leaf: Certificate, stapler: OCSPStapler?)>
    private let source: IdentitySource
    private let options: RevocationFetchOptions
    private let events: LifecycleEvents?

    init(source: IdentitySource, options: RevocationFetchOptions, events: LifecycleEvents?) {
        self.source = source
        self.options = options
        self.events = events
        let identity = source.current
        current = Locked((identity.leaf, OCSPStapler.start(for: identity, options: options, events: events)))
    }

    /// The stapler for the certificate `ssl` presents: the running one when it is for it, else a
    /// new one when it is the source's current identity (nil: neither, or no responder named).
    private func stapler(for ssl: OpaquePointer) -> OCSPStapler? {
        guard let presented = SSL_get_certificate(ssl) else { return nil }
        return current.withLock { running in
            if X509_cmp(presented, running.leaf.x509) == 0 { return running.stapler }
            let identity = source.current
            guard X509_cmp(presented, identity.leaf.x509) == 0 else { return nil }
            running.stapler?.stop()
            running = (identity.leaf, OCSPStapler.start(for: identity, options: options, events: events))
            return running.stapler
        }
    }

    /// Installs the status callback on `ctx`; `self` must outlive its use (until replaced).
    func install(on ctx: OpaquePointer) {
        _ = mtls_ossl_SSL_CTX_set_status_cb(ctx, { ssl, arg in
            guard let ssl, let arg,
                  let stapler = Unmanaged<FollowingStapler>.fromOpaque(arg).takeUnretainedValue().stapler(for: ssl) else {
                return SSL_TLSEXT_ERR_NOACK
            }
            return stapler.staple(on: ssl)
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Stops the running stapler's thread.
    func stop() { current.withLock { $0.stapler?.stop() } }

    deinit { stop() }
}
