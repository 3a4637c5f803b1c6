internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// This file owns building OpenSSL contexts: libmtls's own client and server `SSL_CTX`s and the
// configuration of an application's, with identity, versions, ALPN, tickets, alert tracking
// and the identity put on one `SSL`. Elsewhere: the state the callbacks read
// (TLSCallbackState.swift), the verify callback and peer resolution (PeerVerification.swift),
// the shared client contexts (ClientContextCache.swift), client sessions (SessionCache.swift),
// server tickets (ServerTickets.swift).

/// An OpenSSL `SSL_CTX` made by libmtls, in libmtls's own library context, with its identity,
/// verification through ``TrustPolicy/evaluate(chain:host:purpose:at:)`` and (clients) a session
/// cache. Shared by every connection made with the same settings; thread-safe.
package final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer
    package let config: TLSContextConfig
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

    /// A new context of libmtls's own, offering (a client) or choosing (a server) its cipher
    /// suites as ``ownSuites(_:)`` lists them.
    private static func newContext(server: Bool) throws -> OpaquePointer {
        guard let ctx = SSL_CTX_new_ex(LibraryContext.shared.ctx, nil, TLS_method()) else {
            throw MTLSError.openSSL(.internal, "cannot create a TLS context")
        }
        setOwnSuites(ctx, server: server)
        return ctx
    }

    /// One cipher suite of a context's list, as ``ownSuites(_:)`` sees it.
    package struct Suite: Equatable, Sendable {
        package let name: String
        /// Its key exchange and authentication (OpenSSL's NIDs: `NID_kx_any` and `NID_auth_any`
        /// for TLS 1.3's suites).
        package let kx: Int32, auth: Int32
        /// 128 or 256 for AES-GCM, else 0.
        package let aesGCMBits: Int

        package init(name: String, kx: Int32, auth: Int32, aesGCMBits: Int) {
            self.name = name; self.kx = kx; self.auth = auth; self.aesGCMBits = aesGCMBits
        }

        /// A TLS 1.3 suite (set with `SSL_CTX_set_ciphersuites`), else TLS 1.2's.
        package var tls13: Bool { kx == NID_kx_any }

        /// TLS 1.2's pre-shared-key and SRP suites: negotiated only with a PSK callback or SRP
        /// parameters, which libmtls's contexts never have (TLS 1.3 resumption is not one of them).
        var needsPSKOrSRP: Bool {
            [NID_kx_psk, NID_kx_ecdhe_psk, NID_kx_dhe_psk, NID_kx_rsa_psk, NID_kx_srp].contains(kx)
                || [NID_auth_psk, NID_auth_srp].contains(auth)
        }
    }

    /// The suites of libmtls's own contexts, from `suites` (what OpenSSL and the system's
    /// configuration enable, in their order):
    /// - the same suites can be negotiated, with any peer: only those a libmtls context can never
    ///   negotiate are left out (``Suite/needsPSKOrSRP``). OpenSSL already leaves them out of
    ///   every ClientHello and never chooses them, but it walks the whole list when it builds each
    ///   ClientHello, and they are half of OpenSSL 3.0's default list;
    /// - each AES-128-GCM suite moves to just before the first AES-256-GCM suite of its protocol,
    ///   key exchange and authentication, as Go's crypto/tls, BoringSSL and Mozilla's recommended
    ///   configurations order them. Both give 128-bit security or more (as do the P-256 and X25519
    ///   key exchanges); AES-128-GCM's suites hash with SHA-256, which CPUs compute in hardware
    ///   (SHA-NI, ARMv8), where SHA-384 is software: 3 to 5 % less per resumed handshake, on each
    ///   side (bench/REPORT.md).
    package static func ownSuites(_ suites: [Suite]) -> [Suite] {
        var ordered = suites.filter { !$0.needsPSKOrSRP }
        for suite in ordered where suite.aesGCMBits == 128 {
            guard let from = ordered.firstIndex(of: suite),
                  let to = ordered.firstIndex(where: { $0.aesGCMBits == 256 && $0.kx == suite.kx && $0.auth == suite.auth }),
                  to < from else { continue }
            ordered.remove(at: from)
            ordered.insert(suite, at: to)
        }
        return ordered
    }

    /// Gives a new context ``ownSuites(_:)``. A server chooses in that order
    /// (`SSL_OP_CIPHER_SERVER_PREFERENCE`) unless the client lists ChaCha20-Poly1305 first, which
    /// says it has no AES hardware (`SSL_OP_PRIORITIZE_CHACHA`), as Go's server does. A list
    /// OpenSSL would not take back leaves the context's as it was: this is a preference, never a
    /// reason to fail.
    private static func setOwnSuites(_ ctx: OpaquePointer, server: Bool) {
        if server {
            _ = mtls_ossl_SSL_CTX_set_options(ctx, mtls_ossl_SSL_OP_CIPHER_SERVER_PREFERENCE() | mtls_ossl_SSL_OP_PRIORITIZE_CHACHA())
        }
        guard let stack = SSL_CTX_get_ciphers(ctx) else { return }
        var suites: [Suite] = []
        for i in 0..<OPENSSL_sk_num(stack) {
            guard let c = OpaquePointer(OPENSSL_sk_value(stack, i)), let name = SSL_CIPHER_get_name(c) else { continue }
            let nid = SSL_CIPHER_get_cipher_nid(c)
            suites.append(Suite(name: String(cString: name), kx: SSL_CIPHER_get_kx_nid(c), auth: SSL_CIPHER_get_auth_nid(c),
                                aesGCMBits: nid == NID_aes_128_gcm ? 128 : nid == NID_aes_256_gcm ? 256 : 0))
        }
        let own = ownSuites(suites)
        guard own != suites else { return }
        let tls13 = own.filter(\.tls13).map(\.name).joined(separator: ":")
        let tls12 = own.filter { !$0.tls13 }.map(\.name).joined(separator: ":")
        if !tls13.isEmpty { _ = SSL_CTX_set_ciphersuites(ctx, tls13) }
        if !tls12.isEmpty { _ = SSL_CTX_set_cipher_list(ctx, tls12) }
        OpenSSLErrorQueue.clear()
    }

    /// Whether this OpenSSL knows the key-exchange group `name` ("X25519", "P-256",
    /// "X25519MLKEM768"): whether a context takes it as its only group.
    package static func groupIsKnown(_ name: String) -> Bool {
        guard !name.isEmpty, !name.contains(":"), let ctx = SSL_CTX_new_ex(LibraryContext.shared.ctx, nil, TLS_method()) else { return false }
        defer { SSL_CTX_free(ctx) }
        let ok = name.withCString { SSL_CTX_ctrl(ctx, SSL_CTRL_SET_GROUPS_LIST, 0, UnsafeMutableRawPointer(mutating: $0)) } == 1
        ERR_clear_error()
        return ok
    }

    private static func setVersions(_ ctx: OpaquePointer, _ min: TLSVersion, _ max: TLSVersion) throws {
        guard min <= max else { throw MTLSError(.invalidArgument, "minimum TLS version \(min) is above the maximum \(max)") }
        func proto(_ v: TLSVersion) -> Int32 { v == .tls12 ? TLS1_2_VERSION : TLS1_3_VERSION }
        _ = mtls_ossl_SSL_CTX_set_min_proto_version(ctx, proto(min))
        _ = mtls_ossl_SSL_CTX_set_max_proto_version(ctx, proto(max))
    }

    /// A client context for `options`.
    static func client(_ options: TLSClientOptions) throws -> TLSContext {
        let ctx = try newContext(server: false)
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
    package static func server(_ options: TLSServerOptions, identitySource: IdentitySource? = nil) throws -> TLSContext {
        try options.clientOverrides?.validate()
        // Read once: the identity put on the context, bound into its sessions and stapled for.
        let identity = identitySource?.current ?? options.identity
        let ctx = try newContext(server: true)
        do {
            try setVersions(ctx, options.minVersion, options.maxVersion)
            let config = try TLSContextConfig(policy: options.clientPolicySource, purpose: .clientAuth,
                                              identity: .none, serverALPN: options.alpn,
                                              serverIdentity: identity,
                                              overrides: options.clientOverrides, identitySource: identitySource,
                                              installedIdentity: identity)
            let mode: Int32
            switch options.clientAuthentication {
            case .none: mode = SSL_VERIFY_NONE
            case .optional: mode = SSL_VERIFY_PEER
            case .require: mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
            }
            if options.clientAuthentication != .none { try requireClientAnchors(options.clientPolicySource, options.clientOverrides) }
            try install(on: ctx, config: config, identity: identity, verifyMode: mode)
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
            // Its fetch failures go to the listener's events (those of its identity source).
            // Its limits and maximum age are those of the listener's policy.
            let stapler = OCSPStapler.start(for: identity, options: options.clientPolicySource.revocationFetch,
                                            events: identitySource?.events)
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
                                          applicationOwned: true, overrides: overrides, identitySource: identitySource,
                                          installedIdentity: identity)
        // The application's own choices (require a client certificate, verify once, post-handshake)
        // are kept; libmtls only adds SSL_VERIFY_PEER and its evaluator.
        let kept = SSL_CTX_get_verify_mode(ctx) & (SSL_VERIFY_FAIL_IF_NO_PEER_CERT | SSL_VERIFY_CLIENT_ONCE | SSL_VERIFY_POST_HANDSHAKE)
        // A status callback installed by an earlier configuration points at its stapler, which
        // goes with it: taken off first (an application's own callback is left alone).
        if let previous = SSL_CTX_get_ex_data(ctx, TLSExData.ctx) {
            let earlier = Unmanaged<TLSContextConfig>.fromOpaque(previous).takeUnretainedValue()
            if earlier.stapler != nil || earlier.followingStapler != nil { _ = mtls_ossl_SSL_CTX_set_status_cb(ctx, nil, nil) }
        }
        // A server staples OCSP for its own certificate as the listener does (fetched and
        // refreshed in the background, never on the handshake path); following an identity
        // source, for the identity in force (a new stapler when it changes, as a listener's).
        // Its fetch failures go to the identity source's events, else to the policy's.
        if purpose == .clientAuth, let identitySource {
            config.followingStapler = FollowingStapler(source: identitySource, options: handle.revocationFetch,
                                                       events: identitySource.events)
        } else if purpose == .clientAuth, let identity,
                  let stapler = OCSPStapler.start(for: identity, options: handle.revocationFetch, events: handle.events) {
            config.stapler = stapler
        }
        try install(on: ctx, config: config, identity: identity, verifyMode: SSL_VERIFY_PEER | kept, ownContext: false)
        if let stapler = config.stapler { OCSPStapler.install(stapler, on: ctx) }
        config.followingStapler?.install(on: ctx)
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
        if config.purpose == .serverAuth, config.policy.wantsOCSP {
            _ = mtls_ossl_SSL_CTX_request_ocsp_staple(ctx)
            // TLS 1.2 carries the staple in a message after the certificate: the status
            // callback (made after it, before the handshake ends, staple or not) checks it.
            _ = mtls_ossl_SSL_CTX_set_status_cb(ctx, { ssl, arg in TLSContext.clientStatusCallback(ssl, arg) },
                                                Unmanaged.passUnretained(config).toOpaque())
            config.checksStapleAfterVerify = true
        }
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
        // An identity's key always matches its certificate (checked when it was made): what
        // OpenSSL refuses here is the certificate for this context (its security level: "ee key
        // too small"), the same code as a fixed identity refused by its context.
        guard SSL_use_cert_and_key(ssl, identity.leaf.x509, identity.privateKey.pkey, sk, 1) == 1 else {
            throw MTLSError.openSSL(.handshake, "cannot use the identity \"\(identity.leaf.subjectSummary)\"")
        }
    }

    /// A borrowed stack of the identity's issuers (up to but excluding a self-signed root, which
    /// a peer never needs to be sent). Free with `sk_X509_free` only.
    static func chainStack(_ identity: Identity) throws -> OpaquePointer {
        guard let sk = mtls_ossl_sk_X509_new_null() else { throw MTLSError(.noMemory, "out of memory") }
        for c in identity.chain where !c.isSelfSigned { _ = mtls_ossl_sk_X509_push(sk, c.x509) }
        return sk
    }
}
