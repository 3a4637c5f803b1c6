internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A subject alternative name.
public enum SubjectAltName: Hashable, Sendable, CustomStringConvertible {
    case dns(String)
    /// An IP address in its textual form (`192.0.2.1`, `2001:db8::1`).
    case ip(String)
    case email(String)
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
    case rsa(bits: Int)
    case ec(curve: String, bits: Int)
    case ed25519
    case ed448
    case dsa(bits: Int)
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
    init(pkey: OpaquePointer) {
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
        guard let raw = X509_get_ext_d2i(x509, NID_subject_alt_name, nil, nil) else { return [] }
        let gens = OpaquePointer(raw)
        defer { mtls_ossl_GENERAL_NAMES_free(gens) }
        var out: [SubjectAltName] = []
        for i in 0..<mtls_ossl_sk_GENERAL_NAME_num(gens) {
            guard let gen = mtls_ossl_sk_GENERAL_NAME_value(gens, i) else { continue }
            switch gen.pointee.type {
            case GEN_DNS: out.append(.dns(Self.string(gen.pointee.d.dNSName)))
            case GEN_EMAIL: out.append(.email(Self.string(gen.pointee.d.rfc822Name)))
            case GEN_URI: out.append(.uri(Self.string(gen.pointee.d.uniformResourceIdentifier)))
            case GEN_IPADD:
                let bytes = Self.bytes(gen.pointee.d.iPAddress)
                out.append(.ip(IPAddress.text(bytes) ?? Encoding.hex(bytes)))
            default: continue
            }
        }
        return out
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

    static func rfc4514(_ name: OpaquePointer?) -> String {
        guard let name, let bio = try? MemoryBIO() else { return "" }
        let flags = mtls_ossl_XN_FLAG_RFC2253_UTF8()
        guard X509_NAME_print_ex(bio.bio, name, 0, flags) >= 0 else { return "" }
        return String(decoding: bio.contents, as: UTF8.self)
    }

    static func commonName(_ name: OpaquePointer?) -> String? {
        guard let name else { return nil }
        var last: String? = nil
        var idx: Int32 = -1
        while true {
            idx = X509_NAME_get_index_by_NID(name, NID_commonName, idx)
            if idx < 0 { break }
            guard let entry = X509_NAME_get_entry(name, idx),
                  let data = X509_NAME_ENTRY_get_data(entry) else { continue }
            var utf8: UnsafeMutablePointer<UInt8>? = nil
            let n = ASN1_STRING_to_UTF8(&utf8, data)
            if n >= 0, let utf8 {
                last = String(decoding: UnsafeBufferPointer(start: utf8, count: Int(n)), as: UTF8.self)
                mtls_ossl_OPENSSL_free(utf8)
            }
        }
        return last
    }

    static func oidText(_ obj: OpaquePointer) -> String {
        var buf = [CChar](repeating: 0, count: 128)
        let n = OBJ_obj2txt(&buf, Int32(buf.count), obj, 1)
        return n > 0 ? String(cBuffer: buf) : ""
    }

    static func bytes(_ s: UnsafeMutablePointer<ASN1_STRING>?) -> [UInt8] {
        guard let s, let p = mtls_ossl_ASN1_STRING_get0_data(s) else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: Int(ASN1_STRING_length(s))))
    }

    static func string(_ s: UnsafeMutablePointer<ASN1_STRING>?) -> String {
        String(decoding: bytes(s), as: UTF8.self)
    }

    static func date(_ t: UnsafePointer<ASN1_TIME>?) -> Date {
        guard let t else { return Date(timeIntervalSince1970: 0) }
        var tm = Glibc.tm()
        guard ASN1_TIME_to_tm(t, &tm) == 1 else { return Date(timeIntervalSince1970: 0) }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tm)))
    }
}

/// IP address text and bytes (internal: the public API takes and gives addresses as text).
enum IPAddress {
    /// Text of a 4- or 16-byte address, or nil for another length.
    static func text(_ bytes: [UInt8]) -> String? {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        switch bytes.count {
        case 4: return bytes.withUnsafeBytes { inet_ntop(AF_INET, $0.baseAddress, &buf, socklen_t(buf.count)) }.map { _ in String(cBuffer: buf) }
        case 16: return bytes.withUnsafeBytes { inet_ntop(AF_INET6, $0.baseAddress, &buf, socklen_t(buf.count)) }.map { _ in String(cBuffer: buf) }
        default: return nil
        }
    }

