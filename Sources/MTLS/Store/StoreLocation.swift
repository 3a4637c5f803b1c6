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

    private static func homeDirectory(_ environment: [String: String]) -> String {
        if let home = environment["HOME"], !home.isEmpty { return home }
        if let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }
}
