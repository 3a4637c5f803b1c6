internal import COpenSSL
import FoundationEssentials

/// Automatic choice of the client identity from the server's CertificateRequest.
enum IdentitySelection {
    /// What the server asked for.
    struct Request {
        /// DER of each CA name the server listed (empty: any CA).
        var caNames: [[UInt8]]
        /// The same names as RFC 4514 text, for error messages.
        var caNameTexts: [String]
        /// OpenSSL key-type NIDs of the signature schemes the server accepts (empty: unknown).
        var signatureKeyTypes: Set<Int32>
    }

    /// The first identity in `candidates` that fits `request` at `now`.
    static func choose(_ candidates: [Identity], for request: Request, now: Date = Date()) -> Identity? {
        candidates.first { fits($0, request, now) }
    }

    static func fits(_ identity: Identity, _ request: Request, _ now: Date) -> Bool {
        let leaf = identity.leaf
        guard leaf.notBefore <= now, now <= leaf.notAfter else { return false }
        if let ekus = leaf.extendedKeyUsages, !ekus.contains(ExtendedKeyUsage.clientAuth), !ekus.contains(ExtendedKeyUsage.any) {
            return false
        }
        if !request.signatureKeyTypes.isEmpty {
            let base = EVP_PKEY_get_base_id(identity.privateKey.pkey)
            let usable: Set<Int32> = base == EVP_PKEY_RSA ? [EVP_PKEY_RSA, EVP_PKEY_RSA_PSS] : [base]
            if usable.isDisjoint(with: request.signatureKeyTypes) { return false }
        }
        if request.caNames.isEmpty { return true }
        // The server names the CAs it trusts: some certificate on our path must be issued by, or
        // be, one of them (a server pinning an intermediate lists the intermediate).
        let names = Set(request.caNames)
        return identity.allCertificates.contains { names.contains($0.issuerNameDER) || names.contains($0.subjectNameDER) }
    }

    /// Reads the CertificateRequest from OpenSSL's view of `ssl`.
    static func request(of ssl: OpaquePointer) -> Request {
        var req = Request(caNames: [], caNameTexts: [], signatureKeyTypes: [])
        if let sk = SSL_get_client_CA_list(ssl) {
            for i in 0..<mtls_ossl_sk_X509_NAME_num(sk) {
                guard let name = mtls_ossl_sk_X509_NAME_value(sk, i) else { continue }
                if let der = derEncode({ i2d_X509_NAME(name, $0) }) { req.caNames.append(der) }
                req.caNameTexts.append(Certificate.rfc4514(name))
            }
        }
        let n = SSL_get_sigalgs(ssl, -1, nil, nil, nil, nil, nil)
        if n > 0 {
            for i in 0..<n {
                var sign: Int32 = 0
                if SSL_get_sigalgs(ssl, i, &sign, nil, nil, nil, nil) > 0, sign != 0 { req.signatureKeyTypes.insert(sign) }
            }
        }
        return req
    }

    /// OpenSSL's certificate callback on a client with ``ClientIdentity/automatic(_:)``: called
    /// when the server asks for a certificate; installs the chosen identity on the `SSL`.
    static func certificateCallback(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let ssl, let arg else { return 0 }
        let config = Unmanaged<TLSContextConfig>.fromOpaque(arg).takeUnretainedValue()
        guard case .automatic(let candidates) = config.identity else { return 1 }
        // The callback also runs when no certificate was requested; nothing to choose then.
        guard SSL_get0_peer_certificate(ssl) != nil || SSL_get_client_CA_list(ssl) != nil || SSL_get_sigalgs(ssl, -1, nil, nil, nil, nil, nil) > 0 else { return 1 }
        let req = request(of: ssl)
        let state = TLSHandshakeState.of(ssl)
        guard let chosen = choose(candidates, for: req) else {
            state?.unmatchedCANames = req.caNameTexts
            return 0
        }
        guard SSL_use_certificate(ssl, chosen.leaf.x509) == 1,
              SSL_use_PrivateKey(ssl, chosen.privateKey.pkey) == 1,
              let sk = try? TLSContext.chainStack(chosen) else { return 0 }
        defer { mtls_ossl_sk_X509_free(sk) }
        guard mtls_ossl_SSL_set1_chain(ssl, sk) == 1 else { return 0 }
        state?.presentedIdentity = chosen
        return 1
    }
}
