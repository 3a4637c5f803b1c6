internal import COpenSSL
import FoundationEssentials

/// Builds a PKCS#12 file for one identity with OpenSSL's `PKCS12_create_ex`, in libmtls's own
/// library context.
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
        if let name, name.unicodeScalars.contains(where: { $0.value > 0xFFFF }) {
            // OpenSSL 3.0's PKCS12_create encodes the name to a BMPString and refuses characters
            // outside the BMP (reading such names works).
            throw MTLSError(.invalidArgument, "the friendly name \"\(name)\" has characters outside the Basic Multilingual Plane, which PKCS#12 export cannot write; choose another name")
        }
        let iter = Int32(options.iterations)
        let der: [UInt8]? = try pw.withUnsafeMutableBufferPointer { pwBuf -> [UInt8]? in
            let p12 = ctx.asThreadDefault { () -> OpaquePointer? in
                // mac_iter -1: no MAC from PKCS12_create (it would use SHA-1); set it below.
                withOptionalCString(name) { namePtr in
                    PKCS12_create_ex(pwBuf.baseAddress, namePtr, identity.privateKey.pkey, identity.leaf.x509, ca,
                                     nid, nid, iter, -1, 0, ctx.ctx, nil)
                }
            }
            guard let p12 else { throw MTLSError.openSSL(.internal, "cannot build the PKCS#12 structure") }
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
}

/// Calls `body` with a C string for `s`, or NULL when `s` is nil.
func withOptionalCString<T>(_ s: String?, _ body: (UnsafePointer<CChar>?) throws -> T) rethrows -> T {
    guard let s else { return try body(nil) }
    return try s.withCString { try body($0) }
}
