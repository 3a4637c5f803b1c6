internal import COpenSSL
import Synchronization

// This file owns the Swift state OpenSSL's callbacks read: a context's configuration
// (TLSContextConfig, on each SSL_CTX), a handshake's state (TLSHandshakeState, on each SSL),
// libmtls's ex_data slots and what they hold (session records, a context's peer), and the ALPN
// wire form. Elsewhere: building contexts (TLSContext.swift), the verify callback and peer
// resolution (PeerVerification.swift), the shared client contexts (ClientContextCache.swift),
// client sessions (SessionCache.swift), server tickets (ServerTickets.swift).

/// What OpenSSL's callbacks on one `SSL_CTX` need: how peers are judged and which identity a
/// client picks. Kept alive by the `SSL_CTX` itself (ex_data, released when it is freed), so it
/// also serves contexts that belong to the application (``TLSContext/configure(sslContext:identity:policy:purpose:)``).
package final class TLSContextConfig {
    /// Read at each verification, so a replaced policy applies to the next handshake.
    let policy: TrustPolicy
    let purpose: TrustPurpose
    let identity: ClientIdentity
    /// Client side, automatic selection: the identities to choose from.
    let candidates: [IdentityCandidate]?
    /// Server side: ALPN protocols in wire format (length-prefixed), kept at a stable address.
    let alpnWire: UnsafeMutableBufferPointer<UInt8>?
    /// Server side: the evaluations behind the session tickets issued.
    let tickets = ServerTickets()
    /// Overrides for every peer of the context (a listener's, an application's `SSL_CTX`'s); a
    /// client connection's own are in its ``TLSHandshakeState``.
    let overrides: TrustOverrides?
    /// The identities this side may present, by leaf SHA-256: part of every session's
    /// ``ResumptionBinding``.
    let bindingIdentities: [[UInt8]]
    /// True for an application's `SSL_CTX` (``TLSContext/configure(sslContext:identity:policy:purpose:)``):
    /// OpenSSL's own session handling there is watched per `SSL` (``ApplicationResumption``).
    let applicationOwned: Bool
    /// Separates the sessions of two server configurations in one process
    /// (``ResumptionBinding/context``): an application's contexts that accept clients, whose
    /// session id context libmtls takes over. Empty elsewhere: a client's sessions go from one
    /// context to another (libcurl makes a context per connection and shares sessions between
    /// them), and are bound by policy, peer and identity alone.
    let bindingContext: String
    /// An identity that can change (swapped by the application, or following a store label):
    /// each handshake takes its ``IdentitySource/current`` when it starts and puts it on its own
    /// `SSL`, whole (``TLSContext/use(_:onSSL:server:)``); the context's own identity is only
    /// the one in force when the context was made.
    let identitySource: IdentitySource?
    /// The source's identity when the context was made had a token key: the context's
    /// signature schemes are limited to the token's, so an `SSL` that takes a software key
    /// puts every scheme back (``TLSContext/use(_:onSSL:server:widenSchemes:)``).
    let contextSchemesLimited: Bool
    /// An application's server `SSL_CTX`: the OCSP staple for its own certificate (its status
    /// callback's argument), kept as long as this configuration.
    var stapler: OCSPStapler? = nil
    /// An application's server `SSL_CTX` following an identity source: its staple follows the
    /// source's identity (its status callback's argument), kept as long as this configuration.
    var followingStapler: FollowingStapler? = nil
    /// A client context that asked servers for a staple and installed ``TLSContext/clientStatusCallback``:
    /// a TLS 1.2 server's staple arrives after its certificate is verified, so revocation is
    /// checked in that callback, before the handshake ends.
    var checksStapleAfterVerify = false
    /// The identity put on the `SSL_CTX` itself when it was made (a listener's, a configured
    /// context's): every `SSL` made from the context starts with it, so a handshake that finds
    /// it still in force in ``identitySource`` has nothing to install (one lock-protected reference
    /// read and a pointer comparison; see ``TLSHandshakeState/takeIdentity(from:ssl:server:config:)``).
    package let installedIdentity: Identity?
    /// The last identity from ``identitySource`` an `SSL` of this context took (at first
    /// ``installedIdentity``), and the leaf of the last one OpenSSL refused here (its security
    /// level, its signature schemes): a refused identity is reported once, and the last good one
    /// is presented instead — never no certificate (``TLSHandshakeState/takeIdentity(from:ssl:server:config:)``).
    let taken: Locked<(good: Identity?, refused: [UInt8]?)>
    private static let nextInstance = Atomic<UInt64>(0)

    init(policy: TrustPolicy, purpose: TrustPurpose, identity: ClientIdentity, serverALPN: [String],
         serverIdentity: Identity? = nil, applicationOwned: Bool = false,
         overrides: TrustOverrides? = nil, identitySource: IdentitySource? = nil, installedIdentity: Identity? = nil) throws {
        self.identitySource = identitySource
        self.installedIdentity = installedIdentity
        taken = Locked((installedIdentity, nil))
        contextSchemesLimited = identitySource.map { ((try? TokenKey.signatureAlgorithms($0.current.privateKey)) ?? nil) != nil } ?? false
        self.policy = policy
        self.overrides = overrides.flatMap { $0.isEmpty ? nil : $0 }
        self.purpose = purpose
        self.identity = identity
        self.applicationOwned = applicationOwned
        bindingContext = applicationOwned && purpose == .clientAuth
            ? "configuration \(TLSContextConfig.nextInstance.add(1, ordering: .relaxed).newValue)" : ""
        candidates = identity.selectionCandidates
        switch identity {
        case .none: bindingIdentities = serverIdentity.map { [$0.leaf.sha256] } ?? []
        case .identity(let id): bindingIdentities = [id.leaf.sha256]
        case .automatic, .candidates: bindingIdentities = (candidates ?? []).map(\.leaf.sha256)
        }
        if serverALPN.isEmpty {
            alpnWire = nil
        } else {
            let wire = try ALPN.wire(serverALPN)
            let buf = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: wire.count)
            _ = buf.initialize(from: wire)
            alpnWire = buf
        }
    }

    deinit {
        alpnWire?.deallocate()
        stapler?.stop()
        followingStapler?.stop()
    }
}

