internal import COpenSSL
import FoundationEssentials
import Synchronization

/// What one connection or one call asks of an evaluation on top of the policy: anchors to add,
/// whether only anchors are trusted, pins that must match, and the name to validate as. Front
/// ends (C options, the CLI's `--anchor`, `--system-anchors`, `--anchors-only`, `--pin`, `--verify-as`, Python
/// keywords) pass overrides; they never write them into the policy.
///
/// How they compose is ``TrustPolicy``'s business (see ``TrustPolicy/evaluate(chain:peer:purpose:at:overrides:stapledOCSP:)``):
/// the policy's defaults, then the host rule selected by the peer's host and port, then the
/// policy-wide pins and verify-as, then these overrides. Pins given here are always enforced,
/// whatever the rule says about report-only or pin expiry.
public struct TrustOverrides: Sendable, Hashable {
    /// Anchors added to the anchors in force (the rule's own, else the policy's).
    public var anchors: [Certificate]
    /// Whether the system store is trusted as well as the anchors (nil: as the rule, else the
    /// policy, says; by default not when there are anchors).
    public var systemAnchors: Bool?
    /// Compatibility name of ``systemAnchors``, turned around (true: the anchors only).
    public var anchorsOnly: Bool? {
        get { systemAnchors.map { !$0 } } set { systemAnchors = newValue.map { !$0 } }
    }
    /// SPKI pins; one of them must match a certificate of the built chain. Always enforced.
    public var pins: [SPKIPin]
    /// The name or IP address the certificate is validated as, over every other verify-as.
    public var verifyAs: String?
    /// An allow-list of this connection, listener or call (the CLI's `--allow-*`): a requirement
    /// of its own, on top of the policy's and the rule's lists (see ``PeerAllowList``).
    public var allow = PeerAllowList()

    /// Overrides with the given values (the defaults change nothing).
    public init(anchors: [Certificate] = [], anchorsOnly: Bool? = nil, systemAnchors: Bool? = nil, pins: [SPKIPin] = [],
                verifyAs: String? = nil) {
        self.anchors = anchors
        self.systemAnchors = systemAnchors ?? anchorsOnly.map { !$0 }
        self.pins = pins
        self.verifyAs = verifyAs
    }

    /// True when the overrides change nothing.
    public var isEmpty: Bool { anchors.isEmpty && systemAnchors == nil && pins.isEmpty && verifyAs == nil && allow.isEmpty }

    /// Throws ``MTLSError/Code/invalidArgument`` for a verify-as that is empty or neither a host
    /// name nor an IP address (an empty one would silently turn the name check off).
    public func validate() throws {
        if let v = verifyAs, !VerifyAsName.isValid(v) {
            throw MTLSError(.invalidArgument, "verify-as \"\(v)\" is not a host name or IP address")
        }
    }

    /// What tells two sets of overrides apart, for the evaluation cache and TLS session keys.
    package var cacheKey: String {
        if isEmpty { return "" }
        var s = "a=" + anchors.map(\.sha256Hex).joined(separator: ",")
        s += "|o=" + (systemAnchors.map { $0 ? "0" : "1" } ?? "-")
        s += "|p=" + pins.map(\.description).joined(separator: ",")
        s += "|v=" + (verifyAs ?? "")
        if !allow.isEmpty { s += "|w=" + allow.cacheKey }
        return s
    }
}

/// The syntax a verify-as name must have, wherever it is given.
enum VerifyAsName {
    static func isValid(_ v: String) -> Bool {
        let t = trimmedASCII(v)
        guard !t.isEmpty, t == v else { return false }
        let bare = HostLiteral.unbracketed(t)
        return IPAddress.bytes(bare) != nil || HostName.isValidReferenceName(bare)
    }
}

/// Where each decision of an evaluation came from: which host rule applied, who gave the anchors,
/// anchors-only, the name checked and each set of pins. Part of every ``TrustResult``.
public struct TrustProvenance: Sendable, Hashable {
    /// Who gave a setting.
    public enum Source: String, Sendable {
        /// The policy's defaults, or its policy-wide pins and verify-as.
        case policy
        /// The host rule selected by the peer's host and port.
        case rule
        /// The overrides of this connection or call.
        case override
        /// The peer's own verify-as (a connection's or call's verify_as, below the rule's).
        case peer
        /// The host the peer was reached as.
        case host
        /// Nobody: the setting does not apply (no name is checked).
        case none
    }

