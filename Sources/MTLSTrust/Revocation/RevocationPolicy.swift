import FoundationEssentials

/// How revocation is checked: not at all, or for every certificate of the built chain below the
/// anchor, with an unknown status either tolerated (soft) or refused (hard). A revoked
/// certificate is never trusted, in any mode.
public enum RevocationMode: String, Sendable, CaseIterable {
    /// No check (the default; CRL files given to the policy are still used by OpenSSL).
    case off
    /// Checked; an unknown status (no source reachable, a stale or unsupported CRL) is trusted,
    /// and the result says so (``TrustResult/warnings`` and ``TrustResult/revocation``).
    case soft
    /// Checked; an unknown status refuses the peer with reason `revocation_unknown`.
    case hard
}

/// Where a certificate's status is looked for, in the order listed.
public enum RevocationSource: String, Sendable, CaseIterable {
    /// The CRL at the certificate's CRL distribution point (and CRLs loaded from files).
    case crl
    /// The certificate's OCSP responder (authorityInfoAccess).
    case ocsp
}

/// A policy's or a host rule's revocation setting: `{"mode": ..., "sources": [...]}` in policy files.
public struct RevocationSettings: Hashable, Sendable, CustomStringConvertible {
    /// When revocation is checked and what an unknown status does (off, soft, hard).
    public var mode: RevocationMode
    /// Non-empty, without repetitions.
    public var sources: [RevocationSource]

    /// Off, with CRLs as the source once turned on.
    public static let off = RevocationSettings(mode: .off)

    /// Settings with `mode` and `sources` (CRLs by default).
    public init(mode: RevocationMode, sources: [RevocationSource] = [.crl]) {
        self.mode = mode
        self.sources = sources
    }

    /// Throws ``MTLSError/Code/invalidPolicy`` for no source or a source listed twice.
    public func validate() throws {
        guard !sources.isEmpty else { throw MTLSError(.invalidPolicy, "revocation needs at least one source (\"crl\", \"ocsp\")") }
        guard Set(sources).count == sources.count else { throw MTLSError(.invalidPolicy, "revocation lists a source twice") }
    }

    /// The mode and the sources: `soft (crl, ocsp)`.
    public var description: String { "\(mode.rawValue) (\(sources.map(\.rawValue).joined(separator: ", ")))" }

    /// Parses a mode name (`off`, `soft`, `hard`).
    public static func mode(_ name: String) throws -> RevocationMode {
        guard let m = RevocationMode(rawValue: name.lowercased()) else {
            throw MTLSError(.invalidPolicy, "revocation mode must be \"off\", \"soft\" or \"hard\" (got \"\(name)\")")
        }
        return m
    }

    /// Parses a source name (`crl`, `ocsp`).
    public static func source(_ name: String) throws -> RevocationSource {
        guard let s = RevocationSource(rawValue: name.lowercased()) else {
            throw MTLSError(.invalidPolicy, "revocation source must be \"crl\" or \"ocsp\" (got \"\(name)\")")
        }
        return s
    }
}

/// How revocation information is fetched, policy-wide: limits per fetch, and where fetched CRLs
/// are kept so that a restarted program does not fetch them again.
public struct RevocationFetchOptions: Hashable, Sendable {
    /// Largest CRL or OCSP response accepted (default 10 MiB).
    public var maxBytes: Int
    /// Seconds for one fetch, redirects included (default 5). A handshake that needs a fetch
    /// waits at most this long (or its own timeout, if shorter).
    public var timeout: Double
    /// A folder for fetched CRLs (files 0600, one per URL); nil keeps them in memory only. It
    /// must belong to the user and not be writable by group or others (it is created 0700); one
    /// that is not is not used (a warning says why) and CRLs are fetched.
    public var cacheDirectory: String?
    /// Seconds a CRL or OCSP response without a nextUpdate stays current after its thisUpdate
    /// (default 7 days; `RevocationFreshness`). Policy files: `"revocation": {"max_age_seconds": N}`.
    public var maxAge: TimeInterval

