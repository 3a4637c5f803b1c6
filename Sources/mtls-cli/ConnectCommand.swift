import ArgumentParser
import Foundation
import MTLS

/// Where a command's identity comes from: a .p12 file, a store label, PEM files, or (with
/// `--identity auto`) automatic choice among the store's identities. Without `--identity` a
/// client presents nothing, whatever store is set.
struct IdentityOptions: ParsableArguments {
    @Option(help: "The identity to present: a store label, a FILE.p12, a pkcs11: URI (with --pin-file), or \"auto\" (a client chooses among the store's identities and token identities). Without it a client presents no certificate.") var identity: String?
    @Option(help: "File with the .p12 (or encrypted --key) password (first line; default: $MTLS_P12_PASSWORD for a .p12).") var passwordFile: String?
    @Flag(help: "The .p12 has no password (not the same as the empty password).") var noPassword = false
    @Option(help: "File with the token PIN (first line).") var pinFile: String?
    @Flag(help: "Send the PIN file's PIN even when the token says the next wrong PIN locks it.") var allowFinalTry = false
    @Option(help: "Certificate PEM file (leaf first, then its chain), with --key.") var cert: String?
    @Option(help: "Private key PEM file, with --cert (encrypted keys use --password-file).") var key: String?
    @Option(help: "The credential store (default $MTLS_STORE); must exist. With --identity auto, a client chooses among its identities and token identities.") var store: String?
    @Option(help: "File with the store secret (default $MTLS_STORE_SECRET_FILE).") var secretFile: String?
    @Option(help: "File with a raw 32-byte store key, instead of --secret-file (default $MTLS_STORE_KEY_FILE).") var keyFile: String?
    @Flag(name: .customLong("allow-module-path"), help: "Honour a stored token URI's module-path even when p11-kit has not registered that module.")
    var allowModulePath = false

    func openStore() throws -> CredentialStore? {
        try Self.openExistingStore(path: store, secretFile: secretFile, keyFile: keyFile, allowModulePath: allowModulePath)
    }

    /// The store at `path`, else at the default location (``CredentialStore/defaultPath(environment:)``),
    /// or nil when none is given and none is at the default location. Reading only: a wrong
    /// path is an error, never a new empty store.
    static func openExistingStore(path: String?, secretFile: String?, keyFile: String? = nil,
                                  allowModulePath: Bool = false) throws -> CredentialStore? {
        let env = ProcessInfo.processInfo.environment
        let secretSource = try CredentialStore.secretSource(secretFile: secretFile, keyFile: keyFile, environment: env)
        let named = path ?? env["MTLS_STORE"].flatMap { $0.isEmpty ? nil : $0 }
        let storePath: String
        if let named {
            storePath = named
        } else {
            // The default location counts only when it holds a store and a secret is set.
            let fallback = CredentialStore.defaultPath(environment: env)
            guard secretSource != nil, FileManager.default.fileExists(atPath: fallback) else { return nil }
            storePath = fallback
        }
        guard let secretSource else {
            throw ValidationError("--store needs --secret-file (or MTLS_STORE_SECRET_FILE or MTLS_STORE_KEY_FILE)")
        }
        var options = CredentialStore.Options()
        options.create = false
        options.allowUnregisteredModulePaths = allowModulePath
        return try CredentialStore(path: storePath, secret: try secretSource.load(), options: options)
    }

    /// The `--identity` value that asks for automatic selection.
    static let automaticIdentity = "auto"

    /// The identity for a client: the one named, automatic among the store's identities when
    /// asked for by name (`--identity auto`), else none (a client certificate says who we are:
    /// nothing is presented unasked, even with a store set).
    func clientIdentity() throws -> ClientIdentity {
        if identity == Self.automaticIdentity && cert == nil {
            guard let store = try openStore() else {
                throw ValidationError("--identity auto needs a store (--store or MTLS_STORE)")
            }
            // Stored identities and token identities (PIN: --pin-file, else the URI's pin-value/pin-source).
            return try .automatic(from: store, tokenPIN: try pinFile.map(CLI.readPINFile))
        }
        if let id = try explicitIdentity() { return .identity(id) }
        return .none
    }

