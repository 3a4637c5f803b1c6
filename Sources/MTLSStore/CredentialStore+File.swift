#if canImport(Glibc)
import Glibc
#endif

// This file owns the store file's place on disk: creating its directory (0700) and the file
// itself (0600) before SQLite opens it, removing a store created for a first write that failed
// (withStore), and mapping file-system errors to libmtls's codes.
// (Sealing is in StoreCrypto.swift, the keyring in CredentialStore+Keyring.swift, the
// whole-store integrity in CredentialStore+Integrity.swift, the schema in
// CredentialStore+Schema.swift, items and queries in CredentialStore+Items.swift and
// CredentialStore+Queries.swift.)

extension CredentialStore {
    /// Opens the store at `path` (created when it is missing and `options.create` allows) and
    /// runs `body` with it. When the open or `body` fails and this call created the store, the
    /// store is closed and its file, WAL, shared-memory and journal files are removed, with the
    /// folder this call made for it when it is empty: a first write that fails leaves nothing
    /// half-made behind. An existing store is never removed, and "this call created it" means
    /// this call's exclusive create (`O_EXCL`) made the file — not that it was missing a moment
    /// before, since another process may create and use it in between. A `locked` failure says
    /// another connection holds the new store, so it is never removed after one either.
    /// The C open functions do not use this: an open is not a first write, and a store several
    /// processes race to create must never be removed under the ones that use it.
    public static func withStore<T>(path: String, secret: StoreSecret, options: Options = Options(),
                                    _ body: (CredentialStore) throws -> T) throws -> T {
        let folder = path.lastIndex(of: "/").map { i in i == path.startIndex ? "/" : String(path[..<i]) } ?? ""
        let folderExisted = folder.isEmpty || access(folder, F_OK) == 0
        let created = try prepareFile(path, create: options.create)
        var store: CredentialStore?
        do {
            let opened = try CredentialStore(path: path, secret: secret, options: options)
            store = opened
            return try body(opened)
        } catch {
            if created, (error as? MTLSError)?.code != .locked {
                store?.close()
                for suffix in ["", "-wal", "-shm", "-journal"] { _ = unlink(path + suffix) }
                if !folderExisted { _ = rmdir(folder) }
            }
            throw error
        }
    }

    /// Creates the directory (0700) and the file (0600) if needed, so that SQLite (which gives
    /// its WAL and shared-memory files the main file's mode) never creates anything wider.
    /// Returns whether this call created the file (its exclusive create won).
    @discardableResult
    static func prepareFile(_ path: String, create: Bool) throws -> Bool {
        if access(path, F_OK) == 0 { return false }
        guard create else { throw MTLSError(.notFound, "no store at \(path)") }
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        try makeDirectories(dir.isEmpty ? "/" : dir)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 {
            let err = errno
            if err == EEXIST { return false }
            throw fileError(err, "cannot create the store \(path)")
        }
        Glibc.close(fd)
        return true
    }

    private static func makeDirectories(_ dir: String) throws {
        var st = stat()
        if stat(dir, &st) == 0 { return }
        if let slash = dir.lastIndex(of: "/"), slash != dir.startIndex {
            try makeDirectories(String(dir[..<slash]))
        }
        if mkdir(dir, 0o700) != 0 && errno != EEXIST {
            throw fileError(errno, "cannot create the directory \(dir)")
        }
    }

    private static func fileError(_ err: Int32, _ what: String) -> MTLSError {
        let text = "\(what): \(String(cString: strerror(err)))"
        switch err {
        case EACCES, EROFS, EPERM: return MTLSError(.readOnly, text)
        case ENOSPC, EDQUOT: return MTLSError(.diskFull, text)
        default: return MTLSError(.io, text)
        }
    }
}
