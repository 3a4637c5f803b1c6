import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What an ACME enrollment needs (see ``Enrollment/enrollACME(_:store:label:policy:)``; the rules
/// about which options go together are ``validate()``'s, in EnrollmentRules.swift).
public struct ACMEEnrollment: Sendable {
    /// The directory URL (`https://...`).
    public var directoryURL: String
    /// DNS names and IP addresses to certify (the first is the CSR's CN).
    public var identifiers: [String]
    /// How challenges are answered.
    public var challenge: ACMEChallengeMethod
    /// Anchors for the directory's own TLS certificate (a private ACME server's root). When
    /// given, only they are trusted; otherwise the system store is.
    public var directoryAnchors: [Certificate] = []
    /// Anchors the issued chain must validate to before it is installed (empty: the chain must
    /// at least validate to its own top certificate).
    public var chainAnchors: [Certificate] = []
    /// Type of a new key made in memory (nil: EC P-256); not with ``tokenURI``.
    public var keySpec: KeySpec?
    /// A key on a token (`pkcs11:` URI of an existing private key) instead of a new file key.
    public var tokenURI: String?
    /// The token's PIN (else the URI's pin-source, or none).
    public var tokenPIN: SecretBytes?
    /// External account binding, when the server requires it.
    public var externalAccount: ACMEExternalAccount?
    /// Account contact URLs (`mailto:...`).
    public var contact: [String] = []
    /// Seconds an order or authorization may stay pending (1 to ``maxPollTimeout``).
    public var pollTimeout: Double = ACMEEnrollment.defaultPollTimeout
    /// The default ``pollTimeout``: two minutes.
    public static let defaultPollTimeout: Double = 120
    /// The certificate this enrollment renews: its ARI identifier is sent as the order's
    /// `replaces` (RFC 9773 §5) when the server offers renewal information.
    public var replacing: Certificate?
    /// Carried into the new record (a renewal of a token identity).
    var previousTokenKeys: [EnrollmentRecord.RetiredTokenKey]?
    /// How the messages of ``validate()`` name the options.
    public var optionNames: EnrollmentOptionNames = .descriptive

    /// The minimum: a directory, identifiers and a challenge method.
    public init(directoryURL: String, identifiers: [String], challenge: ACMEChallengeMethod) {
        self.directoryURL = directoryURL
        self.identifiers = identifiers
        self.challenge = challenge
    }
}

/// What an enrollment or a renewal installed.
public struct EnrollmentResult: Sendable {
    /// The identity's label.
    public var label: String
    /// The new certificate.
    public var certificate: Certificate
    /// The chain above it, as the CA gave it.
    public var chain: [Certificate]
    /// The record now kept beside the identity.
    public var record: EnrollmentRecord
    /// The certificate it replaced, if any.
    public var previous: Certificate?
    /// The ARI identifier sent as the ACME order's `replaces`, if one was sent.
    public var replaced: String?
}

/// What ``Enrollment/renew(store:label:force:policy:tokenPIN:externalAccount:caKeyPassword:options:now:)`` did.
public struct RenewalOutcome: Sendable {
    /// Whether a new identity was installed.
    public var renewed: Bool
    /// The new identity's details, when renewed.
    public var result: EnrollmentResult?
    /// When the current certificate is due for renewal (two thirds of its lifetime, less jitter).
    public var dueAt: Date
    /// The current (or, after renewal, the previous) certificate.
    public var current: Certificate
    /// The ACME server's renewal information (RFC 9773), when it offers it and answered:
    /// then ``dueAt`` is a point in its suggested window rather than the two-thirds rule.
    public var renewalInfo: ACMERenewalInfo? = nil
    /// Why the renewal information could not be used (the two-thirds rule applied), if it failed.
    public var renewalInfoError: MTLSError? = nil
    /// When to look again at the latest, whatever ``dueAt`` says: the renewal information's
    /// `Retry-After` (the server may move the window).
    public var checkAgainAt: Date? = nil
}

/// Enrollment against a certificate authority (ACME, the local `mtls pki` directory) and
/// in-process renewal, installing through the store.
///
/// A new identity is installed only once proven: its key matches the certificate and its
/// chain validates (under the caller's policy, else the recorded anchors). It replaces the old
/// one under the same label in one store transaction, together with its enrollment record, so
/// the last good identity stays in place until then and programs following the label rotate.
public enum Enrollment {
    // MARK: ACME

    /// Enrolls `request.identifiers` with an ACME server and installs the identity under `label`
    /// (replacing one that is there). The account key is the one recorded for this label when the
    /// directory is the same, else a new P-256 key; it is kept sealed in the record. The request
    /// is checked first (``ACMEEnrollment/validate()``).
    public static func enrollACME(_ request: ACMEEnrollment, store: CredentialStore, label: String,
                                  policy: TrustPolicy? = nil) throws -> EnrollmentResult {
        try request.validate()
        let previous = try? store.enrollmentRecordAndKey(label: label)
        let recordedKey = previous.flatMap { $0.record.source == "acme" && $0.record.url == request.directoryURL ? $0.accountKey : nil }
        let accountKey = try recordedKey ?? PrivateKey.generate(.ecP256)
        var options = TLSClientOptions()
        if !request.directoryAnchors.isEmpty {
            options.policy = TrustPolicy(anchors: request.directoryAnchors, anchorsOnly: true)
        }
        // Each exchange with the CA ends within the order's own time limit at most: a CA that
        // trickles its answers cannot hold `--timeout 5` for longer.
        let limits = HTTPClient.Limits(timeout: min(HTTPClient.defaultTimeout, request.pollTimeout))
        let client = ACMEClient(directoryURL: request.directoryURL, accountKey: accountKey, http: HTTPClient(tls: options, limits: limits))
        client.pollTimeout = request.pollTimeout
        if recordedKey != nil, let record = previous?.record {
            // Renewal, or enrollment again under the label: the recorded account, not a new one.
            try useRecordedAccount(client, record: record)
        }
        let accountURL = try client.account(contact: request.contact, externalAccount: request.externalAccount)

        let key = try request.tokenURI.map { try Token.signingKey(uri: $0, pin: request.tokenPIN) } ?? PrivateKey.generate(request.keySpec ?? .ecP256)
        let ips = request.identifiers.filter { Socket.isIPLiteral($0) }
        let dns = request.identifiers.filter { !Socket.isIPLiteral($0) }
        let csr = try CertificateSigningRequest.make(subject: "CN=" + (dns.first ?? ips[0]), key: key, dnsNames: dns, ipAddresses: ips)
        let replaces = request.replacing.flatMap { try? ACMERenewalInfo.identifier(of: $0) }
        let issued = try client.issue(identifiers: request.identifiers, csr: csr, method: request.challenge, replaces: replaces)
        let record = EnrollmentRecord(source: "acme", url: request.directoryURL, account: accountURL, identifiers: request.identifiers,
                                      keyType: key.keyType.shortName, tokenURI: request.tokenURI, challenge: request.challenge.recorded,
                                      profile: "server", directoryAnchors: EnrollmentRecord.encode(request.directoryAnchors),
                                      chainAnchors: EnrollmentRecord.encode(request.chainAnchors), enrolledAt: Date().timeIntervalSince1970,
                                      previousTokenKeys: request.previousTokenKeys)
        var result = try install(key: key, issued: issued, record: record, accountKey: accountKey, store: store, label: label,
                                 policy: policy, tokenPIN: request.tokenPIN, writeToToken: true)
        result.replaced = client.lastOrderReplaced
        return result
    }

    /// The account of an ACME record for `client` (made with the record's account key): its
    /// recorded URL as `kid`; a record without one is looked up with `onlyReturnExisting`. No
    /// account is made again (which a server wanting a contact or an external account binding
    /// refuses).
    static func useRecordedAccount(_ client: ACMEClient, record: EnrollmentRecord) throws {
        if let url = record.account, !url.isEmpty {
            client.useAccount(url)
        } else {
            try client.existingAccount()
        }
    }

    /// The ACME client for an ACME record: its directory, its anchors, its account key.
    static func acmeClient(_ record: EnrollmentRecord, accountKey: PrivateKey) -> ACMEClient {
        var options = TLSClientOptions()
        if let anchors = try? EnrollmentRecord.decode(record.directoryAnchors), !anchors.isEmpty {
            options.policy = TrustPolicy(anchors: anchors, anchorsOnly: true)
        }
        return ACMEClient(directoryURL: record.url, accountKey: accountKey, http: HTTPClient(tls: options))
    }

    /// Revokes the ACME certificate of the identity labelled `label` (RFC 8555 §7.6), with the
    /// account recorded at enrollment (the request is signed with its key). `reason` is an RFC
    /// 5280 CRLReason code (0 unspecified, 1 keyCompromise, 4 superseded, 5 cessationOfOperation...;
    /// nil: none sent). The identity stays in the store: a revoked identity is the caller's to
    /// delete or renew. Returns the certificate revoked.
    @discardableResult
    public static func revokeACME(store: CredentialStore, label: String, reason: Int? = nil,
                                  tokenPIN: SecretBytes? = nil) throws -> Certificate {
        if let reason, !(0...10).contains(reason) || reason == 7 {
            throw MTLSError(.invalidArgument, "\(reason) is not a CRLReason code (0-6, 8-10)")
        }
        let (record, accountKey) = try store.enrollmentRecordAndKey(label: label)
        guard record.source == "acme" else {
            throw MTLSError(.unsupported, "\"\(label)\" was enrolled from \"\(record.source)\": only ACME certificates are revoked through their CA here")
        }
        let certificate: Certificate = record.tokenURI == nil ? try store.identity(label: label).leaf
                                                               : try store.tokenIdentity(label: label).certificate
        let client = acmeClient(record, accountKey: accountKey)
        try useRecordedAccount(client, record: record)
        try client.revoke(certificate, reason: reason)
        return certificate
    }

    // MARK: EST

    /// Enrolls with an EST server (RFC 7030) at `request.url` (the base, such as
    /// `https://est.example/.well-known/est`): a new key (or the token key at `tokenURI`), a CSR
    /// for `subject` signed by it, sent to `/simpleenroll` with HTTP basic authentication (`user`,
    /// `password`) and/or a bootstrap identity presented over TLS; the chain comes from
    /// `/cacerts`. Installed under `label` with its record; renewal re-enrolls over mutual TLS
    /// with the identity itself (`/simplereenroll`). The request is checked first
    /// (``ESTEnrollment/validate()``).
    public static func enrollEST(_ request: ESTEnrollment, store: CredentialStore, label: String,
                                 policy: TrustPolicy? = nil) throws -> EnrollmentResult {
        try request.validate()
        let anchors = EnrollmentRecord.encode(request.anchors)
        let record = EnrollmentRecord(source: "est", url: request.url, account: request.user, identifiers: [request.subject],
                                      keyType: "", tokenURI: request.tokenURI, challenge: nil, profile: request.profile.rawValue,
                                      directoryAnchors: anchors, chainAnchors: anchors, enrolledAt: Date().timeIntervalSince1970)
        return try issueEST(record: record, keySpec: request.keySpec ?? .ecP256, user: request.user, password: request.password,
                            keepPassword: request.keepPassword,
                            client: request.bootstrap.map { .identity($0) } ?? ClientIdentity.none, reenroll: false,
                            tokenPIN: request.tokenPIN, store: store, label: label, policy: policy, timeout: request.timeout)
    }

    private static func issueEST(record: EnrollmentRecord, keySpec: KeySpec, user: String?, password: SecretBytes?,
                                 keepPassword: Bool, client: ClientIdentity, reenroll: Bool, tokenPIN: SecretBytes?, store: CredentialStore,
                                 label: String, policy: TrustPolicy?, timeout: Double = ESTEnrollment.defaultTimeout) throws -> EnrollmentResult {
        guard let subject = record.identifiers.first else { throw MTLSError(.corrupt, "the EST record of \"\(label)\" has no subject") }
        var options = TLSClientOptions()
        let anchors = try EnrollmentRecord.decode(record.directoryAnchors)
        if !anchors.isEmpty { options.policy = TrustPolicy(anchors: anchors, anchorsOnly: true) }
        options.identity = client
        let est = ESTClient(baseURL: record.url, http: HTTPClient(tls: options, limits: HTTPClient.Limits(timeout: timeout)))
        let key = try record.tokenURI.map { try Token.signingKey(uri: $0, pin: tokenPIN) } ?? PrivateKey.generate(keySpec)
        let csr = try CertificateSigningRequest.make(subject: subject, key: key)
        let leaf = try est.enroll(csr, reenroll: reenroll, user: user, password: password)
        let cas = try est.caCertificates()
        let (path, _) = Identity.buildChain(from: leaf, using: cas)
        var r = record
        r.keyType = key.keyType.shortName
        r.enrolledAt = Date().timeIntervalSince1970
        if r.chainAnchors.isEmpty, let top = path.last { r.chainAnchors = EnrollmentRecord.encode([top]) }
        let recordedKey = try? store.enrollmentRecordAndKey(label: label).accountKey
        let accountKey = try recordedKey ?? PrivateKey.generate(.ecP256)
        // A re-enrollment keeps the record's sealed password as it is (same record key); an
        // enrollment keeps it only when asked.
        if !reenroll {
            r.sealedPassword = nil
            if keepPassword, let password { try r.keep(password: password, recordKey: accountKey) }
        }
        return try install(key: key, issued: [leaf] + path, record: r, accountKey: accountKey, store: store, label: label,
                           policy: policy, tokenPIN: tokenPIN, writeToToken: true)
    }

    // MARK: the local CA

    /// Enrolls from a local `mtls pki` directory: a new key (in memory, or the token key at
    /// `tokenURI`), a CSR signed by it, signed by the intermediate `caName`, installed under
    /// `label` with its record. The chain must validate to `chainAnchors` (empty: the
    /// directory's own root). The request is checked first (``PKIEnrollment/validate()``).
    public static func enrollPKI(_ request: PKIEnrollment, store: CredentialStore, label: String,
                                 policy: TrustPolicy? = nil) throws -> EnrollmentResult {
        try request.validate()
        var anchors = request.chainAnchors
        if anchors.isEmpty {
            let rootFile = PKIDirectory(path: request.directory).rootPath + "/cert.pem"
            guard let root = try Certificate.load(path: rootFile).first else {
                throw MTLSError(.parse, "\(rootFile) holds no certificate")
            }
            anchors = [root]
        }
        let record = EnrollmentRecord(source: "pki", url: request.directory, account: request.caName, identifiers: [request.name],
                                      keyType: "", tokenURI: request.tokenURI, challenge: nil, profile: request.profile.rawValue,
                                      directoryAnchors: [], chainAnchors: EnrollmentRecord.encode(anchors),
                                      enrolledAt: Date().timeIntervalSince1970)
        return try issuePKI(record: record, keySpec: request.keySpec ?? .ecP256, tokenPIN: request.tokenPIN,
                            caKeyPassword: request.caKeyPassword, first: true, store: store, label: label, policy: policy)
    }

    private static func issuePKI(record: EnrollmentRecord, keySpec: KeySpec, tokenPIN: SecretBytes?, caKeyPassword: SecretBytes?,
                                 first: Bool, store: CredentialStore, label: String, policy: TrustPolicy?) throws -> EnrollmentResult {
        guard let caName = record.account, let name = record.identifiers.first,
              let profile = CertificateProfile(rawValue: record.profile) else {
            throw MTLSError(.corrupt, "the pki enrollment record of \"\(label)\" is incomplete")
        }
        let pki = PKIDirectory(path: record.url)
        let key = try record.tokenURI.map { try Token.signingKey(uri: $0, pin: tokenPIN) } ?? PrivateKey.generate(keySpec)
        let isIP = Socket.isIPLiteral(name)
        let request = CertificateRequest(profile: profile, commonName: name,
                                         dnsNames: profile == .server && !isIP ? [name] : [],
                                         ipAddresses: profile == .server && isIP ? [name] : [])
        let csr = try CertificateSigningRequest.make(subject: "CN=" + name, key: key)
        let issued: [Certificate]
        if first {
            let (leaf, chain) = try pki.sign(csr, request: request, caName: caName, keyPassword: caKeyPassword)
            issued = [leaf] + chain
        } else {
            // A renewal: the folder already lists this name, so the intermediate signs directly.
            let (ca, chain) = try pki.loadIntermediate(caName, keyPassword: caKeyPassword)
            try request.validate()
            issued = [try ca.issue(request, csr: csr)] + chain
        }
        var r = record
        r.keyType = key.keyType.shortName
        r.enrolledAt = Date().timeIntervalSince1970
        let recordedKey = try? store.enrollmentRecordAndKey(label: label).accountKey
        let accountKey = try recordedKey ?? PrivateKey.generate(.ecP256)
        return try install(key: key, issued: issued, record: r, accountKey: accountKey, store: store, label: label,
                           policy: policy, tokenPIN: tokenPIN, writeToToken: first)
    }

    // MARK: proving and installing

    /// Proves the issued identity (key matches, chain validates) and installs it and its record.
    static func install(key: PrivateKey, issued: [Certificate], record: EnrollmentRecord, accountKey: PrivateKey,
                        store: CredentialStore, label: String, policy: TrustPolicy?, tokenPIN: SecretBytes?,
                        writeToToken: Bool) throws -> EnrollmentResult {
        guard let leaf = issued.first else { throw MTLSError(.parse, "the CA returned no certificate") }
        let chain = Array(issued.dropFirst())
        try prove(key: key, leaf: leaf, chain: chain, record: record, policy: policy)
        let previous: Certificate? = (try? store.identity(label: label).leaf) ?? (try? store.tokenIdentity(label: label).certificate)
        let carrier = try record.carrier(key: accountKey)
        if let uri = record.tokenURI {
            if writeToToken {
                // Beside its key on the token, so the token alone can present it (and its chain).
                // Already there (a retried enrollment) is fine; any other failure is reported.
                do { _ = try Token.importCertificate(leaf, chain: chain, uri: uri, pin: tokenPIN) } catch let e as MTLSError where e.code == .duplicate {}
            }
            try store.putTokenIdentity(uri: key.tokenURI ?? uri, certificate: leaf, chain: chain, label: label, replace: true)
            try store.putIdentity(carrier, label: EnrollmentRecord.label(for: label), replace: true)
        } else {
            let identity = try Identity(privateKey: key, leaf: leaf, certificates: chain)
            // One transaction: the identity and its record, or neither.
            try store.putIdentities([(label, identity), (EnrollmentRecord.label(for: label), carrier)], replace: true)
        }
        return EnrollmentResult(label: label, certificate: leaf, chain: chain, record: record, previous: previous)
    }

    /// The proof a new identity must pass before it is stored: the key is the certificate's,
    /// and the chain validates under `policy` (the program's), else to the recorded anchors,
    /// else at least to its own top certificate. ``MTLSError/Code/challengeFailed`` otherwise.
    package static func prove(key: PrivateKey, leaf: Certificate, chain: [Certificate], record: EnrollmentRecord, policy: TrustPolicy?) throws {
        guard key.matches(leaf) else {
            throw MTLSError(.challengeFailed, "the issued certificate is not for the identity's key: not installed")
        }
        let purpose: TrustPurpose = record.profile == "client" ? .clientAuth : .serverAuth
        let result: TrustResult
        if let policy {
            let host = purpose == .serverAuth ? record.identifiers.first : nil
            result = policy.evaluate(chain: [leaf] + chain, host: host, purpose: purpose)
        } else {
            var anchors = try EnrollmentRecord.decode(record.chainAnchors)
            if anchors.isEmpty, let top = chain.last ?? Optional(leaf) { anchors = [top] }
            let p = TrustPolicy(anchors: anchors, anchorsOnly: true, purpose: purpose, nameCheck: .none)
            result = p.evaluate(chain: [leaf] + chain, host: nil, purpose: purpose)
        }
        guard result.trusted else {
            let why = result.reasons.map { "\($0.code): \($0.message)" }.joined(separator: "; ")
            throw MTLSError(.challengeFailed, "the issued chain does not validate under the policy (\(why)): not installed")
        }
    }

    // MARK: renewal

    /// When `certificate` is due: two thirds into its lifetime, less a jitter of up to 5 % of
    /// the lifetime (so a fleet enrolled together does not renew together). The jitter is drawn
    /// from the certificate's hash, not at each call: every check of the same certificate agrees
    /// on the date, so a loop that wakes at it finds it due rather than drawing a later one.
    public static func dueDate(_ certificate: Certificate, jitter: Bool = true) -> Date {
        let lifetime = certificate.notAfter.timeIntervalSince(certificate.notBefore)
        let spread = jitter ? hashFraction(certificate) * max(0, lifetime) * 0.05 : 0
        return certificate.notBefore.addingTimeInterval(lifetime * 2 / 3 - spread)
    }

    /// A number in [0, 1) taken from the certificate's SHA-256: a per-certificate jitter.
    static func hashFraction(_ certificate: Certificate) -> Double {
        var x: UInt64 = 0
        for b in certificate.sha256.prefix(8) { x = x << 8 | UInt64(b) }
        return Double(x >> 11) / Double(UInt64(1) << 53)
    }

    /// Renews the identity labelled `label` from its enrollment record when it is due (or
    /// always, with `force`). `caKeyPassword` unlocks a local pki directory's CA key. The previous identity stays in the store, untouched, unless the
    /// new one is issued and proven (see `prove`); then both are swapped in one transaction.
    public static func renew(store: CredentialStore, label: String, force: Bool = false, policy: TrustPolicy? = nil,
                             tokenPIN: SecretBytes? = nil, externalAccount: ACMEExternalAccount? = nil,
                             caKeyPassword: SecretBytes? = nil, options: RenewalOptions = RenewalOptions(),
                             now: Date = Date()) throws -> RenewalOutcome {
        var record = try store.enrollmentRecord(label: label)
        if let grace = options.deletePreviousTokenKeysAfter {
            record = try deletePreviousTokenKeys(store: store, label: label, record: record, grace: grace, pin: tokenPIN, now: now)
        }
        let current: Certificate = record.tokenURI == nil ? try store.identity(label: label).leaf
                                                           : try store.tokenIdentity(label: label).certificate
        var due = dueDate(current)
        var info: ACMERenewalInfo? = nil, infoError: MTLSError? = nil
        if record.source == "acme" {
            // RFC 9773: the server's window, when it offers one; any failure to get it falls
            // back to the two-thirds rule (and is reported in the outcome).
            do {
                info = try acmeClient(record, accountKey: try store.enrollmentRecordAndKey(label: label).accountKey).renewalInfo(for: current)
            } catch let e as MTLSError { infoError = e } catch { infoError = MTLSError(.internal, "\(error)") }
            if let info { due = info.chosenTime(for: current) }
        }
        let checkAgain = info?.retryAfter.map { now.addingTimeInterval(max(1, $0)) }
        guard force || now >= due else {
            return RenewalOutcome(renewed: false, result: nil, dueAt: due, current: current, renewalInfo: info,
                                  renewalInfoError: infoError, checkAgainAt: checkAgain)
        }
        let keySpec = (try? KeySpec(issuingName: record.keyType)) ?? .ecP256
        if let keyURI = record.tokenURI {
            // A token identity is re-keyed on the token: a new key (new CKA_ID, a new label),
            // the CSR signed there; the previous key stays on the token.
            record.tokenURI = try rekeyOnToken(keyURI, keyType: record.keyType, pin: tokenPIN)
            record.previousTokenKeys = (record.previousTokenKeys ?? []) + [.init(uri: keyURI, retiredAt: now.timeIntervalSince1970)]
        }
        let result: EnrollmentResult
        switch record.source {
        case "acme":
            guard let challenge = record.challenge else { throw MTLSError(.corrupt, "the ACME record of \"\(label)\" has no challenge") }
            var request = ACMEEnrollment(directoryURL: record.url, identifiers: record.identifiers,
                                         challenge: try ACMEChallengeMethod(recorded: challenge))
            request.directoryAnchors = try EnrollmentRecord.decode(record.directoryAnchors)
            request.chainAnchors = try EnrollmentRecord.decode(record.chainAnchors)
            // A token identity's key is the re-keyed token key: no key type goes with it.
            if record.tokenURI == nil { request.keySpec = keySpec }
            request.tokenURI = record.tokenURI
            request.tokenPIN = tokenPIN
            request.externalAccount = externalAccount
            request.replacing = current
            request.previousTokenKeys = record.previousTokenKeys
            // The same account: enrollACME takes its key from the record.
            result = try enrollACME(request, store: store, label: label, policy: policy)
        case "pki":
            result = try issuePKI(record: record, keySpec: keySpec, tokenPIN: tokenPIN, caKeyPassword: caKeyPassword, first: false,
                                  store: store, label: label, policy: policy)
        case "est":
            // Re-enrollment is authenticated by the identity being renewed, over mutual TLS.
            let client: ClientIdentity
            if record.tokenURI == nil {
                client = .identity(try store.identity(label: label))
            } else {
                client = .identity(try IdentityCandidate(token: try store.tokenIdentity(label: label), pin: tokenPIN).identity())
            }
            // A server that also asks for HTTP authentication (RFC 7030 §3.2.3) gets the
            // password kept at enrollment, when it was kept.
            let kept = try record.keptPassword(recordKey: try store.enrollmentRecordAndKey(label: label).accountKey)
            result = try issueEST(record: record, keySpec: keySpec, user: kept == nil ? nil : record.account, password: kept,
                                  keepPassword: kept != nil, client: client, reenroll: true,
                                  tokenPIN: tokenPIN, store: store, label: label, policy: policy)
        default:
            throw MTLSError(.unsupported, "\"\(label)\" was enrolled from \"\(record.source)\", which this libmtls cannot renew")
        }
        if let grace = options.deletePreviousTokenKeysAfter {
            _ = try deletePreviousTokenKeys(store: store, label: label, record: result.record, grace: grace, pin: tokenPIN, now: now)
        }
        return RenewalOutcome(renewed: true, result: result, dueAt: due, current: current, renewalInfo: info,
                              renewalInfoError: infoError, checkAgainAt: checkAgain)
    }

    /// Whether `error` says a renewed identity was issued but not installed (not proven by ``prove``).
    package static func isNotInstalled(_ error: MTLSError) -> Bool {
        error.code == .challengeFailed && error.message.hasSuffix(": not installed")
    }

    /// Deletes from the token the keys earlier renewals replaced more than `grace` seconds
    /// ago (a key already gone counts as deleted) and stores the record without them. Returns
    /// the record as stored.
    static func deletePreviousTokenKeys(store: CredentialStore, label: String, record: EnrollmentRecord, grace: Double,
                                        pin: SecretBytes?, now: Date) throws -> EnrollmentRecord {
        guard grace.isFinite, grace >= 0 else { throw MTLSError(.invalidArgument, "the grace period must be 0 seconds or more") }
        let retired = record.previousTokenKeys ?? []
        var kept: [EnrollmentRecord.RetiredTokenKey] = []
        for k in retired {
            guard now.timeIntervalSince1970 >= k.retiredAt + grace, k.uri != record.tokenURI else { kept.append(k); continue }
            do { try Token.deleteKey(uri: k.uri, pin: pin) } catch let e as MTLSError where e.code == .notFound {}
        }
        guard kept.count != retired.count else { return record }
        var r = record
        r.previousTokenKeys = kept
        let accountKey = try store.enrollmentRecordAndKey(label: label).accountKey
        try store.putIdentity(try r.carrier(key: accountKey), label: EnrollmentRecord.label(for: label), replace: true)
        return r
    }

    /// Makes the next key of a token identity beside `uri`'s: same token (and query, such as
    /// `pin-source` or `module-path`), a random CKA_ID, and the label `<base>~<unix time>`.
    /// Returns the new private key's URI.
    static func rekeyOnToken(_ uri: String, keyType: String, pin: SecretBytes?) throws -> String {
        guard let type = TokenKeyType(rawValue: keyType) else {
            throw MTLSError(.unsupported, "a \(keyType) key cannot be made on a token")
        }
        let parsed = try PKCS11URI(uri)
        let q = uri.firstIndex(of: "?")
        let path = q.map { String(uri[..<$0]) } ?? uri
        let query = q.map { String(uri[$0...]) } ?? ""
        var parts = path.dropFirst("pkcs11:".count).split(separator: ";").map(String.init)
        parts.removeAll { $0.hasPrefix("id=") || $0.hasPrefix("object=") || $0.hasPrefix("type=") }
        var base = parsed.object ?? "mtls-key"
        if let tilde = base.lastIndex(of: "~"), base[base.index(after: tilde)...].allSatisfy(\.isNumber) {
            base = String(base[..<tilde])
        }
        let label = base + "~" + String(Int(Date().timeIntervalSince1970))
        let encoded = label.unicodeScalars.map { u -> String in
            (u.isASCII && (u.properties.isAlphabetic || ("0"..."9").contains(Character(u)) || "-._~".unicodeScalars.contains(u)))
                ? String(u) : Array(String(u).utf8).map { "%" + Encoding.hex([$0]) }.joined()
        }.joined()
        parts.append("object=" + encoded)
        return try Token.generateKey(uri: "pkcs11:" + parts.joined(separator: ";") + query, type: type, pin: pin)
    }

    /// Seconds to wait before retry `attempt` (1, 2, ...) after a failed renewal: exponential
    /// from 30 s, capped at 1 h, with ±20 % jitter.
    public static func backoff(attempt: Int, base: Double = 30, cap: Double = 3600) -> Double {
        let raw = min(cap, base * pow(2, Double(max(0, min(attempt - 1, 20)))))
        return raw * Double.random(in: 0.8...1.2)
    }
}
