internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What OpenSSL's callbacks on one `SSL_CTX` need: how peers are judged and which identity a
/// client picks. Kept alive by the `SSL_CTX` itself (ex_data, released when it is freed), so it
/// also serves contexts that belong to the application (``TLSContext/configure(sslContext:identity:policy:purpose:)``).
final class TLSContextConfig {
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
    private static let nextInstance = Atomic<UInt64>(0)

    init(policy: TrustPolicy, purpose: TrustPurpose, identity: ClientIdentity, serverALPN: [String],
         serverIdentity: Identity? = nil, applicationOwned: Bool = false,
         overrides: TrustOverrides? = nil, identitySource: IdentitySource? = nil) throws {
        self.identitySource = identitySource
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

    deinit { alpnWire?.deallocate() }
}

/// What one TLS connection's callbacks learn during the handshake, attached to its `SSL`.
final class TLSHandshakeState {
    /// The peer as the application reached it (host, port, SNI, verify-as): selects the host
    /// rule and the name checked. A server's clients have no peer name.
    var peer = TrustPeer()
    /// Our evaluation of the peer's chain, from inside OpenSSL's verification.
    var evaluation: TrustResult?
    /// The chain the peer presented, as our verification saw it (kept even when it failed).
    var presentedChain: [Certificate] = []
    /// The alert the peer sent us, in OpenSSL's words ("certificate required").
    var receivedAlert: String?
    /// The alert we sent.
    var sentAlert: String?
    /// Set when we answered the peer's request to renegotiate (TLS 1.2) with no_renegotiation.
    var refusedRenegotiation = false
    /// Set when automatic selection found no identity: the CA names the server asked for.
    var unmatchedCANames: [String]?
    /// With it, the signature schemes the server accepts (nil: it did not say).
    var unmatchedSchemes: String?
    /// Set when automatic selection chose identities but none could be loaded (a token's PIN...).
    var selectionError: MTLSError?
    /// The identity presented (explicit or chosen automatically).
    var presentedIdentity: Identity?
    /// Where this connection's session is cached, and under which key.
    var sessionCache: SessionCache?
    var sessionKey: String?
    /// What this handshake's session is bound to, fixed when the peer's chain is evaluated (the
    /// policy version read before the evaluation): sessions and tickets made from this handshake
    /// carry it.
    var binding: ResumptionBinding?
    /// The evaluation a session about to be resumed was re-checked with (own clients).
    var resumedEvaluation: TrustResult?
    /// This connection's trust overrides (a client connection's); nil: the context's.
    var overrides: TrustOverrides?
    /// The identity this handshake took from an ``IdentitySource`` (by leaf SHA-256), for its
    /// ``ResumptionBinding``; nil: the context's ``TLSContextConfig/bindingIdentities``.
    var bindingIdentities: [[UInt8]]?

    /// Takes `source`'s identity for this handshake: put on `ssl` whole, and bound into the
    /// sessions it makes (a session of an earlier identity is not resumed under this one).
    func takeIdentity(from source: IdentitySource, ssl: OpaquePointer, server: Bool, widenSchemes: Bool) throws {
        let id = source.current
        try TLSContext.use(id, onSSL: ssl, server: server, widenSchemes: widenSchemes)
        presentedIdentity = id
        bindingIdentities = [id.leaf.sha256]
    }

    init() {}

