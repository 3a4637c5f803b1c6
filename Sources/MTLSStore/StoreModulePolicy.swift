import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Whether a stored token URI's `module-path` may be loaded: only a module registered with
/// p11-kit (pkcs11.conf(5)), unless the caller allows any path explicitly
/// (``CredentialStore/Options/allowUnregisteredModulePaths``). A store row can name a shared
/// object that runs in the host program on the next identity selection; the registered list is
/// what the administrator chose.
enum StoreModulePolicy {
    private static func canonical(_ path: String) -> String {
        guard let r = realpath(path, nil) else { return path }
        defer { free(r) }
        return String(cString: r)
    }

    /// Throws when `reference`'s URI names a `module-path` that p11-kit has not registered.
    static func check(_ reference: StoreTokenReference, allowUnregistered: Bool) throws {
        guard !allowUnregistered, let uri = try? PKCS11URI(reference.uri), let path = uri.modulePath else { return }
        // Loaded, not initialised: see PKCS11Module.registeredPaths for why this is not a listing.
        let registered = PKCS11Module.registeredPaths()
        let wanted = canonical(path)
        let ok = registered.contains { r in
            r == path || canonical(r) == wanted || (!path.contains("/") && PKCS11Module.file(r, isNamed: path))
        }
        guard ok else {
            throw MTLSError(.invalidArgument, "the stored token identity \"\(reference.label)\" names module-path=\(path), which is not a PKCS#11 module registered with p11-kit; it is not loaded unless allowed explicitly (--allow-module-path, mtls_store_allow_module_paths)")
        }
    }
}
