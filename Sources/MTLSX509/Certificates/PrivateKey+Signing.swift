internal import COpenSSL

/// Signatures made with an identity's key for another TLS stack (swift-nio-ssl's custom private
/// key, for one): the stack runs the handshake and asks libmtls for each signature, so a key on a
/// PKCS#11 token signs on the token exactly as it does in libmtls's own connections.
extension PrivateKey {
    /// The TLS 1.2/1.3 signature schemes (RFC 8446 §4.2.3 code points, such as `0x0403` for
    /// `ecdsa_secp256r1_sha256`) this key can make with ``sign(_:tlsSignatureScheme:)``, most
    /// preferred first.
    ///
    /// A key in memory offers every scheme of its type (RSA: PSS then PKCS#1 v1.5, SHA-256/384/512;
    /// EC: ECDSA with its curve's hash; Ed25519). A key on a token offers only the schemes its
    /// token has mechanisms for (`C_GetMechanismList`). Throws ``MTLSError/Code/unsupported`` for a
    /// key type TLS cannot sign with, or a token with no usable mechanism.
    public func tlsSignatureSchemes() throws -> [UInt16] {
        if let names = try TokenKey.signatureAlgorithms(self) {
            return names.split(separator: ":").compactMap { TokenKey.schemeCodes[String($0)] }
        }
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA: return [0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0601]
        case EVP_PKEY_ED25519: return [0x0807]
        case EVP_PKEY_EC:
            switch EVP_PKEY_get_bits(pkey) {
            case 256: return [0x0403]
            case 384: return [0x0503]
            case 521: return [0x0603]
            default: break
            }
        default: break
        }
        throw MTLSError(.unsupported, "a \(keyType.shortName) key cannot make TLS signatures")
    }

    /// Signs `message` (the data itself, not its hash) as TLS signature scheme `scheme` asks:
    /// the scheme's hash, and for RSA its padding (PKCS#1 v1.5, or PSS with a salt as long as the
    /// hash, as TLS requires). A key on a token signs on the token (the call blocks while it does:
    /// make it off any event loop); a key in memory signs with OpenSSL.
    ///
    /// Throws ``MTLSError/Code/unsupported`` for a scheme that is not one of this key's type, and
    /// a token key's own errors (``MTLSError/Code/tokenRemoved``, ``MTLSError/Code/pinRequired``...).
    public func sign(_ message: [UInt8], tlsSignatureScheme scheme: UInt16) throws -> [UInt8] {
        let type = EVP_PKEY_get_base_id(pkey)
        let digest: OpaquePointer?
        var pss = false
        switch (scheme, type) {
        case (0x0401, EVP_PKEY_RSA), (0x0403, EVP_PKEY_EC): digest = EVP_sha256()
        case (0x0501, EVP_PKEY_RSA), (0x0503, EVP_PKEY_EC): digest = EVP_sha384()
        case (0x0601, EVP_PKEY_RSA), (0x0603, EVP_PKEY_EC): digest = EVP_sha512()
        case (0x0804, EVP_PKEY_RSA): digest = EVP_sha256(); pss = true
        case (0x0805, EVP_PKEY_RSA): digest = EVP_sha384(); pss = true
        case (0x0806, EVP_PKEY_RSA): digest = EVP_sha512(); pss = true
        case (0x0807, EVP_PKEY_ED25519): digest = nil
        default:
            throw MTLSError(.unsupported, "TLS signature scheme 0x\(String(scheme, radix: 16)) is not one a \(keyType.shortName) key makes")
        }
        guard let context = EVP_MD_CTX_new() else { throw MTLSError(.noMemory, "EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        OpenSSLErrorQueue.clear()
        var keyContext: OpaquePointer? = nil
        guard EVP_DigestSignInit(context, &keyContext, digest, nil, pkey) == 1,
              !pss || (EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PSS_PADDING) == 1
                       && EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, RSA_PSS_SALTLEN_DIGEST) == 1) else {
            if let failure = TokenKey.takeFailure() { throw failure }
            throw MTLSError.openSSL(.unsupported, "the \(keyType.shortName) key cannot sign with TLS scheme 0x\(String(scheme, radix: 16))")
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1, length > 0 else {
            if let failure = TokenKey.takeFailure() { throw failure }
            throw MTLSError.openSSL(.token, "the \(keyType.shortName) key cannot tell its signature size")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else {
            if let failure = TokenKey.takeFailure() { throw failure }
            throw MTLSError.openSSL(tokenURI == nil ? .unsupported : .token, "signing with the \(keyType.shortName) key failed")
        }
        return Array(signature.prefix(length))
    }
}
