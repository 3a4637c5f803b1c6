import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension CredentialStore {
    /// The store a user means when naming none: `$MTLS_STORE`, else
    /// `$XDG_DATA_HOME/mtls/store.db`, else `$HOME/.local/share/mtls/store.db`. Empty variables
    /// count as unset. The one rule every command and binding uses.
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let path = value("MTLS_STORE") { return path }
        let data = value("XDG_DATA_HOME") ?? (homeDirectory(environment) + "/.local/share")
        return data + "/mtls/store.db"
    }

    /// The secret file the environment names (`$MTLS_STORE_SECRET_FILE`), nil when it names none.
    public static func defaultSecretFile(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        environment["MTLS_STORE_SECRET_FILE"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The key file the environment names (`$MTLS_STORE_KEY_FILE`: a raw 32-byte key), nil when
    /// it names none.
    public static func defaultKeyFile(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        environment["MTLS_STORE_KEY_FILE"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Where the store secret comes from: an explicit key file, else an explicit passphrase file,
    /// else `$MTLS_STORE_KEY_FILE`, else `$MTLS_STORE_SECRET_FILE`; nil when none is named.
    /// Both explicit files at once is ``MTLSError/Code/invalidArgument``.
    public static func secretSource(secretFile: String?, keyFile: String?,
                                    environment: [String: String] = ProcessInfo.processInfo.environment) throws -> StoreSecretSource? {
        if secretFile != nil && keyFile != nil {
            throw MTLSError(.invalidArgument, "give either a passphrase file (--secret-file) or a key file (--key-file), not both")
        }
        if let keyFile { return .keyFile(keyFile) }
        if let secretFile { return .passphraseFile(secretFile) }
        if let k = defaultKeyFile(environment: environment) { return .keyFile(k) }
        if let p = defaultSecretFile(environment: environment) { return .passphraseFile(p) }
        return nil
    }

    private static func homeDirectory(_ environment: [String: String]) -> String {
        if let home = environment["HOME"], !home.isEmpty { return home }
        if let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }
}

/// A file holding a store secret, of an explicitly chosen kind.
public enum StoreSecretSource: Sendable, Equatable {
    /// A passphrase file (``StoreSecret/load(path:)``): always stretched with scrypt.
    case passphraseFile(String)
    /// A raw 32-byte key file (``StoreSecret/loadKey(path:)``).
    case keyFile(String)

    /// Reads the secret.
    public func load() throws -> StoreSecret {
        switch self {
        case .passphraseFile(let p): return try StoreSecret.load(path: p)
        case .keyFile(let p): return try StoreSecret.loadKey(path: p)
        }
    }
}
