internal import COpenSSL
import FoundationEssentials

/// What a TLS session is bound to: resuming it skips the certificate exchange, so it may stand
/// for a trust decision only where that decision would be made the same way again — under the
/// same policy object and version, with the same peer and the same identity. Every session
/// libmtls lets resume carries one (its own clients' cache, its listener's tickets, and the
/// sessions of an application's `SSL_CTX` on both sides); a session whose binding differs from
/// the one in force for a new handshake is not resumed, and a full handshake, evaluated under
/// the policy in force, follows.
///
/// Per-connection trust overrides (anchors, pins, verify-as given for one connection rather than
/// by the policy) change the decision as much as the policy does: they are one more field,
/// hashed into ``digest`` like the others, and the re-check before resuming applies them.
package struct ResumptionBinding: Hashable, Sendable {
    /// The policy object (``TrustPolicy/instance``, unique in the process) and the version of its
    /// settings: any change to the policy, including ``TrustPolicy/replaceSettings(from:)``,
    /// makes earlier sessions stale.
    var policyInstance: UInt64
    var policyVersion: UInt64
    /// The peer. A client: the host and port reached (they select the host rule), the SNI sent
    /// and the verify-as name (the name checked). A server: the address its client connected
    /// from, which selects the client's rule.
    var host: String?
    var port: Int?
    var sni: String?
    var verifyAs: String?
    /// The SHA-256 of the leaf of each identity this side may present (none: no identity).
    var identities: [[UInt8]]
    /// What else separates sessions in one process: for an application's server `SSL_CTX`, the
    /// context they were made in (what its session id context is for).
    var context: String
    /// The overrides on top of the policy for this peer (nil: none).
    var overrides: TrustOverrides? {
        get { overridesBox?.value }
        set { overridesBox = newValue.map(OverridesBox.init) }
    }
    /// Kept apart: most connections have none, and a binding lives as long as its session's
    /// tickets (issue 40: 8 bytes inline instead of 48). Equal and hashed by value.
    private var overridesBox: OverridesBox?
    private final class OverridesBox: Hashable, Sendable {
        let value: TrustOverrides
        init(_ value: TrustOverrides) { self.value = value }
        static func == (a: OverridesBox, b: OverridesBox) -> Bool { a.value == b.value }
        func hash(into h: inout Hasher) { h.combine(value) }
    }

    package init(policy: TrustPolicy, peer: TrustPeer, identities: [[UInt8]], context: String = "", overrides: TrustOverrides? = nil) {
        policyInstance = policy.instance
        policyVersion = policy.version
        host = peer.host
        port = peer.port
        sni = peer.sni
        verifyAs = peer.verifyAs
        self.identities = identities
        self.context = context
        self.overrides = overrides.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// 32 bytes that stand for the whole binding: what a session id context (at most
    /// `SSL_MAX_SID_CTX_LENGTH`, 32 bytes) and a ticket carry. Each field is length-prefixed, so
    /// no two bindings encode alike.
    package var digest: [UInt8] {
        var text: [UInt8] = Array("libmtls resumption v1".utf8)
        func field(_ bytes: [UInt8]) {
            let n = UInt32(bytes.count)
            text += [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)]
            text += bytes
        }
        field(Array(String(policyInstance).utf8))
        field(Array(String(policyVersion).utf8))
        field(host.map { Array(("h" + $0).utf8) } ?? [])
        field(port.map { Array(String($0).utf8) } ?? [])
        field(sni.map { Array(("s" + $0).utf8) } ?? [])
        field(verifyAs.map { Array(("v" + $0).utf8) } ?? [])
        field(Array(String(identities.count).utf8))
        for i in identities { field(i) }
        field(Array(context.utf8))
        field(overrides.map { Array(("o" + $0.cacheKey).utf8) } ?? [])
        return Encoding.sha256(text)
    }
}

/// One evaluation of a peer's chain, held once by the connection that made it (its
/// ``TLSHandshakeState``) and by the ``ResumptionRecord`` its session and tickets carry: a
/// reference each, not a copy each (issue 40: memory per idle connection).
package final class SharedEvaluation: Sendable {
    package let result: TrustResult
    package init(_ result: TrustResult) { self.result = result }
}

