package import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A subject alternative name.
public enum SubjectAltName: Hashable, Sendable, CustomStringConvertible {
    /// A DNS name.
    case dns(String)
    /// An IP address in its textual form (`192.0.2.1`, `2001:db8::1`).
    case ip(String)
    /// An email address (rfc822Name).
    case email(String)
    /// A URI.
    case uri(String)

    /// The name as text: `DNS:name`, `IP:address`, `email:...`, `URI:...`.
    public var description: String {
        switch self {
        case .dns(let v): return "DNS:\(v)"
        case .ip(let v): return "IP:\(v)"
        case .email(let v): return "email:\(v)"
        case .uri(let v): return "URI:\(v)"
        }
    }
}

/// The kind and size of a public (or private) key.
public enum KeyType: Hashable, Sendable, CustomStringConvertible {
    /// RSA with a modulus of `bits` bits.
    case rsa(bits: Int)
    /// EC on the named curve (`prime256v1`...), of `bits` bits.
    case ec(curve: String, bits: Int)
    /// Ed25519.
    case ed25519
    /// Ed448.
    case ed448
    /// DSA of `bits` bits.
    case dsa(bits: Int)
    /// Another algorithm, by its OpenSSL name.
    case other(name: String, bits: Int)

    /// The short form used by `mtls p12 inspect --json`: `rsa2048`, `p256`, `p384`, `p521`,
    /// `ed25519`; other keys give their OpenSSL name and size.
    public var shortName: String {
        switch self {
        case .rsa(let bits): return "rsa\(bits)"
        case .ec(let curve, let bits):
            switch curve {
            case "prime256v1", "P-256": return "p256"
            case "secp384r1", "P-384": return "p384"
            case "secp521r1", "P-521": return "p521"
            default: return "ec-\(curve)-\(bits)"
            }
        case .ed25519: return "ed25519"
        case .ed448: return "ed448"
        case .dsa(let bits): return "dsa\(bits)"
        case .other(let name, let bits): return "\(name.lowercased())\(bits)"
        }
    }

    /// The key size in bits (for EC, the curve's order size).
    public var bits: Int {
        switch self {
        case .rsa(let b), .dsa(let b): return b
        case .ec(_, let b): return b
        case .ed25519: return 256
        case .ed448: return 456
        case .other(_, let b): return b
        }
    }

    /// The short form (``shortName``).
    public var description: String { shortName }

    /// Reads the type of an `EVP_PKEY`.
    package init(pkey: OpaquePointer) {
        let bits = Int(EVP_PKEY_get_bits(pkey))
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA, EVP_PKEY_RSA_PSS: self = .rsa(bits: bits)
        case EVP_PKEY_EC:
            var buf = [CChar](repeating: 0, count: 80)
            var len = 0
            let curve = EVP_PKEY_get_group_name(pkey, &buf, buf.count, &len) == 1 ? String(cBuffer: buf) : "unknown"
            self = .ec(curve: curve, bits: bits)
        case EVP_PKEY_ED25519: self = .ed25519
        case EVP_PKEY_ED448: self = .ed448
        case EVP_PKEY_DSA: self = .dsa(bits: bits)
        default:
            let name = EVP_PKEY_get0_type_name(pkey).map { String(cString: $0) } ?? "unknown"
            self = .other(name: name, bits: bits)
        }
    }
}

/// One name of a GeneralNames (a subjectAltName entry, a name-constraint base), decoded once
/// for every reader: ``Certificate/subjectAltNames`` and the chain checks.
package enum GeneralName {
    case dns(String)
    /// The raw bytes: 4 or 16 in a subjectAltName, 8 or 32 (address and mask) in a constraint.
    case ip([UInt8])
    case email(String)
    case uri(String)
    case other

    package init(_ g: UnsafeMutablePointer<GENERAL_NAME>?) {
        guard let g else { self = .other; return }
        switch g.pointee.type {
        case GEN_DNS: self = .dns(Certificate.string(g.pointee.d.dNSName))
        case GEN_IPADD: self = .ip(Certificate.bytes(g.pointee.d.iPAddress))
        case GEN_EMAIL: self = .email(Certificate.string(g.pointee.d.rfc822Name))
        case GEN_URI: self = .uri(Certificate.string(g.pointee.d.uniformResourceIdentifier))
        default: self = .other
        }
    }
}

