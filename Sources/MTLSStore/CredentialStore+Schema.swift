import FoundationEssentials

// This file owns the store's schema: its version and application id, the migration steps that
// create and extend the tables, and (for tests) turning a current store into a genuine older one.
// Upgrading an older store is in CredentialStore+Integrity.swift.

extension CredentialStore {
    /// The schema version this library writes. A schema-3 store (rows authenticated, no header)
    /// is upgraded on open; older ones only by an explicit ``upgrade(path:secret:confirming:options:)``.
    public static let schemaVersion = 4
    /// SQLite `application_id` of a libmtls store ("mTLS").
    static let applicationID: Int64 = 0x6D54_4C53

    /// Schema steps: `migrations[i]` takes a store from version `i` to `i + 1`.
    static let migrations: [String] = [
        """
        CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
        CREATE TABLE items (
            id INTEGER PRIMARY KEY,
            class INTEGER NOT NULL,
            label TEXT NOT NULL,
            subject TEXT NOT NULL,
            subject_cn TEXT,
            issuer TEXT NOT NULL,
            not_after INTEGER NOT NULL,
            leaf_sha256 TEXT NOT NULL,
            chain_sha256 TEXT NOT NULL,
            leaf BLOB NOT NULL,
            chain BLOB NOT NULL,
            sealed_key BLOB,
            token_uri TEXT,
            generation INTEGER NOT NULL,
            created INTEGER NOT NULL,
            modified INTEGER NOT NULL,
            UNIQUE (class, label)
        );
        """,
        """
        CREATE INDEX items_leaf_sha256 ON items(leaf_sha256);
        CREATE INDEX items_subject ON items(subject);
        CREATE INDEX items_subject_cn ON items(subject_cn);
        """,
        // Version 3: every row authenticated (the tags of existing rows are written by migrate()).
        """
        ALTER TABLE items ADD COLUMN mac BLOB;
        """,
        // Version 4: the manifest (its buckets and the header are written by the code that
        // creates or upgrades the store).
        """
        CREATE TABLE manifest (bucket INTEGER PRIMARY KEY, entries BLOB NOT NULL, digest BLOB NOT NULL);
        """,
    ]

    /// Turns this (current) store into what an older libmtls wrote, schema `version` (1...3):
    /// the data key wrapped the old way, no header or manifest, rows tagged the schema-3 way or
    /// (below 3) not at all. Tests use it to make genuine older stores.
    package func _testMakeLegacy(version: Int, secret: StoreSecret) throws {
        try lock.withLock { _ in
            try db.writeTransaction {
                let meta = try readMeta()
                guard let parameters = meta.parameters else { throw MTLSError(.internal, "bad KDF parameters") }
                let kek = try StoreCrypto.deriveKEK(secret, salt: meta.salt, parameters: parameters)
                let wrapped = try StoreCrypto.seal(dataKey, key: kek, aad: CredentialStore.dataKeyAADLegacy)
                try db.statement("UPDATE meta SET value = ? WHERE name = 'wrapped_key'").bind(.blob(wrapped)).run()
                try db.execute("DELETE FROM meta WHERE name IN ('header', 'header_mac'); DROP TABLE manifest")
                if version == 3 {
                    let v3 = try StoreRowAuthenticator(dataKey: dataKey, purpose: StoreRowAuthenticator.rowsV3)
                    var tags: [(Int64, [UInt8])] = []
                    let s = try db.statement("SELECT id, class, label, subject, subject_cn, issuer, not_after, leaf_sha256, chain_sha256, token_uri, generation FROM items")
                    while try s.step() {
                        tags.append((s.int64(0), try v3.tag(StoreRowAuthenticator.RowFields(
                            itemClass: s.int64(1), label: s.text(2) ?? "", subject: s.text(3) ?? "", subjectCN: s.isNull(4) ? nil : s.text(4),
                            issuer: s.text(5) ?? "", notAfter: s.int64(6), leafSHA256: s.text(7) ?? "", chainSHA256: s.text(8) ?? "",
                            tokenURI: s.isNull(9) ? nil : s.text(9), generation: s.int64(10)))))
                    }
                    s.reset()
                    for (id, tag) in tags { try db.statement("UPDATE items SET mac = ? WHERE id = ?").bind(.blob(tag), .int(id)).run() }
                } else {
                    try db.execute("ALTER TABLE items DROP COLUMN mac")
                }
                if version == 1 { try db.execute("DROP INDEX items_leaf_sha256; DROP INDEX items_subject; DROP INDEX items_subject_cn") }
                try db.execute("PRAGMA user_version=\(version)")
            }
            manifest.invalidate()
        }
    }
}
