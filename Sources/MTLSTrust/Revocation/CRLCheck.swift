internal import COpenSSL
import FoundationEssentials

/// Why a CRL or an OCSP response gives no answer for a certificate: the text of an `unknown`
/// status. Like an ``MTLSError``'s message, it is cleaned as it is made (``OneLine/text(_:)``): it
/// quotes what a CRL or OCSP server sent (a CRL's issuer name), over plain HTTP, and reaches
/// verdicts, events and warnings.
package struct RevocationProblem: Error, CustomStringConvertible {
    package let description: String
    /// The error code a fetch failure is reported with (``LifecycleEventKind/revocationFetchFailed``):
    /// the fetcher's (`io`, `timeout`, `limit`...) for the network, `parse` for a body that is no
    /// CRL, `untrusted` for one that does not verify.
    let code: MTLSError.Code
    /// For a CRL past its nextUpdate: that nextUpdate (a stale CRL is reported once per CRL and
    /// staleness, not at every retry; ``CRLStore``).
    let staleNextUpdate: Date?
    init(_ d: String, code: MTLSError.Code = .untrusted, staleNextUpdate: Date? = nil) {
        description = OneLine.text(d)
        self.code = code
        self.staleNextUpdate = staleNextUpdate
    }

    /// `error` as a problem (an ``MTLSError`` keeps its code).
    static func from(_ error: Error) -> RevocationProblem {
        if let p = error as? RevocationProblem { return p }
        if let e = error as? MTLSError { return RevocationProblem(e.message, code: e.code) }
        return RevocationProblem("\(error)", code: .internal)
    }
}

/// Reports a failed revocation fetch to a policy's event handler (and the library warnings).
enum RevocationEvents {
    static func fetchFailed(_ events: LifecycleEvents?, what: String, url: String, certificate: Certificate,
                            issuer: Certificate, problem: RevocationProblem) {
        let message = "revocation: \(what) at \(url) for \"\(certificate.subjectSummary)\" (issuer \"\(issuer.subjectSummary)\") failed: \(problem.description)"
        LibraryWarnings.emit(message)
        events?.emit(LifecycleEvent(kind: .revocationFetchFailed, label: url, certificate: certificate,
                                    error: MTLSError(problem.code, problem.description), message: message))
    }

    /// Reports each CRL given to the policy (``TrustPolicy/crls``: `mtls_policy_add_crl_file`,
    /// policy JSON `crls`) that is past its nextUpdate at `time`, once per file and staleness:
    /// the same stale file met at every evaluation is reported once; a CRL with another
    /// nextUpdate would be reported again. Whatever the revocation mode: a stale file is refused
    /// by OpenSSL's CRL check (`crl_invalid`) for the leaf and leaves the status `unknown` in the
    /// revocation checks, and either way someone has to load a fresh one. The event is labelled
    /// with the file's path (the CRL's issuer for a CRL parsed from memory).
    static func staleFiles(_ files: [RevocationList], time: Date, maxAge: TimeInterval, events: LifecycleEvents?) {
        for file in files {
            // Past its nextUpdate, or (without one) its thisUpdate plus the maximum age.
            let next = file.validUntil(maxAge: maxAge)
            guard next < time else { continue }
            let first = file.staleReported.withLock { reported -> Bool in
                if reported == next { return false }
                reported = next
                return true
            }
            guard first else { continue }
            let issuer = Certificate.rfc4514(X509_CRL_get_issuer(file.crl))
            let what = file.path.map { "the CRL file \($0)" } ?? "a CRL given to the policy"
            let when = file.nextUpdate != nil ? "is past its nextUpdate \(RevocationCheck.rfc3339(next))"
                : "has no nextUpdate and is older than the maximum age since \(RevocationCheck.rfc3339(next))"
            let message = "revocation: \(what) (issuer \"\(issuer)\") \(when): "
                + "certificates it covers get no revocation answer from it until a fresh one is loaded"
            LibraryWarnings.emit(message)
            events?.emit(LifecycleEvent(kind: .revocationFetchFailed, label: file.path ?? issuer,
                                        error: MTLSError(.untrusted, "\(what) is stale since \(RevocationCheck.rfc3339(next))"),
                                        message: message))
        }
    }
}

