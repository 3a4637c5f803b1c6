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
        /// The TLS SignatureScheme code points (RFC 8446 4.2.3) both sides accept (empty: unknown).
        var signatureSchemes: Set<UInt16> = []
        /// TLS 1.3 was negotiated: an ECDSA scheme then names its curve.
        var tls13 = false
    }

    /// The TLS 1.3 ECDSA scheme that signs with a key on the curve of `bits` (P-256, P-384, P-521).
    static func ecdsaScheme(curveBits bits: Int32) -> UInt16? {
        switch bits {
        case 256: return 0x0403  // ecdsa_secp256r1_sha256
        case 384: return 0x0503  // ecdsa_secp384r1_sha384
        case 521: return 0x0603  // ecdsa_secp521r1_sha512
        default: return nil
        }
    }

    /// The candidates that fit `request` at `now`, in their order.
    static func fitting(_ candidates: [IdentityCandidate], for request: Request, now: Date = Date()) -> [IdentityCandidate] {
        candidates.filter { fits(leaf: $0.leaf, certificates: $0.allCertificates, request, now) }
    }

    static func fits(leaf: Certificate, certificates: [Certificate], _ request: Request, _ now: Date) -> Bool {
        mismatch(leaf: leaf, certificates: certificates, request, now) == nil
    }

    /// Why an identity (its leaf, and the leaf with its chain) cannot answer `request` at `now`,
    /// or nil when it can.
    static func mismatch(leaf: Certificate, certificates: [Certificate], _ request: Request, _ now: Date) -> String? {
        guard leaf.notBefore <= now, now <= leaf.notAfter else { return "the certificate is not valid now" }
        if let ekus = leaf.extendedKeyUsages, !ekus.contains(ExtendedKeyUsage.clientAuth), !ekus.contains(ExtendedKeyUsage.any) {
            return "the certificate's extended key usage does not include clientAuth"
        }
        // The leaf's public key is the private key's (a token key included).
        guard let pkey = X509_get0_pubkey(leaf.x509) else { return "the certificate's key cannot be read" }
        let base = EVP_PKEY_get_base_id(pkey)
        let schemes = request.signatureSchemes.isEmpty ? "" : " (it accepts \(schemeNames(request.signatureSchemes)))"
        if !request.signatureKeyTypes.isEmpty {
            let usable: Set<Int32> = base == EVP_PKEY_RSA ? [EVP_PKEY_RSA, EVP_PKEY_RSA_PSS] : [base]
            if usable.isDisjoint(with: request.signatureKeyTypes) {
                return "the server accepts no signature scheme for our \(keyDescription(pkey)) key\(schemes)"
            }
        }
        // TLS 1.3 binds each ECDSA scheme to one curve: a P-384 key cannot answer a server that
        // accepts only ecdsa_secp256r1_sha256 (OpenSSL would then send no certificate at all).
        if request.tls13, base == EVP_PKEY_EC, !request.signatureSchemes.isEmpty {
            guard let scheme = ecdsaScheme(curveBits: EVP_PKEY_get_bits(pkey)),
                  request.signatureSchemes.contains(scheme) else {
                return "the server accepts no TLS 1.3 signature scheme for our \(keyDescription(pkey)) key\(schemes)"
            }
        }
        // TLS 1.3 signs CertificateVerify with RSA only as RSA-PSS: a server that lists only
        // rsa_pkcs1_* schemes (valid there for certificate signatures) cannot be answered by an RSA key.
        if request.tls13, base == EVP_PKEY_RSA, !request.signatureSchemes.isEmpty,
           request.signatureSchemes.isDisjoint(with: [0x0804, 0x0805, 0x0806]) {  // rsa_pss_rsae_sha256/384/512
            return "the server accepts no RSA-PSS scheme, the only way TLS 1.3 signs with an RSA key\(schemes)"
        }
        if request.caNames.isEmpty { return nil }
        // The server names the CAs it trusts: some certificate on our path must be issued by, or
        // be, one of them (a server pinning an intermediate lists the intermediate).
        let names = Set(request.caNames)
        if certificates.contains(where: { names.contains($0.issuerNameDER) || names.contains($0.subjectNameDER) }) { return nil }
        return "no certificate on its path is issued by a CA the server names (" +
            request.caNameTexts.map { "\"\($0)\"" }.joined(separator: ", ") + ")"
    }

    /// "EC P-256", "RSA 2048-bit", "ED25519".
    static func keyDescription(_ pkey: OpaquePointer) -> String {
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_EC: return "EC P-\(EVP_PKEY_get_bits(pkey))"
        case EVP_PKEY_RSA, EVP_PKEY_RSA_PSS: return "RSA \(EVP_PKEY_get_bits(pkey))-bit"
        case let id: return String(cString: OBJ_nid2sn(id))
        }
    }

    /// "0x0804".
    private static func hex4(_ v: UInt16) -> String {
        let h = String(v, radix: 16)
        return "0x" + String(repeating: "0", count: max(0, 4 - h.count)) + h
    }

    /// The TLS names of signature scheme code points, in code order ("rsa_pss_rsae_sha256").
    static func schemeNames(_ codes: Set<UInt16>) -> String {
        let names = Dictionary(TokenKey.schemeCodes.map { ($0.value, $0.key) }, uniquingKeysWith: { a, _ in a })
        return codes.sorted().map { names[$0] ?? hex4($0) }.joined(separator: ", ")
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
        req.tls13 = SSL_version(ssl) == TLS1_3_VERSION
        // The schemes both sides accept when OpenSSL has worked them out, else the server's list.
        typealias Getter = (OpaquePointer, Int32, UnsafeMutablePointer<Int32>?, UnsafeMutablePointer<UInt8>?,
                            UnsafeMutablePointer<UInt8>?) -> Int32
        let shared: Getter = { SSL_get_shared_sigalgs($0, $1, $2, nil, nil, $3, $4) }
        let peer: Getter = { SSL_get_sigalgs($0, $1, $2, nil, nil, $3, $4) }
        for get in [shared, peer] {
            let n = get(ssl, -1, nil, nil, nil)
            guard n > 0 else { continue }
            for i in 0..<n {
                var sign: Int32 = 0
                var rsig: UInt8 = 0, rhash: UInt8 = 0
                guard get(ssl, i, &sign, &rsig, &rhash) > 0 else { continue }
                if sign != 0 { req.signatureKeyTypes.insert(sign) }
                req.signatureSchemes.insert(UInt16(rhash) << 8 | UInt16(rsig))
            }
            break
        }
        return req
    }

    /// OpenSSL's certificate callback on a client with automatic selection: called when the
    /// server asks for a certificate; installs the chosen identity on the `SSL`.
    static func certificateCallback(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let ssl, let arg else { return 0 }
        let config = Unmanaged<TLSContextConfig>.fromOpaque(arg).takeUnretainedValue()
        guard let candidates = config.candidates else { return 1 }
        // The callback also runs when no certificate was requested; nothing to choose then.
        guard SSL_get0_peer_certificate(ssl) != nil || SSL_get_client_CA_list(ssl) != nil || SSL_get_sigalgs(ssl, -1, nil, nil, nil, nil, nil) > 0 else { return 1 }
        let req = request(of: ssl)
        let state = TLSHandshakeState.of(ssl)
        let fitting = fitting(candidates, for: req)
        if fitting.isEmpty {
            state?.unmatchedCANames = req.caNameTexts
            state?.unmatchedSchemes = req.signatureSchemes.isEmpty ? nil : schemeNames(req.signatureSchemes)
            return 0
        }
        var firstError: MTLSError?
        for candidate in fitting {
            let chosen: Identity
            do {
                chosen = try candidate.identity()
            } catch {
                if firstError == nil {
                    firstError = error as? MTLSError ?? MTLSError(.internal, "\(error)")
                }
                continue
            }
            // A token key signs only with the schemes of its token's mechanisms: one that has
            // none the server accepts cannot answer it.
            if !req.signatureSchemes.isEmpty, let context = TokenKey.context(of: chosen.privateKey) {
                let codes = context.signatureSchemes(keyType: EVP_PKEY_get_base_id(chosen.privateKey.pkey))
                    .compactMap { TokenKey.schemeCodes[$0] }
                if req.signatureSchemes.isDisjoint(with: codes) { continue }
            }
            guard SSL_use_certificate(ssl, chosen.leaf.x509) == 1,
                  SSL_use_PrivateKey(ssl, chosen.privateKey.pkey) == 1,
                  let sk = try? TLSContext.chainStack(chosen) else { return 0 }
            defer { mtls_ossl_sk_X509_free(sk) }
            guard mtls_ossl_SSL_set1_chain(ssl, sk) == 1 else { return 0 }
            state?.presentedIdentity = chosen
            return 1
        }
        state?.selectionError = firstError
        return 0
    }
}
