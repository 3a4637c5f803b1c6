import ArgumentParser
import Foundation
import MTLS

/// `mtls enroll acme|pki`: get an identity from a certificate authority into the store, with
/// the record `mtls renew` uses.
struct EnrollCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll",
        abstract: "Enroll an identity with a certificate authority (ACME, EST, a local mtls pki directory) into the store.",
        subcommands: [ACME.self, EST.self, PKI.self, Revoke.self]
    )

    /// The JSON object (and text) printed for an enrollment or a renewal.
    static func report(_ r: EnrollmentResult, renewed: Bool? = nil, extra: [String: Any] = [:], json: Bool) {
        var o: [String: Any] = [
            "label": r.label, "source": r.record.source, "url": r.record.url,
            "account": r.record.account as Any? ?? NSNull(), "identifiers": r.record.identifiers,
            "key_type": r.record.keyType, "token_uri": r.record.tokenURI as Any? ?? NSNull(),
            "serial": r.certificate.serialHex, "leaf_sha256": r.certificate.sha256Hex,
            "not_after": CLI.rfc3339(r.certificate.notAfter), "chain": r.chain.map(\.sha256Hex),
            "previous_sha256": r.previous?.sha256Hex as Any? ?? NSNull(),
        ]
        if let renewed { o["renewed"] = renewed }
        if let replaced = r.replaced { o["replaces"] = replaced }
        o.merge(extra) { $1 }
        if json { return CLI.printJSON(o) }
        print("\(r.label): \(r.certificate.subject), serial \(r.certificate.serialHex), until \(CLI.rfc3339(r.certificate.notAfter)) (\(r.record.source) \(r.record.url))")
    }

    /// `mtls enroll revoke LABEL [--reason R]`: revoke an ACME-enrolled identity's certificate.
    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke the certificate of an identity enrolled with ACME (signed with its recorded account key).",
            discussion: """
                The identity stays in the store (renew it with mtls renew LABEL --force, or delete it). \
                --reason is an RFC 5280 CRLReason: a number or one of unspecified, keyCompromise, \
                cACompromise, affiliationChanged, superseded, cessationOfOperation, certificateHold, \
                removeFromCRL, privilegeWithdrawn, aACompromise.
                """)
        static let reasons = ["unspecified": 0, "keycompromise": 1, "cacompromise": 2, "affiliationchanged": 3, "superseded": 4,
                              "cessationofoperation": 5, "certificatehold": 6, "removefromcrl": 8, "privilegewithdrawn": 9,
                              "aacompromise": 10]
        @OptionGroup var location: StoreCommand.Location
        @Argument(help: "The label of the identity.") var label: String
        @Option(name: .customLong("reason"), help: "CRLReason (name or number; none sent by default).") var reason: String?
        @Option(name: .customLong("pin-file"), help: "File holding the token's PIN (token identities).") var pinFile: String?
        @Flag(help: "Machine-readable output: {label, revoked, serial, leaf_sha256, reason}.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                var code: Int? = nil
                if let reason {
                    guard let c = Int(reason) ?? Revoke.reasons[reason.lowercased()] else {
                        throw MTLSError(.invalidArgument, "--reason: \"\(reason)\" is not a CRLReason")
                    }
                    code = c
                }
                let pin = try pinFile.map(CLI.readPINFile)
                let cert = try Enrollment.revokeACME(store: try location.open(), label: label, reason: code, tokenPIN: pin)
                if json {
                    return CLI.printJSON(["label": label, "revoked": true, "serial": cert.serialHex, "leaf_sha256": cert.sha256Hex,
                                          "reason": code as Any? ?? NSNull()])
                }
                print("\(label): certificate serial \(cert.serialHex) revoked")
            }
        }
    }

    static func loadAnchors(_ paths: [String]) throws -> [Certificate] {
        try paths.flatMap { try Certificate.load(path: $0) }
    }

    /// How the core's enrollment rules name the options on the command line: by their flags.
    static let optionNames = EnrollmentOptionNames { option in
        switch option {
        case .identifiers: return "--name"
        case .http01: return "--http-port"
        case .webroot: return "--webroot"
        case .tlsALPN01: return "--tls-alpn-port"
        case .dns01: return "--dns-hook"
        // The parameters are each method flag's value ("--webroot needs a directory").
        case .port: return "a port"
        case .webrootDirectory: return "a directory"
        case .dnsHook: return "a command"
        case .eabKeyID: return "--eab-kid"
        case .eabKey: return "--eab-hmac-file"
        case .pollTimeout: return "--timeout"
        case .keyType: return "--key-type"
        case .tokenURI: return "--token-uri"
        case .user: return "--user"
        case .password: return "--password-file"
        case .bootstrap: return "--identity"
        case .keepPassword: return "--keep-password"
        case .profile: return "--profile"
        }
    }

    /// Runs `body`, a check of the core's enrollment rules, and reports a broken rule as a usage
    /// error (exit status 64 and the pointer to --help), as ArgumentParser's own checks are.
    static func usage<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let e as MTLSError where e.code == .invalidArgument { throw ValidationError(e.message) }
    }

    /// `--profile`: the certificate profile it names (whether it is one this source issues is
    /// the core's rule).
    static func profile(_ text: String) throws -> CertificateProfile {
        guard let p = CertificateProfile(rawValue: text) else {
            throw ValidationError("--profile: \"\(text)\" is not a certificate profile")
        }
        return p
    }

    struct ACME: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "acme",
            abstract: "Enroll with an ACME server (RFC 8555): http-01, tls-alpn-01 or dns-01.")
        @OptionGroup var location: StoreCommand.Location
        @Option(name: .customLong("directory"), help: "The ACME directory URL (https://...).") var directory: String
        @Option(name: .customLong("anchor"), help: "Trust only this certificate (PEM) for the ACME server's TLS (repeatable).")
        var anchors: [String] = []
        @Option(name: .customLong("chain-anchor"), help: "The issued chain must validate to this certificate (repeatable; default: the chain's own top).")
        var chainAnchors: [String] = []
        @Option(name: .customLong("name"), help: "A DNS name or IP address to certify (repeatable).") var names: [String] = []
        @Option(name: .customLong("label"), help: "The store label of the identity.") var label: String
        @Option(name: .customLong("key-type"), help: "Type of the new key (ec-p256, ec-p384, rsa-2048...; default ec-p256).") var keyType: String?
        @Option(name: .customLong("token-uri"), help: "Use this token key (pkcs11: URI) instead of a new key in the store.") var tokenURI: String?
        @Option(name: .customLong("pin-file"), help: "File holding the token's PIN.") var pinFile: String?
        @Option(name: .customLong("http-port"), help: "Answer http-01 with a built-in responder on this port.") var httpPort: UInt16?
        @Option(name: .customLong("webroot"), help: "Answer http-01 with files under DIR/.well-known/acme-challenge/.") var webroot: String?
        @Option(name: .customLong("tls-alpn-port"), help: "Answer tls-alpn-01 with a built-in responder on this port.") var tlsALPNPort: UInt16?
        @Option(name: .customLong("dns-hook"), help: "Answer dns-01 with this command (sh -c; gets present|cleanup NAME VALUE).") var dnsHook: String?
        @Option(name: .customLong("listen-address"), help: "Address the built-in responders listen on (default: all IPv4).") var listenAddress: String?
        @Option(name: .customLong("eab-kid"), help: "External account binding key identifier.") var eabKID: String?
        @Option(name: .customLong("eab-hmac-file"), help: "File holding the external account binding MAC key (base64url).") var eabHMACFile: String?
        @Option(name: .customLong("contact"), help: "Account contact URL, such as mailto:ops@example.com (repeatable).") var contact: [String] = []
        @Option(name: .customLong("timeout"), help: "Seconds an order may stay pending (default \(Int(ACMEEnrollment.defaultPollTimeout))).")
        var timeout: Double?
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let keySpec = try keyType.map { try KeySpec(issuingName: $0) }
                var request = try EnrollCommand.usage { () throws -> ACMEEnrollment in
                    var challenge = ACMEChallengeOptions()
                    let asked: [(Bool, ACMEChallengeOptions.Kind)] = [(httpPort != nil, .http01), (webroot != nil, .webroot),
                                                                       (tlsALPNPort != nil, .tlsALPN01), (dnsHook != nil, .dns01)]
                    challenge.kinds = asked.filter(\.0).map(\.1)
                    challenge.port = httpPort ?? tlsALPNPort
                    challenge.listenAddress = listenAddress
                    challenge.webroot = webroot
                    challenge.dnsHook = dnsHook
                    var request = ACMEEnrollment(directoryURL: directory, identifiers: names,
                                                 challenge: try challenge.method(names: EnrollCommand.optionNames))
                    request.optionNames = EnrollCommand.optionNames
                    request.keySpec = keySpec
                    request.tokenURI = tokenURI
                    if let timeout { request.pollTimeout = timeout }
                    // Before the MAC key's file is read.
                    try ACMEExternalAccount.checkParts(keyID: eabKID != nil, key: eabHMACFile != nil, names: EnrollCommand.optionNames)
                    try request.validate()
                    return request
                }
                request.directoryAnchors = try EnrollCommand.loadAnchors(anchors)
                request.chainAnchors = try EnrollCommand.loadAnchors(chainAnchors)
                request.tokenPIN = try pinFile.map(CLI.readPINFile)
                request.externalAccount = try ACMEExternalAccount.given(keyID: eabKID, key: try eabHMACFile.map(CLI.readPasswordFile),
                                                                        keySource: eabHMACFile, names: EnrollCommand.optionNames)
                request.contact = contact
                let result = try location.adding { store in try Enrollment.enrollACME(request, store: store, label: label) }
                EnrollCommand.report(result, json: json)
            }
        }
    }

    struct EST: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "est",
            abstract: "Enroll with an EST server (RFC 7030): /simpleenroll with basic auth or a bootstrap identity.")
        @OptionGroup var location: StoreCommand.Location
        @Option(name: .customLong("url"), help: "The EST base URL (https://host/.well-known/est).") var url: String
        @Option(name: .customLong("anchor"), help: "Trust only this certificate (PEM) for the EST server's TLS (repeatable).")
        var anchors: [String] = []
        @Option(name: .customLong("user"), help: "HTTP basic authentication user.") var user: String?
        @Option(name: .customLong("password-file"), help: "File holding the basic authentication password.") var passwordFile: String?
        @Option(name: .customLong("identity"), help: "A bootstrap identity (store label) presented over TLS.") var identity: String?
        @Flag(name: .customLong("keep-password"),
              help: "Keep the password, sealed in the store with the enrollment record, for servers that ask for it on re-enrollment too.")
        var keepPassword = false
        @Option(name: .customLong("subject"), help: "The subject DN of the request (\"CN=device-1,O=Example\").") var subject: String
        @Option(name: .customLong("label"), help: "The store label of the identity.") var label: String
        @Option(name: .customLong("profile"), help: "client (default) or server: the purpose the issued chain is checked for.")
        var profile: String = "client"
        @Option(name: .customLong("key-type"), help: "Type of the new key (default ec-p256).") var keyType: String?
        @Option(name: .customLong("token-uri"), help: "Use this token key (pkcs11: URI) instead of a new key in the store.") var tokenURI: String?
        @Option(name: .customLong("pin-file"), help: "File holding the token's PIN.") var pinFile: String?
        @Option(name: .customLong("timeout"), help: "Seconds each exchange with the EST server may take in all (default \(Int(ESTEnrollment.defaultTimeout))).")
        var timeout: Double?
        @Flag(help: "Machine-readable output.") var json = false

        func validate() throws {
            if let timeout, !(timeout.isFinite && timeout > 0) { throw ValidationError("--timeout is a number of seconds above 0") }
        }

        func run() throws {
            try CLI.reporting(json: json) {
                let profile = try EnrollCommand.profile(profile)
                let spec = try keyType.map { try KeySpec(issuingName: $0) }
                let password = try passwordFile.map(CLI.readPasswordFile)
                let pin = try pinFile.map(CLI.readPINFile)
                let anchorCerts = try EnrollCommand.loadAnchors(anchors)
                let result = try location.adding { store in
                    var request = ESTEnrollment(url: url, subject: subject)
                    request.optionNames = EnrollCommand.optionNames
                    request.anchors = anchorCerts
                    request.user = user
                    request.password = password
                    request.keepPassword = keepPassword
                    request.bootstrap = try identity.map { try store.identity(label: $0) }
                    request.keySpec = spec
                    request.tokenURI = tokenURI
                    request.tokenPIN = pin
                    request.profile = profile
                    if let timeout { request.timeout = timeout }
                    try EnrollCommand.usage { try request.validate() }
                    return try Enrollment.enrollEST(request, store: store, label: label)
                }
                EnrollCommand.report(result, json: json)
            }
        }
    }

    struct PKI: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "pki",
            abstract: "Enroll from a local mtls pki directory (one-machine setups).")
        @OptionGroup var location: StoreCommand.Location
        @Option(name: .customLong("dir"), help: "The mtls pki directory.") var dir: String
        @Option(name: .customLong("ca"), help: "The intermediate CA's name.") var ca: String
        // As in `mtls pki issue server|client`: a server's name is --dns or --ip, a client's --name.
        @Option(name: .customLong("dns"), help: "A server's DNS name (as `pki issue server --dns`).") var dns: String?
        @Option(name: .customLong("ip"), help: "A server's IP address (as `pki issue server --ip`).") var ip: String?
        @Option(name: .customLong("name"), help: "A client's name, its CN (as `pki issue client --name`); for a server, the old way to give --dns or --ip.") var name: String?
        @Option(name: .customLong("label"), help: "The store label of the identity.") var label: String
        @Option(name: .customLong("profile"), help: "server (default) or client.") var profile: String = "server"

        func validate() throws {
            if [dns, ip, name].compactMap({ $0 }).count != 1 {
                throw ValidationError("give the certificate's name once: --dns NAME or --ip ADDRESS for a server, --name NAME for a client")
            }
        }
        @Option(name: .customLong("key-type"), help: "Type of the new key (default ec-p256).") var keyType: String?
        @Option(name: .customLong("token-uri"), help: "Use this token key (pkcs11: URI) instead of a new key in the store.") var tokenURI: String?
        @Option(name: .customLong("pin-file"), help: "File holding the token's PIN.") var pinFile: String?
        @Option(name: .customLong("password-file"), help: "File with the password of the CA keys (default: $MTLS_PKI_KEY_PASSWORD_FILE).")
        var passwordFile: String?
        // The name before 0.3.0: an encrypted key's password is --password-file in every command.
        @Option(name: .customLong("key-password-file"), help: ArgumentHelp("The old name of --password-file.", visibility: .hidden))
        var keyPasswordFile: String?
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                var request = PKIEnrollment(directory: dir, caName: ca, name: dns ?? ip ?? name ?? "")
                request.optionNames = EnrollCommand.optionNames
                request.profile = try EnrollCommand.profile(profile)
                request.keySpec = try keyType.map { try KeySpec(issuingName: $0) }
                request.tokenURI = tokenURI
                try EnrollCommand.usage { try request.validate() }
                request.tokenPIN = try pinFile.map(CLI.readPINFile)
                request.caKeyPassword = try RenewCommand.caKeyPassword(passwordFile, oldName: keyPasswordFile)
                let result = try location.adding { store in try Enrollment.enrollPKI(request, store: store, label: label) }
                EnrollCommand.report(result, json: json)
            }
        }
    }
}