/// What one TLS connection's callbacks learn during the handshake, attached to its `SSL`.
package final class TLSHandshakeState {
    /// The peer as the application reached it (host, port, SNI, verify-as): selects the host
    /// rule and the name checked. A server's clients have no peer name.
    var peer = TrustPeer.none
    /// Our evaluation of the peer's chain, from inside OpenSSL's verification.
    package var evaluation: TrustResult? {
        get { evaluated?.result }
        set { evaluated = newValue.map(SharedEvaluation.init) }
    }
    /// ``evaluation``, held by reference: the record of this handshake's session holds the same
    /// one (issue 40: one copy per idle connection, not two inline).
    var evaluated: SharedEvaluation?
    /// The chain the peer presented, as our verification saw it (kept even when it failed).
    var presentedChain: [Certificate] = []
    /// The alert the peer sent us, in OpenSSL's words ("certificate required").
    var receivedAlert: String?
    /// The alert we sent.
    var sentAlert: String?
    /// Set when we answered the peer's request to renegotiate (TLS 1.2) with no_renegotiation.
    var refusedRenegotiation = false
    /// The identity presented (explicit or chosen automatically).
    var presentedIdentity: Identity?
    /// What this handshake's session is bound to, fixed when the peer's chain is evaluated (the
    /// policy version read before the evaluation): sessions and tickets made from this handshake
    /// carry it. Kept apart (about 150 bytes), so that a listener can drop it once the handshake
    /// is done (``handshakeDone()``).
    var binding: ResumptionBinding? {
        get { bindingBox?.value }
        set { bindingBox = newValue.map(BindingBox.init) }
    }
    private final class BindingBox {
        let value: ResumptionBinding
        init(_ value: ResumptionBinding) { self.value = value }
    }
    private var bindingBox: BindingBox?

    /// A listener's accepted connection finished its handshake: what only the handshake needed
    /// (the binding its session and tickets were made with; they keep their own) is let go, so an
    /// idle connection does not keep it (issue 40). The API's answers (evaluation, peer chain,
    /// presented identity, alerts) stay.
    func handshakeDone() {
        bindingBox = nil
    }
    /// The record of this handshake's trusted evaluation: made by the verification, or the one a
    /// resumed ticket was admitted with. The tickets this handshake issues carry it.
    var record: ResumptionRecord?
    /// What a client connection's handshake (or its set-up) records, which a server's accepted
    /// connections never need: kept apart, made at the first non-empty write, so that an idle
    /// accepted connection does not carry it (issue 40: 8 bytes instead of about 330). Written
    /// only while the connection is set up and during its handshake.
    private final class ClientSide {
        var unmatchedCANames: [String]?
        var unmatchedSchemes: String?
        var selectionError: MTLSError?
        var sessionCache: SessionCache?
        var sessionKey: SessionKey?
        var resumedEvaluation: TrustResult?
        var revocationAwaitingStaple = false
        var overrides: TrustOverrides?
    }
    private var clientSide: ClientSide?
    private var madeClientSide: ClientSide {
        if let clientSide { return clientSide }
        let made = ClientSide()
        clientSide = made
        return made
    }

    /// Set when automatic selection found no identity: the CA names the server asked for.
    var unmatchedCANames: [String]? {
        get { clientSide?.unmatchedCANames }
        set { if newValue != nil || clientSide != nil { madeClientSide.unmatchedCANames = newValue } }
    }
    /// With it, the signature schemes the server accepts (nil: it did not say).
    var unmatchedSchemes: String? {
        get { clientSide?.unmatchedSchemes }
        set { if newValue != nil || clientSide != nil { madeClientSide.unmatchedSchemes = newValue } }
    }
    /// Set when automatic selection chose identities but none could be loaded (a token's PIN...).
    var selectionError: MTLSError? {
        get { clientSide?.selectionError }
        set { if newValue != nil || clientSide != nil { madeClientSide.selectionError = newValue } }
    }
    /// Where this connection's session is cached, and under which key.
    var sessionCache: SessionCache? {
        get { clientSide?.sessionCache }
        set { if newValue != nil || clientSide != nil { madeClientSide.sessionCache = newValue } }
    }
    var sessionKey: SessionKey? {
        get { clientSide?.sessionKey }
        set { if newValue != nil || clientSide != nil { madeClientSide.sessionKey = newValue } }
    }
    /// The evaluation a session about to be resumed was re-checked with (own clients).
    var resumedEvaluation: TrustResult? {
        get { clientSide?.resumedEvaluation }
        set { if newValue != nil || clientSide != nil { madeClientSide.resumedEvaluation = newValue } }
    }
    /// A TLS 1.2 client's verification left the revocation check for the status callback (the
    /// server's staple comes after its certificate).
    var revocationAwaitingStaple: Bool {
        get { clientSide?.revocationAwaitingStaple ?? false }
        set { if newValue || clientSide != nil { madeClientSide.revocationAwaitingStaple = newValue } }
    }
    /// This connection's trust overrides (a client connection's); nil: the context's.
    var overrides: TrustOverrides? {
        get { clientSide?.overrides }
        set { if newValue != nil || clientSide != nil { madeClientSide.overrides = newValue } }
    }
    /// The identity this handshake took from an ``IdentitySource`` (by leaf SHA-256), for its
    /// ``ResumptionBinding``; nil: the context's ``TLSContextConfig/bindingIdentities``.
    var bindingIdentities: [[UInt8]]?

    /// Takes `source`'s identity for this handshake: put on `ssl` whole, and bound into the
    /// sessions it makes (a session of an earlier identity is not resumed under this one). When
    /// it is the identity `config`'s `SSL_CTX` was made with, the `SSL` already holds it (copied
    /// by `SSL_new`): nothing is installed, so a followed identity costs a handshake no more than
    /// a fixed one (issue 26's bench).
    ///
    /// An identity this context's `SSL`s cannot take (OpenSSL refuses it: an application's
    /// security level above its key, say) is reported once on the source's events
    /// (``LifecycleEventKind/reloadFailed``), and the last identity the context could present
    /// is presented instead, whole, as a store replacement that fails to load keeps the last good
    /// one: never a handshake without a certificate. With none to fall back on, this throws.
    func takeIdentity(from source: IdentitySource, ssl: OpaquePointer, server: Bool, config: TLSContextConfig) throws {
        let id = source.current
        if let installed = config.installedIdentity, installed === id {
            presentedIdentity = id
            bindingIdentities = nil // the context's own: this identity's leaf
            return
        }
        do {
            try TLSContext.use(id, onSSL: ssl, server: server, widenSchemes: config.contextSchemesLimited)
        } catch {
            let e = error as? MTLSError ?? MTLSError(.internal, "\(error)")
            let (good, first): (Identity?, Bool) = config.taken.withLock { t in
                let first = t.refused != id.leaf.sha256
                t.refused = id.leaf.sha256
                return (t.good, first)
            }
            if first { source.reportRefusedByContext(id, error: e, fallback: good) }
            guard let good, good !== id else { throw e }
            // `use` may have cleared the SSL's certificates: the fallback is put on it whole.
            try TLSContext.use(good, onSSL: ssl, server: server, widenSchemes: config.contextSchemesLimited)
            presentedIdentity = good
            bindingIdentities = [good.leaf.sha256]
            return
        }
        config.taken.withLock { t in
            if t.good !== id { t.good = id; t.refused = nil } // a later refusal is news again
        }
        presentedIdentity = id
        bindingIdentities = [id.leaf.sha256]
    }

    init() {}

    /// The state attached to `ssl`, if any.
    package static func of(_ ssl: OpaquePointer?) -> TLSHandshakeState? {
        guard let ssl, let p = SSL_get_ex_data(ssl, TLSExData.ssl) else { return nil }
        return Unmanaged<TLSHandshakeState>.fromOpaque(p).takeUnretainedValue()
    }

    /// Attaches this state to `ssl`, which holds a reference until it is freed.
    func attach(to ssl: OpaquePointer) {
        SSL_set_ex_data(ssl, TLSExData.ssl, Unmanaged.passRetained(self).toOpaque())
    }
}

