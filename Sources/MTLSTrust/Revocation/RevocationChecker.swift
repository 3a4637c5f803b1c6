import FoundationEssentials

/// Checks the revocation status of every certificate of a built chain below its anchor, as a
/// policy or host rule asks (``RevocationSettings``): each source in order — the CRLs given to the
/// policy (files) and the certificate's CRL distribution points (fetched, verified against the
/// issuer in the built chain, cached), then OCSP — until one answers.
enum RevocationChecker {
    /// The outcome of one evaluation's checks: the report, the refusals (a revoked certificate,
    /// and an unknown status under hard), and the warnings of a soft check. Trust turns the
    /// refusals into its reasons (``TrustResult/with(revocation:)``): revocation knows nothing of
    /// trust's types.
    struct Outcome {
        let report: RevocationReport
        let refusals: [Refusal]
        let warnings: [String]
    }

    /// Why revocation refuses one certificate of the chain.
    struct Refusal: Equatable {
        enum Kind: Equatable { case revoked, unknown }
        let kind: Kind
        /// The certificate's index in the built chain (0: the leaf).
        let certIndex: Int
        let message: String
    }

    static func check(built: [Certificate], settings: RevocationSettings, options: RevocationFetchOptions,
                      crlFiles: [RevocationList], stapled: [UInt8]? = nil, time: Date,
                      events: LifecycleEvents? = nil) -> Outcome {
        var checks: [RevocationCheck] = []
        var refusals: [Refusal] = []
        var warnings: [String] = []
        // The anchor (the last certificate of a built chain) is trusted as configured: not checked.
        for i in 0..<max(0, built.count - 1) {
            let cert = built[i], issuer = built[i + 1]
            let c = status(of: cert, index: i, issuer: issuer, settings: settings, options: options, crlFiles: crlFiles,
                           stapled: i == 0 ? stapled : nil, time: time, events: events)
            checks.append(c)
            switch c.status {
            case .good: break
            case .revoked:
                var m = "\"\(cert.subjectSummary)\" (serial \(cert.serialHex)) is revoked"
                if let at = c.revokedAt { m += " since \(RevocationCheck.rfc3339(at))" }
                if let r = c.reason { m += ", reason \(r)" }
                if let u = c.url { m += " (\(c.source == "ocsp" ? "OCSP" : "CRL") \(u))" } else if let s = c.source { m += " (\(s))" }
                refusals.append(Refusal(kind: .revoked, certIndex: i, message: m))
            case .unknown:
                let m = "the revocation status of \"\(cert.subjectSummary)\" is unknown: \(c.error ?? "no source answered")"
                if settings.mode == .hard {
                    refusals.append(Refusal(kind: .unknown, certIndex: i, message: m + " (revocation is hard: refused)"))
                } else {
                    warnings.append(m + " (revocation is soft: trusted anyway)")
                }
            }
        }
        return Outcome(report: RevocationReport(mode: settings.mode, sources: settings.sources, checks: checks),
                       refusals: refusals, warnings: warnings)
    }

    /// Until when an outcome may be reused as it is (``EvaluationCache/RevocationMemo``): nil
    /// unless every status is known and was read from memory or a CRL file; else the earliest
    /// moment a CRL or response used is due for a background refresh (the last tenth of its
    /// life, as ``CRLStore`` refreshes it), so that refreshes keep being started by handshakes.
    static func memoizableUntil(_ report: RevocationReport) -> Date? {
        var until: Date? = nil
        for c in report.checks {
            guard c.status != .unknown, c.fetchedFrom == "memory" || c.source == "crl_file",
                  let next = c.nextUpdate, let this = c.thisUpdate else { return nil }
            let refreshAt = next.addingTimeInterval(-max(60, next.timeIntervalSince(this) / 10))
            until = min(until ?? refreshAt, refreshAt)
        }
        return until
    }