    func explicitIdentity() throws -> Identity? {
        if (cert == nil) != (key == nil) { throw ValidationError("--cert and --key go together") }
        if cert == nil && identity == Self.automaticIdentity {
            throw ValidationError("--identity auto is for a client; name the identity to present")
        }
        guard let name = cert ?? identity else { return nil }
        // As every command that reads a .p12: --password-file, --no-password, else MTLS_P12_PASSWORD
        // (that one for a .p12 only, never for a PEM key).
        let password = key == nil ? try CLI.p12Password(file: passwordFile, noPassword: noPassword, required: false)
            : try passwordFile.map(CLI.readPasswordFile)
        return try Identity.resolve(name, keyPath: key, password: password,
                                    pin: try pinFile.map(CLI.readPINFile), allowFinalTry: allowFinalTry, openStore: openStore)
    }
}

/// The trust options shared by connect (server policy) and serve (client policy), built the way
/// `mtls verify` builds them.
enum PolicyBuilder {
    /// The policy file, or an empty policy (the system trust store, name check on). The command
    /// line's trust options never go into it: they are ``overrides(anchors:anchorsOnly:pins:verifyAs:store:)``.
    static func policy(file: String?, revocation: String? = nil, revocationMaxAge: Int64? = nil) throws -> TrustPolicy {
        let p = try file.map { try TrustPolicy.load(path: $0) } ?? TrustPolicy()
        try applyRevocation(revocation, maxAge: revocationMaxAge, to: p)
        return p
    }

    /// `--revocation off|soft|hard`: the policy-wide mode (the policy file's sources, limits and
    /// cache folder, and its host rules' own settings, are kept); `--revocation-max-age SECONDS`:
    /// the maximum age of an answer without nextUpdate (the policy file's `max_age_seconds`).
    static func applyRevocation(_ mode: String?, maxAge: Int64? = nil, to p: TrustPolicy) throws {
        if let maxAge {
            var f = p.revocationFetch
            do { try f.setMaxAge(seconds: maxAge) } catch let e as MTLSError {
                throw MTLSError(.invalidArgument, "--revocation-max-age: \(e.message)")
            }
            p.revocationFetch = f
        }
        guard let mode else { return }
        let m: RevocationMode
        do { m = try RevocationSettings.mode(mode) } catch let e as MTLSError { throw MTLSError(.invalidArgument, "--revocation: \(e.message)") }
        var r = p.revocation
        r.mode = m
        p.revocation = r
    }

    static let revocationMaxAgeHelp: ArgumentHelp = "Seconds a CRL or OCSP response without a nextUpdate stays current after its thisUpdate (default 7 days; the policy file's revocation \"max_age_seconds\")."

    static let revocationHelp: ArgumentHelp = "Check revocation of every certificate below the anchor (CRLs from their distribution points; the policy file's \"revocation\" says more): off, soft (unknown status trusted, with a warning) or hard (unknown refused). Revoked is always refused."

    /// `--anchor`, `--system-anchors`, `--anchors-only`, `--pin` and `--verify-as` as overrides,
    /// which the library composes on top of the policy for this one evaluation or connection:
    /// anchors are added to those in force (the selected rule's own, else the policy's; anchors
    /// in force are the only ones trusted unless `--system-anchors`), `--system-anchors` trusts
    /// the system store as well, `--anchors-only` never, `--pin`s are always enforced (whatever a
    /// rule says about report-only or pin expiry), `--verify-as` is the name checked. nil when no
    /// flag was given.
    static func overrides(anchors: [String], anchorsOnly: Bool, systemAnchors: Bool = false, pins: [String], verifyAs: String?,
                          allow: PeerAllowOptions? = nil, store: () throws -> CredentialStore?) throws -> TrustOverrides? {
        if anchorsOnly && systemAnchors { throw MTLSError(.invalidArgument, "give --system-anchors or --anchors-only, not both") }
        var o = TrustOverrides()
        o.anchors = try anchorCertificates(anchors, store: store)
        if anchorsOnly { o.systemAnchors = false }
        if systemAnchors { o.systemAnchors = true }
        o.pins = try pins.map { pin in
            do { return try SPKIPin(pin) } catch let e as MTLSError { throw MTLSError(.invalidArgument, "--pin: \(e.message)") }
        }
        if let allow { o.allow = try allow.list(store: store) }
        if let v = verifyAs {
            o.verifyAs = v
            do { try o.validate() } catch let e as MTLSError { throw MTLSError(.invalidArgument, "--verify-as: \(e.message)") }
        }
        return o.isEmpty ? nil : o
    }