/// `mtls renew LABEL [--force] [--loop]`: renew from the recorded enrollment.
struct RenewCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "renew",
        abstract: "Renew an enrolled identity when two thirds of its lifetime have passed (or now, with --force).",
        discussion: """
            Uses the enrollment record kept beside the identity (mtls enroll). The new identity \
            replaces the old one in the store only once its key matches and its chain validates \
            (--policy/--anchor, else the recorded anchors). With --loop, stays running and renews \
            every enrolled identity of the store when due, backing off exponentially after failures.
            """)
    @OptionGroup var location: StoreCommand.Location
    @Argument(help: "The label (optional with --loop: every enrolled identity).") var label: String?
    @Flag(name: .customLong("force"), help: "Renew now, whether due or not.") var force = false
    @Flag(name: .customLong("loop"), help: "Stay running and renew when due.") var loop = false
    @Option(name: .customLong("policy"), help: "Policy file the renewed chain must satisfy.") var policy: String?
    @Option(name: .customLong("anchor"), help: "The renewed chain must validate to this certificate (repeatable).") var anchors: [String] = []
    @Option(name: .customLong("pin-file"), help: "File holding the token's PIN (token identities).") var pinFile: String?
    @Option(name: .customLong("interval"), help: "With --loop: seconds between checks.") var interval: Double = Renewer.defaultCheckInterval
    @Option(name: .customLong("password-file"), help: "For identities enrolled from a local pki directory: the CA keys' password (default: $MTLS_PKI_KEY_PASSWORD_FILE).")
    var passwordFile: String?
    // The name before 0.3.0: an encrypted key's password is --password-file in every command.
    @Option(name: .customLong("key-password-file"), help: ArgumentHelp("The old name of --password-file.", visibility: .hidden))
    var keyPasswordFile: String?
    @Option(name: .customLong("delete-previous-keys-after"),
            help: "Token identities: delete a key replaced by a renewal this many seconds later (default: keep previous keys).")
    var deletePreviousKeysAfter: Double?
    @Flag(help: "Machine-readable output (one JSON object per renewal attempt; with --loop, one per event).") var json = false

    func validate() throws {
        try Self.checkGrace(deletePreviousKeysAfter, flag: "--delete-previous-keys-after")
        if label == nil && !loop { throw ValidationError("give a LABEL (or --loop for every enrolled identity)") }
        if !Renewer.checkIntervals.contains(interval) {
            throw ValidationError("--interval is \(Int(Renewer.checkIntervals.lowerBound)) to \(Int(Renewer.checkIntervals.upperBound)) seconds")
        }
    }

    /// The grace period before a token key a renewal replaced is deleted: 0 seconds or more
    /// (`mtls renew --delete-previous-keys-after`, `mtls tunnel --renew-delete-previous-keys-after`).
    static func checkGrace(_ seconds: Double?, flag: String) throws {
        if let d = seconds, !d.isFinite || d < 0 { throw ValidationError("\(flag) is 0 seconds or more") }
    }

    func run() throws {
        try CLI.reporting(json: json) {
            let store = try location.open()
            var trust: TrustPolicy? = try policy.map { try TrustPolicy.load(path: $0) }
            if !anchors.isEmpty {
                let a = try EnrollCommand.loadAnchors(anchors)
                if let t = trust { for c in a { t.addAnchor(c) } } else {
                    trust = TrustPolicy(anchors: a, anchorsOnly: true, nameCheck: .none)
                }
            }
            let pin = try pinFile.map(CLI.readPINFile)
            let caPassword = try RenewCommand.caKeyPassword(passwordFile, oldName: keyPasswordFile)
            var options = RenewalOptions()
            options.deletePreviousTokenKeysAfter = deletePreviousKeysAfter
            if !loop {
                let outcome = try Enrollment.renew(store: store, label: label ?? "", force: force, policy: trust, tokenPIN: pin,
                                                   caKeyPassword: caPassword, options: options)
                try RenewCommand.report(outcome, label: label ?? "", json: json)
                return
            }
            // The loop prints what the library reports through its lifecycle events: the same
            // events a C or Python program receives from its renewer.
            let renewer = RenewCommand.loopRenewer(store: store, label: label, policy: trust, tokenPIN: pin, caKeyPassword: caPassword,
                                                   options: options, json: json)
            // Each label on its own schedule (one stuck CA delays no other label); --force
            // applies to each label's first attempt only.
            try renewer.runLoop(force: force, checkInterval: interval)
        }
    }

    /// The renewer of `--loop` (and of `mtls tunnel --renew`, which runs the same loop in process),
    /// printing each of its events as it happens.
    static func loopRenewer(store: CredentialStore, label: String?, policy: TrustPolicy?, tokenPIN: SecretBytes?,
                            caKeyPassword: SecretBytes?, options: RenewalOptions, json: Bool) -> Renewer {
        let renewer = Renewer(store: store, label: label, policy: policy, tokenPIN: tokenPIN, caKeyPassword: caKeyPassword, options: options)
        renewer.events.setHandler { e in
            RenewCommand.printEvent(e, json: json)
            fflush(nil)  // a supervisor reading the pipe sees each event as it happens
        }
        return renewer
    }

    /// One event of the loop: a line of text (failures on stderr), or a JSON object with
    /// `event`, `label`, `message`, `next_attempt` and, as the one-shot output has them,
    /// `renewed`, `error`, `retry_in`, `serial`/`leaf_sha256`/`not_after` of the certificate concerned.
    static func printEvent(_ e: LifecycleEvent, json: Bool) {
        let name: String
        switch e.kind {
        case .renewalScheduled: name = "renewal_scheduled"
        case .renewalSucceeded: name = "renewal_succeeded"
        case .renewalFailed: name = "renewal_failed"
        case .renewalNotInstalled: name = "renewal_not_installed"
        case .expiryWarning: name = "expires_before_next_attempt"
        default: name = "event_\(e.kind.rawValue)"
        }
        guard json else {
            let failed = e.kind == .renewalFailed || e.kind == .renewalNotInstalled || e.kind == .expiryWarning
            if failed { CLI.printError(e.message) } else { print("\(e.message)") }
            return
        }
        var o: [String: Any] = ["event": name, "label": e.label as Any? ?? NSNull(), "message": e.message,
                                "next_attempt": e.nextAttempt.map(CLI.rfc3339) as Any? ?? NSNull()]
        if e.kind == .renewalSucceeded { o["renewed"] = true }
        if e.kind == .renewalFailed || e.kind == .renewalNotInstalled {
            o["renewed"] = false
            o["error"] = e.error?.code.name ?? "internal"
            o["retry_in"] = e.nextAttempt.map { Int($0.timeIntervalSinceNow.rounded()) } as Any? ?? NSNull()
        }
        if let sha = e.sha256 { o["leaf_sha256"] = sha }
        if let subject = e.subject { o["subject"] = subject }
        if let notAfter = e.notAfter { o["not_after"] = CLI.rfc3339(notAfter) }
        CLI.printJSON(o)
    }

    /// The local CA's key password: the file given, else `MTLS_PKI_KEY_PASSWORD_FILE` (as `mtls pki`).
    static func caKeyPassword(_ file: String?, oldName: String? = nil) throws -> SecretBytes? {
        if file != nil && oldName != nil {
            throw ValidationError("give the CA keys' password once: --password-file (--key-password-file is its old name)")
        }
        let file = file ?? oldName
        let env = ProcessInfo.processInfo.environment["MTLS_PKI_KEY_PASSWORD_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        return try (file ?? env).map(CLI.readPasswordFile)
    }

    static func report(_ outcome: RenewalOutcome, label: String, json: Bool) throws {
        if let r = outcome.result {
            return EnrollCommand.report(r, renewed: true, extra: ["due_source": outcome.renewalInfo == nil ? "lifetime" : "ari"], json: json)
        }
        if json {
            var o: [String: Any] = ["label": label, "renewed": false, "due_at": CLI.rfc3339(outcome.dueAt),
                                    "serial": outcome.current.serialHex, "leaf_sha256": outcome.current.sha256Hex,
                                    "due_source": outcome.renewalInfo == nil ? "lifetime" : "ari"]
            if let info = outcome.renewalInfo {
                o["renewal_window"] = ["start": CLI.rfc3339(info.windowStart), "end": CLI.rfc3339(info.windowEnd)]
                o["ari_id"] = info.identifier
            }
            if let again = outcome.checkAgainAt { o["check_again_at"] = CLI.rfc3339(again) }
            if let e = outcome.renewalInfoError { o["renewal_info_error"] = e.message }
            return CLI.printJSON(o)
        }
        print("\(label): not due until \(CLI.rfc3339(outcome.dueAt)) (use --force to renew now)")
    }
}
