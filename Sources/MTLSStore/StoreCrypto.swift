internal import COpenSSL
import FoundationEssentials

/// The secret that opens a ``CredentialStore``: a passphrase (stretched with scrypt), or a
/// 32-byte random key kept in a file (used directly as the key-encryption key).
public enum StoreSecret: Sendable {
    /// A passphrase; the store derives its key-encryption key with scrypt.
    case passphrase(SecretBytes)
    /// A 32-byte key, for example from a key file made with `head -c 32 /dev/urandom`.
    case key(SecretBytes)

    /// Reads a passphrase file: always a passphrase, stretched with scrypt, whatever its length
    /// (a 32-byte file too: a raw key is chosen explicitly with ``loadKey(path:)``). The
    /// passphrase is the file's first line: its line ending (`\n` or `\r\n`) is dropped, so a
    /// file written with `echo` works. An empty first line is ``MTLSError/Code/invalidArgument``.
    /// The file is a secret file (``FileIO/readSecret(_:kind:)``): one others can write or everyone
    /// can read is refused.
    public static func load(path: String) throws -> StoreSecret {
        .passphrase(try FileIO.readSecret(path, kind: .storeSecret))
    }

    /// Reads a key file: exactly 32 bytes (for example from `head -c 32 /dev/urandom`), used as
    /// the key-encryption key without stretching. Any other length is
    /// ``MTLSError/Code/invalidArgument``. A secret file (``FileIO/readSecret(_:kind:)``), as
    /// ``load(path:)``.
    public static func loadKey(path: String) throws -> StoreSecret {
        let key = try FileIO.readSecret(path, kind: .storeKey)
        guard key.count == StoreCrypto.keyLength else {
            throw MTLSError(.invalidArgument, "the store key file \(path) holds \(key.count) bytes; a key file holds exactly \(StoreCrypto.keyLength) random bytes (use a passphrase file for anything else)")
        }
        return .key(key)
    }

    var kind: String {
        switch self {
        case .passphrase: return "scrypt"
        case .key: return "key"
        }
    }
}

/// scrypt cost parameters, written in the store's header so that a store opens with the
/// parameters it was made with.
public struct StoreKDFParameters: Hashable, Sendable, CustomStringConvertible {
    /// log2 of scrypt's N (CPU/memory cost).
    public var logN: Int
    /// scrypt's r (block size).
    public var r: Int
    /// scrypt's p (parallelism).
    public var p: Int

    /// scrypt with N = 2^`logN`, block size `r` and parallelism `p` (checked when used).
    public init(logN: Int, r: Int, p: Int) {
        self.logN = logN
        self.r = r
        self.p = p
    }

    /// The default: N = 2^17, r = 8, p = 1 (128 MiB, OWASP's recommended scrypt setting).
    public static let `default` = StoreKDFParameters(logN: 17, r: 8, p: 1)
    /// A cheap setting for tests only (N = 2^10): never use it for a real store, so not public
    /// (a test that needs it imports MTLS with `@testable`; C and Python pass the numbers).
    package static let testing = StoreKDFParameters(logN: 10, r: 8, p: 1)

    /// Memory scrypt needs for these parameters, in bytes.
    var memory: UInt64 { 128 * UInt64(r) * (UInt64(1) << UInt64(logN) + UInt64(p) + 2) }

    /// Refuses parameters a hostile or damaged header could use to make opening hang or
    /// exhaust memory (N ≤ 2^22, r ≤ 32, p ≤ 16, ≤ 1 GiB).
    public func validate() throws {
        guard (1...22).contains(logN), (1...32).contains(r), (1...16).contains(p), memory <= 1 << 30 else {
            throw MTLSError(.limitExceeded, "scrypt parameters N=2^\(logN) r=\(r) p=\(p) are outside libmtls's limits")
        }
    }

    /// "scrypt N=2^17 r=8 p=1".
    public var description: String { "scrypt N=2^\(logN) r=\(r) p=\(p)" }
}