    /// The state attached to `ssl`, if any.
    static func of(_ ssl: OpaquePointer?) -> TLSHandshakeState? {
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

/// An OpenSSL `SSL_CTX` made by libmtls, in libmtls's own library context, with its identity,
/// verification through ``TrustPolicy/evaluate(chain:host:purpose:at:)`` and (clients) a session
/// cache. Shared by every connection made with the same settings; thread-safe.
final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer
    let config: TLSContextConfig
    let sessions = SessionCache()
    /// A server's OCSP staple for its own certificate (when it names a responder).
    let stapler: OCSPStapler?

    deinit {
        SSL_CTX_free(ctx)
        stapler?.stop()
    }

    private init(ctx: OpaquePointer, config: TLSContextConfig, stapler: OCSPStapler? = nil) {
        self.ctx = ctx
        self.config = config
        self.stapler = stapler
    }

    private static func newContext() throws -> OpaquePointer {
        guard let ctx = SSL_CTX_new_ex(LibraryContext.shared.ctx, nil, TLS_method()) else {
            throw MTLSError.openSSL(.internal, "cannot create a TLS context")
        }
        return ctx
    }

    private static func setVersions(_ ctx: OpaquePointer, _ min: TLSVersion, _ max: TLSVersion) throws {
        guard min <= max else { throw MTLSError(.invalidArgument, "minimum TLS version \(min) is above the maximum \(max)") }
        func proto(_ v: TLSVersion) -> Int32 { v == .tls12 ? TLS1_2_VERSION : TLS1_3_VERSION }
        _ = mtls_ossl_SSL_CTX_set_min_proto_version(ctx, proto(min))
        _ = mtls_ossl_SSL_CTX_set_max_proto_version(ctx, proto(max))
    }

    /// A client context for `options`.
    static func client(_ options: TLSClientOptions) throws -> TLSContext {
        let ctx = try newContext()
        do {
            try setVersions(ctx, options.minVersion, options.maxVersion)
            let config = try TLSContextConfig(policy: options.policySource, purpose: .serverAuth,
                                              identity: options.identitySource == nil ? options.identity : .none, serverALPN: [],
                                              identitySource: options.identitySource)
            var explicit: Identity? = nil
            if options.identitySource == nil, case .identity(let id) = options.identity { explicit = id }
            try install(on: ctx, config: config, identity: explicit, verifyMode: SSL_VERIFY_PEER)
            if config.candidates != nil {
                SSL_CTX_set_cert_cb(ctx, { ssl, arg in IdentitySelection.certificateCallback(ssl, arg) },
                                    Unmanaged.passUnretained(config).toOpaque())
            }
            // Client sessions go to our own cache (keyed by host, names, identity), never to
            // OpenSSL's internal one, which a client does not use for lookups anyway.
            _ = mtls_ossl_SSL_CTX_set_session_cache_mode(ctx, Int(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE))
            SSL_CTX_sess_set_new_cb(ctx) { ssl, session in SessionCache.newSessionCallback(ssl, session) }
            // TLS 1.3 post-handshake authentication: a server that asks for the client's
            // certificate only after the handshake (Apache httpd's per-location SSLVerifyClient,
            // Python's verify_client_post_handshake) gets the same identity, chosen the same way,
            // as it would have during the handshake. It changes nothing about how we judge the
            // server.
            SSL_CTX_set_post_handshake_auth(ctx, 1)
            return TLSContext(ctx: ctx, config: config)
        } catch {
            SSL_CTX_free(ctx)
            throw error
        }
    }

    /// A server context for `options`.
    static func server(_ options: TLSServerOptions, identitySource: IdentitySource? = nil) throws -> TLSContext {
        try options.clientOverrides?.validate()
        let ctx = try newContext()
        do {
            try setVersions(ctx, options.minVersion, options.maxVersion)
            let config = try TLSContextConfig(policy: options.clientPolicySource, purpose: .clientAuth,
                                              identity: .none, serverALPN: options.alpn,
                                              serverIdentity: identitySource?.current ?? options.identity,
                                              overrides: options.clientOverrides, identitySource: identitySource)
            let mode: Int32
            switch options.clientAuthentication {
            case .none: mode = SSL_VERIFY_NONE
            case .optional: mode = SSL_VERIFY_PEER
            case .require: mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
            }
            if options.clientAuthentication != .none { try requireClientAnchors(options.clientPolicySource, options.clientOverrides) }
            try install(on: ctx, config: config, identity: identitySource?.current ?? options.identity, verifyMode: mode)
            if options.clientAuthentication != .none {
                try setClientCANames(ctx, options.clientCANames.certificates(anchors: options.clientPolicySource.anchors
                                                                                + (options.clientOverrides?.anchors ?? [])))
            }
            if config.alpnWire != nil {
                SSL_CTX_set_alpn_select_cb(ctx, { _, out, outLen, inp, inLen, arg in
                    guard let arg, let out, let outLen else { return SSL_TLSEXT_ERR_NOACK }
                    let config = Unmanaged<TLSContextConfig>.fromOpaque(arg).takeUnretainedValue()
                    guard let wire = config.alpnWire else { return SSL_TLSEXT_ERR_NOACK }
                    var selected: UnsafeMutablePointer<UInt8>? = nil
                    let r = SSL_select_next_proto(&selected, outLen, wire.baseAddress, UInt32(wire.count), inp, inLen)
                    guard r == OPENSSL_NPN_NEGOTIATED, let selected else { return SSL_TLSEXT_ERR_NOACK }
                    out.pointee = UnsafePointer(selected)
                    return SSL_TLSEXT_ERR_OK
                }, Unmanaged.passUnretained(config).toOpaque())
            }
            // No server-side session cache: resumption is by stateless tickets only, which
            // ServerTickets binds to the client policy version that judged the client (see
            // ResumptionBinding) and re-checks against the clock.
            _ = mtls_ossl_SSL_CTX_set_session_cache_mode(ctx, Int(SSL_SESS_CACHE_OFF))
            if options.sessionTickets {
                _ = SSL_CTX_set_num_tickets(ctx, 1)
                var sid = Array("libmtls listener".utf8)
                _ = SSL_CTX_set_session_id_context(ctx, &sid, UInt32(sid.count))
                SSL_CTX_set_session_ticket_cb(ctx, { ssl, arg in ServerTickets.generate(ssl, arg) },
                                              { ssl, session, _, _, status, arg in ServerTickets.decrypt(ssl, session, status, arg) },
                                              Unmanaged.passUnretained(config).toOpaque())
            } else {
                _ = mtls_ossl_SSL_CTX_set_options(ctx, mtls_ossl_SSL_OP_NO_TICKET())
                _ = SSL_CTX_set_num_tickets(ctx, 0)
            }
            // OCSP stapling for our own certificate, fetched in the background.
            let stapler = OCSPStapler.start(for: options.identity)
            if let stapler { OCSPStapler.install(stapler, on: ctx) }
            return TLSContext(ctx: ctx, config: config, stapler: stapler)
        } catch {
            SSL_CTX_free(ctx)
            throw error
        }
    }

    /// Configures an `SSL_CTX` the application owns: presents `identity` (if any) and judges the
    /// peer with `policy` through libmtls's evaluator, for `purpose` (`.serverAuth` when the
    /// context makes client connections, `.clientAuth` when it accepts clients — then client
    /// certificates are requested but not required). The configuration lives as long as the
    /// context; calling again replaces it.
    static func configure(sslContext ctx: OpaquePointer, identity: Identity?, policy: TrustPolicy?,
                          purpose: TrustPurpose, overrides: TrustOverrides? = nil, identitySource: IdentitySource? = nil) throws {
        let identity = identitySource?.current ?? identity
        let handle = policy ?? TrustPolicy()
        if purpose == .clientAuth { try requireClientAnchors(handle, overrides) }
        let config = try TLSContextConfig(policy: handle, purpose: purpose,
                                          identity: purpose == .serverAuth ? identity.map { .identity($0) } ?? .none : .none,
                                          serverALPN: [], serverIdentity: purpose == .clientAuth ? identity : nil,
                                          applicationOwned: true, overrides: overrides, identitySource: identitySource)
        // The application's own choices (require a client certificate, verify once, post-handshake)
        // are kept; libmtls only adds SSL_VERIFY_PEER and its evaluator.
        let kept = SSL_CTX_get_verify_mode(ctx) & (SSL_VERIFY_FAIL_IF_NO_PEER_CERT | SSL_VERIFY_CLIENT_ONCE | SSL_VERIFY_POST_HANDSHAKE)
        try install(on: ctx, config: config, identity: identity, verifyMode: SSL_VERIFY_PEER | kept, ownContext: false)
        ApplicationResumption.install(on: ctx, config: config)
    }

    /// Sets the CA names of the context's certificate request to the subjects of `names`, in
    /// order. With none the request carries no list (OpenSSL then sends no
    /// `certificate_authorities` extension in TLS 1.3 and an empty list in TLS 1.2).
    private static func setClientCANames(_ ctx: OpaquePointer, _ names: [Certificate]) throws {
        guard !names.isEmpty else { return }
        guard let sk = mtls_ossl_sk_X509_NAME_new_null() else { throw MTLSError(.noMemory, "no memory for the CA names") }
        for c in names where mtls_ossl_sk_X509_NAME_push_dup(sk, X509_get_subject_name(c.x509)) <= 0 {
            mtls_ossl_sk_X509_NAME_pop_free(sk)
            throw MTLSError.openSSL(.noMemory, "cannot add a CA name")
        }
        SSL_CTX_set_client_CA_list(ctx, sk) // takes ownership
    }

    /// A server that verifies clients needs anchors for them: it never trusts the system store
    /// for clients unless the policy says so (``TrustPolicy/systemAnchorsForClients``).
    static func requireClientAnchors(_ policy: TrustPolicy, _ overrides: TrustOverrides? = nil) throws {
        guard !policy.hasAnchors, (overrides?.anchors ?? []).isEmpty, !policy.systemAnchorsForClients else { return }
        throw MTLSError(.invalidPolicy, "a server that verifies client certificates needs client anchors (the CA that issues " +
                        "your clients' certificates); to accept clients of the system trust store, say so explicitly " +
                        "(system_anchors_for_clients / mtls_policy_set_system_anchors_for_clients)")
    }

    /// The common part: identity, verification through our evaluator, alert bookkeeping.
    /// An application's context keeps its own info callback and options.
    private static func install(on ctx: OpaquePointer, config: TLSContextConfig, identity: Identity?, verifyMode: Int32,
                                ownContext: Bool = true) throws {
        if let identity { try use(identity, on: ctx, server: config.purpose == .clientAuth) }
        // A client whose policy checks revocation with OCSP asks servers for a staple (read in
        // the verify callback: TLS 1.3 carries it with the certificate).
        if config.purpose == .serverAuth, config.policy.wantsOCSP { _ = mtls_ossl_SSL_CTX_request_ocsp_staple(ctx) }
        SSL_CTX_set_verify(ctx, verifyMode, nil)
        SSL_CTX_set_cert_verify_callback(ctx, { store, arg in
            TLSContext.verifyCallback(store, arg)
        }, Unmanaged.passUnretained(config).toOpaque())
        if ownContext { installAlertTracking(ctx) }
        // The SSL_CTX keeps the configuration alive; a previous one is released.
        let previous = SSL_CTX_get_ex_data(ctx, TLSExData.ctx)
        SSL_CTX_set_ex_data(ctx, TLSExData.ctx, Unmanaged.passRetained(config).toOpaque())
        if let previous { Unmanaged<TLSContextConfig>.fromOpaque(previous).release() }
    }

    /// Records alerts sent and received, so errors can say which side refused; refuses TLS 1.2
    /// renegotiation either way (a peer asking for it gets a no_renegotiation alert: the
    /// certificate judged at the handshake is the only one a connection ever has).
    private static func installAlertTracking(_ ctx: OpaquePointer) {
        SSL_CTX_set_info_callback(ctx) { ssl, where_, value in
            guard (where_ & SSL_CB_ALERT) != 0, (value & 0xff) != 0 /* close_notify */ else { return }
            let state = TLSHandshakeState.of(ssl)
            let text = TLSContext.alertText(value & 0xff)
            if (where_ & SSL_CB_READ) != 0 {
                state?.receivedAlert = text
            } else {
                state?.sentAlert = text
                if value & 0xff == 100 /* no_renegotiation */ { state?.refusedRenegotiation = true }
            }
        }
        // No SSL_OP_IGNORE_UNEXPECTED_EOF: an end of stream without close_notify must stay
        // visible, so a read can tell a complete reply from a cut one (MTLSError.Code.truncated).
        _ = mtls_ossl_SSL_CTX_set_options(ctx, mtls_ossl_SSL_OP_NO_RENEGOTIATION())
    }

    /// An alert's description in OpenSSL's words, with the TLS 1.3 alerts OpenSSL 3.0 has no
    /// text for.
    static func alertText(_ description: Int32) -> String {
        switch description {
        case 109: return "missing extension"
        case 115: return "unknown PSK identity"
        case 116: return "certificate required"
        case 120: return "no application protocol"
        default: return String(cString: SSL_alert_desc_string_long(description))
        }
    }

    /// Makes `identity` the context's certificate, key and chain. A token key signs only with
    /// the schemes its token has mechanisms for (``TokenKeyContext/signatureSchemes(keyType:)``).
    private static func use(_ identity: Identity, on ctx: OpaquePointer, server: Bool) throws {
        if let schemes = try TokenKey.signatureAlgorithms(identity.privateKey) {
            // A client chooses its CertificateVerify scheme from its "client sigalgs" (its
            // ClientHello list stays whole); a server from its own list, while its
            // CertificateRequest keeps offering every scheme for the client's signature.
            func set(_ command: Int32, _ list: String) -> Bool {
                list.withCString { SSL_CTX_ctrl(ctx, command, 0, UnsafeMutableRawPointer(mutating: $0)) == 1 }
            }
            let ok = server
                ? set(SSL_CTRL_SET_SIGALGS_LIST, schemes) && set(SSL_CTRL_SET_CLIENT_SIGALGS_LIST, TokenKey.allSignatureSchemes)
                : set(SSL_CTRL_SET_CLIENT_SIGALGS_LIST, schemes)
            guard ok else {
                throw MTLSError.openSSL(.unsupported, "OpenSSL refused the signature schemes of token key \(identity.privateKey.tokenURI ?? ""): \(schemes)")
            }
        }
        guard SSL_CTX_use_certificate(ctx, identity.leaf.x509) == 1 else {
            throw MTLSError.openSSL(.handshake, "cannot use the certificate \"\(identity.leaf.subjectSummary)\"")
        }
        guard SSL_CTX_use_PrivateKey(ctx, identity.privateKey.pkey) == 1 else {
            throw MTLSError.openSSL(.keyMismatch, "cannot use the private key of \"\(identity.leaf.subjectSummary)\"")
        }
        let sk = try chainStack(identity)
        defer { mtls_ossl_sk_X509_free(sk) }
        guard mtls_ossl_SSL_CTX_set1_chain(ctx, sk) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot set the certificate chain")
        }
    }

