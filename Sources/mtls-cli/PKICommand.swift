import ArgumentParser
import Foundation
import MTLS

/// `mtls pki init | intermediate | issue server | issue client | revoke | crl`: a private PKI in
/// one folder (the layout is documented on ``PKIDirectory``).
struct PKICommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pki",
        abstract: "Make a private PKI: a root, per-customer intermediates, server and client certificates, CRLs.",
        discussion: """
        Layout of the folder (--dir):
          root/cert.pem, key.pem       the root CA
          ca/<ca>/cert.pem, key.pem    an intermediate ("Customer A": ca/customer-a)
          ca/<ca>/chain.pem            the intermediate, then the root
          ca/<ca>/revoked.txt, crl.pem its revocations and latest CRL
          ca/<ca>/issued/<name>/       cert.pem, key.pem, chain.pem it issued
          root/crl-url, ca/<ca>/crl-url  where a CA publishes its CRL (--crl-url)
        With --crl-url (and --ocsp-url) on init and intermediate, what the CA issues
        carries the URL; `mtls pki crl --out DIR` writes every CA's CRL for a web server.
        Private keys are written 0600, encrypted (PKCS#8, AES-256) with
        --password-file; the same file unlocks the CA keys later. A .p12 written
        with --p12 takes its own password from --p12-password-file.
        """,
        subcommands: [Init.self, Intermediate.self, Issue.self, Sign.self, Revoke.self, CRL.self, List.self])

    /// Options every pki command takes.
    struct Common: ParsableArguments {
        @Option(help: "The PKI folder.") var dir: String
        @Option(name: .customLong("password-file"), help: "File with the password that encrypts new private keys and unlocks the CA keys (default: $MTLS_PKI_KEY_PASSWORD_FILE; without either, keys are written unencrypted, 0600, with a warning).")
        var passwordFile: String?
        // The name before 0.3.0, kept for scripts: an encrypted key's password is --password-file
        // in every command.
        @Option(name: .customLong("key-password-file"), help: ArgumentHelp("The old name of --password-file.", visibility: .hidden))
        var keyPasswordFile: String?
        @Flag(help: "Machine-readable output.") var json = false

        /// The key password: --password-file (or its old name --key-password-file), else the file
        /// named by `MTLS_PKI_KEY_PASSWORD_FILE`. With `passwordFileIsP12` (`pki issue --p12`
        /// without --p12-password-file, the spelling before 0.3.0), --password-file is the
        /// .p12's password and only the old name gives the key's.
        func keyPassword(passwordFileIsP12: Bool = false) throws -> SecretBytes? {
            if !passwordFileIsP12 && passwordFile != nil && keyPasswordFile != nil {
                throw ValidationError("give the key password once: --password-file (--key-password-file is its old name)")
            }
            let env = ProcessInfo.processInfo.environment["MTLS_PKI_KEY_PASSWORD_FILE"].flatMap { $0.isEmpty ? nil : $0 }
            return try ((passwordFileIsP12 ? nil : passwordFile) ?? keyPasswordFile ?? env).map(CLI.readPasswordFile)
        }

        /// Unencrypted keys are allowed (the documented command lines rely on it) but never silent.
        static func warnUnencrypted(_ keyPath: String) {
            CLI.printError("warning: \(keyPath) is written unencrypted (0600); give --password-file FILE or set MTLS_PKI_KEY_PASSWORD_FILE to encrypt new keys")
        }
    }

    /// Where a new CA publishes its revocation information.
    struct PublicationOptions: ParsableArguments {
        @Option(help: "The http: URL this CA's CRL will be served at (DER; `mtls pki crl --out DIR` writes it under the URL's last path segment). What the CA issues carries it as its CRL distribution point.")
        var crlURL: String?
        @Option(help: "The http: URL of this CA's OCSP responder. What the CA issues carries it (authorityInfoAccess).")
        var ocspURL: String?

        var publication: CAPublication { CAPublication(crlURL: crlURL, ocspURL: ocspURL) }
    }

    /// Options for anything that makes a key and a certificate.
    struct KeyOptions: ParsableArguments {
        @Option(name: .customLong("key-type"), help: "Key kind: \(KeySpec.issuingNames.joined(separator: " | ")) (default \(KeySpec.issuingDefault.issuingName)).")
        var keyType: String?
        // The name before 0.3.0, kept for scripts: the key type is --key-type in every command.
        @Option(name: .customLong("key"), help: ArgumentHelp("The old name of --key-type.", visibility: .hidden))
        var key: String?
        @Option(help: "Validity in days (default: root \(CertificateProfile.root.defaultValidityDays), intermediate \(CertificateProfile.intermediate.defaultValidityDays), server and client \(CertificateProfile.server.defaultValidityDays)).")
        var days: Int?

        func validate() throws {
            if keyType != nil && key != nil { throw ValidationError("give --key-type once (--key is its old name)") }
        }

        func spec() throws -> KeySpec { try KeySpec(issuingName: keyType ?? key ?? KeySpec.issuingDefault.issuingName) }
    }

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make the root CA of a new PKI folder.")
        @OptionGroup var common: Common
        @Option(help: "The root's name (its CN), e.g. \"Example Root\".") var name: String
        @OptionGroup var keyOptions: KeyOptions
        @OptionGroup var publication: PublicationOptions

        func run() throws {
            try makeCA("Made root CA", kind: "root", common: common, keyOptions: keyOptions,
                       publication: publication.publication) { pki, spec, password in
                try pki.initRoot(commonName: name, keySpec: spec, validityDays: keyOptions.days, keyPassword: password,
                                 publication: publication.publication)
            }
        }
    }

    struct Intermediate: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make an intermediate CA (one per customer) under the root.")
        @OptionGroup var common: Common
        @Option(help: "The intermediate's name (its CN), e.g. \"Customer A\".") var name: String
        @OptionGroup var keyOptions: KeyOptions
        @OptionGroup var publication: PublicationOptions

        func run() throws {
            try makeCA("Made intermediate CA", kind: "intermediate", common: common, keyOptions: keyOptions,
                       publication: publication.publication) { pki, spec, password in
                try pki.makeIntermediate(commonName: name, keySpec: spec, validityDays: keyOptions.days, keyPassword: password,
                                         publication: publication.publication)
            }
        }
    }

    /// What `init` and `intermediate` share: read the key options and the key password, make the
    /// CA with `make`, report it.
    static func makeCA(_ done: String, kind: String, common: Common, keyOptions: KeyOptions, publication: CAPublication,
                       _ make: (PKIDirectory, KeySpec, SecretBytes?) throws -> PKIDirectory.Item) throws {
        try CLI.reporting(json: common.json) {
            let spec = try keyOptions.spec()
            let password = try common.keyPassword()
            PKIOutput.progress(spec, json: common.json)
            let item = try make(PKIDirectory(path: common.dir), spec, password)
            if password == nil { Common.warnUnencrypted(item.keyPath) }
            PKIOutput.report(done, kind: kind, item: item, ca: nil, p12: nil, encrypted: password != nil, json: common.json,
                             publication: publication)
        }
    }

    struct Issue: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a server or client certificate from an intermediate.",
            subcommands: [Server.self, Client.self])

        /// Options of both `issue` commands.
        struct IssueOptions: ParsableArguments {
            @Option(help: "The issuing intermediate's name, e.g. \"Customer A\".") var ca: String
            @Option(help: "Also write a PKCS#12 file with the key, the certificate and the whole chain.") var p12: String?
            @Option(name: .customLong("p12-password-file"), help: "File with the PKCS#12 file's password (needed with --p12).")
            var p12PasswordFile: String?
            @Flag(help: "Make the PKCS#12 file with 3DES and a SHA-1 MAC, for old consumers.") var legacy = false
            @Flag(help: "Issue a new key and certificate for a name already issued; the old one stays in issued/<name>@<serial>/ for revocation.")
            var reissue = false

            func validate() throws {
                if p12 == nil && (p12PasswordFile != nil || legacy) { throw ValidationError("--p12-password-file and --legacy go with --p12") }
            }

            /// Before 0.3.0, `pki issue --p12 F --password-file P` named the .p12's password
            /// --password-file (now the key's, as everywhere). For one release that spelling keeps
            /// its meaning, with a warning: --p12 without --p12-password-file.
            func passwordFileIsP12(_ common: Common) -> Bool { p12 != nil && p12PasswordFile == nil && common.passwordFile != nil }

            /// The .p12's password file: --p12-password-file, else (the old spelling) --password-file.
            func p12Password(_ common: Common) throws -> SecretBytes? {
                guard p12 != nil else { return nil }
                if passwordFileIsP12(common) {
                    CLI.printError("warning: --password-file with --p12 is read as the .p12's password, as before 0.3.0; say --p12-password-file FILE for the .p12 (--password-file is the key's password, and will only be that in a later release)")
                    return try common.passwordFile.map(CLI.readPasswordFile)
                }
                guard let file = p12PasswordFile else { throw ValidationError("--p12 needs --p12-password-file FILE (the .p12's password)") }
                return try CLI.readPasswordFile(file)
            }
        }

        static func run(_ request: CertificateRequest, common: Common, keyOptions: KeyOptions, options: IssueOptions) throws {
            try CLI.reporting(json: common.json) {
                let spec = try keyOptions.spec()
                let keyPassword = try common.keyPassword(passwordFileIsP12: options.passwordFileIsP12(common))
                let p12Password = try options.p12Password(common)
                PKIOutput.progress(spec, json: common.json)
                let pki = PKIDirectory(path: common.dir)
                // The certificate and its .p12 are one step of the core: both or neither.
                let p12 = options.p12.flatMap { path in
                    p12Password.map { PKIDirectory.PKCS12Output(path: path, password: $0, scheme: options.legacy ? .legacy : .modern) }
                }
                let item = try pki.issue(request, caName: options.ca, keySpec: spec, keyPassword: keyPassword, p12: p12,
                                         reissue: options.reissue)
                if keyPassword == nil { Common.warnUnencrypted(item.keyPath) }
                PKIOutput.report("Issued \(request.profile.rawValue) certificate", kind: request.profile.rawValue, item: item,
                                 ca: options.ca, p12: options.p12.map { ($0, options.legacy) },
                                 encrypted: keyPassword != nil, json: common.json)
            }
        }

        struct Server: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Issue a server certificate (serverAuth, DNS and IP names).")
            @OptionGroup var common: Common
            @OptionGroup var options: IssueOptions
            @Option(parsing: .singleValue, help: "A DNS name for the certificate (repeat for more).") var dns: [String] = []
            @Option(parsing: .singleValue, help: "An IP address for the certificate (repeat for more).") var ip: [String] = []
            @Option(help: "The certificate's name (CN); default: the first DNS name or IP.") var name: String?
            @OptionGroup var keyOptions: KeyOptions

            func validate() throws {
                if dns.isEmpty && ip.isEmpty { throw ValidationError("give at least one --dns NAME or --ip ADDRESS") }
            }

            func run() throws {
                let cn = try CertificateRequest.commonName(given: name, dnsNames: dns, ipAddresses: ip)
                try Issue.run(CertificateRequest(profile: .server, commonName: cn, dnsNames: dns, ipAddresses: ip,
                                                 validityDays: keyOptions.days),
                              common: common, keyOptions: keyOptions, options: options)
            }
        }

        struct Client: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Issue a client certificate (clientAuth).")
            @OptionGroup var common: Common
            @OptionGroup var options: IssueOptions
            @Option(help: "The client's name (its CN), e.g. \"alice\".") var name: String
            @OptionGroup var keyOptions: KeyOptions

            func run() throws {
                try Issue.run(CertificateRequest(profile: .client, commonName: name, validityDays: keyOptions.days),
                              common: common, keyOptions: keyOptions, options: options)
            }
        }
    }

    /// `mtls pki sign server|client --ca NAME --csr FILE --out FILE`: a certificate for a key
    /// kept elsewhere (a token), from its certificate signing request.
    struct Sign: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign a certificate signing request (the key stays where it is, e.g. on a token).",
            subcommands: [Server.self, Client.self])

        struct SignOptions: ParsableArguments {
            @Option(help: "The issuing intermediate's name.") var ca: String
            @Option(help: "The certificate signing request (PEM or DER); its self-signature must verify.") var csr: String
            @Option(help: "Where to write the certificate (PEM; then its chain up to the root).") var out: String
            @Option(help: "Validity in days (default \(CertificateProfile.server.defaultValidityDays), never past the intermediate's).")
            var days: Int?
            @Option(help: "The certificate's name (CN); default: the CSR's CN.") var name: String?
        }

        static func run(_ profile: CertificateProfile, dns: [String], ip: [String], common: Common, options: SignOptions) throws {
            try CLI.reporting(json: common.json) {
                if FileManager.default.fileExists(atPath: options.out) { throw MTLSError(.duplicate, "\(options.out) already exists") }
                let csr = try CertificateSigningRequest(path: options.csr)
                let cn = try CertificateRequest.commonName(given: options.name, csr: csr, dnsNames: dns, ipAddresses: ip)
                let request = CertificateRequest(profile: profile, commonName: cn, dnsNames: dns, ipAddresses: ip,
                                                 validityDays: options.days)
                let pki = PKIDirectory(path: common.dir)
                let (leaf, chain) = try pki.sign(csr, request: request, caName: options.ca, keyPassword: try common.keyPassword())
                try FileIO.writeAtomically(options.out, Array(([leaf] + chain).map(\.pem).joined().utf8), mode: 0o644)
                if common.json {
                    CLI.printJSON(["kind": profile.rawValue, "subject": leaf.subject, "name": leaf.subjectSummary, "issuer": leaf.issuer,
                                   "ca": options.ca, "serial": leaf.serialHex, "key_type": leaf.keyType.shortName,
                                   "not_after": CLI.rfc3339(leaf.notAfter), "sans": leaf.subjectAltNames.map(\.description),
                                   "sha256": leaf.sha256Hex, "spki_pin": leaf.spkiPin, "cert": options.out])
                } else {
                    print("\(PKIOutput.ok)Signed \(profile.rawValue) certificate \"\(leaf.subjectSummary)\" from \"\(options.ca)\" (\(leaf.keyType.shortName) key from \(options.csr))")
                    print("  certificate: \(options.out) (with its chain)")
                    print("  valid until: \(CLI.rfc3339(leaf.notAfter))")
                    print("  SHA-256:     \(leaf.sha256Hex)")
                }
            }
        }

        struct Server: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Sign a CSR as a server certificate (serverAuth, DNS and IP names).")
            @OptionGroup var common: Common
            @OptionGroup var options: SignOptions
            @Option(parsing: .singleValue, help: "A DNS name for the certificate (repeat for more).") var dns: [String] = []
            @Option(parsing: .singleValue, help: "An IP address for the certificate (repeat for more).") var ip: [String] = []

            func validate() throws {
                if dns.isEmpty && ip.isEmpty { throw ValidationError("give at least one --dns NAME or --ip ADDRESS") }
            }

            func run() throws { try Sign.run(.server, dns: dns, ip: ip, common: common, options: options) }
        }

        struct Client: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Sign a CSR as a client certificate (clientAuth).")
            @OptionGroup var common: Common
            @OptionGroup var options: SignOptions

            func run() throws { try Sign.run(.client, dns: [], ip: [], common: common, options: options) }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a certificate an intermediate issued, and write its new CRL.")
        @OptionGroup var common: Common
        @Option(help: "The issuing intermediate's name.") var ca: String
        @Option(help: "The name the certificate was issued under.") var name: String?
        @Option(help: "The certificate file to revoke.") var cert: String?
        @Option(help: "Reason: \(Revocation.Reason.allCases.map(\.name).joined(separator: ", ")).") var reason: String?
        // --days, as in `pki crl`: a number of days is --days in every command.
        @Option(name: .customLong("days"), help: "Days until the new CRL's nextUpdate (default \(CertificateAuthority.defaultCRLValidityDays)).")
        var days: Int?
        @Option(name: .customLong("crl-days"), help: ArgumentHelp("The old name of --days.", visibility: .hidden))
        var crlDays: Int?

        func validate() throws {
            if (name == nil) == (cert == nil) { throw ValidationError("give exactly one of --name or --cert") }
            if days != nil && crlDays != nil { throw ValidationError("give --days once (--crl-days is its old name)") }
        }

        func run() throws {
            try CLI.reporting(json: common.json) {
                let pki = PKIDirectory(path: common.dir)
                let reasonValue = try reason.map { r -> Revocation.Reason in
                    guard let v = Revocation.Reason(name: r) else {
                        throw MTLSError(.invalidArgument, "unknown reason \"\(r)\" (use one of \(Revocation.Reason.allCases.map(\.name).joined(separator: ", ")))")
                    }
                    return v
                }
                let target = try cert.map { try Certificate.load(path: $0)[0] }
                    ?? pki.issuedCertificate(caName: ca, name: name!)
                let (path, der) = try pki.revoke(target, caName: ca, reason: reasonValue, crlValidityDays: days ?? crlDays ?? CertificateAuthority.defaultCRLValidityDays,
                                                 keyPassword: try common.keyPassword())
                if common.json {
                    CLI.printJSON(["revoked": target.subjectSummary, "serial": target.serialHex,
                                   "reason": reasonValue?.name as Any? ?? NSNull(), "crl": path, "crl_size": der.count])
                } else {
                    print("\(PKIOutput.ok)Revoked \"\(target.subjectSummary)\" (serial \(target.serialHex))")
                    print("  CRL: \(path)")
                }
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the folder's certificates: root, intermediates, what each issued, revocations.")
        @Option(help: "The PKI folder.") var dir: String
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let entries = try PKIDirectory(path: dir).inventory()
                if json {
                    CLI.printJSON(entries.map { e -> [String: Any] in
                        let c = e.certificate
                        return [
                            "kind": e.profile.rawValue, "name": c.subjectSummary, "ca": e.caName as Any? ?? NSNull(),
                            "serial": c.serialHex, "not_after": CLI.rfc3339(c.notAfter), "sha256": c.sha256Hex,
                            "sans": c.subjectAltNames.map(\.description), "cert": e.path,
                            "revoked": e.revocation != nil,
                            "revoked_at": e.revocation.map { CLI.rfc3339($0.date) } as Any? ?? NSNull(),
                            "reason": e.revocation?.reason?.name as Any? ?? NSNull(),
                        ]
                    })
                    return
                }
                for e in entries {
                    let c = e.certificate
                    let indent = e.profile == .root ? "" : e.profile == .intermediate ? "  " : "    "
                    let sans = c.subjectAltNames.isEmpty ? "" : "  " + c.subjectAltNames.map(\.description).joined(separator: ", ")
                    let revoked = e.revocation.map { r in "  REVOKED \(CLI.rfc3339(r.date))" + (r.reason.map { " (\($0.name))" } ?? "") } ?? ""
                    print("\(indent)\(e.profile.rawValue) \"\(c.subjectSummary)\"  until \(CLI.rfc3339(c.notAfter))\(sans)\(revoked)")
                }
            }
        }
    }

    struct CRL: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "crl",
            abstract: "Write fresh CRLs: every publishing CA's into a folder for a web server (--out DIR), or one intermediate's (--ca).",
            discussion: """
            Without --ca: every CA made with --crl-url gets a fresh CRL (DER) written to
            DIR/<the URL's last path segment>, ready for any web server serving DIR.
            With --ca: the intermediate's ca/<ca>/crl.pem, and a PEM copy at --out FILE.
            """)
        @OptionGroup var common: Common
        @Option(help: "The intermediate's name (omit it to publish every CA's CRL into --out DIR).") var ca: String?
        @Option(help: "Days until the CRL's nextUpdate.") var days = CertificateAuthority.defaultCRLValidityDays
        @Option(help: "Without --ca: the folder to write every CA's CRL into. With --ca: also copy the CRL (PEM) to this file.") var out: String?

        func validate() throws {
            if ca == nil && out == nil { throw ValidationError("give --out DIR (every CA's CRL) or --ca NAME") }
        }

        func run() throws {
            guard let ca else { return try publishAll(out ?? "") }
            try CLI.reporting(json: common.json) {
                let pki = PKIDirectory(path: common.dir)
                let (path, der) = try pki.makeCRL(caName: ca, validityDays: days, keyPassword: try common.keyPassword())
                if let out {
                    try FileIO.writeAtomically(out, Array(CertificateAuthority.crlPEM(der).utf8), mode: 0o644)
                }
                let count = try pki.revocations(caName: ca).count
                if common.json {
                    CLI.printJSON(["crl": path, "out": out as Any? ?? NSNull(), "revoked_count": count])
                } else {
                    print("\(PKIOutput.ok)Wrote the CRL of \"\(ca)\" (\(count) revoked): \(path)")
                    if let out { print("  copy: \(out)") }
                }
            }
        }

        func publishAll(_ dir: String) throws {
            try CLI.reporting(json: common.json) {
                let pki = PKIDirectory(path: common.dir)
                let written = try pki.publishCRLs(to: dir, validityDays: days, keyPassword: try common.keyPassword())
                if common.json {
                    CLI.printJSON(["out": dir, "crls": written.map { w -> [String: Any] in
                        ["ca": w.caName, "root": w.isRoot, "url": w.url, "file": w.path, "revoked_count": w.revokedCount,
                         "next_update": CLI.rfc3339(w.nextUpdate)]
                    }])
                    return
                }
                if written.isEmpty {
                    print("No CA of \(common.dir) publishes a CRL: make CAs with --crl-url URL")
                }
                for w in written {
                    print("\(PKIOutput.ok)\(w.path): CRL of \"\(w.caName)\" (\(w.revokedCount) revoked), served at \(w.url), next update \(CLI.rfc3339(w.nextUpdate))")
                }
            }
        }
    }
}

