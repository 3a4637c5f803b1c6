import ArgumentParser
import Foundation
import MTLS

extension StoreCommand {
    /// `mtls store check [--days DAYS] [--json]`: the shape of `openssl x509 -checkend`.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Exit 1 when a certificate in the store expires within DAYS days (default 30; 0 when none does).",
            discussion: """
                Every certificate counts: identities and their chains, stored certificates, token \
                identities' certificates and chains (no private key is opened). Lists label, class, \
                subject, not_after and days left of each one that expires (expired ones included). \
                Exit status: 0 nothing expires within DAYS, 1 something does, 2 the store could not be read, \
                64 a bad argument (DAYS not a whole number of days, 0 or more).
                """)
        @OptionGroup var location: Location
        // Unconditional: `--days -1` is a negative count (refused as such below), not a missing value.
        @Option(name: .customLong("days"), parsing: .unconditional, help: "Days from now (a whole number, 0 or more; default \(Self.defaultDays)).")
        var days: Int?
        // The name before 0.3.0, kept for scripts: a number of days is --days in every command.
        @Option(name: .customLong("within"), parsing: .unconditional, help: ArgumentHelp("The old name of --days.", visibility: .hidden))
        var oldWithin: Int?

        static let defaultDays = 30

        func validate() throws {
            if days != nil && oldWithin != nil { throw ValidationError("give --days once (--within is its old name)") }
        }
        @Flag(help: "Machine-readable output: {\"within_days\": n, \"expiring\": [{label, class, subject, sha256, position, not_after, days_left}]}.") var json = false

        func run() throws {
            let within = days ?? oldWithin ?? Self.defaultDays
            guard within >= 0 else { throw ValidationError("\(oldWithin != nil ? "--within" : "--days") must be 0 or more days") }
            let now = Date()
            let items: [StoreExpiryItem]
            do {
                items = try CLI.reporting(json: json) { try location.open().expiring(withinDays: within, at: now) }
            } catch {
                throw ExitCode(2)
            }
            if json {
                CLI.printJSON(["within_days": within, "expiring": items.map { i -> [String: Any] in
                    ["label": i.label, "class": i.itemClass.name, "subject": i.subject, "sha256": i.sha256,
                     "position": i.position, "not_after": CLI.rfc3339(i.notAfter), "days_left": i.daysLeft(at: now)]
                }])
            } else if items.isEmpty {
                print("nothing expires within \(within) days")
            } else {
                for i in items {
                    print("\(i.label)\t\(i.itemClass.name)\t\(i.subject)\t\(CLI.rfc3339(i.notAfter))\t\(i.daysLeft(at: now)) days left")
                }
            }
            if !items.isEmpty { throw ExitCode(1) }
        }
    }

    /// `mtls store metrics`: Prometheus text exposition of every stored certificate's validity.
    struct Metrics: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the store's certificates' validity as Prometheus text.",
            discussion: """
                Per certificate: mtls_certificate_not_after_seconds{label,class,subject,sha256} and \
                mtls_certificate_not_before_seconds{...}, in seconds since 1970.
                """)
        @OptionGroup var location: Location
        @Flag(help: "Machine-readable output instead: [{label, class, subject, sha256, position, not_before, not_after}].") var json = false

        func run() throws {
            if json {
                let items = try CLI.reporting(json: true) { try location.open().itemCertificates() }
                return CLI.printJSON(items.flatMap { item in
                    item.certificates.enumerated().map { (n, c) -> [String: Any] in
                        ["label": item.info.label, "class": item.info.itemClass.name, "subject": c.subject, "sha256": c.sha256Hex,
                         "position": n, "not_before": CLI.rfc3339(c.notBefore), "not_after": CLI.rfc3339(c.notAfter)]
                    }
                })
            }
            let text = try CLI.reporting { try location.open().prometheusMetrics() }
            print(TerminalText(lines: text), terminator: "")
        }
    }
}
