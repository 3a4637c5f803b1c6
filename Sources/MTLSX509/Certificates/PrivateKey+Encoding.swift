internal import COpenSSL
import FoundationEssentials

/// The kind of key ``PrivateKey/generate(_:)`` makes.
public enum KeySpec: Hashable, Sendable {
    /// ECDSA on NIST P-256 (prime256v1).
    case ecP256
    /// ECDSA on NIST P-384 (secp384r1).
    case ecP384
    /// RSA with the given modulus size (2048 to 16384 bits).
    case rsa(bits: Int)
    /// Ed25519.
    case ed25519
}

extension PrivateKey {
    /// Parses a PEM private key: PKCS#8 (`PRIVATE KEY`), encrypted PKCS#8
    /// (`ENCRYPTED PRIVATE KEY`, which needs `password`), or a traditional `RSA PRIVATE KEY` /
    /// `EC PRIVATE KEY` block (unencrypted, or with OpenSSL's legacy `Proc-Type` encryption).
    ///
    /// Throws ``MTLSError/Code/badPassword`` when the key is encrypted and `password` is missing
    /// or wrong, ``MTLSError/Code/parse`` when the input holds no private key.
    public convenience init(pem: [UInt8], password: SecretBytes? = nil) throws {
        guard !pem.isEmpty else { throw MTLSError(.parse, "empty input: no private key") }
        let bio = try MemoryBIO(copying: pem)
        let encrypted = PrivateKey.looksEncrypted(pem)
        if encrypted && password == nil {
            throw MTLSError(.badPassword, "the private key is encrypted and no password was given (give it with --password-file FILE, the password argument in the C, Python and Swift APIs)")
        }
        // A fixed password (possibly empty) goes to OpenSSL through the `u` argument; with a
        // nil callback OpenSSL treats `u` as a NUL-terminated password string.
        var pw = [CChar]()
        pw.reserveCapacity((password?.count ?? 0) + 1)
        password?.withBytes { for b in $0 { pw.append(CChar(bitPattern: b)) } }
        pw.append(0)
        defer { pw.withUnsafeMutableBytes { mtls_ossl_OPENSSL_cleanse($0.baseAddress, $0.count) } }
        let key = pw.withUnsafeMutableBufferPointer { buf -> OpaquePointer? in
            PEM_read_bio_PrivateKey_ex(bio.bio, nil, nil, buf.baseAddress,
                                       LibraryContext.shared.ctx, nil)
        }
        guard let key else {
            if encrypted {
                throw MTLSError.openSSL(.badPassword, "cannot decrypt the private key (wrong password?)")
            }
            throw MTLSError.openSSL(.parse, "no private key in the PEM data")
        }
        OpenSSLErrorQueue.clear()
        self.init(takingOwnership: key)
    }

    /// Parses an unencrypted PKCS#8 `PrivateKeyInfo` in DER. Trailing bytes are an error.
    public convenience init(pkcs8DER: [UInt8]) throws {
        guard !pkcs8DER.isEmpty else { throw MTLSError(.parse, "empty input: no private key") }
        let key = pkcs8DER.withUnsafeBufferPointer { buf -> OpaquePointer? in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            guard let p8 = d2i_PKCS8_PRIV_KEY_INFO(nil, &p, buf.count) else { return nil }
            defer { PKCS8_PRIV_KEY_INFO_free(p8) }
            guard p == buf.baseAddress! + buf.count else { return nil }
            return EVP_PKCS82PKEY_ex(p8, LibraryContext.shared.ctx, nil)
        }
        guard let key else { throw MTLSError.openSSL(.parse, "not a PKCS#8 private key") }
        self.init(takingOwnership: key)
    }