    /// The host rule that applied, as JSON (null when none).
    static func ruleJSON(_ policy: TrustPolicy?, _ result: TrustResult?) -> Any {
        guard let policy, let pattern = result?.matchedRule,
              let rule = policy.hostRules.first(where: { $0.pattern.text == pattern }) else { return NSNull() }
        return [
            "host": rule.pattern.text,
            "verify_as": rule.verifyAs.map { $0 as Any } ?? NSNull(),
            "skip_name_check": rule.skipNameCheck,
            "anchors": rule.anchors.map { $0.map(\.sha256Hex) as Any } ?? NSNull(),
            "anchors_only": rule.anchorsOnly.map { $0 as Any } ?? NSNull(),
            "system_anchors": rule.systemAnchors.map { $0 as Any } ?? NSNull(),
            "pins": rule.pins.map(\.description),
            "enforcement": rule.enforcement.rawValue,
        ] as [String: Any]
    }

    /// The certificates `--anchor` names: `store:LABEL` is a certificate stored under LABEL; a
    /// path that exists is a file of certificates; anything else is a stored label when a store
    /// is given (so the root `mtls store add-cert` saved can be pinned), else a missing file.
    /// `store` opens the store (nil when none is given); it is called only if a label needs it.
    static func anchorCertificates(_ anchors: [String], store: () throws -> CredentialStore?) throws -> [Certificate] {
        var opened: CredentialStore??
        func theStore() throws -> CredentialStore? {
            if let opened { return opened }
            let s = try store()
            opened = .some(s)
            return s
        }
        var out: [Certificate] = []
        for a in anchors {
            if a.hasPrefix("store:") {
                guard let s = try theStore() else {
                    throw MTLSError(.invalidArgument, "--anchor \(a) needs a store: give --store and --secret-file (or MTLS_STORE and MTLS_STORE_SECRET_FILE)")
                }
                out.append(try s.certificate(label: String(a.dropFirst("store:".count))))
            } else if !FileManager.default.fileExists(atPath: a), let s = try theStore() {
                do { out.append(try s.certificate(label: a)) } catch let e as MTLSError where e.code == .notFound {
                    throw MTLSError(.notFound, "--anchor \(a): no such file, and no certificate labelled \"\(a)\" in the store")
                }
            } else {
                out.append(contentsOf: try Certificate.load(path: a))
            }
        }
        return out
    }

    /// `{"trusted", "kind", "reasons"}`, as `mtls verify` writes them.
    static func json(_ result: TrustResult?) -> Any {
        guard let result else { return NSNull() }
        var o = TrustJSON.object(result)
        o.removeValue(forKey: "chain")
        return o
    }

    static func summary(_ result: TrustResult?) -> String {
        guard let result else { return "no certificate" }
        if result.trusted { return "trusted" + result.warnings.map { " (warning: \($0))" }.joined() }
        return "untrusted: " + result.reasons.map { "\($0.message) [\($0.code)]" }.joined(separator: "; ")
    }
}

