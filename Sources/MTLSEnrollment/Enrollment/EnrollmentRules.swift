// The rules about which enrollment options go together, written once for every front end: the
// Swift API, the C ABI (and Python through it) and `mtls enroll`. A rule names the options it
// speaks of through ``EnrollmentOptionNames``, so each front end's message names its own spelling
// (the CLI's flags, the C struct's fields) while the rule and its sentence stay here.

/// An enrollment option that a rule of ``ACMEEnrollment/validate()``,
/// ``ESTEnrollment/validate()``, ``PKIEnrollment/validate()`` or ``ACMEChallengeOptions``
/// names in its message.
public enum EnrollmentOption: String, Sendable, CaseIterable {
    /// The ACME identifiers (DNS names and IP addresses).
    case identifiers
    /// The http-01 challenge answered by a built-in responder.
    case http01
    /// The http-01 challenge answered with files under a web server's document root.
    case webroot
    /// The tls-alpn-01 challenge (a built-in responder).
    case tlsALPN01
    /// The dns-01 challenge (a hook command).
    case dns01
    /// The port of a built-in responder (http-01, tls-alpn-01).
    case port
    /// The document root of the webroot method.
    case webrootDirectory
    /// The command of the dns-01 method.
    case dnsHook
    /// The external account binding's key identifier.
    case eabKeyID
    /// The external account binding's MAC key.
    case eabKey
    /// How long an ACME order may stay pending.
    case pollTimeout
    /// The type of a new key.
    case keyType
    /// A token key used instead of a new key.
    case tokenURI
    /// EST HTTP basic authentication: the user.
    case user
    /// EST HTTP basic authentication: the password.
    case password
    /// EST: a bootstrap identity presented over TLS.
    case bootstrap
    /// EST: keep the password, sealed with the enrollment record, for re-enrollment.
    case keepPassword
    /// The certificate profile (server or client).
    case profile

    /// The name a Swift caller reads (``EnrollmentOptionNames/descriptive``).
    public var descriptiveName: String {
        switch self {
        case .identifiers: return "DNS name or IP address"
        case .http01: return "http-01 (a built-in responder)"
        case .webroot: return "http-01 (a webroot)"
        case .tlsALPN01: return "tls-alpn-01"
        case .dns01: return "dns-01"
        case .port: return "a port"
        case .webrootDirectory: return "a directory"
        case .dnsHook: return "a command"
        case .eabKeyID: return "the external account key identifier"
        case .eabKey: return "its MAC key"
        case .pollTimeout: return "the ACME poll timeout"
        case .keyType: return "a key type"
        case .tokenURI: return "a token URI"
        case .user: return "a user"
        case .password: return "a password"
        case .bootstrap: return "a bootstrap identity"
        case .keepPassword: return "keeping the password"
        case .profile: return "the profile"
        }
    }
}

/// How a front end spells each ``EnrollmentOption`` in the rules' messages (the CLI: `--eab-kid`;
/// the C ABI: `opts->eab_kid`).
public struct EnrollmentOptionNames: Sendable {
    private let spell: @Sendable (EnrollmentOption) -> String

    /// Names given by `spell`.
    public init(_ spell: @escaping @Sendable (EnrollmentOption) -> String) {
        self.spell = spell
    }

    /// The names of the Swift API (``EnrollmentOption/descriptiveName``).
    public static let descriptive = EnrollmentOptionNames { $0.descriptiveName }

    /// How `option` is spelled.
    public subscript(_ option: EnrollmentOption) -> String { spell(option) }
}

/// The challenge method of an ACME enrollment as a front end collects it, before it is checked:
/// the methods asked for (the CLI's `--http-port`, `--webroot`, `--tls-alpn-port`, `--dns-hook`;
/// the C ABI's `challenge`) and the parameters given. ``method(names:)`` makes it the one
/// ``ACMEChallengeMethod`` it describes, or says which rule it breaks.
public struct ACMEChallengeOptions: Sendable, Equatable {
    /// One way to answer the challenge.
    public enum Kind: Sendable, CaseIterable {
        /// http-01, a built-in responder (needs ``ACMEChallengeOptions/port``).
        case http01
        /// http-01, files under a document root (needs ``ACMEChallengeOptions/webroot``).
        case webroot
        /// tls-alpn-01, a built-in responder (needs ``ACMEChallengeOptions/port``).
        case tlsALPN01
        /// dns-01 (needs ``ACMEChallengeOptions/dnsHook``).
        case dns01