/// Checking a CRL against the issuer in the built chain, with OpenSSL, and looking a certificate
/// up in it. libmtls understands full CRLs of one issuer: delta CRLs, indirect CRLs and CRLs
/// partitioned by reason are refused as unsupported (an `unknown` status), as is any critical
/// extension other than the issuing distribution point, the authority key identifier and the
/// CRL number.
package enum CRLCheck {
    /// Throws a ``RevocationProblem`` unless `crl` is a usable CRL issued by `issuer` at `time`:
    /// issuer name, authority key identifier, signature (X509_CRL_verify with the issuer's key),
    /// cRLSign when the issuer has a keyUsage, extensions understood, and current at `time` under
    /// the one freshness rule (``RevocationFreshness``, `maxAge` for a CRL without nextUpdate).
    /// A CRL without a CRL number is used, as OpenSSL uses it (ordered by thisUpdate).
    package static func verify(_ crl: OpaquePointer, issuer: Certificate, time: Date, maxAge: TimeInterval) throws {
        defer { OpenSSLErrorQueue.clear() }
        guard X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(issuer.x509)) == 0 else {
            let name = Certificate.rfc4514(X509_CRL_get_issuer(crl))
            throw RevocationProblem("the CRL is issued by \"\(name)\", not by the certificate's issuer \"\(issuer.subject)\"")
        }
        if let ku = issuer.keyUsage, !ku.contains(.cRLSign) {
            throw RevocationProblem("the issuer \"\(issuer.subjectSummary)\" may not sign CRLs (keyUsage lacks cRLSign)")
        }
        if mtls_ossl_X509_CRL_aki_matches(crl, issuer.x509) < 0 {
            throw RevocationProblem("the CRL's authority key identifier names another key than the issuer's")
        }
        guard let key = X509_get0_pubkey(issuer.x509), X509_CRL_verify(crl, key) == 1 else {
            throw RevocationProblem("the CRL's signature does not verify with the key of \"\(issuer.subjectSummary)\" (signed by another CA?)")
        }
        // Extensions: each critical one must be understood; delta CRLs are refused.
        for i in 0..<max(0, X509_CRL_get_ext_count(crl)) {
            guard let ext = X509_CRL_get_ext(crl, i) else { continue }
            let nid = OBJ_obj2nid(X509_EXTENSION_get_object(ext))
            if nid == NID_delta_crl { throw RevocationProblem("a delta CRL: unsupported (libmtls reads full CRLs only)") }
            if X509_EXTENSION_get_critical(ext) != 0,
               ![NID_issuing_distribution_point, NID_authority_key_identifier, NID_crl_number].contains(nid) {
                throw RevocationProblem("the CRL has a critical extension libmtls does not understand (\(Certificate.oidText(X509_EXTENSION_get_object(ext)))): unsupported")
            }
        }
        let idp = mtls_ossl_X509_CRL_idp_flags(crl)
        if idp < 0 { throw RevocationProblem("the CRL's issuing distribution point does not decode") }
        if idp & 2 != 0 { throw RevocationProblem("an indirect CRL: unsupported") }
        if idp & 16 != 0 { throw RevocationProblem("a CRL for some revocation reasons only: unsupported") }
        if idp & 32 != 0 { throw RevocationProblem("a CRL for attribute certificates only") }
        // Entries: an entry naming another certificate issuer makes the CRL indirect.
        if let entries = X509_CRL_get_REVOKED(crl) {
            for i in 0..<mtls_ossl_sk_X509_REVOKED_num(entries) {
                guard let r = mtls_ossl_sk_X509_REVOKED_value(entries, i), let exts = X509_REVOKED_get0_extensions(r) else { continue }
                for j in 0..<mtls_ossl_sk_X509_EXTENSION_num(exts) {
                    guard let ext = mtls_ossl_sk_X509_EXTENSION_value(exts, j) else { continue }
                    let nid = OBJ_obj2nid(X509_EXTENSION_get_object(ext))
                    if nid == NID_certificate_issuer { throw RevocationProblem("an indirect CRL (an entry names another issuer): unsupported") }
                    if X509_EXTENSION_get_critical(ext) != 0, ![NID_crl_reason, NID_invalidity_date].contains(nid) {
                        throw RevocationProblem("a CRL entry has a critical extension libmtls does not understand: unsupported")
                    }
                }
            }
        }
        let (thisUpdate, nextUpdate) = dates(crl)
        try checkDates(thisUpdate: thisUpdate, nextUpdate: nextUpdate, maxAge: maxAge, time: time)
    }

    /// ``verify(_:issuer:time:maxAge:)`` for a CRL kept in memory: its signature and extensions
    /// are checked once per issuer; later calls check only its dates against `time`.
    static func verifyOnce(_ list: RevocationList, issuer: Certificate, time: Date, maxAge: TimeInterval) throws {
        if list.verifiedIssuers.withLock({ $0.contains(issuer.der) }) {
            try checkDates(thisUpdate: list.thisUpdate, nextUpdate: list.nextUpdate, maxAge: maxAge, time: time)
            return
        }
        try verify(list.crl, issuer: issuer, time: time, maxAge: maxAge)
        list.verifiedIssuers.withLock { if $0.count < 16 { $0.append(issuer.der) } }
    }

    /// A CRL's dates under the one freshness rule (``RevocationFreshness``).
    static func checkDates(thisUpdate: Date, nextUpdate: Date?, maxAge: TimeInterval, time: Date) throws {
        try RevocationFreshness.check("the CRL", thisUpdate: thisUpdate, nextUpdate: nextUpdate, maxAge: maxAge, time: time)
    }

    /// Whether `candidate` is older than `seen`, both CRLs of one issuer and scope: by CRL number
    /// when both carry one and they differ, else by thisUpdate (a CRL without a CRL number is used,
    /// as OpenSSL uses it, ordered by thisUpdate). An older CRL never replaces one already seen.
    package static func isOlder(_ candidate: RevocationList, than seen: RevocationList) -> Bool {
        if let a = candidate.number, let b = seen.number, a != b {
            return a.count != b.count ? a.count < b.count : a.lexicographicallyPrecedes(b)
        }
        return candidate.thisUpdate < seen.thisUpdate
    }

    /// thisUpdate and nextUpdate.
    static func dates(_ crl: OpaquePointer) -> (Date, Date?) {
        let this = Certificate.date(X509_CRL_get0_lastUpdate(crl))
        let next = X509_CRL_get0_nextUpdate(crl).map { Certificate.date($0) }
        return (this, next)
    }

    /// Whether the CRL covers `cert` (its issuing distribution point may restrict it to end
    /// entities or to CAs).
    package static func covers(_ list: RevocationList, _ cert: Certificate) -> Bool {
        let idp = list.idpFlags
        guard idp > 0 else { return true }
        let isCA = cert.basicConstraints?.isCA == true
        if idp & 4 != 0 && isCA { return false }
        if idp & 8 != 0 && !isCA { return false }
        return true
    }

    /// `cert`'s entry in the CRL: nil when it is not listed; else when and why it was revoked.
    package static func lookup(_ crl: OpaquePointer, _ cert: Certificate) -> (date: Date, reason: String?)? {
        var entry: OpaquePointer? = nil
        let rc = X509_CRL_get0_by_cert(crl, &entry, cert.x509)
        OpenSSLErrorQueue.clear()
        guard rc == 1, let entry else { return nil }
        let date = Certificate.date(X509_REVOKED_get0_revocationDate(entry))
        let code = mtls_ossl_X509_REVOKED_reason(entry)
        let reason = code >= 0 ? (Revocation.Reason(rawValue: Int(code))?.name ?? "reason \(code)") : nil
        return (date, reason)
    }
}
