import ArgumentParser
import Foundation
import MTLS

/// Who may connect, as flags (issue 39): the allow-lists of the library's trust policy
/// (``PeerAllowList``) on the certificate of the peer a command judges — the clients of
/// `mtls serve` (and of `mtls tunnel server`), the server of `mtls connect`. A peer whose chain is
/// trusted must match any one entry of any kind; the flags are one list, given as overrides on
/// top of the policy file's own `"allow"` (each list in force must be passed).
struct PeerAllowOptions: ParsableArguments {
    @Option(name: .customLong("allow-cn"), help: ArgumentHelp("Allow peers whose subject CN matches this pattern (exact, case-sensitive; * one .-separated segment, ** any number); repeatable. A peer passes with any one --allow-* entry.", valueName: "PATTERN"))
    var cn: [String] = []
    @Option(name: .customLong("allow-ou"), help: ArgumentHelp("Allow peers with a subject OU matching this pattern (as --allow-cn); repeatable.", valueName: "PATTERN"))
    var ou: [String] = []
    @Option(name: .customLong("allow-dns"), help: ArgumentHelp("Allow peers with a DNS SAN matching this pattern (case-insensitive; * one label, ** any number: **.example.com); repeatable.", valueName: "PATTERN"))
    var dns: [String] = []
    @Option(name: .customLong("allow-uri"), help: ArgumentHelp("Allow peers with a URI SAN matching this pattern, e.g. a SPIFFE ID spiffe://trust-domain/ns/*/sa/** (* one path segment, ** any number; the trust domain literal); repeatable.", valueName: "PATTERN"))
    var uri: [String] = []
    @Option(name: .customLong("allow-spki"), help: ArgumentHelp("Allow peers whose own key has this SPKI pin sha256/BASE64 (`mtls cert pin`); repeatable.", valueName: "PIN"))
    var spki: [String] = []
    @Option(name: .customLong("allow-issuer"), help: ArgumentHelp("Allow peers whose built chain goes through or ends at this CA (an intermediate or the anchor): a certificate file, a stored certificate's label (LABEL with a store, or store:LABEL), or its SHA-256 fingerprint in hex; repeatable.", valueName: "FILE|LABEL|SHA256"))
    var issuer: [String] = []

    /// True when no flag was given.
    var isEmpty: Bool { cn.isEmpty && ou.isEmpty && dns.isEmpty && uri.isEmpty && spki.isEmpty && issuer.isEmpty }

    /// The flags as one allow-list. A malformed pattern is an invalid argument naming its flag.
    func list(store: () throws -> CredentialStore?) throws -> PeerAllowList {
        var l = PeerAllowList()
        let given: [(PeerAllowList.Kind, [String])] = [(.cn, cn), (.ou, ou), (.dns, dns), (.uri, uri), (.spki, spki)]
        for (kind, values) in given {
            for v in values {
                do { try l.add(kind, v) } catch let e as MTLSError { throw MTLSError(.invalidArgument, "\(kind.flag): \(e.message)") }
            }
        }
        for v in issuer {
            if (try? l.add(.issuer, v)) != nil { continue }  // a SHA-256 fingerprint
            let certs: [Certificate]
            do { certs = try PolicyBuilder.anchorCertificates([v], store: store) } catch let e as MTLSError {
                throw MTLSError(e.code, "--allow-issuer \(v): \(e.message) (give a certificate file, a stored label or a SHA-256 fingerprint)")
            }
            for c in certs { l.add(issuer: c) }
        }
        return l
    }
}
