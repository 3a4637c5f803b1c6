import Synchronization
import FoundationEssentials

/// What changed, or failed to, in an identity source or a followed policy file. The raw values
/// are the header's `MTLS_EVENT_*` numbers (HeaderEnumTests compares them).
public enum LifecycleEventKind: Int32, CaseIterable, Sendable {
    /// A new identity is in force (swapped by the application, or replaced in the store).
    case identityRotated = 1
    /// A followed policy file changed and its new settings are in force.
    case policyReloaded = 2
    /// A replacement could not be loaded (a row that fails authentication, a token that is gone,
    /// a policy file that does not parse): the last good one stays in force.
    case reloadFailed = 3
    /// The identity presented (or an anchor) expires within the warning window; from a
    /// ``Renewer``: the identity expires before the next renewal attempt.
    case expiryWarning = 4
    /// A ``Renewer`` worked out when an identity is next renewed (``LifecycleEvent/nextAttempt``):
    /// reported when that time is first known or changes.
    case renewalScheduled = 5
    /// A renewed identity was proven and installed in the store (the event's certificate is the new one).
    case renewalSucceeded = 6
    /// A renewal failed (the CA unreachable or refusing...): ``LifecycleEvent/error`` says why,
    /// ``LifecycleEvent/nextAttempt`` when it is retried (exponential backoff); the old identity stays.
    case renewalFailed = 7
    /// A certificate was issued but not installed: its key does not match or its chain does not
    /// validate under the policy. The old identity stays; retried with backoff like a failure.
    case renewalNotInstalled = 8

    // Revocation (issue 28), numbered from 16, reported by a policy (``TrustPolicy/events``).
    /// Fetching a CRL or an OCSP response failed (unreachable, over a limit, not a CRL, a CRL
    /// that does not verify against the issuer): the label is the URL, the certificate the one
    /// whose status was sought, the error why. Fired once per failed fetch, not per handshake
    /// that finds the failure remembered.
    case revocationFetchFailed = 16
}

/// The expiry warning window of identity sources and followed policies, written once: the
/// Swift initialisers default to it and the C ABI's `mtls_watch_options` reads it.
public enum LifecycleDefaults {
    /// Days before notAfter from which an ``LifecycleEventKind/expiryWarning`` is reported.
    public static let warningDays = 14

    /// A warning window under the options' convention (the C ABI's `warning_days`): `0` is
    /// ``warningDays``; a negative count is ``MTLSError/Code/invalidArgument``.
    public static func warningDays(_ days: Int) throws -> Int {
        guard days >= 0 else { throw MTLSError(.invalidArgument, "warning_days must be 0 (\(warningDays) days) or more, not \(days)") }
        return days == 0 ? warningDays : days
    }
}

/// One lifecycle event.
public struct LifecycleEvent: Sendable {
    /// What happened.
    public var kind: LifecycleEventKind
    /// The store label or policy file path concerned (nil for an identity swapped by the application).
    public var label: String?
    /// The subject of the certificate concerned (rotation, expiry), if any.
    public var subject: String?
    /// Lowercase hex SHA-256 of that certificate, if any.
    public var sha256: String?
    /// Its notAfter, if any.
    public var notAfter: Date?
    /// For ``LifecycleEventKind/reloadFailed``: why.
    public var error: MTLSError?
    /// One line saying what happened (the library's events never hold a line break: a label or
    /// a common name in them has its control characters as blanks).
    public var message: String
    /// For renewal events: when the next renewal attempt is due, if one is planned.
    public var nextAttempt: Date? = nil

    /// An event about `certificate` (its subject, SHA-256 and notAfter are copied), if any.
    public init(kind: LifecycleEventKind, label: String? = nil, certificate: Certificate? = nil, error: MTLSError? = nil, message: String,
                nextAttempt: Date? = nil) {
        self.nextAttempt = nextAttempt
        self.kind = kind
        self.label = label
        subject = certificate?.subject
        sha256 = certificate?.sha256Hex
        notAfter = certificate?.notAfter
        self.error = error
        self.message = OneLine.text(message)
    }
}

/// Where lifecycle events go: one handler (replaced by setting another). Handlers run on the
/// library's watcher thread (`mtls-watch`) for changes it finds, and on the calling thread for a
/// swap the application makes (``IdentitySource/replace(with:)``).
public final class LifecycleEvents: Sendable {
    private let handler = Locked<(@Sendable (LifecycleEvent) -> Void)?>(nil)
    /// Run once, when a handler is first set: a fixed identity source starts being watched
    /// (for its expiry) only when someone listens.
    package let onFirstHandler = Locked<(@Sendable () -> Void)?>(nil)

    /// No handler: events are dropped until one is set.
    public init() {}

    /// Sets (nil: clears) the handler. The previous one is released once no event is being
    /// delivered to it.
    public func setHandler(_ h: (@Sendable (LifecycleEvent) -> Void)?) {
        let old = handler.withLock { cur -> (@Sendable (LifecycleEvent) -> Void)? in
            let o = cur
            cur = h
            return o
        }
        _ = old // released outside the lock
        if h != nil, let first = onFirstHandler.withLock({ f -> (@Sendable () -> Void)? in defer { f = nil }; return f }) {
            first()
        }
    }

    package func emit(_ event: LifecycleEvent) {
        // Called outside the lock: a handler may set another handler.
        handler.withLock { $0 }?(event)
    }
}
