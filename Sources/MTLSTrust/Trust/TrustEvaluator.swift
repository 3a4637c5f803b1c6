internal import COpenSSL
import FoundationEssentials

extension TrustPolicy {
    /// Decides whether `chain` (the peer's certificates, leaf first; the rest may be unordered,
    /// incomplete or padded with unrelated certificates) is trusted for `peer` under this policy.
    ///
    /// - Parameters:
    ///   - peer: the peer as the application reached it. Its host and port select the host rule
    ///     (most specific first). No host: no host rule applies.
    ///   - purpose: server or client authentication; nil uses the policy's ``purpose``.
    ///   - at: the evaluation time; nil uses the policy's ``time`` or else now.
    ///   - overrides: what this connection or call adds (see ``TrustOverrides``).
    ///
    /// The policy in force for the peer is composed here, in one place, as a value made for this
    /// evaluation (the policy object is never changed): the policy's defaults, then the host rule
    /// selected by the peer's host and port (never by a verify-as), then the policy-wide
    /// ``pins`` and ``verifyAs``, then the overrides. The name checked is the overrides'
    /// verify-as, else the policy-wide one, else the rule's (or none with its skip_name_check),
    /// else the peer's ``TrustPeer/verifyAs``, else (servers) its host. Anchors are the rule's
    /// own, else the policy's, plus the overrides'. Every set of pins in force must be matched:
    /// the rule's (as the rule says: report-only, expiry), the policy-wide ones and the
    /// overrides' (always enforced). The result's ``TrustResult/provenance`` says where each
    /// decision came from. A server evaluated with no name to check under a policy whose
    /// ``TrustPolicy/nameCheck`` is `.ssl` is untrusted with reason `no_peer_name` (fail closed).
    ///
    /// Path building and signature checks are OpenSSL's `X509_verify_cert`; when the chain it
    /// builds first fails, the other candidate paths are tried (`PathBuilder`), each decided by
    /// OpenSSL. The checks OpenSSL does not make are libmtls's `ChainCheck`s, applied to each
    /// chain OpenSSL built. Never throws: every problem is a ``TrustReason``.
    /// `stapledOCSP`: the OCSP response the peer stapled (DER), checked first when the revocation
    /// sources in force include OCSP.
    public func evaluate(chain: [Certificate], peer: TrustPeer, purpose: TrustPurpose? = nil, at: Date? = nil,
                         overrides: TrustOverrides? = nil, stapledOCSP: [UInt8]? = nil) -> TrustResult {
        do {
            return try evaluate(ders: chain.map(\.der), parse: { chain }, peer: peer, purpose: purpose, at: at, overrides: overrides,
                                stapledOCSP: stapledOCSP)
        } catch {
            // Unreachable: the certificates are already parsed.
            return TrustResult.fatal(TrustReason.Code.verificationError, "\(error)")
        }
    }

    /// Same as ``evaluate(chain:peer:purpose:at:overrides:stapledOCSP:)`` with the peer written as text: `host`,
    /// `host:port`, `[v6]:port` (see ``TrustPeer/init(hostText:)``).
    public func evaluate(chain: [Certificate], host: String?, purpose: TrustPurpose? = nil, at: Date? = nil,
                         overrides: TrustOverrides? = nil) -> TrustResult {
        evaluate(chain: chain, peer: TrustPeer(hostText: host), purpose: purpose, at: at, overrides: overrides)
    }

    /// Same as ``evaluate(chain:peer:purpose:at:overrides:stapledOCSP:)`` for certificates given as DER, as they come
    /// off the wire. A chain evaluated recently under the same policy version (and the same
    /// overrides) is answered from the cache without being parsed at all. Throws
    /// ``MTLSError/Code/parse`` when a certificate does not parse (and is not in the cache).
    public func evaluate(derChain: [[UInt8]], peer: TrustPeer, purpose: TrustPurpose? = nil, at: Date? = nil,
                         overrides: TrustOverrides? = nil) throws -> TrustResult {
        try evaluate(ders: derChain, parse: { try derChain.map { try Certificate(der: $0) } }, peer: peer, purpose: purpose, at: at,
                     overrides: overrides)
    }

    /// ``evaluate(derChain:peer:purpose:at:overrides:)`` with the peer as text (`host[:port]`).
    public func evaluate(derChain: [[UInt8]], host: String?, purpose: TrustPurpose? = nil, at: Date? = nil,
                         overrides: TrustOverrides? = nil) throws -> TrustResult {
        try evaluate(derChain: derChain, peer: TrustPeer(hostText: host), purpose: purpose, at: at, overrides: overrides)
    }