    /// The bytes of an IPv4 or IPv6 literal (brackets allowed around IPv6), or nil if `text` is
    /// not an IP literal.
    static func bytes(_ text: String) -> [UInt8]? {
        var t = text
        if t.hasPrefix("["), t.hasSuffix("]") { t = String(t.dropFirst().dropLast()) }
        var v4 = [UInt8](repeating: 0, count: 4)
        if inet_pton(AF_INET, t, &v4) == 1 { return v4 }
        var v6 = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET6, t, &v6) == 1 { return v6 }
        return nil
    }

    /// An address with its IPv6 zone (scope) id kept apart: `fe80::1%eth0` and `[::1%1]` are
    /// the addresses `fe80::1` and `::1` with the zones `eth0` and `1`. The zone picks the link a
    /// link-local address is on; it is not part of the address, so host rules for the address
    /// apply to it (a rule may name a zone too, see ``HostPattern``). Any spelling
    /// ``reached(_:)`` takes is taken for the address; a zone is allowed only after an IPv6
    /// literal and must be an interface name or index (1–64 characters, none of
    /// `%`, `:`, `/`, `[`, `]`, space or control). nil for a name, an IPv4 address with a zone, or
    /// a malformed zone.
    static func scoped(_ text: String) -> (address: [UInt8], zone: String?)? {
        var t = text
        if t.hasPrefix("["), t.hasSuffix("]") { t = String(t.dropFirst().dropLast()) }
        guard let percent = t.firstIndex(of: "%") else { return reached(t).map { ($0, nil) } }
        let address = String(t[..<percent]), zone = String(t[t.index(after: percent)...])
        guard address.contains(":"), isValidZone(zone), let bytes = reached(address) else { return nil }
        return (bytes, zone)
    }

    /// Interface names on Linux are at most 15 bytes and interface indexes are decimal; the
    /// limit and the refused characters keep a zone from carrying a port, a path or a second
    /// address.
    static func isValidZone(_ zone: String) -> Bool {
        !zone.isEmpty && zone.utf8.count <= 64
            && zone.utf8.allSatisfy { c in c > 0x20 && c < 0x7f && !"%:/[]".utf8.contains(c) }
    }

    /// Whether two zones name the same link: the same text, or an interface name and an index
    /// (or two spellings) the system maps to the same interface. nil zones are equal only to
    /// each other.
    static func sameZone(_ a: String?, _ b: String?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        if a == b { return true }
        func index(_ z: String) -> UInt32 {
            if let n = UInt32(z) { return n }
            return if_nametoindex(z)
        }
        let ia = index(a)
        return ia != 0 && ia == index(b)
    }

    /// The address a socket reaches when given `text` as a host: any numeric form the system's
    /// resolver takes without a lookup (`127.1`, `0177.0.0.1`, `0x7f.0.0.1`, `2130706433`,
    /// `0:0::1`), an IPv4-mapped IPv6 address (`::ffff:10.0.0.5`) being the IPv4 address. nil for
    /// a name.
    static func reached(_ text: String) -> [UInt8]? {
        var t = text
        if t.hasPrefix("["), t.hasSuffix("]") { t = String(t.dropFirst().dropLast()) }
        var b = bytes(t)
        if b == nil, t.contains(where: \.isNumber), t.allSatisfy({ $0.isHexDigit || "xX.:".contains($0) }) {
            var hints = addrinfo()
            hints.ai_flags = AI_NUMERICHOST
            var list: UnsafeMutablePointer<addrinfo>? = nil
            if getaddrinfo(t, nil, &hints, &list) == 0, let a = list?.pointee, let sa = a.ai_addr {
                switch a.ai_family {
                case AF_INET:
                    b = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { p in
                        withUnsafeBytes(of: p.pointee.sin_addr) { Array($0) }
                    }
                case AF_INET6:
                    b = sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
                        withUnsafeBytes(of: p.pointee.sin6_addr) { Array($0) }
                    }
                default: break
                }
            }
            if list != nil { freeaddrinfo(list) }
        }
        if let v6 = b, v6.count == 16, v6[0..<10].allSatisfy({ $0 == 0 }), v6[10] == 0xff, v6[11] == 0xff {
            return Array(v6[12..<16])
        }
        return b
    }
}
