import FoundationEssentials

/// One revoked certificate, as a CRL lists it.
public struct Revocation: Hashable, Sendable {
    /// RFC 5280 CRLReason values.
    public enum Reason: Int, Sendable, CaseIterable {
        /// No reason given (RFC 5280 prefers leaving the reason out: `reason` nil).
        case unspecified = 0
        /// The subject's private key was compromised.
        case keyCompromise = 1
        /// The issuing CA's key was compromised.
        case caCompromise = 2
        /// The subject's name or other information changed.
        case affiliationChanged = 3
        /// The certificate was replaced by another.
        case superseded = 4
        /// The certificate is no longer needed.
        case cessationOfOperation = 5
        /// The certificate is suspended (a hold may be lifted).
        case certificateHold = 6
        /// A privilege the certificate stated was withdrawn.
        case privilegeWithdrawn = 9

        /// The RFC 5280 name (`keyCompromise`).
        public var name: String {
            switch self {
            case .unspecified: return "unspecified"
            case .keyCompromise: return "keyCompromise"
            case .caCompromise: return "cACompromise"
            case .affiliationChanged: return "affiliationChanged"
            case .superseded: return "superseded"
            case .cessationOfOperation: return "cessationOfOperation"
            case .certificateHold: return "certificateHold"
            case .privilegeWithdrawn: return "privilegeWithdrawn"
            }
        }

        /// Parses an RFC 5280 name, case-insensitively (`key-compromise` too).
        public init?(name: String) {
            let key = name.lowercased().filter { $0 != "-" && $0 != "_" }
            guard let r = Reason.allCases.first(where: { $0.name.lowercased() == key }) else { return nil }
            self = r
        }
    }

    /// The revoked certificate's serial number, lowercase hex without leading zeros (as
    /// ``Certificate/serialHex`` gives it).
    public var serialHex: String
    /// When it was revoked.
    public var date: Date
    /// Why; nil leaves the reason out of the CRL (RFC 5280 prefers that to `unspecified`).
    public var reason: Reason?

    /// A revocation of the certificate with serial `serialHex`, at `date`, for `reason`.
    public init(serialHex: String, date: Date, reason: Reason? = nil) {
        self.serialHex = serialHex
        self.date = date
        self.reason = reason
    }
}