    /// Makes `identity` the certificate, key and chain of one `SSL`, in one call
    /// (`SSL_use_cert_and_key`): the handshake never sees the key of one identity with the
    /// certificate of another. Token keys get their signature schemes on the `SSL` as on a context.
    static func use(_ identity: Identity, onSSL ssl: OpaquePointer, server: Bool, widenSchemes: Bool = false) throws {
        func set(_ command: Int32, _ list: String) -> Bool {
            list.withCString { SSL_ctrl(ssl, command, 0, UnsafeMutableRawPointer(mutating: $0)) == 1 }
        }
        if let schemes = try TokenKey.signatureAlgorithms(identity.privateKey) {
            let ok = server
                ? set(SSL_CTRL_SET_SIGALGS_LIST, schemes) && set(SSL_CTRL_SET_CLIENT_SIGALGS_LIST, TokenKey.allSignatureSchemes)
                : set(SSL_CTRL_SET_CLIENT_SIGALGS_LIST, schemes)
            guard ok else {
                throw MTLSError.openSSL(.unsupported, "OpenSSL refused the signature schemes of token key \(identity.privateKey.tokenURI ?? ""): \(schemes)")
            }
        } else if widenSchemes {
            // The context was limited to an earlier token key's schemes; this key signs with any.
            guard set(SSL_CTRL_SET_SIGALGS_LIST, TokenKey.allSignatureSchemes),
                  set(SSL_CTRL_SET_CLIENT_SIGALGS_LIST, TokenKey.allSignatureSchemes) else {
                throw MTLSError.openSSL(.unsupported, "OpenSSL refused the signature schemes for \"\(identity.leaf.subjectSummary)\"")
            }
        }
        let sk = try chainStack(identity)
        defer { mtls_ossl_sk_X509_free(sk) }
        // OpenSSL keeps one certificate per key type: the context's (an EC one, say) would still
        // be chosen over an RSA replacement. Only this identity is left on the SSL.
        SSL_certs_clear(ssl)
        guard SSL_use_cert_and_key(ssl, identity.leaf.x509, identity.privateKey.pkey, sk, 1) == 1 else {
            throw MTLSError.openSSL(.keyMismatch, "cannot use the identity \"\(identity.leaf.subjectSummary)\"")
        }
    }

