internal import COpenSSL
import FoundationEssentials
import Synchronization

/// A basic X.509 evaluation of an identity's own chain (no host name, no policy, no system
/// trust store): what a phone's PKCS#12 import reports next to the identity. OpenSSL's
/// `X509_verify_cert` does the work, anchored at the self-signed root the chain ends with.
public struct BasicChainEvaluation: Sendable, Hashable {
    /// The chain ends with a self-signed root (it is complete).
    public let reachesSelfSignedRoot: Bool
    /// Every certificate's signature verifies with its issuer's key (the root's with its own).
    public let signaturesValid: Bool
    /// Every certificate is within its validity period at ``evaluatedAt``.
    public let withinValidity: Bool
    /// `X509_verify_cert` accepted the chain with its own root as the only anchor.
    public let verified: Bool
    /// OpenSSL's verification result (`X509_V_OK` = 0 when ``verified``).
    public let openSSLCode: Int32
    /// OpenSSL's text for ``openSSLCode`` ("ok" when verified).
    public let message: String
    /// The index in leaf-first order of the certificate ``openSSLCode`` applies to, or nil.
    public let certificateIndex: Int?
    /// When the evaluation ran.
    public let evaluatedAt: Date
}

extension Identity {
    /// Evaluates the identity's chain at `time` (see ``BasicChainEvaluation``).
    public func evaluateChain(at time: Date = Date()) -> BasicChainEvaluation {
        let path = allCertificates
        defer { OpenSSLErrorQueue.clear() }
        // Signatures, link by link; the last certificate checks itself when self-signed.
        var signaturesValid = true
        for (i, cert) in path.enumerated() {
            let issuer = i + 1 < path.count ? path[i + 1] : cert
            if i + 1 == path.count && !cert.isSelfSigned { break }
            guard let key = X509_get0_pubkey(issuer.x509), X509_verify(cert.x509, key) == 1 else {
                signaturesValid = false
                break
            }
        }
        var t = time_t(time.timeIntervalSince1970)
        let withinValidity = path.allSatisfy {
            X509_cmp_time(X509_get0_notBefore($0.x509), &t) <= 0 && X509_cmp_time(X509_get0_notAfter($0.x509), &t) >= 0
        }
        let reachesRoot = path.last?.isSelfSigned ?? false

        var code = Int32(X509_V_ERR_UNSPECIFIED)
        var depth: Int32 = -1
        if let store = X509_STORE_new() {
            defer { X509_STORE_free(store) }
            if reachesRoot, let root = path.last { _ = X509_STORE_add_cert(store, root.x509) }
            let untrusted = mtls_ossl_sk_X509_new_null()
            defer { mtls_ossl_sk_X509_free(untrusted) }
            for c in chain.dropLast(reachesRoot ? 1 : 0) { _ = mtls_ossl_sk_X509_push(untrusted, c.x509) }
            if let ctx = X509_STORE_CTX_new_ex(LibraryContext.shared.ctx, nil) {
                defer { X509_STORE_CTX_free(ctx) }
                if X509_STORE_CTX_init(ctx, store, leaf.x509, untrusted) == 1 {
                    X509_STORE_CTX_set_time(ctx, 0, t)
                    X509_STORE_CTX_set_flags(ctx, UInt(X509_V_FLAG_CHECK_SS_SIGNATURE))
                    _ = X509_verify_cert(ctx)
                    code = X509_STORE_CTX_get_error(ctx)
                    depth = X509_STORE_CTX_get_error_depth(ctx)
                }
            }
        }
        let message = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
        return BasicChainEvaluation(
            reachesSelfSignedRoot: reachesRoot, signaturesValid: signaturesValid, withinValidity: withinValidity,
            verified: code == X509_V_OK, openSSLCode: code, message: message,
            certificateIndex: code == X509_V_OK || depth < 0 ? nil : Int(depth), evaluatedAt: time)
    }

    /// The evaluation of the chain now, computed on first read and kept while it cannot change
    /// (see ``evaluateChain(at:)``): until a validity date of one of the certificates (a
    /// notBefore, or the second after a notAfter) is reached, or the clock goes back before the
    /// cached evaluation. Imported PKCS#12 identities carry it; it costs signature checks, so it
    /// is not computed until someone asks.
    public var chainEvaluation: BasicChainEvaluation {
        let now = Date()
        return evaluationCache.withLock { cached in
            if let c = cached, now >= c.evaluatedAt, now < nextValidityBoundary(after: c.evaluatedAt) { return c }
            let e = evaluateChain(at: now)
            cached = e
            return e
        }
    }

    /// The first instant after `time` at which a certificate of the identity becomes valid or
    /// stops being valid (distantFuture when none).
    package func nextValidityBoundary(after time: Date) -> Date {
        var next = Date.distantFuture
        for c in allCertificates {
            for d in [c.notBefore, c.notAfter.addingTimeInterval(1)] where d > time && d < next { next = d }
        }
        return next
    }
}
