internal import CSQLite
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// One SQLite connection, used by one thread at a time (``CredentialStore`` serialises access).
///
/// Owns the `sqlite3*` and a cache of prepared statements keyed by their SQL text, so that hot
/// lookups (find by label) are a reset + bind + step, as in GRDB's `Statement` cache.
final class SQLiteDatabase {
    private(set) var db: OpaquePointer?
    private var statements: [String: Statement] = [:]
    let path: String

    /// Opens (creating if asked) the database file. The file must already exist with the right
    /// mode when `create` is false.
    init(path: String, create: Bool) throws {
        self.path = path
        var handle: OpaquePointer? = nil
        var flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        if create { flags |= SQLITE_OPEN_CREATE }
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        if rc != SQLITE_OK {
            let err = errno
            // SQLite's own text ("unable to open database file") does not say why.
            var st = stat()
            if stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR {
                sqlite3_close_v2(handle)
                throw SQLiteDatabase.folderGivenAsStore(path)
            }
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(handle)
            throw SQLiteDatabase.error(rc, "cannot open the store \(path): \(message)", errno: err)
        }
        db = handle
    }

    deinit { close() }

    /// Finalises every statement and closes the connection. Idempotent.
    func close() {
        statements.values.forEach { $0.finalize() }
        statements.removeAll()
        if let db { sqlite3_close_v2(db) }
        db = nil
    }

    private func live() throws -> OpaquePointer {
        guard let db else { throw MTLSError(.invalidArgument, "the store is closed") }
        return db
    }

    /// Milliseconds SQLite's busy handler waits for another connection's lock.
    func setBusyTimeout(milliseconds: Int32) throws {
        sqlite3_busy_timeout(try live(), milliseconds)
    }

