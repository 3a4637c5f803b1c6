internal import COpenSSL
import FoundationEssentials
import Synchronization

/// OCSP (``RevocationSource/ocsp``): a request to the certificate's responder (authorityInfoAccess)
/// over the library's HTTP client (POST, the same size and time limits as CRLs), built and checked
/// with OpenSSL's OCSP API: the response must be successful, signed by the issuer in the built
/// chain or by a responder it delegated to (id-kp-OCSPSigning, issued by it), carry the nonce we
/// sent when it carries one, and be current at the evaluation time under the one freshness rule
/// (``RevocationFreshness``: until its nextUpdate, or its thisUpdate plus the policy's maximum age
/// when it has none). Answers are cached per responder and certificate while they are current.
package enum OCSPCheck {
    package struct Answer {
        package let status: RevocationCheck.Status
        let revokedAt: Date?
        let reason: String?
        let thisUpdate: Date
        let nextUpdate: Date?
        let fetchedAt: Date

        /// Until when it is current under the maximum age `maxAge` (``RevocationFreshness``).
        func validUntil(maxAge: TimeInterval) -> Date {
            RevocationFreshness.validUntil(thisUpdate: thisUpdate, nextUpdate: nextUpdate, maxAge: maxAge)
        }
    }

    /// Cached answers by responder URL and certificate (and issuer).
    private static let cache = Locked<[String: Answer]>([:])
    static let maxEntries = 4096

    static func clear() {
        cache.withLock { $0 = [:] }
        CRLStore.changed()
    }

    /// The status a stapled response (the server's, DER) gives, checked like a fetched one; nil
    /// with the problem added to `problems`.
    static func stapled(_ stapled: [UInt8], of cert: Certificate, index: Int, issuer: Certificate, time: Date,
                        maxAge: TimeInterval, problems: inout [String]) -> RevocationCheck? {
        do {
            let a = try check(response: stapled, cert: cert, issuer: issuer, nonceRequest: nil, time: time, maxAge: maxAge)
            if let c = record(a, cert: cert, index: index, source: "ocsp_staple", url: nil, origin: "staple") { return c }
            problems.append("the stapled OCSP response does not know the certificate (status unknown)")
        } catch {
            problems.append("the stapled OCSP response: \((error as? RevocationProblem)?.description ?? "\(error)")")
        }
        return nil
    }

    /// The certificate's status from its OCSP responders, or nil with the problems added to `problems`.
    static func status(of cert: Certificate, index: Int, issuer: Certificate, options: RevocationFetchOptions,
                       time: Date, problems: inout [String], events: LifecycleEvents? = nil) -> RevocationCheck? {
        let urls = cert.ocspResponders
        if urls.isEmpty { problems.append("it names no OCSP responder") }
        for url in urls {
            let key = url + "|" + cert.sha256Hex + "|" + issuer.sha256Hex
            if let a = cache.withLock({ $0[key] }), a.validUntil(maxAge: options.maxAge) > Date(),
               (try? RevocationFreshness.check("the OCSP response", thisUpdate: a.thisUpdate, nextUpdate: a.nextUpdate,
                                               maxAge: options.maxAge, time: time)) != nil {
                if let c = record(a, cert: cert, index: index, source: "ocsp", url: url, origin: "memory") { return c }
                problems.append("OCSP \(url): the responder does not know the certificate (status unknown)")
                continue
            }
            do {
                let a = try query(url: url, cert: cert, issuer: issuer, options: options, time: time)
                cache.withLock { c in
                    if c.count >= maxEntries { c.removeAll() }
                    c[key] = a
                }
                CRLStore.changed()
                if let c = record(a, cert: cert, index: index, source: "ocsp", url: url, origin: "network") { return c }
                problems.append("OCSP \(url): the responder does not know the certificate (status unknown)")
            } catch {
                let p = RevocationProblem.from(error)
                problems.append("OCSP \(url): \(p.description)")
                RevocationEvents.fetchFailed(events, what: "the OCSP request", url: url, certificate: cert, issuer: issuer, problem: p)
            }
        }
        return nil
    }

    private static func record(_ a: Answer, cert: Certificate, index: Int, source: String, url: String?,
                               origin: String) -> RevocationCheck? {
        // "unknown" from a responder is no answer: the next source may have one.
        guard a.status != .unknown else { return nil }
        return RevocationCheck(certIndex: index, subject: cert.subjectSummary, status: a.status, source: source, url: url,
                               fetchedAt: a.fetchedAt, fetchedFrom: origin, thisUpdate: a.thisUpdate, nextUpdate: a.nextUpdate,
                               revokedAt: a.revokedAt, reason: a.reason)
    }

    /// Sends an OCSP request (with a nonce) for `cert` to `url` and checks the answer.
    static func query(url: String, cert: Certificate, issuer: Certificate, options: RevocationFetchOptions,
                      time: Date) throws -> Answer {
        try queryWithResponse(url: url, cert: cert, issuer: issuer, options: options, time: time).0
    }

    /// ``query(url:cert:issuer:options:time:)`` with the response's DER (what a server staples).
    static func queryWithResponse(url: String, cert: Certificate, issuer: Certificate, options: RevocationFetchOptions,
                                  time: Date) throws -> (Answer, [UInt8]) {
        defer { OpenSSLErrorQueue.clear() }
        guard let req = OCSP_REQUEST_new() else { throw RevocationProblem("out of memory") }
        defer { OCSP_REQUEST_free(req) }
        guard let id = OCSP_cert_to_id(nil, cert.x509, issuer.x509), OCSP_request_add0_id(req, id) != nil else {
            throw RevocationProblem("cannot make an OCSP request for \"\(cert.subjectSummary)\"")
        }
        guard OCSP_request_add1_nonce(req, nil, -1) == 1,
              let der = derEncode({ i2d_OCSP_REQUEST(req, $0) }) else {
            throw RevocationProblem("cannot encode the OCSP request")
        }
        let body = try HTTPFetcher.post(url, body: der, contentType: "application/ocsp-request", limits: options.limits)
        return (try check(response: body, cert: cert, issuer: issuer, nonceRequest: req, time: time, maxAge: options.maxAge), body)
    }

    /// Checks an OCSP response (DER) for `cert` issued by `issuer` at `time`, `maxAge` bounding
    /// one without nextUpdate.
    package static func check(response: [UInt8], cert: Certificate, issuer: Certificate, nonceRequest: OpaquePointer?,
                      time: Date, maxAge: TimeInterval) throws -> Answer {
        defer { OpenSSLErrorQueue.clear() }
        let resp = response.withUnsafeBufferPointer { buf -> OpaquePointer? in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_OCSP_RESPONSE(nil, &p, buf.count)
        }
        guard let resp else { throw RevocationProblem("not an OCSP response (\(response.count) bytes)") }
        defer { OCSP_RESPONSE_free(resp) }
        let rs = OCSP_response_status(resp)
        guard rs == OCSP_RESPONSE_STATUS_SUCCESSFUL else {
            throw RevocationProblem("the responder answered \(String(cString: OCSP_response_status_str(Int(rs))))")
        }
        guard let bs = OCSP_response_get1_basic(resp) else { throw RevocationProblem("the OCSP response has no basic response") }
        defer { OCSP_BASICRESP_free(bs) }
        if let nonceRequest, OCSP_check_nonce(nonceRequest, bs) == 0 {
            throw RevocationProblem("the OCSP response's nonce is not the one sent (a replayed answer?)")
        }
        // The signer: the issuer itself (trusted as given), or a delegated responder whose
        // certificate in the response chains to the issuer and carries id-kp-OCSPSigning
        // (OCSP_basic_verify checks both).
        guard let store = X509_STORE_new() else { throw RevocationProblem("out of memory") }
        defer { X509_STORE_free(store) }
        _ = X509_STORE_add_cert(store, issuer.x509)
        _ = X509_STORE_set_flags(store, UInt(X509_V_FLAG_PARTIAL_CHAIN))
        let certs = mtls_ossl_sk_X509_new_null()!
        defer { mtls_ossl_sk_X509_free(certs) }
        _ = mtls_ossl_sk_X509_push(certs, issuer.x509)
        guard OCSP_basic_verify(bs, certs, store, UInt(OCSP_TRUSTOTHER)) == 1 else {
            throw RevocationProblem("the OCSP response is not signed by \"\(issuer.subjectSummary)\" or a responder it delegated to")
        }
        guard let id = OCSP_cert_to_id(nil, cert.x509, issuer.x509) else { throw RevocationProblem("out of memory") }
        defer { OCSP_CERTID_free(id) }
        var status: Int32 = -1, reason: Int32 = -1
        var rev: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>? = nil
        var thisUpd: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>? = nil
        var nextUpd: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>? = nil
        guard OCSP_resp_find_status(bs, id, &status, &reason, &rev, &thisUpd, &nextUpd) == 1, let thisUpd else {
            throw RevocationProblem("the OCSP response says nothing about \"\(cert.subjectSummary)\"")
        }
        let this = Certificate.date(thisUpd)
        let next = nextUpd.map { Certificate.date($0) }
        try RevocationFreshness.check("the OCSP response", thisUpdate: this, nextUpdate: next, maxAge: maxAge, time: time)
        let s: RevocationCheck.Status
        switch status {
        case V_OCSP_CERTSTATUS_GOOD: s = .good
        case V_OCSP_CERTSTATUS_REVOKED: s = .revoked
        default: s = .unknown
        }
        let reasonName = reason >= 0 ? (Revocation.Reason(rawValue: Int(reason))?.name ?? "reason \(reason)") : nil
        return Answer(status: s, revokedAt: rev.map { Certificate.date($0) }, reason: s == .revoked ? reasonName : nil,
                      thisUpdate: this, nextUpdate: next, fetchedAt: Date())
    }
}
