internal import COpenSSL
import FoundationEssentials

/// A certificate authority that can issue: its certificate and its private key.
///
/// OpenSSL builds and signs every certificate (`X509_new_ex` in libmtls's own library context,
/// X509v3 extensions, `X509_sign` with SHA-256, or pure EdDSA for Ed25519 keys); this type only
/// decides what goes in, following ``CertificateProfile``. Immutable; safe to share across
/// threads.
public final class CertificateAuthority: Sendable {
    /// The CA's certificate.
    public let certificate: Certificate
    /// The CA's private key.
    public let privateKey: PrivateKey
    /// Where the CA publishes its CRL and OCSP responder: every certificate it issues carries
    /// them (CRL distribution points, authorityInfoAccess OCSP).
    public let publication: CAPublication

    /// Wraps an existing CA. Throws ``MTLSError/Code/keyMismatch`` when the key does not belong
    /// to the certificate, and ``MTLSError/Code/invalidArgument`` when the certificate is not a
    /// CA allowed to sign certificates, or a `publication` URL is not a plain `http:` URL.
    public init(certificate: Certificate, privateKey: PrivateKey, publication: CAPublication = .none) throws {
        try publication.validate()
        guard privateKey.matches(certificate) else {
            throw MTLSError(.keyMismatch, "the private key does not match the CA certificate \"\(certificate.subjectSummary)\"")
        }
        guard certificate.basicConstraints?.isCA == true else {
            throw MTLSError(.invalidArgument, "\"\(certificate.subjectSummary)\" is not a CA certificate (basicConstraints CA:TRUE missing)")
        }
        if let ku = certificate.keyUsage, !ku.contains(.keyCertSign) {
            throw MTLSError(.invalidArgument, "\"\(certificate.subjectSummary)\" may not sign certificates (keyUsage lacks keyCertSign)")
        }
        self.certificate = certificate
        self.privateKey = privateKey
        self.publication = publication
    }

    /// Makes a self-signed root CA for `key`.
    /// - Parameters:
    ///   - commonName: the root's `CN`.
    ///   - validityDays: lifetime; nil for 20 years.
    ///   - now: the issuing time (injectable for tests); `notBefore` is set 5 minutes earlier to
    ///     absorb clock skew between machines.
    public static func makeRoot(commonName: String, key: PrivateKey, validityDays: Int? = nil,
                                now: Date = Date()) throws -> CertificateAuthority {
        let request = CertificateRequest(profile: .root, commonName: commonName, validityDays: validityDays)
        try request.validate()
        let cert = try CertificateBuilder.build(request, subjectKey: key, issuer: nil, signingKey: key, now: now)
        return try CertificateAuthority(certificate: cert, privateKey: key)
    }

    /// Issues a certificate for the public half of `key` following `request.profile`.
    ///
    /// Refuses to make a root here (use ``makeRoot(commonName:key:validityDays:now:)``), and
    /// refuses an intermediate below a CA whose path length is 0, since no verifier would accept
    /// what it issued.
    public func issue(_ request: CertificateRequest, for key: PrivateKey, now: Date = Date()) throws -> Certificate {
        try request.validate()
        switch request.profile {
        case .root:
            throw MTLSError(.invalidArgument, "a root is self-signed: use makeRoot, not issue")
        case .intermediate:
            if let pathLength = certificate.basicConstraints?.pathLength, pathLength == 0 {
                throw MTLSError(.invalidArgument, "\"\(certificate.subjectSummary)\" has path length 0: it cannot issue another CA")
            }
        case .server, .client:
            break
        }
        guard now < certificate.notAfter else {
            throw MTLSError(.invalidArgument, "the CA \"\(certificate.subjectSummary)\" expired at \(certificate.notAfter)")
        }
        return try CertificateBuilder.build(request, subjectKey: key, issuer: certificate,
                                            signingKey: privateKey, publication: publication, now: now)
    }

    /// Issues a server or client certificate for the key of a certificate signing request
    /// whose self-signature verifies (the subject proved it holds the key). The profile,
    /// names and lifetime come from `request` (as for ``issue(_:for:now:)``), never from the
    /// CSR's own extensions.
    public func issue(_ request: CertificateRequest, csr: CertificateSigningRequest, now: Date = Date()) throws -> Certificate {
        try request.validate()
        guard request.profile == .server || request.profile == .client else {
            throw MTLSError(.invalidArgument, "a CSR is signed as a server or client certificate, not \(request.profile.rawValue)")
        }
        try csr.verifySelfSignature()
        guard now < certificate.notAfter else {
            throw MTLSError(.invalidArgument, "the CA \"\(certificate.subjectSummary)\" expired at \(certificate.notAfter)")
        }
        return try csr.withPublicKey { key in
            try CertificateBuilder.build(request, subjectPublicKey: key, issuer: certificate, signingKey: privateKey,
                                         publication: publication, now: now)
        }
    }