    private func evaluate(ders: [[UInt8]], parse: () throws -> [Certificate], peer: TrustPeer, purpose: TrustPurpose?,
                          at: Date?, overrides: TrustOverrides?, stapledOCSP: [UInt8]? = nil,
                          skipRevocation: Bool = false) throws -> TrustResult {
        try evaluateStanding(ders: ders, parse: parse, peer: peer, purpose: purpose, at: at, overrides: overrides,
                             stapledOCSP: stapledOCSP, skipRevocation: skipRevocation, wantStanding: false).result
    }

    /// The one entry point of the TLS layer (the handshake's verification, the TLS 1.2 staple
    /// check, the re-check before a session resumes): ``evaluate(chain:peer:purpose:at:overrides:stapledOCSP:)``
    /// of the chain the peer presented, at the policy's time, with the connection's overrides
    /// and the peer's staple, and how long its answer stands (``EvaluationStanding``): what a
    /// TLS session keeps so that the re-check before it resumes is a comparison, not an
    /// evaluation (``ResumptionRecord``). `deferRevocation`: the path now, revocation later (a
    /// TLS 1.2 server's stapled OCSP response arrives after its certificate; the handshake's
    /// status callback checks again with it), and no standing. `withStanding` false: the answer
    /// alone.
    package func verifyPeer(chain: [Certificate], peer: TrustPeer, purpose: TrustPurpose, overrides: TrustOverrides?,
                            stapledOCSP: [UInt8]? = nil, deferRevocation: Bool = false,
                            withStanding: Bool = true) -> (result: TrustResult, standing: EvaluationStanding?) {
        do {
            return try evaluateStanding(ders: chain.map(\.der), parse: { chain }, peer: peer, purpose: purpose, at: nil,
                                        overrides: overrides, stapledOCSP: stapledOCSP, skipRevocation: deferRevocation,
                                        wantStanding: withStanding && !deferRevocation)
        } catch {
            // Unreachable: the certificates are already parsed.
            return (TrustResult.fatal(TrustReason.Code.verificationError, "\(error)"), nil)
        }
    }

    private func evaluateStanding(ders: [[UInt8]], parse: () throws -> [Certificate], peer: TrustPeer, purpose: TrustPurpose?,
                                  at: Date?, overrides: TrustOverrides?, stapledOCSP: [UInt8]?,
                                  skipRevocation: Bool = false, wantStanding: Bool) throws -> (result: TrustResult, standing: EvaluationStanding?) {
        let settings: Settings, compiled: CompiledPolicy, version: UInt64
        do {
            (settings, compiled, version) = try snapshot()
        } catch {
            let code = (error as? MTLSError)?.code == .invalidPolicy ? TrustReason.Code.invalidPolicy : TrustReason.Code.verificationError
            return (TrustResult.fatal(code, (error as? MTLSError)?.message ?? "\(error)"), nil)
        }
        let purpose = purpose ?? settings.purpose
        let time = Date(timeIntervalSince1970: ((at ?? settings.time ?? Date()).timeIntervalSince1970).rounded(.down))
        guard !ders.isEmpty else {
            return (TrustResult.fatal(TrustReason.Code.emptyChain, "no certificate was presented"), nil)
        }
        // Rules are written in A-labels: a host in Unicode could select a wider rule than its own.
        if !settings.hostRules.isEmpty, let host = peer.host, host.unicodeScalars.contains(where: { !$0.isASCII }) {
            return (TrustResult.fatal(TrustReason.Code.invalidHost, "the host \"\(host)\" is not ASCII, so its host rule cannot be chosen: name an internationalised host by its A-label (xn--...), as certificates and host rules do"), nil)
        }
        // A `%` that is no IPv6 zone (`name%eth0`, `10.0.0.1%1`): no rule can be chosen for the
        // host, and the resolver may still reach an address some rule is about.
        if !settings.hostRules.isEmpty, peer.hasUnmatchableZone, let host = peer.host {
            return (TrustResult.fatal(TrustReason.Code.invalidHost, "the host \"\(host)\" has a zone (%...) but is not an IPv6 address with an interface name or index, so its host rule cannot be chosen"), nil)
        }
        let overrides = overrides.flatMap { $0.isEmpty ? nil : $0 }
        if let overrides {
            do { try overrides.validate() } catch {
                return (TrustResult.fatal(TrustReason.Code.invalidPolicy, (error as? MTLSError)?.message ?? "\(error)"), nil)
            }
        }
        let rule = Self.rule(for: peer, in: settings.hostRules)
        // A CRL file past its nextUpdate is reported (once per staleness), cached answer or not.
        if !settings.crls.isEmpty { RevocationEvents.staleFiles(settings.crls, time: time, maxAge: settings.revocationFetch.maxAge, events: events) }

        let key = EvaluationCache.Key(chain: ders, peer: peer, overrides: overrides?.cacheKey, purpose: purpose, version: version,
                                      second: Int64(time.timeIntervalSince1970))
        var result: TrustResult
        var window: ClosedRange<Date>? = nil
        var memoized = false
        let revocation = skipRevocation ? RevocationSettings.off : EffectivePolicy.revocation(settings: settings, rule: rule)
        let generation = CRLStore.generation.load(ordering: .acquiring)
        // A warm revocation cache: the outcome found last time stands while nothing it was made
        // from changed (a staple is always looked at).
        if settings.cacheEnabled,
           let cached = cache.lookup(key, memo: revocation.mode != .off && stapledOCSP == nil ? generation : nil, at: time) {
            result = cached.result
            window = cached.window
            memoized = cached.memoized
        } else {
            let chain = try parse()
            let effective = EffectivePolicy(settings: settings, rule: rule, peer: peer, purpose: purpose, overrides: overrides)
            let evaluation: Evaluation
            do {
                evaluation = try Evaluation(settings: settings, compiled: compiled, chain: chain, peer: peer,
                                            effective: effective, purpose: purpose, time: time)
            } catch {
                return (TrustResult.fatal(TrustReason.Code.invalidPolicy, (error as? MTLSError)?.message ?? "\(error)", matchedRule: rule?.pattern.text), nil)
            }
            result = evaluation.run()
            if settings.cacheEnabled || wantStanding { window = evaluation.stableWindow(built: result.chain) }
            if settings.cacheEnabled { cache.store(key, result, stableUntil: window) }
        }
        // Revocation is checked after the (cached) path decision, on every evaluation that found
        // no memoized outcome: its answer changes with the CRLs, which have their own cache
        // (CRLStore). Only a trusted chain is checked: an untrusted one is refused anyway.
        // An answer that revocation or a report handler takes part in does not stand (for a
        // session's re-check before it resumes): it is made again.
        if revocation.mode != .off { window = nil }
        if revocation.mode != .off, result.trusted, !memoized {
            let outcome = RevocationChecker.check(built: result.chain, settings: revocation, options: settings.revocationFetch,
                                                  crlFiles: settings.crls, stapled: stapledOCSP, time: time,
                                                  events: events)
            result = result.with(revocation: outcome)
            if settings.cacheEnabled, stapledOCSP == nil, let until = RevocationChecker.memoizableUntil(outcome.report) {
                cache.memoize(key, EvaluationCache.RevocationMemo(generation: generation, until: until, result: result))
            }
        }
        if let rule, rule.enforcement == .reportOnly, let handler = settings.reportHandler, !result.reportedReasons.isEmpty {
            handler(TrustReport(host: peer.host == nil ? nil : peer.description, rule: rule.pattern.text,
                                reasons: result.reportedReasons, chain: result.chain))
            window = nil
        }
        guard wantStanding, let window else { return (result, nil) }
        return (result, EvaluationStanding(window: window, fixedTime: at == nil && settings.time != nil))
    }
}

