internal import COpenSSL
import FoundationEssentials

/// How an identity in a store was enrolled, so that renewing it needs nothing else: kept in
/// the same store, beside the identity, under ``EnrollmentRecord/label(for:)``.
///
/// It is stored as an ordinary identity row, so it is sealed and authenticated exactly like
/// every other row (and follows the store's secret changes): the row's private key is the ACME
/// account key (ES256), and its certificate — self-signed, never a trust anchor, CN
/// "libmtls enrollment record" — carries the record as JSON in a Netscape comment extension.
public struct EnrollmentRecord: Codable, Sendable, Equatable {
    /// "acme", "est" or "pki".
    public var source: String
    /// The ACME directory URL, the EST base URL, or the `mtls pki` directory.
    public var url: String
    /// The ACME account URL; for "pki", the intermediate CA's name; for "est", the basic-auth user.
    public var account: String?
    /// The DNS names and IP addresses (ACME), the name (pki), or the subject DN (EST).
    public var identifiers: [String]
    /// The key type of the identity's key ("p256", "rsa2048"...).
    public var keyType: String
    /// The token key's `pkcs11:` URI, when the identity's key lives on a token.
    public var tokenURI: String?
    /// The ACME challenge method (``ACMEChallengeMethod/recorded``).
    public var challenge: String?
    /// "server" or "client": the profile (pki) and the purpose the renewed chain is checked for.
    public var profile: String
    /// DER (base64) of the anchors the ACME or EST server's TLS certificate is checked against.
    public var directoryAnchors: [String]
    /// DER (base64) of the anchors a renewed chain must validate to (empty: the chain's own top).
    public var chainAnchors: [String]
    /// When the identity was last enrolled or renewed (seconds since 1970).
    public var enrolledAt: Double
    /// Token identities: the keys earlier renewals replaced, with when (absent in records
    /// written before it existed). Deleted after ``RenewalOptions/deletePreviousTokenKeysAfter``.
    public var previousTokenKeys: [RetiredTokenKey]? = nil
    /// EST: the basic-authentication password kept for re-enrollment (``ESTEnrollment/keepPassword``),
    /// sealed (AES-256-GCM, base64) under a key derived from the record's private key — which the
    /// store seals at rest — and bound to the EST URL and user. nil: no password kept.
    var sealedPassword: String? = nil

    /// Whether an EST password is kept with this record for re-enrollment.
    public var keepsPassword: Bool { sealedPassword != nil }

    /// A token key a renewal replaced.
    public struct RetiredTokenKey: Codable, Sendable, Equatable {
        /// The key's `pkcs11:` URI.
        public var uri: String
        /// When it was replaced (seconds since 1970).
        public var retiredAt: Double
    }

    /// The label of the record for the identity labelled `label`.
    public static func label(for label: String) -> String { StoreItemInfo.enrollmentRecordPrefix + label }

    /// The identity label a record label belongs to, or nil when it is not a record label.
    public static func identityLabel(ofRecord label: String) -> String? {
        let prefix = StoreItemInfo.enrollmentRecordPrefix
        return label.hasPrefix(prefix) ? String(label.dropFirst(prefix.count)) : nil
    }

    static let commonName = "libmtls enrollment record"
    /// The common name of a record's carrier certificate (how a listed row is told from an identity).
    public static var commonNameText: String { commonName }
    static let prefix = "libmtls-enrollment/v1:"

    /// The record with `key` (the ACME account key; a fresh one for sources that have none) as
    /// a store identity.
    func carrier(key: PrivateKey) throws -> Identity {
        let json = try JSONEncoder().encode(self)
        let comment = EnrollmentRecord.prefix + Data(json).base64EncodedString()
        guard let ext = comment.withCString({ X509V3_EXT_conf_nid(nil, nil, NID_netscape_comment, $0) }) else {
            throw MTLSError.openSSL(.internal, "cannot encode the enrollment record")
        }
        defer { X509_EXTENSION_free(ext) }
        let cert = try SelfSigned.make(key: key, commonName: EnrollmentRecord.commonName, validityDays: 36500, extensions: [ext])
        return try Identity(privateKey: key, leaf: cert)
    }