    /// A borrowed stack of the identity's issuers (up to but excluding a self-signed root, which
    /// a peer never needs to be sent). Free with `sk_X509_free` only.
    static func chainStack(_ identity: Identity) throws -> OpaquePointer {
        guard let sk = mtls_ossl_sk_X509_new_null() else { throw MTLSError(.noMemory, "out of memory") }
        for c in identity.chain where !c.isSelfSigned { _ = mtls_ossl_sk_X509_push(sk, c.x509) }
        return sk
    }

    // MARK: verification

    /// OpenSSL's whole-chain verification, replaced: the presented chain goes to the library's
    /// evaluator, the same one `mtls verify` uses; its result is kept on the connection.
    static func verifyCallback(_ store: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let store, let arg else { return 0 }
        let config = Unmanaged<TLSContextConfig>.fromOpaque(arg).takeUnretainedValue()
        let ssl = OpaquePointer(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()))
        let state = handshakeState(ssl, config)
        var chain: [Certificate] = []
        if let leaf = X509_STORE_CTX_get0_cert(store), let c = try? Certificate(borrowing: leaf) { chain.append(c) }
        if let untrusted = X509_STORE_CTX_get0_untrusted(store) {
            for i in 0..<mtls_ossl_sk_X509_num(untrusted) {
                guard let x = mtls_ossl_sk_X509_value(untrusted, i), let c = try? Certificate(borrowing: x) else { continue }
                if chain.first != c { chain.append(c) }
            }
        }
        state.presentedChain = chain
        let policy = config.policy
        // Bound before the evaluation: a policy changed while it runs leaves a binding that no
        // later handshake matches (no resumption), never a newer one over an older decision.
        let overrides = state.overrides ?? config.overrides
        let binding = ResumptionBinding(policy: policy, peer: state.peer, identities: state.bindingIdentities ?? config.bindingIdentities,
                                        context: config.bindingContext, overrides: overrides)
        state.binding = binding
        // The server's stapled OCSP response, for a policy that checks revocation with OCSP.
        var staple: [UInt8]? = nil
        if config.purpose == .serverAuth, let ssl {
            var p: UnsafePointer<UInt8>? = nil
            let n = mtls_ossl_SSL_get_ocsp_staple(ssl, &p)
            if n > 0, n <= 1 << 20, let p { staple = Array(UnsafeBufferPointer(start: p, count: n)) }
        }
        let result = policy.evaluate(chain: chain, peer: state.peer, purpose: config.purpose, at: nil, overrides: overrides,
                                     stapledOCSP: staple)
        state.evaluation = result
        if result.trusted {
            if let ssl, let session = SSL_get_session(ssl) {
                // The session this handshake makes (TLS 1.3 tickets are copies of it) carries
                // its binding and the chain to re-check; on an application's server context,
                // whose session cache OpenSSL consults alone, it also expires with its chain.
                ResumptionRecord(binding: binding, presentedChain: chain, evaluation: result).attach(to: session)
                if config.applicationOwned, config.purpose == .clientAuth,
                   let until = ResumptionRecord.horizon(of: result, policy: policy, peer: state.peer) {
                    let left = max(0, Int(until.timeIntervalSinceNow.rounded(.down)))
                    if left < SSL_SESSION_get_timeout(session) { _ = SSL_SESSION_set_timeout(session, left) }
                }
            }
            X509_STORE_CTX_set_error(store, X509_V_OK)
            return 1
        }
        X509_STORE_CTX_set_error(store, x509Error(for: result))
        return 0
    }