    /// One set of pins that applied.
    public struct PinSet: Sendable, Hashable {
        /// The rule's, the policy's (policy-wide) or the overrides'.
        public let source: Source
        /// Whether a failure fails the evaluation (false: report-only, or expired pins that
        /// stopped being enforced).
        public let enforced: Bool
        /// The pin of this set that matched a certificate of the built chain, if any.
        public let matched: String?
    }

    /// The pattern of the host rule that applied, if any.
    public let rule: String?
    /// Who gave the anchors in force (empty: no anchor of the policy's; the system store only).
    public let anchors: [Source]
    /// Whether only the anchors were trusted (the system store was not used).
    public let anchorsOnly: Bool
    /// Who said whether only the anchors are trusted.
    public let anchorsOnlySource: Source
    /// The name (or IP) the certificate was checked against, or nil for no name check.
    public let name: String?
    /// Who gave that name.
    public let nameSource: Source
    /// The sets of pins that applied, in order: the rule's, the policy's, the overrides'.
    public let pins: [PinSet]

    /// As JSON text: `{"rule": str|null, "anchors": [source...], "anchors_only": bool,
    /// "anchors_only_from": source, "name": str|null, "name_from": source, "pins": [{"from":
    /// source, "enforced": bool, "matched": str|null}]}` (the `provenance` key of `mtls verify
    /// --json` and the C getter).
    public var jsonText: String {
        func str(_ s: String?) -> String { s.map(JSONText.quoted) ?? "null" }
        let pinSets = pins.map {
            "{\"from\":\"\($0.source.rawValue)\",\"enforced\":\($0.enforced),\"matched\":\(str($0.matched))}"
        }
        return "{\"rule\":\(str(rule)),\"anchors\":[\(anchors.map { "\"\($0.rawValue)\"" }.joined(separator: ","))]," +
            "\"anchors_only\":\(anchorsOnly),\"anchors_only_from\":\"\(anchorsOnlySource.rawValue)\"," +
            "\"name\":\(str(name)),\"name_from\":\"\(nameSource.rawValue)\",\"pins\":[\(pinSets.joined(separator: ","))]}"
    }
}

/// One set of pins in force for an evaluation.
struct PinRequirement {
    let source: TrustProvenance.Source
    let pins: [SPKIPin]
    /// Whether failures are only reported (a report-only rule), not enforced.
    let reportOnly: Bool
    /// The rule's pin expiry, which only a rule's pins have.
    let expires: Date?
    let afterExpiry: PinExpiryBehavior
    /// The rule's pattern, for messages.
    let ruleText: String?
}

/// The policy in force for one peer, composed in one place for one evaluation: the policy's
/// defaults, then the host rule selected by host and port (never by verify-as), then the
/// policy-wide pins and verify-as, then the overrides. A value: it never changes the policy
/// object, adds no rule and bumps no version.
struct EffectivePolicy {
    /// The rule selected by the peer's host and port.
    let rule: HostRule?
    let anchors: [Certificate]
    let anchorSources: [TrustProvenance.Source]
    let anchorsOnly: Bool
    let anchorsOnlySource: TrustProvenance.Source
    /// The name to check against (nil: none) and who gave it.
    let reference: PeerHost?
    let referenceText: String?
    let nameSource: TrustProvenance.Source
    /// Whether the name check was turned off by the policy or the rule (not just "no name given").
    let nameCheckOff: Bool
    let pinRequirements: [PinRequirement]
    /// The allow-lists in force: the rule's, the policy's, the overrides' (each must be passed).
    let allowRequirements: [AllowRequirement]
    /// Whether anchors or anchors-only come from the overrides (the compiled stores do not cover them).
    let overridesTrust: Bool
    /// Revocation checking in force: the rule's, else the policy's.
    var revocation: RevocationSettings { Self.revocation(settings: settings, rule: rule) }
    private let settings: TrustPolicy.Settings

    /// Revocation checking in force for a peer under `rule`: the rule's setting, else the policy's.
    static func revocation(settings: TrustPolicy.Settings, rule: HostRule?) -> RevocationSettings {
        rule?.revocation ?? settings.revocation
    }