/// Key usage bits (RFC 5280 §4.2.1.3).
public struct KeyUsage: OptionSet, Hashable, Sendable {
    /// The bits, as in the extension (`digitalSignature` is 0x80, `decipherOnly` 0x8000).
    public let rawValue: UInt32
    /// Key usage from its bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// digitalSignature (0).
    public static let digitalSignature = KeyUsage(rawValue: 0x80)
    /// nonRepudiation, also named contentCommitment (1).
    public static let nonRepudiation = KeyUsage(rawValue: 0x40)
    /// keyEncipherment (2).
    public static let keyEncipherment = KeyUsage(rawValue: 0x20)
    /// dataEncipherment (3).
    public static let dataEncipherment = KeyUsage(rawValue: 0x10)
    /// keyAgreement (4).
    public static let keyAgreement = KeyUsage(rawValue: 0x08)
    /// keyCertSign (5): the key signs certificates.
    public static let keyCertSign = KeyUsage(rawValue: 0x04)
    /// cRLSign (6): the key signs CRLs.
    public static let cRLSign = KeyUsage(rawValue: 0x02)
    /// encipherOnly (7).
    public static let encipherOnly = KeyUsage(rawValue: 0x01)
    /// decipherOnly (8).
    public static let decipherOnly = KeyUsage(rawValue: 0x8000)

    /// RFC 5280 names of the bits that are set.
    public var names: [String] {
        let all: [(KeyUsage, String)] = [
            (.digitalSignature, "digitalSignature"), (.nonRepudiation, "nonRepudiation"),
            (.keyEncipherment, "keyEncipherment"), (.dataEncipherment, "dataEncipherment"),
            (.keyAgreement, "keyAgreement"), (.keyCertSign, "keyCertSign"), (.cRLSign, "cRLSign"),
            (.encipherOnly, "encipherOnly"), (.decipherOnly, "decipherOnly"),
        ]
        return all.filter { contains($0.0) }.map { $0.1 }
    }
}

/// Extended key usage purposes, as dotted OIDs.
public enum ExtendedKeyUsage {
    /// TLS server authentication (id-kp-serverAuth).
    public static let serverAuth = "1.3.6.1.5.5.7.3.1"
    /// TLS client authentication (id-kp-clientAuth).
    public static let clientAuth = "1.3.6.1.5.5.7.3.2"
    /// Code signing (id-kp-codeSigning).
    public static let codeSigning = "1.3.6.1.5.5.7.3.3"
    /// E-mail protection (id-kp-emailProtection).
    public static let emailProtection = "1.3.6.1.5.5.7.3.4"
    /// Time stamping (id-kp-timeStamping).
    public static let timeStamping = "1.3.6.1.5.5.7.3.8"
    /// OCSP response signing (id-kp-OCSPSigning).
    public static let ocspSigning = "1.3.6.1.5.5.7.3.9"
    /// anyExtendedKeyUsage.
    public static let any = "2.5.29.37.0"

    /// A short name for a known OID (`serverAuth`), else the OID itself.
    public static func name(of oid: String) -> String {
        switch oid {
        case serverAuth: return "serverAuth"
        case clientAuth: return "clientAuth"
        case codeSigning: return "codeSigning"
        case emailProtection: return "emailProtection"
        case timeStamping: return "timeStamping"
        case ocspSigning: return "OCSPSigning"
        case any: return "anyExtendedKeyUsage"
        default: return oid
        }
    }
}

/// The basicConstraints extension.
public struct BasicConstraints: Hashable, Sendable {
    /// Whether the certificate is a CA's (cA).
    public var isCA: Bool
    /// The pathLenConstraint, if any.
    public var pathLength: Int?
    /// Whether the extension is marked critical.
    public var critical: Bool
}

extension Certificate {
    /// The subject as RFC 4514 text (`CN=leaf,O=Example`).
    public var subject: String { Self.rfc4514(X509_get_subject_name(x509)) }
    /// The issuer as RFC 4514 text.
    public var issuer: String { Self.rfc4514(X509_get_issuer_name(x509)) }

    /// The subject's common name, or failing that the RFC 4514 subject.
    public var subjectSummary: String { commonName ?? subject }
    /// The issuer's common name, or failing that the RFC 4514 issuer.
    public var issuerSummary: String { Self.commonName(X509_get_issuer_name(x509)) ?? issuer }

