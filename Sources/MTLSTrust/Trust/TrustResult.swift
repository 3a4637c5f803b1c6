import FoundationEssentials

/// What a peer is being trusted for: the TLS server (checked by a client) or a TLS client (checked
/// by a server). Selects the required extended key usage and OpenSSL's purpose.
public enum TrustPurpose: String, Sendable, CaseIterable {
    /// Judging a TLS server (EKU serverAuth); written `server` in JSON and on the command line.
    case serverAuth = "server"
    /// Judging a TLS client (EKU clientAuth); written `client`.
    case clientAuth = "client"

    /// The EKU OID the leaf must carry for this purpose.
    public var ekuOID: String {
        switch self {
        case .serverAuth: return ExtendedKeyUsage.serverAuth
        case .clientAuth: return ExtendedKeyUsage.clientAuth
        }
    }
}

/// One reason an evaluation failed (or, for report-only rules, would have failed).
public struct TrustReason: Sendable, Hashable, CustomStringConvertible {
    /// A stable snake_case code (see ``TrustReason/Code``); programs branch on it, never on the
    /// message.
    public let code: String
    /// The index in the built chain (0 = leaf) of the certificate the reason concerns, or nil when
    /// it concerns the chain or the policy as a whole.
    public let certIndex: Int?
    /// A sentence for people.
    public let message: String

    /// A reason with its code, certificate index (nil: the whole chain) and message.
    public init(code: String, certIndex: Int?, message: String) {
        self.code = code
        self.certIndex = certIndex
        self.message = message
    }

    /// `code (cert N): message`, or `code: message` for the whole chain.
    public var description: String {
        certIndex.map { "\(code) (cert \($0)): \(message)" } ?? "\(code): \(message)"
    }

