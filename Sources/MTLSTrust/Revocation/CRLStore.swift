internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A CRL fetched from a distribution point, verified against an issuer, kept while it is current
/// (``RevocationFreshness``: until its nextUpdate, or its thisUpdate plus the maximum age).
package final class FetchedCRL: Sendable {
    /// Owns the parsed `X509_CRL` (only read after parsing).
    package let list: RevocationList
    let url: String
    let fetchedAt: Date
    var thisUpdate: Date { list.thisUpdate }
    var nextUpdate: Date? { list.nextUpdate }
    /// The issuer it was verified against (its signature is checked once, when fetched or read
    /// from disk), also for refreshing it in the background.
    let issuer: Certificate

    init(list: RevocationList, url: String, fetchedAt: Date, issuer: Certificate) {
        self.list = list
        self.url = url
        self.fetchedAt = fetchedAt
        self.issuer = issuer
    }

    /// Until when it is current under the maximum age `maxAge`.
    func validUntil(maxAge: TimeInterval) -> Date {
        RevocationFreshness.validUntil(thisUpdate: thisUpdate, nextUpdate: nextUpdate, maxAge: maxAge)
    }
}

/// One fetch under way, which other evaluations needing the same URL wait for (single flight).
final class RevocationFlight: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var done = false  // guarded by mutex

    init() {
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        cond.deallocate()
    }

    func finish() {
        pthread_mutex_lock(mutex)
        done = true
        pthread_cond_broadcast(cond)
        pthread_mutex_unlock(mutex)
    }

    /// Waits until the fetch finished or `seconds` passed; true when it finished.
    func wait(seconds: Double) -> Bool {
        var end = timespec()
        clock_gettime(CLOCK_MONOTONIC, &end)
        let total = Double(end.tv_sec) + Double(end.tv_nsec) / 1e9 + max(0, seconds)
        end.tv_sec = Int(total)
        end.tv_nsec = Int((total - Double(Int(total))) * 1e9)
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !done {
            if pthread_cond_timedwait(cond, mutex, &end) == ETIMEDOUT { return done }
        }
        return true
    }
}