        var option: EnrollmentOption {
            switch self {
            case .http01: return .http01
            case .webroot: return .webroot
            case .tlsALPN01: return .tlsALPN01
            case .dns01: return .dns01
            }
        }
    }

    /// The methods asked for: exactly one is valid.
    public var kinds: [Kind] = []
    /// The built-in responder's port (1 to 65535).
    public var port: UInt16?
    /// Where the built-in responders listen (nil: every IPv4 address). A setting for whichever
    /// responder runs, not a parameter of one method: the webroot and dns-01 methods run none
    /// and leave it unused (`mtls enroll acme` has always taken it with every method).
    public var listenAddress: String?
    /// The webroot method's document root.
    public var webroot: String?
    /// The dns-01 method's command.
    public var dnsHook: String?

    /// Nothing asked for yet.
    public init() {}

    /// The parts of `method`, as a front end would give them.
    public init(_ method: ACMEChallengeMethod) {
        switch method {
        case .http01(let address, let port): kinds = [.http01]; self.port = port; listenAddress = address
        case .tlsALPN01(let address, let port): kinds = [.tlsALPN01]; self.port = port; listenAddress = address
        case .webroot(let directory): kinds = [.webroot]; webroot = directory
        case .dns01(let command): kinds = [.dns01]; dnsHook = command
        }
    }

    /// The one method these options describe. ``MTLSError/Code/invalidArgument`` when no method
    /// or several are asked for, when the method lacks its parameter (a port from 1 to 65535, a
    /// directory, a command), or when a parameter of another method (a port, a directory, a
    /// command) is given.
    public func method(names: EnrollmentOptionNames = .descriptive) throws -> ACMEChallengeMethod {
        guard kinds.count == 1, let kind = kinds.first else {
            let all = Kind.allCases.map { names[$0.option] }.joined(separator: ", ")
            throw MTLSError(.invalidArgument, "give exactly one of \(all)")
        }
        func notWith(_ given: Bool, _ parameter: EnrollmentOption) throws {
            if given { throw MTLSError(.invalidArgument, "\(names[parameter]) does not go with \(names[kind.option])") }
        }
        func missing(_ parameter: EnrollmentOption, _ range: String = "") -> MTLSError {
            MTLSError(.invalidArgument, "\(names[kind.option]) needs \(names[parameter])\(range)")
        }
        let responder = kind == .http01 || kind == .tlsALPN01
        try notWith(!responder && port != nil, .port)
        try notWith(kind != .webroot && webroot != nil, .webrootDirectory)
        try notWith(kind != .dns01 && dnsHook != nil, .dnsHook)
        switch kind {
        case .http01, .tlsALPN01:
            guard let port, port != 0 else { throw missing(.port, " from 1 to 65535") }
            return kind == .http01 ? .http01(address: listenAddress, port: port) : .tlsALPN01(address: listenAddress, port: port)
        case .webroot:
            guard let webroot, !webroot.isEmpty else { throw missing(.webrootDirectory) }
            return .webroot(directory: webroot)
        case .dns01:
            guard let dnsHook, !dnsHook.isEmpty else { throw missing(.dnsHook) }
            return .dns01(command: dnsHook)
        }
    }
}

extension ACMEExternalAccount {
    /// The external account binding from its two parts as a front end takes them, which go
    /// together: both (the account, `key` decoded from base64url; `keySource` names it in a
    /// decoding error) or neither (nil). ``MTLSError/Code/invalidArgument`` for one without the other.
    public static func given(keyID: String?, key: SecretBytes?, keySource: String? = nil,
                             names: EnrollmentOptionNames = .descriptive) throws -> ACMEExternalAccount? {
        try checkParts(keyID: keyID != nil, key: key != nil, names: names)
        guard let keyID, let key else { return nil }
        return try decode(keyID: keyID, base64URLKey: key, source: keySource ?? names[.eabKey])
    }
}