    /// The state of `ssl`'s handshake, made on first use for an `SSL` of an application's context
    /// that did not call mtls_ssl_set_peer: the host comes from what it set on the SSL, the port
    /// from the socket the SSL reads, if it reads one (a BIO of the application's own: no port,
    /// only port-less rules apply). No host set is not "no name check": the evaluator refuses the
    /// server with no_peer_name unless the policy's name check is off or a host rule decides the
    /// name. A server's client is the address its socket is connected to, as with a listener.
    static func handshakeState(_ ssl: OpaquePointer?, _ config: TLSContextConfig) -> TLSHandshakeState {
        if let s = TLSHandshakeState.of(ssl) { return s }
        let state = TLSHandshakeState()
        guard let ssl else { return state }
        // The socket the SSL reads, if its BIO is one (SSL_get_fd is -1 otherwise).
        let reached = Socket.peerDescription(SSL_get_fd(ssl))
        if config.purpose == .serverAuth {
            if let p = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), TLSExData.ctxPeer) {
                state.peer = Unmanaged<PeerBox>.fromOpaque(p).takeUnretainedValue().peer
            } else {
                state.peer = TrustPeer(host: applicationHostName(ssl))
                if state.peer.host != nil { state.peer.port = reached.flatMap { TrustPeer(hostText: $0).port } }
            }
        } else {
            state.peer = TrustPeer.client(address: reached)
        }
        state.attach(to: ssl)
        return state
    }

    /// The X.509 error code that makes OpenSSL send the most telling alert for a failed
    /// evaluation ("unknown CA", "certificate expired", "bad certificate").
    static func x509Error(for result: TrustResult) -> Int32 {
        typealias C = TrustReason.Code
        let codes = Set(result.reasons.map(\.code))
        if !codes.isDisjoint(with: [C.pinMismatch, C.pinExpired]) { return X509_V_ERR_CERT_REJECTED }
        if !codes.isDisjoint(with: [C.expired, C.notYetValid]) { return X509_V_ERR_CERT_HAS_EXPIRED }
        if codes.contains(C.revoked) { return X509_V_ERR_CERT_REVOKED }
        if !codes.isDisjoint(with: [C.wrongPurpose, C.ekuMissing, C.ekuInvalid]) { return X509_V_ERR_INVALID_PURPOSE }
        if !codes.isDisjoint(with: [C.nameMismatch, C.noPeerName]) { return X509_V_ERR_HOSTNAME_MISMATCH }
        return X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    }

    /// The host an application's SSL is meant to reach: what it set with `SSL_set1_host` or
    /// `X509_VERIFY_PARAM_set1_ip_asc`, else the SNI name.
    static func applicationHostName(_ ssl: OpaquePointer) -> String? {
        if let param = SSL_get0_param(ssl) {
            if let h = X509_VERIFY_PARAM_get0_host(param, 0) { return String(cString: h) }
            if let ip = X509_VERIFY_PARAM_get1_ip_asc(param) {
                defer { mtls_ossl_OPENSSL_free(ip) }
                return String(cString: ip)
            }
        }
        if let sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) { return String(cString: sni) }
        return nil
    }

    // MARK: shared client contexts

    private static let cacheLock = Mutex<Void>(())
    nonisolated(unsafe) private static var clientContexts: [ContextKey: (TLSContext, [AnyObject])] = [:]

    /// What makes two client contexts the same: versions, identity (or candidates) and policy,
    /// by object identity. The objects are kept alive with the context, so no identity is reused.
    private struct ContextKey: Hashable {
        var minVersion: Int, maxVersion: Int
        var automatic: Bool
        var identities: [ObjectIdentifier]
        var policy: ObjectIdentifier?
        var source: ObjectIdentifier?
    }

    /// The client context for `options`, shared by every connection with the same identity,
    /// policy and versions, so that handshakes reuse one `SSL_CTX` and its sessions.
    static func sharedClient(_ options: TLSClientOptions) throws -> TLSContext {
        var keep: [AnyObject] = []
        var key = ContextKey(minVersion: options.minVersion.rawValue, maxVersion: options.maxVersion.rawValue,
                             automatic: false, identities: [], policy: nil)
        switch options.identity {
        case .none: break
        case .identity(let id): key.identities = [ObjectIdentifier(id)]; keep.append(id)
        case .automatic(let ids): key.automatic = true; key.identities = ids.map(ObjectIdentifier.init); keep += ids as [AnyObject]
        case .candidates(let cs): key.automatic = true; key.identities = cs.map(ObjectIdentifier.init); keep += cs as [AnyObject]
        }
        if let p = options.policy { key.policy = ObjectIdentifier(p); keep.append(p) }
        if let src = options.identitySource { key.source = ObjectIdentifier(src); key.identities = []; key.automatic = false; keep.append(src) }
        return try cacheLock.withLock { _ in
            if let (c, _) = clientContexts[key] { return c }
            let c = try client(options)
            // Bounded: a program that makes a new identity or policy per connection does not
            // keep every old key alive here (contexts hold their identity's key).
            if clientContexts.count >= maxSharedContexts { clientContexts.removeAll() }
            clientContexts[key] = (c, keep)
            return c
        }
    }

    static let maxSharedContexts = 16

    /// Drops every shared client context with its session cache (and its references to
    /// identities and policies). Connections still open keep theirs.
    static func clearSharedClients() {
        let dropped = cacheLock.withLock { _ -> [ContextKey: (TLSContext, [AnyObject])] in
            let all = clientContexts
            clientContexts.removeAll()
            return all
        }
        _ = dropped // released outside the lock
    }
}

