import FoundationEssentials

extension KeySpec {
    /// The key kinds `mtls pki` and the C ABI accept, by name.
    public static let issuingNames = ["ec-p256", "ec-p384", "rsa-2048", "rsa-3072", "rsa-4096", "ed25519"]

    /// Parses one of ``issuingNames`` (`ec-p256`...). Throws ``MTLSError/Code/invalidArgument``
    /// naming the accepted kinds otherwise.
    public init(issuingName name: String) throws {
        switch name.lowercased() {
        case "ec-p256", "p256": self = .ecP256
        case "ec-p384", "p384": self = .ecP384
        case "rsa-2048", "rsa2048": self = .rsa(bits: 2048)
        case "rsa-3072", "rsa3072": self = .rsa(bits: 3072)
        case "rsa-4096", "rsa4096": self = .rsa(bits: 4096)
        case "ed25519": self = .ed25519
        default:
            throw MTLSError(.invalidArgument, "unknown key kind \"\(name)\" (use one of \(KeySpec.issuingNames.joined(separator: ", ")))")
        }
    }

    /// The name ``init(issuingName:)`` accepts.
    public var issuingName: String {
        switch self {
        case .ecP256: return "ec-p256"
        case .ecP384: return "ec-p384"
        case .rsa(let bits): return "rsa-\(bits)"
        case .ed25519: return "ed25519"
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
