import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// One renewal attempt a ``Renewer`` made (or found not due).
public struct RenewalAttempt: Sendable {
    /// The identity's label.
    public var label: String
    /// What ``Enrollment/renew(store:label:force:policy:tokenPIN:externalAccount:caKeyPassword:options:now:)`` did, when it did not fail.
    public var outcome: RenewalOutcome?
    /// Why it failed, if it did (the old identity stays).
    public var error: MTLSError?
    /// Failures in a row, this one included (0 after a success or a "not due").
    public var failures: Int
    /// When this label is looked at again.
    public var nextAttempt: Date
    /// The current identity expires before ``nextAttempt``.
    public var expiresBeforeNextAttempt: Bool
}

/// Renews the enrolled identities of a store, and reports what it does as lifecycle events
/// (``LifecycleEventKind/renewalScheduled``, ``LifecycleEventKind/renewalSucceeded``,
/// ``LifecycleEventKind/renewalFailed``, ``LifecycleEventKind/renewalNotInstalled``, and
/// ``LifecycleEventKind/expiryWarning`` when an identity expires before the next attempt),
/// through the same ``LifecycleEvents`` handler mechanism as rotation.
///
/// Each ``runOnce(force:now:)`` looks at every label whose next attempt has come: renews it when
/// due (two thirds of its lifetime with jitter, or the ACME server's renewal window), backs off
/// exponentially after a failure (``Enrollment/backoff(attempt:base:cap:)``). Each label is
/// renewed on its own schedule and its own thread, so a CA that does not answer delays no other
/// label: the others are renewed, and their events delivered, while it is waited for (every
/// exchange with a CA ends within the one HTTP client's deadline). Events are delivered on the
/// calling thread, as they happen. One pass at a time (calls are serialised); ``runLoop(force:checkInterval:until:)``
/// keeps every label on its own schedule for as long as it runs (`mtls renew --loop`).
public final class Renewer: Sendable {
    /// Where the renewal events go.
    public let events = LifecycleEvents()
    /// The store the identities and their records are in.
    public let store: CredentialStore
    /// The label renewed; nil: every enrolled identity of the store (read again at each pass).
    public let label: String?
    let policy: TrustPolicy?
    let tokenPIN: SecretBytes?
    let caKeyPassword: SecretBytes?
    let options: RenewalOptions

    private struct LabelState {
        var failures = 0
        var nextAttempt: Date = .distantPast
        var scheduledReported: Date?
    }
    private let state = Locked<[String: LabelState]>([:])
    private let pass = Locked<Void>(())
    /// Labels being renewed now (each by one thread at a time).
    private let inFlight = Locked<Set<String>>([])
    /// Events the attempts made, waiting to be delivered on the thread that runs the renewer.
    private let pending = Locked<[LifecycleEvent]>([])
    /// Attempts ended, by label, waiting to be returned by ``runOnce(force:now:)``.
    private let done = Locked<[String: RenewalAttempt]>([:])

    /// Renews `label` (nil: every enrolled identity) of `store`; a renewed chain must validate
    /// under `policy` (nil: the anchors recorded at enrollment). `tokenPIN` unlocks token keys,
    /// `caKeyPassword` a local pki directory's CA keys.
    public init(store: CredentialStore, label: String? = nil, policy: TrustPolicy? = nil, tokenPIN: SecretBytes? = nil,
                caKeyPassword: SecretBytes? = nil, options: RenewalOptions = RenewalOptions()) {
        self.store = store
        self.label = label
        self.policy = policy
        self.tokenPIN = tokenPIN
        self.caKeyPassword = caKeyPassword
        self.options = options
    }