    /// The reason codes libmtls produces. Stable: never renamed, new ones are added.
    public enum Code {
        // From OpenSSL's path validation
        /// A certificate of the chain is past its notAfter at the evaluation time.
        public static let expired = "expired"
        /// A certificate of the chain is before its notBefore at the evaluation time.
        public static let notYetValid = "not_yet_valid"
        /// The leaf carries no SAN matching the name checked (DNS with RFC 6125 wildcards, or an IP address).
        public static let nameMismatch = "name_mismatch"
        /// The chain ends in a root that is not an anchor in force (nor in the system store when it is used).
        public static let untrustedRoot = "untrusted_root"
        /// No issuer of a certificate was found among the presented certificates and the anchors: no path to an anchor.
        public static let unknownIssuer = "unknown_issuer"
        /// A certificate's (or a CRL's) signature does not verify with its issuer's key.
        public static let badSignature = "bad_signature"
        /// A certificate of the chain is revoked (by a CRL or an OCSP response), in every revocation mode.
        public static let revoked = "revoked"
        /// A CRL needed for a certificate of the chain was not available.
        public static let crlUnavailable = "crl_unavailable"
        /// A CRL is not valid (its signature, dates or issuer).
        public static let crlInvalid = "crl_invalid"
        /// The leaf (or a CA) is not good for the purpose: its EKU or key usage excludes it.
        public static let wrongPurpose = "wrong_purpose"
        /// A certificate used as an issuer is not a CA (basicConstraints).
        public static let notACA = "not_a_ca"
        /// A CA's pathLenConstraint is exceeded by the chain below it.
        public static let pathLengthExceeded = "path_length_exceeded"
        /// The chain has more intermediates than the policy allows, or OpenSSL found it too long or a loop.
        public static let chainTooLong = "chain_too_long"
        /// A name of the leaf (or a DNS-like CN) is outside a CA's name constraints.
        public static let nameConstraintViolation = "name_constraint_violation"
        /// A certificate has a critical extension that is not understood.
        public static let unhandledCriticalExtension = "unhandled_critical_extension"
        /// A certificate's key is below the policy's minimum size (``TrustPolicy/minimumRSABits``...).
        public static let weakKey = "weak_key"
        /// A certificate is signed with an algorithm the policy bans (SHA-1, MD5...).
        public static let weakSignature = "weak_signature"
        /// A certificate (or an extension of it) does not decode.
        public static let malformedCertificate = "malformed_certificate"
        /// The chain's certificate policies are invalid or no explicit policy is acceptable.
        public static let policyViolation = "policy_violation"
        /// Path validation failed for a reason that has no code of its own (the message says what OpenSSL said).
        public static let verificationError = "verification_error"
        // libmtls's policy layer (checks OpenSSL does not make)
        /// The serial number is missing, negative, zero or too long (RFC 5280 4.1.2.2).
        public static let serialNumberInvalid = "serial_number_invalid"
        /// The certificate is not X.509 version 3.
        public static let versionUnsupported = "version_unsupported"
        /// The issuer name, or a CA's subject name, is empty.
        public static let emptyName = "empty_name"
        /// A validity date is missing or not in RFC 5280's form (UTCTime up to 2049, GeneralizedTime after).
        public static let validityEncoding = "validity_encoding"
        /// A certificate that is neither self-issued nor an anchor has no authority key identifier.
        public static let akiMissing = "aki_missing"
        /// The authority key identifier is critical, or does not agree with the subject key identifier.
        public static let akiInvalid = "aki_invalid"
        /// A CA certificate has no subject key identifier.
        public static let skiMissing = "ski_missing"
        /// The subject key identifier is critical.
        public static let skiInvalid = "ski_invalid"
        /// The extended key usage OpenSSL requires for the purpose is absent.
        public static let ekuMissing = "eku_missing"
        /// The leaf's extended key usage is critical or includes anyExtendedKeyUsage.
        public static let ekuInvalid = "eku_invalid"
        /// The root certificate carries an extended key usage.
        public static let anchorHasEKU = "anchor_has_eku"
        /// The leaf has no subject alternative name (the common name is never used as a name).
        public static let sanMissing = "san_missing"
        /// The subject alternative name is malformed, or its criticality does not match an empty or
        /// non-empty subject.
        public static let sanInvalid = "san_invalid"
        /// A DNS-like common name is not among the leaf's SANs.
        public static let commonNameMismatch = "common_name_mismatch"
        /// The leaf is a CA certificate (basicConstraints cA, or a key usage allowing certificate signing).
        public static let caAsLeaf = "ca_as_leaf"
        /// An issuing certificate is not marked as a CA, or a CA's basicConstraints is not critical.
        public static let basicConstraintsInvalid = "basic_constraints_invalid"
        /// The public key does not decode, or its type or parameters are not allowed (an explicit EC
        /// curve, a curve outside the allowed ones...).
        public static let keyForbidden = "key_forbidden"
        /// The signature algorithm in the certificate's body and outside it differ.
        public static let signatureAlgorithmMismatch = "signature_algorithm_mismatch"
        /// Name constraints are malformed, have no subtree, or sit on an end-entity certificate.
        public static let nameConstraintsInvalid = "name_constraints_invalid"
        /// The policy constraints extension is not critical.
        public static let policyConstraintsInvalid = "policy_constraints_invalid"
        /// The authority information access extension is critical.
        public static let aiaInvalid = "aia_invalid"
        /// An extension is malformed or appears twice.
        public static let extensionInvalid = "extension_invalid"
        /// The peer's host cannot select a host rule (not ASCII, a zone that is not an IPv6 interface).
        public static let invalidHost = "invalid_host"
        /// A wildcard name covers a whole public suffix (`*.com`) and matches nothing.
        public static let wildcardPublicSuffix = "wildcard_public_suffix"
        // Pins and rules
        /// No SPKI pin of a set in force matches the chain.
        public static let pinMismatch = "pin_mismatch"
        /// The pins in force expired and their rule fails closed after expiry (a rule that stops
        /// enforcing at expiry gives no reason).
        public static let pinExpired = "pin_expired"
        /// The chain is trusted but the peer matches no entry of an allow-list in force (the
        /// policy's, its host rule's or the overrides' ``PeerAllowList``): who may connect. The
        /// message names the list and each kind looked at (CN, OU, DNS SANs, URI SANs, key,
        /// anchor) with what the certificate had.
        public static let notAllowed = "not_allowed"
        /// The peer presented no certificate.
        public static let emptyChain = "empty_chain"
        /// A server was evaluated under a policy that checks names, but no name or IP to check
        /// it against was given (fatal: fail closed rather than skip the check silently).
        public static let noPeerName = "no_peer_name"
        /// The policy itself is invalid (a host rule with an empty verify-as...): nothing is trusted.
        public static let invalidPolicy = "invalid_policy"
        /// Revocation is checked with mode hard and no source gave the status of a certificate
        /// of the chain (unreachable, stale, unsupported, invalid): refused. (A certificate
        /// found revoked is ``revoked``, in every mode.)
        public static let revocationUnknown = "revocation_unknown"
    }

    /// Codes whose failure a user could reasonably override or that time may fix: expiry, a name
    /// mismatch, an unknown root. Anything else is fatal.
    static let recoverableCodes: Set<String> = [
        Code.expired, Code.notYetValid, Code.nameMismatch, Code.untrustedRoot, Code.unknownIssuer,
        Code.crlUnavailable,
    ]
}

/// The overall verdict.
public enum TrustResultKind: String, Sendable {
    /// Trusted: go on.
    case proceed
    /// Not trusted, for reasons a user may override or that time fixes (expiry, name mismatch,
    /// unknown root).
    case recoverableFailure = "recoverable_failure"
    /// Not trusted, and must not be overridden (bad signature, revocation, pin mismatch,
    /// malformed certificate...).
    case fatalFailure = "fatal_failure"
}

