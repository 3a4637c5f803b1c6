internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A listener's OCSP staple for its own certificate: when the certificate names an OCSP responder
/// and its issuer is in the identity's chain, a background thread (`mtls-ocsp-staple`) fetches a
/// response, checks it as a client would (``OCSPCheck``), keeps it, and fetches again in the last
/// tenth of its life (a minute after a failure). Handshakes only read what is kept: the staple is
/// never fetched on the handshake path. A response that is not `good` is not stapled, and neither
/// is one that is no longer current (``RevocationFreshness``: past its nextUpdate, or without one
/// older than the maximum age), checked at each handshake.
package final class OCSPStapler: Sendable {
    private final class Shared: Sendable {
        /// The response kept (DER) and until when it is current.
        let response = Locked<(der: [UInt8], validUntil: Date)?>(nil)
        let stopped = Atomic<Bool>(false)
        /// Fetches made (for tests).
        let fetches = Atomic<Int>(0)
    }
    private let shared = Shared()
    /// The certificate the staple is for: a handshake presenting another one (an identity
    /// rotated since) gets no staple.
    let leaf: Certificate

    private init(leaf: Certificate) { self.leaf = leaf }

    /// Retry after a failed fetch: the first soon (a responder that was down while the server
    /// started is usually back within seconds), doubling up to the minute.
    static let firstRetry: TimeInterval = 5
    static let maxRetry: TimeInterval = 60

    /// Starts the stapler for `identity`, or returns nil when its certificate names no responder
    /// or its issuer is not in the chain. A fetch that fails, or an answer that is not `good`
    /// (nothing is stapled), is reported to `events` (the listener's, those of its identity
    /// source) as ``LifecycleEventKind/revocationFetchFailed`` with the responder's URL as the
    /// label, once per failed fetch.
    package static func start(for identity: Identity, options: RevocationFetchOptions = RevocationFetchOptions(),
                      events: LifecycleEvents? = nil) -> OCSPStapler? {
        let leaf = identity.leaf
        guard let url = leaf.ocspResponders.first,
              let issuer = identity.chain.first(where: { $0.subjectNameDER == leaf.issuerNameDER }) else { return nil }
        let stapler = OCSPStapler(leaf: leaf)
        let shared = stapler.shared
        let started = BackgroundThread.start(name: "mtls-ocsp-staple") {
            var retry = firstRetry
            while !shared.stopped.load(ordering: .acquiring) {
                var wait: TimeInterval = 60
                shared.fetches.add(1, ordering: .relaxed)
                var failure: RevocationProblem? = nil
                var fetched: (OCSPCheck.Answer, [UInt8])? = nil
                var answered = false  // the responder gave a current answer (revoked, unknown)
                do {
                    let (answer, der) = try OCSPCheck.queryWithResponse(url: url, cert: leaf, issuer: issuer, options: options,
                                                                       time: Date())
                    if answer.status == .good {
                        fetched = (answer, der)
                    } else {
                        answered = true
                        failure = RevocationProblem("the responder answers \(answer.status) for our own certificate: nothing is stapled")
                    }
                } catch {
                    failure = RevocationProblem.from(error)
                }
                if let (answer, der) = fetched {
                    retry = firstRetry
                    let until = answer.validUntil(maxAge: options.maxAge)
                    shared.response.withLock { $0 = (der, until) }
                    let life = until.timeIntervalSince(answer.thisUpdate)
                    wait = max(60, until.timeIntervalSinceNow - max(60, life / 10))
                } else {
                    // Keep a previous good response while it is current (each handshake checks
                    // that it still is) when the responder could not be asked; drop it when the
                    // responder now answers otherwise, or when it is stale.
                    shared.response.withLock { if let r = $0, answered || r.validUntil <= Date() { $0 = nil } }
                    wait = retry
                    retry = min(maxRetry, retry * 2)
                    if let failure, let events {
                        let message = "OCSP stapling: fetching the staple for \"\(leaf.subjectSummary)\" from \(url) failed: \(failure.description) (next attempt in \(Int(wait)) s)"
                        events.emit(LifecycleEvent(kind: .revocationFetchFailed, label: url, certificate: leaf,
                                                   error: MTLSError(failure.code, failure.description), message: message))
                    }
                }
                // Sleep in short steps so that a closed listener's thread ends soon.
                let end = Date().addingTimeInterval(wait)
                while Date() < end, !shared.stopped.load(ordering: .acquiring) { usleep(200_000) }
            }
        }
        return started ? stapler : nil
    }

    /// The response to staple (DER): a good one fetched, while it is current.
    var response: [UInt8]? {
        shared.response.withLock { r in
            guard let r, r.validUntil > Date() else { return nil }
            return r.der
        }
    }

    /// How many fetches the background thread made.
    var fetchCount: Int { shared.fetches.load(ordering: .relaxed) }

    /// Ends the background thread (within a fifth of a second).
    package func stop() { shared.stopped.store(true, ordering: .releasing) }

    deinit { stop() }

    /// Installs the status callback on a server `SSL_CTX` (the listener's, or an application's
    /// configured to accept clients): a client that asks for the status gets the kept response
    /// when the handshake presents the stapler's certificate. `stapler` must outlive `ctx`'s use
    /// of it (until the callback is replaced).
    package static func install(_ stapler: OCSPStapler, on ctx: OpaquePointer) {
        _ = mtls_ossl_SSL_CTX_set_status_cb(ctx, { ssl, arg in
            guard let ssl, let arg else { return SSL_TLSEXT_ERR_NOACK }
            return Unmanaged<OCSPStapler>.fromOpaque(arg).takeUnretainedValue().staple(on: ssl)
        }, Unmanaged.passUnretained(stapler).toOpaque())
    }

    /// Puts the kept response on `ssl` when its handshake presents this stapler's certificate:
    /// the status callback's answer.
    package func staple(on ssl: OpaquePointer) -> Int32 {
        guard let presented = SSL_get_certificate(ssl), X509_cmp(presented, leaf.x509) == 0,
              let der = response, !der.isEmpty,
              let mem = mtls_ossl_OPENSSL_malloc(der.count)?.assumingMemoryBound(to: UInt8.self) else {
            return SSL_TLSEXT_ERR_NOACK
        }
        der.withUnsafeBufferPointer { mem.update(from: $0.baseAddress!, count: der.count) }
        guard mtls_ossl_SSL_set_ocsp_staple(ssl, mem, der.count) == 1 else {
            mtls_ossl_OPENSSL_free(mem)
            return SSL_TLSEXT_ERR_NOACK
        }
        return SSL_TLSEXT_ERR_OK
    }
}
