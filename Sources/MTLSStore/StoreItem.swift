import FoundationEssentials

/// The class of a stored item. A label is unique within a class. The raw values are the header's
/// `MTLS_STORE_*` numbers (HeaderEnumTests compares them).
public enum StoreItemClass: Int32, CaseIterable, Sendable, CustomStringConvertible {
    /// A private key (sealed at rest) with its leaf certificate and chain.
    case identity = 1
    /// A certificate on its own, for example a pinned server root.
    case certificate = 2
    /// A reference to an identity whose key lives on a PKCS#11 token: its URI and certificate.
    case tokenIdentity = 3

    /// The stable name used in JSON and on the command line.
    public var name: String {
        switch self {
        case .identity: return "identity"
        case .certificate: return "certificate"
        case .tokenIdentity: return "token-identity"
        }
    }

    /// The class named `name` (`"identity"`, `"certificate"`, `"token-identity"`).
    public init?(name: String) {
        guard let c = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = c
    }

    /// The class's name (``name``).
    public var description: String { name }
}

/// What the store knows about an item without decrypting anything.
public struct StoreItemInfo: Hashable, Sendable {
    /// The item's label, unique within its class.
    public let label: String
    /// The item's class.
    public let itemClass: StoreItemClass
    /// The leaf certificate's subject (RFC 4514).
    public let subject: String
    /// The leaf certificate's issuer (RFC 4514).
    public let issuer: String
    /// The leaf certificate's notAfter.
    public let notAfter: Date
    /// Lowercase hex SHA-256 of the leaf certificate's DER.
    public let leafSHA256: String
    /// Lowercase hex SHA-256 of each chain certificate above the leaf, leaf's issuer first.
    public let chainSHA256: [String]
    /// The PKCS#11 URI of a token identity's key; nil for other classes.
    public let tokenURI: String?
    /// When the label was first stored.
    public let created: Date
    /// When the item was last put (replace updates this, not ``created``).
    public let modified: Date
}

extension StoreItemInfo {
    /// Whether this row is an enrollment record (an identity row labelled `mtls-enrollment:LABEL`,
    /// the label space records are kept under) rather than an identity. The one rule: such rows
    /// are never offered as identities (``CredentialStore/identities()``, automatic selection,
    /// `mtls_store_identities`, Python's `Store.identities()`), nor counted as expiring
    /// certificates; `mtls store list` shows them only with `--enrollments`.
    public var isEnrollmentRecord: Bool {
        itemClass == .identity && label.hasPrefix(Self.enrollmentRecordPrefix)
    }

    /// The label space of enrollment records: `mtls-enrollment:` and the identity's label
    /// (``EnrollmentRecord/label(for:)``, in the enrollment layer, names them).
    package static let enrollmentRecordPrefix = "mtls-enrollment:"
}
