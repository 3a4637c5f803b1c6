import MTLS
import CMTLSHeader

// MARK: renewal (issue 27)

/// `int mtls_renew(mtls_store *store, const char *label, int force, const mtls_policy *policy,
///                 const char *pin, int *renewed)`
@_cdecl("mtls_renew")
public func mtls_renew(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ force: Int32, _ policy: OpaquePointer?,
                       _ pin: UnsafePointer<CChar>?, _ renewed: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        renewed?.pointee = 0
        let s = try handle(store, CredentialStore.self, "store")
        let p = try policy.map { try handle($0, TrustPolicy.self, "policy") }
        let outcome = try Enrollment.renew(store: s, label: try string(label, "label"), force: force != 0, policy: p,
                                           tokenPIN: secretBytes(pin))
        renewed?.pointee = outcome.renewed ? 1 : 0
    }
}

// MARK: enrollment (issue 27): what `mtls enroll acme|est|pki` does, from C

/// mtls_enroll_options: version 1 ends before keep_password; version 2 adds it.
private let enrollOptionsSizes = [MemoryLayout<mtls_enroll_options>.offset(of: \mtls_enroll_options.keep_password)!,
                                  MemoryLayout<mtls_enroll_options>.size]

/// How the core's enrollment rules name the options for a C caller (and Python, through it):
/// the fields of mtls_enroll_options and the MTLS_ACME_* values of its `challenge`.
private let enrollOptionNames = EnrollmentOptionNames { option in
    switch option {
    case .identifiers: return "name in names"
    case .http01: return "opts->challenge = MTLS_ACME_HTTP01"
    case .webroot: return "opts->challenge = MTLS_ACME_WEBROOT"
    case .tlsALPN01: return "opts->challenge = MTLS_ACME_TLS_ALPN01"
    case .dns01: return "opts->challenge = MTLS_ACME_DNS01"
    case .port: return "opts->port"
    case .webrootDirectory: return "opts->webroot"
    case .dnsHook: return "opts->dns_hook"
    case .eabKeyID: return "opts->eab_kid"
    case .eabKey: return "opts->eab_hmac_key"
    case .pollTimeout: return "opts->timeout_seconds"
    case .keyType: return "opts->key_type"
    case .tokenURI: return "opts->token_uri"
    case .user: return "opts->user"
    case .password: return "opts->password"
    case .bootstrap: return "opts->bootstrap"
    case .keepPassword: return "opts->keep_password"
    case .profile: return "opts->profile"
    }
}

/// The converted mtls_enroll_options. Each field is converted and checked as an argument; the
/// fields of the other sources are refused when set (an EST password given to mtls_enroll_pki
/// is a mistake, not a no-op). Which options go together is the core's rule (the requests'
/// `validate()`), not checked here.
private struct EnrollOptions {
    enum Source: String { case acme, est, pki }

    var keySpec: KeySpec?
    var tokenURI: String?
    var pin: SecretBytes?
    var profile: CertificateProfile?
    var chainAnchors: [Certificate] = []
    var policy: TrustPolicy?
    var anchors: [Certificate] = []
    var challenge = ACMEChallengeOptions()
    var eabKID: String?
    var eabKey: SecretBytes?
    var contact: [String] = []
    var timeout: Double?
    var user: String?
    var password: SecretBytes?
    var bootstrap: Identity?
    var keepPassword = false
    var caKeyPassword: SecretBytes?

