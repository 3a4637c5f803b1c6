internal import COpenSSL
import FoundationEssentials
import Synchronization

/// How the peer's name is checked.
public enum NameCheck: String, Sendable {
    /// SSL policy: the host (DNS name with RFC 6125 wildcard rules, or IP address against IP
    /// SANs) must match a subject alternative name. Never the common name.
    case ssl
    /// Basic X.509 policy: no name check.
    case none
}

/// A trust policy: anchors, name checking, host rules with pins, key and signature strength,
/// CRLs and an optional fixed time. Evaluate a peer with
/// ``evaluate(chain:host:purpose:at:overrides:)``.
///
/// Thread safety: every property can be read and changed from any thread, also while other
/// threads evaluate; each evaluation sees one consistent version of the policy. The parsed
/// anchors and OpenSSL stores are built once per version, on the first evaluation after a change.
public final class TrustPolicy: Sendable {
    /// The policy's settings, changed together under one lock.
    struct Settings {
        var anchors: [Certificate] = []
        /// Whether the system store is trusted as well as the anchors; nil: only when there are
        /// no anchors (``EffectivePolicy/trustsSystemStore(anchors:systemAnchors:)``).
        var systemAnchors: Bool? = nil
        var systemCAFile: String? = nil
        var systemCADirectory: String? = nil
        var purpose: TrustPurpose = .serverAuth
        var nameCheck: NameCheck = .ssl
        var hostRules: [HostRule] = []
        /// Policy-wide pins and verify-as: applied on top of the selected host rule (or of the
        /// defaults), to every evaluation, with a host or without, client or server side.
        var pins: [SPKIPin] = []
        var verifyAs: String? = nil
        /// Policy-wide allow-list (who may connect), on top of the selected host rule's own.
        var allow = PeerAllowList()
        var minimumRSABits = 2048
        var minimumECBits = 256
        var bannedSignatureDigests: Set<String> = ["md5", "sha1"]
        var crls: [RevocationList] = []
        var checkCRLsForWholeChain = false
        var time: Date? = nil
        var maxChainDepth: Int? = nil
        var cacheEnabled = true
        var systemAnchorsForClients = false
        var reportHandler: (@Sendable (TrustReport) -> Void)? = nil
        var warnings: [String] = []
        /// Revocation checking, policy-wide (a host rule may say otherwise), and how to fetch.
        var revocation = RevocationSettings.off
        var revocationFetch = RevocationFetchOptions()
    }

    private let state: Locked<(settings: Settings, version: UInt64, compiled: CompiledPolicy?)>
    /// A number no other policy object of this process has, ever: what a TLS session is bound to
    /// (``ResumptionBinding``), so a session made under one policy is never taken for another's,
    /// even when the first object is freed and a new one takes its address.
    package let instance: UInt64 = TrustPolicy.nextInstance.add(1, ordering: .relaxed).newValue
    private static let nextInstance = Atomic<UInt64>(0)
    /// Recent evaluations of this policy (see ``EvaluationCache``).
    let cache = EvaluationCache()
    /// Where this policy reports what happens while it is used: a revocation fetch that failed
    /// (``LifecycleEventKind/revocationFetchFailed``), on the thread whose evaluation made the
    /// fetch (a handshake's, or the background refresh thread `mtls-revocation`).
    public let events = LifecycleEvents()

    /// A policy with the given defaults. A policy with anchors trusts those anchors only, unless
    /// `systemAnchors` is true (the system store too); without anchors it trusts the system store.
    /// `anchorsOnly`, kept for compatibility, is `systemAnchors` turned around (false: the system
    /// store too).
    public init(anchors: [Certificate] = [], anchorsOnly: Bool? = nil, systemAnchors: Bool? = nil,
                purpose: TrustPurpose = .serverAuth,
                nameCheck: NameCheck = .ssl, hostRules: [HostRule] = [], minimumRSABits: Int = 2048,
                minimumECBits: Int = 256, bannedSignatureDigests: Set<String> = ["md5", "sha1"],
                crls: [RevocationList] = [], time: Date? = nil, maxChainDepth: Int? = nil) {
        var s = Settings()
        s.anchors = anchors
        s.systemAnchors = systemAnchors ?? anchorsOnly.map { !$0 }
        s.purpose = purpose
        s.nameCheck = nameCheck
        s.hostRules = hostRules
        s.minimumRSABits = minimumRSABits
        s.minimumECBits = minimumECBits
        s.bannedSignatureDigests = Set(bannedSignatureDigests.map { $0.lowercased() })
        s.crls = crls
        s.time = time
        s.maxChainDepth = maxChainDepth
        s.warnings = hostRules.flatMap(\.warnings)
        state = Locked((s, 1, nil))
    }