/// Turns `\r`, `\n`, `\t` and `\\` escapes into the characters.
func unescape(_ s: String) -> String {
    var out = ""
    var it = s.makeIterator()
    while let c = it.next() {
        guard c == "\\", let n = it.next() else { out.append(c); continue }
        switch n {
        case "n": out.append("\n")
        case "r": out.append("\r")
        case "t": out.append("\t")
        case "\\": out.append("\\")
        default: out.append("\\"); out.append(n)
        }
    }
    return out
}

/// `mtls connect HOST:PORT`: handshake, optional request, peer chain and evaluation.
struct ConnectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connect",
        abstract: "Connect to a TLS server with a client identity; print the server's chain and our evaluation.")

    @Argument(help: "HOST:PORT (a DNS name, an IPv4 address or [IPv6], [IPv6%zone]), or an https:// URL (an IPv6 zone written %25zone, RFC 6874).") var target: String
    @OptionGroup var identityOptions: IdentityOptions
    @Option(help: "A trust policy JSON file.") var policy: String?
    @Option(help: PolicyBuilder.revocationHelp) var revocation: String?
    @Option(help: PolicyBuilder.revocationMaxAgeHelp) var revocationMaxAge: Int64?
    @Option(help: "A pinned anchor (root, intermediate or the server's own certificate): a file, or a certificate stored under a label (LABEL with a store, or store:LABEL); repeatable.") var anchor: [String] = []
    // curl's name for the same idea: a user coming from curl is taken to --anchor, not to --cert.
    @Option(name: .customLong("cacert"), help: ArgumentHelp("curl's name of --anchor.", visibility: .hidden)) var cacert: [String] = []
    @Flag(help: "Never trust the system store (the default once anchors are given).") var anchorsOnly = false
    @Flag(help: "Trust the system store as well as the anchors (--anchor, the policy's); without it anchors are the only ones trusted.") var systemAnchors = false
    @Option(help: "Validate the server's certificate as this name instead of HOST, over the policy's and its rule's verify-as.") var verifyAs: String?
    @Option(help: "The SNI to send (default HOST when it is a name; \"\" for none).") var sni: String?
    @Option(help: "An SPKI pin sha256/BASE64 (or curl's sha256//BASE64); repeatable; always enforced, on top of the policy and its host rule.") var pin: [String] = []
    @OptionGroup(title: "Which server may answer (on top of the anchors, --verify-as and --pin)") var allow: PeerAllowOptions
    @Option(help: "ALPN protocol to offer; repeatable.") var alpn: [String] = []
    @Option(help: "Lowest TLS version: 1.2 or 1.3 (default: the library's, \(TLSDefaults.minVersion)).") var tlsMin: String?
    @Option(help: "Highest TLS version: 1.2 or 1.3 (default: the library's, \(TLSDefaults.maxVersion)).") var tlsMax: String?
    // The core's command-line default, shorter than a program's on purpose (see its doc comment).
    @Option(help: "Seconds allowed for connect, handshake and each read.") var timeout: Double = TLSClientOptions.commandLineTimeout
    @Option(help: "Text to send after the handshake (\\r \\n escapes allowed); the reply is printed.") var send: String?
    @Flag(help: "Machine-readable output.") var json = false

    static func version(_ s: String) throws -> TLSVersion {
        switch s {
        case "1.2", "tls1.2", "TLSv1.2": return .tls12
        case "1.3", "tls1.3", "TLSv1.3": return .tls13
        default: throw ValidationError("TLS version must be 1.2 or 1.3, not \(s)")
        }
    }

    func run() throws {
        var out: [String: Any] = ["connected": false, "tls_version": NSNull(), "alpn": NSNull(), "peer_chain": [String](),
                                  "evaluation": NSNull(), "error": NSNull(), "error_code": NSNull(), "side": NSNull(),
                                  "response": NSNull()]
        var conn: TLSConnection?
        var failure: Error?
        var usedPolicy: TrustPolicy?
        var response: [UInt8] = []
        do {
            let (host, port) = try TrustPeer.splitTarget(target)
            let o = try clientOptions()
            usedPolicy = o.policy
            let c = try TLSConnection.open(host: host, port: port, options: o)
            conn = c
            try c.handshake()
            if let send {
                try c.write(Array(unescape(send).utf8))
                // A reply cut short (no close_notify) is an error: "error" set (error_code
                // "truncated"), the partial "response", exit status 1 (and so "connected" false:
                // the exchange did not complete).
                try readReply(c, idle: timeout, into: &response)
                out["response"] = String(decoding: response, as: UTF8.self)
            } else if c.tlsVersion == .tls13 {
                // A TLS 1.3 server judges our certificate after our side of the handshake is
                // done; give its verdict (an alert, or session tickets) a moment to arrive. No
                // reply was asked for, so a hang-up without close_notify cuts nothing short.
                do {
                    try readReply(c, idle: 0.3, into: &response)
                } catch let e as MTLSError where e.code == .truncated {}
                if !response.isEmpty { out["response"] = String(decoding: response, as: UTF8.self) }
            }
            out["connected"] = true
            c.close()
        } catch {
            failure = error
            if let e = error as? MTLSError, e.code == .truncated {
                out["response"] = String(decoding: response, as: UTF8.self)
            }
            out["error"] = (error as? MTLSError)?.message ?? "\(error)"
            out["error_code"] = (error as? MTLSError)?.code.name ?? MTLSError.Code.invalidArgument.name
            out["side"] = Self.failingSide(error, conn).rawValue
        }
        if let c = conn {
            out["peer_chain"] = c.peerChain.map(\.sha256Hex)
            out["evaluation"] = PolicyBuilder.json(c.evaluation)
            if var e = out["evaluation"] as? [String: Any] {
                e["rule"] = PolicyBuilder.ruleJSON(usedPolicy, c.evaluation)
                out["evaluation"] = e
            }
            if c.isHandshakeComplete {
                out["tls_version"] = c.tlsVersionName
                out["alpn"] = c.alpn ?? NSNull()
            }
        }
        if json {
            CLI.printJSON(out)
        } else {
            printHuman(out, conn)
        }
        if let failure {
            if !json { throw CLI.fail(failure) }
            throw ExitCode(1)
        }
    }

    /// The connection options the command line names (`mtls doctor` uses the same).
    func clientOptions() throws -> TLSClientOptions {
        var o = TLSClientOptions()
        o.identity = try identityOptions.clientIdentity()
        // The rule is the one for the peer reached (host and port); --verify-as only changes
        // the name checked.
        // --verify-as, --pin, --anchor and --anchors-only are overrides: the library composes
        // them on top of the policy (and of the rule the host and port select).
        o.policy = try PolicyBuilder.policy(file: policy, revocation: revocation, revocationMaxAge: revocationMaxAge)
        o.overrides = try PolicyBuilder.overrides(anchors: anchor + cacert, anchorsOnly: anchorsOnly, systemAnchors: systemAnchors, pins: pin, verifyAs: verifyAs,
                                                  allow: allow, store: identityOptions.openStore)
        o.serverName = sni
        o.alpn = alpn
        if let tlsMin { o.minVersion = try Self.version(tlsMin) }
        if let tlsMax { o.maxVersion = try Self.version(tlsMax) }
        o.connectSeconds = timeout
        o.handshakeSeconds = timeout
        return o
    }

    /// Who failed or refused, as the library says: the connection for handshake and I/O errors,
    /// the error itself before there is one (``MTLSError/side``); anything else (options,
    /// identity, policy) is ours.
    static func failingSide(_ error: Error, _ conn: TLSConnection?) -> TLSSide {
        conn?.failureSide ?? (error as? MTLSError)?.side ?? .client
    }

    /// Reads into `all` until the peer closes or stays quiet for `idle` seconds after the last
    /// data. Throws ``MTLSError/Code/truncated`` (with what came before it in `all`) when the
    /// peer closes without close_notify.
    func readReply(_ c: TLSConnection, idle: Double, into all: inout [UInt8]) throws {
        while true {
            let chunk: [UInt8]
            do {
                chunk = try c.read(maxLength: 65536, timeout: idle)
            } catch let e as MTLSError where e.code == .timeout {
                return
            }
            if chunk.isEmpty { return }
            all += chunk
        }
    }

    func printHuman(_ out: [String: Any], _ conn: TLSConnection?) {
        if let c = conn {
            for (i, cert) in c.peerChain.enumerated() {
                print("peer[\(i)] \(cert.subject)  sha256=\(cert.sha256Hex)")
            }
            print("evaluation: \(PolicyBuilder.summary(c.evaluation))")
            // Only once the outcome is known: a server that refuses our certificate after the
            // handshake (TLS 1.3) did not let us connect, and the error line says so.
            if c.isHandshakeComplete && out["connected"] as? Bool == true {
                let presented = c.presentedIdentity.map { ", presented \($0.leaf.subjectSummary)" } ?? ", no client certificate"
                print("connected: \(c.tlsVersionName), alpn \(c.alpn ?? "none"), \(c.isResumed ? "resumed" : "full handshake")\(presented)")
            }
        }
        // The server's reply, line by line: its control and bidirectional characters as blanks
        // (--json gives it exact).
        if let r = out["response"] as? String { print(TerminalText(lines: r), terminator: r.hasSuffix("\n") ? "" : "\n") }
    }
}

