import FoundationEssentials

/// The one freshness rule of every revocation answer, whatever its source (a CRL given to the
/// policy, fetched from a distribution point, read from memory or the cache folder; an OCSP
/// response fetched, cached or stapled, and the staple a server sends): an answer is current from
/// its thisUpdate (less ``skew``) until its nextUpdate; an answer without a nextUpdate until its
/// thisUpdate plus the policy's maximum age (``RevocationFetchOptions/maxAge``, default 7 days).
/// A thisUpdate further in the future than the skew is refused.
package enum RevocationFreshness {
    /// Clock skew tolerated on thisUpdate.
    static let skew: TimeInterval = 300

    /// Until when an answer with these dates is current.
    package static func validUntil(thisUpdate: Date, nextUpdate: Date?, maxAge: TimeInterval) -> Date {
        nextUpdate ?? thisUpdate.addingTimeInterval(maxAge)
    }

    /// Throws a ``RevocationProblem`` naming `what` ("the CRL", "the OCSP response") unless an
    /// answer with these dates is current at `time`. A stale answer's problem carries the moment
    /// it went stale (``RevocationProblem/staleNextUpdate``).
    package static func check(_ what: String, thisUpdate: Date, nextUpdate: Date?, maxAge: TimeInterval, time: Date) throws {
        if thisUpdate > time.addingTimeInterval(skew) {
            throw RevocationProblem("\(what) is not valid yet (thisUpdate \(RevocationCheck.rfc3339(thisUpdate)))")
        }
        if let nextUpdate {
            if nextUpdate < time {
                throw RevocationProblem("\(what) is stale: its nextUpdate \(RevocationCheck.rfc3339(nextUpdate)) has passed",
                                        staleNextUpdate: nextUpdate)
            }
        } else {
            let until = thisUpdate.addingTimeInterval(maxAge)
            if until < time {
                throw RevocationProblem("\(what) is stale: it has no nextUpdate and its thisUpdate \(RevocationCheck.rfc3339(thisUpdate)) "
                                        + "is older than the maximum age of \(Int(maxAge)) s (revocation max_age_seconds)",
                                        staleNextUpdate: until)
            }
        }
    }
}