    // MARK: Settings

    fileprivate func readSetting<T>(_ read: (Settings) -> T) -> T { state.withLock { read($0.settings) } }
    fileprivate func changeSetting(_ change: (inout Settings) throws -> Void) rethrows {
        try state.withLock { st in
            try change(&st.settings)
            st.version &+= 1
            st.compiled = nil
        }
    }

    /// The anchors: roots, intermediates or leaf certificates; each is an origin of trust.
    public var anchors: [Certificate] { get { readSetting(\.anchors) } set { changeSetting { $0.anchors = newValue } } }
    /// Adds one anchor.
    public func addAnchor(_ cert: Certificate) { changeSetting { $0.anchors.append(cert) } }
    /// Whether the system trust store is trusted as well as the anchors (JSON `system_anchors`,
    /// C `mtls_policy_set_system_anchors`, CLI `--system-anchors`, Python `system_anchors`).
    /// nil (the default): a policy with anchors trusts those anchors only, a policy without
    /// anchors the system store. true: the system store too. false: never the system store.
    /// Host rules and overrides may say otherwise for their peers (``HostRule/systemAnchors``).
    public var systemAnchors: Bool? {
        get { readSetting(\.systemAnchors) } set { changeSetting { $0.systemAnchors = newValue } }
    }
    /// Compatibility name of ``systemAnchors``, turned around. Reads true when the policy's own
    /// evaluations (without a rule or overrides) do not use the system store; setting it sets
    /// ``systemAnchors`` to the opposite (false: the system store too, as in 0.2).
    public var anchorsOnly: Bool {
        get { readSetting { !EffectivePolicy.trustsSystemStore(anchors: $0.anchors, systemAnchors: $0.systemAnchors) } }
        set { changeSetting { $0.systemAnchors = !newValue } }
    }
    /// A CA file used as the system store instead of OpenSSL's default (`/etc/ssl/certs`).
    public var systemCAFile: String? { get { readSetting(\.systemCAFile) } set { changeSetting { $0.systemCAFile = newValue } } }
    /// A hashed CA directory used as the system store instead of OpenSSL's default.
    public var systemCADirectory: String? {
        get { readSetting(\.systemCADirectory) } set { changeSetting { $0.systemCADirectory = newValue } }
    }
    /// The purpose used when an evaluation does not name one.
    public var purpose: TrustPurpose { get { readSetting(\.purpose) } set { changeSetting { $0.purpose = newValue } } }
    /// The name check.
    public var nameCheck: NameCheck { get { readSetting(\.nameCheck) } set { changeSetting { $0.nameCheck = newValue } } }
    /// Per-host rules; the most specific matching one applies.
    public var hostRules: [HostRule] {
        get { readSetting(\.hostRules) }
        set { changeSetting { $0.hostRules = newValue; $0.warnings = newValue.flatMap(\.warnings) } }
    }
    /// Adds a host rule. A rule with the same pattern replaces the old one. An invalid rule (see
    /// ``HostRule/validate()``) makes every evaluation fail with `invalid_policy` until it is
    /// replaced; ``updateHostRule(_:_:)`` refuses it at once instead.
    public func addHostRule(_ rule: HostRule) {
        changeSetting { s in
            s.hostRules.removeAll { $0.pattern.text.lowercased() == rule.pattern.text.lowercased() }
            s.hostRules.append(rule)
            s.warnings = s.hostRules.flatMap(\.warnings)
        }
    }
    /// Changes the rule whose pattern is `pattern` (as written, case-insensitive), creating it
    /// first when there is none. Throws ``MTLSError/Code/invalidPolicy`` for a malformed pattern.
    public func updateHostRule(_ pattern: String, _ change: (inout HostRule) throws -> Void) throws {
        let parsed = try HostPattern(pattern)
        try changeSetting { s in
            let i = s.hostRules.firstIndex { $0.pattern.text.lowercased() == pattern.lowercased() }
            var rule = i.map { s.hostRules[$0] } ?? HostRule(pattern: parsed)
            try change(&rule)
            try rule.validate()
            if let i { s.hostRules[i] = rule } else { s.hostRules.append(rule) }
            s.warnings = s.hostRules.flatMap(\.warnings)
        }
    }

