internal import COpenSSL
import FoundationEssentials

extension CertificateAuthority {
    /// Days from a CRL's thisUpdate to its nextUpdate when the caller does not say.
    public static let defaultCRLValidityDays = 30

    /// A CRL revoking the certificates with these serials (hex), each revoked as of `now`, with no
    /// reason: for callers that keep no revocation record of their own (the C ABI's `mtls_pki_crl`;
    /// a ``PKIDirectory`` keeps each revocation's date and reason).
    public func makeCRL(revokedSerials: [String], number: UInt64, validityDays: Int? = nil,
                        now: Date = Date()) throws -> [UInt8] {
        try makeCRL(revocations: revokedSerials.map { Revocation(serialHex: $0, date: now) }, number: number,
                    validityDays: validityDays, now: now)
    }

    /// Issues a CRL (v2, signed like certificates) listing `revocations`, with a CRL number, an
    /// authority key identifier, `thisUpdate` = `now` and `nextUpdate` `validityDays` later
    /// (nil: ``defaultCRLValidityDays``). Returns the DER encoding.
    public func makeCRL(revocations: [Revocation], number: UInt64, validityDays: Int? = nil,
                        now: Date = Date()) throws -> [UInt8] {
        let validityDays = validityDays ?? Self.defaultCRLValidityDays
        guard (1...3660).contains(validityDays) else {
            throw MTLSError(.invalidArgument, "CRL validity must be between 1 and 3660 days (got \(validityDays))")
        }
        if let ku = certificate.keyUsage, !ku.contains(.cRLSign) {
            throw MTLSError(.invalidArgument, "\"\(certificate.subjectSummary)\" may not sign CRLs (keyUsage lacks cRLSign)")
        }
        guard let crl = X509_CRL_new_ex(LibraryContext.shared.ctx, nil) else {
            throw MTLSError.openSSL(.noMemory, "X509_CRL_new_ex failed")
        }
        defer { X509_CRL_free(crl) }
        guard X509_CRL_set_version(crl, Int(X509_CRL_VERSION_2)) == 1,
              X509_CRL_set_issuer_name(crl, X509_get_subject_name(certificate.x509)) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot start the CRL")
        }
        try withASN1Time(now) { guard X509_CRL_set1_lastUpdate(crl, $0) == 1 else { throw MTLSError.openSSL(.internal, "cannot set thisUpdate") } }
        try withASN1Time(now.addingTimeInterval(TimeInterval(validityDays) * 86400)) {
            guard X509_CRL_set1_nextUpdate(crl, $0) == 1 else { throw MTLSError.openSSL(.internal, "cannot set nextUpdate") }
        }

        for r in revocations {
            guard let entry = X509_REVOKED_new() else { throw MTLSError.openSSL(.noMemory, "X509_REVOKED_new failed") }
            var entryOwned = true
            defer { if entryOwned { X509_REVOKED_free(entry) } }
            let serial = try Self.serial(fromHex: r.serialHex)
            defer { ASN1_INTEGER_free(serial) }
            guard X509_REVOKED_set_serialNumber(entry, serial) == 1 else {
                throw MTLSError.openSSL(.internal, "cannot set a revoked serial")
            }
            try withASN1Time(r.date) { t in
                guard X509_REVOKED_set_revocationDate(entry, UnsafeMutablePointer(mutating: t)) == 1 else {
                    throw MTLSError.openSSL(.internal, "cannot set a revocation date")
                }
            }
            if let reason = r.reason {
                guard let e = ASN1_ENUMERATED_new() else { throw MTLSError.openSSL(.noMemory, "ASN1_ENUMERATED_new failed") }
                defer { ASN1_ENUMERATED_free(e) }
                guard ASN1_ENUMERATED_set(e, reason.rawValue) == 1,
                      X509_REVOKED_add1_ext_i2d(entry, NID_crl_reason, UnsafeMutableRawPointer(e), 0, 0) == 1 else {
                    throw MTLSError.openSSL(.internal, "cannot set a revocation reason")
                }
            }
            guard X509_CRL_add0_revoked(crl, entry) == 1 else { throw MTLSError.openSSL(.internal, "cannot add a revoked entry") }
            entryOwned = false
        }
        _ = X509_CRL_sort(crl)

        guard let crlNumber = ASN1_INTEGER_new() else { throw MTLSError.openSSL(.noMemory, "ASN1_INTEGER_new failed") }
        defer { ASN1_INTEGER_free(crlNumber) }
        guard ASN1_INTEGER_set_uint64(crlNumber, number) == 1,
              X509_CRL_add1_ext_i2d(crl, NID_crl_number, UnsafeMutableRawPointer(crlNumber), 0, 0) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot set the CRL number")
        }
        var v3 = X509V3_CTX()
        X509V3_set_ctx(&v3, certificate.x509, nil, nil, crl, 0)
        guard let aki = X509V3_EXT_nconf_nid(nil, &v3, NID_authority_key_identifier, "keyid:always") else {
            throw MTLSError.openSSL(.internal, "cannot make the CRL's authority key identifier")
        }
        defer { X509_EXTENSION_free(aki) }
        guard X509_CRL_add_ext(crl, aki, -1) == 1 else { throw MTLSError.openSSL(.internal, "cannot add an extension to the CRL") }

        let md = try CertificateBuilder.signingDigest(for: privateKey)
        defer { if let md { EVP_MD_free(md) } }
        guard X509_CRL_sign(crl, privateKey.pkey, md) > 0 else {
            throw MTLSError.openSSL(.internal, "cannot sign the CRL")
        }
        guard let der = derEncode({ i2d_X509_CRL(crl, $0) }) else { throw MTLSError.openSSL(.internal, "cannot encode the CRL") }
        return der
    }

    /// The PEM form (`-----BEGIN X509 CRL-----`) of a CRL's DER.
    public static func crlPEM(_ der: [UInt8]) -> String {
        let b64 = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN X509 CRL-----\n\(b64)\n-----END X509 CRL-----\n"
    }

    static func serial(fromHex hex: String) throws -> UnsafeMutablePointer<ASN1_INTEGER> {
        guard !hex.isEmpty, hex.count <= 40, hex.allSatisfy(\.isHexDigit) else {
            throw MTLSError(.invalidArgument, "not a serial number in hex: \"\(hex)\"")
        }
        var bn: OpaquePointer? = nil
        guard BN_hex2bn(&bn, hex) > 0, let bn else { throw MTLSError.openSSL(.invalidArgument, "not a serial number in hex: \"\(hex)\"") }
        defer { BN_free(bn) }
        guard let serial = BN_to_ASN1_INTEGER(bn, nil) else { throw MTLSError.openSSL(.internal, "cannot encode a serial") }
        return serial
    }
}

private func withASN1Time(_ date: Date, _ body: (UnsafePointer<ASN1_TIME>) throws -> Void) throws {
    guard let t = ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970.rounded(.down))) else {
        throw MTLSError.openSSL(.invalidArgument, "cannot encode the time \(date)")
    }
    defer { ASN1_TIME_free(t) }
    try body(t)
}