extension ACMEExternalAccount {
    /// The rule of ``given(keyID:key:keySource:names:)`` alone, for a front end that has not read
    /// the key yet: the key identifier and the MAC key go together.
    public static func checkParts(keyID: Bool, key: Bool, names: EnrollmentOptionNames = .descriptive) throws {
        guard keyID == key else {
            throw MTLSError(.invalidArgument, "\(names[.eabKeyID]) and \(names[.eabKey]) go together")
        }
    }
}

/// What the requests of the three sources (``ACMEEnrollment``, ``ESTEnrollment``,
/// ``PKIEnrollment``) share: the key of the new identity, and how their rules name the options.
public protocol EnrollmentRequest: Sendable {
    /// Type of a new key made in memory (nil: EC P-256); not with ``tokenURI``.
    var keySpec: KeySpec? { get set }
    /// A key on a token (`pkcs11:` URI of an existing private key) instead of a new key.
    var tokenURI: String? { get set }
    /// The token's PIN (else the URI's pin-source, or none).
    var tokenPIN: SecretBytes? { get set }
    /// How the messages of `validate()` name the options.
    var optionNames: EnrollmentOptionNames { get set }
}

extension EnrollmentRequest {
    /// A key type asks for a new key: it does not go with a token key.
    func checkNewKey() throws {
        if keySpec != nil && tokenURI != nil {
            throw MTLSError(.invalidArgument,
                            "\(optionNames[.keyType]) makes a new key; it does not go with \(optionNames[.tokenURI])")
        }
    }
}

/// The rules the sources share beyond the key.
enum EnrollmentRules {
    /// EST and the local CA issue end-entity certificates: server or client.
    static func endEntity(_ profile: CertificateProfile, names: EnrollmentOptionNames) throws {
        guard profile == .server || profile == .client else {
            throw MTLSError(.invalidArgument, "\(names[.profile]) is server or client, not \(profile.rawValue)")
        }
    }
}

extension ACMEEnrollment: EnrollmentRequest {
    /// The longest ``pollTimeout`` (a day).
    public static let maxPollTimeout: Double = 86400

    /// Checks the request before anything is sent or made (``Enrollment/enrollACME(_:store:label:policy:)``
    /// calls it): at least one identifier, each a DNS name or an IP address; the challenge method
    /// with its parameter (see ``ACMEChallengeOptions/method(names:)``); no key type with a token
    /// key; a poll timeout from 1 to ``maxPollTimeout`` seconds. Messages name the options as
    /// ``optionNames`` spells them. ``MTLSError/Code/invalidArgument`` otherwise.
    public func validate() throws {
        let names = optionNames
        guard !identifiers.isEmpty else { throw MTLSError(.invalidArgument, "give at least one \(names[.identifiers])") }
        for name in identifiers where !Socket.isIPLiteral(name) && !CertificateRequest.isValidDNSName(name) {
            throw MTLSError(.invalidArgument, "not a DNS name or IP address: \"\(name)\"")
        }
        _ = try ACMEChallengeOptions(challenge).method(names: names)
        try checkNewKey()
        guard pollTimeout.isFinite, (1...Self.maxPollTimeout).contains(pollTimeout) else {
            throw MTLSError(.invalidArgument, "\(names[.pollTimeout]) must be 1 to \(Int(Self.maxPollTimeout)) seconds")
        }
    }
}

