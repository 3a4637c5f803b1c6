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
    let policy: TrustPolicyHandle
    let purpose: TrustPurpose
    let identity: ClientIdentity
    /// Client side, automatic selection: the identities to choose from.
    let candidates: [IdentityCandidate]?
    /// Server side: ALPN protocols in wire format (length-prefixed), kept at a stable address.
    let alpnWire: UnsafeMutableBufferPointer<UInt8>?

    init(policy: TrustPolicyHandle, purpose: TrustPurpose, identity: ClientIdentity, serverALPN: [String]) throws {
        self.policy = policy
        self.purpose = purpose
        self.identity = identity
        candidates = identity.selectionCandidates
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
    /// Set when automatic selection found no identity: the CA names the server asked for.
    var unmatchedCANames: [String]?
    /// Set when automatic selection chose identities but none could be loaded (a token's PIN...).
    var selectionError: MTLSError?
    /// The identity presented (explicit or chosen automatically).
    var presentedIdentity: Identity?
    /// Where this connection's session is cached, and under which key.
    var sessionCache: SessionCache?
    var sessionKey: String?
    /// The policy version the session cache entry must match (see ``SessionCache/stamp(_:)``).
    var policyStamp: SessionCache.PolicyStamp?

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

    deinit { SSL_CTX_free(ctx) }

    private init(ctx: OpaquePointer, config: TLSContextConfig) {
        self.ctx = ctx
        self.config = config
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
                                              identity: options.identity, serverALPN: [])
            var explicit: Identity? = nil
            if case .identity(let id) = options.identity { explicit = id }
            try install(on: ctx, config: config, identity: explicit, verifyMode: SSL_VERIFY_PEER)
            if config.candidates != nil {
                SSL_CTX_set_cert_cb(ctx, { ssl, arg in IdentitySelection.certificateCallback(ssl, arg) },
                                    Unmanaged.passUnretained(config).toOpaque())
            }
            // Client sessions go to our own cache (keyed by host, names, identity), never to
            // OpenSSL's internal one, which a client does not use for lookups anyway.
            _ = mtls_ossl_SSL_CTX_set_session_cache_mode(ctx, Int(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE))
            SSL_CTX_sess_set_new_cb(ctx) { ssl, session in SessionCache.newSessionCallback(ssl, session) }
            return TLSContext(ctx: ctx, config: config)
        } catch {
            SSL_CTX_free(ctx)
            throw error
        }
    }

    /// A server context for `options`.
    static func server(_ options: TLSServerOptions) throws -> TLSContext {
        let ctx = try newContext()
        do {
            try setVersions(ctx, options.minVersion, options.maxVersion)
            let config = try TLSContextConfig(policy: options.clientPolicySource, purpose: .clientAuth,
                                              identity: .none, serverALPN: options.alpn)
            let mode: Int32
            switch options.clientAuthentication {
            case .none: mode = SSL_VERIFY_NONE
            case .optional: mode = SSL_VERIFY_PEER
            case .require: mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
            }
            if options.clientAuthentication != .none { try requireClientAnchors(options.clientPolicySource.current) }
            try install(on: ctx, config: config, identity: options.identity, verifyMode: mode)
            if options.clientAuthentication != .none {
                let names = options.clientCANames ?? options.clientPolicySource.current.anchors
                if !names.isEmpty, let sk = mtls_ossl_sk_X509_NAME_new_null() {
                    for c in names { _ = mtls_ossl_sk_X509_NAME_push_dup(sk, X509_get_subject_name(c.x509)) }
                    SSL_CTX_set_client_CA_list(ctx, sk) // takes ownership
                }
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
            // Every accepted client is judged by our evaluator: no resumption that would skip it.
            _ = mtls_ossl_SSL_CTX_set_session_cache_mode(ctx, Int(SSL_SESS_CACHE_OFF))
            _ = mtls_ossl_SSL_CTX_set_options(ctx, mtls_ossl_SSL_OP_NO_TICKET())
            _ = SSL_CTX_set_num_tickets(ctx, 0)
            return TLSContext(ctx: ctx, config: config)
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
    static func configure(sslContext ctx: OpaquePointer, identity: Identity?, policy: TrustPolicyHandle?,
                          purpose: TrustPurpose) throws {
        let handle = policy ?? TrustPolicyHandle(TrustPolicy())
        if purpose == .clientAuth { try requireClientAnchors(handle.current) }
        let config = try TLSContextConfig(policy: handle, purpose: purpose,
                                          identity: identity.map { .identity($0) } ?? .none, serverALPN: [])
        // The application's own choices (require a client certificate, verify once, post-handshake)
        // are kept; libmtls only adds SSL_VERIFY_PEER and its evaluator.
        let kept = SSL_CTX_get_verify_mode(ctx) & (SSL_VERIFY_FAIL_IF_NO_PEER_CERT | SSL_VERIFY_CLIENT_ONCE | SSL_VERIFY_POST_HANDSHAKE)
        try install(on: ctx, config: config, identity: identity, verifyMode: SSL_VERIFY_PEER | kept, ownContext: false)
    }

    /// A server that verifies clients needs anchors for them: it never trusts the system store
    /// for clients unless the policy says so (``TrustPolicy/systemAnchorsForClients``).
    static func requireClientAnchors(_ policy: TrustPolicy) throws {
        guard !policy.hasAnchors, !policy.systemAnchorsForClients else { return }
        throw MTLSError(.invalidPolicy, "a server that verifies client certificates needs client anchors (the CA that issues " +
                        "your clients' certificates); to accept clients of the system trust store, say so explicitly " +
                        "(system_anchors_for_clients / mtls_policy_set_system_anchors_for_clients)")
    }

    /// The common part: identity, verification through our evaluator, alert bookkeeping.
    /// An application's context keeps its own info callback and options.
    private static func install(on ctx: OpaquePointer, config: TLSContextConfig, identity: Identity?, verifyMode: Int32,
                                ownContext: Bool = true) throws {
        if let identity { try use(identity, on: ctx) }
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

    /// Records alerts sent and received, so errors can say which side refused; tolerates a peer
    /// that closes without close_notify.
    private static func installAlertTracking(_ ctx: OpaquePointer) {
        SSL_CTX_set_info_callback(ctx) { ssl, where_, value in
            guard (where_ & SSL_CB_ALERT) != 0, (value & 0xff) != 0 /* close_notify */ else { return }
            let state = TLSHandshakeState.of(ssl)
            let text = TLSContext.alertText(value & 0xff)
            if (where_ & SSL_CB_READ) != 0 { state?.receivedAlert = text } else { state?.sentAlert = text }
        }
        _ = mtls_ossl_SSL_CTX_set_options(ctx, mtls_ossl_SSL_OP_IGNORE_UNEXPECTED_EOF())
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

    /// Makes `identity` the context's certificate, key and chain.
    private static func use(_ identity: Identity, on ctx: OpaquePointer) throws {
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
        let state: TLSHandshakeState
        if let s = TLSHandshakeState.of(ssl) {
            state = s
        } else {
            // A context the application owns that did not call mtls_ssl_set_peer: the host comes
            // from what it set on the SSL (no port: only port-less rules apply). None set is not
            // "no name check": the evaluator refuses the server with no_peer_name unless the
            // policy's name check is off or a host rule decides the name.
            state = TLSHandshakeState()
            if let ssl {
                if config.purpose == .serverAuth {
                    if let p = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), TLSExData.ctxPeer) {
                        state.peer = Unmanaged<PeerBox>.fromOpaque(p).takeUnretainedValue().peer
                    } else {
                        state.peer = TrustPeer(host: applicationHostName(ssl))
                    }
                }
                state.attach(to: ssl)
            }
        }
        var chain: [Certificate] = []
        if let leaf = X509_STORE_CTX_get0_cert(store), let c = try? Certificate(borrowing: leaf) { chain.append(c) }
        if let untrusted = X509_STORE_CTX_get0_untrusted(store) {
            for i in 0..<mtls_ossl_sk_X509_num(untrusted) {
                guard let x = mtls_ossl_sk_X509_value(untrusted, i), let c = try? Certificate(borrowing: x) else { continue }
                if chain.first != c { chain.append(c) }
            }
        }
        state.presentedChain = chain
        let policy = config.policy.current
        if state.policyStamp != nil { state.policyStamp = SessionCache.stamp(policy) }
        let result = policy.evaluate(chain: chain, peer: state.peer, purpose: config.purpose, at: nil)
        state.evaluation = result
        if result.trusted {
            X509_STORE_CTX_set_error(store, X509_V_OK)
            return 1
        }
        X509_STORE_CTX_set_error(store, x509Error(for: result))
        return 0
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
        if let h = options.policyHandle { key.policy = ObjectIdentifier(h); keep.append(h) }
        else if let p = options.policy { key.policy = ObjectIdentifier(p); keep.append(p) }
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

/// Client sessions for resumption, keyed by host, port, names and identity; each remembers the
/// evaluation of the full handshake that made it (a resumed handshake carries no certificate).
final class SessionCache: Sendable {
    /// A cached session with the evaluation made for it and the policy version that made it.
    /// An established `SSL_SESSION` is reference counted and not changed again, and OpenSSL lets
    /// threads resume from one session at once: sharing the pointer is safe.
    private struct Entry: @unchecked Sendable {
        var session: OpaquePointer
        var evaluation: TrustResult?
        var policy: PolicyStamp
    }
    private let entries = Mutex<[String: Entry]>([:])

    deinit { entries.withLock { for e in $0.values { SSL_SESSION_free(e.session) } } }

    /// A new reference to the cached session for `key`, with its evaluation, if it was
    /// established under the policy version `policy` (a changed policy means a full handshake).
    func lookup(_ key: String, policy: PolicyStamp) -> (OpaquePointer, TrustResult?)? {
        entries.withLock { entries in
            guard let e = entries[key], e.policy == policy else { return nil }
            SSL_SESSION_up_ref(e.session)
            return (e.session, e.evaluation)
        }
    }

    /// Keeps `session` (taking the caller's reference) for `key`.
    func store(_ key: String, _ session: OpaquePointer, _ evaluation: TrustResult?, policy: PolicyStamp) {
        entries.withLock { entries in
            if let old = entries[key] { SSL_SESSION_free(old.session) }
            if entries.count >= 1024 {
                for e in entries.values { SSL_SESSION_free(e.session) }
                entries.removeAll()
            }
            entries[key] = Entry(session: session, evaluation: evaluation, policy: policy)
        }
    }

    func remove(_ key: String) {
        entries.withLock { entries in
            if let old = entries.removeValue(forKey: key) { SSL_SESSION_free(old.session) }
        }
    }

    /// Identifies the policy version in force: the policy object and its version number.
    /// (The policy is held, so its address cannot be reused by another while the entry lives.)
    struct PolicyStamp: Equatable {
        var policy: TrustPolicy
        var version: UInt64
        static func == (a: PolicyStamp, b: PolicyStamp) -> Bool { a.policy === b.policy && a.version == b.version }
    }

    static func stamp(_ policy: TrustPolicy) -> PolicyStamp { PolicyStamp(policy: policy, version: policy.version) }

    /// OpenSSL's new-session callback: TLS 1.2 sessions after the handshake, TLS 1.3 tickets
    /// whenever they arrive. Returns 1 when the cache took the reference.
    static func newSessionCallback(_ ssl: OpaquePointer?, _ session: OpaquePointer?) -> Int32 {
        guard let session, let state = TLSHandshakeState.of(ssl), let cache = state.sessionCache,
              let key = state.sessionKey, let stamp = state.policyStamp, SSL_SESSION_is_resumable(session) == 1 else { return 0 }
        cache.store(key, session, state.evaluation, policy: stamp)
        return 1
    }
}