    /// The last common name in the subject, if any.
    public var commonName: String? { Self.commonName(X509_get_subject_name(x509)) }

    /// The subject's organizational unit names (OU), in order, as UTF-8 text.
    public var organizationalUnits: [String] { Self.entries(X509_get_subject_name(x509), nid: NID_organizationalUnitName) }

    /// The DER of the subject name (for matching against CA lists).
    public var subjectNameDER: [UInt8] {
        derEncode { i2d_X509_NAME(X509_get_subject_name(x509), $0) } ?? []
    }
    /// The DER of the issuer name.
    public var issuerNameDER: [UInt8] {
        derEncode { i2d_X509_NAME(X509_get_issuer_name(x509), $0) } ?? []
    }

    /// The serial number as lowercase hex (no leading zeros beyond one byte's worth).
    public var serialHex: String {
        guard let serial = X509_get0_serialNumber(x509),
              let bn = ASN1_INTEGER_to_BN(serial, nil) else { return "" }
        defer { BN_free(bn) }
        guard let hex = BN_bn2hex(bn) else { return "" }
        defer { mtls_ossl_OPENSSL_free(hex) }
        return String(cString: hex).lowercased()
    }

    /// Start of the validity period.
    public var notBefore: Date { Self.date(X509_get0_notBefore(x509)) }
    /// End of the validity period.
    public var notAfter: Date { Self.date(X509_get0_notAfter(x509)) }

    /// Subject alternative names (DNS, IP, email, URI; other kinds are left out).
    public var subjectAltNames: [SubjectAltName] {
        (Self.decodedSANs(x509) ?? []).compactMap { name -> SubjectAltName? in
            switch name {
            case .dns(let d): return .dns(d)
            case .email(let m): return .email(m)
            case .uri(let u): return .uri(u)
            case .ip(let bytes): return .ip(IPAddress.text(bytes) ?? Encoding.hex(bytes))
            case .other: return nil
            }
        }
    }