    init(_ p: UnsafePointer<mtls_enroll_options>?, for source: Source) throws {
        // NULL is every default, checked like a struct given (EST still needs its authentication);
        // ACME has no default challenge.
        if p == nil && source == .acme { throw invalid("opts must not be NULL for mtls_enroll_acme: it names the challenge") }
        let o = try p.map { try readVersioned($0, zero: mtls_enroll_options(), sizes: enrollOptionsSizes, "mtls_enroll_options") }
            ?? mtls_enroll_options()
        func refuse(_ set: Bool, _ field: String, _ sources: String) throws {
            if set { throw invalid("opts->\(field) is for \(sources), not mtls_enroll_\(source.rawValue)") }
        }
        tokenURI = try optionalString(o.token_uri, "opts->token_uri")
        keySpec = try optionalString(o.key_type, "opts->key_type").map { try KeySpec(issuingName: $0) }
        pin = secretBytes(o.pin)
        try refuse(o.profile != 0 && source == .acme, "profile", "EST and pki (ACME issues server certificates)")
        if o.profile != 0 {
            guard let p = certificateProfile(o.profile) else {
                throw invalid("opts->profile \(o.profile) is not an MTLS_PROFILE_* value")
            }
            profile = p
        }
        chainAnchors = try Self.certificates(o.chain_anchors, o.chain_anchor_count, "opts->chain_anchors")
        // EST checks the chain against the anchors of its server (opts->anchors), as `mtls enroll est`.
        try refuse(!chainAnchors.isEmpty && source == .est, "chain_anchors", "ACME and pki")
        policy = try o.policy.map { try handle($0, TrustPolicy.self, "opts->policy") }
        anchors = try Self.certificates(o.anchors, o.anchor_count, "opts->anchors")
        try refuse(!anchors.isEmpty && source == .pki, "anchors", "ACME and EST")

        // ACME
        switch o.challenge {
        case 0: challenge.kinds = []
        case MTLS_ACME_HTTP01: challenge.kinds = [.http01]
        case MTLS_ACME_WEBROOT: challenge.kinds = [.webroot]
        case MTLS_ACME_TLS_ALPN01: challenge.kinds = [.tlsALPN01]
        case MTLS_ACME_DNS01: challenge.kinds = [.dns01]
        default: throw invalid("opts->challenge \(o.challenge) is not one of MTLS_ACME_HTTP01, _WEBROOT, _TLS_ALPN01, _DNS01")
        }
        challenge.port = o.port == 0 ? nil : o.port
        challenge.listenAddress = try optionalString(o.listen_address, "opts->listen_address")
        challenge.webroot = try optionalString(o.webroot, "opts->webroot")
        challenge.dnsHook = try optionalString(o.dns_hook, "opts->dns_hook")
        eabKID = try optionalString(o.eab_kid, "opts->eab_kid")
        eabKey = secretBytes(o.eab_hmac_key)
        contact = try stringList(o.contact, o.contact_count, "opts->contact")
        // 0 is the core's default; any other value is the core's to judge (negative included).
        timeout = o.timeout_seconds == 0 ? nil : Double(o.timeout_seconds)
        if source != .acme {
            try refuse(challenge != ACMEChallengeOptions(), "challenge", "ACME")
            try refuse(eabKID != nil || eabKey != nil || !contact.isEmpty || timeout != nil,
                       "eab_kid, eab_hmac_key, contact and timeout_seconds", "ACME")
        }

        // EST
        user = try optionalString(o.user, "opts->user")
        password = secretBytes(o.password)
        bootstrap = try o.bootstrap.map { try handle($0, Identity.self, "opts->bootstrap") }
        switch o.keep_password {
        case 0: keepPassword = false
        case 1: keepPassword = true
        default: throw invalid("opts->keep_password \(o.keep_password) is not 0 or 1")
        }
        try refuse(source != .est && (user != nil || password != nil || bootstrap != nil || keepPassword),
                   "user, password, bootstrap and keep_password", "EST")

        // pki
        caKeyPassword = secretBytes(o.ca_key_password)
        try refuse(caKeyPassword != nil && source != .pki, "ca_key_password", "pki")
    }

    /// `request` with the fields every source shares: the key, the token PIN, the C names.
    func keyed<R: EnrollmentRequest>(_ request: R) -> R {
        var r = request
        r.optionNames = enrollOptionNames
        r.keySpec = keySpec
        r.tokenURI = tokenURI
        r.tokenPIN = pin
        return r
    }

    static func certificates(_ p: UnsafePointer<OpaquePointer?>?, _ count: Int, _ name: String) throws -> [Certificate] {
        let n = try size(count, "the count of \(name)")
        if n == 0 { return [] }
        let list = try require(p, name)
        return try (0..<n).map { try handle(list[$0], Certificate.self, "\(name)[\($0)]") }
    }
}

/// Writes the new leaf to `out` when the caller asked for it (NULL: not wanted).
private func putLeaf(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ result: EnrollmentResult) {
    out?.pointee = retainHandle(result.certificate)
}

/// `int mtls_enroll_options_init(mtls_enroll_options *opts, unsigned int version)`
@_cdecl("mtls_enroll_options_init")
public func mtls_enroll_options_init(_ opts: UnsafeMutablePointer<mtls_enroll_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        // Zero everywhere: each field's default is the core's (a new P-256 key, the source's profile...).
        try initVersionedOptions(opts, version, sizes: enrollOptionsSizes, "mtls_enroll_options", versionField: \.version) {
            mtls_enroll_options()
        }
    }
}