/// libmtls's ex_data slots on OpenSSL objects; each releases the Swift object it holds.
enum TLSExData {
    static let ssl: Int32 = mtls_ossl_SSL_get_ex_new_index { _, ptr, _, _, _, _ in
        if let ptr { Unmanaged<TLSHandshakeState>.fromOpaque(ptr).release() }
    }
    static let ctx: Int32 = mtls_ossl_SSL_CTX_get_ex_new_index { _, ptr, _, _, _, _ in
        if let ptr { Unmanaged<TLSContextConfig>.fromOpaque(ptr).release() }
    }
    /// The peer an application's `SSL_CTX` connects to (``SSLContextConfiguration/setPeer(sslContext:_:)``).
    static let ctxPeer: Int32 = mtls_ossl_SSL_CTX_get_ex_new_index { _, ptr, _, _, _, _ in
        if let ptr { Unmanaged<PeerBox>.fromOpaque(ptr).release() }
    }
    /// A session's ``ResumptionRecord``. OpenSSL copies a session to make each TLS 1.3 ticket's
    /// (and a TLS 1.2 renewed ticket's): the copy takes a reference of its own.
    static let session: Int32 = mtls_ossl_SSL_SESSION_get_ex_new_index({ _, _, fromD, _, _, _ in
        if let fromD, let ptr = fromD.pointee { _ = Unmanaged<ResumptionRecord>.fromOpaque(ptr).retain() }
        return 1
    }, { _, ptr, _, _, _, _ in
        if let ptr { Unmanaged<ResumptionRecord>.fromOpaque(ptr).release() }
    })
    /// Holds no value: its new_func sees every `SSL` made in the process, and gives those of an
    /// application's configured context the resumption check (``ApplicationResumption/watch(_:)``).
    static let sslCreated: Int32 = mtls_ossl_SSL_get_ex_new_index_new { parent, _, _, _, _, _ in
        ApplicationResumption.watch(OpaquePointer(parent))
    }
}