/// `mtls serve`: a small TLS echo / HTTP server that reports each client.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run a small mutual-TLS echo/HTTP test server; print one line per client with its evaluation.")

    @Option(help: "Address to listen on.") var address: String = "127.0.0.1"
    @Option(help: "Port to listen on (0 picks one; the first line printed says which).") var port: UInt16 = 0
    @OptionGroup var identityOptions: IdentityOptions
    @Option(help: "An anchor for client certificates (e.g. one customer's intermediate): a file, or a stored certificate's label (LABEL with a store, or store:LABEL); repeatable.") var clientAnchor: [String] = []
    @Option(help: "A trust policy JSON file for clients.") var policy: String?
    @OptionGroup(title: "Who may connect (clients whose chain is trusted must match one entry)") var allow: PeerAllowOptions
    @Option(help: PolicyBuilder.revocationHelp) var revocation: String?
    @Option(help: PolicyBuilder.revocationMaxAgeHelp) var revocationMaxAge: Int64?
    @Flag(help: "Refuse clients without a certificate (the default with --client-anchor or --policy).") var requireClientCert = false
    @Flag(help: "Accept clients without a certificate too (a certificate a client presents is still judged).") var optionalClientCert = false
    @Flag(help: "Also accept client certificates of the system trust store (public CAs); without it clients need --client-anchor or a policy with anchors.") var clientSystemAnchors = false
    @Option(help: "ALPN protocol to accept; repeatable.") var alpn: [String] = []
    @Option(help: "Stop after this many clients (default: run until killed).") var count: Int?
    @Flag(help: "Issue no session tickets: every client gets a full handshake and a fresh evaluation.") var noSessionTickets = false
    @Option(help: "Serve the store's certificate metrics and the listener's counters as Prometheus text on 127.0.0.1:PORT (see --metrics-listen).") var metricsPort: UInt16?
    @Option(help: "With --metrics-port: the address the metrics endpoint listens on (default 127.0.0.1, loopback only).") var metricsListen: String?
    @Option(help: "With --metrics-port: only scrapes sending 'Authorization: Bearer <token>' with the token in FILE (first line; a secret file, chmod 600) see the metrics; others get 401.") var metricsTokenFile: String?
    @Option(help: "With --metrics-port: serve the metrics over TLS with the server's identity, to clients presenting a certificate that chains to this anchor (PEM file; repeatable).") var metricsClientAnchor: [String] = []
    @Flag(help: "Send no CA names in the certificate request (they name the client anchors by default): each client presents the certificate it has. For clients that match the names wrongly, such as an Erlang/OTP 25 TLS 1.3 client whose certificate an intermediate issued. Trust does not change.") var noCaNames = false
    @Option(help: "Send the subjects of the certificates in FILE (PEM or DER, one or more) as the CA names of the certificate request, instead of the client anchors'. Trust does not change.") var caNames: String?
    @Option(help: "Seconds a client has, from its connection, to send its whole ClientHello; until then it holds no handshake slot (default: the library's, \(TLSDefaults.clientHelloTimeout.map { "\(Int($0)) s" } ?? "none"), never more than the handshake timeout; 0: the default; negative: none).") var clientHelloTimeout: Double?
    @Option(help: "Leading bits of an IPv6 client address that make one source for the per-source handshake cap (default: the library's, \(TLSDefaults.ipv6SourcePrefixLength ?? 128); 128: each address alone).") var ipv6SourcePrefixLength: Int?
    @Flag(help: "Machine-readable output: one JSON object per line ({\"listening\": {address, port}}, then {time, event, message} per event); a failure to start is {error, message}.") var json = false

    func validate() throws {
        if noCaNames && caNames != nil { throw ValidationError("give --no-ca-names or --ca-names, not both") }
        if requireClientCert && optionalClientCert { throw ValidationError("give --require-client-cert or --optional-client-cert, not both") }
        if metricsPort == nil && (metricsListen != nil || metricsTokenFile != nil || !metricsClientAnchor.isEmpty) {
            throw ValidationError("--metrics-listen, --metrics-token-file and --metrics-client-anchor go with --metrics-port")
        }
    }

    func run() throws {
        do {
            // A store label is followed (a replacement in the store is in force within a second);
            // a policy file too. SIGHUP looks at both at once. One line per rotation or failure.
            let follow = try ServeFollowing(identityOptions: identityOptions, policyPath: policy, revocation: revocation,
                                            revocationMaxAge: revocationMaxAge,
                                            clientAnchors: clientAnchor)
            guard let identity = try follow.source?.current ?? identityOptions.explicitIdentity() else {
                throw ValidationError("serve needs --identity (or --cert and --key)")
            }
            var o = try follow.serverOptions(identity: identity, clientAnchors: clientAnchor, systemAnchors: clientSystemAnchors, allow: allow,
                                             store: identityOptions.openStore)
            o.configureAsTestServer(certificateRequired: requireClientCert, certificateOptional: optionalClientCert, clientTrustGiven: !clientAnchor.isEmpty || policy != nil)
            if noCaNames { o.clientCANames = .omitted }
            if let caNames { o.clientCANames = .certificates(try Certificate.load(path: caNames)) }
            o.alpn = alpn
            o.sessionTickets = !noSessionTickets
            if let clientHelloTimeout { o.clientHelloSeconds = clientHelloTimeout }
            if let ipv6SourcePrefixLength { o.ipv6SourcePrefixLength = ipv6SourcePrefixLength }
            CLI.raiseOpenFileLimit()  // a socket per client, silent ones included
            let listener = try TLSListener(address: address, port: port, options: o)
            follow.start(listener: listener)
            CLI.printWarnings()  // before serving: a server runs until stopped
            ServeLog.json = json
            if json {
                CLI.printJSON(["listening": ["address": address, "port": Int(listener.port)] as [String: Any]])
            } else {
                print("listening on \(address):\(listener.port)")
            }
            // Kept for as long as the command runs (the endpoint stops when released).
            var metrics: MetricsEndpoint?
            if let metricsPort {
                let store = follow.store
                let token = try metricsTokenFile.map { try FileIO.readSecret($0, kind: .bearerToken) }
                let metricsAddress = metricsListen ?? MetricsEndpoint.defaultAddress
                // Client certificates under a policy: TLS with the server's own identity, a
                // certificate required and judged against the metrics anchors only.
                var metricsTLS: TLSServerOptions?
                if !metricsClientAnchor.isEmpty {
                    var m = TLSServerOptions(identity: identity)
                    m.identitySource = follow.source
                    m.clientPolicy = TrustPolicy(anchors: try metricsClientAnchor.flatMap { try Certificate.load(path: $0) }, anchorsOnly: true,
                                                 purpose: .clientAuth, nameCheck: .none)
                    m.clientAuthentication = .require
                    m.handshakeSeconds = MetricsEndpoint.requestTimeout
                    m.ioSeconds = MetricsEndpoint.requestTimeout
                    metricsTLS = m
                }
                metrics = try MetricsEndpoint(address: metricsAddress, port: metricsPort, bearerToken: token, tls: metricsTLS) {
                    Prometheus.exposition(listener.counters, store: store)
                }
                let host = metricsAddress.contains(":") ? "[\(metricsAddress)]" : metricsAddress
                let access = (token == nil ? "" : " (bearer token required)") + (metricsTLS == nil ? "" : " (TLS, client certificate required)")
                if json {
                    CLI.printJSON(["metrics": ["address": metricsAddress, "port": Int(metrics?.port ?? 0),
                                               "bearer_token": token != nil, "tls": metricsTLS != nil] as [String: Any]])
                } else {
                    print("metrics on \(host):\(metrics?.port ?? 0)\(access)")
                }
            }
            defer { metrics?.close() }
            fflush(nil)  // all streams: Swift 6 does not let code touch the C global `stdout`
            var served = 0
            // Each client is served on its own thread; with --count the last ones must be served
            // to the end (reply sent, connection shut down) before the process exits. (Threads
            // kept from one client to the next were tried: their allocator caches held the
            // connections' memory, and RSS under 64 clients grew 41 % in a minute against 13 %.)
            let serving = DispatchGroup()
            defer {
                serving.wait()
                let c = listener.counters
                // Worded apart from the per-client "accepted"/"rejected" lines that scripts count.
                ServeLog.line("counters: handshakes \(c.accepted) (resumed \(c.resumed)), refused \(c.refused.values.reduce(0, +)), open \(c.currentConnections)")
            }
            while count.map({ served < $0 }) ?? true {
                served += 1
                let conn: TLSConnection
                do {
                    conn = try listener.accept()
                } catch let e as MTLSError {
                    // A peer's certificate fields are in messages: one line each, whatever they hold.
                    ServeLog.line("rejected \(e.message) [\(e.code.name)]")
                    continue
                }
                let subject = conn.peerCertificate?.subject ?? "(no certificate)"
                ServeLog.line("accepted \(conn.peerAddress) \(conn.tlsVersionName) client \(subject): \(PolicyBuilder.summary(conn.evaluation))")
                serving.enter()
                // The connection moves to the serving thread: this loop never touches it again
                // (a connection is used by one thread at a time, so it is not Sendable).
                nonisolated(unsafe) let handedOver = conn
                Thread.detachNewThread {
                    Self.serve(handedOver)
                    serving.leave()
                }
            }
        } catch {
            if json {
                let name = error is ValidationError ? MTLSError.Code.invalidArgument.name : CLI.errorName(error)
                CLI.printJSON(["error": name, "message": (error as? MTLSError)?.message ?? "\(error)"])
            }
            throw CLI.fail(error)
        }
    }

    static func serve(_ c: TLSConnection) {
        defer { c.close() }
        var first = true
        while let data = try? c.read(), !data.isEmpty {  // up to one TLS record (16 KiB)
            // An HTTP request: its first line is one (the library's one reader of request lines).
            if first, let end = data.firstIndex(of: UInt8(ascii: "\n")),
               HTTPRequestLine.parse(data[..<end].last == UInt8(ascii: "\r") ? data[..<(end - 1)] : data[..<end]) != nil {
                let who = c.peerCertificate?.subjectSummary ?? "anonymous"
                // The library's one responder writes the answer's head.
                _ = try? c.write(HTTPAnswer(status: 200, body: Array("hello \(who)\n".utf8)).bytes)
                return
            }
            first = false
            guard (try? c.write(data)) != nil else { return }
        }
    }
}