    /// Reads the record a carrier certificate holds.
    static func read(carrier: Certificate) throws -> EnrollmentRecord {
        var crit: Int32 = 0
        guard let raw = X509_get_ext_d2i(carrier.x509, NID_netscape_comment, &crit, nil) else {
            throw MTLSError(.corrupt, "the enrollment record has no record extension")
        }
        let ia5 = raw.assumingMemoryBound(to: ASN1_STRING.self)
        defer { ASN1_STRING_free(ia5) }
        let n = Int(ASN1_STRING_length(ia5))
        guard n > 0, n < 1 << 20, let data = ASN1_STRING_get0_data(ia5) else {
            throw MTLSError(.corrupt, "the enrollment record is empty")
        }
        let text = String(decoding: UnsafeBufferPointer(start: data, count: n), as: UTF8.self)
        guard text.hasPrefix(EnrollmentRecord.prefix), let json = Data(base64Encoded: String(text.dropFirst(EnrollmentRecord.prefix.count))) else {
            throw MTLSError(.corrupt, "the enrollment record is not readable")
        }
        do { return try JSONDecoder().decode(EnrollmentRecord.self, from: json) } catch {
            throw MTLSError(.corrupt, "the enrollment record is not readable: \(error)")
        }
    }

    static let passwordPurpose = "libmtls-enrollment/est-password/v1"

    private var passwordAAD: [UInt8] { Array((source + "\u{0}" + url + "\u{0}" + (account ?? "")).utf8) }

    /// Keeps `password` in the record, sealed under a key derived from `recordKey` (the key of
    /// the record's carrier row, which the store seals).
    mutating func keep(password: SecretBytes, recordKey: PrivateKey) throws {
        let key = try StoreRowAuthenticator.derive(try recordKey.pkcs8DER(), purpose: EnrollmentRecord.passwordPurpose)
        sealedPassword = Data(try StoreCrypto.seal(password, key: key, aad: passwordAAD)).base64EncodedString()
    }

    /// The password kept with the record (nil when none is), opened with `recordKey`.
    func keptPassword(recordKey: PrivateKey) throws -> SecretBytes? {
        guard let sealedPassword else { return nil }
        let key = try StoreRowAuthenticator.derive(try recordKey.pkcs8DER(), purpose: EnrollmentRecord.passwordPurpose)
        guard let sealed = Data(base64Encoded: sealedPassword),
              let password = try StoreCrypto.open(Array(sealed), key: key, aad: passwordAAD) else {
            throw MTLSError(.corrupt, "the EST password kept with the enrollment record does not open")
        }
        return password
    }

    static func encode(_ certificates: [Certificate]) -> [String] { certificates.map { Data($0.der).base64EncodedString() } }

    static func decode(_ texts: [String]) throws -> [Certificate] {
        try texts.map { t in
            guard let d = Data(base64Encoded: t) else { throw MTLSError(.corrupt, "an anchor in the enrollment record is unreadable") }
            return try Certificate(der: Array(d))
        }
    }
}

extension CredentialStore {
    /// The enrollment record of the identity labelled `label`, with its account key.
    /// ``MTLSError/Code/notFound`` when the identity was not enrolled by libmtls.
    public func enrollmentRecord(label: String) throws -> EnrollmentRecord {
        try enrollmentRecordAndKey(label: label).record
    }

    package func enrollmentRecordAndKey(label: String) throws -> (record: EnrollmentRecord, accountKey: PrivateKey) {
        let carrier: Identity
        do { carrier = try identity(label: EnrollmentRecord.label(for: label)) } catch let e as MTLSError where e.code == .notFound {
            throw MTLSError(.notFound, "\"\(label)\" has no enrollment record: enroll it with mtls enroll first")
        }
        return (try EnrollmentRecord.read(carrier: carrier.leaf), carrier.privateKey)
    }

    /// The labels of every identity that has an enrollment record.
    public func enrolledLabels() throws -> [String] {
        try list(itemClass: .identity).compactMap { EnrollmentRecord.identityLabel(ofRecord: $0.label) }
    }
}