    /// Policy-wide SPKI pins (`sha256/BASE64`): every evaluation under this policy — with a host
    /// or without, of a server or of a client — needs one of them to match a certificate of the
    /// built chain, on top of the selected host rule's own pins. Always enforced (a rule's
    /// report-only or pin expiry concerns only the rule's pins). Policy files: `"pins"`.
    public var pins: [SPKIPin] { get { readSetting(\.pins) } set { changeSetting { $0.pins = newValue } } }
    /// Policy-wide verify-as: every peer's certificate is validated as this name or IP address,
    /// over the selected rule's verify-as (an override's verify-as still wins). Host rules are
    /// still selected by the peer's host and port, so their anchors and pins keep applying.
    /// An empty or malformed name makes every evaluation fail with `invalid_policy`.
    /// Policy files: `"verify_as"`.
    public var verifyAs: String? { get { readSetting(\.verifyAs) } set { changeSetting { $0.verifyAs = newValue } } }

    /// The policy-wide allow-list (who may connect; see ``PeerAllowList``): every peer this policy
    /// judges — clients on a listener or configured SSL_CTX, the server on a client connection —
    /// whose chain is trusted must also match one of its entries, on top of the selected host
    /// rule's own list. Empty (the default): no restriction. Policy files: `"allow"`.
    public var allow: PeerAllowList { get { readSetting(\.allow) } set { changeSetting { $0.allow = newValue } } }
    /// Adds one entry to ``allow`` (validated: ``PeerAllowList/add(_:_:)``), in one change of the settings.
    public func addAllow(_ kind: PeerAllowList.Kind, _ pattern: String) throws {
        var l = PeerAllowList()
        try l.add(kind, pattern)
        changeSetting { $0.allow.add(contentsOf: l) }
    }
    /// Adds an `issuer` entry to ``allow``: peers whose built chain ends at `anchor`.
    public func addAllow(issuer anchor: Certificate) { changeSetting { $0.allow.add(issuer: anchor) } }

    /// Throws ``MTLSError/Code/invalidPolicy`` for a verify-as that is empty or neither a host
    /// name nor an IP address (as for ``verifyAs``).
    public static func validateVerifyAs(_ v: String) throws {
        guard VerifyAsName.isValid(v) else {
            throw MTLSError(.invalidPolicy, "verify_as \"\(v)\" is not a host name or IP address (to turn the name check off, turn the policy's name check off)")
        }
    }