/// A name or IP address a certificate must carry, normalised.
struct PeerHost {
    var name: String?
    var ip: [UInt8]?
    var text: String?

    init(_ host: String?) {
        guard let host, !host.isEmpty else { return }
        let h = HostLiteral.unbracketed(host)
        text = h
        if let scoped = IPAddress.scoped(h) { ip = scoped.address } else {  // a zone names a link, not the certificate's address
            let n = h.lowercased()
            name = n.hasSuffix(".") ? String(n.dropLast()) : n
        }
    }
}

/// One evaluation: OpenSSL path validation, then the policy layer, then pins.
package struct Evaluation {
    let settings: TrustPolicy.Settings
    let compiled: CompiledPolicy
    let chain: [Certificate]
    let peer: TrustPeer
    /// The policy in force for this peer (defaults, rule, policy-wide settings, overrides).
    let effective: EffectivePolicy
    let purpose: TrustPurpose
    let time: Date
    /// The OpenSSL store that applies.
    let store: OpaquePointer
    /// Owns ``store`` when the overrides needed one of their own.
    private let ownedStore: OwnedStore?

    init(settings: TrustPolicy.Settings, compiled: CompiledPolicy, chain: [Certificate], peer: TrustPeer,
         effective: EffectivePolicy, purpose: TrustPurpose, time: Date) throws {
        self.settings = settings
        self.compiled = compiled
        self.chain = chain
        self.peer = peer
        self.effective = effective
        self.purpose = purpose
        self.time = time
        let rule = effective.rule
        if effective.overridesTrust {
            let systemToo = !effective.anchorsOnly && (purpose == .serverAuth || settings.systemAnchorsForClients)
            let owned = try compiled.overrideStore(anchors: effective.anchors, anchorsOnly: !systemToo)
            ownedStore = owned
            store = owned.store
        } else if purpose == .clientAuth {
            ownedStore = nil
            store = rule.flatMap { compiled.clientRuleStores[$0.pattern.text] } ?? compiled.clientDefaultStore
        } else {
            ownedStore = nil
            store = rule.flatMap { compiled.ruleStores[$0.pattern.text] } ?? compiled.defaultStore
        }
    }

    /// The host rule that applies.
    var rule: HostRule? { effective.rule }
    /// The name (or IP) the certificate must carry, or nil for no name check.
    var reference: PeerHost? { effective.reference }

    /// The anchors that apply: the rule's own, else the policy's, and the overrides'.
    var anchorsInUse: [Certificate] { effective.anchors }
    /// Whether the system store is part of ``store``.
    var usesSystemStore: Bool {
        !effective.anchorsOnly && (purpose == .serverAuth || settings.systemAnchorsForClients)
    }

    /// The interval around the evaluation time in which the answer cannot change: no validity
    /// boundary of a presented, built or configured anchor certificate and no pin expiry falls
    /// inside it. nil (do not cache) with CRLs, whose own dates would matter too.
    func stableWindow(built: [Certificate]) -> ClosedRange<Date>? {
        if !settings.crls.isEmpty { return nil }
        var lo = Date.distantPast, hi = Date.distantFuture
        func edge(_ d: Date) {
            if d <= time { lo = max(lo, d) } else { hi = min(hi, d) }
        }
        // The anchors in force are the policy's unless a rule or the overrides brought others.
        let anchors = rule?.anchors != nil || effective.overridesTrust ? settings.anchors + effective.anchors : settings.anchors
        for c in chain + built + anchors {
            edge(c.notBefore)
            edge(c.notAfter.addingTimeInterval(1))
        }
        if let e = rule?.pinsExpire { edge(e) }
        return lo...hi.addingTimeInterval(-1)
    }

    /// Evaluates: OpenSSL's first chain, and when it fails, the other candidate paths
    /// (`PathBuilder`), keeping the best failure's reasons when none is trusted.
    func run() -> TrustResult {
        let first = attempt(untrusted: Array(chain.dropFirst()), store: store)
        if first.trusted { return first }
        // A problem of the leaf itself (its name, dates, EKU, key...) fails every path: no search.
        if first.reasons.contains(where: { ($0.certIndex == 0 || $0.certIndex == nil) && Self.pathIndependentCodes.contains($0.code) }) {
            return first
        }
        return PathBuilder(evaluation: self, first: first).search()
    }

    /// Reasons about the leaf that no other path can change.
    static let pathIndependentCodes: Set<String> = {
        typealias C = TrustReason.Code
        return [C.nameMismatch, C.noPeerName, C.invalidHost, C.expired, C.notYetValid, C.wrongPurpose, C.ekuInvalid,
                C.sanMissing, C.sanInvalid, C.caAsLeaf, C.commonNameMismatch, C.weakKey, C.keyForbidden,
                C.serialNumberInvalid, C.versionUnsupported, C.validityEncoding, C.extensionInvalid,
                C.wildcardPublicSuffix, C.emptyChain, C.invalidPolicy]
    }()

    /// A server must be checked against a name under the SSL name check; with no name given the
    /// check would silently not happen, so the evaluation fails instead.
    var missingPeerName: TrustReason? {
        guard purpose == .serverAuth, !effective.nameCheckOff, reference == nil else { return nil }
        return TrustReason(code: TrustReason.Code.noPeerName, certIndex: nil,
                           message: "no host name or IP address to check the server certificate against: " +
                               "set one (SSL_set1_host or SNI on an application's SSL, the host or verify-as of " +
                               "an evaluation or connection) or use a policy with name check none")
    }

    /// One verification: `X509_verify_cert` with exactly `untrusted` as the intermediates it may
    /// use and `store` as its anchors, then the policy checks and pins on the chain it built.
    func attempt(untrusted: [Certificate], store: OpaquePointer) -> TrustResult {
        var openSSLReasons: [TrustReason] = []
        let ref = reference
        let built = verifyWithOpenSSL(untrustedCerts: untrusted, store: store, reference: ref, reasons: &openSSLReasons)
        let x509s = built.map(\.x509)
        let ctx = CheckContext(chain: x509s, purpose: purpose, reference: ref, settings: settings,
                               topIsAnchor: openSSLReasons.isEmpty || built.count > 0 && isAnchor(built.last!),
                               crls: settings.crls)
        var policyReasons: [TrustReason] = missingPeerName.map { [$0] } ?? []
        for check in ChainCheck.all {
            policyReasons.append(contentsOf: check.run(ctx))
        }
        var reasons = Self.deduplicated(openSSL: openSSLReasons, policy: policyReasons).map(inPolicyTerms)
        var enforced = reasons
        // Each set of pins in force is checked on its own (a report-only rule's failure must not
        // hide, or be merged with, the failure of pins that are always enforced).
        var matchedPin: String? = nil
        var reported: [TrustReason] = []
        var pinSets: [TrustProvenance.PinSet] = []
        for requirement in effective.pinRequirements {
            let (pin, pinReasons, enforcedSet) = checkPins(requirement, built)
            if let pin { matchedPin = pin }
            reasons += pinReasons
            if enforcedSet { enforced += pinReasons } else { reported += pinReasons }
            pinSets.append(TrustProvenance.PinSet(source: requirement.source, enforced: enforcedSet, matched: pin))
        }
        // Who may connect: judged once the chain is trusted (an untrusted one is refused anyway),
        // each allow-list in force on its own.
        if enforced.isEmpty, let leaf = built.first ?? chain.first {
            let role = purpose == .clientAuth ? "the client" : "the server"
            for requirement in effective.allowRequirements where requirement.list.firstMatch(leaf: leaf, built: built) == nil {
                let r = TrustReason(code: TrustReason.Code.notAllowed, certIndex: 0,
                                    message: requirement.list.refusal(leaf: leaf, built: built, role: role, whose: requirement.whose))
                reasons.append(r)
                enforced.append(r)
            }
        }
        let kind: TrustResultKind
        if enforced.isEmpty { kind = .proceed }
        else if enforced.allSatisfy({ TrustReason.recoverableCodes.contains($0.code) }) { kind = .recoverableFailure }
        else { kind = .fatalFailure }
        let provenance = TrustProvenance(rule: rule?.pattern.text, anchors: effective.anchorSources,
                                         anchorsOnly: !usesSystemStore, anchorsOnlySource: effective.anchorsOnlySource,
                                         name: effective.referenceText, nameSource: effective.nameSource, pins: pinSets)
        return TrustResult(trusted: enforced.isEmpty, kind: kind, reasons: reasons, chain: built,
                           matchedRule: rule?.pattern.text, matchedPin: matchedPin, provenance: provenance,
                           reportedReasons: reported)
    }

    /// One reason per failure: OpenSSL and the policy layer may both report the same problem for
    /// the same certificate (an EKU without the purpose is OpenSSL's error 26 and libmtls's EKU
    /// check). Reasons with the same code and certificate index are merged at the place of the
    /// first, keeping the policy layer's message (it names what is wrong) over OpenSSL's generic one.
    package static func deduplicated(openSSL: [TrustReason], policy: [TrustReason]) -> [TrustReason] {
        struct Key: Hashable { let code: String; let certIndex: Int? }
        var out: [(reason: TrustReason, isPolicy: Bool)] = []
        var position: [Key: Int] = [:]
        for (r, isPolicy) in openSSL.map({ ($0, false) }) + policy.map({ ($0, true) }) {
            let key = Key(code: r.code, certIndex: r.certIndex)
            guard let i = position[key] else {
                position[key] = out.count
                out.append((r, isPolicy))
                continue
            }
            if isPolicy && !out[i].isPolicy { out[i] = (r, true) }
        }
        return out.map(\.reason)
    }

    /// A chain that reaches no anchor says so in the policy's own terms first (which anchors it
    /// is not issued under: the client anchor "Customer A", the anchors of host rule X), then in
    /// OpenSSL's.
    func inPolicyTerms(_ r: TrustReason) -> TrustReason {
        if r.code == TrustReason.Code.nameMismatch, let leaf = chain.first {
            return TrustReason(code: r.code, certIndex: r.certIndex, message: r.message + Self.nameMismatchHint(leaf))
        }
        guard r.code == TrustReason.Code.untrustedRoot || r.code == TrustReason.Code.unknownIssuer else { return r }
        let anchors = anchorsInUse
        let only = !usesSystemStore
        let role = purpose == .clientAuth ? "client anchor" : "anchor"
        var what: String
        if anchors.isEmpty {
            what = only ? "any anchor (the policy has none)" : "a root of the system trust store"
        } else {
            let names = anchors.prefix(4).map { "\"\($0.subjectSummary)\"" }.joined(separator: ", ")
            what = anchors.count == 1 ? "the \(role) \(names)" : "the \(role)s \(names)\(anchors.count > 4 ? ", ..." : "")"
            if !only { what += " or a root of the system trust store" }
        }
        if let rule { what += " (host rule \(rule.pattern.text))" }
        // What to do next, in words every layer shares (the CLI's --anchor, C's and Python's anchors).
        let fix = purpose == .clientAuth
            ? "; to accept it, add the CA that issued it as a client anchor (the client anchor option: --client-anchor FILE on the command line; or the client policy's anchors: anchors= in Python, mtls_policy_add_anchor in C)"
            : "; to trust it, add the CA that issued it as an anchor (the anchor option: --anchor FILE on the command line, anchors= in Python, mtls_policy_add_anchor in C; or the policy's anchors)"
        return TrustReason(code: r.code, certIndex: r.certIndex, message: "not issued under \(what): \(r.message)\(fix)")
    }

    /// The names a certificate carries and how to accept one of them, after a name mismatch.
    static func nameMismatchHint(_ leaf: Certificate) -> String {
        var names = leaf.subjectAltNames.compactMap { n -> String? in
            switch n {
            case .dns(let v), .ip(let v): return v
            default: return nil
            }
        }
        if names.isEmpty, let cn = leaf.commonName { names = ["CN \(cn) (no subjectAltName, so no name matches)"] }
        let shown = names.prefix(8).joined(separator: ", ") + (names.count > 8 ? ", ..." : "")
        return "; the certificate's names: \(shown.isEmpty ? "none" : shown)" +
            "; connect by one of them, or validate as one of its names with verify-as (--verify-as NAME on the command line, verify_as= in Python, verify_as in C's options)"
    }

    func isAnchor(_ c: Certificate) -> Bool {
        let d = c.sha256
        return compiled.anchorDigests.contains(d) || c.isSelfSigned
            || (effective.overridesTrust && effective.anchors.contains { $0.sha256 == d })
    }

    /// Checks one set of pins: the matching pin, the failures, and whether they are enforced
    /// (a report-only rule's are not; neither are a rule's pins once expired with stop_enforcing).
    private func checkPins(_ r: PinRequirement, _ built: [Certificate]) -> (String?, [TrustReason], Bool) {
        let whose: String
        switch r.source {
        case .rule: whose = "host rule \(r.ruleText ?? "")"
        case .override: whose = "the pins given as overrides (for this connection, listener, SSL_CTX or call)"
        default: whose = "the policy (policy-wide pins)"
        }
        if let exp = r.expires, time >= exp {
            switch r.afterExpiry {
            case .stopEnforcing: return (nil, [], false)
            case .failClosed:
                return (nil, [TrustReason(code: TrustReason.Code.pinExpired, certIndex: nil,
                                          message: "the pins of \(whose) expired and the rule fails closed")], !r.reportOnly)
            }
        }
        let pins = Set(r.pins.map(\.sha256))
        for c in built {
            let d = c.spkiSHA256
            if pins.contains(d) { return (SPKIPin(certificate: c).description, [], !r.reportOnly) }
        }
        let of = r.source == .rule ? "a pin of \(whose)" : "\(whose)"
        return (nil, [TrustReason(code: TrustReason.Code.pinMismatch, certIndex: nil,
                                  message: "no certificate of the built chain matches \(of)")], !r.reportOnly)
    }

    /// Runs `X509_verify_cert` with every error collected, and returns the chain it built.
    private func verifyWithOpenSSL(untrustedCerts: [Certificate], store: OpaquePointer, reference: PeerHost?,
                                   reasons: inout [TrustReason]) -> [Certificate] {
        guard let ctx = X509_STORE_CTX_new_ex(LibraryContext.shared.ctx, nil) else {
            reasons.append(TrustReason(code: TrustReason.Code.verificationError, certIndex: nil, message: "out of memory"))
            return []
        }
        defer { X509_STORE_CTX_free(ctx) }
        let untrusted = mtls_ossl_sk_X509_new_null()!
        defer { mtls_ossl_sk_X509_free(untrusted) }  // borrowed references: not popped
        for c in untrustedCerts { _ = mtls_ossl_sk_X509_push(untrusted, c.x509) }
        guard X509_STORE_CTX_init(ctx, store, chain[0].x509, untrusted) == 1 else {
            reasons.append(TrustReason(code: TrustReason.Code.verificationError, certIndex: nil,
                                       message: MTLSError.openSSL(.internal, "X509_STORE_CTX_init failed").message))
            return []
        }
        let param = X509_STORE_CTX_get0_param(ctx)!
        var flags = UInt(X509_V_FLAG_X509_STRICT | X509_V_FLAG_PARTIAL_CHAIN)
        if let crls = compiled.crlStack {
            flags |= UInt(X509_V_FLAG_CRL_CHECK)
            if settings.checkCRLsForWholeChain { flags |= UInt(X509_V_FLAG_CRL_CHECK_ALL) }
            X509_STORE_CTX_set0_crls(ctx, crls)
        }
        X509_VERIFY_PARAM_set_flags(param, flags)
        X509_VERIFY_PARAM_set_time(param, time_t(time.timeIntervalSince1970))
        _ = X509_STORE_CTX_set_purpose(ctx, purpose == .serverAuth ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT)
        // Depth is counted by the policy layer (self-issued certificates do not count); OpenSSL's
        // own limit only bounds the search.
        if let d = settings.maxChainDepth { X509_VERIFY_PARAM_set_depth(param, Int32(min(2 * d + 2, 100))) }
        X509_VERIFY_PARAM_set_hostflags(param, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT))
        if let reference {
            if let ip = reference.ip {
                _ = X509_VERIFY_PARAM_set1_ip(param, ip, ip.count)
            } else if let name = reference.name {
                _ = X509_VERIFY_PARAM_set1_host(param, name, name.utf8.count)
            }
        }
        let collector = VerifyErrorCollector()
        X509_STORE_CTX_set_verify_cb(ctx, collectVerifyErrors)
        let unmanaged = Unmanaged.passRetained(collector)
        _ = X509_STORE_CTX_set_ex_data(ctx, 0, unmanaged.toOpaque())
        let ok = X509_verify_cert(ctx)
        _ = X509_STORE_CTX_set_ex_data(ctx, 0, nil)
        unmanaged.release()
        if ok != 1 && collector.errors.isEmpty {
            let err = X509_STORE_CTX_get_error(ctx)
            collector.errors.append((err == 0 ? X509_V_ERR_UNSPECIFIED : err, X509_STORE_CTX_get_error_depth(ctx)))
        }
        OpenSSLErrorQueue.clear()
        let builtX509 = X509_STORE_CTX_get0_chain(ctx)
        for (err, depth) in collector.errors {
            // RFC 5280 4.1.2.5: a certificate is valid through its notAfter second; OpenSSL
            // counts that second as expired.
            if err == X509_V_ERR_CERT_HAS_EXPIRED, let builtX509, depth < mtls_ossl_sk_X509_num(builtX509),
               let na = X509_get0_notAfter(mtls_ossl_sk_X509_value(builtX509, depth)) {
                var t = time_t(time.timeIntervalSince1970)
                if X509_cmp_time(na, &t) == 0 || Certificate.date(na) >= time { continue }
            }
            // A CA without keyUsage is acceptable (RFC 5280 allows it for CRL-less use, and
            // OpenSSL accepts it outside strict mode); keyCertSign is checked when it is present.
            if err == X509_V_ERR_CA_CERT_MISSING_KEY_USAGE { continue }
            reasons.append(Self.reason(openSSLError: err, depth: Int(depth)))
        }
        // The built chain, mapped back to the caller's certificate objects where possible.
        var built: [Certificate] = []
        if let sk = X509_STORE_CTX_get0_chain(ctx) {
            for i in 0..<mtls_ossl_sk_X509_num(sk) {
                let x = mtls_ossl_sk_X509_value(sk, i)!
                if let c = chain.first(where: { $0.x509 == x }) ?? settings.anchors.first(where: { $0.x509 == x })
                    ?? effective.anchors.first(where: { $0.x509 == x }) {
                    built.append(c)
                } else if let c = try? Certificate(borrowing: x) {
                    built.append(c)
                }
            }
        }
        return built.isEmpty ? [chain[0]] : built
    }

    /// Maps an OpenSSL verification error to a reason.
    static func reason(openSSLError err: Int32, depth: Int) -> TrustReason {
        typealias C = TrustReason.Code
        let code: String
        switch err {
        case X509_V_ERR_CERT_HAS_EXPIRED: code = C.expired
        case X509_V_ERR_CERT_NOT_YET_VALID: code = C.notYetValid
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH, X509_V_ERR_EMAIL_MISMATCH: code = C.nameMismatch
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, X509_V_ERR_CERT_UNTRUSTED,
             X509_V_ERR_CERT_REJECTED:
            code = C.untrustedRoot
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
             X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            code = C.unknownIssuer
        case X509_V_ERR_CERT_SIGNATURE_FAILURE, X509_V_ERR_UNABLE_TO_DECRYPT_CERT_SIGNATURE,
             X509_V_ERR_UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY, X509_V_ERR_NO_ISSUER_PUBLIC_KEY,
             X509_V_ERR_UNSUPPORTED_SIGNATURE_ALGORITHM:
            code = C.badSignature
        case X509_V_ERR_SIGNATURE_ALGORITHM_MISMATCH, X509_V_ERR_SIGNATURE_ALGORITHM_INCONSISTENCY:
            code = C.signatureAlgorithmMismatch
        case X509_V_ERR_CERT_REVOKED: code = C.revoked
        case X509_V_ERR_UNABLE_TO_GET_CRL, X509_V_ERR_UNABLE_TO_GET_CRL_ISSUER: code = C.crlUnavailable
        case X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE, X509_V_ERR_CRL_SIGNATURE_FAILURE, X509_V_ERR_CRL_NOT_YET_VALID,
             X509_V_ERR_CRL_HAS_EXPIRED, X509_V_ERR_ERROR_IN_CRL_LAST_UPDATE_FIELD, X509_V_ERR_ERROR_IN_CRL_NEXT_UPDATE_FIELD,
             X509_V_ERR_KEYUSAGE_NO_CRL_SIGN, X509_V_ERR_UNHANDLED_CRITICAL_CRL_EXTENSION, X509_V_ERR_DIFFERENT_CRL_SCOPE,
             X509_V_ERR_CRL_PATH_VALIDATION_ERROR:
            code = C.crlInvalid
        case X509_V_ERR_INVALID_PURPOSE: code = C.wrongPurpose
        case X509_V_ERR_INVALID_CA, X509_V_ERR_KEYUSAGE_NO_CERTSIGN, X509_V_ERR_INVALID_NON_CA: code = C.notACA
        case X509_V_ERR_PATH_LENGTH_EXCEEDED: code = C.pathLengthExceeded
        case X509_V_ERR_CERT_CHAIN_TOO_LONG, X509_V_ERR_PATH_LOOP: code = C.chainTooLong
        case X509_V_ERR_PERMITTED_VIOLATION, X509_V_ERR_EXCLUDED_VIOLATION, X509_V_ERR_SUBTREE_MINMAX,
             X509_V_ERR_UNSUPPORTED_CONSTRAINT_TYPE, X509_V_ERR_UNSUPPORTED_CONSTRAINT_SYNTAX,
             X509_V_ERR_UNSUPPORTED_NAME_SYNTAX:
            code = C.nameConstraintViolation
        case X509_V_ERR_UNHANDLED_CRITICAL_EXTENSION: code = C.unhandledCriticalExtension
        case X509_V_ERR_EE_KEY_TOO_SMALL, X509_V_ERR_CA_KEY_TOO_SMALL: code = C.weakKey
        case X509_V_ERR_EC_KEY_EXPLICIT_PARAMS: code = C.keyForbidden
        case X509_V_ERR_CA_MD_TOO_WEAK: code = C.weakSignature
        case X509_V_ERR_INVALID_POLICY_EXTENSION, X509_V_ERR_NO_EXPLICIT_POLICY: code = C.policyViolation
        case X509_V_ERR_MISSING_AUTHORITY_KEY_IDENTIFIER: code = C.akiMissing
        case X509_V_ERR_AUTHORITY_KEY_IDENTIFIER_CRITICAL, X509_V_ERR_AKID_SKID_MISMATCH,
             X509_V_ERR_AKID_ISSUER_SERIAL_MISMATCH:
            code = C.akiInvalid
        case X509_V_ERR_MISSING_SUBJECT_KEY_IDENTIFIER: code = C.skiMissing
        case X509_V_ERR_SUBJECT_KEY_IDENTIFIER_CRITICAL: code = C.skiInvalid
        case X509_V_ERR_ISSUER_NAME_EMPTY, X509_V_ERR_SUBJECT_NAME_EMPTY: code = C.emptyName
        case X509_V_ERR_EMPTY_SUBJECT_ALT_NAME, X509_V_ERR_EMPTY_SUBJECT_SAN_NOT_CRITICAL: code = C.sanInvalid
        case X509_V_ERR_CA_BCONS_NOT_CRITICAL, X509_V_ERR_PATHLEN_INVALID_FOR_NON_CA,
             X509_V_ERR_PATHLEN_WITHOUT_KU_KEY_CERT_SIGN, X509_V_ERR_KU_KEY_CERT_SIGN_INVALID_FOR_NON_CA,
             X509_V_ERR_CA_CERT_MISSING_KEY_USAGE:
            code = C.basicConstraintsInvalid
        case X509_V_ERR_EXTENSIONS_REQUIRE_VERSION_3: code = C.versionUnsupported
        case X509_V_ERR_INVALID_EXTENSION, X509_V_ERR_UNSUPPORTED_EXTENSION_FEATURE,
             X509_V_ERR_ERROR_IN_CERT_NOT_BEFORE_FIELD, X509_V_ERR_ERROR_IN_CERT_NOT_AFTER_FIELD:
            code = C.malformedCertificate
        default: code = C.verificationError
        }
        let text = X509_verify_cert_error_string(Int(err)).map { String(cString: $0) } ?? "error \(err)"
        return TrustReason(code: code, certIndex: depth, message: "\(text) (OpenSSL error \(err))")
    }
}

/// The errors OpenSSL reported during one `X509_verify_cert`.
final class VerifyErrorCollector {
    var errors: [(Int32, Int32)] = []
}

/// OpenSSL verify callback: records each error with its depth and lets verification go on, so
/// every reason is reported rather than only the first.
private let collectVerifyErrors: @convention(c) (Int32, OpaquePointer?) -> Int32 = { ok, ctx in
    guard ok == 0, let ctx, let p = X509_STORE_CTX_get_ex_data(ctx, 0) else { return ok == 0 ? 0 : 1 }
    let collector = Unmanaged<VerifyErrorCollector>.fromOpaque(p).takeUnretainedValue()
    let err = X509_STORE_CTX_get_error(ctx)
    let depth = X509_STORE_CTX_get_error_depth(ctx)
    if !collector.errors.contains(where: { $0 == err && $1 == depth }) { collector.errors.append((err, depth)) }
    return 1
}