    /// Issues an intermediate CA (path length 0) for `key`, ready to issue leaves.
    public func issueIntermediate(commonName: String, key: PrivateKey, validityDays: Int? = nil,
                                  now: Date = Date()) throws -> CertificateAuthority {
        let cert = try issue(CertificateRequest(profile: .intermediate, commonName: commonName,
                                                validityDays: validityDays), for: key, now: now)
        return try CertificateAuthority(certificate: cert, privateKey: key)
    }
}

extension CertificateAuthority {
    /// A new root CA with a new key, as an identity (key + self-signed certificate): the step
    /// `mtls pki init` and `mtls_pki_root` share.
    public static func newRoot(commonName: String, keySpec: KeySpec = .issuingDefault, validityDays: Int? = nil,
                               now: Date = Date()) throws -> Identity {
        let key = try PrivateKey.generate(keySpec)
        let ca = try makeRoot(commonName: commonName, key: key, validityDays: validityDays, now: now)
        return try Identity(privateKey: key, leaf: ca.certificate)
    }

    /// Issues `request` to a new key made here, as an identity carrying this CA's chain:
    /// `chain` is what is known above this CA (its own certificate first or not at all; both
    /// are accepted, the identity orders them). The step `mtls pki intermediate|issue` and
    /// `mtls_pki_issue` share.
    public func issueWithNewKey(_ request: CertificateRequest, keySpec: KeySpec = .issuingDefault, chain: [Certificate] = [],
                                now: Date = Date()) throws -> Identity {
        let key = try PrivateKey.generate(keySpec)
        let leaf = try issue(request, for: key, now: now)
        return try Identity(privateKey: key, leaf: leaf, certificates: [certificate] + chain.filter { $0 != certificate })
    }
}

/// Builds one X.509 v3 certificate with OpenSSL (its shared parts: Sources/MTLSX509/Certificates/CertificateBuilder.swift).
extension CertificateBuilder {
    /// `notBefore` is this much before the issuing time, for clock skew.
    static let backdate: TimeInterval = 300

    static func build(_ request: CertificateRequest, subjectKey: PrivateKey, issuer: Certificate?,
                      signingKey: PrivateKey, publication: CAPublication = .none, now: Date) throws -> Certificate {
        try build(request, subjectPublicKey: subjectKey.pkey, issuer: issuer, signingKey: signingKey,
                  publication: publication, now: now)
    }

    /// The same for a public key alone (a CSR's). `publication` is the issuer's: where the new
    /// certificate's revocation can be checked (nothing for a self-signed root).
    static func build(_ request: CertificateRequest, subjectPublicKey: OpaquePointer, issuer: Certificate?,
                      signingKey: PrivateKey, publication: CAPublication = .none, now: Date) throws -> Certificate {
        guard let x = X509_new_ex(LibraryContext.shared.ctx, nil) else {
            throw MTLSError.openSSL(.noMemory, "X509_new_ex failed")
        }
        // Freed here: what is returned is the certificate parsed again from its DER (below).
        defer { X509_free(x) }

        guard X509_set_version(x, Int(X509_VERSION_3)) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the version") }
        try setRandomSerial(x)

        // Subject: CN only. The issuer name is copied from the issuer's subject, byte for byte,
        // so that chain building matches names exactly.
        guard let name = X509_NAME_new() else { throw MTLSError.openSSL(.noMemory, "X509_NAME_new failed") }
        defer { X509_NAME_free(name) }
        let cn = Array(request.commonName.utf8)
        guard X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, cn, Int32(cn.count), -1, 0) == 1,
              X509_set_subject_name(x, name) == 1 else {
            throw MTLSError.openSSL(.invalidArgument, "cannot use \"\(request.commonName)\" as a name")
        }
        let issuerName = issuer.map { X509_get_subject_name($0.x509) } ?? X509_get_subject_name(x)
        guard X509_set_issuer_name(x, issuerName) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the issuer name") }

        // Validity, shortened to the issuer's own expiry.
        let notBefore = now.addingTimeInterval(-backdate)
        var notAfter = now.addingTimeInterval(TimeInterval(request.validityDays ?? request.profile.defaultValidityDays) * 86400)
        if let issuer, notAfter > issuer.notAfter { notAfter = issuer.notAfter }
        try setTime(x, notBefore, X509_set1_notBefore)
        try setTime(x, notAfter, X509_set1_notAfter)

        guard X509_set_pubkey(x, subjectPublicKey) == 1 else { throw MTLSError.openSSL(.invalidArgument, "cannot use the subject's public key") }