/// A session's binding with what is needed to re-check it before it is resumed: the chain the
/// peer presented at the full handshake, the evaluation made then, and how long that evaluation's
/// answer stands (``EvaluationStanding``). With the last, the re-check is a few comparisons.
package final class ResumptionRecord: Sendable {
    let binding: ResumptionBinding
    /// The chain the peer presented, leaf first; empty when it presented none (a client of a
    /// server that asks for a certificate without requiring one).
    let presentedChain: [Certificate]
    /// The evaluation made at the full handshake (shared with the connection that made it).
    let evaluated: SharedEvaluation?
    var evaluation: TrustResult? { evaluated?.result }
    /// Until when `evaluation` stands under `binding`'s policy version (nil: it must be made again).
    let standing: EvaluationStanding?
    /// The SHA-256 of `binding` (``ResumptionBinding/digest``), made once for the tickets that
    /// carry it, kept inline (32 bytes, no array of their own); nil where no ticket is issued
    /// for the record.
    private let digestWords: (UInt64, UInt64, UInt64, UInt64)?

    package convenience init(binding: ResumptionBinding, presentedChain: [Certificate], evaluation: TrustResult?,
                             standing: EvaluationStanding? = nil, withDigest: Bool = false) {
        self.init(binding: binding, presentedChain: presentedChain, evaluated: evaluation.map(SharedEvaluation.init),
                  standing: standing, withDigest: withDigest)
    }

    package init(binding: ResumptionBinding, presentedChain: [Certificate], evaluated: SharedEvaluation?,
                 standing: EvaluationStanding? = nil, withDigest: Bool = false) {
        self.binding = binding
        self.presentedChain = presentedChain
        self.evaluated = evaluated
        self.standing = standing
        var words: (UInt64, UInt64, UInt64, UInt64)? = nil
        if withDigest {
            let digest = binding.digest
            var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            if digest.count == MemoryLayout.size(ofValue: w) {
                withUnsafeMutableBytes(of: &w) { dst in digest.withUnsafeBytes { dst.copyMemory(from: $0) } }
                words = w
            }
        }
        digestWords = words
    }

    /// Whether tickets can carry this record (it has the binding's digest).
    var hasDigest: Bool { digestWords != nil }

    /// The binding's digest as an array (nil: none), for tests and logs.
    var digest: [UInt8]? { withDigest { Array($0) } }

    /// Calls `body` with the binding's digest (32 bytes); nil when the record has none.
    func withDigest<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R? {
        guard let words = digestWords else { return nil }
        return withUnsafeBytes(of: words) { body($0) }
    }

    /// What ``admit(under:policy:peer:purpose:)`` lets resume: the evaluation the resumed
    /// connection reports (nil when the peer presented no certificate), and the record that
    /// carries it — this one, or a new one with a fresh evaluation — for the tickets the
    /// resumed connection is given.
    package struct Admission {
        package let record: ResumptionRecord
        /// The record's evaluation.
        package var evaluation: TrustResult? { record.evaluation }
    }

    /// Whether the session may resume under `current` (the binding in force for the new
    /// handshake). The bindings must be equal: the same policy object and version, peer,
    /// identity and overrides. Then the evaluation must still stand at the policy's time (the
    /// policy's fixed time, else now): a certificate that expired, or a host rule whose pins
    /// expired and that fails closed, since the session was made refuses a full handshake, so it
    /// refuses the resumption too. Within the evaluation's window (``EvaluationStanding``) its
    /// answer is the one a new evaluation would give, so it is reused as it is; outside it, or
    /// where it has no window (revocation checked, CRLs, a report-only rule that reports), the
    /// presented chain is evaluated again under `policy`. Returns nil when the session must not
    /// resume.
    package func admit(under current: ResumptionBinding, policy: TrustPolicy, peer: TrustPeer,
               purpose: TrustPurpose) -> Admission? {
        guard binding == current else { return nil }
        guard evaluated != nil else { return Admission(record: self) }
        if let standing, standing.holds(at: Date()) { return Admission(record: self) }
        guard !presentedChain.isEmpty else { return nil }
        let (fresh, standing) = policy.verifyPeer(chain: presentedChain, peer: peer, purpose: purpose,
                                                  overrides: current.overrides)
        guard fresh.trusted else { return nil }
        let record = ResumptionRecord(binding: binding, presentedChain: presentedChain, evaluation: fresh,
                                      standing: standing, withDigest: hasDigest)
        return Admission(record: record)
    }

    /// The latest moment (real time) until which the evaluation of this session can stay as it
    /// was: the earliest notAfter of the chain judged, the pin expiry of a `fail_closed` rule
    /// that applies to `peer`, and the earliest nextUpdate of the revocation information used. Nil when nothing bounds it, or when the policy has a fixed time
    /// (its evaluations do not move with the clock). Used where OpenSSL decides resumption alone
    /// (an application server's session cache): the session's timeout is cut to it.
    static func horizon(of evaluation: TrustResult, policy: TrustPolicy, peer: TrustPeer) -> Date? {
        guard policy.time == nil else { return nil }
        var until = evaluation.chain.map(\.notAfter).min()
        if let rule = policy.hostRule(for: peer), !rule.pins.isEmpty, rule.afterExpiry == .failClosed,
           let expiry = rule.pinsExpire {
            until = min(until ?? expiry, expiry)
        }
        // Revocation: the session stands for "not revoked" only as long as what said so is
        // current — the earliest moment a CRL or OCSP response used goes stale (RevocationFreshness); a status that
        // was unknown (soft mode) is looked at again once a failed fetch is retried.
        if let report = evaluation.revocation {
            for check in report.checks {
                let maxAge = policy.revocationFetch.maxAge
                let bound: Date? = check.status == .unknown
                    ? Date().addingTimeInterval(CRLStore.failureRetryInterval)
                    : check.thisUpdate.map { RevocationFreshness.validUntil(thisUpdate: $0, nextUpdate: check.nextUpdate, maxAge: maxAge) }
                if let bound { until = min(until ?? bound, bound) }
            }
        }
        return until
    }
}