    /// Smallest accepted RSA modulus, in bits (default 2048). RSA sizes must also be a multiple of 8.
    public var minimumRSABits: Int { get { readSetting(\.minimumRSABits) } set { changeSetting { $0.minimumRSABits = newValue } } }
    /// Smallest accepted elliptic curve, in bits (default 256: P-256, P-384, P-521, Ed25519).
    public var minimumECBits: Int { get { readSetting(\.minimumECBits) } set { changeSetting { $0.minimumECBits = newValue } } }
    /// Digests not accepted in certificate signatures (lowercase OpenSSL names; default md5, sha1).
    public var bannedSignatureDigests: Set<String> {
        get { readSetting(\.bannedSignatureDigests) }
        set { changeSetting { $0.bannedSignatureDigests = Set(newValue.map { $0.lowercased() }) } }
    }
    /// CRLs to check revocation against. With CRLs, the leaf must be covered by one.
    public var crls: [RevocationList] { get { readSetting(\.crls) } set { changeSetting { $0.crls = newValue } } }
    /// Adds CRLs to ``crls`` in one change of the settings (two threads adding at once both keep
    /// theirs, which reading ``crls`` and setting it again would not promise).
    public func addCRLs(_ lists: [RevocationList]) { changeSetting { $0.crls += lists } }
    /// Revocation checking for every evaluation (a host rule's ``HostRule/revocation`` wins for
    /// its peers): off (default), soft or hard, from CRL distribution points and/or OCSP.
    /// Policy files: `"revocation": {"mode": "hard", "sources": ["crl"]}`.
    public var revocation: RevocationSettings {
        get { readSetting(\.revocation) } set { changeSetting { $0.revocation = newValue } }
    }
    /// Whether revocation is checked with OCSP anywhere in the policy (policy-wide or in a rule):
    /// clients then ask servers for a stapled response.
    package var wantsOCSP: Bool {
        readSetting { s in
            ([s.revocation] + s.hostRules.compactMap(\.revocation)).contains { $0.mode != .off && $0.sources.contains(.ocsp) }
        }
    }
    /// Whether revocation is checked anywhere in the policy (policy-wide or in a rule): an
    /// evaluation under it may then wait for a CRL or OCSP fetch (within the fetch time limit).
    package var checksRevocation: Bool {
        readSetting { s in ([s.revocation] + s.hostRules.compactMap(\.revocation)).contains { $0.mode != .off } }
    }
    /// Size and time limits of revocation fetches, the folder fetched CRLs are kept in, and the
    /// maximum age of an answer without nextUpdate. Policy files: `"revocation": {"max_bytes": N,
    /// "timeout_ms": N, "cache_dir": "...", "max_age_seconds": N}`.
    public var revocationFetch: RevocationFetchOptions {
        get { readSetting(\.revocationFetch) } set { changeSetting { $0.revocationFetch = newValue } }
    }
    /// Require a CRL for every certificate of the chain, not only the leaf.
    public var checkCRLsForWholeChain: Bool {
        get { readSetting(\.checkCRLsForWholeChain) } set { changeSetting { $0.checkCRLsForWholeChain = newValue } }
    }
    /// A fixed evaluation time (for tests and audits); nil uses the current time.
    public var time: Date? { get { readSetting(\.time) } set { changeSetting { $0.time = newValue } } }
    /// The most intermediate CA certificates allowed between the leaf and the anchor.
    public var maxChainDepth: Int? { get { readSetting(\.maxChainDepth) } set { changeSetting { $0.maxChainDepth = newValue } } }
    /// Whether client certificates (purpose clientAuth) may chain to the system trust store.
    /// Default false: a server that verifies clients trusts only the anchors it was given, even
    /// when ``systemAnchors`` is true, because a public CA's clientAuth certificate says nothing
    /// about who may use a private service. Turn on only to accept public-CA client certificates.
    public var systemAnchorsForClients: Bool {
        get { readSetting(\.systemAnchorsForClients) } set { changeSetting { $0.systemAnchorsForClients = newValue } }
    }
    /// Whether the policy has any anchor of its own (its own or a host rule's).
    public var hasAnchors: Bool { readSetting { !$0.anchors.isEmpty || $0.hostRules.contains { !($0.anchors ?? []).isEmpty } } }
    /// Whether recent evaluations are remembered (default true). The cache never changes an
    /// answer; turning it off only costs time (benchmarks measure the uncached path with it).
    public var evaluationCacheEnabled: Bool {
        get { readSetting(\.cacheEnabled) } set { changeSetting { $0.cacheEnabled = newValue } }
    }
    /// Called when a report-only rule would have failed an evaluation. Called on the evaluating
    /// thread; it must not evaluate with this policy.
    public var reportHandler: (@Sendable (TrustReport) -> Void)? {
        get { readSetting(\.reportHandler) } set { changeSetting { $0.reportHandler = newValue } }
    }
    /// Warnings found while loading (a host rule with a single pin...).
    public var warnings: [String] { readSetting(\.warnings) }
    /// Grows by one on every change; evaluations cached under an older version are never used.
    public var version: UInt64 { state.withLock { $0.version } }

    /// Copies this policy (settings only, no cache or compiled state).
    public func copy() -> TrustPolicy {
        let p = TrustPolicy()
        p.copySettings(from: self)
        return p
    }

    func copySettings(from other: TrustPolicy) {
        let s = other.readSetting { $0 }
        changeSetting { $0 = s }
    }

