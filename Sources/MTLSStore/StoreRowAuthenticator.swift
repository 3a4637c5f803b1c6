internal import COpenSSL
import FoundationEssentials

/// HMAC-SHA256 over a store row's decision columns, under a key derived from the store's data
/// key, so that a row written by someone who can edit the file but does not know the secret
/// (a swapped certificate, an edited token URI) is refused on read.
///
/// The keyed context is made once per open and duplicated per row (cheap: no key schedule and
/// no algorithm fetch on the lookup path); freeing it clears the key.
package final class StoreRowAuthenticator: @unchecked Sendable {
    // @unchecked: `template` is only read (duplicated) after init, which OpenSSL allows from
    // several threads; the store calls it with its lock held anyway.
    private let template: OpaquePointer
    /// A keyed context re-initialised (same key) for each row read under the store's lock.
    private let reusable: OpaquePointer
    private var scratch: [UInt8] = []
    static let tagLength = 32

    /// Row tags of schema 3 (stores from before the authenticated header), checked once when
    /// such a store is upgraded.
    static let rowsV3 = "libmtls-store/row-mac/v1"
    /// Row tags of schema 4: a different key, so that a row of a current store never passes
    /// as a row of an older one.
    static let rowsV4 = "libmtls-store/row-mac/v2"
    /// The header MAC (``StoreHeader``).
    static let header = "libmtls-store/header-mac/v1"

    /// An authenticator under `HMAC(dataKey, purpose)`, so the data key itself is never used
    /// for two primitives and each purpose has its own key.
    init(dataKey: SecretBytes, purpose: String = StoreRowAuthenticator.rowsV4) throws {
        let base = try Self.keyed(dataKey.withBytes { Array($0) })
        defer { EVP_MAC_CTX_free(base) }
        var sub = try Self.tag(base, Array(purpose.utf8))
        defer { SecretBytes.wipe(&sub) }
        template = try Self.keyed(sub)
        guard let r = EVP_MAC_CTX_dup(template) else {
            EVP_MAC_CTX_free(template)
            throw MTLSError(.noMemory, "out of memory")
        }
        reusable = r
        scratch.reserveCapacity(512)
    }

    deinit {
        EVP_MAC_CTX_free(template)
        EVP_MAC_CTX_free(reusable)
    }

    private static func keyed(_ key: [UInt8]) throws -> OpaquePointer {
        var key = key
        defer { SecretBytes.wipe(&key) }
        guard let mac = EVP_MAC_fetch(LibraryContext.shared.ctx, "HMAC", nil) else {
            throw MTLSError.openSSL(.internal, "HMAC is unavailable")
        }
        defer { EVP_MAC_free(mac) }
        guard let ctx = EVP_MAC_CTX_new(mac) else { throw MTLSError(.noMemory, "out of memory") }
        let digestKey = strdup("digest"), digest = strdup("SHA256")
        defer { free(digestKey); free(digest) }
        var params = [OSSL_PARAM_construct_utf8_string(digestKey, digest, 0), OSSL_PARAM_construct_end()]
        guard EVP_MAC_init(ctx, key, key.count, &params) == 1 else {
            EVP_MAC_CTX_free(ctx)
            throw MTLSError.openSSL(.internal, "cannot key HMAC-SHA256")
        }
        return ctx
    }

    private static func tag(_ template: OpaquePointer, _ data: [UInt8]) throws -> [UInt8] {
        guard let ctx = EVP_MAC_CTX_dup(template) else { throw MTLSError(.noMemory, "out of memory") }
        defer { EVP_MAC_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: tagLength)
        var n = 0
        guard EVP_MAC_update(ctx, data, data.count) == 1, EVP_MAC_final(ctx, &out, &n, out.count) == 1, n == tagLength else {
            throw MTLSError.openSSL(.internal, "HMAC-SHA256 failed")
        }
        return out
    }

    /// A 32-byte key for `purpose` derived from `secret` (HMAC-SHA256(secret, purpose)), as the
    /// row and header keys are derived from the data key: one key per purpose.
    package static func derive(_ secret: SecretBytes, purpose: String) throws -> SecretBytes {
        let base = try keyed(secret.withBytes { Array($0) })
        defer { EVP_MAC_CTX_free(base) }
        let key = try tag(base, Array(purpose.utf8))
        return SecretBytes(consume key)
    }

    /// The tag of one row's fields (each length-prefixed, nil distinct from empty).
    func tag(_ fields: RowFields) throws -> [UInt8] { try Self.tag(template, fields.bytes) }

    /// The tag of arbitrary bytes (the header).
    func tag(bytes: [UInt8]) throws -> [UInt8] { try Self.tag(template, bytes) }

    /// Whether `stored` is the tag of `bytes` (constant-time comparison).
    func verify(bytes: [UInt8], stored: [UInt8]) throws -> Bool {
        guard stored.count == Self.tagLength else { return false }
        return CRYPTO_memcmp(try tag(bytes: bytes), stored, Self.tagLength) == 0
    }

    /// Whether the current row of `s` authenticates: its columns (at the given positions, in
    /// ``RowFields`` order) are fed to HMAC straight from SQLite's memory, with no copies, and the
    /// tag is compared in constant time with the `mac` column. The caller serialises calls (the
    /// store's lock), since one keyed context is reused.
    func verifyRow(_ s: SQLiteDatabase.Statement, itemClass: Int32, label: Int32, subject: Int32, subjectCN: Int32,
                   issuer: Int32, notAfter: Int32, leafSHA256: Int32, chainSHA256: Int32, tokenURI: Int32,
                   generation: Int32, mac: Int32) throws -> Bool {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: RowFields.domain)
        func addInt(_ col: Int32) {
            let v = s.int64(col)
            for shift in stride(from: 56, through: 0, by: -8) { scratch.append(UInt8(truncatingIfNeeded: v >> Int64(shift))) }
        }
        func addText(_ col: Int32) {
            s.withColumnBytes(col) { b in
                guard let b else {
                    scratch.append(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF])
                    return
                }
                let n = UInt32(truncatingIfNeeded: b.count)
                scratch.append(contentsOf: [UInt8(n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)])
                scratch.append(contentsOf: b)
            }
        }
        addInt(itemClass); addText(label); addText(subject); addText(subjectCN); addText(issuer); addInt(notAfter)
        addText(leafSHA256); addText(chainSHA256); addText(tokenURI); addInt(generation)
        var out = [UInt8](repeating: 0, count: Self.tagLength)
        var n = 0
        guard EVP_MAC_init(reusable, nil, 0, nil) == 1, EVP_MAC_update(reusable, scratch, scratch.count) == 1,
              EVP_MAC_final(reusable, &out, &n, out.count) == 1, n == Self.tagLength else {
            throw MTLSError.openSSL(.internal, "HMAC-SHA256 failed")
        }
        return s.withColumnBytes(mac) { b in
            guard let b, b.count == Self.tagLength, let base = b.baseAddress else { return false }
            return CRYPTO_memcmp(out, base, Self.tagLength) == 0
        }
    }

    /// Whether `stored` is the tag of `fields` (constant-time comparison).
    func verify(_ fields: RowFields, stored: [UInt8]) throws -> Bool {
        guard stored.count == Self.tagLength else { return false }
        let expected = try tag(fields)
        return CRYPTO_memcmp(expected, stored, Self.tagLength) == 0
    }

    /// The columns a decision depends on, serialised unambiguously.
    struct RowFields {
        static let domain = Array("libmtls-store/row/v1".utf8)
        private(set) var bytes: [UInt8] = RowFields.domain

        init(itemClass: Int64, label: String, subject: String, subjectCN: String?, issuer: String, notAfter: Int64,
             leafSHA256: String, chainSHA256: String, tokenURI: String?, generation: Int64) {
            bytes.reserveCapacity(256)
            add(itemClass)
            add(label)
            add(subject)
            add(subjectCN)
            add(issuer)
            add(notAfter)
            add(leafSHA256)
            add(chainSHA256)
            add(tokenURI)
            add(generation)
        }

        private mutating func add(_ v: Int64) {
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> Int64(shift))) }
        }
        private mutating func add(_ s: String?) {
            guard let s else {
                bytes.append(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF])
                return
            }
            let u = s.utf8
            let n = UInt32(truncatingIfNeeded: u.count)
            bytes.append(contentsOf: [UInt8(n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)])
            bytes.append(contentsOf: u)
        }
    }
}
