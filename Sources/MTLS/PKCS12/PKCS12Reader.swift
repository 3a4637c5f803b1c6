internal import COpenSSL
import FoundationEssentials

/// Safety limits applied to PKCS#12 input before any key derivation runs.
public enum PKCS12Limits {
    /// The highest KDF or MAC iteration count accepted in one algorithm: 1,000,000 (above the
    /// 600,000 OWASP recommends for PBKDF2-SHA256; common producers use 2,048 to 100,000).
    public static let maxIterations = 1_000_000
    /// The most iterations accepted for a whole file, MAC and every encrypted item together.
    public static let maxTotalIterations = 4_000_000
}

/// Reads a PKCS#12 file. (First version: a thin layer over `PKCS12_parse`.)
struct PKCS12Reader {
    let data: [UInt8]
    let password: SecretBytes?

    func read() throws -> PKCS12Contents {
        guard data.count <= PKCS12.maxInputSize else {
            throw MTLSError(.limitExceeded, "PKCS#12 input of \(data.count) bytes exceeds the \(PKCS12.maxInputSize)-byte limit")
        }
        guard !data.isEmpty else { throw MTLSError(.notPKCS12, "empty input: not a PKCS#12 file") }
        let ctx = LibraryContext.shared
        return try ctx.asThreadDefault {
            let p12 = data.withUnsafeBufferPointer { buf -> OpaquePointer? in
                var p: UnsafePointer<UInt8>? = buf.baseAddress
                return d2i_PKCS12(nil, &p, buf.count)
            }
            guard let p12 else { throw MTLSError.openSSL(.notPKCS12, "not a PKCS#12 file") }
            defer { PKCS12_free(p12) }
            var pw = [CChar]()
            password?.withBytes { for b in $0 { pw.append(CChar(bitPattern: b)) } }
            pw.append(0)
            defer { pw.withUnsafeMutableBytes { mtls_ossl_OPENSSL_cleanse($0.baseAddress, $0.count) } }
            var pkey: OpaquePointer? = nil
            var cert: OpaquePointer? = nil
            var ca: OpaquePointer? = nil
            let ok = pw.withUnsafeBufferPointer { buf in
                PKCS12_parse(p12, password == nil ? nil : buf.baseAddress, &pkey, &cert, &ca)
            }
            guard ok == 1 else { throw MTLSError.openSSL(.badPassword, "cannot open the PKCS#12 file") }
            var certs: [Certificate] = []
            if let cert { certs.append(try Certificate(takingOwnership: cert)) }
            if let ca {
                defer { mtls_ossl_sk_X509_pop_free(ca) }
                for i in 0..<mtls_ossl_sk_X509_num(ca) {
                    certs.append(try Certificate(borrowing: mtls_ossl_sk_X509_value(ca, i)!))
                }
            }
            var identities: [Identity] = []
            if let pkey {
                let key = PrivateKey(takingOwnership: pkey)
                guard let leaf = certs.first(where: { key.matches($0) }) else {
                    throw MTLSError(.keyMismatch, "the private key matches no certificate in the file")
                }
                identities.append(try Identity(privateKey: key, leaf: leaf, certificates: certs))
            }
            OpenSSLErrorQueue.clear()
            return PKCS12Contents(identities: identities, certificates: certs)
        }
    }
}
