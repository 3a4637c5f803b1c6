import ArgumentParser
import Foundation
import MTLS

/// `mtls store [--store PATH] [--secret-file F] import|add-cert|add-token|list|show|delete|export|change-secret|upgrade|show-counter`
struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Keep identities, certificates and token references in an encrypted store under labels.",
        discussion: """
            The store is one SQLite file: --store, else $MTLS_STORE, else $XDG_DATA_HOME/mtls/store.db \
            (~/.local/share/mtls/store.db). Its secret is a passphrase from --secret-file (always \
            stretched with scrypt, whatever its length; its first line, the line ending dropped) or a \
            raw key of exactly 32 bytes from --key-file; else $MTLS_STORE_KEY_FILE, else \
            $MTLS_STORE_SECRET_FILE. Only import, add-cert and add-token create a missing store; the other \
            commands fail with "no store at PATH".
            """,
        subcommands: [Import.self, AddCert.self, AddToken.self, List.self, Show.self, Delete.self, Export.self,
                      ChangeSecret.self, Upgrade.self, ShowCounter.self, Check.self, Metrics.self]
    )

    // Declared here too so that `mtls store --store P --secret-file F list` parses: ArgumentParser
    // decodes every command on the path from the same arguments, so the subcommand sees them.
    @OptionGroup var location: Location

    /// Options every store subcommand takes.
    struct Location: ParsableArguments {
        @Option(name: .customLong("store"), help: "The store file (default: $MTLS_STORE, then $XDG_DATA_HOME/mtls/store.db).")
        var store: String?
        @Option(name: .customLong("secret-file"), help: "File holding the store secret (default: $MTLS_STORE_SECRET_FILE).")
        var secretFile: String?
        @Option(name: .customLong("key-file"), help: "File holding a raw 32-byte store key, instead of a passphrase (default: $MTLS_STORE_KEY_FILE).")
        var keyFile: String?
        @Flag(name: .customLong("allow-module-path"), help: "Honour a stored token URI's module-path even when p11-kit has not registered that module.")
        var allowModulePath = false
        @Option(name: .customLong("busy-timeout"), help: "Milliseconds to wait for another user's lock before failing (default \(CredentialStore.Options().busyTimeoutMilliseconds)).")
        var busyTimeout: Int32?
        @Option(name: .customLong("kdf-log-n"), help: ArgumentHelp("scrypt cost of a new store, for tests only.", visibility: .hidden))
        var kdfLogN: Int?

        var path: String { store ?? CredentialStore.defaultPath() }

        /// Opens the store. Only commands that add items pass `create`: a command that reads a
        /// store whose path is wrong must say so, not make an empty one there.
        func open(create: Bool = false) throws -> CredentialStore {
            try CredentialStore(path: path, secret: try secret(), options: options(create: create))
        }

        /// The store secret the options and environment name.
        func secret() throws -> StoreSecret {
            guard let source = try CredentialStore.secretSource(secretFile: secretFile, keyFile: keyFile) else {
                throw MTLSError(.invalidArgument, "the store secret is needed: pass --secret-file F (a passphrase) or --key-file F (a 32-byte key), or set MTLS_STORE_SECRET_FILE or MTLS_STORE_KEY_FILE")
            }
            return try source.load()
        }

        func options(create: Bool) -> CredentialStore.Options {
            var options = CredentialStore.Options()
            options.create = create
            if let kdfLogN { options.kdf.logN = kdfLogN }
            if let busyTimeout { options.busyTimeoutMilliseconds = busyTimeout }  // 0 or negative: no waiting (the core passes it to SQLite)
            options.allowUnregisteredModulePaths = allowModulePath
            return options
        }

        /// Runs `body` with the store, creating it if needed; a store this call created is
        /// removed again when `body` fails (``CredentialStore/withStore(path:secret:options:_:)``).
        func adding<T>(_ body: (CredentialStore) throws -> T) throws -> T {
            try CredentialStore.withStore(path: path, secret: try secret(), options: options(create: true), body)
        }
    }

    static func itemClass(_ name: String?) throws -> StoreItemClass? {
        guard let name else { return nil }
        guard let c = StoreItemClass(name: name) else {
            throw ValidationError("--class must be identity, certificate or token-identity")
        }
        return c
    }

    static func json(_ info: StoreItemInfo) -> [String: Any] {
        ["label": info.label, "class": info.itemClass.name, "subject": info.subject, "issuer": info.issuer,
         "not_after": CLI.rfc3339(info.notAfter), "leaf_sha256": info.leafSHA256]
    }

    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import an identity under a label: a PKCS#12 file, or a PEM certificate (with its chain) and its key.",
            discussion: """
                FILE is a .p12/.pfx file, or a PEM file with the certificate (leaf first, then its chain); \
                its key is in FILE too or in --key F. The password (of the .p12, or of an encrypted PEM \
                key) comes from --password-file, else MTLS_P12_PASSWORD; --no-password says there is none.
                """)
        @OptionGroup var location: Location
        @Argument(help: "The .p12 / .pfx file, or a PEM certificate file.") var file: String
        @Option(help: "The label to store it under.") var label: String
        @Option(name: .customLong("key"), help: "The PEM private key of FILE's certificate (default: FILE itself when it is PEM).")
        var key: String?
        @Option(name: .customLong("password-file"), help: "File whose first line is the PKCS#12 (or encrypted key's) password (default: $MTLS_P12_PASSWORD; none: no password).")
        var passwordFile: String?
        @Flag(help: "The file has no password (not the same as the empty password).") var noPassword = false
        @Option(name: .customLong("friendly-name"), help: "Pick this identity from a file that holds several.")
        var friendlyName: String?
        @Flag(help: "Replace an identity already stored under the label.") var replace = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let password = try CLI.p12Password(file: passwordFile, noPassword: noPassword, required: false)
                let data = try FileIO.read(file, limit: PKCS12.maxInputSize)
                let isPEM = key != nil || String(decoding: data.prefix(4096), as: UTF8.self).contains("-----BEGIN ")
                let identity: Identity
                if isPEM {
                    if friendlyName != nil { throw ValidationError("--friendly-name picks an identity of a PKCS#12 file") }
                    let pem = try Identity(certificatePath: file, keyPath: key ?? file, password: password)
                    try location.adding { try $0.putIdentity(pem, label: label, replace: replace) }
                    identity = pem
                } else {
                    identity = try location.adding { store in
                        try store.importPKCS12(data, password: password, label: label, replace: replace, friendlyName: friendlyName)
                    }
                }
                if json {
                    return CLI.printJSON(["label": label, "subject": identity.leaf.subject, "leaf_sha256": identity.leaf.sha256Hex,
                                          "chain_count": identity.chain.count, "replaced": replace])
                }
                print("imported \"\(label)\": \(identity.leaf.subject) (\(identity.leaf.sha256Hex))")
            }
        }
    }

    struct AddCert: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "add-cert", abstract: "Store a certificate (for example a pinned root) under a label.")
        @OptionGroup var location: Location
        @Argument(help: "A DER, PEM or PKCS#7 file; its first certificate is stored.") var file: String
        @Option(help: "The label to store it under.") var label: String
        @Flag(help: "Replace a certificate already stored under the label.") var replace = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let cert = try Certificate.load(path: file)[0]
                try location.adding { try $0.putCertificate(cert, label: label, replace: replace) }
                if json { return CLI.printJSON(["label": label, "subject": cert.subject, "sha256": cert.sha256Hex]) }
                print("stored certificate \"\(label)\": \(cert.subject) (\(cert.sha256Hex))")
            }
        }
    }

    struct AddToken: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "add-token", abstract: "Store a reference to an identity on a PKCS#11 token.")
        @OptionGroup var location: Location
        @Argument(help: "The pkcs11: URI of the token's private key.") var uri: String
        @Option(help: "The label to store it under.") var label: String
        @Option(help: "The identity's certificate, with its chain after it (PEM, DER or PKCS#7); read from the token when omitted.") var cert: String?
        @Option(help: "File with the token PIN (first line), to read the identity from the token.") var pinFile: String?
        @Flag(help: "Replace a token identity already stored under the label.") var replace = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                var certs: [Certificate]
                if let cert {
                    certs = try Certificate.load(path: cert)
                } else {
                    // The certificate (and any CA certificates) stored on the token with the key.
                    let identity = try Token.identity(uri: uri, pin: try pinFile.map(CLI.readPINFile))
                    certs = identity.allCertificates
                }
                guard let leaf = certs.first else { throw MTLSError(.noIdentity, "no certificate for the token identity") }
                let stored = try location.adding {
                    try $0.putTokenIdentity(uri: uri, certificate: leaf, chain: Array(certs.dropFirst()), label: label, replace: replace)
                }
                if stored.pinValueRemoved {
                    CLI.printError("warning: the URI's pin-value was not stored (a PIN is never kept in the store); use pin-source=FILE or --pin-file when connecting")
                }
                if json {
                    return CLI.printJSON(["label": label, "uri": stored.storedURI, "subject": leaf.subject, "leaf_sha256": leaf.sha256Hex,
                                          "pin_value_removed": stored.pinValueRemoved])
                }
                print("stored token identity \"\(label)\": \(stored.storedURI)")
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List stored items (nothing is decrypted).")
        @OptionGroup var location: Location
        @Option(name: .customLong("class"), help: "Only this class: identity, certificate or token-identity.") var itemClass: String?
        @Flag(name: .customLong("enrollments"),
              help: "Also list the enrollment records (mtls-enrollment:LABEL, kind \"enrollment\": the ACME account key and how LABEL was enrolled).")
        var enrollments = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            let cls = try StoreCommand.itemClass(itemClass)
            try CLI.reporting(json: json) {
                // An enrollment record is stored as an identity row but is no identity: hidden
                // unless asked for, and then shown as what it is.
                let items = try location.open().list(itemClass: cls).filter { enrollments || !$0.isEnrollmentRecord }
                if json {
                    // "kind" (with --enrollments): a row's class, or "enrollment" for a record.
                    // Without it the rows are exactly as before records existed.
                    guard enrollments else { return CLI.printJSON(items.map(StoreCommand.json)) }
                    return CLI.printJSON(items.map { i -> [String: Any] in
                        var o = StoreCommand.json(i)
                        o["kind"] = i.isEnrollmentRecord ? "enrollment" : i.itemClass.name
                        if i.isEnrollmentRecord { o["enrolled_label"] = EnrollmentRecord.identityLabel(ofRecord: i.label) }
                        return o
                    })
                }
                for i in items {
                    if let enrolled = i.isEnrollmentRecord ? EnrollmentRecord.identityLabel(ofRecord: i.label) : nil {
                        print("\(i.label)\tenrollment\trecord of \(enrolled)")
                        continue
                    }
                    print("\(i.label)\t\(i.itemClass.name)\t\(i.subject)\tuntil \(CLI.rfc3339(i.notAfter))")
                }
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one stored item's metadata.")
        @OptionGroup var location: Location
        @Argument(help: "The label.") var label: String
        @Option(name: .customLong("class"), help: "The item's class when the label is used by several.") var itemClass: String?
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            let cls = try StoreCommand.itemClass(itemClass)
            try CLI.reporting(json: json) {
                let i = try location.open().info(label: label, itemClass: cls)
                var o = StoreCommand.json(i)
                o["chain"] = i.chainSHA256
                o["created"] = CLI.rfc3339(i.created)
                o["modified"] = CLI.rfc3339(i.modified)
                o["token_uri"] = i.tokenURI as Any? ?? NSNull()
                if json { return CLI.printJSON(o) }
                print("Label:       \(i.label)")
                print("Class:       \(i.itemClass.name)")
                print("Subject:     \(i.subject)")
                print("Issuer:      \(i.issuer)")
                print("Not after:   \(CLI.rfc3339(i.notAfter))")
                print("SHA-256:     \(i.leafSHA256)")
                for c in i.chainSHA256 { print("Chain:       \(c)") }
                if let uri = i.tokenURI { print("Token URI:   \(uri)") }
                print("Created:     \(CLI.rfc3339(i.created))")
                print("Modified:    \(CLI.rfc3339(i.modified))")
            }
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete the items under a label.")
        @OptionGroup var location: Location
        @Argument(help: "The label.") var label: String
        @Option(name: .customLong("class"), help: "Only the item of this class.") var itemClass: String?
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            let cls = try StoreCommand.itemClass(itemClass)
            try CLI.reporting(json: json) {
                let n = try location.open().delete(label: label, itemClass: cls)
                if json { return CLI.printJSON(["label": label, "deleted": n]) }
                print("deleted \(n) item\(n == 1 ? "" : "s") labelled \"\(label)\"")
            }
        }
    }

    struct Export: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Export a stored identity to a PKCS#12 file.")
        @OptionGroup var location: Location
        @Argument(help: "The identity's label.") var label: String
        @Option(help: "The .p12 file to write (mode 0600).") var out: String
        @Option(name: .customLong("password-file"), help: "File whose first line is the new file's password.") var passwordFile: String?
        @Flag(help: "3DES and a SHA-1 MAC, for consumers that accept nothing newer.") var legacy = false
        @Flag(help: "Overwrite --out when it exists.") var force = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                guard let passwordFile else {
                    throw MTLSError(.invalidArgument, "--password-file is needed: an exported key is always password-protected")
                }
                try CLI.refuseToOverwrite(out, force: force)
                let p12 = try location.open().exportPKCS12(
                    label: label, password: try CLI.readPasswordFile(passwordFile), options: legacy ? .legacy : .modern)
                try FileIO.writeAtomically(out, p12)
                if json { return CLI.printJSON(["label": label, "out": out, "legacy": legacy]) }
                print("exported \"\(label)\" to \(out)")
            }
        }
    }

    struct ChangeSecret: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "change-secret", abstract: "Protect the store with a new secret.")
        @OptionGroup var location: Location
        @Option(name: .customLong("new-secret-file"), help: "File holding the new passphrase (first line).")
        var newSecretFile: String?
        @Option(name: .customLong("new-key-file"), help: "File holding a new raw 32-byte key, instead of a passphrase.")
        var newKeyFile: String?
        @Flag(help: "Machine-readable output.") var json = false

        func validate() throws {
            if (newSecretFile == nil) == (newKeyFile == nil) {
                throw ValidationError("give exactly one of --new-secret-file and --new-key-file")
            }
        }

        func run() throws {
            try CLI.reporting(json: json) {
                let store = try location.open()
                var kdf = StoreKDFParameters.default
                if let n = location.kdfLogN { kdf.logN = n }
                let secret = try newKeyFile.map(StoreSecret.loadKey(path:)) ?? StoreSecret.load(path: newSecretFile ?? "")
                try store.changeSecret(to: secret, kdf: kdf)
                if json { return CLI.printJSON(["changed": true]) }
                print("the store secret was changed and its data key rotated")
            }
        }
    }

    struct Upgrade: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Upgrade a store made before row authentication, vouching for what it holds.",
            discussion: """
                Lists every item the upgrade will vouch for (label, class, subject, fingerprints, token URI) \
                and upgrades only when confirmed: type "yes" at the prompt, or pass --yes (scripts). \
                Without --yes and without a terminal to confirm on, nothing is changed (exit status 1).
                """)
        @OptionGroup var location: Location
        @Flag(help: "Vouch for the listed items without asking.") var yes = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let secret = try location.secret()
                let options = location.options(create: false)
                guard let preview = try CredentialStore.upgradePreview(path: location.path, secret: secret, options: options) else {
                    if json { return CLI.printJSON(["upgraded": false, "current": true, "items": [Any]()] as [String: Any]) }
                    print("\(location.path) is current: nothing to upgrade")
                    return
                }
                let items: [[String: Any]] = preview.items.map { i in
                    var o = StoreCommand.json(i)
                    o["chain"] = i.chainSHA256
                    o["token_uri"] = i.tokenURI as Any? ?? NSNull()
                    return o
                }
                if !json {
                    print("\(location.path) was made by a libmtls from before row authentication (schema \(preview.schemaVersion)).")
                    print("Upgrading vouches for these \(preview.items.count) item\(preview.items.count == 1 ? "" : "s"): from then on they are trusted as if stored by you.")
                    // One line per row, numbered, every field cleaned; the fingerprints are those of
                    // the certificates in the row, the bytes the upgrade authenticates.
                    for (n, i) in preview.items.enumerated() {
                        let chain: TerminalText = i.chainSHA256.isEmpty ? "" : "\tchain SHA-256 \(i.chainSHA256.joined(separator: ","))"
                        let uri: TerminalText = i.tokenURI.map { "\tURI \($0)" } ?? ""
                        print("  \(n + 1). \(i.label)\t\(i.itemClass.name)\t\(i.subject)\tSHA-256 \(i.leafSHA256)\(chain)\(uri)")
                    }
                }
                var confirmed = yes
                if !confirmed && !json && isatty(STDIN_FILENO) == 1 {
                    print("Vouch for these items and upgrade? Type yes: ", terminator: "")
                    fflush(nil)  // all streams: Swift 6 does not let code touch the C global `stdout`
                    confirmed = readLine()?.trimmingCharacters(in: .whitespaces).lowercased() == "yes"
                }
                guard confirmed else {
                    throw MTLSError(.upgradeRequired, "nothing was changed: the upgrade was not confirmed (pass --yes to vouch for the items listed)")
                }
                let n = try CredentialStore.upgrade(path: location.path, secret: secret, confirming: preview.confirmation, options: options)
                if json { return CLI.printJSON(["upgraded": true, "current": true, "items": items] as [String: Any]) }
                print("upgraded \(location.path): \(n) item\(n == 1 ? "" : "s") authenticated")
            }
        }
    }

    struct ShowCounter: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show-counter",
            abstract: "Print the store's write counter (from its authenticated header).",
            discussion: """
                Every write transaction increments it and it never goes back. The one thing a store cannot \
                show about itself is the whole file replaced by an older copy of itself: keep the last \
                counter you saw somewhere else and compare.
                """)
        @OptionGroup var location: Location
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let n = try location.open().writeCounter()
                if json { return CLI.printJSON(["write_counter": n]) }
                print("\(n)")
            }
        }
    }
}
