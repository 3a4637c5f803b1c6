internal import COpenSSL
import FoundationEssentials

/// Builds a PKCS#12 file for one identity with OpenSSL's PKCS#12 functions, in libmtls's own
/// library context: the bags `PKCS12_create_ex` makes (the certificates in an encrypted safe, the
/// shrouded key in a plain one, friendly name and local key id on the leaf and the key), built
/// one by one so the friendly name is written as UTF-16 (characters outside the BMP as surrogate
/// pairs, as Java and Windows write them; `PKCS12_create` refuses those).
struct PKCS12Writer {
    let identity: Identity
    let password: SecretBytes
    let options: PKCS12ExportOptions

    func write() throws -> [UInt8] {
        guard identity.privateKey.tokenURI == nil else {
            throw MTLSError(.unsupported, "the identity's private key lives on a token and cannot be exported")
        }
        guard (1...PKCS12Limits.maxIterations).contains(options.iterations) else {
            throw MTLSError(.invalidArgument, "iteration count \(options.iterations) is outside 1...\(PKCS12Limits.maxIterations)")
        }
        if password.withBytes({ $0.contains(0) }) {
            throw MTLSError(.invalidArgument, "a PKCS#12 password cannot contain a NUL byte")
        }
        let ctx = LibraryContext.shared
        let (nid, macName): (Int32, String) = options.scheme == .modern
            ? (NID_aes_256_cbc, "SHA256")
            : (NID_pbe_WithSHA1And3_Key_TripleDES_CBC, "SHA1")
        guard let md = EVP_MD_fetch(ctx.ctx, macName, nil) else {
            throw MTLSError.openSSL(.unsupported, "\(macName) is not available")
        }
        defer { EVP_MD_free(md) }
        guard let ca = mtls_ossl_sk_X509_new_null() else { throw MTLSError(.noMemory, "out of memory") }
        defer { mtls_ossl_sk_X509_pop_free(ca) }
        for cert in identity.chain {
            guard mtls_ossl_sk_X509_push(ca, cert.retainedX509()) > 0 else { throw MTLSError(.noMemory, "out of memory") }
        }
        var pw = [CChar]()
        pw.reserveCapacity(password.count + 1)
        password.withBytes { for b in $0 { pw.append(CChar(bitPattern: b)) } }
        pw.append(0)
        defer { pw.withUnsafeMutableBytes { mtls_ossl_OPENSSL_cleanse($0.baseAddress, $0.count) } }
        let name = options.friendlyName ?? identity.friendlyName
        let iter = Int32(options.iterations)
        let der: [UInt8]? = try pw.withUnsafeMutableBufferPointer { pwBuf -> [UInt8]? in
            let p12 = try ctx.asThreadDefault {
                try build(name: name, password: pwBuf.baseAddress, nid: nid, iterations: iter, ctx: ctx)
            }
            defer { PKCS12_free(p12) }
            let macOK = ctx.asThreadDefault {
                PKCS12_set_mac(p12, pwBuf.baseAddress, -1, nil, 0, iter, md)
            }
            guard macOK == 1 else { throw MTLSError.openSSL(.internal, "cannot compute the PKCS#12 MAC") }
            return derEncode { i2d_PKCS12(p12, $0) }
        }
        guard let der else { throw MTLSError.openSSL(.internal, "cannot encode the PKCS#12 file") }
        OpenSSLErrorQueue.clear()
        return der
    }

    /// The PKCS#12 structure without its MAC. `password` is NUL-terminated.
    private func build(name: String?, password: UnsafeMutablePointer<CChar>?, nid: Int32, iterations: Int32,
                       ctx: LibraryContext) throws -> OpaquePointer {
        let leaf = identity.leaf.x509, pkey = identity.privateKey.pkey
        guard X509_check_private_key(leaf, pkey) == 1 else {
            throw MTLSError.openSSL(.invalidArgument, "the private key does not belong to the certificate")
        }
        var keyID = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE)), keyIDLen: UInt32 = 0
        guard X509_digest(leaf, EVP_sha1(), &keyID, &keyIDLen) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot compute the local key id")
        }
        let bmpName: [UInt8]? = name.map { n in n.utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } }
        func label(_ bag: OpaquePointer?) throws {
            guard let bag else { throw MTLSError.openSSL(.internal, "cannot build a PKCS#12 bag") }
            if var bmp = bmpName {
                guard let count = Int32(exactly: bmp.count),
                      PKCS12_add_friendlyname_uni(bag, &bmp, count) == 1 else {
                    throw MTLSError.openSSL(.invalidArgument, "cannot write the friendly name")
                }
            }
            guard PKCS12_add_localkeyid(bag, &keyID, Int32(keyIDLen)) == 1 else {
                throw MTLSError.openSSL(.internal, "cannot write the local key id")
            }
        }
        var safes: OpaquePointer? = nil
        defer { if let safes { mtls_ossl_sk_PKCS7_pop_free(safes) } }
        var certBags: OpaquePointer? = nil
        defer { if let certBags { mtls_ossl_sk_PKCS12_SAFEBAG_pop_free(certBags) } }
        try label(PKCS12_add_cert(&certBags, leaf))
        for cert in identity.chain {
            guard PKCS12_add_cert(&certBags, cert.x509) != nil else { throw MTLSError.openSSL(.internal, "cannot build a PKCS#12 bag") }
        }
        guard PKCS12_add_safe_ex(&safes, certBags, nid, iterations, password, ctx.ctx, nil) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot encrypt the certificates")
        }
        var keyBags: OpaquePointer? = nil
        defer { if let keyBags { mtls_ossl_sk_PKCS12_SAFEBAG_pop_free(keyBags) } }
        try label(PKCS12_add_key_ex(&keyBags, pkey, 0, iterations, nid, password, ctx.ctx, nil))
        guard PKCS12_add_safe_ex(&safes, keyBags, -1, 0, nil, ctx.ctx, nil) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot add the key")
        }
        guard let p12 = PKCS12_add_safes_ex(safes, 0, ctx.ctx, nil) else {
            throw MTLSError.openSSL(.internal, "cannot build the PKCS#12 structure")
        }
        return p12
    }
}

/// Calls `body` with a C string for `s`, or NULL when `s` is nil.
func withOptionalCString<T>(_ s: String?, _ body: (UnsafePointer<CChar>?) throws -> T) rethrows -> T {
    guard let s else { return try body(nil) }
    return try s.withCString { try body($0) }
}
