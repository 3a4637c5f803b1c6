internal import COpenSSL
import FoundationEssentials

/// Path building on top of OpenSSL, for when the chain `X509_verify_cert` built first fails
/// (it takes the first issuer it finds: an expired cross-sign, an intermediate with the wrong
/// EKU, one signed with SHA-1, one leading to a root that is not an anchor...).
///
/// It enumerates the other candidate paths depth-first — issuers found by subject and key
/// identifier (`X509_check_issued`) among the certificates the peer sent and the anchors,
/// cross-signs included — and hands each to OpenSSL restricted to exactly that path: the
/// path's intermediates as the only untrusted certificates and, where the path ends at an
/// anchor, that anchor alone as the trust store. OpenSSL still decides each path; the policy
/// checks and pins run on each chain it built. A work budget (verifications and issuer
/// comparisons, like webpki's signature budget) bounds what a hostile bag of certificates can
/// cost. When no path is trusted, the reasons of the best failed candidate are reported (one
/// that reached an anchor over one that did not, then the fewest reasons).
struct PathBuilder {
    let evaluation: Evaluation
    let first: TrustResult

    /// At most this many `X509_verify_cert` runs after the first.
    static let maxVerifications = 20
    /// At most this many issuer comparisons (name and key identifier, no cryptography).
    static let maxIssuerChecks = 2_000
    /// At most this many signature checks (OpenSSL's `X509_verify`) to drop candidates whose key
    /// did not sign the certificate before a whole verification is spent on them.
    static let maxSignatureChecks = 64
    /// Paths longer than this (leaf included) are not followed.
    static let maxPathLength = 8

    func search() -> TrustResult {
        let leaf = evaluation.chain[0]
        let anchors = evaluation.anchorsInUse
        let anchorDigests = Set(anchors.map(\.sha256))
        // The pool: every certificate the peer sent after its leaf, and the anchors; once each.
        var pool: [Certificate] = []
        var seen: Set<[UInt8]> = [leaf.sha256]
        for c in evaluation.chain.dropFirst() + anchors where seen.insert(c.sha256).inserted { pool.append(c) }
        if pool.isEmpty { return first }
        let poolDigests = pool.map(\.sha256)
        var t = time_t(evaluation.time.timeIntervalSince1970)
        let currentlyValid = pool.map {
            X509_cmp_time(X509_get0_notBefore($0.x509), &t) <= 0 && X509_cmp_time(X509_get0_notAfter($0.x509), &t) >= 0
        }

        var best = first
        var verifications = 0
        var issuerChecks = 0
        var signatureChecks = 0
        var signatureOK: [Pair: Bool] = [:]
        /// Whether pool[i]'s key signed `cert` (OpenSSL's check), within the budget.
        func signed(_ i: Int, _ cert: Certificate, _ certKey: [UInt8]) -> Bool {
            let key = Pair(issuer: i, subject: certKey)
            if let known = signatureOK[key] { return known }
            guard signatureChecks < Self.maxSignatureChecks else { return false }
            signatureChecks += 1
            let ok = X509_get0_pubkey(pool[i].x509).map { X509_verify(cert.x509, $0) == 1 } ?? false
            OpenSSLErrorQueue.clear()
            signatureOK[key] = ok
            return ok
        }
        var triedFullStore: Set<[[UInt8]]> = []

        func consider(_ r: TrustResult) -> Bool {
            if r.trusted { best = r; return true }
            if Self.score(r) < Self.score(best) { best = r }
            return false
        }

        /// Follows `path` (pool indexes after the leaf); true once a trusted chain is found.
        func visit(_ path: [Int]) -> Bool {
            let current = path.last.map { pool[$0] } ?? leaf
            var issuers: [Int] = []
            for i in pool.indices where !path.contains(i) {
                if issuerChecks >= Self.maxIssuerChecks { break }
                issuerChecks += 1
                if X509_check_issued(pool[i].x509, current.x509) == X509_V_OK { issuers.append(i) }
            }
            let currentKey = path.last.map { poolDigests[$0] } ?? leaf.sha256
            // Only issuers whose key really signed the certificate; when the signature budget is
            // spent, the rest stay candidates and OpenSSL judges them.
            if signatureChecks < Self.maxSignatureChecks {
                issuers = issuers.filter { signed($0, current, currentKey) || signatureChecks >= Self.maxSignatureChecks }
            }
            OpenSSLErrorQueue.clear()
            // Currently valid issuers first, self-signed non-anchors last.
            issuers.sort { a, b in
                let ka = (currentlyValid[a] ? 0 : 1, pool[a].isSelfSigned && !anchorDigests.contains(poolDigests[a]) ? 1 : 0)
                let kb = (currentlyValid[b] ? 0 : 1, pool[b].isSelfSigned && !anchorDigests.contains(poolDigests[b]) ? 1 : 0)
                return ka < kb
            }
            let intermediates = path.map { pool[$0] }
            for i in issuers where anchorDigests.contains(poolDigests[i]) {
                guard verifications < Self.maxVerifications,
                      let (store, owner) = evaluation.compiled.singleAnchorStore(pool[i], digest: poolDigests[i]) else { continue }
                verifications += 1
                let r = withExtendedLifetime(owner) { evaluation.attempt(untrusted: intermediates, store: store) }
                if consider(r) { return true }
            }
            // The policy's whole store (system roots too) with exactly this path's intermediates.
            let key = path.map { poolDigests[$0] }
            if verifications < Self.maxVerifications, triedFullStore.insert(key).inserted {
                verifications += 1
                if consider(evaluation.attempt(untrusted: intermediates, store: evaluation.store)) { return true }
            }
            guard path.count + 1 < Self.maxPathLength else { return false }
            for i in issuers where !anchorDigests.contains(poolDigests[i]) {
                if verifications >= Self.maxVerifications { return false }
                if visit(path + [i]) { return true }
            }
            return false
        }
        _ = visit([])
        return best
    }

    struct Pair: Hashable {
        let issuer: Int
        let subject: [UInt8]
    }

    /// Lower is better: a chain that reached an anchor, then the fewest reasons.
    static func score(_ r: TrustResult) -> (Int, Int) {
        let unanchored = r.reasons.contains {
            $0.code == TrustReason.Code.untrustedRoot || $0.code == TrustReason.Code.unknownIssuer
        }
        return (unanchored ? 1 : 0, r.reasons.count)
    }
}