/// Client sessions for resumption, keyed by host, port, names and identity; each carries its
/// ``ResumptionRecord`` (binding, presented chain, evaluation), checked before it is offered
/// again (a resumed handshake carries no certificate).
final class SessionCache: Sendable {
    /// A cached session and its record. An established `SSL_SESSION` is reference counted and
    /// not changed again, and OpenSSL lets threads resume from one session at once: sharing the
    /// pointer is safe.
    private struct Entry: @unchecked Sendable {
        var session: OpaquePointer
        var record: ResumptionRecord
    }
    private let entries = Mutex<[String: Entry]>([:])

    deinit { entries.withLock { for e in $0.values { SSL_SESSION_free(e.session) } } }

    /// A new reference to the cached session for `key`, with the evaluation it resumes with, if
    /// its record admits it under `binding` (same policy object and version, peer and identity;
    /// the chain still trusted at the policy's time). A session that does not is dropped.
    func lookup(_ key: String, binding: ResumptionBinding, policy: TrustPolicy, peer: TrustPeer) -> (OpaquePointer, TrustResult?)? {
        let found: (OpaquePointer, ResumptionRecord)? = entries.withLock { entries in
            guard let e = entries[key] else { return nil }
            SSL_SESSION_up_ref(e.session)
            return (e.session, e.record)
        }
        guard let (session, record) = found else { return nil }
        guard let admitted = record.admit(under: binding, policy: policy, peer: peer, purpose: .serverAuth) else {
            SSL_SESSION_free(session)
            remove(key, ifStill: session)
            return nil
        }
        return (session, admitted)
    }

