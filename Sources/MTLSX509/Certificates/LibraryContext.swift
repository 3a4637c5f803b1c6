internal import COpenSSL
internal import CMTLSProvider

/// libmtls's own OpenSSL library context.
///
/// The host program's default context is never touched: the legacy provider (RC2, 3DES, needed
/// by old PKCS#12 files) is loaded only into this context, libmtls's provider for PKCS#11 token
/// keys only into a second context of its own (``tokenKeys``), and the TLS contexts libmtls makes
/// are created in this one (`SSL_CTX_new_ex`).
/// Sendable: `OSSL_LIB_CTX` is thread-safe, and `ctx`/`hasLegacy`/`tokenKeys` never change after `init`.
package final class LibraryContext: @unchecked Sendable {
    /// The shared context, created on first use. OpenSSL's library contexts are thread-safe.
    package static let shared = LibraryContext()

    package let ctx: OpaquePointer
    /// Whether the legacy provider could be loaded (it ships in Debian's libssl3).
    let hasLegacy: Bool
    /// The library context of libmtls's provider for PKCS#11 token keys (`Sources/CMTLSProvider`),
    /// where it is the only provider with keys or signatures (OpenSSL's "base" provider, encoders
    /// only, writes their public halves); nil if it could not be loaded.
    package let tokenKeys: OpaquePointer?

    private init() {
        guard let ctx = OSSL_LIB_CTX_new() else {
            fatalError("libmtls: OSSL_LIB_CTX_new failed (out of memory)")
        }
        self.ctx = ctx
        // Loading a provider into a context of our own changes nothing for the host program.
        _ = OSSL_PROVIDER_load(ctx, "default")
        hasLegacy = OSSL_PROVIDER_load(ctx, "legacy") != nil
        // libmtls's provider for PKCS#11 token keys gets a context of its own, where it is the only
        // provider: it registers the default provider's key type names (so OpenSSL and its TLS
        // code know the keys), and nothing may fetch those from it but the token keys' own
        // operations (OpenSSL takes a key's signature from the key's provider, in any context).
        if let keys = OSSL_LIB_CTX_new() {
            var callbacks = TokenKey.callbacks
            if mtlsp_load(keys, ctx, &callbacks) == 1 {
                tokenKeys = keys
            } else {
                OSSL_LIB_CTX_free(keys)
                tokenKeys = nil
            }
        } else {
            tokenKeys = nil
        }
        ERR_clear_error()
    }

    /// Runs `body` with this context as the calling thread's default OpenSSL context, then puts
    /// the previous one back.
    ///
    /// Some OpenSSL 3.0 entry points (`PKCS12_parse` among them) have no `_ex` variant taking a
    /// context; `OSSL_LIB_CTX_set0_default` is per thread, so this affects neither the host
    /// program's global default nor any other thread.
    func asThreadDefault<T>(_ body: () throws -> T) rethrows -> T {
        let previous = OSSL_LIB_CTX_set0_default(ctx)
        defer { _ = OSSL_LIB_CTX_set0_default(previous) }
        return try body()
    }
}
