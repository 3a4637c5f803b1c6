internal import COpenSSL
import FoundationEssentials

/// What a PKCS#12 file holds: one ``Identity`` per private key (matched to its certificate),
/// and every certificate in the file (the identities' leaves and chains included).
public struct PKCS12Contents: Sendable {
    /// One identity per private key in the file, in file order.
    public let identities: [Identity]
    /// Every certificate in the file, in file order.
    public let certificates: [Certificate]
    /// Which password encoding opened the file: the password given, or — when none or the
    /// empty one was given — the empty password or no password (whichever worked; both are
    /// tried, as OpenSSL's `PKCS12_parse` does).
    public let passwordEncoding: PKCS12PasswordEncoding

    /// Wraps identities and certificates (for callers that assemble contents themselves).
    public init(identities: [Identity], certificates: [Certificate], passwordEncoding: PKCS12PasswordEncoding = .given) {
        self.identities = identities
        self.certificates = certificates
        self.passwordEncoding = passwordEncoding
    }

    /// The first identity, for callers that need one. Throws ``MTLSError/Code/noIdentity``
    /// for a certificate-only file.
    public func requireIdentity() throws -> Identity {
        guard let first = identities.first else {
            throw MTLSError(.noIdentity, "the PKCS#12 file holds no private key (\(certificates.count) certificate(s) only)")
        }
        return first
    }
}

/// The password encoding that opened a PKCS#12 file (see ``PKCS12Contents/passwordEncoding``).
public enum PKCS12PasswordEncoding: String, Sendable {
    /// The non-empty password given.
    case given
    /// The empty password (a BMPString holding only its terminating zero).
    case empty
    /// No password at all (the PKCS#12 NULL password).
    case absent
}

/// How ``PKCS12/export(_:password:options:)`` protects the file.
public struct PKCS12ExportOptions: Sendable {
    /// The password-based encryption of key and certificate bags.
    public enum Scheme: Sendable {
        /// PBES2: AES-256-CBC with PBKDF2-HMAC-SHA256, and an HMAC-SHA256 MAC.
        case modern
        /// pbeWithSHAAnd3-KeyTripleDES-CBC for keys and certificates, and an HMAC-SHA1 MAC,
        /// for old consumers (Windows before 10 1709, old Java, old macOS).
        case legacy
    }

    /// The encryption scheme.
    public var scheme: Scheme
    /// The friendly name (label) stored with the key and the leaf; nil keeps the identity's own.
    public var friendlyName: String?
    /// PBKDF2 and MAC iteration count.
    public var iterations: Int

    /// AES-256-CBC + PBKDF2-SHA256 + SHA-256 MAC, 2048 iterations (OpenSSL's default).
    public static let modern = PKCS12ExportOptions(scheme: .modern, friendlyName: nil, iterations: 2048)
    /// 3DES + SHA-1 MAC, 2048 iterations.
    public static let legacy = PKCS12ExportOptions(scheme: .legacy, friendlyName: nil, iterations: 2048)

    /// Options with `scheme`, the friendly name written on the bags, and the PBKDF2/MAC iteration count.
    public init(scheme: Scheme, friendlyName: String? = nil, iterations: Int = 2048) {
        self.scheme = scheme
        self.friendlyName = friendlyName
        self.iterations = iterations
    }
}

/// PKCS#12 (`.p12`, `.pfx`) import and export. All OpenSSL work runs in libmtls's own library
/// context, so the legacy provider (RC2, 3DES) is never loaded into the host program's.
public enum PKCS12 {
    /// The largest PKCS#12 input accepted: 16 MiB.
    public static let maxInputSize = FileIO.maxReadSize

    /// Parses a PKCS#12 file. `password: nil` means "no password" (the PKCS#12 NULL password),
    /// which is not the same encoding as the empty password; given either, the other is tried
    /// too, and ``PKCS12Contents/passwordEncoding`` tells which one opened the file.
    public static func parse(_ data: [UInt8], password: SecretBytes?) throws -> PKCS12Contents {
        try PKCS12Reader(data: data, password: password).read()
    }

    /// Reads and parses a PKCS#12 file (see ``parse(_:password:)``).
    public static func load(path: String, password: SecretBytes?) throws -> PKCS12Contents {
        try parse(FileIO.read(path, limit: maxInputSize), password: password)
    }

    /// Exports an identity (key, leaf and its whole chain) as a PKCS#12 file.
    public static func export(_ identity: Identity, password: SecretBytes,
                              options: PKCS12ExportOptions = .modern) throws -> [UInt8] {
        try PKCS12Writer(identity: identity, password: password, options: options).write()
    }
}
