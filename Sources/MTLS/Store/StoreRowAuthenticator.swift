internal import COpenSSL
import FoundationEssentials

/// HMAC-SHA256 over a store row's decision columns, under a key derived from the store's data
/// key, so that a row written by someone who can edit the file but does not know the secret
/// (a swapped certificate, an edited token URI) is refused on read.
///
/// The keyed context is made once per open and duplicated per row (cheap: no key schedule and
/// no algorithm fetch on the lookup path); freeing it clears the key.
final class StoreRowAuthenticator: @unchecked Sendable {
    // @unchecked: `template` is only read (duplicated) after init, which OpenSSL allows from
    // several threads; the store calls it with its lock held anyway.
    private let template: OpaquePointer
    static let tagLength = 32

    /// An authenticator under `HMAC(dataKey, "libmtls-store/row-mac/v1")`, so the data key
    /// itself is never used for two primitives.
    init(dataKey: SecretBytes) throws {
        let base = try Self.keyed(dataKey.withBytes { Array($0) })
        defer { EVP_MAC_CTX_free(base) }
        var sub = try Self.tag(base, Array("libmtls-store/row-mac/v1".utf8))
        defer { SecretBytes.wipe(&sub) }
        template = try Self.keyed(sub)
    }

    deinit { EVP_MAC_CTX_free(template) }

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

    /// The tag of one row's fields (each length-prefixed, nil distinct from empty).
    func tag(_ fields: RowFields) throws -> [UInt8] { try Self.tag(template, fields.bytes) }

    /// Whether `stored` is the tag of `fields` (constant-time comparison).
    func verify(_ fields: RowFields, stored: [UInt8]) throws -> Bool {
        guard stored.count == Self.tagLength else { return false }
        let expected = try tag(fields)
        return CRYPTO_memcmp(expected, stored, Self.tagLength) == 0
    }

    /// The columns a decision depends on, serialised unambiguously.
    struct RowFields {
        private(set) var bytes: [UInt8] = Array("libmtls-store/row/v1".utf8)

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
