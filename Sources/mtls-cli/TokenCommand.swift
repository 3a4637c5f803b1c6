import ArgumentParser
import Foundation
import MTLS

/// `mtls token list | objects`: PKCS#11 tokens and what they hold, through p11-kit.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "List PKCS#11 tokens (smart cards, USB tokens, HSMs) and their certificates and keys.",
        discussion: """
        Without --module, the modules registered with p11-kit are loaded
        (pkcs11.conf(5)). Each token and object is shown with its RFC 7512
        pkcs11: URI, usable as --identity.
        """,
        subcommands: [List.self, Objects.self, Keygen.self, CSR.self, ImportCert.self])

    struct ModuleOptions: ParsableArguments {
        @Option(help: "A PKCS#11 module file (e.g. /usr/lib/softhsm/libsofthsm2.so) instead of p11-kit's registered modules.")
        var module: String?
        @Flag(help: "Machine-readable output.") var json = false
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the tokens present, with their pkcs11: URIs.")
        @OptionGroup var options: ModuleOptions

        func run() throws {
            try CLI.reporting(json: options.json) {
                let tokens = try PKCS11Modules(modulePath: options.module).tokens()
                if options.json {
                    CLI.printJSON(tokens.map(TokenCommand.json))
                    return
                }
                if tokens.isEmpty { print("no token present"); return }
                for t in tokens {
                    print("\(t.label)  (\(t.manufacturer) \(t.model), serial \(t.serial))")
                    print("  module: \(t.moduleName)\(t.modulePath.map { " (\($0))" } ?? ""), slot \(t.slotID): \(t.slotDescription)")
                    print("  login:  \(t.loginRequired ? "PIN required" : "no PIN")\(t.userPINLocked ? ", PIN LOCKED" : "")")
                    print("  uri:    \(t.uri)")
                }
            }
        }
    }

    struct Objects: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the certificates and keys on the tokens (private keys need the PIN).")
        @OptionGroup var options: ModuleOptions
        @Option(help: "Only the tokens, and the objects (type=, object=, id=), matching this pkcs11: URI.") var token: String?
        @Option(help: "File with the user PIN (first line) of the one token --token names (token=/serial=, or the token showing its object=/id=); logs in there only, so its private keys are listed. Refused without --token: a PIN is never sent to every token.") var pinFile: String?

        func run() throws {
            try CLI.reporting(json: options.json) {
                // A bad URI is refused before any module is loaded (a module may print its own
                // lines while it initialises: the error stays one line).
                _ = try token.map { try PKCS11URI($0) }
                let pin = try pinFile.map(CLI.readPINFile)
                let modules = try PKCS11Modules(modulePath: options.module)
                let objects = try modules.objects(tokenURI: token, pin: pin)
                if options.json {
                    CLI.printJSON(objects.map { o -> [String: Any] in
                        [
                            "class": o.kind.rawValue, "label": o.label as Any? ?? NSNull(),
                            "id": o.id.map { String(format: "%02x", $0) }.joined(),
                            "uri": o.uri, "token": o.token.label, "token_uri": o.token.uri,
                            "subject": o.certificate?.subject as Any? ?? NSNull(),
                            "sha256": o.certificate?.sha256Hex as Any? ?? NSNull(),
                            "key_type": o.keyType as Any? ?? NSNull(),
                        ]
                    })
                    return
                }
                if objects.isEmpty { print("no objects\(pin == nil ? " (give --token and --pin-file to see a token's private keys)" : "")") }
                var lastToken = ""
                for o in objects {
                    if o.token.uri != lastToken { print("token \(o.token.label): \(o.token.uri)"); lastToken = o.token.uri }
                    let id = o.id.map { String(format: "%02x", $0) }.joined()
                    print("  \(o.kind.rawValue) \"\(o.label ?? "")\" id=\(id)\(o.certificate.map { "  \($0.subject)" } ?? "")")
                    print("    \(o.uri)")
                }
            }
        }
    }

    static func json(_ t: TokenInfo) -> [String: Any] {
        [
            "module": t.moduleName, "module_path": t.modulePath as Any? ?? NSNull(), "slot_id": t.slotID,
            "slot": t.slotDescription, "label": t.label, "manufacturer": t.manufacturer, "model": t.model,
            "serial": t.serial, "login_required": t.loginRequired, "user_pin_initialized": t.userPINInitialized,
            "user_pin_locked": t.userPINLocked, "user_pin_count_low": t.userPINCountLow,
            "user_pin_final_try": t.userPINFinalTry, "protected_authentication_path": t.protectedAuthenticationPath,
            "uri": t.uri,
        ]
    }
}

/// `mtls token keygen | csr | import-cert`: enrolling a key made on the token.
extension TokenCommand {
    /// The options every enrollment command takes.
    struct EnrollOptions: ParsableArguments {
        @Option(help: "File with the token's user PIN (first line).") var pinFile: String?
        @Option(help: "A PKCS#11 module file instead of p11-kit's registered modules.") var module: String?
        @Flag(help: "Send the PIN file's PIN even when the token says the next wrong PIN locks it.") var allowFinalTry = false
        @Flag(help: "Machine-readable output.") var json = false

        func pin() throws -> SecretBytes? { try pinFile.map(CLI.readPINFile) }
    }

    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Generate a key pair on the token: sensitive, never extractable; CKA_ID and label from the URI's id= and object=.")
        @Argument(help: "pkcs11: URI naming the token and the new key (object=LABEL and/or id=%XX...).") var uri: String
        @Option(help: "Key type: \(TokenKeyType.allCases.map(\.rawValue).joined(separator: " | ")) (rsa2048, rsa3072 are aliases).")
        var type: String = TokenKeyType.ecP256.rawValue
        @OptionGroup var options: EnrollOptions

        func run() throws {
            try CLI.reporting(json: options.json) {
                guard let keyType = TokenKeyType(rawValue: type) else {
                    throw MTLSError(.invalidArgument, "unknown key type \"\(type)\" (use \(TokenKeyType.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                let keyURI = try Token.generateKey(uri: uri, type: keyType, modulePath: options.module, pin: try options.pin(),
                                                   allowFinalTry: options.allowFinalTry)
                if options.json { CLI.printJSON(["key_uri": keyURI, "type": keyType.rawValue]) } else { print("generated \(keyType.rawValue) key \(keyURI)") }
            }
        }
    }

    struct CSR: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "csr", abstract: "Make a certificate signing request signed by a token key (the signature is made on the token).")
        @Argument(help: "pkcs11: URI of the key.") var uri: String
        @Option(help: "The subject, e.g. \"CN=alice\" or \"CN=alice,O=Example\".") var subject: String
        @Option(help: "Where to write the CSR (PEM); default: standard output.") var out: String?
        @OptionGroup var options: EnrollOptions

        func run() throws {
            try CLI.reporting(json: options.json) {
                let csr = try Token.makeCSR(uri: uri, subject: subject, modulePath: options.module, pin: try options.pin(),
                                            allowFinalTry: options.allowFinalTry)
                if let out {
                    if FileManager.default.fileExists(atPath: out) { throw MTLSError(.duplicate, "\(out) already exists") }
                    try FileIO.writeAtomically(out, Array(csr.pem.utf8), mode: 0o644)
                }
                if options.json {
                    CLI.printJSON(["csr": out ?? csr.pem, "subject_cn": csr.commonName as Any? ?? NSNull(),
                                   "key_type": csr.keyType?.shortName as Any? ?? NSNull()])
                } else if out == nil {
                    print(TerminalText(lines: csr.pem), terminator: "")
                } else {
                    print("wrote \(out!) for \(subject)")
                }
            }
        }
    }

    struct ImportCert: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import-cert", abstract: "Write a certificate onto the token beside its key (same CKA_ID).")
        @Argument(help: "pkcs11: URI of the key the certificate is for.") var uri: String
        @Option(help: "The certificate (PEM or DER), first, then its CA chain (written too, as certificates without a key).") var cert: String
        @OptionGroup var options: EnrollOptions

        func run() throws {
            try CLI.reporting(json: options.json) {
                let certificates = try Certificate.load(path: cert)
                guard let leaf = certificates.first else { throw MTLSError(.parse, "\(cert) holds no certificate") }
                let certURI = try Token.importCertificate(leaf, chain: Array(certificates.dropFirst()), uri: uri,
                                                          modulePath: options.module, pin: try options.pin(),
                                                          allowFinalTry: options.allowFinalTry)
                if options.json { CLI.printJSON(["cert_uri": certURI, "subject": leaf.subject]) } else { print("wrote \(leaf.subjectSummary) as \(certURI)") }
            }
        }
    }
}
