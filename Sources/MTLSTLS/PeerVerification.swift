internal import COpenSSL
import FoundationEssentials

// This file owns judging the peer inside OpenSSL's handshake: the verify callback that hands
// the presented chain to libmtls's evaluator, the peer a handshake resolves to (set by
// libmtls, by the application, or read from an application's `SSL`), and the alert a refusal
// sends.

extension TLSContext {
    // MARK: verification

    /// OpenSSL's whole-chain verification, replaced: the presented chain goes to the library's
    /// evaluator, the same one `mtls verify` uses; its result is kept on the connection.
    static func verifyCallback(_ store: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let store, let arg else { return 0 }
        let config = Unmanaged<TLSContextConfig>.fromOpaque(arg).takeUnretainedValue()
        let ssl = OpaquePointer(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()))
        let state = handshakeState(ssl, config)
        var chain: [Certificate] = []
        // Wrapped without a DER copy: the connection keeps these for its life, and OpenSSL's
        // session already holds the certificates (issue 40).
        if let leaf = X509_STORE_CTX_get0_cert(store), let c = try? Certificate(sharing: leaf) { chain.append(c) }
        if let untrusted = X509_STORE_CTX_get0_untrusted(store) {
            for i in 0..<mtls_ossl_sk_X509_num(untrusted) {
                guard let x = mtls_ossl_sk_X509_value(untrusted, i), let c = try? Certificate(sharing: x) else { continue }
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
        let staple = config.purpose == .serverAuth ? ssl.flatMap(stapledResponse) : nil
        let result: TrustResult
        var standing: EvaluationStanding? = nil
        if config.checksStapleAfterVerify, staple == nil, let ssl, SSL_version(ssl) != TLS1_3_VERSION {
            // TLS 1.2: the staple (if the server sends one) is not here yet. The path is judged
            // now; revocation in clientStatusCallback, before any application data. No standing:
            // a session made so is evaluated in full (revocation included) before it resumes.
            result = policy.verifyPeer(chain: chain, peer: state.peer, purpose: config.purpose, overrides: overrides,
                                       deferRevocation: true).result
            state.revocationAwaitingStaple = result.trusted
        } else {
            let made = policy.verifyPeer(chain: chain, peer: state.peer, purpose: config.purpose,
                                         overrides: overrides, stapledOCSP: staple)
            result = made.result
            standing = made.standing
        }
        let evaluated = SharedEvaluation(result)
        state.evaluated = evaluated
        if result.trusted {
            if let ssl, let session = SSL_get_session(ssl) {
                // The session this handshake makes (TLS 1.3 tickets are copies of it) carries
                // its binding and the chain to re-check; on an application's server context,
                // whose session cache OpenSSL consults alone, it also expires with its chain.
                // A server's record also goes into the tickets it issues (ServerTickets).
                let record = ResumptionRecord(binding: binding, presentedChain: chain, evaluated: evaluated, standing: standing,
                                              withDigest: config.purpose == .clientAuth)
                record.attach(to: session)
                state.record = record
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

    /// The OCSP response the server stapled to `ssl`'s handshake (DER, at most 1 MiB), if any.
    static func stapledResponse(_ ssl: OpaquePointer) -> [UInt8]? {
        var p: UnsafePointer<UInt8>? = nil
        let n = mtls_ossl_SSL_get_ocsp_staple(ssl, &p)
        guard n > 0, n <= 1 << 20, let p else { return nil }
        return Array(UnsafeBufferPointer(start: p, count: n))
    }

    /// A client's OCSP status callback, which OpenSSL makes after the server's certificate (and,
    /// in TLS 1.2, its CertificateStatus message) and before the handshake ends: a verification
    /// that left revocation for later (``TLSHandshakeState/revocationAwaitingStaple``) is
    /// completed here with the staple, if one came (a good staple answers without a fetch, a
    /// revoked one refuses; none: the policy's other sources). Returning 0 ends the handshake.
    static func clientStatusCallback(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let ssl, let arg, let state = TLSHandshakeState.of(ssl), state.revocationAwaitingStaple else { return 1 }
        state.revocationAwaitingStaple = false
        let config = Unmanaged<TLSContextConfig>.fromOpaque(arg).takeUnretainedValue()
        let staple = stapledResponse(ssl)
        let overrides = state.overrides ?? config.overrides
        let result = config.policy.verifyPeer(chain: state.presentedChain, peer: state.peer, purpose: config.purpose,
                                              overrides: overrides, stapledOCSP: staple, withStanding: false).result
        let evaluated = SharedEvaluation(result)
        state.evaluated = evaluated
        guard result.trusted else {
            SSL_set_verify_result(ssl, Int(x509Error(for: result)))
            return 0
        }
        // The session this handshake makes stands for the evaluation with revocation.
        if let binding = state.binding, let session = SSL_get_session(ssl) {
            ResumptionRecord(binding: binding, presentedChain: state.presentedChain, evaluated: evaluated).attach(to: session)
        }
        return 1
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
        if !codes.isDisjoint(with: [C.pinMismatch, C.pinExpired, C.notAllowed]) { return X509_V_ERR_CERT_REJECTED }
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
}