/// Output shared by the pki commands.
enum PKIOutput {
    /// A green check mark on a terminal, nothing otherwise.
    static var ok: String { isatty(1) == 1 ? "\u{1B}[32m✓\u{1B}[0m " : "" }

    /// Says so on stderr before a key generation that may take seconds.
    static func progress(_ spec: KeySpec, json: Bool) {
        guard spec.isSlowToGenerate else { return }
        CLI.printError("generating an \(spec.issuingName) key, this can take a few seconds...")
    }

    static func report(_ what: String, kind: String, item: PKIDirectory.Item, ca: String?,
                       p12: (path: String, legacy: Bool)?, encrypted: Bool, json: Bool, publication: CAPublication? = nil) {
        let c = item.identity.leaf
        let hasChain = kind != "root"
        if json {
            CLI.printJSON([
                "kind": kind, "subject": c.subject, "name": c.subjectSummary, "issuer": c.issuer,
                "ca": ca as Any? ?? NSNull(), "serial": c.serialHex, "key_type": c.keyType.shortName,
                "not_before": CLI.rfc3339(c.notBefore), "not_after": CLI.rfc3339(c.notAfter),
                "sans": c.subjectAltNames.map(\.description), "sha256": c.sha256Hex, "spki_pin": c.spkiPin,
                "cert": item.certificatePath, "key": item.keyPath, "key_encrypted": encrypted,
                "chain": hasChain ? item.chainPath : NSNull(), "p12": p12?.path as Any? ?? NSNull(),
                "crl_distribution_points": c.crlDistributionPoints, "ocsp_responders": c.ocspResponders,
                "publishes_crl_at": publication?.crlURL as Any? ?? NSNull(),
                "publishes_ocsp_at": publication?.ocspURL as Any? ?? NSNull(),
            ])
            return
        }
        print("\(ok)\(what) \"\(c.subjectSummary)\"\(ca.map { " from \"\($0)\"" } ?? "")")
        print("  certificate: \(item.certificatePath)")
        print("  key:         \(item.keyPath) (\(c.keyType.shortName), 0600, \(encrypted ? "encrypted" : "not encrypted"))")
        if hasChain { print("  chain:       \(item.chainPath)") }
        if let p12 { print("  PKCS#12:     \(p12.path) (\(p12.legacy ? "legacy 3DES/SHA-1" : "AES-256/SHA-256"), friendly name \"\(c.subjectSummary)\")") }
        let sans = c.subjectAltNames
        if !sans.isEmpty { print("  names:       \(sans.map(\.description).joined(separator: ", "))") }
        print("  valid until: \(CLI.rfc3339(c.notAfter))")
        print("  SHA-256:     \(c.sha256Hex)")
        print("  SPKI pin:    \(c.spkiPin)")
        if let url = publication?.crlURL { print("  CRL served at: \(url) (what it issues carries it)") }
        if let url = publication?.ocspURL { print("  OCSP at:     \(url)") }
    }
}
