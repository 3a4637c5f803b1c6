internal import COpenSSL

/// libmtls's own OpenSSL library context.
///
/// The host program's default context is never touched: the legacy provider (RC2, 3DES, needed
/// by old PKCS#12 files) is loaded only into this context, and the TLS contexts libmtls makes
/// are created in it (`SSL_CTX_new_ex`).
/// Sendable: `OSSL_LIB_CTX` is thread-safe, and `ctx`/`hasLegacy` never change after `init`.
final class LibraryContext: @unchecked Sendable {
    /// The shared context, created on first use. OpenSSL's library contexts are thread-safe.
    static let shared = LibraryContext()

    let ctx: OpaquePointer
    /// Whether the legacy provider could be loaded (it ships in Debian's libssl3).
    let hasLegacy: Bool

    private init() {
        guard let ctx = OSSL_LIB_CTX_new() else {
            fatalError("libmtls: OSSL_LIB_CTX_new failed (out of memory)")
        }
        self.ctx = ctx
        // Loading a provider into a context of our own changes nothing for the host program.
        _ = OSSL_PROVIDER_load(ctx, "default")
        hasLegacy = OSSL_PROVIDER_load(ctx, "legacy") != nil
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