    /// One pass over the labels whose next attempt has come (`force`: renew those now, due or
    /// not), each on its own thread. Returns an attempt per label looked at (a label still being
    /// renewed by ``runLoop(force:checkInterval:until:)`` is not looked at again); events are
    /// emitted on this thread as each attempt ends.
    @discardableResult
    public func runOnce(force: Bool = false, now: Date = Date()) throws -> [RenewalAttempt] {
        try pass.withLock { _ in
            var waiting = try label.map { [$0] } ?? store.enrolledLabels()
            var started: [String] = []
            while true {
                // At most ``maxConcurrentRenewals`` at once; the others as those end.
                let room = Renewer.maxConcurrentRenewals - inFlight.withLock { $0.count }
                if room > 0, !waiting.isEmpty {
                    let next = Array(waiting.prefix(room))
                    waiting.removeFirst(next.count)
                    started += start(next, force: force, now: now)
                }
                deliver()
                if waiting.isEmpty && done.withLock({ d in started.allSatisfy { d[$0] != nil } }) { break }
                usleep(5_000)
            }
            deliver()
            return done.withLock { d in started.compactMap { d.removeValue(forKey: $0) } }
        }
    }

    /// Renews every label when due, each on its own schedule and thread, until `stop()` says so
    /// (checked at least every 250 ms); the labels are read again every `checkInterval` seconds.
    /// `force` renews each label once now. Events are delivered on this thread as they happen.
    /// Reading the store's labels failing ends the loop with that error.
    public func runLoop(force: Bool = false, checkInterval: Double = Renewer.defaultCheckInterval,
                        until stop: @Sendable () -> Bool = { false }) throws {
        var labels: [String] = []
        var lastLook = -Double.infinity
        var forced: Set<String> = []
        while !stop() {
            let now = Deadline.now()
            if now - lastLook >= checkInterval {
                labels = try label.map { [$0] } ?? store.enrolledLabels()
                lastLook = now
            }
            let toForce = force ? labels.filter { !forced.contains($0) } : []
            forced.formUnion(toForce)
            _ = start(toForce, force: true, now: Date())
            _ = start(labels.filter { !toForce.contains($0) }, force: false, now: Date())
            done.withLock { $0.removeAll() }
            deliver()
            usleep(100_000)
            deliver()
        }
    }

    /// Starts an attempt for each label due (or all, with `force`) that is not already under
    /// way; returns the labels started. Each ends with its result in ``done``.
    private func start(_ labels: [String], force: Bool, now: Date) -> [String] {
        var started: [String] = []
        for l in labels where inFlight.withLock({ $0.count }) < Renewer.maxConcurrentRenewals {
            let st = state.withLock { $0[l] ?? LabelState() }
            guard force || st.nextAttempt <= now else { continue }
            guard inFlight.withLock({ $0.insert(l).inserted }) else { continue }
            started.append(l)
            let work: @Sendable () -> Void = { [self] in
                let result = attempt(l, st, force: force, now: now) { e in pending.withLock { $0.append(e) } }
                done.withLock { $0[l] = result }
                _ = inFlight.withLock { $0.remove(l) }
            }
            if !BackgroundThread.start(name: "mtls-renew", work) { work() }
        }
        return started
    }

    /// Emits, on this thread, the events the attempts have made so far.
    private func deliver() {
        let events = pending.withLock { p in defer { p.removeAll() }; return p }
        for e in events { self.events.emit(e) }
    }

    /// When the earliest next attempt is (nil before the first pass).
    public var nextWake: Date? { state.withLock { $0.values.map(\.nextAttempt).min() } }