    private static func status(of cert: Certificate, index: Int, issuer: Certificate, settings: RevocationSettings,
                               options: RevocationFetchOptions, crlFiles: [RevocationList], stapled: [UInt8]?,
                               time: Date, events: LifecycleEvents?) -> RevocationCheck {
        var problems: [String] = []
        var lastURL: String? = nil
        // A staple (the server's own OCSP response, client side) is looked at first.
        if let stapled, settings.sources.contains(.ocsp),
           let c = OCSPCheck.stapled(stapled, of: cert, index: index, issuer: issuer, time: time, maxAge: options.maxAge,
                                     problems: &problems) {
            return c
        }
        for source in settings.sources {
            switch source {
            case .crl:
                // CRLs given to the policy by hand first: no network needed. Of several current
                // ones of this issuer, the newest (CRL number, else thisUpdate) answers.
                var newest: RevocationList? = nil
                for file in crlFiles where CRLCheck.covers(file, cert) {
                    do {
                        try CRLCheck.verifyOnce(file, issuer: issuer, time: time, maxAge: options.maxAge)
                    } catch let p as RevocationProblem where p.staleNextUpdate != nil {
                        // This issuer's CRL file, past its nextUpdate, said in the status (the
                        // event is fired once per staleness by the evaluator: RevocationEvents.staleFiles).
                        let name = file.path.map { "the CRL file \($0)" } ?? "a CRL given to the policy"
                        problems.append("\(name) (issuer \"\(issuer.subjectSummary)\") is stale: \(p.description)")
                        continue
                    } catch {
                        continue  // another issuer's CRL, or one that does not verify: not this certificate's
                    }
                    if let n = newest, !CRLCheck.isOlder(n, than: file) { continue }
                    newest = file
                }
                if let file = newest {
                    return verdict(cert, index, in: file.crl, source: "crl_file", url: nil, fetchedAt: nil, origin: nil,
                                   thisUpdate: file.thisUpdate, nextUpdate: file.nextUpdate)
                }
                let urls = cert.crlDistributionPoints
                if urls.isEmpty {
                    problems.append(cert.unsupportedCRLDistributionPoints > 0
                        ? "its CRL distribution points are of a kind libmtls does not fetch (indirect or by reason): unsupported"
                        : "it names no CRL distribution point")
                }
                for url in urls {
                    lastURL = url
                    // A URL that is not http: fails in the fetcher with its own message (and is
                    // remembered as a failure like any other).
                    do {
                        let (crl, origin) = try CRLStore.shared.crl(url: url, issuer: issuer, options: options, time: time,
                                                                    subject: cert, events: events)
                        guard CRLCheck.covers(crl.list, cert) else {
                            problems.append("\(url): the CRL does not cover this kind of certificate")
                            continue
                        }
                        return verdict(cert, index, in: crl.list.crl, source: "crl", url: url, fetchedAt: crl.fetchedAt,
                                       origin: origin, thisUpdate: crl.thisUpdate, nextUpdate: crl.nextUpdate)
                    } catch {
                        problems.append((error as? RevocationProblem)?.description ?? "\(error)")
                    }
                }
            case .ocsp:
                if let c = OCSPCheck.status(of: cert, index: index, issuer: issuer, options: options,
                                            time: time, problems: &problems, events: events) {
                    return c
                }
                if lastURL == nil { lastURL = cert.ocspResponders.first }
            }
        }
        return RevocationCheck(certIndex: index, subject: cert.subjectSummary, status: .unknown, url: lastURL,
                               error: problems.joined(separator: "; "))
    }

    private static func verdict(_ cert: Certificate, _ index: Int, in crl: OpaquePointer, source: String, url: String?,
                                fetchedAt: Date?, origin: String?, thisUpdate: Date, nextUpdate: Date?) -> RevocationCheck {
        if let (date, reason) = CRLCheck.lookup(crl, cert) {
            return RevocationCheck(certIndex: index, subject: cert.subjectSummary, status: .revoked, source: source, url: url,
                                   fetchedAt: fetchedAt, fetchedFrom: origin, thisUpdate: thisUpdate, nextUpdate: nextUpdate,
                                   revokedAt: date, reason: reason)
        }
        return RevocationCheck(certIndex: index, subject: cert.subjectSummary, status: .good, source: source, url: url,
                               fetchedAt: fetchedAt, fetchedFrom: origin, thisUpdate: thisUpdate, nextUpdate: nextUpdate)
    }
}