/// Resumption in an application's own `SSL_CTX`, where OpenSSL — not libmtls — keeps and offers
/// the sessions (nginx's and Apache's server session caches and tickets, libcurl's client
/// sessions). OpenSSL makes no callback that sees the session before it is used in every case,
/// so each `SSL` of a configured context is watched from the start of its handshake
/// (`SSL_CB_HANDSHAKE_START`, before a ClientHello is written or read):
///
/// - Accepting clients: the `SSL`'s session id context is set to the digest of the binding in
///   force (policy object and version, the client's address, the server identity, this
///   configuration). OpenSSL itself refuses to resume a session, from its session-id cache or
///   from a ticket, TLS 1.2 or 1.3, whose session id context differs; the session made by the
///   full handshake that follows carries the new one. The application's own session id context
///   (nginx and Apache set one per virtual server) is replaced for configured contexts: it
///   separates sessions of different contexts, and so does the configuration in the digest.
///   Tickets are checked once more by ``ServerTickets`` (installed as the context's ticket
///   callbacks), which also re-evaluates the client's chain against the clock; a session in the
///   session-id cache, which OpenSSL reuses without a callback, is given a timeout that ends when
///   its chain or a `fail_closed` rule's pins expire.
/// - Connecting to servers: the session the application set (`SSL_set_session`) is resumed only
///   when the ``ResumptionRecord`` it carries (attached when its full handshake was evaluated)
///   admits it; otherwise it is taken off the `SSL` and a full handshake, evaluated under the
///   policy in force, follows. A session without a record (made before the context was
///   configured, or read back from DER, which keeps no record) is never resumed.
///
/// The watch is an `SSL`-level info callback that then calls the context's own info callback, so
/// an application's `SSL_CTX_set_info_callback` keeps working.
enum ApplicationResumption {
    /// Called by ``TLSContext/configure(sslContext:identity:policy:purpose:)``.
    static func install(on ctx: OpaquePointer, config: TLSContextConfig) {
        // The slots exist (and their new_func runs) before the application makes its SSLs.
        _ = TLSExData.sslCreated
        _ = TLSExData.session
        if config.purpose == .clientAuth {
            SSL_CTX_set_session_ticket_cb(ctx, { ssl, arg in ServerTickets.generate(ssl, arg) },
                                          { ssl, session, _, _, status, arg in ServerTickets.decrypt(ssl, session, status, arg) },
                                          Unmanaged.passUnretained(config).toOpaque())
        }
    }

    private static func config(of ssl: OpaquePointer) -> TLSContextConfig? {
        guard let ctx = SSL_get_SSL_CTX(ssl), let p = SSL_CTX_get_ex_data(ctx, TLSExData.ctx) else { return nil }
        let config = Unmanaged<TLSContextConfig>.fromOpaque(p).takeUnretainedValue()
        return config.applicationOwned ? config : nil
    }

    /// Runs for every `SSL` made in the process (the new_func of ``TLSExData/sslCreated``).
    static func watch(_ ssl: OpaquePointer?) {
        guard let ssl, config(of: ssl) != nil else { return }
        SSL_set_info_callback(ssl) { ssl, where_, value in
            if (where_ & SSL_CB_HANDSHAKE_START) != 0, let ssl { ApplicationResumption.handshakeStarts(ssl) }
            if let ssl, let ctx = SSL_get_SSL_CTX(ssl), let own = SSL_CTX_get_info_callback(ctx) { own(ssl, where_, value) }
        }
    }

    private static func handshakeStarts(_ ssl: OpaquePointer) {
        guard let config = config(of: ssl) else { return }
        let state = TLSContext.handshakeState(ssl, config)
        // An identity that can change: this handshake's, taken whole now, and bound below. On
        // failure the context's own identity (the one in force when it was configured) stays.
        if let source = config.identitySource {
            try? state.takeIdentity(from: source, ssl: ssl, server: config.purpose == .clientAuth, config: config)
        }
        let current = ServerTickets.currentBinding(state, config)
        if config.purpose == .clientAuth {
            var digest = current.digest
            _ = SSL_set_session_id_context(ssl, &digest, UInt32(digest.count))
            return
        }
        // A TLS 1.2 renegotiation the server asked for (Apache's per-directory client
        // certificates) starts on a connection already established: its session is the one in
        // use, and taking it off (SSL_set_session) would reset the SSL's method and record layer
        // under the live connection (it then failed with internal errors). The connection keeps
        // its session; the new handshake presents the identity in force now, as any handshake.
        guard SSL_in_before(ssl) == 1 else { return }
        guard let session = SSL_get_session(ssl) else { return }
        if let record = ResumptionRecord.of(session),
           let admitted = record.admit(under: current, policy: config.policy, peer: state.peer, purpose: .serverAuth) {
            state.evaluated = admitted.record.evaluated // admitted.evaluation, shared
            state.presentedChain = record.presentedChain
        } else {
            _ = SSL_set_session(ssl, nil)
        }
    }
}
