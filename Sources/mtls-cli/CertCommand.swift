import ArgumentParser
import Foundation
import MTLS

/// `mtls cert show FILE [--json]`
struct CertCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cert", abstract: "Read certificates.", subcommands: [Show.self])

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show every certificate in a DER, PEM or PKCS#7 file.")

        @Argument(help: "The certificate file.") var file: String
        @Flag(help: "Machine-readable output.") var json = false

        func run() throws {
            let certs = try CLI.reporting(json: json) { try Certificate.load(path: file) }
            if json {
                CLI.printJSON(certs.map(CertJSON.object))
            } else {
                for (i, c) in certs.enumerated() {
                    if i > 0 { print("") }
                    print(CertJSON.text(c))
                }
            }
        }
    }
}

/// The JSON and text forms of a certificate, shared by every command that prints one.
enum CertJSON {
    static func object(_ c: Certificate) -> [String: Any] {
        var o: [String: Any] = [
            "subject": c.subject,
            "issuer": c.issuer,
            "subject_cn": c.commonName as Any? ?? NSNull(),
            "serial": c.serialHex,
            "not_before": CLI.rfc3339(c.notBefore),
            "not_after": CLI.rfc3339(c.notAfter),
            "sans": c.subjectAltNames.map { $0.description },
            "key_type": c.keyType.shortName,
            "key_bits": c.keyType.bits,
            "signature_algorithm": c.signatureAlgorithm,
            "sha256": c.sha256Hex,
            "spki_sha256": c.spkiSHA256Hex,
            "spki_pin": c.spkiPin,
            "self_signed": c.isSelfSigned,
        ]
        if let bc = c.basicConstraints {
            o["basic_constraints"] = ["ca": bc.isCA, "path_len": bc.pathLength as Any? ?? NSNull(), "critical": bc.critical]
        } else { o["basic_constraints"] = NSNull() }
        o["key_usage"] = c.keyUsage.map { $0.names } as Any? ?? NSNull()
        o["extended_key_usage"] = c.extendedKeyUsages.map { $0.map(ExtendedKeyUsage.name(of:)) } as Any? ?? NSNull()
        return o
    }

    /// The text form, one line per field (every field cleaned: a name can hold anything).
    static func text(_ c: Certificate) -> TerminalText { TerminalText.joined(lines(c), separator: "\n") }

    /// The lines of ``text(_:)``.
    static func lines(_ c: Certificate) -> [TerminalText] {
        var lines: [TerminalText] = [
            "Subject:     \(c.subject)",
            "Issuer:      \(c.issuer)",
            "Serial:      \(c.serialHex)",
            "Valid:       \(CLI.rfc3339(c.notBefore)) to \(CLI.rfc3339(c.notAfter))",
            "Key:         \(c.keyType.shortName)",
            "Signature:   \(c.signatureAlgorithm)",
        ]
        let sans = c.subjectAltNames
        if !sans.isEmpty { lines.append("SANs:        \(sans.map { $0.description }.joined(separator: ", "))") }
        if let bc = c.basicConstraints {
            lines.append("CA:          \(bc.isCA)\(bc.pathLength.map { " (pathlen \($0))" } ?? "")")
        }
        if let ku = c.keyUsage { lines.append("Key usage:   \(ku.names.joined(separator: ", "))") }
        if let eku = c.extendedKeyUsages { lines.append("EKU:         \(eku.map(ExtendedKeyUsage.name(of:)).joined(separator: ", "))") }
        lines.append("SHA-256:     \(c.sha256Hex)")
        lines.append("SPKI pin:    \(c.spkiPin)")
        return lines
    }
}