    /// Puts `other`'s settings in force, in one step, for every evaluation that starts from now
    /// on (new pins, new anchors), while other threads evaluate: an evaluation that started
    /// finishes with the settings it started with. This policy's report handler is kept (the
    /// application's callback outlives policy updates), and its version grows, so cached
    /// evaluations and resumable sessions of the old settings are not used again.
    public func replaceSettings(from other: TrustPolicy) {
        let s = other.readSetting { $0 }
        changeSetting { current in
            let handler = current.reportHandler
            current = s
            current.reportHandler = handler
        }
    }

    /// The settings and their compiled form, building it if needed.
    func snapshot() throws -> (Settings, CompiledPolicy, UInt64) {
        try state.withLock { st in
            if let c = st.compiled { return (st.settings, c, st.version) }
            let c = try CompiledPolicy(st.settings)
            st.compiled = c
            return (st.settings, c, st.version)
        }
    }
}

/// The OpenSSL objects a policy version needs, built once: one X509_STORE per distinct anchor set
/// (the policy's, and each rule's own), and the CRL stack. Sendable: they are built in `init`
/// and only read afterwards (X509_STORE lookups are thread-safe in OpenSSL 3).
final class CompiledPolicy: @unchecked Sendable {
    /// The store for the policy's default anchors.
    let defaultStore: OpaquePointer
    /// The stores used for client certificates: without the system store unless the policy's
    /// ``TrustPolicy/systemAnchorsForClients`` says so (the same stores then).
    let clientDefaultStore: OpaquePointer
    let clientRuleStores: [String: OpaquePointer]
    /// Every store above, owned.
    private let ownedStores: [OpaquePointer]
    /// Stores for rules with their own anchors, by rule pattern text.
    let ruleStores: [String: OpaquePointer]
    /// The CRLs as an OpenSSL stack (owning references), or nil.
    let crlStack: OpaquePointer?
    /// SHA-256 digests of all anchor certificates (the anchor check of the policy layer).
    let anchorDigests: Set<[UInt8]>
    /// One store per anchor (by SHA-256), holding only that anchor: path building verifies a
    /// candidate path against exactly the anchor it ends at.
    let anchorStores: [[UInt8]: OpaquePointer]

    /// Where the system store comes from (for stores made later, for overrides).
    private let systemCAFile: String?
    private let systemCADirectory: String?
    /// Stores made for evaluations whose overrides bring anchors or anchors-only, by anchor set;
    /// bounded (see ``overrideStore(anchors:anchorsOnly:)``).
    private let extraStores = Locked<[String: OwnedStore]>([:])
    static let maxExtraStores = 64

    /// A new store with `anchors`, and the system store unless `anchorsOnly`.
    static func makeStore(anchors: [Certificate], anchorsOnly: Bool, systemCAFile: String?,
                          systemCADirectory: String?) throws -> OpaquePointer {
        guard let store = X509_STORE_new() else { throw MTLSError.openSSL(.noMemory, "X509_STORE_new failed") }
        for a in anchors where X509_STORE_add_cert(store, a.x509) != 1 {
            // A duplicate anchor is not an error.
            OpenSSLErrorQueue.clear()
        }
        if !anchorsOnly {
            let ctx = LibraryContext.shared.ctx
            if systemCAFile != nil || systemCADirectory != nil {
                if let f = systemCAFile, X509_STORE_load_file_ex(store, f, ctx, nil) != 1 {
                    X509_STORE_free(store)
                    throw MTLSError.openSSL(.invalidPolicy, "cannot load the CA file \(f)")
                }
                if let d = systemCADirectory, X509_STORE_load_path(store, d) != 1 {
                    X509_STORE_free(store)
                    throw MTLSError.openSSL(.invalidPolicy, "cannot use the CA directory \(d)")
                }
            } else {
                _ = X509_STORE_set_default_paths_ex(store, ctx, nil)
                OpenSSLErrorQueue.clear()
            }
        }
        return store
    }