/// What an EST enrollment needs (see ``Enrollment/enrollEST(_:store:label:policy:)``).
public struct ESTEnrollment: EnrollmentRequest {
    /// The EST base URL (`https://est.example/.well-known/est`).
    public var url: String
    /// The subject DN of the request (`CN=device-1,O=Example`).
    public var subject: String
    /// Anchors for the EST server's TLS certificate, and for the issued chain (empty: the
    /// system store for the server, the chain's own top for the chain).
    public var anchors: [Certificate] = []
    /// HTTP basic authentication for `/simpleenroll` (with ``password``).
    public var user: String?
    /// The basic authentication password (with ``user``).
    public var password: SecretBytes?
    /// A bootstrap identity presented over TLS (instead of, or as well as, basic authentication).
    public var bootstrap: Identity?
    /// Keep ``password`` for re-enrollment, for a server that asks for HTTP authentication on
    /// `/simplereenroll` as well as the client certificate (RFC 7030 §3.2.3). It is sealed in
    /// the store with the enrollment record (AES-256-GCM under a key derived from the record's
    /// own private key, which the store seals); off by default, so nothing of the password stays.
    public var keepPassword = false
    /// Type of a new key (nil: EC P-256); not with ``tokenURI``.
    public var keySpec: KeySpec?
    /// A key on a token (`pkcs11:` URI of an existing private key) instead of a new key.
    public var tokenURI: String?
    /// The token's PIN (else the URI's pin-source, or none).
    public var tokenPIN: SecretBytes?
    /// The purpose the issued chain is checked for: ``CertificateProfile/client`` or ``CertificateProfile/server``.
    public var profile: CertificateProfile = .client
    /// Seconds each exchange with the server may take in all (connect, handshake, request and
    /// the whole answer; default 30): a server that trickles its answer ends in a timeout.
    public var timeout: Double = ESTEnrollment.defaultTimeout
    /// The default ``timeout``.
    public static let defaultTimeout: Double = 30
    /// How the messages of ``validate()`` name the options.
    public var optionNames: EnrollmentOptionNames = .descriptive

    /// The minimum: the server and the subject (authentication is still needed: ``user`` and
    /// ``password``, or ``bootstrap``).
    public init(url: String, subject: String) {
        self.url = url
        self.subject = subject
    }

    /// Checks the request before anything is sent or made (``Enrollment/enrollEST(_:store:label:policy:)``
    /// calls it): a user and a password go together, and one of them or a bootstrap identity is
    /// needed; keeping the password needs one; no key type with a token key; a server or client profile.
    /// ``MTLSError/Code/invalidArgument`` otherwise, naming the options as ``optionNames`` spells them.
    public func validate() throws {
        let names = optionNames
        if (user == nil) != (password == nil) {
            throw MTLSError(.invalidArgument, "\(names[.user]) and \(names[.password]) go together")
        }
        if keepPassword && password == nil {
            throw MTLSError(.invalidArgument, "\(names[.keepPassword]) needs \(names[.user]) and \(names[.password])")
        }
        if user == nil && bootstrap == nil {
            throw MTLSError(.invalidArgument, "give \(names[.user]) and \(names[.password]), or \(names[.bootstrap])")
        }
        try checkNewKey()
        try EnrollmentRules.endEntity(profile, names: names)
    }
}

/// What an enrollment from a local `mtls pki` directory needs (see
/// ``Enrollment/enrollPKI(_:store:label:policy:)``).
public struct PKIEnrollment: EnrollmentRequest {
    /// The `mtls pki` directory.
    public var directory: String
    /// The intermediate CA that signs.
    public var caName: String
    /// The certificate's name (CN; for a server also its DNS name or IP address).
    public var name: String
    /// ``CertificateProfile/server`` or ``CertificateProfile/client``.
    public var profile: CertificateProfile = .server
    /// Type of a new key (nil: EC P-256); not with ``tokenURI``.
    public var keySpec: KeySpec?
    /// A key on a token (`pkcs11:` URI of an existing private key) instead of a new key.
    public var tokenURI: String?
    /// The token's PIN (else the URI's pin-source, or none).
    public var tokenPIN: SecretBytes?
    /// The password of the directory's CA keys (nil: unencrypted keys).
    public var caKeyPassword: SecretBytes?
    /// The issued chain must validate to one of these (empty: the directory's root).
    public var chainAnchors: [Certificate] = []
    /// How the messages of ``validate()`` name the options.
    public var optionNames: EnrollmentOptionNames = .descriptive

    /// The minimum: the directory, its intermediate and the name.
    public init(directory: String, caName: String, name: String) {
        self.directory = directory
        self.caName = caName
        self.name = name
    }

    /// Checks the request before anything is made (``Enrollment/enrollPKI(_:store:label:policy:)``
    /// calls it): no key type with a token key; a server or client profile.
    /// ``MTLSError/Code/invalidArgument`` otherwise, naming the options as ``optionNames`` spells them.
    public func validate() throws {
        try checkNewKey()
        try EnrollmentRules.endEntity(profile, names: optionNames)
    }
}