    /// Keeps `session` (taking the caller's reference) for `key`.
    func store(_ key: String, _ session: OpaquePointer, _ record: ResumptionRecord) {
        entries.withLock { entries in
            if let old = entries[key] { SSL_SESSION_free(old.session) }
            if entries.count >= 1024 {
                for e in entries.values { SSL_SESSION_free(e.session) }
                entries.removeAll()
            }
            entries[key] = Entry(session: session, record: record)
        }
    }

    func remove(_ key: String) {
        entries.withLock { entries in
            if let old = entries.removeValue(forKey: key) { SSL_SESSION_free(old.session) }
        }
    }

    /// Removes the entry for `key` if it still holds `session` (another thread may have stored a
    /// newer one meanwhile).
    private func remove(_ key: String, ifStill session: OpaquePointer) {
        entries.withLock { entries in
            guard let old = entries[key], old.session == session else { return }
            entries.removeValue(forKey: key)
            SSL_SESSION_free(old.session)
        }
    }

    /// OpenSSL's new-session callback: TLS 1.2 sessions after the handshake, TLS 1.3 tickets
    /// whenever they arrive. Returns 1 when the cache took the reference. A session without a
    /// record (no evaluation was made for it) is not kept.
    static func newSessionCallback(_ ssl: OpaquePointer?, _ session: OpaquePointer?) -> Int32 {
        guard let session, let state = TLSHandshakeState.of(ssl), let cache = state.sessionCache,
              let key = state.sessionKey, let record = ResumptionRecord.of(session),
              SSL_SESSION_is_resumable(session) == 1 else { return 0 }
        cache.store(key, session, record)
        return 1
    }
}

/// Session tickets of a listener, and of an application's `SSL_CTX` that accepts clients. A
/// ticket (encrypted and authenticated by OpenSSL with the context's own key) carries the
/// number of a ``ResumptionRecord`` kept here and the digest of its ``ResumptionBinding``. It
/// resumes only under the same binding — the client policy object and version that judged the
/// client, the client's address, the server's identity — and when the chain the client
/// presented is still trusted at the policy's time (certificates within their validity, a
/// `fail_closed` rule's pins not expired); otherwise the client gets a full handshake and a
/// fresh evaluation. A resumed connection reports the evaluation made for the resumption.
final class ServerTickets: Sendable {
    /// How many records are kept; the oldest go first (their tickets then give a full handshake).
    static let capacity = 4096