/// The result of ``TrustPolicy/evaluate(chain:host:purpose:at:overrides:)``.
public struct TrustResult: Sendable {
    /// Whether the peer is trusted.
    public let trusted: Bool
    /// The verdict's kind.
    public let kind: TrustResultKind
    /// Every reason the peer is not trusted (empty when trusted), plus, for report-only rules,
    /// the failures that were reported but not enforced.
    public let reasons: [TrustReason]
    /// The chain OpenSSL built, leaf first, ending at the anchor (or at the last certificate it
    /// could find when it failed).
    public let chain: [Certificate]
    /// The pattern of the host rule that applied, if any.
    public var matchedRule: String? { details.matchedRule }
    /// The pin (`sha256/BASE64`) that matched a certificate of the built chain, if any (with
    /// several sets of pins in force, the last set's: the overrides', else the policy's, else the rule's).
    public var matchedPin: String? { details.matchedPin }
    /// Where each decision came from: the rule, and whether the anchors, anchors-only, the name
    /// and each set of pins came from the rule, the policy or the overrides. nil only when no
    /// evaluation could be made (an invalid policy, an empty chain).
    public var provenance: TrustProvenance? { details.provenance }
    /// The failures of a report-only rule that were reported and not enforced (also in ``reasons``).
    public var reportedReasons: [TrustReason] { details.reportedReasons }
    /// What revocation checking found, when the policy or rule checks revocation (nil: off).
    public var revocation: RevocationReport? { details.revocation }
    /// Things a trusted result wants known: a soft revocation check that could not find a
    /// certificate's status ("trusted anyway").
    public var warnings: [String] { details.warnings }

    /// The fields above, kept apart and shared by every copy of this result (the evaluation
    /// cache's, each connection's): a result is 32 bytes inline, not 160 (issue 40: an accepted
    /// connection keeps its evaluation for its life).
    private let details: Details
    private final class Details: Sendable {
        let matchedRule: String?
        let matchedPin: String?
        let provenance: TrustProvenance?
        let reportedReasons: [TrustReason]
        let revocation: RevocationReport?
        let warnings: [String]
        init(matchedRule: String?, matchedPin: String?, provenance: TrustProvenance?, reportedReasons: [TrustReason],
             revocation: RevocationReport?, warnings: [String]) {
            self.matchedRule = matchedRule
            self.matchedPin = matchedPin
            self.provenance = provenance
            self.reportedReasons = reportedReasons
            self.revocation = revocation
            self.warnings = warnings
        }
    }

    /// The evaluator's fatal failure, found before any chain is built (a policy that does not
    /// load, no certificate, a host no rule can be chosen for): one reason, no chain.
    package static func fatal(_ code: String, _ message: String, matchedRule: String? = nil) -> TrustResult {
        TrustResult(trusted: false, kind: .fatalFailure, reasons: [TrustReason(code: code, certIndex: nil, message: message)],
                    chain: [], matchedRule: matchedRule, matchedPin: nil)
    }

    /// A result with these fields. Only the evaluator's results are decisions; this is for
    /// tests of code that handles results (an `MTLSPeerRejected` from `MTLSNIOSSL`...).
    public init(trusted: Bool, kind: TrustResultKind, reasons: [TrustReason], chain: [Certificate],
                matchedRule: String?, matchedPin: String?, provenance: TrustProvenance? = nil,
                reportedReasons: [TrustReason] = [], revocation: RevocationReport? = nil, warnings: [String] = []) {
        self.trusted = trusted
        self.kind = kind
        self.reasons = reasons
        self.chain = chain
        details = Details(matchedRule: matchedRule, matchedPin: matchedPin, provenance: provenance,
                          reportedReasons: reportedReasons, revocation: revocation, warnings: warnings)
    }

    /// This result with revocation checking's outcome: its refusals are reasons that refuse the
    /// peer (`revoked` is fatal, as is `revocation_unknown`), its warnings are kept.
    func with(revocation outcome: RevocationChecker.Outcome) -> TrustResult {
        let refusals = outcome.refusals.map {
            TrustReason(code: $0.kind == .revoked ? TrustReason.Code.revoked : TrustReason.Code.revocationUnknown,
                        certIndex: $0.certIndex, message: $0.message)
        }
        let refused = !refusals.isEmpty
        return TrustResult(trusted: trusted && !refused, kind: refused ? .fatalFailure : kind, reasons: reasons + refusals,
                           chain: chain, matchedRule: matchedRule, matchedPin: matchedPin, provenance: provenance,
                           reportedReasons: reportedReasons, revocation: outcome.report, warnings: warnings + outcome.warnings)
    }

    /// The codes of ``reasons``, in order.
    public var reasonCodes: [String] { reasons.map(\.code) }
}

/// What a report-only host rule hands the application when it would have failed an evaluation.
public struct TrustReport: Sendable {
    /// The host that was evaluated (as given).
    public let host: String?
    /// The pattern of the report-only rule.
    public let rule: String
    /// The failures that were not enforced.
    public let reasons: [TrustReason]
    /// The built chain, leaf first.
    public let chain: [Certificate]
}