    /// The default ``maxAge``: 7 days.
    public static let defaultMaxAge: TimeInterval = 7 * 86400
    /// The largest ``maxAge`` accepted: 366 days.
    public static let maxMaxAge: TimeInterval = 366 * 86400

    /// Fetch options: at most `maxBytes` bytes and `timeout` seconds per fetch, fetched CRLs kept
    /// in `cacheDirectory` (nil: in memory only), an answer used for at most `maxAge` seconds.
    public init(maxBytes: Int = 10 << 20, timeout: Double = 5, cacheDirectory: String? = nil,
                maxAge: TimeInterval = RevocationFetchOptions.defaultMaxAge) {
        self.maxBytes = maxBytes
        self.timeout = timeout
        self.cacheDirectory = cacheDirectory
        self.maxAge = maxAge
    }

    /// Throws ``MTLSError/Code/invalidPolicy`` for a size or time limit that is not positive or
    /// absurd (over 1 GiB, over 10 minutes).
    public func validate() throws {
        guard (1...(1 << 30)).contains(maxBytes) else {
            throw MTLSError(.invalidPolicy, "the revocation size limit must be between 1 byte and 1 GiB (got \(maxBytes))")
        }
        guard timeout > 0, timeout <= 600 else {
            throw MTLSError(.invalidPolicy, "the revocation time limit must be between 0 and 600 seconds (got \(timeout))")
        }
        guard maxAge >= 1, maxAge <= Self.maxMaxAge else {
            throw MTLSError(.invalidPolicy, "the revocation maximum age must be between 1 second and 366 days (got \(maxAge) s)")
        }
    }

    /// Sets ``maxAge`` under the options' convention (the C ABI's
    /// `mtls_policy_set_revocation_max_age`): `0` is the default (7 days), a negative value or one
    /// ``validate()`` refuses is ``MTLSError/Code/invalidPolicy``.
    public mutating func setMaxAge(seconds: Int64) throws {
        guard seconds >= 0 else { throw MTLSError(.invalidPolicy, "the revocation maximum age must not be negative (0: the default)") }
        var changed = self
        changed.maxAge = seconds == 0 ? Self.defaultMaxAge : TimeInterval(seconds)
        try changed.validate()
        self = changed
    }

    /// Sets both limits under the options' convention (the C ABI's
    /// `mtls_policy_set_revocation_limits`): `0` is the default (10 MiB, 5 s), a negative
    /// value or one ``validate()`` refuses is ``MTLSError/Code/invalidPolicy``.
    public mutating func setLimits(maxBytes: Int, timeout: Double) throws {
        guard maxBytes >= 0, timeout >= 0 else {
            throw MTLSError(.invalidPolicy, "the revocation limits must not be negative (0: the default)")
        }
        let defaults = RevocationFetchOptions()
        var changed = self
        changed.maxBytes = maxBytes == 0 ? defaults.maxBytes : maxBytes
        changed.timeout = timeout == 0 ? defaults.timeout : timeout
        try changed.validate()
        self = changed
    }

    var limits: HTTPFetcher.Limits { HTTPFetcher.Limits(maxBytes: maxBytes, timeout: timeout) }
}

/// The revocation status of one certificate of a built chain, as an evaluation found it.
public struct RevocationCheck: Sendable, Hashable {
    /// What was found.
    public enum Status: String, Sendable {
        /// Not revoked.
        case good
        /// Revoked.
        case revoked
        /// No source gave an answer (unreachable, stale, unsupported, invalid).
        case unknown
    }