    private func attempt(_ l: String, _ previous: LabelState, force: Bool, now: Date,
                         emit: (LifecycleEvent) -> Void) -> RenewalAttempt {
        var st = previous
        do {
            let outcome = try Enrollment.renew(store: store, label: l, force: force, policy: policy, tokenPIN: tokenPIN,
                                               caKeyPassword: caKeyPassword, options: options, now: now)
            st.failures = 0
            let cert = outcome.result?.certificate ?? outcome.current
            // When the (new) certificate is due; the next look may come earlier (below).
            let due = outcome.renewed ? Enrollment.dueDate(cert) : outcome.dueAt
            var next = due
            if let again = outcome.checkAgainAt { next = min(next, again) }
            // A server with renewal information may move the window (a mass revocation): ask it
            // again within ``Renewer/renewalInfoPollInterval`` even when it gave no Retry-After.
            if outcome.renewalInfo != nil { next = min(next, now.addingTimeInterval(Renewer.renewalInfoPollInterval)) }
            st.nextAttempt = next
            if let r = outcome.result {
                emit(LifecycleEvent(kind: .renewalSucceeded, label: l, certificate: r.certificate,
                                           message: "\(l) renewed: serial \(r.certificate.serialHex) until \(Renewer.text(r.certificate.notAfter))",
                                           nextAttempt: next))
            }
            // Reported when first known and when it moves (a new certificate, a moved window).
            if st.scheduledReported != due {
                st.scheduledReported = due
                let why = outcome.renewalInfo != nil ? "in the ACME server's renewal window" : "two thirds of its lifetime"
                emit(LifecycleEvent(kind: .renewalScheduled, label: l, certificate: cert,
                                           message: "\(l) is due for renewal at \(Renewer.text(due)) (\(why))", nextAttempt: due))
            }
            state.withLock { $0[l] = st }
            return RenewalAttempt(label: l, outcome: outcome, error: nil, failures: 0, nextAttempt: st.nextAttempt,
                                  expiresBeforeNextAttempt: cert.notAfter < st.nextAttempt)
        } catch {
            let e = (error as? MTLSError) ?? MTLSError(.internal, "\(error)")
            st.failures += 1
            st.nextAttempt = now.addingTimeInterval(Enrollment.backoff(attempt: st.failures, base: options.backoffBase,
                                                                       cap: options.backoffCap))
            st.scheduledReported = nil
            state.withLock { $0[l] = st }
            let current = try? store.info(label: l)
            let kind: LifecycleEventKind = Enrollment.isNotInstalled(e) ? .renewalNotInstalled : .renewalFailed
            emit(LifecycleEvent(kind: kind, label: l, error: e,
                                       message: "renewing \(l) failed (attempt \(st.failures), next at \(Renewer.text(st.nextAttempt))): \(e.message)",
                                       nextAttempt: st.nextAttempt))
            let expiresFirst = current.map { $0.notAfter < st.nextAttempt } ?? false
            if expiresFirst, let current {
                var warning = LifecycleEvent(kind: .expiryWarning, label: l,
                                             message: "\(l) expires at \(Renewer.text(current.notAfter)), before the next renewal attempt",
                                             nextAttempt: st.nextAttempt)
                warning.subject = current.subject
                warning.sha256 = current.leafSHA256
                warning.notAfter = current.notAfter
                emit(warning)
            }
            return RenewalAttempt(label: l, outcome: nil, error: e, failures: st.failures, nextAttempt: st.nextAttempt,
                                  expiresBeforeNextAttempt: expiresFirst)
        }
    }

    /// The most labels renewed at once (each on a thread of its own); the others wait their turn.
    public static let maxConcurrentRenewals = 16

    /// Longest time between two looks at an ACME server's renewal information (6 h, RFC 9773 §4.3's suggestion).
    public static let renewalInfoPollInterval: Double = 6 * 3600

    /// How often a long-running renewal loop (`mtls renew --loop`) looks at the store when
    /// nothing is due sooner (``nextWake``), by default: an hour, so an identity enrolled or
    /// changed by another process is picked up within the hour.
    public static let defaultCheckInterval: Double = 3600
    /// The check intervals a renewal loop accepts, in seconds: a second to 30 days.
    public static let checkIntervals: ClosedRange<Double> = 1...(30 * 86400)

    static func text(_ d: Date) -> String { d.formatted(Date.ISO8601FormatStyle()) }
}