    /// The subjectAltName entries of `x`: [] when it has none, nil when the extension is present
    /// but does not decode (what the chain checks refuse).
    package static func decodedSANs(_ x: OpaquePointer) -> [GeneralName]? {
        var crit: Int32 = 0
        guard let raw = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, nil) else {
            OpenSSLErrorQueue.clear()
            return crit == -1 ? [] : nil
        }
        let gens = OpaquePointer(raw)
        defer { mtls_ossl_GENERAL_NAMES_free(gens) }
        return (0..<mtls_ossl_sk_GENERAL_NAME_num(gens)).map { GeneralName(mtls_ossl_sk_GENERAL_NAME_value(gens, $0)) }
    }

    /// The public key's type and size.
    public var keyType: KeyType {
        guard let pk = X509_get0_pubkey(x509) else { return .other(name: "unknown", bits: 0) }
        return KeyType(pkey: pk)
    }

    /// basicConstraints, or nil when the extension is absent.
    public var basicConstraints: BasicConstraints? {
        let flags = X509_get_extension_flags(x509)
        guard flags & UInt32(EXFLAG_BCONS) != 0 else { return nil }
        let pathlen = X509_get_pathlen(x509)
        let idx = X509_get_ext_by_NID(x509, NID_basic_constraints, -1)
        let critical = idx >= 0 && X509_EXTENSION_get_critical(X509_get_ext(x509, idx)) != 0
        return BasicConstraints(isCA: flags & UInt32(EXFLAG_CA) != 0,
                                pathLength: pathlen >= 0 ? Int(pathlen) : nil, critical: critical)
    }

    /// keyUsage, or nil when the extension is absent.
    public var keyUsage: KeyUsage? {
        guard X509_get_extension_flags(x509) & UInt32(EXFLAG_KUSAGE) != 0 else { return nil }
        return KeyUsage(rawValue: X509_get_key_usage(x509))
    }

    /// Extended key usages as dotted OIDs, or nil when the extension is absent.
    public var extendedKeyUsages: [String]? {
        guard let raw = X509_get_ext_d2i(x509, NID_ext_key_usage, nil, nil) else { return nil }
        let eku = OpaquePointer(raw)
        defer { mtls_ossl_EXTENDED_KEY_USAGE_free(eku) }
        return (0..<mtls_ossl_sk_ASN1_OBJECT_num(eku)).compactMap { i in
            mtls_ossl_sk_ASN1_OBJECT_value(eku, i).map(Self.oidText)
        }
    }

    /// Whether the certificate is self-issued (subject == issuer) and its signature verifies
    /// with its own key.
    public var isSelfSigned: Bool { X509_self_signed(x509, 1) == 1 }

    /// The signature algorithm's short name (`ecdsa-with-SHA256`, `sha256WithRSAEncryption`).
    public var signatureAlgorithm: String {
        let nid = X509_get_signature_nid(x509)
        return OBJ_nid2ln(nid).map { String(cString: $0) } ?? "unknown"
    }

    /// X.509 version (1, 2 or 3).
    public var version: Int { Int(mtls_ossl_X509_get_version(x509)) + 1 }

    /// SHA-256 of the DER encoding.
    public var sha256: [UInt8] { Encoding.sha256(der) }
    /// SHA-256 of the DER encoding, lowercase hex.
    public var sha256Hex: String { Encoding.hex(sha256) }

    /// DER of the SubjectPublicKeyInfo.
    public var spkiDER: [UInt8] {
        guard let pk = X509_get0_pubkey(x509) else { return [] }
        return derEncode { i2d_PUBKEY(pk, $0) } ?? []
    }
    /// SHA-256 of the SubjectPublicKeyInfo.
    public var spkiSHA256: [UInt8] { Encoding.sha256(spkiDER) }
    /// SHA-256 of the SubjectPublicKeyInfo, lowercase hex.
    public var spkiSHA256Hex: String { Encoding.hex(spkiSHA256) }
    /// The SPKI pin in the HPKP form `sha256/BASE64`.
    public var spkiPin: String { "sha256/" + Data(spkiSHA256).base64EncodedString() }

    // MARK: helpers

    package static func rfc4514(_ name: OpaquePointer?) -> String {
        guard let name, let bio = try? MemoryBIO() else { return "" }
        let flags = mtls_ossl_XN_FLAG_RFC2253_UTF8()
        guard X509_NAME_print_ex(bio.bio, name, 0, flags) >= 0 else { return "" }
        return String(decoding: bio.contents, as: UTF8.self)
    }

    static func commonName(_ name: OpaquePointer?) -> String? { entries(name, nid: NID_commonName).last }

    /// The values of the entries of `name` with attribute `nid`, in order, as UTF-8 text.
    static func entries(_ name: OpaquePointer?, nid: Int32) -> [String] {
        guard let name else { return [] }
        var out: [String] = []
        var idx: Int32 = -1
        while true {
            idx = X509_NAME_get_index_by_NID(name, nid, idx)
            if idx < 0 { break }
            guard let entry = X509_NAME_get_entry(name, idx),
                  let data = X509_NAME_ENTRY_get_data(entry) else { continue }
            var utf8: UnsafeMutablePointer<UInt8>? = nil
            let n = ASN1_STRING_to_UTF8(&utf8, data)
            if n >= 0, let utf8 {
                out.append(String(decoding: UnsafeBufferPointer(start: utf8, count: Int(n)), as: UTF8.self))
                mtls_ossl_OPENSSL_free(utf8)
            }
        }
        return out
    }

    package static func oidText(_ obj: OpaquePointer) -> String {
        var buf = [CChar](repeating: 0, count: 128)
        let n = OBJ_obj2txt(&buf, Int32(buf.count), obj, 1)
        return n > 0 ? String(cBuffer: buf) : ""
    }

    package static func bytes(_ s: UnsafeMutablePointer<ASN1_STRING>?) -> [UInt8] {
        guard let s, let p = mtls_ossl_ASN1_STRING_get0_data(s) else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: Int(ASN1_STRING_length(s))))
    }

    static func string(_ s: UnsafeMutablePointer<ASN1_STRING>?) -> String {
        String(decoding: bytes(s), as: UTF8.self)
    }

    package static func date(_ t: UnsafePointer<ASN1_TIME>?) -> Date {
        guard let t else { return Date(timeIntervalSince1970: 0) }
        var tm = Glibc.tm()
        guard ASN1_TIME_to_tm(t, &tm) == 1 else { return Date(timeIntervalSince1970: 0) }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tm)))
    }
}