    /// The unencrypted PKCS#8 `PrivateKeyInfo` DER, in a buffer that is wiped when released.
    /// Only for sealing under another key (the store); never write it out as is.
    public func pkcs8DER() throws -> SecretBytes {
        guard tokenURI == nil else {
            throw MTLSError(.unsupported, "the private key lives on a token and cannot be exported")
        }
        guard let p8 = EVP_PKEY2PKCS8(pkey) else {
            throw MTLSError.openSSL(.unsupported, "cannot encode the private key as PKCS#8")
        }
        defer { PKCS8_PRIV_KEY_INFO_free(p8) }
        guard let der = derEncode({ i2d_PKCS8_PRIV_KEY_INFO(p8, $0) }) else {
            throw MTLSError.openSSL(.internal, "cannot encode the private key as PKCS#8")
        }
        // SecretBytes takes over this very buffer (no copy is made), and wipes it on release.
        return SecretBytes(der)
    }

    /// The key as an `ENCRYPTED PRIVATE KEY` PEM block: PKCS#8 with PBES2, AES-256-CBC and
    /// PBKDF2-HMAC-SHA256 (OpenSSL's default iteration count).
    public func encryptedPEM(password: SecretBytes) throws -> String {
        guard tokenURI == nil else {
            throw MTLSError(.unsupported, "the private key lives on a token and cannot be exported")
        }
        let ctx = LibraryContext.shared.ctx
        guard let cipher = EVP_CIPHER_fetch(ctx, "AES-256-CBC", nil) else {
            throw MTLSError.openSSL(.unsupported, "AES-256-CBC is not available")
        }
        defer { EVP_CIPHER_free(cipher) }
        let bio = try MemoryBIO()
        let ok = password.withBytes { pw -> Int32 in
            // A zero-length password still needs a non-NULL pointer: NULL would make OpenSSL
            // prompt on the terminal.
            var empty: UInt8 = 0
            let base = pw.baseAddress.map { UnsafeMutablePointer(mutating: $0) } ?? withUnsafeMutablePointer(to: &empty) { $0 }
            return base.withMemoryRebound(to: CChar.self, capacity: max(pw.count, 1)) { p in
                PEM_write_bio_PKCS8PrivateKey(bio.bio, pkey, cipher, p, Int32(pw.count), nil, nil)
            }
        }
        guard ok == 1 else { throw MTLSError.openSSL(.internal, "cannot encrypt the private key") }
        var bytes = bio.contents
        defer { SecretBytes.wipe(&bytes) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Generates a new key in memory.
    public static func generate(_ spec: KeySpec) throws -> PrivateKey {
        let libctx = LibraryContext.shared.ctx
        let algorithm: String
        switch spec {
        case .ecP256, .ecP384: algorithm = "EC"
        case .rsa(let bits):
            guard (2048...16384).contains(bits) else {
                throw MTLSError(.invalidArgument, "RSA key size \(bits) is outside 2048...16384")
            }
            algorithm = "RSA"
        case .ed25519: algorithm = "ED25519"
        }
        guard let ctx = EVP_PKEY_CTX_new_from_name(libctx, algorithm, nil) else {
            throw MTLSError.openSSL(.unsupported, "\(algorithm) keys are not available")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot start \(algorithm) key generation")
        }
        switch spec {
        case .ecP256, .ecP384:
            let nid = spec == .ecP256 ? NID_X9_62_prime256v1 : NID_secp384r1
            guard mtls_ossl_EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, nid) == 1 else {
                throw MTLSError.openSSL(.internal, "cannot select the EC curve")
            }
        case .rsa(let bits):
            guard mtls_ossl_EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)) == 1 else {
                throw MTLSError.openSSL(.internal, "cannot set the RSA key size")
            }
        case .ed25519: break
        }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_generate(ctx, &key) == 1, let key else {
            throw MTLSError.openSSL(.internal, "\(algorithm) key generation failed")
        }
        return PrivateKey(takingOwnership: key)
    }

    /// Whether a PEM text holds an encrypted key (PKCS#8 or the legacy `Proc-Type` header).
    static func looksEncrypted(_ pem: [UInt8]) -> Bool {
        func contains(_ needle: String) -> Bool {
            let n = Array(needle.utf8)
            guard pem.count >= n.count else { return false }
            for i in 0...(pem.count - n.count) where pem[i] == n[0] {
                if pem[i..<(i + n.count)].elementsEqual(n) { return true }
            }
            return false
        }
        return contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || contains("Proc-Type: 4,ENCRYPTED")
    }
}
