import ArgumentParser
import Foundation
import MTLS

/// `mtls verify`: evaluates a chain with a trust policy.
struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Decide whether a certificate chain is trusted (exit status 1 when it is not)."
    )

    @Argument(help: "The peer's chain (PEM, DER or PKCS#7), leaf first.")
    var chain: String
    @Option(help: "The host name or IP address (optionally :port) the peer was reached as; without it the name is not checked.")
    var host: String?
    @Option(help: "server or client.")
    var purpose: String?
    @Option(help: "A trust policy JSON file (see README, \"Trust policies\").")
    var policy: String?
    @Option(name: .customLong("anchor"), help: "A file of anchor certificates, or a stored certificate's label (LABEL with --store, or store:LABEL); repeatable.")
    var anchors: [String] = []
    // curl's name for the same idea (as in `connect`): hidden, and never taken for --cert.
    @Option(name: .customLong("cacert"), help: ArgumentHelp("curl's name of --anchor.", visibility: .hidden)) var cacert: [String] = []
    @Option(help: "A credential store holding anchors named by label (default $MTLS_STORE); must exist.")
    var store: String?
    @Option(help: "File with the store secret (default $MTLS_STORE_SECRET_FILE).")
    var secretFile: String?
    @Flag(help: "Never trust the system store (the default once anchors are given).")
    var anchorsOnly = false
    @Flag(help: "Trust the system store as well as the anchors (--anchor, the policy's); without it anchors are the only ones trusted.")
    var systemAnchors = false
    @Option(help: "Validate the certificate as this name, over the policy's and its rule's verify-as (the host and port still select the host rule).")
    var verifyAs: String?
    @Option(name: .customLong("pin"), help: "An SPKI pin sha256/BASE64 (repeatable); always enforced, on top of the policy and its host rule.")
    var pins: [String] = []
    @OptionGroup(title: "Who may connect (a trusted peer must match one entry)") var allow: PeerAllowOptions
    @Option(help: "Evaluation time, RFC 3339.")
    var at: String?
    @Option(help: PolicyBuilder.revocationHelp)
    var revocation: String?
    @Option(help: PolicyBuilder.revocationMaxAgeHelp)
    var revocationMaxAge: Int64?
    @Flag(help: "Print the evaluation as JSON.")
    var json = false

    func run() throws {
        let result: TrustResult
        var usedPolicy: TrustPolicy?
        do {
            let certs = try Certificate.load(path: chain)
            let peer = host.map { TrustPeer(hostText: $0) }
            if verifyAs != nil && host == nil { throw MTLSError(.invalidArgument, "--verify-as needs --host (the peer reached)") }
            let p = try PolicyBuilder.policy(file: policy, revocation: revocation, revocationMaxAge: revocationMaxAge)
            // The flags are overrides the library composes on top of the policy and of the rule
            // the host selects; they are never merged into the policy's rules.
            let overrides = try PolicyBuilder.overrides(anchors: anchors + cacert, anchorsOnly: anchorsOnly, systemAnchors: systemAnchors, pins: pins,
                                                           verifyAs: verifyAs, allow: allow) {
                try IdentityOptions.openExistingStore(path: store, secretFile: secretFile)
            }
            usedPolicy = p
            var purposeValue: TrustPurpose? = nil
            if let purpose {
                guard let v = TrustPurpose(rawValue: purpose) else { throw MTLSError(.invalidArgument, "--purpose must be server or client") }
                purposeValue = v
            }
            let time = try at.map { try CLI.parseRFC3339($0) }
            // Without --host the caller asks for no name check, as documented.
            if host == nil { p.nameCheck = .none }
            if !json { for w in p.warnings { CLI.printError("warning: \(w)") } }
            result = p.evaluate(chain: certs, peer: peer ?? TrustPeer(), purpose: purposeValue, at: time, overrides: overrides)
        } catch {
            throw CLI.fail(error)
        }
        if json {
            var o = TrustJSON.object(result)
            o["rule"] = PolicyBuilder.ruleJSON(usedPolicy, result)
            o["pin"] = result.matchedPin.map { $0 as Any } ?? NSNull()
            CLI.printJSON(o)
        } else {
            if result.trusted { print("trusted") } else { print("NOT trusted (\(result.kind.rawValue))") }
            for r in result.reasons { print("  \(r)") }
            for w in result.warnings { print("  warning: \(w)") }
            for c in result.revocation?.checks ?? [] {
                let from = (c.url ?? c.source).map { " from \($0)" } ?? ""
                print("  revocation [\(c.certIndex)] \(c.status.rawValue)\(from)\(c.fetchedFrom.map { " (\($0))" } ?? "")")
            }
            for (i, c) in result.chain.enumerated() { print("  [\(i)] \(c.subjectSummary)  sha256=\(c.sha256Hex)") }
            if let r = result.matchedRule { print("  rule: \(r)") }
            if let p = result.matchedPin { print("  pin: \(p)") }
        }
        if !result.trusted { throw ExitCode(1) }
    }
}

/// The JSON form of an evaluation, shared by `verify`, `connect` and `limbo`.
enum TrustJSON {
    static func object(_ r: TrustResult) -> [String: Any] {
        [
            "trusted": r.trusted,
            "kind": r.kind.rawValue,
            "reasons": r.reasons.map { reason -> [String: Any] in
                ["code": reason.code, "cert_index": reason.certIndex.map { $0 as Any } ?? NSNull(), "message": reason.message]
            },
            "chain": r.chain.map(\.sha256Hex),
            "provenance": provenance(r),
            "warnings": r.warnings,
            "revocation": revocation(r),
        ]
    }