    /// Runs one or more statements without results.
    func execute(_ sql: String) throws {
        let db = try live()
        var errmsg: UnsafeMutablePointer<CChar>? = nil
        let rc = sqlite3_exec(db, sql, nil, nil, &errmsg)
        if rc != SQLITE_OK {
            let text = errmsg.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(db))
            sqlite3_free(errmsg)
            throw SQLiteDatabase.error(rc, text)
        }
    }

    /// A cached prepared statement, reset and with its bindings cleared.
    func statement(_ sql: String) throws -> Statement {
        if let s = statements[sql] {
            s.reset()
            return s
        }
        let db = try live()
        var stmt: OpaquePointer? = nil
        let rc = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            throw SQLiteDatabase.error(rc, "cannot prepare a store query: \(String(cString: sqlite3_errmsg(db)))")
        }
        let s = Statement(db: db, stmt: stmt)
        statements[sql] = s
        return s
    }

    /// Runs `body` in a write transaction taken up front (`BEGIN IMMEDIATE`), so that the busy
    /// timeout applies to acquiring the write lock instead of failing at the first write.
    func writeTransaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            if let db, sqlite3_get_autocommit(db) == 0 { _ = sqlite3_exec(db, "ROLLBACK", nil, nil, nil) }
            throw error
        }
    }

    /// Runs `body` in a read transaction, so that several queries see one snapshot.
    /// Inside a transaction already open, `body` simply runs in it.
    func readTransaction<T>(_ body: () throws -> T) throws -> T {
        if inTransaction { return try body() }
        try execute("BEGIN DEFERRED")
        defer { if let db, sqlite3_get_autocommit(db) == 0 { _ = sqlite3_exec(db, "COMMIT", nil, nil, nil) } }
        // Take the snapshot now (BEGIN DEFERRED waits for the first read), so that
        // ``dataVersion()`` names it from the start.
        _ = try integer("PRAGMA schema_version")
        return try body()
    }

    /// One integer from a query such as `PRAGMA user_version`.
    func integer(_ sql: String) throws -> Int64 {
        let s = try statement(sql)
        defer { s.reset() }
        guard try s.step() else { return 0 }
        return s.int64(0)
    }

    /// One text from a query such as `PRAGMA journal_mode=WAL`.
    func text(_ sql: String) throws -> String? {
        let s = try statement(sql)
        defer { s.reset() }
        guard try s.step() else { return nil }
        return s.text(0)
    }

    var changes: Int { db.map { Int(sqlite3_changes($0)) } ?? 0 }

    /// The pager's data version: it changes when another connection (thread or process) commits,
    /// not for this connection's own commits. Meaningful inside a read transaction (an active
    /// statement holds one), where it names the snapshot being read.
    func dataVersion() -> UInt32 {
        guard let db else { return 0 }
        var v: UInt32 = 0
        _ = sqlite3_file_control(db, "main", SQLITE_FCNTL_DATA_VERSION, &v)
        return v
    }

    /// Whether a transaction is open on the connection.
    var inTransaction: Bool { db.map { sqlite3_get_autocommit($0) == 0 } ?? false }

    /// Maps a SQLite result code to libmtls's stable codes.
    static func error(_ rc: Int32, _ message: String, errno err: Int32 = 0) -> MTLSError {
        switch rc & 0xff {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return MTLSError(.locked, "the store is locked by another user beyond the busy timeout (\(message))")
        case SQLITE_READONLY:
            return MTLSError(.readOnly, "the store is read-only (\(message))")
        case SQLITE_CANTOPEN:
            if err == EACCES || err == EROFS || err == EPERM {
                return MTLSError(.readOnly, "\(message): \(String(cString: strerror(err)))")
            }
            return MTLSError(.io, message)
        case SQLITE_FULL:
            return MTLSError(.diskFull, "the disk is full; the store is unchanged (\(message))")
        case SQLITE_NOTADB:
            return MTLSError(.notAStore, "not a libmtls store: \(message)")
        case SQLITE_CORRUPT:
            return MTLSError(.corrupt, "the store file is corrupt: \(message)")
        case SQLITE_CONSTRAINT:
            return MTLSError(.duplicate, message)
        case SQLITE_IOERR, SQLITE_PROTOCOL:
            return MTLSError(.io, "store input/output error: \(message)")
        case SQLITE_NOMEM:
            return MTLSError(.noMemory, message)
        default:
            return MTLSError(.internal, "SQLite error \(rc): \(message)")
        }
    }

    /// A prepared statement with typed bind/column access.
    final class Statement {
        let db: OpaquePointer
        private var stmt: OpaquePointer?

        init(db: OpaquePointer, stmt: OpaquePointer) {
            self.db = db
            self.stmt = stmt
        }

        func finalize() {
            sqlite3_finalize(stmt)
            stmt = nil
        }

        func reset() {
            sqlite3_reset(stmt)
            sqlite3_clear_bindings(stmt)
        }

        /// Binds positional parameters (1-based), then returns self for chaining.
        @discardableResult
        func bind(_ values: Value...) -> Statement { bind(values: values) }

        /// Binds positional parameters (1-based), then returns self for chaining.
        @discardableResult
        func bind(values: [Value]) -> Statement {
            for (i, v) in values.enumerated() {
                let idx = Int32(i + 1)
                switch v {
                case .null: sqlite3_bind_null(stmt, idx)
                case .int(let n): sqlite3_bind_int64(stmt, idx, n)
                // With its byte length, not -1: a text with a NUL in it (a certificate's common
                // name can hold one) is stored whole, as the row's MAC was computed over it.
                case .text(let s):
                    var t = s
                    t.withUTF8 { u in
                        u.withMemoryRebound(to: CChar.self) { c in
                            if let base = c.baseAddress {
                                _ = sqlite3_bind_text(stmt, idx, base, Int32(clamping: c.count), mtls_sqlite_transient())
                            } else {
                                _ = sqlite3_bind_text(stmt, idx, "", 0, mtls_sqlite_transient()) // an empty text
                            }
                        }
                    }
                case .blob(let b):
                    b.withUnsafeBytes { p in
                        _ = sqlite3_bind_blob(stmt, idx, p.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(p.count), mtls_sqlite_transient())
                    }
                }
            }
            return self
        }

        /// Steps once: true for a row, false when done.
        func step() throws -> Bool {
            let rc = sqlite3_step(stmt)
            if rc == SQLITE_ROW { return true }
            if rc == SQLITE_DONE { return false }
            let message = String(cString: sqlite3_errmsg(db))
            sqlite3_reset(stmt)
            throw SQLiteDatabase.error(rc, message)
        }

        /// Steps to the end, for statements without results.
        func run() throws {
            while try step() {}
        }

        /// The raw bytes of a text or blob column, without a copy (valid only inside `body`);
        /// nil for NULL.
        func withColumnBytes<T>(_ col: Int32, _ body: (UnsafeRawBufferPointer?) throws -> T) rethrows -> T {
            if sqlite3_column_type(stmt, col) == SQLITE_NULL { return try body(nil) }
            let p = sqlite3_column_blob(stmt, col)
            let n = Int(sqlite3_column_bytes(stmt, col))
            return try body(UnsafeRawBufferPointer(start: p, count: p == nil ? 0 : n))
        }

        func isNull(_ col: Int32) -> Bool { sqlite3_column_type(stmt, col) == SQLITE_NULL }
        func int64(_ col: Int32) -> Int64 { sqlite3_column_int64(stmt, col) }
        func text(_ col: Int32) -> String? {
            // By its byte length: a NUL inside a stored text is part of it.
            guard let p = sqlite3_column_text(stmt, col) else { return nil }
            return String(decoding: UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(stmt, col))), as: UTF8.self)
        }
        func blob(_ col: Int32) -> [UInt8] {
            let n = Int(sqlite3_column_bytes(stmt, col))
            guard n > 0, let p = sqlite3_column_blob(stmt, col) else { return [] }
            return Array(UnsafeRawBufferPointer(start: p, count: n))
        }
    }

    enum Value {
        case null
        case int(Int64)
        case text(String)
        case blob([UInt8])
    }
}

extension SQLiteDatabase {
    /// The one error for a folder given where the store file is expected (the store's own check
    /// before opening, and SQLite's refusal after it, say the same).
    static func folderGivenAsStore(_ path: String) -> MTLSError {
        MTLSError(.invalidArgument, "the store \(path) is a folder, not a store file: give the path of the store file (for example \(path.hasSuffix("/") ? path : path + "/")store.db)")
    }
}
