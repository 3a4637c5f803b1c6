import FoundationEssentials
internal import CMTLSHeader

extension KeySpec {
    /// The key kinds `mtls pki`, token key generation and the C ABI accept, by their one
    /// spelling: the header's `MTLS_KEY_TYPE_*` names, which are written nowhere else.
    public static let issuingNames = [MTLS_KEY_TYPE_EC_P256, MTLS_KEY_TYPE_EC_P384, MTLS_KEY_TYPE_RSA_2048,
                                      MTLS_KEY_TYPE_RSA_3072, MTLS_KEY_TYPE_RSA_4096, MTLS_KEY_TYPE_ED25519]

    /// The key kind made when none is named (`MTLS_KEY_TYPE_EC_P256`, "the default" in mtls.h):
    /// for `mtls pki`, the C ABI's NULL `key_type` and every issuing function's default.
    public static let issuingDefault = KeySpec.ecP256

    /// The aliases accepted beside ``issuingNames``: the names ``Certificate``'s key type reports
    /// (`p256`, `rsa2048`...), which token key generation used to take (see mtls.h).
    static let aliases: [String: String] = [
        "p256": MTLS_KEY_TYPE_EC_P256, "p384": MTLS_KEY_TYPE_EC_P384, "rsa2048": MTLS_KEY_TYPE_RSA_2048,
        "rsa3072": MTLS_KEY_TYPE_RSA_3072, "rsa4096": MTLS_KEY_TYPE_RSA_4096,
    ]

    /// Parses one of ``issuingNames`` (`ec-p256`...) or an alias, in any case. Throws
    /// ``MTLSError/Code/invalidArgument`` naming the accepted kinds otherwise.
    public init(issuingName name: String) throws {
        let lower = name.lowercased()
        switch Self.aliases[lower] ?? lower {
        case MTLS_KEY_TYPE_EC_P256: self = .ecP256
        case MTLS_KEY_TYPE_EC_P384: self = .ecP384
        case MTLS_KEY_TYPE_RSA_2048: self = .rsa(bits: 2048)
        case MTLS_KEY_TYPE_RSA_3072: self = .rsa(bits: 3072)
        case MTLS_KEY_TYPE_RSA_4096: self = .rsa(bits: 4096)
        case MTLS_KEY_TYPE_ED25519: self = .ed25519
        default:
            throw MTLSError(.invalidArgument, "unknown key kind \"\(name)\" (use one of \(KeySpec.issuingNames.joined(separator: ", ")))")
        }
    }

    /// The canonical name of the key kind (one of ``issuingNames``).
    public var issuingName: String {
        switch self {
        case .ecP256: return MTLS_KEY_TYPE_EC_P256
        case .ecP384: return MTLS_KEY_TYPE_EC_P384
        case .rsa(let bits) where bits == 2048: return MTLS_KEY_TYPE_RSA_2048
        case .rsa(let bits) where bits == 3072: return MTLS_KEY_TYPE_RSA_3072
        case .rsa(let bits) where bits == 4096: return MTLS_KEY_TYPE_RSA_4096
        case .rsa(let bits): return "rsa-\(bits)"
        case .ed25519: return MTLS_KEY_TYPE_ED25519
        }
    }

    /// Whether generating this key may take more than a second (callers show progress).
    public var isSlowToGenerate: Bool {
        if case .rsa(let bits) = self { return bits >= 3072 }
        return false
    }
}

extension PrivateKey {
    /// The key as a PEM file's content: `ENCRYPTED PRIVATE KEY` (see ``encryptedPEM(password:)``)
    /// when a password is given, otherwise an unencrypted PKCS#8 `PRIVATE KEY` block, which
    /// callers must only write to an owner-only (0600) file.
    public func pemFile(password: SecretBytes?) throws -> SecretBytes {
        if let password { return SecretBytes(Array(try encryptedPEM(password: password).utf8)) }
        let der = try pkcs8DER()
        var b64 = der.withBytes { Array(Data($0).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed]).utf8) }
        defer { SecretBytes.wipe(&b64) }
        var out = Array("-----BEGIN PRIVATE KEY-----\n".utf8)
        out.append(contentsOf: b64)
        out.append(contentsOf: Array("\n-----END PRIVATE KEY-----\n".utf8))
        defer { SecretBytes.wipe(&out) }
        return SecretBytes(out)
    }
}
