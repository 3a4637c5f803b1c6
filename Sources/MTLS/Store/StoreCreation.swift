import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// A store's first write as one step: a store created for a write that fails is removed again,
// for every front end (the CLI's `store import|add-cert|add-token` and `enroll`, C and Python
// callers through the same function).

extension CredentialStore {
    /// Opens the store at `path` (created when it is missing and `options.create` allows) and
    /// runs `body` with it. When the open or `body` fails and this call created the store, the
    /// store is closed and its file, WAL, shared-memory and journal files are removed, with the
    /// folder this call made for it when it is empty: a first write that fails leaves nothing
    /// half-made behind. An existing store is never removed.
    public static func withStore<T>(path: String, secret: StoreSecret, options: Options = Options(),
                                    _ body: (CredentialStore) throws -> T) throws -> T {
        let folder = path.lastIndex(of: "/").map { i in i == path.startIndex ? "/" : String(path[..<i]) } ?? ""
        let existed = access(path, F_OK) == 0
        let folderExisted = folder.isEmpty || access(folder, F_OK) == 0
        var store: CredentialStore?
        do {
            let opened = try CredentialStore(path: path, secret: secret, options: options)
            store = opened
            return try body(opened)
        } catch {
            if !existed {
                store?.close()
                for suffix in ["", "-wal", "-shm", "-journal"] { _ = unlink(path + suffix) }
                if !folderExisted { _ = rmdir(folder) }
            }
            throw error
        }
    }
}
