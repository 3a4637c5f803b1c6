internal import CSQLite
#if canImport(Glibc)
import Glibc
#endif

// This file owns the store file's place on disk: creating its directory (0700) and the store
// itself (0600, initialised in a temporary file and linked into place) before SQLite opens it,
// removing a store created for a first write that failed
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
    /// this call linked its new store into place — not that it was missing a moment before,
    /// since another process may create and use it in between. A `locked` failure says
    /// another connection holds the new store, so it is never removed after one either.
    /// The C open functions do not use this: an open is not a first write, and a store several
    /// processes race to create must never be removed under the ones that use it.
    public static func withStore<T>(path: String, secret: StoreSecret, options: Options = Options(),
                                    _ body: (CredentialStore) throws -> T) throws -> T {
        let folder = path.lastIndex(of: "/").map { i in i == path.startIndex ? "/" : String(path[..<i]) } ?? ""
        let folderExisted = folder.isEmpty || access(folder, F_OK) == 0
        let created = try prepareFile(path, secret: secret, options: options)
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

    /// Makes sure a store exists at `path` before SQLite opens it. A missing store is created
    /// (with its directory, 0700) only when `options.create` allows (``MTLSError/Code/notFound``
    /// naming the path otherwise), and never in place: it is initialised — schema, secret
    /// header, manifest, the KDF — in a temporary file (0600) in the same folder, and linked
    /// into place only once complete, so a first write that is interrupted (Ctrl-C, a crash, a
    /// full disk) leaves no file at `path`, and nothing that opens `path` ever sees a half-made
    /// store. An empty file at `path` (left by an older libmtls interrupted while creating) is
    /// replaced the same way when creating, and refused otherwise. Returns whether this call
    /// created the store (another process may win the race: its store is then used).
    @discardableResult
    static func prepareFile(_ path: String, secret: StoreSecret, options: Options) throws -> Bool {
        var st = stat()
        if stat(path, &st) == 0 {
            if (st.st_mode & S_IFMT) == S_IFDIR {
                throw SQLiteDatabase.folderGivenAsStore(path)
            }
            guard st.st_size == 0, (st.st_mode & S_IFMT) == S_IFREG else { return false }
            guard options.create else {
                throw MTLSError(.notAStore, "\(path) is an empty file, not a store (a first import that was interrupted by an older libmtls?): remove it, then import again")
            }
            return try createAtomically(path, secret: secret, options: options, replacingEmpty: true)
        }
        guard options.create else {
            throw MTLSError(.notFound, "no store at \(path): check the path (--store, $MTLS_STORE), or create the store: a first `mtls store import` creates it, as the create option does (create=True in Python, mtls_store_options.create in C)")
        }
        return try createAtomically(path, secret: secret, options: options, replacingEmpty: false)
    }

    /// The prefix of the temporary files a store at `path` is created in.
    static func creationPrefix(_ path: String) -> (dir: String, prefix: String) {
        let slash = path.lastIndex(of: "/")
        let dir = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let base = slash.map { String(path[path.index(after: $0)...]) } ?? path
        return (dir, ".\(base).creating-")
    }

    private static func createAtomically(_ path: String, secret: StoreSecret, options: Options, replacingEmpty: Bool) throws -> Bool {
        let (dir, prefix) = creationPrefix(path)
        try makeDirectories(dir)
        removeAbandonedCreations(dir: dir, prefix: prefix)
        let nonce = try StoreCrypto.random(6).map { String($0, radix: 16) }.joined()
        let temp = "\(dir)/\(prefix)\(getpid())-\(nonce)"
        let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 { throw fileError(errno, "cannot create the store \(path)") }
        Glibc.close(fd)
        defer { for suffix in ["", "-wal", "-shm", "-journal"] { _ = unlink(temp + suffix) } }
        var initOptions = options
        initOptions.create = false
        let fresh = try CredentialStore(path: temp, secret: secret, options: initOptions, upgrade: nil, initialising: true)
        try fresh.lock.withLock { _ in _ = try fresh.db.text("PRAGMA wal_checkpoint(TRUNCATE)") }
        fresh.close()
        let tfd = open(temp, O_RDONLY | O_CLOEXEC)
        if tfd >= 0 { _ = fsync(tfd); Glibc.close(tfd) }
        if replacingEmpty {
            var st = stat()
            // Only an empty file is replaced: one that became a store meanwhile is used as it is.
            guard stat(path, &st) == 0, st.st_size == 0 else { return false }
            if rename(temp, path) != 0 { throw fileError(errno, "cannot create the store \(path)") }
        } else if mtls_rename_noreplace(temp, path) != 0 {
            // Moved into place whole, never over a store another process made meanwhile; where
            // the file system cannot (EINVAL, ENOSYS), linked then unlinked (the defer).
            var err = errno
            if err == EINVAL || err == ENOSYS { err = link(temp, path) == 0 ? 0 : errno }
            if err == EEXIST { return false }  // another process created it first: use theirs
            if err != 0 { throw fileError(err, "cannot create the store \(path)") }
        }
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { _ = fsync(dfd); Glibc.close(dfd) }
        return true
    }

    /// Removes temporary files of creations whose process is gone (killed before it could
    /// clean up): `.<name>.creating-<pid>-<nonce>` with no live process `pid`.
    private static func removeAbandonedCreations(dir: String, prefix: String) {
        guard let d = opendir(dir) else { return }
        defer { closedir(d) }
        while let entry = readdir(d) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard name.hasPrefix(prefix) else { continue }
            let rest = name.dropFirst(prefix.count)
            guard let pidText = rest.split(separator: "-").first, let pid = pid_t(pidText), pid > 0 else { continue }
            if pid != getpid(), kill(pid, 0) != 0, errno == ESRCH {
                _ = unlink("\(dir)/\(name)")
            }
        }
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
