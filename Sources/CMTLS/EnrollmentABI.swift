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

/// mtls_enroll_options has one version so far.
private let enrollOptionsSizes = [MemoryLayout<mtls_enroll_options>.size]

/// The converted mtls_enroll_options, each field checked; the fields of the other sources are
/// refused when set (an EST password given to mtls_enroll_pki is a mistake, not a no-op).
private struct EnrollOptions {
    enum Source: String { case acme, est, pki }

    var keySpec: KeySpec?
    var tokenURI: String?
    var pin: SecretBytes?
    var profile: CertificateProfile?
    var chainAnchors: [Certificate] = []
    var policy: TrustPolicy?
    var anchors: [Certificate] = []
    var challenge: ACMEChallengeMethod?
    var externalAccount: ACMEExternalAccount?
    var contact: [String] = []
    var timeout: Double?
    var user: String?
    var password: SecretBytes?
    var bootstrap: Identity?
    var caKeyPassword: SecretBytes?

    init(_ p: UnsafePointer<mtls_enroll_options>?, for source: Source) throws {
        // NULL is every default, checked like a struct given (EST still needs its authentication).
        let o = try p.map { try readVersioned($0, zero: mtls_enroll_options(), sizes: enrollOptionsSizes, "mtls_enroll_options") }
            ?? mtls_enroll_options()
        func refuse(_ set: Bool, _ field: String, _ sources: String) throws {
            if set { throw invalid("opts->\(field) is for \(sources), not mtls_enroll_\(source.rawValue)") }
        }
        tokenURI = try optionalString(o.token_uri, "opts->token_uri")
        if let k = try optionalString(o.key_type, "opts->key_type") {
            if tokenURI != nil { throw invalid("opts->key_type makes a new key; it does not go with opts->token_uri") }
            keySpec = try KeySpec(issuingName: k)
        }
        pin = secretBytes(o.pin)
        switch o.profile {
        case 0: profile = nil
        case MTLS_PROFILE_SERVER where source != .acme: profile = .server
        case MTLS_PROFILE_CLIENT where source != .acme: profile = .client
        default:
            throw invalid("opts->profile \(o.profile) is not allowed for mtls_enroll_\(source.rawValue) "
                          + (source == .acme ? "(ACME issues server certificates: leave it 0)" : "(use MTLS_PROFILE_SERVER or _CLIENT)"))
        }
        chainAnchors = try Self.certificates(o.chain_anchors, o.chain_anchor_count, "opts->chain_anchors")
        // EST checks the chain against the anchors of its server (opts->anchors), as `mtls enroll est`.
        try refuse(!chainAnchors.isEmpty && source == .est, "chain_anchors", "ACME and pki")
        policy = try o.policy.map { try handle($0, TrustPolicy.self, "opts->policy") }
        anchors = try Self.certificates(o.anchors, o.anchor_count, "opts->anchors")
        try refuse(!anchors.isEmpty && source == .pki, "anchors", "ACME and EST")

        // ACME
        let listen = try optionalString(o.listen_address, "opts->listen_address")
        let webroot = try optionalString(o.webroot, "opts->webroot")
        let hook = try optionalString(o.dns_hook, "opts->dns_hook")
        let kid = try optionalString(o.eab_kid, "opts->eab_kid")
        contact = try stringList(o.contact, o.contact_count, "opts->contact")
        if source != .acme {
            try refuse(o.challenge != 0 || listen != nil || o.port != 0 || webroot != nil || hook != nil, "challenge", "ACME")
            try refuse(kid != nil || o.eab_hmac_key != nil || !contact.isEmpty || o.timeout_seconds != 0,
                       "eab_kid, eab_hmac_key, contact and timeout_seconds", "ACME")
        } else {
            func needs(_ port: Bool, _ webroot: Bool, _ hook: Bool, _ name: String) throws {
                if port != (o.port != 0) { throw invalid(port ? "\(name) needs opts->port" : "opts->port does not go with \(name)") }
                if webroot != (o.webroot != nil) { throw invalid(webroot ? "\(name) needs opts->webroot" : "opts->webroot does not go with \(name)") }
                if hook != (o.dns_hook != nil) { throw invalid(hook ? "\(name) needs opts->dns_hook" : "opts->dns_hook does not go with \(name)") }
                if !port && listen != nil { throw invalid("opts->listen_address does not go with \(name)") }
            }
            switch o.challenge {
            case MTLS_ACME_HTTP01: try needs(true, false, false, "MTLS_ACME_HTTP01"); challenge = .http01(address: listen, port: o.port)
            case MTLS_ACME_TLS_ALPN01: try needs(true, false, false, "MTLS_ACME_TLS_ALPN01"); challenge = .tlsALPN01(address: listen, port: o.port)
            case MTLS_ACME_WEBROOT: try needs(false, true, false, "MTLS_ACME_WEBROOT"); challenge = .webroot(directory: webroot ?? "")
            case MTLS_ACME_DNS01: try needs(false, false, true, "MTLS_ACME_DNS01"); challenge = .dns01(command: hook ?? "")
            default:
                if p == nil { throw invalid("opts must not be NULL for mtls_enroll_acme: it names the challenge") }
                throw invalid("opts->challenge \(o.challenge) is not one of MTLS_ACME_HTTP01, _WEBROOT, _TLS_ALPN01, _DNS01")
            }
            if (kid == nil) != (o.eab_hmac_key == nil) { throw invalid("opts->eab_kid and opts->eab_hmac_key go together") }
            if let kid, let key = secretBytes(o.eab_hmac_key) {
                externalAccount = try ACMEExternalAccount.decode(keyID: kid, base64URLKey: key, source: "opts->eab_hmac_key")
            }
            if o.timeout_seconds < 0 { throw invalid("opts->timeout_seconds must not be negative") }
            if o.timeout_seconds > 0 { timeout = Double(o.timeout_seconds) }
        }

        // EST
        user = try optionalString(o.user, "opts->user")
        password = secretBytes(o.password)
        bootstrap = try o.bootstrap.map { try handle($0, Identity.self, "opts->bootstrap") }
        if source == .est {
            if (user == nil) != (password == nil) { throw invalid("opts->user and opts->password go together") }
            if user == nil && bootstrap == nil { throw invalid("give opts->user and opts->password, or opts->bootstrap") }
        } else {
            try refuse(user != nil || password != nil || bootstrap != nil, "user, password and bootstrap", "EST")
        }

        // pki
        caKeyPassword = secretBytes(o.ca_key_password)
        try refuse(caKeyPassword != nil && source != .pki, "ca_key_password", "pki")
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
        var request = ACMEEnrollment(directoryURL: url, identifiers: identifiers, challenge: o.challenge ?? .http01(address: nil, port: 0))
        request.directoryAnchors = o.anchors
        request.chainAnchors = o.chainAnchors
        if let spec = o.keySpec { request.keySpec = spec }
        request.tokenURI = o.tokenURI
        request.tokenPIN = o.pin
        request.externalAccount = o.externalAccount
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
        putLeaf(out, try Enrollment.enrollEST(url: url, subject: subject, anchors: o.anchors, user: o.user, password: o.password,
                                              bootstrap: o.bootstrap, keySpec: o.keySpec ?? .ecP256, tokenURI: o.tokenURI,
                                              tokenPIN: o.pin, profile: o.profile ?? .client, store: s, label: label,
                                              policy: o.policy))
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
        putLeaf(out, try Enrollment.enrollPKI(directory: dir, caName: caName, name: name, profile: o.profile ?? .server,
                                              keySpec: o.keySpec ?? .ecP256, tokenURI: o.tokenURI, tokenPIN: o.pin,
                                              caKeyPassword: o.caKeyPassword, chainAnchors: o.chainAnchors, store: s,
                                              label: label, policy: o.policy))
    }
}
