import FoundationEssentials

/// What a peer is being trusted for: the TLS server (checked by a client) or a TLS client (checked
/// by a server). Selects the required extended key usage and OpenSSL's purpose.
public enum TrustPurpose: String, Sendable, CaseIterable {
    case serverAuth = "server"
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

    public var description: String {
        certIndex.map { "\(code) (cert \($0)): \(message)" } ?? "\(code): \(message)"
    }

    /// The reason codes libmtls produces. Stable: never renamed, new ones are added.
    public enum Code {
        // From OpenSSL's path validation
        public static let expired = "expired"
        public static let notYetValid = "not_yet_valid"
        public static let nameMismatch = "name_mismatch"
        public static let untrustedRoot = "untrusted_root"
        public static let unknownIssuer = "unknown_issuer"
        public static let badSignature = "bad_signature"
        public static let revoked = "revoked"
        public static let crlUnavailable = "crl_unavailable"
        public static let crlInvalid = "crl_invalid"
        public static let wrongPurpose = "wrong_purpose"
        public static let notACA = "not_a_ca"
        public static let pathLengthExceeded = "path_length_exceeded"
        public static let chainTooLong = "chain_too_long"
        public static let nameConstraintViolation = "name_constraint_violation"
        public static let unhandledCriticalExtension = "unhandled_critical_extension"
        public static let weakKey = "weak_key"
        public static let weakSignature = "weak_signature"
        public static let malformedCertificate = "malformed_certificate"
        public static let policyViolation = "policy_violation"
        public static let verificationError = "verification_error"
        // libmtls's policy layer (checks OpenSSL does not make)
        public static let serialNumberInvalid = "serial_number_invalid"
        public static let versionUnsupported = "version_unsupported"
        public static let emptyName = "empty_name"
        public static let validityEncoding = "validity_encoding"
        public static let akiMissing = "aki_missing"
        public static let akiInvalid = "aki_invalid"
        public static let skiMissing = "ski_missing"
        public static let skiInvalid = "ski_invalid"
        public static let ekuMissing = "eku_missing"
        public static let ekuInvalid = "eku_invalid"
        public static let anchorHasEKU = "anchor_has_eku"
        public static let sanMissing = "san_missing"
        public static let sanInvalid = "san_invalid"
        public static let commonNameMismatch = "common_name_mismatch"
        public static let caAsLeaf = "ca_as_leaf"
        public static let basicConstraintsInvalid = "basic_constraints_invalid"
        public static let keyForbidden = "key_forbidden"
        public static let signatureAlgorithmMismatch = "signature_algorithm_mismatch"
        public static let nameConstraintsInvalid = "name_constraints_invalid"
        public static let policyConstraintsInvalid = "policy_constraints_invalid"
        public static let aiaInvalid = "aia_invalid"
        public static let extensionInvalid = "extension_invalid"
        public static let invalidHost = "invalid_host"
        public static let wildcardPublicSuffix = "wildcard_public_suffix"
        // Pins and rules
        public static let pinMismatch = "pin_mismatch"
        public static let pinExpired = "pin_expired"
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

/// The result of ``TrustPolicy/evaluate(chain:host:purpose:at:)``.
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
    public let matchedRule: String?
    /// The pin (`sha256/BASE64`) that matched a certificate of the built chain, if any (with
    /// several sets of pins in force, the last set's: the overrides', else the policy's, else the rule's).
    public let matchedPin: String?
    /// Where each decision came from: the rule, and whether the anchors, anchors-only, the name
    /// and each set of pins came from the rule, the policy or the overrides. nil only when no
    /// evaluation could be made (an invalid policy, an empty chain).
    public let provenance: TrustProvenance?
    /// The failures of a report-only rule that were reported and not enforced (also in ``reasons``).
    public let reportedReasons: [TrustReason]
    /// What revocation checking found, when the policy or rule checks revocation (nil: off).
    public let revocation: RevocationReport?
    /// Things a trusted result wants known: a soft revocation check that could not find a
    /// certificate's status ("trusted anyway").
    public let warnings: [String]

    /// A result as the evaluator makes it (public for tests and wrappers).
    public init(trusted: Bool, kind: TrustResultKind, reasons: [TrustReason], chain: [Certificate],
                matchedRule: String?, matchedPin: String?, provenance: TrustProvenance? = nil,
                reportedReasons: [TrustReason] = [], revocation: RevocationReport? = nil, warnings: [String] = []) {
        self.trusted = trusted
        self.kind = kind
        self.reasons = reasons
        self.chain = chain
        self.matchedRule = matchedRule
        self.matchedPin = matchedPin
        self.provenance = provenance
        self.reportedReasons = reportedReasons
        self.revocation = revocation
        self.warnings = warnings
    }

    /// This result with revocation checking's outcome: its reasons refuse the peer (`revoked` is
    /// fatal, as is `revocation_unknown`), its warnings are kept.
    func with(revocation outcome: RevocationChecker.Outcome) -> TrustResult {
        let refused = !outcome.reasons.isEmpty
        return TrustResult(trusted: trusted && !refused, kind: refused ? .fatalFailure : kind, reasons: reasons + outcome.reasons,
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