    /// What revocation checking did (``RevocationReport/jsonText``); null when it was off.
    static func revocation(_ r: TrustResult) -> Any {
        guard let text = r.revocation?.jsonText,
              let o = try? JSONSerialization.jsonObject(with: Data(text.utf8)) else { return NSNull() }
        return o
    }

    /// Where each decision came from (``TrustProvenance/jsonText``), as a JSON object; null when
    /// no evaluation could be made.
    static func provenance(_ r: TrustResult) -> Any {
        guard let text = r.provenance?.jsonText,
              let o = try? JSONSerialization.jsonObject(with: Data(text.utf8)) else { return NSNull() }
        return o
    }
}

/// `mtls limbo`: runs an x509-limbo suite through libmtls's evaluator.
struct LimboCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "limbo",
        abstract: "Read an x509-limbo suite (limbo.json) on stdin, write a LimboResult JSON on stdout."
    )
    @Flag(help: "Machine-readable output (always: accepted as every command accepts it).") var json = false

    func run() throws {
        let input = FileHandle.standardInput.readDataToEndOfFile()
        guard let suite = try? JSONSerialization.jsonObject(with: input) as? [String: Any],
              let cases = suite["testcases"] as? [[String: Any]] else {
            let e = MTLSError(.parse, "stdin is not an x509-limbo suite")
            CLI.printJSON(["error": CLI.errorName(e), "message": e.message])
            throw CLI.fail(e)
        }
        var results: [[String: Any]] = []
        for tc in cases {
            let (actual, context) = Self.evaluate(tc)
            results.append(["id": tc["id"] as? String ?? "", "actual_result": actual, "context": context])
        }
        CLI.printJSON(["version": 1, "harness": "libmtls-\(MTLSVersion.string)", "results": results])
    }

    /// Evaluates one testcase from its inputs only (never its id, description or expected
    /// result). Features are used the way x509-limbo means them, to skip what a validator
    /// deliberately does differently: "rfc5280-incompatible-with-webpki" cases, where libmtls
    /// follows webpki, "pedantic-rfc5280" (an ambiguous reading libmtls does not take: an
    /// anchor is trusted as configured, so it needs no authority key identifier), and
    /// "pedantic-webpki-eku" cases whose leaf has no extendedKeyUsage
    /// (CA/B Forum 7.1.2.7.6 requires one; libmtls follows RFC 5280 and webpki: a leaf without
    /// the extension is good for every purpose, as private CAs and `openssl req -x509` make them).
    static func evaluate(_ tc: [String: Any]) -> (String, String) {
        let features = tc["features"] as? [String] ?? []
        if features.contains("rfc5280-incompatible-with-webpki") {
            return ("SKIPPED", "feature rfc5280-incompatible-with-webpki: libmtls follows webpki where the two differ")
        }
        if features.contains("pedantic-rfc5280") {
            return ("SKIPPED", "feature pedantic-rfc5280: an ambiguous reading of RFC 5280 libmtls does not take (a trust anchor is trusted as configured)")
        }
        if features.contains("pedantic-webpki-eku"), let pem = tc["peer_certificate"] as? String,
           let leaf = try? Certificate.parseAll(Array(pem.utf8)).first, leaf.extendedKeyUsages == nil {
            return ("SKIPPED", "feature pedantic-webpki-eku on a leaf without extendedKeyUsage: libmtls follows RFC 5280 (good for every purpose)")
        }
        let purpose: TrustPurpose
        switch tc["validation_kind"] as? String {
        case "SERVER": purpose = .serverAuth
        case "CLIENT": purpose = .clientAuth
        default: return ("SKIPPED", "unsupported validation kind")
        }
        let ekus = tc["extended_key_usage"] as? [String] ?? []
        let expressible = ekus.allSatisfy { $0 == (purpose == .serverAuth ? "serverAuth" : "clientAuth") }
        if !expressible { return ("SKIPPED", "required EKUs other than the purpose's are not expressible in a policy") }
        var host: String? = nil
        if let peer = tc["expected_peer_name"] as? [String: Any] {
            switch peer["kind"] as? String {
            case "DNS": host = peer["value"] as? String
            case "IP":
                guard let v = peer["value"] as? String else { return ("SKIPPED", "bad peer name") }
                host = v.contains(":") ? "[\(v)]" : v
            default: return ("SKIPPED", "RFC822 peer names are not supported (mTLS peers are named by DNS or IP)")
            }
        }
        do {
            func certs(_ key: String) throws -> [Certificate] {
                try (tc[key] as? [String] ?? []).flatMap { try Certificate.parseAll(Array($0.utf8)) }
            }
            guard let leafPEM = tc["peer_certificate"] as? String else { return ("FAILURE", "no peer certificate") }
            let leaf = try Certificate.parseAll(Array(leafPEM.utf8))
            let anchors = try certs("trusted_certs")
            let intermediates = try certs("untrusted_intermediates")
            let crls = try (tc["crls"] as? [String] ?? []).flatMap { try RevocationList.parseAll(Array($0.utf8)) }
            var time: Date? = nil
            if let t = tc["validation_time"] as? String { time = try CLI.parseRFC3339(t) }
            let policy = TrustPolicy(anchors: anchors, anchorsOnly: true, purpose: purpose,
                                     nameCheck: host == nil ? .none : .ssl, crls: crls, time: time,
                                     maxChainDepth: tc["max_chain_depth"] as? Int)
            let result = policy.evaluate(chain: leaf + intermediates, host: host, purpose: purpose)
            if result.trusted { return ("SUCCESS", "trusted; chain of \(result.chain.count)") }
            return ("FAILURE", result.reasons.map(\.description).joined(separator: "; "))
        } catch {
            return ("FAILURE", "input rejected: \(error)")
        }
    }
}