        // Extensions. The issuer context must point at the certificate being built for a root
        // (SKI and AKI both come from its own key) and at the issuer otherwise.
        var v3 = X509V3_CTX()
        X509V3_set_ctx(&v3, issuer?.x509 ?? x, x, nil, nil, 0)
        let rsaLeaf: Bool
        if case .rsa = KeyType(pkey: subjectPublicKey) { rsaLeaf = true } else { rsaLeaf = false }
        var extensions: [(Int32, String)] = []
        switch request.profile {
        case .root:
            extensions = [(NID_basic_constraints, "critical,CA:TRUE"),
                          (NID_key_usage, "critical,keyCertSign,cRLSign"),
                          (NID_subject_key_identifier, "hash")]
        case .intermediate:
            extensions = [(NID_basic_constraints, "critical,CA:TRUE,pathlen:0"),
                          (NID_key_usage, "critical,keyCertSign,cRLSign"),
                          (NID_subject_key_identifier, "hash"),
                          (NID_authority_key_identifier, "keyid:always")]
        case .server:
            extensions = [(NID_basic_constraints, "critical,CA:FALSE"),
                          (NID_key_usage, rsaLeaf ? "critical,digitalSignature,keyEncipherment" : "critical,digitalSignature"),
                          (NID_ext_key_usage, "serverAuth"),
                          (NID_subject_key_identifier, "hash"),
                          (NID_authority_key_identifier, "keyid:always")]
        case .client:
            extensions = [(NID_basic_constraints, "critical,CA:FALSE"),
                          (NID_key_usage, "critical,digitalSignature"),
                          (NID_ext_key_usage, "clientAuth"),
                          (NID_subject_key_identifier, "hash"),
                          (NID_authority_key_identifier, "keyid:always")]
        }
        // The URLs were checked by CAPublication.validate (http:, printable, no comma), so they
        // cannot add another name to the extension text.
        if issuer != nil {
            if let crl = publication.crlURL { extensions.append((NID_crl_distribution_points, "URI:" + crl)) }
            if let ocsp = publication.ocspURL { extensions.append((NID_info_access, "OCSP;URI:" + ocsp)) }
        }
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_nconf_nid(nil, &v3, nid, value) else {
                throw MTLSError.openSSL(.internal, "cannot make the \(String(cString: OBJ_nid2sn(nid))) extension")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x, ext, -1) == 1 else { throw MTLSError.openSSL(.internal, "cannot add an extension") }
        }
        try addSubjectAltNames(x, dns: request.dnsNames, ips: request.ipAddresses)

        try sign(x, with: signingKey)
        // The certificate as its bytes say, parsed again: X509_set_pubkey keeps the very key
        // object it was given, so the certificate would otherwise carry the caller's object (a
        // token key, whose provider never verifies, or the private key itself), and the checks
        // made on what was issued ("the key matches the certificate", a signature under it)
        // would compare that object with itself instead of with the encoded key.
        guard let der = derEncode({ i2d_X509(x, $0) }) else {
            throw MTLSError.openSSL(.internal, "cannot encode the certificate just made")
        }
        return try Certificate(der: der)
    }

    /// A random positive 128-bit serial number (RFC 5280 allows up to 20 octets).
    static func setRandomSerial(_ x: OpaquePointer) throws {
        guard let serial = randomSerial() else { throw MTLSError.openSSL(.internal, "cannot make a serial number") }
        defer { ASN1_INTEGER_free(serial) }
        guard X509_set_serialNumber(x, serial) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the serial number") }
    }

    static func randomSerial() -> UnsafeMutablePointer<ASN1_INTEGER>? {
        var bytes = [UInt8](repeating: 0, count: 16)
        repeat {
            guard RAND_bytes_ex(LibraryContext.shared.ctx, &bytes, bytes.count, 0) == 1 else { return nil }
        } while bytes.allSatisfy { $0 == 0 }
        guard let bn = BN_bin2bn(bytes, Int32(bytes.count), nil) else { return nil }
        defer { BN_free(bn) }
        return BN_to_ASN1_INTEGER(bn, nil)
    }

    static func setTime(_ x: OpaquePointer, _ date: Date,
                        _ set: (OpaquePointer?, UnsafePointer<ASN1_TIME>?) -> Int32) throws {
        guard let t = ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970.rounded(.down))) else {
            throw MTLSError.openSSL(.invalidArgument, "cannot encode the time \(date)")
        }
        defer { ASN1_TIME_free(t) }
        guard set(x, t) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the validity") }
    }
}

extension PKCS12 {
    /// An issued certificate's `.p12`: its key, the certificate and the whole chain, with the
    /// certificate's CN as the friendly name. What `mtls pki issue --p12`, the C ABI's
    /// `mtls_issued_export_p12` and Python's `IssuedCertificate` write.
    public static func exportIssued(_ identity: Identity, password: SecretBytes,
                                    scheme: PKCS12ExportOptions.Scheme = .modern) throws -> [UInt8] {
        try export(identity, password: password, options: PKCS12ExportOptions(scheme: scheme, friendlyName: identity.leaf.commonName))
    }
}
