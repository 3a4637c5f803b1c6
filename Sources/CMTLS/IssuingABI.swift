// mtls_issued and mtls_pki_*: issuing a private PKI. Argument conversion only; the profiles
// live in Sources/MTLSEnrollment/Issuing.
import FoundationEssentials
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif

/// mtls_issue_options: version 1 ends where `crl_url` (version 2) begins.
private let issueOptionsSizes = [MemoryLayout<mtls_issue_options>.offset(of: \mtls_issue_options.crl_url) ?? 0,
                                 MemoryLayout<mtls_issue_options>.size]

/// The converted options.
private struct IssueOptions {
    var keySpec = KeySpec.issuingDefault  // key_type NULL: the core's default
    var days: Int?
    var now = Date()
    var dns: [String] = []
    var ips: [String] = []
    /// Where the issuer publishes (version 2's crl_url and ocsp_url).
    var publication = CAPublication.none

    init(_ p: UnsafePointer<mtls_issue_options>?) throws {
        guard let p else { return }
        let o = try readVersioned(p, zero: mtls_issue_options(), sizes: issueOptionsSizes, "mtls_issue_options")
        publication = CAPublication(crlURL: try optionalString(o.crl_url, "crl_url"),
                                    ocspURL: try optionalString(o.ocsp_url, "ocsp_url"))
        try publication.validate()
        if let k = try optionalString(o.key_type, "key_type") { keySpec = try KeySpec(issuingName: k) }
        if o.validity_days < 0 { throw MTLSError(.invalidArgument, "validity_days must not be negative") }
        if o.validity_days > 0 { days = Int(o.validity_days) }
        if o.now != 0 { now = Date(timeIntervalSince1970: TimeInterval(o.now)) }
        dns = try stringList(o.dns_names, o.dns_count, "dns_names")
        ips = try stringList(o.ip_addresses, o.ip_count, "ip_addresses")
    }
}

/// The profile a header constant (`MTLS_PROFILE_*`) names; nil for any other value.
func certificateProfile(_ value: Int32) -> CertificateProfile? {
    switch value {
    case MTLS_PROFILE_ROOT: return .root
    case MTLS_PROFILE_INTERMEDIATE: return .intermediate
    case MTLS_PROFILE_SERVER: return .server
    case MTLS_PROFILE_CLIENT: return .client
    default: return nil
    }
}

/// The profile of an issuing call (`MTLS_PROFILE_*` but ROOT).
private func profile(_ value: Int32) throws -> CertificateProfile {
    switch certificateProfile(value) {
    case .root: throw MTLSError(.invalidArgument, "a root is made with mtls_pki_root, not issued")
    case let p?: return p
    case nil: throw MTLSError(.invalidArgument, "unknown profile \(value) (use MTLS_PROFILE_INTERMEDIATE, _SERVER or _CLIENT)")
    }
}

/// `int mtls_issue_options_init(mtls_issue_options *opts, unsigned int version)`
@_cdecl("mtls_issue_options_init")
public func mtls_issue_options_init(_ opts: UnsafeMutablePointer<mtls_issue_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        // Zero: every field means the core's default (key type, the profile's validity, now).
        try initVersionedOptions(opts, version, sizes: issueOptionsSizes, "mtls_issue_options", versionField: \.version) {
            mtls_issue_options()
        }
    }
}

/// `int mtls_pki_root(const char *name, const mtls_issue_options *opts, mtls_issued **out)`
@_cdecl("mtls_pki_root")
public func mtls_pki_root(_ name: UnsafePointer<CChar>?, _ opts: UnsafePointer<mtls_issue_options>?,
                          _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let name = try string(name, "name")
            let o = try IssueOptions(opts)
            return try CertificateAuthority.newRoot(commonName: name, keySpec: o.keySpec, validityDays: o.days, now: o.now)
        }
    }
}

/// `int mtls_pki_issue(const mtls_issued *issuer, int profile, const char *name,
///                     const mtls_issue_options *opts, mtls_issued **out)`
@_cdecl("mtls_pki_issue")
public func mtls_pki_issue(_ issuer: OpaquePointer?, _ profileValue: Int32, _ name: UnsafePointer<CChar>?,
                           _ opts: UnsafePointer<mtls_issue_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let issuer = try handle(issuer, Identity.self, "issuer")
            let p = try profile(profileValue)
            let name = try string(name, "name")
            let o = try IssueOptions(opts)
            let ca = try CertificateAuthority(certificate: issuer.leaf, privateKey: issuer.privateKey, publication: o.publication)
            return try ca.issueWithNewKey(CertificateRequest(profile: p, commonName: name, dnsNames: o.dns, ipAddresses: o.ips,
                                                             validityDays: o.days), keySpec: o.keySpec, chain: issuer.chain, now: o.now)
        }
    }
}

/// `int mtls_pki_load(const char *cert_path, const char *key_path, const char *key_password,
///                    mtls_issued **out)`
@_cdecl("mtls_pki_load")
public func mtls_pki_load(_ certPath: UnsafePointer<CChar>?, _ keyPath: UnsafePointer<CChar>?,
                          _ password: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            try Identity(certificatePath: try string(certPath, "cert_path"),
                         keyPath: try string(keyPath, "key_path"), password: secretBytes(password))
        }
    }
}