/// `int mtls_enroll_acme(mtls_store *store, const char *label, const char *directory_url,
///                       const char *const *names, size_t name_count, const mtls_enroll_options *opts, mtls_cert **out)`
@_cdecl("mtls_enroll_acme")
public func mtls_enroll_acme(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ directoryURL: UnsafePointer<CChar>?,
                             _ names: UnsafePointer<UnsafePointer<CChar>?>?, _ nameCount: Int,
                             _ opts: UnsafePointer<mtls_enroll_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        out?.pointee = nil
        let s = try handle(store, CredentialStore.self, "store")
        let label = try string(label, "label")
        let url = try string(directoryURL, "directory_url")
        let identifiers = try stringList(names, nameCount, "names")
        let o = try EnrollOptions(opts, for: .acme)
        var request = o.keyed(ACMEEnrollment(directoryURL: url, identifiers: identifiers,
                                             challenge: try o.challenge.method(names: enrollOptionNames)))
        request.directoryAnchors = o.anchors
        request.chainAnchors = o.chainAnchors
        request.externalAccount = try ACMEExternalAccount.given(keyID: o.eabKID, key: o.eabKey, names: enrollOptionNames)
        request.contact = o.contact
        if let t = o.timeout { request.pollTimeout = t }
        putLeaf(out, try Enrollment.enrollACME(request, store: s, label: label, policy: o.policy))
    }
}

/// `int mtls_enroll_est(mtls_store *store, const char *label, const char *url, const char *subject,
///                      const mtls_enroll_options *opts, mtls_cert **out)`
@_cdecl("mtls_enroll_est")
public func mtls_enroll_est(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ url: UnsafePointer<CChar>?,
                            _ subject: UnsafePointer<CChar>?, _ opts: UnsafePointer<mtls_enroll_options>?,
                            _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        out?.pointee = nil
        let s = try handle(store, CredentialStore.self, "store")
        let label = try string(label, "label")
        let url = try string(url, "url")
        let subject = try string(subject, "subject")
        let o = try EnrollOptions(opts, for: .est)
        var request = o.keyed(ESTEnrollment(url: url, subject: subject))
        request.anchors = o.anchors
        request.user = o.user
        request.password = o.password
        request.keepPassword = o.keepPassword
        request.bootstrap = o.bootstrap
        if let p = o.profile { request.profile = p }
        putLeaf(out, try Enrollment.enrollEST(request, store: s, label: label, policy: o.policy))
    }
}

/// `int mtls_enroll_pki(mtls_store *store, const char *label, const char *dir, const char *ca_name,
///                      const char *name, const mtls_enroll_options *opts, mtls_cert **out)`
@_cdecl("mtls_enroll_pki")
public func mtls_enroll_pki(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ dir: UnsafePointer<CChar>?,
                            _ caName: UnsafePointer<CChar>?, _ name: UnsafePointer<CChar>?,
                            _ opts: UnsafePointer<mtls_enroll_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        out?.pointee = nil
        let s = try handle(store, CredentialStore.self, "store")
        let label = try string(label, "label")
        let dir = try string(dir, "dir")
        let caName = try string(caName, "ca_name")
        let name = try string(name, "name")
        let o = try EnrollOptions(opts, for: .pki)
        var request = o.keyed(PKIEnrollment(directory: dir, caName: caName, name: name))
        if let p = o.profile { request.profile = p }
        request.caKeyPassword = o.caKeyPassword
        request.chainAnchors = o.chainAnchors
        putLeaf(out, try Enrollment.enrollPKI(request, store: s, label: label, policy: o.policy))
    }
}

/// `int mtls_enroll_revoke(mtls_store *store, const char *label, int reason, const char *pin, mtls_cert **out)`
@_cdecl("mtls_enroll_revoke")
public func mtls_enroll_revoke(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ reason: Int32,
                               _ pin: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        out?.pointee = nil
        let s = try handle(store, CredentialStore.self, "store")
        let label = try string(label, "label")
        // MTLS_REVOKE_NO_REASON (-1) sends no reason; any other value is checked by the core.
        let code: Int? = reason == -1 ? nil : Int(reason)
        let revoked = try Enrollment.revokeACME(store: s, label: label, reason: code, tokenPIN: secretBytes(pin))
        out?.pointee = retainHandle(revoked)
    }
}
