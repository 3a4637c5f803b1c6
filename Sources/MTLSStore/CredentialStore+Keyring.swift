#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials

// This file owns the store's keyring: recognising the file, creating a new store's data key
// wrapped under a key derived from the secret, unlocking an existing one (current or legacy
// wrapping), the secret header rows, the row authenticator, the associated data a sealed private
// key is bound to, and changing the secret. (The sealing primitives and scrypt are in
// StoreCrypto.swift; the key rotation itself in CredentialStore+Integrity.swift.)

extension CredentialStore {
    // MARK: opening

    private enum FileState { case empty, store(version: Int64) }

    private func fileState() throws -> FileState {
        // One statement, so one snapshot: read one by one, the three could straddle another
        // process's commit of a new store (no application id yet, then its tables), and a store
        // being created looked like some other SQLite database (test_store_concurrency).
        let s = try db.statement("SELECT (SELECT application_id FROM pragma_application_id), "
            + "(SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)")
        defer { s.reset() }
        guard try s.step() else { throw MTLSError(.io, "\(path): the store's header could not be read") }
        let appID = s.int64(0), version = s.int64(1), objects = s.int64(2)
        if appID == CredentialStore.applicationID { return .store(version: version) }
        if appID == 0 && objects == 0 && version == 0 { return .empty }
        throw MTLSError(.notAStore, "\(path) is an SQLite database but not a libmtls store")
    }

    /// The data key and what else the open needs from unlocking the file.
    struct Unlocked {
        var key: SecretBytes
        var kek: SecretBytes
        var wrapped: [UInt8]
        /// The schema version of a store from before the authenticated header; nil when current.
        var legacyVersion: Int64?
    }

    func openOrInitialise(secret: StoreSecret) throws -> Unlocked {
        if case .store(let version) = try fileState() {
            return try unlockExisting(secret: secret, version: version)
        }
        // A new store: derive outside the write lock (scrypt takes a while), then initialise
        // unless another process got there first.
        let salt = try StoreCrypto.random(16)
        let newKey = try StoreCrypto.newKey()
        let kek = try StoreCrypto.deriveKEK(secret, salt: salt, parameters: options.kdf)
        let wrapped = try StoreCrypto.seal(newKey, key: kek, aad: CredentialStore.dataKeyAADCurrent)
        let auth = try StoreRowAuthenticator(dataKey: newKey, purpose: StoreRowAuthenticator.header)
        try enableWAL()
        let created: Bool = try db.writeTransaction {
            guard case .empty = try fileState() else { return false }
            for step in CredentialStore.migrations { try db.execute(step) }
            try db.execute("PRAGMA application_id=\(CredentialStore.applicationID); PRAGMA user_version=\(CredentialStore.schemaVersion)")
            try writeSecretHeader(secret: secret, salt: salt, parameters: options.kdf, wrapped: wrapped)
            try writeFreshManifest([], counter: 0, meta: try readMeta(), auth: auth)
            return true
        }
        if created { return Unlocked(key: newKey, kek: kek, wrapped: wrapped, legacyVersion: nil) }
        guard case .store(let version) = try fileState() else {
            throw MTLSError(.internal, "the store was neither created nor found")
        }
        return try unlockExisting(secret: secret, version: version)
    }

    /// Switches a new store to WAL. SQLite can answer this switch with "database is locked"
    /// without waiting in its busy handler while another process is initialising the same new
    /// file, so the switch is retried until the busy timeout has passed, as any other lock wait.
    private func enableWAL() throws {
        let deadline = ContinuousClock.now + .milliseconds(max(0, Int(options.busyTimeoutMilliseconds)))
        while true {
            do {
                _ = try db.text("PRAGMA journal_mode=WAL")
                return
            } catch let error as MTLSError where error.code == .locked && ContinuousClock.now < deadline {
                usleep(10_000)
            }
        }
    }

    func writeSecretHeader(secret: StoreSecret, salt: [UInt8], parameters: StoreKDFParameters, wrapped: [UInt8]) throws {
        let put = try db.statement("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)")
        try put.bind(.text("kdf"), .text(secret.kind)).run()
        try db.statement("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)")
            .bind(.text("kdf_params"), .text("\(parameters.logN),\(parameters.r),\(parameters.p)")).run()
        try db.statement("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)").bind(.text("salt"), .blob(salt)).run()
        try db.statement("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)").bind(.text("wrapped_key"), .blob(wrapped)).run()
    }