    /// Index in the built chain (0 = leaf).
    public let certIndex: Int
    /// The certificate's subject, for people.
    public let subject: String
    /// What was found.
    public let status: Status
    /// Where the answer came from: `crl` (fetched), `crl_file` (a CRL given to the policy),
    /// `ocsp`, `ocsp_staple`; nil when no source answered.
    public let source: String?
    /// The URL the answer came from (or was looked for at, for an unknown status).
    public let url: String?
    /// When the CRL or response was fetched, and whether this evaluation fetched it (`network`),
    /// found it in memory (`memory`) or in the cache folder (`disk`).
    public let fetchedAt: Date?
    /// Where the CRL or response was found: `network`, `memory` or `disk`.
    public let fetchedFrom: String?
    /// The CRL's or response's thisUpdate and nextUpdate.
    public let thisUpdate: Date?
    /// When the CRL or response says to fetch a new one.
    public let nextUpdate: Date?
    /// For a revoked certificate: when, and why (RFC 5280 reason name), if the CRL says.
    public let revokedAt: Date?
    /// The reason the CRL gives for the revocation (RFC 5280 name), if any.
    public let reason: String?
    /// For an unknown status: what went wrong with each source tried.
    public let error: String?

    /// A check with every field (the evaluation makes them; tests and tools may too).
    public init(certIndex: Int, subject: String, status: Status, source: String? = nil, url: String? = nil,
                fetchedAt: Date? = nil, fetchedFrom: String? = nil, thisUpdate: Date? = nil, nextUpdate: Date? = nil,
                revokedAt: Date? = nil, reason: String? = nil, error: String? = nil) {
        self.certIndex = certIndex
        self.subject = subject
        self.status = status
        self.source = source
        self.url = url
        self.fetchedAt = fetchedAt
        self.fetchedFrom = fetchedFrom
        self.thisUpdate = thisUpdate
        self.nextUpdate = nextUpdate
        self.revokedAt = revokedAt
        self.reason = reason
        self.error = error
    }

    /// As a JSON object.
    public var jsonText: String {
        func str(_ s: String?) -> String { s.map(JSONText.quoted) ?? "null" }
        func date(_ d: Date?) -> String { d.map { JSONText.quoted(RevocationCheck.rfc3339($0)) } ?? "null" }
        return "{\"cert_index\":\(certIndex),\"subject\":\(str(subject)),\"status\":\"\(status.rawValue)\"," +
            "\"source\":\(str(source)),\"url\":\(str(url)),\"fetched_at\":\(date(fetchedAt)),\"fetched_from\":\(str(fetchedFrom))," +
            "\"this_update\":\(date(thisUpdate)),\"next_update\":\(date(nextUpdate)),\"revoked_at\":\(date(revokedAt))," +
            "\"reason\":\(str(reason)),\"error\":\(str(error))}"
    }

    static func rfc3339(_ d: Date) -> String {
        d.formatted(Date.ISO8601FormatStyle())
    }
}

/// What revocation checking did in one evaluation: the mode and one check per certificate below
/// the anchor.
public struct RevocationReport: Sendable, Hashable {
    /// The revocation mode in force.
    public let mode: RevocationMode
    /// The sources tried, in order.
    public let sources: [RevocationSource]
    /// One check per certificate below the anchor, leaf first.
    public let checks: [RevocationCheck]

    /// `{"mode": "hard", "sources": ["crl"], "checks": [...]}`: the `revocation` key of
    /// `mtls verify --json` and `mtls_trust_result_revocation`.
    public var jsonText: String {
        "{\"mode\":\"\(mode.rawValue)\",\"sources\":[\(sources.map { "\"\($0.rawValue)\"" }.joined(separator: ","))]," +
            "\"checks\":[\(checks.map(\.jsonText).joined(separator: ","))]}"
    }
}

/// The process-wide revocation cache, for front ends and tests.
public enum RevocationCache {
    /// Forgets every CRL and OCSP answer cached in memory and every remembered fetch failure. What
    /// was seen stays: a CRL older than one already seen for its URL is still never used.
    public static func clear() {
        CRLStore.shared.clear()
        OCSPCheck.clear()
    }
    /// Network fetches made since the process started or the last ``clear()``.
    public static var fetchCount: Int { CRLStore.shared.fetchCount }
}
