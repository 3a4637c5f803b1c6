import ArgumentParser
import Foundation
import MTLS

/// `mtls p12 inspect FILE [--password-file F | --no-password] [--json]`,
/// `mtls p12 create --cert F --key F [--chain F]... --out F.p12 [--password-file F | --no-password] [--legacy]`
struct P12Command: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "p12", abstract: "Read and make PKCS#12 (.p12/.pfx) files.", subcommands: [Inspect.self, Create.self])

    /// `mtls p12 create`: a .p12 from a certificate, its key and its chain, with the library's
    /// PKCS#12 writer (the one `store export` and `pki issue --p12` use).
    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a PKCS#12 file from a certificate, its private key and its chain.",
            discussion: """
            The password comes from --password-file (its first line), or from the MTLS_P12_PASSWORD \
            environment variable; --no-password writes the file with the empty password (which \
            readers open with no password too). An encrypted key is opened with --key-password-file \
            (default: the same password). The file is written 0600 and never over an existing one \
            without --force.
            """)
        @Option(help: "The certificate (PEM, DER or PKCS#7; leaf first, then any chain).") var cert: String
        @Option(help: "Its private key (PEM, possibly encrypted).") var key: String
        @Option(parsing: .singleValue, help: "A file of CA certificates above it (repeatable).") var chain: [String] = []
        @Option(help: "The .p12 file to write.") var out: String
        @Option(name: [.customLong("password-file"), .customLong("p12-password-file")],
                help: "A file whose first line is the new file's password (--p12-password-file: the same, as `pki issue --p12` spells it).") var passwordFile: String?
        @Flag(help: "Write the file with the empty password.") var noPassword = false
        @Option(help: "A file whose first line is the password of an encrypted --key (default: the p12 password).") var keyPasswordFile: String?
        @Flag(help: "3DES and a SHA-1 MAC, for consumers that accept nothing newer.") var legacy = false
        @Option(help: "The friendly name (default: the certificate's name).") var friendlyName: String?
        @Flag(help: "Overwrite --out when it exists.") var force = false
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            try CLI.reporting(json: json) {
                let password = try CLI.p12Password(file: passwordFile, noPassword: noPassword, required: true) ?? SecretBytes("")
                try CLI.refuseToOverwrite(out, force: force)
                let keyPassword = try keyPasswordFile.map(CLI.readPasswordFile) ?? password
                let given = try Identity(certificatePath: cert, keyPath: key, password: keyPassword)
                let extra = try chain.flatMap { try Certificate.load(path: $0) }
                let identity = extra.isEmpty ? given : try Identity(privateKey: given.privateKey, leaf: given.leaf,
                                                                    certificates: given.chain + given.extraCertificates + extra)
                var options: PKCS12ExportOptions = legacy ? .legacy : .modern
                options.friendlyName = friendlyName ?? identity.leaf.subjectSummary
                try FileIO.writeAtomically(out, try PKCS12.export(identity, password: password, options: options))
                if json {
                    return CLI.printJSON(["out": out, "leaf_sha256": identity.leaf.sha256Hex, "subject": identity.leaf.subject,
                                          "chain_count": identity.chain.count, "legacy": legacy])
                }
                print("wrote \(out): \(identity.leaf.subject) with \(identity.chain.count) chain certificate\(identity.chain.count == 1 ? "" : "s") (\(legacy ? "legacy 3DES/SHA-1" : "AES-256/SHA-256"))")
            }
        }
    }

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the identities and certificates in a PKCS#12 file.",
            discussion: """
            The password comes from --password-file (its first line; an empty file is the empty \
            password), or from the MTLS_P12_PASSWORD environment variable. --no-password opens \
            the file with no password at all, which PKCS#12 encodes differently from the empty \
            password; given either, both encodings are tried (as OpenSSL does) and the JSON key \
            password_encoding says which one opened the file ("empty" or "absent"; "given" for a \
            non-empty password). One of the three is required.
            """)

        @Argument(help: "The PKCS#12 file.") var file: String
        @Option(help: "A file whose first line is the password.") var passwordFile: String?
        @Flag(help: "Open the file with no password (not the same as the empty password).") var noPassword = false
        @Flag(help: "Machine-readable output.") var json = false

        func validate() throws {
            if passwordFile != nil && noPassword {
                throw ValidationError("--password-file and --no-password exclude each other")
            }
        }

        func run() throws {
            let contents = try CLI.reporting(json: json, errorName: P12JSON.errorName) {
                try PKCS12.load(path: file, password: try password())
            }
            if json {
                CLI.printJSON(P12JSON.object(contents))
            } else {
                print(P12JSON.text(contents))
            }
        }

        private func password() throws -> SecretBytes? {
            try CLI.p12Password(file: passwordFile, noPassword: noPassword, required: true)
        }
    }
}