/// AES-256-GCM sealing and scrypt, through OpenSSL in libmtls's own library context.
package enum StoreCrypto {
    static let keyLength = 32
    static let nonceLength = 12
    static let tagLength = 16

    /// Random bytes from OpenSSL's DRBG.
    static func random(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard RAND_bytes_ex(LibraryContext.shared.ctx, &out, count, 0) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot get random bytes")
        }
        return out
    }

    /// A fresh random data key.
    static func newKey() throws -> SecretBytes {
        let k = try random(keyLength)
        return SecretBytes(consume k)
    }

    /// Derives the key-encryption key from `secret` and `salt`.
    static func deriveKEK(_ secret: StoreSecret, salt: [UInt8], parameters: StoreKDFParameters) throws -> SecretBytes {
        switch secret {
        case .key(let key):
            guard key.count == keyLength else {
                throw MTLSError(.invalidArgument, "a store key must be \(keyLength) bytes, not \(key.count)")
            }
            return SecretBytes(key.storage)
        case .passphrase(let pass):
            guard pass.count > 0 else { throw MTLSError(.invalidArgument, "the store passphrase is empty") }
            try parameters.validate()
            var out = [UInt8](repeating: 0, count: keyLength)
            let ok = pass.withBytes { p in
                p.withMemoryRebound(to: CChar.self) { c in
                    EVP_PBE_scrypt_ex(c.baseAddress!, c.count, salt, salt.count,
                                      UInt64(1) << UInt64(parameters.logN), UInt64(parameters.r), UInt64(parameters.p),
                                      parameters.memory + (1 << 20), &out, out.count, LibraryContext.shared.ctx, nil)
                }
            }
            guard ok == 1 else {
                SecretBytes.wipe(&out)
                throw MTLSError.openSSL(.internal, "scrypt failed")
            }
            return SecretBytes(consume out)
        }
    }

    // A fetched EVP_CIPHER is immutable and may be used from any thread (OpenSSL 3 threading
    // docs); it is fetched once and never freed.
    nonisolated(unsafe) private static let cipher: OpaquePointer? = EVP_CIPHER_fetch(LibraryContext.shared.ctx, "AES-256-GCM", nil)

    /// Seals `plaintext` under `key` with AES-256-GCM and a random nonce: nonce ‖ ciphertext ‖ tag.
    package static func seal(_ plaintext: SecretBytes, key: SecretBytes, aad: [UInt8]) throws -> [UInt8] {
        guard let cipher, let ctx = EVP_CIPHER_CTX_new() else { throw MTLSError.openSSL(.internal, "AES-256-GCM is unavailable") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let nonce = try random(nonceLength)
        var out = [UInt8](repeating: 0, count: nonceLength + plaintext.count + tagLength)
        out.replaceSubrange(0..<nonceLength, with: nonce)
        let ok: Bool = key.withBytes { k in
            out.withUnsafeMutableBufferPointer { o in
                var n: Int32 = 0
                guard EVP_EncryptInit_ex2(ctx, cipher, k.baseAddress, nonce, nil) == 1 else { return false }
                if !aad.isEmpty {
                    guard EVP_EncryptUpdate(ctx, nil, &n, aad, Int32(aad.count)) == 1 else { return false }
                }
                let body = o.baseAddress! + nonceLength
                guard plaintext.withBytes({ EVP_EncryptUpdate(ctx, body, &n, $0.baseAddress, Int32($0.count)) }) == 1,
                      EVP_EncryptFinal_ex(ctx, body + Int(n), &n) == 1 else { return false }
                return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, Int32(tagLength), body + plaintext.count) == 1
            }
        }
        guard ok else { throw MTLSError.openSSL(.internal, "AES-256-GCM sealing failed") }
        return out
    }

    /// Opens what ``seal(_:key:aad:)`` made. Returns nil when authentication fails (wrong key,
    /// wrong associated data, or altered bytes).
    package static func open(_ sealed: [UInt8], key: SecretBytes, aad: [UInt8]) throws -> SecretBytes? {
        guard sealed.count >= nonceLength + tagLength else { return nil }
        guard let cipher, let ctx = EVP_CIPHER_CTX_new() else { throw MTLSError.openSSL(.internal, "AES-256-GCM is unavailable") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let bodyCount = sealed.count - nonceLength - tagLength
        var plain = [UInt8](repeating: 0, count: max(bodyCount, 1))
        let ok: Bool = key.withBytes { k in
            sealed.withUnsafeBufferPointer { s in
                plain.withUnsafeMutableBufferPointer { out in
                    var n: Int32 = 0
                    let base = s.baseAddress!
                    guard EVP_DecryptInit_ex2(ctx, cipher, k.baseAddress, base, nil) == 1 else { return false }
                    if !aad.isEmpty {
                        guard EVP_DecryptUpdate(ctx, nil, &n, aad, Int32(aad.count)) == 1 else { return false }
                    }
                    guard EVP_DecryptUpdate(ctx, out.baseAddress, &n, base + nonceLength, Int32(bodyCount)) == 1 else { return false }
                    let tag = UnsafeMutableRawPointer(mutating: base + nonceLength + bodyCount)
                    guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, Int32(tagLength), tag) == 1 else { return false }
                    return EVP_DecryptFinal_ex(ctx, out.baseAddress! + Int(n), &n) == 1
                }
            }
        }
        OpenSSLErrorQueue.clear()
        guard ok else {
            SecretBytes.wipe(&plain)
            return nil
        }
        if plain.count != bodyCount { plain.removeAll() }
        return SecretBytes(consume plain)
    }
}