    private struct Book: @unchecked Sendable {
        var next: UInt64 = 1
        var entries: [UInt64: ResumptionRecord] = [:]
        var order: [UInt64] = []
        var head = 0
    }
    private let book = Mutex(Book())

    private func keep(_ record: ResumptionRecord) -> UInt64 {
        book.withLock { b in
            let id = b.next
            b.next &+= 1
            b.entries[id] = record
            b.order.append(id)
            while b.entries.count > Self.capacity, b.head < b.order.count {
                b.entries[b.order[b.head]] = nil
                b.head += 1
            }
            if b.head > Self.capacity { b.order.removeFirst(b.head); b.head = 0 }
            return id
        }
    }

    private func record(_ id: UInt64) -> ResumptionRecord? { book.withLock { $0.entries[id] } }

    /// What a ticket carries: "v2 <record number> <binding digest, hex>".
    private static func appData(id: UInt64, binding: ResumptionBinding) -> [UInt8] {
        Array("v2 \(id) \(Encoding.hex(binding.digest))".utf8)
    }

    private static func config(_ arg: UnsafeMutableRawPointer?) -> TLSContextConfig? {
        arg.map { Unmanaged<TLSContextConfig>.fromOpaque($0).takeUnretainedValue() }
    }

    /// The binding in force for a client of `ssl` now.
    static func currentBinding(_ state: TLSHandshakeState, _ config: TLSContextConfig) -> ResumptionBinding {
        ResumptionBinding(policy: config.policy, peer: state.peer, identities: state.bindingIdentities ?? config.bindingIdentities,
                          context: config.bindingContext, overrides: state.overrides ?? config.overrides)
    }

    /// OpenSSL's ticket generation callback: keeps the record and binds the ticket to it. A
    /// client whose certificate was not judged trusted gets a ticket that never resumes.
    static func generate(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let ssl, let config = config(arg), let session = SSL_get_session(ssl) else { return 1 }
        let state = TLSContext.handshakeState(ssl, config)
        let record: ResumptionRecord
        if let e = state.evaluation {
            guard e.trusted else { return 1 }
            record = ResumptionRecord(binding: state.binding ?? currentBinding(state, config),
                                      presentedChain: state.presentedChain, evaluation: e)
        } else {
            // No client certificate (client authentication optional or off).
            record = ResumptionRecord(binding: state.binding ?? currentBinding(state, config), presentedChain: [], evaluation: nil)
        }
        let data = appData(id: config.tickets.keep(record), binding: record.binding)
        _ = data.withUnsafeBytes { SSL_SESSION_set1_ticket_appdata(session, $0.baseAddress, $0.count) }
        return 1
    }

    /// OpenSSL's ticket decryption callback: resumes only a ticket whose record admits it under
    /// the binding in force (see ``ResumptionRecord/admit(under:policy:peer:purpose:)``).
    static func decrypt(_ ssl: OpaquePointer?, _ session: OpaquePointer?, _ status: SSL_TICKET_STATUS,
                        _ arg: UnsafeMutableRawPointer?) -> SSL_TICKET_RETURN {
        switch status {
        case SSL_TICKET_SUCCESS, SSL_TICKET_SUCCESS_RENEW: break
        case SSL_TICKET_EMPTY, SSL_TICKET_NO_DECRYPT: return SSL_TICKET_RETURN_IGNORE_RENEW
        default: return SSL_TICKET_RETURN_ABORT
        }
        guard let ssl, let session, let config = config(arg) else { return SSL_TICKET_RETURN_IGNORE_RENEW }
        let state = TLSContext.handshakeState(ssl, config)
        var raw: UnsafeMutableRawPointer? = nil
        var len = 0
        guard SSL_SESSION_get0_ticket_appdata(session, &raw, &len) == 1, let raw, len > 0, len < 4096 else {
            return SSL_TICKET_RETURN_IGNORE_RENEW
        }
        let got = Array(UnsafeRawBufferPointer(start: raw, count: len))
        let fields = String(decoding: got, as: UTF8.self).split(separator: " ", maxSplits: 2)
        guard fields.count == 3, fields[0] == "v2", let id = UInt64(fields[1]), let record = config.tickets.record(id),
              got == appData(id: id, binding: record.binding),
              let admitted = record.admit(under: currentBinding(state, config), policy: config.policy,
                                          peer: state.peer, purpose: .clientAuth) else {
            return SSL_TICKET_RETURN_IGNORE_RENEW
        }
        state.evaluation = admitted
        state.presentedChain = record.presentedChain
        state.binding = record.binding
        return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW
    }
}