/// The JSON and text forms of a PKCS#12 import (`mtls p12 inspect`).
enum P12JSON {
    static func object(_ c: PKCS12Contents) -> [String: Any] {
        [
            "identities": c.identities.map { id -> [String: Any] in
                [
                    "key_type": id.privateKey.keyType.shortName,
                    "leaf_sha256": id.leaf.sha256Hex,
                    "leaf_subject_cn": id.leaf.commonName ?? id.leaf.subject,
                    "chain_count": id.chain.count,
                    "friendly_name": id.friendlyName as Any? ?? NSNull(),
                ]
            },
            "certificates": c.certificates.map(CertJSON.object),
            // Which encoding opened the file: "given", or for no/empty password "empty" or "absent".
            "password_encoding": c.passwordEncoding.rawValue,
        ]
    }

    /// The `error` value. Failures of the PKCS#12 content keep the names DESIGN.md fixes for
    /// `p12 inspect` (a limit is an unsupported file, an unparsable structure a corrupt one);
    /// anything else — a missing or unreadable file, a usage error — is named by its own
    /// `MTLSError` code (`not_found`, `io`, `invalid_argument`), as every other command names it.
    static func errorName(_ error: Error) -> String {
        guard let e = error as? MTLSError else { return CLI.errorName(error) }
        switch e.code {
        case .badPassword: return "bad_password"
        case .corrupt, .parse: return "corrupt"
        case .notPKCS12: return "not_pkcs12"
        case .noIdentity: return "no_identity"
        case .unsupported, .limitExceeded: return "unsupported"
        case .keyMismatch: return "key_mismatch"
        default: return e.code.name
        }
    }

    static func text(_ c: PKCS12Contents) -> TerminalText {
        var lines: [TerminalText] = []
        lines.append("\(c.identities.count) identit\(c.identities.count == 1 ? "y" : "ies"), \(c.certificates.count) certificate\(c.certificates.count == 1 ? "" : "s")")
        for (i, id) in c.identities.enumerated() {
            let e = id.chainEvaluation
            lines.append("")
            lines.append("Identity #\(i + 1)\(id.friendlyName.map { " \"\($0)\"" } ?? "")")
            lines.append("  Key:           \(id.privateKey.keyType.shortName)")
            lines.append("  Leaf:          \(id.leaf.subject)")
            lines.append("  Leaf SHA-256:  \(id.leaf.sha256Hex)")
            for (j, cert) in id.chain.enumerated() { lines.append("  Chain[\(j)]:      \(cert.subject)") }
            if let kid = id.localKeyID { lines.append("  Local key id:  \(kid.map { String(format: "%02x", $0) }.joined())") }
            lines.append("  Chain check:   \(e.verified ? "verified" : "not verified: \(e.message)")\(e.reachesSelfSignedRoot ? "" : ", incomplete (no self-signed root)")")
        }
        for (i, cert) in c.certificates.enumerated() {
            lines.append("")
            lines.append("Certificate #\(i + 1)")
            lines += CertJSON.lines(cert).map { "  \($0)" }
        }
        return TerminalText.joined(lines, separator: "\n")
    }
}