/// `mtls_issued *mtls_issued_ref(mtls_issued *issued)`
@_cdecl("mtls_issued_ref")
public func mtls_issued_ref(_ issued: OpaquePointer?) -> OpaquePointer? { refHandle(issued, Identity.self) }

/// `void mtls_issued_free(mtls_issued *issued)`
@_cdecl("mtls_issued_free")
public func mtls_issued_free(_ issued: OpaquePointer?) { releaseHandle(issued, Identity.self) }

/// `int mtls_issued_cert(const mtls_issued *issued, mtls_cert **out)`
@_cdecl("mtls_issued_cert")
public func mtls_issued_cert(_ issued: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try handle(issued, Identity.self, "issued").leaf }
    }
}

/// `int mtls_issued_chain_pem(const mtls_issued *issued, char **out)`
@_cdecl("mtls_issued_chain_pem")
public func mtls_issued_chain_pem(_ issued: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        try require(out, "out").pointee = nil
        try putString(try handle(issued, Identity.self, "issued").allCertificates.map(\.pem).joined(), out)
    }
}

/// `int mtls_issued_key_pem(const mtls_issued *issued, const char *password, char **out)`
@_cdecl("mtls_issued_key_pem")
public func mtls_issued_key_pem(_ issued: OpaquePointer?, _ password: UnsafePointer<CChar>?,
                                _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let out = try require(out, "out")
        out.pointee = nil
        let pem = try handle(issued, Identity.self, "issued").privateKey.pemFile(password: secretBytes(password))
        try pem.withBytes { buf in
            guard let mem = malloc(buf.count + 1)?.assumingMemoryBound(to: CChar.self) else {
                throw MTLSError(.noMemory, "out of memory")
            }
            buf.withMemoryRebound(to: CChar.self) { mem.update(from: $0.baseAddress!, count: buf.count) }
            mem[buf.count] = 0
            out.pointee = mem
        }
    }
}

/// `int mtls_issued_export_p12(const mtls_issued *issued, const char *password, int flags,
///                             uint8_t **out, size_t *out_len)`
@_cdecl("mtls_issued_export_p12")
public func mtls_issued_export_p12(_ issued: OpaquePointer?, _ password: UnsafePointer<CChar>?, _ flags: Int32,
                                   _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                                   _ outLen: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(out, outLen) {
            let identity = try handle(issued, Identity.self, "issued")
            let pw = try require(secretBytes(password), "password")
            return try PKCS12.exportIssued(identity, password: pw, scheme: try pkcs12ExportOptions(flags).scheme)
        }
    }
}

/// `int mtls_pki_crl(const mtls_issued *ca, const char *const *revoked_serials, size_t count,
///                   uint64_t number, int validity_days, int64_t now, uint8_t **der, size_t *der_len)`
@_cdecl("mtls_pki_crl")
public func mtls_pki_crl(_ ca: OpaquePointer?, _ serials: UnsafePointer<UnsafePointer<CChar>?>?, _ count: Int,
                         _ number: UInt64, _ validityDays: Int32, _ now: Int64,
                         _ der: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                         _ derLen: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(der, derLen, names: ("der", "der_len")) {
            let identity = try handle(ca, Identity.self, "ca")
            let authority = try CertificateAuthority(certificate: identity.leaf, privateKey: identity.privateKey)
            let when = now != 0 ? Date(timeIntervalSince1970: TimeInterval(now)) : Date()
            let list = try stringList(serials, count, "revoked_serials")
            return try authority.makeCRL(revokedSerials: list, number: number,
                                         validityDays: validityDays > 0 ? Int(validityDays) : nil, now: when)
        }
    }
}

/// `int mtls_issued_identity(const mtls_issued *issued, mtls_identity **out)`
@_cdecl("mtls_issued_identity")
public func mtls_issued_identity(_ issued: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            // Both handles box the same immutable Identity; the new one holds its own reference.
            return try handle(issued, Identity.self, "issued")
        }
    }
}

/// `int mtls_pki_sign_csr(const mtls_issued *issuer, int profile, const uint8_t *csr, size_t csr_len,
///                        const char *name, const mtls_issue_options *opts, mtls_cert **out)`
@_cdecl("mtls_pki_sign_csr")
public func mtls_pki_sign_csr(_ issuer: OpaquePointer?, _ profileValue: Int32, _ csr: UnsafePointer<UInt8>?, _ csrLength: Int,
                              _ name: UnsafePointer<CChar>?, _ opts: UnsafePointer<mtls_issue_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let issuer = try handle(issuer, Identity.self, "issuer")
            let p = try profile(profileValue)
            let request = try CertificateSigningRequest(data: try bytes(csr, csrLength, "csr"))
            let o = try IssueOptions(opts)
            let cn = try CertificateRequest.commonName(given: try optionalString(name, "name"), csr: request,
                                                       dnsNames: o.dns, ipAddresses: o.ips)
            let ca = try CertificateAuthority(certificate: issuer.leaf, privateKey: issuer.privateKey, publication: o.publication)
            return try ca.issue(CertificateRequest(profile: p, commonName: cn, dnsNames: o.dns, ipAddresses: o.ips,
                                                   validityDays: o.days), csr: request, now: o.now)
        }
    }
}