    /// The store for an evaluation whose overrides change the anchors or anchors-only: made once
    /// per anchor set and kept with this policy version (at most ``maxExtraStores``; past that,
    /// made for the one evaluation). The returned object owns the store.
    func overrideStore(anchors: [Certificate], anchorsOnly: Bool) throws -> OwnedStore {
        let key = (anchorsOnly ? "1|" : "0|") + anchors.map(\.sha256Hex).joined(separator: ",")
        if let s = extraStores.withLock({ $0[key] }) { return s }
        let made = OwnedStore(try Self.makeStore(anchors: anchors, anchorsOnly: anchorsOnly, systemCAFile: systemCAFile,
                                                 systemCADirectory: systemCADirectory))
        return extraStores.withLock { e in
            if let s = e[key] { return s }
            if e.count < Self.maxExtraStores { e[key] = made }
            return made
        }
    }

    /// The store holding only `anchor` (path building verifies a candidate path against exactly
    /// the anchor it ends at), also for an anchor given as an override; `owner`, when not nil,
    /// owns the store and must be kept while it is used.
    func singleAnchorStore(_ anchor: Certificate, digest: [UInt8]) -> (store: OpaquePointer, owner: OwnedStore?)? {
        if let s = anchorStores[digest] { return (s, nil) }
        guard let owned = try? overrideStore(anchors: [anchor], anchorsOnly: true) else { return nil }
        return (owned.store, owned)
    }

    init(_ s: TrustPolicy.Settings) throws {
        for r in s.hostRules { try r.validate() }
        if let v = s.verifyAs, !VerifyAsName.isValid(v) {
            throw MTLSError(.invalidPolicy, "the policy's verify_as \"\(v)\" is not a host name or IP address (to turn the name check off, use name_check none)")
        }
        systemCAFile = s.systemCAFile
        systemCADirectory = s.systemCADirectory
        var stores: [OpaquePointer] = []
        func makeStore(anchors: [Certificate], anchorsOnly: Bool) throws -> OpaquePointer {
            let store = try Self.makeStore(anchors: anchors, anchorsOnly: anchorsOnly, systemCAFile: s.systemCAFile,
                                           systemCADirectory: s.systemCADirectory)
            stores.append(store)
            return store
        }
        do {
            let policyOnly = !EffectivePolicy.trustsSystemStore(anchors: s.anchors, systemAnchors: s.systemAnchors)
            defaultStore = try makeStore(anchors: s.anchors, anchorsOnly: policyOnly)
            let clientsOnlyAnchors = !s.systemAnchorsForClients
            clientDefaultStore = clientsOnlyAnchors && !policyOnly ? try makeStore(anchors: s.anchors, anchorsOnly: true) : defaultStore
            var rs: [String: OpaquePointer] = [:], crs: [String: OpaquePointer] = [:]
            for r in s.hostRules where r.anchors != nil || r.systemAnchors != nil {
                let only = !EffectivePolicy.trustsSystemStore(anchors: r.anchors ?? s.anchors,
                                                               systemAnchors: r.systemAnchors ?? s.systemAnchors)
                let store = try makeStore(anchors: r.anchors ?? s.anchors, anchorsOnly: only)
                rs[r.pattern.text] = store
                crs[r.pattern.text] = clientsOnlyAnchors && !only ? try makeStore(anchors: r.anchors ?? s.anchors, anchorsOnly: true) : store
            }
            ruleStores = rs
            clientRuleStores = crs
            var single: [[UInt8]: OpaquePointer] = [:]
            for a in s.anchors + s.hostRules.flatMap({ $0.anchors ?? [] }) where single[a.sha256] == nil {
                single[a.sha256] = try makeStore(anchors: [a], anchorsOnly: true)
            }
            anchorStores = single
            ownedStores = stores
        } catch {
            stores.forEach { X509_STORE_free($0) }
            throw error
        }
        if s.crls.isEmpty {
            crlStack = nil
        } else {
            let sk = mtls_ossl_sk_X509_CRL_new_null()!
            for c in s.crls {
                X509_CRL_up_ref(c.crl)
                _ = mtls_ossl_sk_X509_CRL_push(sk, c.crl)
            }
            crlStack = sk
        }
        var digests = Set(s.anchors.map(\.sha256))
        for r in s.hostRules { for a in r.anchors ?? [] { digests.insert(a.sha256) } }
        anchorDigests = digests
    }

    deinit {
        ownedStores.forEach { X509_STORE_free($0) }
        if let crlStack { mtls_ossl_sk_X509_CRL_pop_free(crlStack) }
    }
}