    /// The one rule of the system store, for every front end: anchors in force mean those
    /// anchors only, unless the system store is asked for as well (`system_anchors` true); no
    /// anchors at all mean the system store; `system_anchors` false means never the system store.
    static func trustsSystemStore(anchors: [Certificate], systemAnchors: Bool?) -> Bool {
        systemAnchors ?? anchors.isEmpty
    }

    init(settings: TrustPolicy.Settings, rule: HostRule?, peer: TrustPeer, purpose: TrustPurpose, overrides: TrustOverrides?) {
        self.rule = rule
        self.settings = settings
        let o = overrides ?? TrustOverrides()
        // Anchors: the rule's own, else the policy's; the overrides' are added.
        var anchors = rule?.anchors ?? settings.anchors
        var sources: [TrustProvenance.Source] = anchors.isEmpty ? [] : [rule?.anchors != nil ? .rule : .policy]
        if !o.anchors.isEmpty {
            anchors += o.anchors
            sources.append(.override)
        }
        self.anchors = anchors
        anchorSources = sources
        let system: Bool?
        if let v = o.systemAnchors {
            (system, anchorsOnlySource) = (v, .override)
        } else if let v = rule?.systemAnchors {
            (system, anchorsOnlySource) = (v, .rule)
        } else {
            (system, anchorsOnlySource) = (settings.systemAnchors, .policy)
        }
        anchorsOnly = !Self.trustsSystemStore(anchors: anchors, systemAnchors: system)
        overridesTrust = !o.anchors.isEmpty || o.systemAnchors != nil

        // The name: the overrides' verify-as, the policy-wide verify-as, the rule's verify-as (or
        // its skip_name_check), the peer's verify-as, the host. A client is known by its address,
        // which is not a name its certificate must carry: only a verify-as names a client.
        var name: String? = nil
        var source = TrustProvenance.Source.none
        var off = false
        if settings.nameCheck == .none {
            off = true
        } else if let v = o.verifyAs {
            (name, source) = (v, .override)
        } else if let v = settings.verifyAs {
            (name, source) = (v, .policy)
        } else if rule?.skipNameCheck == true {
            off = true
        } else if let v = rule?.verifyAs {
            (name, source) = (v, .rule)
        } else if let v = peer.verifyAs, !v.isEmpty {
            (name, source) = (v, .peer)
        } else if purpose == .serverAuth, let h = peer.host, !h.isEmpty {
            (name, source) = (h, .host)
        }
        reference = name.map { PeerHost($0) }
        referenceText = name
        nameSource = source
        nameCheckOff = off

        var reqs: [PinRequirement] = []
        if let rule, !rule.pins.isEmpty {
            reqs.append(PinRequirement(source: .rule, pins: rule.pins, reportOnly: rule.enforcement == .reportOnly,
                                       expires: rule.pinsExpire, afterExpiry: rule.afterExpiry, ruleText: rule.pattern.text))
        }
        if !settings.pins.isEmpty {
            reqs.append(PinRequirement(source: .policy, pins: settings.pins, reportOnly: false, expires: nil,
                                       afterExpiry: .stopEnforcing, ruleText: nil))
        }
        if !o.pins.isEmpty {
            reqs.append(PinRequirement(source: .override, pins: o.pins, reportOnly: false, expires: nil,
                                       afterExpiry: .stopEnforcing, ruleText: nil))
        }
        pinRequirements = reqs
        var allows: [AllowRequirement] = []
        if let rule, !rule.allow.isEmpty { allows.append(AllowRequirement(source: .rule, list: rule.allow, ruleText: rule.pattern.text)) }
        if !settings.allow.isEmpty { allows.append(AllowRequirement(source: .policy, list: settings.allow, ruleText: nil)) }
        if !o.allow.isEmpty { allows.append(AllowRequirement(source: .override, list: o.allow, ruleText: nil)) }
        allowRequirements = allows
    }
}

/// An `X509_STORE` owned by a Swift object.
final class OwnedStore: @unchecked Sendable {
    let store: OpaquePointer
    init(_ store: OpaquePointer) { self.store = store }
    deinit { X509_STORE_free(store) }
}
