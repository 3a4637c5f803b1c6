internal import COpenSSL
import FoundationEssentials

/// Builds one X.509 v3 certificate with OpenSSL: the parts a CSR shares with a certificate (the
/// subjectAltName, the signing digest); the certificate itself is built in Issuing
/// (CertificateAuthority.swift, an extension of this type).
package enum CertificateBuilder {
    /// Builds the subjectAltName from typed values (never from a text the user could extend
    /// with another name through a comma).
    package static func addSubjectAltNames(_ x: OpaquePointer, dns: [String], ips: [String]) throws {
        guard !dns.isEmpty || !ips.isEmpty else { return }
        let names = try generalNames(dns: dns, ips: ips)
        defer { mtls_ossl_GENERAL_NAMES_free(names) }
        guard X509_add1_ext_i2d(x, NID_subject_alt_name, UnsafeMutableRawPointer(names), 0, UInt(X509V3_ADD_DEFAULT)) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot add the subjectAltName extension")
        }
    }

    /// The subjectAltName entries as OpenSSL's `GENERAL_NAMES` (the caller frees it), for a
    /// certificate or a CSR's extension request.
    package static func generalNames(dns: [String], ips: [String]) throws -> OpaquePointer {
        guard let names = mtls_ossl_GENERAL_NAMES_new() else { throw MTLSError.openSSL(.noMemory, "GENERAL_NAMES_new failed") }
        var owned: OpaquePointer? = names
        defer { if let owned { mtls_ossl_GENERAL_NAMES_free(owned) } }
        func push(_ type: Int32, _ bytes: [UInt8], ia5: Bool) throws {
            guard let gen = GENERAL_NAME_new() else { throw MTLSError.openSSL(.noMemory, "GENERAL_NAME_new failed") }
            guard let value = ia5 ? ASN1_IA5STRING_new() : ASN1_OCTET_STRING_new(),
                  ASN1_STRING_set(value, bytes, Int32(bytes.count)) == 1 else {
                GENERAL_NAME_free(gen)
                throw MTLSError.openSSL(.noMemory, "cannot make a subjectAltName entry")
            }
            GENERAL_NAME_set0_value(gen, type, UnsafeMutableRawPointer(value))
            guard mtls_ossl_sk_GENERAL_NAME_push(names, gen) > 0 else {
                GENERAL_NAME_free(gen)
                throw MTLSError.openSSL(.noMemory, "cannot add a subjectAltName entry")
            }
        }
        for name in dns { try push(GEN_DNS, Array(name.utf8), ia5: true) }
        for ip in ips {
            guard let bytes = IPAddress.bytes(ip) else { throw MTLSError(.invalidArgument, "not an IP address: \"\(ip)\"") }
            try push(GEN_IPADD, bytes, ia5: false)
        }
        owned = nil
        return names
    }

    /// The digest to sign with: SHA-256, except for EdDSA keys, which hash internally.
    package static func signingDigest(for key: PrivateKey) throws -> OpaquePointer? {
        switch key.keyType {
        case .ed25519, .ed448: return nil
        default:
            guard let md = EVP_MD_fetch(LibraryContext.shared.ctx, "SHA256", nil) else {
                throw MTLSError.openSSL(.unsupported, "SHA-256 is not available")
            }
            return md
        }
    }

    package static func sign(_ x: OpaquePointer, with key: PrivateKey) throws {
        let md = try signingDigest(for: key)
        defer { if let md { EVP_MD_free(md) } }
        guard X509_sign(x, key.pkey, md) > 0 else {
            throw MTLSError.openSSL(.internal, "cannot sign the certificate with the \(key.keyType.shortName) key")
        }
    }
}