    private func unlockExisting(secret: StoreSecret, version: Int64) throws -> Unlocked {
        guard version <= CredentialStore.schemaVersion else {
            throw MTLSError(.schemaTooNew, "\(path) has schema version \(version); this libmtls reads up to \(CredentialStore.schemaVersion)")
        }
        // Version 0 is an empty file and 1 the first schema; anything below is damage.
        guard version >= 1 else {
            throw MTLSError(.corrupt, "\(path) has an invalid schema version \(version): the store file is damaged")
        }
        let meta = try db.readTransaction { try readMeta() }
        guard meta.kind == secret.kind else {
            throw MTLSError(.badSecret, meta.kind == "key"
                            ? "wrong store secret: this store is opened with a 32-byte key (--key-file), not a passphrase"
                            : "wrong store secret: this store is opened with a passphrase (--secret-file), not a 32-byte key")
        }
        guard let parameters = meta.parameters else {
            throw MTLSError(.corrupt, "the store header's KDF parameters are unreadable")
        }
        let kek = try StoreCrypto.deriveKEK(secret, salt: meta.salt, parameters: parameters)
        if let key = try StoreCrypto.open(meta.wrapped, key: kek, aad: CredentialStore.dataKeyAADCurrent) {
            // The data key says the store is current: it has an authenticated header, whatever
            // the file's schema version claims.
            guard version == Int64(CredentialStore.schemaVersion) else {
                throw MTLSError(.corrupt, "the store \(path) is tampered or damaged: its schema version was set to \(version) but its data key belongs to a current store; it is not migrated and nothing was written")
            }
            return Unlocked(key: key, kek: kek, wrapped: meta.wrapped, legacyVersion: nil)
        }
        guard let key = try StoreCrypto.open(meta.wrapped, key: kek, aad: CredentialStore.dataKeyAADLegacy) else {
            throw MTLSError(.badSecret, "wrong store secret for \(path)")
        }
        guard version < Int64(CredentialStore.schemaVersion) else {
            throw MTLSError(.corrupt, "the store \(path) is tampered or damaged: it claims the current schema but its data key is wrapped the old way")
        }
        return Unlocked(key: key, kek: kek, wrapped: meta.wrapped, legacyVersion: version)
    }

    func authenticator() throws -> StoreRowAuthenticator {
        guard let rowAuth else { throw MTLSError(.invalidArgument, "the store is closed") }
        return rowAuth
    }

    /// The associated data a sealed key is bound to: its row's class and label, and the SHA-256
    /// of the stored leaf and chain DER, so that neither the key nor its certificates can be
    /// moved or swapped without the key failing to open.
    static func aad(_ itemClass: StoreItemClass, _ label: String, leafDER: [UInt8], chainDER: [UInt8]) -> [UInt8] {
        Array("libmtls-store/item/v1\u{0}\(itemClass.rawValue)\u{0}\(label)\u{0}".utf8) + Encoding.sha256(leafDER + chainDER)
    }

    // MARK: the secret

    /// Changes the secret and rotates the data key: a new random data key, every private key
    /// re-sealed and every row, the manifest and the header re-authenticated under it, wrapped
    /// under a key derived from `newSecret` (with `kdf` for a passphrase) — in one transaction, so
    /// an interruption leaves the old store or the new one. The old secret, even with the old
    /// header rows copied back, opens nothing written after the change and no key from the new
    /// file. Other open handles then fail with ``MTLSError/Code/badSecret`` until reopened.
    public func changeSecret(to newSecret: StoreSecret, kdf: StoreKDFParameters? = nil) throws {
        let parameters = kdf ?? options.kdf
        let salt = try StoreCrypto.random(16)
        let kek = try StoreCrypto.deriveKEK(newSecret, salt: salt, parameters: parameters)
        let newKey = try StoreCrypto.newKey()
        try lock.withLock { _ in
            try rotateDataKey(to: newKey, kek: kek, secret: newSecret, salt: salt, parameters: parameters)
        }
    }

    /// The scrypt parameters in the store's header (nil when opened with a raw key).
    public func kdfParameters() throws -> StoreKDFParameters? {
        try lock.withLock { _ in
            let h = try db.readTransaction { try readMeta() }
            return h.kind == "scrypt" ? h.parameters : nil
        }
    }
}