/// The process-wide CRL cache: per URL, the latest verified CRL until its nextUpdate, in memory
/// and (when the policy names a folder) on disk, files 0600; fetches are single-flight (all the
/// evaluations needing one URL at once make one request) and refreshed in the background before
/// nextUpdate. A failed fetch is remembered for ``failureRetryInterval`` so that a dead server
/// costs one time limit, not one per handshake.
package final class CRLStore: Sendable {
    static let shared = CRLStore()

    /// How long a failed fetch is remembered before the URL is tried again.
    package static let failureRetryInterval: TimeInterval = 10
    /// Most URLs kept in memory.
    static let maxEntries = 512
    /// Most background refreshes at once.
    static let maxRefreshes = 4

    private struct State {
        var entries: [String: FetchedCRL] = [:]
        var failures: [String: (at: Date, problem: RevocationProblem)] = [:]
        /// Per URL, the nextUpdate of the stale CRL last reported: the same stale CRL served
        /// again at the next retry is not reported again (a fresh one, or another stale one, is).
        var staleReported: [String: Date] = [:]
        var flights: [String: RevocationFlight] = [:]
        /// Per URL and issuer, the newest CRL seen (verified) since the process started, kept through
        /// ``clear()``: a CRL older than it (``CRLCheck/isOlder(_:than:)``) read from the cache
        /// folder or served again is never used in its place.
        var newest: [String: RevocationList] = [:]
        var refreshing = 0
        /// Network fetches made (for tests and benchmarks: single flight makes one per URL).
        var fetches = 0
    }
    private let state = Locked(State())

    /// Moves whenever what the cache holds changes (a CRL stored or replaced, a failure
    /// remembered, the cache cleared) or an OCSP answer is cached: an evaluation's revocation
    /// outcome memoized under one generation (``EvaluationCache``) is reused only while it
    /// stays the same.
    static let generation = Atomic<UInt64>(0)
    static func changed() { generation.add(1, ordering: .releasing) }

    /// Network fetches made since the process started (or the last ``clear()``).
    var fetchCount: Int { state.withLock { $0.fetches } }

    /// Forgets every cached CRL and failure (the files of cache folders stay, and so does the
    /// newest CRL seen per URL: an older one is still never used).
    func clear() {
        state.withLock { $0.entries = [:]; $0.failures = [:]; $0.staleReported = [:]; $0.fetches = 0 }
        Self.changed()
    }

    /// A CRL from `url` verified against `issuer` for `time`, and where it came from (`memory`,
    /// `disk`, `network`). Throws a ``RevocationProblem`` saying why there is none. A fetch this
    /// call makes that fails is reported to `events` (``LifecycleEventKind/revocationFetchFailed``,
    /// about `subject`, the certificate whose status is sought), once per failed fetch.
    func crl(url: String, issuer: Certificate, options: RevocationFetchOptions, time: Date,
             subject: Certificate? = nil, events: LifecycleEvents? = nil) throws -> (FetchedCRL, String) {
        var deadline: Deadline? = nil
        while true {
            enum Step { case use(FetchedCRL), fail(RevocationProblem), wait(RevocationFlight), lead(RevocationFlight) }
            let now = Date()
            let step: Step = state.withLock { s in
                // The issuer compared by its DER (no digest computed on the warm path).
                if let e = s.entries[url], e.validUntil(maxAge: options.maxAge) > now, e.issuer.der == issuer.der { return .use(e) }
                if let f = s.flights[url] { return .wait(f) }
                if let f = s.failures[url], now.timeIntervalSince(f.at) < Self.failureRetryInterval { return .fail(f.problem) }
                let f = RevocationFlight()
                s.flights[url] = f
                return .lead(f)
            }
            switch step {
            case .use(let e):
                // Verified against this issuer when it was loaded (the digest matched): only its
                // dates depend on the evaluation time.
                try CRLCheck.checkDates(thisUpdate: e.thisUpdate, nextUpdate: e.nextUpdate, maxAge: options.maxAge, time: time)
                maybeRefresh(e, options: options, subject: subject, events: events)
                return (e, "memory")
            case .fail(let problem):
                throw RevocationProblem(problem.description + " (remembered for \(Int(Self.failureRetryInterval)) s)",
                                        code: problem.code)
            case .wait(let f):
                if deadline == nil { deadline = Deadline(seconds: options.timeout) }
                guard let deadline else { continue }
                let left = Double(deadline.pollTimeout) / 1000
                if deadline.pollTimeout == 0 || !f.wait(seconds: left) {
                    throw RevocationProblem("\(url): timed out waiting for the fetch under way (limit \(options.timeout) s)")
                }
                // The leader stored its CRL or its failure: look again.
                continue
            case .lead(let f):
                defer {
                    state.withLock { $0.flights[url] = nil }
                    f.finish()
                }
                do {
                    let (e, origin) = try load(url: url, issuer: issuer, options: options, time: time)
                    state.withLock { s in
                        if s.entries.count >= Self.maxEntries, let oldest = s.entries.min(by: { $0.value.fetchedAt < $1.value.fetchedAt })?.key {
                            s.entries[oldest] = nil
                        }
                        s.entries[url] = e
                        s.failures[url] = nil
                        s.staleReported[url] = nil
                    }
                    Self.changed()
                    return (e, origin)
                } catch {
                    let problem = RevocationProblem.from(error)
                    // A stale CRL (served again at each retry) is reported once per staleness.
                    let report: Bool = state.withLock { s in
                        s.failures[url] = (Date(), problem)
                        guard let stale = problem.staleNextUpdate else { s.staleReported[url] = nil; return true }
                        if s.staleReported[url] == stale { return false }
                        s.staleReported[url] = stale
                        return true
                    }
                    Self.changed()
                    if report {
                        RevocationEvents.fetchFailed(events, what: problem.staleNextUpdate == nil ? "fetching the CRL" : "fetching a fresh CRL (the one served is stale)",
                                                     url: url, certificate: subject ?? issuer, issuer: issuer, problem: problem)
                    }
                    throw problem
                }
            }
        }
    }

    /// The cache folder's file for `url`.
    static func cacheFile(_ dir: String, _ url: String) -> String {
        dir + "/" + Encoding.hex(Encoding.sha256(Array(url.utf8))) + ".crl"
    }

    /// From the cache folder when it holds a current CRL of this issuer no older than the newest
    /// seen, else from the network.
    private func load(url: String, issuer: Certificate, options: RevocationFetchOptions, time: Date) throws -> (FetchedCRL, String) {
        let dir = options.cacheDirectory.flatMap { Self.usableCacheDirectory($0) }
        if let dir, let e = readCached(Self.cacheFile(dir, url), url: url, issuer: issuer, options: options, time: time) {
            return (e, "disk")
        }
        state.withLock { $0.fetches += 1 }
        let body: [UInt8]
        do { body = try HTTPFetcher.get(url, limits: options.limits) } catch let e as MTLSError {
            throw RevocationProblem(e.message, code: e.code)
        }
        let e = try Self.accept(body, url: url, issuer: issuer, time: time, maxAge: options.maxAge)
        if let seen = olderThanSeen(e.list, url: url, issuer: issuer) {
            throw RevocationProblem("\(url): the CRL served is older than one already seen (thisUpdate \(RevocationCheck.rfc3339(seen.thisUpdate))"
                                    + (seen.number.map { ", CRL number 0x\(Encoding.hex($0))" } ?? "") + "): a replayed CRL?")
        }
        if let dir {
            // Best effort: a cache folder that cannot be written costs a refetch after a restart.
            try? FileIO.writeAtomically(Self.cacheFile(dir, url), e.list.der, mode: 0o600)
        }
        return (e, "network")
    }

    /// What `url` served, as a CRL of `issuer` usable at `time` (parsed, verified, current under
    /// the one freshness rule). The fetch path and the fuzz target both go through it.
    package static func accept(_ body: [UInt8], url: String, issuer: Certificate, time: Date,
                       maxAge: TimeInterval = RevocationFetchOptions.defaultMaxAge) throws -> FetchedCRL {
        guard let list = try? RevocationList.parseAll(body).first else {
            throw RevocationProblem("\(url) did not serve a CRL (\(body.count) bytes that are neither DER nor PEM CRL)", code: .parse)
        }
        do { try CRLCheck.verify(list.crl, issuer: issuer, time: time, maxAge: maxAge) } catch let p as RevocationProblem {
            throw RevocationProblem("\(url): \(p.description)", code: p.code, staleNextUpdate: p.staleNextUpdate)
        }
        return FetchedCRL(list: list, url: url, fetchedAt: Date(), issuer: issuer)
    }

    /// The cache folder `dir` when it may be used (``FileIO/privateDirectory(_:what:)``: created
    /// 0700, else the user's and writable by no one else); nil with a warning when not.
    static func usableCacheDirectory(_ dir: String) -> String? {
        do {
            try FileIO.privateDirectory(dir, what: "the revocation cache folder")
            return dir
        } catch {
            let m = (error as? MTLSError)?.message ?? "\(error)"
            LibraryWarnings.emit("revocation: \(m) (CRLs are fetched and kept in memory only)")
            return nil
        }
    }

    /// The CRL of the cache file `file`: read only if it is a regular file (a FIFO or device is
    /// not waited on, a symbolic link not followed), current, issued by `issuer` and no older
    /// than the newest seen for `url`; else nil.
    private func readCached(_ file: String, url: String, issuer: Certificate, options: RevocationFetchOptions,
                            time: Date) -> FetchedCRL? {
        guard let bytes = try? FileIO.readRegularFile(file, limit: options.maxBytes, followLinks: false),
              let list = try? RevocationList.parseAll(bytes).first,
              (try? CRLCheck.verify(list.crl, issuer: issuer, time: time, maxAge: options.maxAge)) != nil,
              olderThanSeen(list, url: url, issuer: issuer) == nil else { return nil }
        return FetchedCRL(list: list, url: url, fetchedAt: Self.modificationTime(file) ?? Date(), issuer: issuer)
    }

    /// The newest CRL seen for `url` when `list` is older than it (nil: `list` may be used, and
    /// is now the newest seen).
    private func olderThanSeen(_ list: RevocationList, url: String, issuer: Certificate) -> RevocationList? {
        let key = url + "|" + issuer.sha256Hex
        return state.withLock { s in
            if let seen = s.newest[key], CRLCheck.isOlder(list, than: seen) { return seen }
            if s.newest.count >= Self.maxEntries * 4 { s.newest.removeAll() }
            s.newest[key] = list
            return nil
        }
    }

    private static func modificationTime(_ file: String) -> Date? {
        var st = stat()
        guard lstat(file, &st) == 0 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(st.st_mtim.tv_sec))
    }

    /// Starts a background fetch when `e` is in the last tenth of its life (at least the last
    /// minute), so handshakes keep finding a fresh CRL; at most ``maxRefreshes`` at once, one per
    /// URL (the flight).
    private func maybeRefresh(_ e: FetchedCRL, options: RevocationFetchOptions, subject: Certificate?, events: LifecycleEvents?) {
        let until = e.validUntil(maxAge: options.maxAge)
        let life = until.timeIntervalSince(e.thisUpdate)
        let refreshAt = until.addingTimeInterval(-max(60, life / 10))
        guard Date() >= refreshAt else { return }
        let url = e.url
        let start: RevocationFlight? = state.withLock { s in
            guard s.flights[url] == nil, s.refreshing < Self.maxRefreshes else { return nil }
            let f = RevocationFlight()
            s.flights[url] = f
            s.refreshing += 1
            return f
        }
        guard let flight = start else { return }
        let issuer = e.issuer
        let spawned = BackgroundThread.start(name: "mtls-revocation") { [self] in
            defer {
                state.withLock { $0.flights[url] = nil; $0.refreshing -= 1 }
                flight.finish()
            }
            do {
                let fresh = try fetchFresh(url: url, issuer: issuer, options: options)
                state.withLock { $0.entries[url] = fresh }
                Self.changed()
            } catch {
                // The CRL in hand stays in use until its nextUpdate; the failure is reported.
                RevocationEvents.fetchFailed(events, what: "refreshing the CRL", url: url, certificate: subject ?? issuer,
                                             issuer: issuer, problem: RevocationProblem.from(error))
            }
        }
        if !spawned {
            state.withLock { $0.flights[url] = nil; $0.refreshing -= 1 }
            flight.finish()
        }
    }

    /// A network fetch for a background refresh (never from the cache folder, which holds the
    /// CRL being replaced).
    private func fetchFresh(url: String, issuer: Certificate, options: RevocationFetchOptions) throws -> FetchedCRL {
        var o = options
        o.cacheDirectory = nil
        let (e, _) = try load(url: url, issuer: issuer, options: o, time: Date())
        if let dir = options.cacheDirectory.flatMap({ Self.usableCacheDirectory($0) }) {
            try? FileIO.writeAtomically(Self.cacheFile(dir, url), e.list.der, mode: 0o600)
        }
        return e
    }
}