extension ResumptionRecord {
    /// The record a session carries, if any.
    static func of(_ session: OpaquePointer?) -> ResumptionRecord? {
        guard let session, let p = SSL_SESSION_get_ex_data(session, TLSExData.session) else { return nil }
        return Unmanaged<ResumptionRecord>.fromOpaque(p).takeUnretainedValue()
    }

    /// Attaches this record to `session` (replacing one it had), which holds a reference.
    func attach(to session: OpaquePointer) {
        let previous = SSL_SESSION_get_ex_data(session, TLSExData.session)
        SSL_SESSION_set_ex_data(session, TLSExData.session, Unmanaged.passRetained(self).toOpaque())
        if let previous { Unmanaged<ResumptionRecord>.fromOpaque(previous).release() }
    }
}

/// A ``TrustPeer`` held by an OpenSSL object's ex_data.
final class PeerBox {
    let peer: TrustPeer
    init(_ peer: TrustPeer) { self.peer = peer }
}

extension ALPN {
    /// The wire form: each protocol prefixed by its length.
    static func wire(_ protocols: [String]) throws -> [UInt8] {
        var out: [UInt8] = []
        for p in protocols {
            let b = Array(p.utf8)
            guard !b.isEmpty, b.count <= 255 else { throw MTLSError(.invalidArgument, "ALPN protocol \"\(p)\" must be 1 to 255 bytes") }
            out.append(UInt8(b.count))
            out += b
        }
        return out
    }
}
