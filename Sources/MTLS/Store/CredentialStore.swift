internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// This file owns the store's schema and its migrations' steps, opening and unlocking (the
// keyring: data key wrapped under the secret's key), putting, getting and querying items, and
// the identity cache. Elsewhere: the file on disk (CredentialStore+File.swift), the store as a
// whole — header, manifest, upgrade, key rotation (CredentialStore+Integrity.swift,
// StoreManifest.swift), sealing and scrypt (StoreCrypto.swift), row tags
// (StoreRowAuthenticator.swift), PKCS#12 import/export (CredentialStore+PKCS12.swift).

/// A labeled credential store in one SQLite file: identities (private key sealed at rest, leaf,
/// chain), certificates, and references to token identities.
///
/// - Private keys are sealed with AES-256-GCM under a random data key, with the item's class and
///   label as associated data; the data key is wrapped by a key derived once per open from the
///   store secret (scrypt, parameters kept in the file). Nothing secret is written in the clear,
///   so the WAL and any journal hold only ciphertext.
/// - Every row (identity, certificate, token reference) carries an HMAC-SHA256, under a key
///   derived from the data key, of its class, label, generation and every column a decision
///   depends on (subject, issuer, expiry, fingerprints, token URI); the leaf and chain blobs are
///   checked against the authenticated fingerprints when read. A row that does not authenticate
///   is ``MTLSError/Code/corrupt`` naming its label, and is never used.
/// - The store is authenticated as a whole (CredentialStore+Integrity.swift): a header under the
///   data key's MAC holds the schema version, the KDF parameters and a write counter; a manifest
///   of every row's (class, label, generation), covered by the header, is checked on every read
///   and updated in every write transaction, so a deleted row, a row written back from an older
///   copy or one added behind the library's back is ``MTLSError/Code/corrupt`` naming its label.
///   A store from before row authentication opens only after an explicit
///   ``upgrade(path:secret:confirming:options:)``; changing the secret rotates the data key.
/// - Token URIs are stored without `pin-value` (removed wherever p11-kit would read it, with a
///   warning the caller can show; `pin-source` stays).
/// - The file is in WAL mode with `synchronous=FULL`; writes take the write lock up front and
///   wait up to the busy timeout for other connections (threads or processes).
/// - Safe to share across threads: calls are serialised on one connection. Open one store per
///   process or per thread as you like; several processes may use one file at once.
public final class CredentialStore: @unchecked Sendable {
    /// Options for opening a store.
    public struct Options: Sendable {
        /// How long to wait for another connection's lock before failing with
        /// ``MTLSError/Code/locked``, in milliseconds.
        public var busyTimeoutMilliseconds: Int32 = 10_000
        /// Create the store (and its directory, mode 0700) when the file does not exist.
        public var create = true
        /// scrypt parameters for a new store (an existing store keeps the ones in its file).
        public var kdf = StoreKDFParameters.default
        /// How many decoded identities to keep in memory.
        public var identityCacheSize = 1024
        /// Honour a stored token URI's `module-path` even when it names a module p11-kit has not
        /// registered (off: such a reference is refused with ``MTLSError/Code/invalidArgument``).
        public var allowUnregisteredModulePaths = false

        /// The defaults: 10 s busy timeout, create, ``StoreKDFParameters/default``, 1,024 cached identities.
        public init() {}
    }

    /// The schema version this library writes. A schema-3 store (rows authenticated, no header)
    /// is upgraded on open; older ones only by an explicit ``upgrade(path:secret:confirming:options:)``.
    public static let schemaVersion = 4
    /// SQLite `application_id` of a libmtls store ("mTLS").
    static let applicationID: Int64 = 0x6D54_4C53

    /// The file's path.
    public let path: String
    let db: SQLiteDatabase
    let lock = Mutex<Void>(())
    var dataKey: SecretBytes
    var rowAuth: StoreRowAuthenticator?
    /// Keys the header MAC (``StoreHeader``).
    var headerAuth: StoreRowAuthenticator?
    /// The wrapped data key this handle opened, to tell a secret changed by another handle from
    /// tampering.
    var openedWrapped: [UInt8] = []
    /// The verified header and manifest (see CredentialStore+Integrity.swift).
    var manifest = StoreManifest()
    /// The secret header rows as last verified under the header MAC.
    var verifiedMeta: MetaRows?
    private var options: Options
    var cache: [Int64: CachedIdentity] = [:]
    private var cacheClock: UInt64 = 0
    /// Set by an open that was asked for an upgrade preview.
    private var preview: UpgradePreview?

    /// A decoded identity, valid while its row's generation is unchanged.
    struct CachedIdentity {
        var generation: Int64
        var identity: Identity
        var lastUse: UInt64
    }

    /// Opens the store at `path`, creating it (mode 0600, directory 0700) when it does not exist.
    ///
    /// Throws ``MTLSError/Code/badSecret`` for a wrong secret (nothing is written),
    /// ``MTLSError/Code/notAStore`` for a file that is not a libmtls store,
    /// ``MTLSError/Code/schemaTooNew`` for a store from a newer libmtls,
    /// ``MTLSError/Code/readOnly`` when the location cannot be written,
    /// ``MTLSError/Code/locked`` when another user holds the store beyond the busy timeout,
    /// ``MTLSError/Code/upgradeRequired`` for a store from before row authentication (see
    /// ``upgrade(path:secret:confirming:options:)``), ``MTLSError/Code/corrupt`` when its
    /// authenticated header or manifest does not verify (nothing is written).
    public convenience init(path: String, secret: StoreSecret, options: Options = Options()) throws {
        try self.init(path: path, secret: secret, options: options, upgrade: nil)
    }

    init(path: String, secret: StoreSecret, options: Options, upgrade: UpgradeRequest?) throws {
        guard !path.isEmpty else { throw MTLSError(.invalidArgument, "the store path is empty") }
        self.path = path
        self.options = options
        try CredentialStore.prepareFile(path, create: options.create)
        db = try SQLiteDatabase(path: path, create: false)
        try db.setBusyTimeout(milliseconds: options.busyTimeoutMilliseconds)
        dataKey = SecretBytes([])
        try db.execute("PRAGMA secure_delete=ON; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON")
        let unlocked = try openOrInitialise(secret: secret)
        dataKey = unlocked.key
        rowAuth = try StoreRowAuthenticator(dataKey: unlocked.key)
        headerAuth = try StoreRowAuthenticator(dataKey: unlocked.key, purpose: StoreRowAuthenticator.header)
        openedWrapped = unlocked.wrapped
        if let legacy = unlocked.legacyVersion {
            preview = try lock.withLock { _ in try upgradeLegacy(version: legacy, kek: unlocked.kek, request: upgrade) }
        } else {
            try lock.withLock { _ in try db.readTransaction { try refreshIntegrity(force: true) } }
        }
    }

    /// What an upgrade of the store at `path` would vouch for: every row of a store made before
    /// row authentication, with a confirmation to pass to
    /// ``upgrade(path:secret:confirming:options:)``. Nil when the store needs no explicit
    /// upgrade (it is current, or of schema 3, which any open upgrades after checking every
    /// row). Changes nothing.
    public static func upgradePreview(path: String, secret: StoreSecret, options: Options = Options()) throws -> UpgradePreview? {
        var options = options
        options.create = false
        let store = try CredentialStore(path: path, secret: secret, options: options, upgrade: .preview)
        defer { store.close() }
        return store.preview
    }

    /// Upgrades a store made before row authentication: every row is authenticated, token URIs
    /// lose any `pin-value`, the manifest and the authenticated header are written, in one
    /// transaction — only if the store still holds exactly what the preview whose
    /// `confirmation` is given showed (``MTLSError/Code/invalidArgument`` otherwise, nothing
    /// written). Returns how many rows were vouched for (0 for a store that needed no upgrade).
    @discardableResult
    public static func upgrade(path: String, secret: StoreSecret, confirming confirmation: String, options: Options = Options()) throws -> Int {
        var options = options
        options.create = false
        let store = try CredentialStore(path: path, secret: secret, options: options, upgrade: .confirm(confirmation))
        defer { store.close() }
        return try store.lock.withLock { _ in try store.db.readTransaction { try store.refreshIntegrity(); return Int(store.manifest.header?.count ?? 0) } }
    }

    /// The store-wide write counter from the authenticated header: incremented by every write
    /// transaction (by any handle), it never goes back. An application that keeps the last
    /// value it saw elsewhere (another file, a server) and finds a lower one here knows the whole
    /// file was replaced by an older copy of itself — the one thing no file can show about itself.
    public func writeCounter() throws -> UInt64 {
        try lock.withLock { _ in
            try db.readTransaction {
                try refreshIntegrity()
                return UInt64(manifest.header?.counter ?? 0)
            }
        }
    }

    /// Closes the connection and wipes the data key. Further calls fail with
    /// ``MTLSError/Code/invalidArgument``. Also done on deinit.
    public func close() {
        lock.withLock { _ in
            db.close()
            dataKey = SecretBytes([])
            rowAuth = nil
            headerAuth = nil
            manifest.invalidate()
            cache.removeAll()
        }
    }

    // MARK: opening

    private enum FileState { case empty, store(version: Int64) }

    private func fileState() throws -> FileState {
        let appID = try db.integer("PRAGMA application_id")
        let version = try db.integer("PRAGMA user_version")
        if appID == CredentialStore.applicationID { return .store(version: version) }
        let objects = try db.integer("SELECT count(*) FROM sqlite_master")
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

    private func openOrInitialise(secret: StoreSecret) throws -> Unlocked {
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
        _ = try db.text("PRAGMA journal_mode=WAL")
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

    func authenticator() throws -> StoreRowAuthenticator {
        guard let rowAuth else { throw MTLSError(.invalidArgument, "the store is closed") }
        return rowAuth
    }

    /// `uri` without its PIN, and whether it had one. A PIN is never stored: when p11-kit's parser
    /// finds a `pin-value` — in the query or among the path attributes, however it is spelt —
    /// the URI is rebuilt from p11-kit's parsed form without it (``PKCS11URI/withoutPINValue(_:)``).
    /// `pin-source` (a file the PIN is read from, not the PIN) stays, written where p11-kit puts
    /// it. A URI p11-kit cannot parse is returned unchanged (it is refused before it is stored).
    public static func strippingPINValue(_ uri: String) -> (uri: String, stripped: Bool) {
        guard let rebuilt = try? PKCS11URI.withoutPINValue(uri) else { return (uri, false) }
        return rebuilt
    }

    // MARK: putting items

    /// The associated data a sealed key is bound to: its row's class and label, and the SHA-256
    /// of the stored leaf and chain DER, so that neither the key nor its certificates can be
    /// moved or swapped without the key failing to open.
    static func aad(_ itemClass: StoreItemClass, _ label: String, leafDER: [UInt8], chainDER: [UInt8]) -> [UInt8] {
        Array("libmtls-store/item/v1\u{0}\(itemClass.rawValue)\u{0}\(label)\u{0}".utf8) + Encoding.sha256(leafDER + chainDER)
    }

    private func checkLabel(_ label: String) throws {
        guard !label.isEmpty, label.utf8.count <= 1024, !label.utf8.contains(0) else {
            throw MTLSError(.invalidArgument, "a label must be 1 to 1024 bytes of UTF-8 without NUL")
        }
    }

    /// Stores `identity` under `label`. Without `replace`, an existing identity with that label is
    /// ``MTLSError/Code/duplicate``; with it, the old item is swapped for the new one in one
    /// transaction (readers see one or the other, never neither).
    public func putIdentity(_ identity: Identity, label: String, replace: Bool = false) throws {
        try checkLabel(label)
        let sealed = try StoreCrypto.seal(try identity.privateKey.pkcs8DER(), key: lock.withLock { _ in dataKey },
                                          aad: CredentialStore.aad(.identity, label, leafDER: identity.leaf.der,
                                                                   chainDER: identity.chain.flatMap { $0.der }))
        try put(.identity, label: label, leaf: identity.leaf, chain: identity.chain, sealedKey: sealed, tokenURI: nil, replace: replace)
    }

    /// Stores several identities in one transaction: all of them, or (on any error, such as a
    /// duplicate label without `replace`) none.
    public func putIdentities(_ items: [(label: String, identity: Identity)], replace: Bool = false) throws {
        let key = lock.withLock { _ in dataKey }
        let rows: [Row] = try items.map { item in
            try checkLabel(item.label)
            let sealed = try StoreCrypto.seal(try item.identity.privateKey.pkcs8DER(), key: key,
                                              aad: CredentialStore.aad(.identity, item.label, leafDER: item.identity.leaf.der,
                                                                       chainDER: item.identity.chain.flatMap { $0.der }))
            return Row(itemClass: .identity, label: item.label, leaf: item.identity.leaf, chain: item.identity.chain,
                       sealedKey: sealed, tokenURI: nil)
        }
        try put(rows, replace: replace)
    }

    /// Stores a certificate under `label` (``StoreItemClass/certificate``).
    public func putCertificate(_ certificate: Certificate, label: String, replace: Bool = false) throws {
        try checkLabel(label)
        try put(.certificate, label: label, leaf: certificate, chain: [], sealedKey: nil, tokenURI: nil, replace: replace)
    }

    /// Stores a reference to a token identity: the `pkcs11:` URI of its key, its certificate and
    /// optionally the chain above it. `chain` may be unordered; it is ordered leaf → root.
    /// A `pin-value` in the URI is never stored: it is removed, and the result says so (and
    /// gives the URI as stored) so that the caller can warn; `pin-source` stays.
    @discardableResult
    public func putTokenIdentity(uri: String, certificate: Certificate, chain: [Certificate] = [],
                                 label: String, replace: Bool = false) throws -> (storedURI: String, pinValueRemoved: Bool) {
        try checkLabel(label)
        _ = try PKCS11URI(uri)  // ``MTLSError/Code/badURI`` for anything that is not a valid pkcs11: URI
        let (stored, removed) = CredentialStore.strippingPINValue(uri)
        let (path, _) = Identity.buildChain(from: certificate, using: chain.filter { $0 != certificate })
        try put(.tokenIdentity, label: label, leaf: certificate, chain: path, sealedKey: nil, tokenURI: stored, replace: replace)
        return (stored, removed)
    }

    /// One row to write.
    private struct Row {
        var itemClass: StoreItemClass
        var label: String
        var leaf: Certificate
        var chain: [Certificate]
        var sealedKey: [UInt8]?
        var tokenURI: String?
    }

    private func put(_ itemClass: StoreItemClass, label: String, leaf: Certificate, chain: [Certificate],
                     sealedKey: [UInt8]?, tokenURI: String?, replace: Bool) throws {
        try put([Row(itemClass: itemClass, label: label, leaf: leaf, chain: chain, sealedKey: sealedKey, tokenURI: tokenURI)],
                replace: replace)
    }

    private func put(_ rows: [Row], replace: Bool) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let sql = """
            INSERT INTO items (class, label, subject, subject_cn, issuer, not_after, leaf_sha256, chain_sha256,
                               leaf, chain, sealed_key, token_uri, generation, created, modified, mac)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15)
            """ + (replace ? """
             ON CONFLICT (class, label) DO UPDATE SET subject=excluded.subject, subject_cn=excluded.subject_cn,
                issuer=excluded.issuer, not_after=excluded.not_after, leaf_sha256=excluded.leaf_sha256,
                chain_sha256=excluded.chain_sha256, leaf=excluded.leaf, chain=excluded.chain,
                sealed_key=excluded.sealed_key, token_uri=excluded.token_uri, generation=excluded.generation,
                modified=excluded.modified, mac=excluded.mac
            """ : "")
        try lock.withLock { _ in
            var current = rows.first
            do {
                try integrityWrite {
                    let auth = try authenticator()
                    for row in rows {
                        current = row
                        let leaf = row.leaf
                        let generation = Int64.random(in: 1...Int64.max)
                        let notAfter = Int64(leaf.notAfter.timeIntervalSince1970)
                        let chainSHA = row.chain.map(\.sha256Hex).joined(separator: ",")
                        let tag = try auth.tag(StoreRowAuthenticator.RowFields(
                            itemClass: Int64(row.itemClass.rawValue), label: row.label, subject: leaf.subject,
                            subjectCN: leaf.commonName, issuer: leaf.issuer, notAfter: notAfter, leafSHA256: leaf.sha256Hex,
                            chainSHA256: chainSHA, tokenURI: row.tokenURI, generation: generation))
                        try db.statement(sql).bind(
                            .int(Int64(row.itemClass.rawValue)), .text(row.label), .text(leaf.subject),
                            leaf.commonName.map { .text($0) } ?? .null, .text(leaf.issuer),
                            .int(notAfter),
                            .text(leaf.sha256Hex), .text(chainSHA),
                            .blob(leaf.der), .blob(row.chain.flatMap { $0.der }), row.sealedKey.map { .blob($0) } ?? .null,
                            row.tokenURI.map { .text($0) } ?? .null, .int(generation), .int(now), .blob(tag)
                        ).run()
                        try manifestSet(StoreManifestKey(itemClass: Int64(row.itemClass.rawValue), label: row.label), generation: generation)
                    }
                }
            } catch let e as MTLSError where e.code == .duplicate {
                throw MTLSError(.duplicate, "an item of class \(current?.itemClass.name ?? "?") labelled \"\(current?.label ?? "")\" already exists (replace it to overwrite)")
            }
        }
    }

    // MARK: getting items

    /// The identity stored under `label`, decrypted. Throws ``MTLSError/Code/notFound``.
    ///
    /// Decoded identities are cached per row and generation: a replace by any connection (in
    /// this process or another) changes the generation, so a stale identity is never returned.
    public func identity(label: String) throws -> Identity {
        try lock.withLock { _ in
            for attempt in 0..<2 {
                let s = try db.statement(RowQuery.identityByLabel)
                defer { s.reset() }
                s.bind(.text(label))
                if try s.step() { return try decodeIdentity(s) }
                s.reset()
                guard attempt == 0, try rowWasListed(classes: [.identity], label: label) else { break }
            }
            throw MTLSError(.notFound, "no identity labelled \"\(label)\" in the store")
        }
    }

    /// Decodes the current row of a statement selecting ``RowQuery/columns`` then `leaf, chain,
    /// sealed_key`, after authenticating it. Called with the lock held.
    private func decodeIdentity(_ s: SQLiteDatabase.Statement) throws -> Identity {
        try authenticate(s)
        let id = s.int64(RowQuery.id), generation = s.int64(RowQuery.generation)
        cacheClock &+= 1
        if let hit = cache[id], hit.generation == generation {
            cache[id]?.lastUse = cacheClock
            return hit.identity
        }
        let info = CredentialStore.info(s)
        let label = info.label
        let leafDER = s.blob(RowQuery.leaf), chainDER = s.blob(RowQuery.chain)
        let leaf = try Certificate(der: leafDER), chain = try CredentialStore.splitDER(chainDER)
        try checkBlobs(info, leaf: leaf, chain: chain)
        guard let plain = try StoreCrypto.open(s.blob(RowQuery.sealedKey), key: dataKey,
                                               aad: CredentialStore.aad(.identity, label, leafDER: leafDER, chainDER: chainDER)) else {
            throw MTLSError(.corrupt, "the sealed key of \"\(label)\" does not authenticate: it or its certificates were altered or moved from another row")
        }
        // Pass the wiped buffer itself (no copy) to the decoder.
        let key = try PrivateKey(pkcs8DER: plain.storage)
        // The AEAD just authenticated key, leaf and ordered chain together, as checked at put time.
        let identity = Identity(verifiedStoredKey: key, leaf: leaf, orderedChain: chain, friendlyName: label)
        if options.identityCacheSize > 0 {
            if cache.count >= options.identityCacheSize {
                // Drop the least recently used quarter at once, so eviction stays cheap.
                let keep = cache.sorted { $0.value.lastUse > $1.value.lastUse }.prefix(options.identityCacheSize * 3 / 4)
                cache = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
            }
            cache[id] = CachedIdentity(generation: generation, identity: identity, lastUse: cacheClock)
        }
        return identity
    }

    /// Every stored identity (decrypted), in label order — the candidates for automatic
    /// identity selection. Token references are not included (see ``tokenIdentities()``).
    public func identities() throws -> [Identity] {
        try lock.withLock { _ in
            try db.readTransaction {
                let s = try db.statement(RowQuery.allIdentities)
                defer { s.reset() }
                var out: [Identity] = []
                while try s.step() { out.append(try decodeIdentity(s)) }
                s.reset()
                try checkComplete(itemClass: .identity, seen: out.count)
                return out
            }
        }
    }

    /// The certificate stored under `label` (class certificate). Throws ``MTLSError/Code/notFound``.
    public func certificate(label: String) throws -> Certificate {
        try lock.withLock { _ in
            let s = try db.statement(RowQuery.certificateByLabel)
            defer { s.reset() }
            s.bind(.text(label))
            if try !s.step() {
                s.reset()
                if try rowWasListed(classes: [.certificate], label: label) {
                    s.bind(.text(label))
                    if try !s.step() { throw MTLSError(.notFound, "no certificate labelled \"\(label)\" in the store") }
                } else {
                    throw MTLSError(.notFound, "no certificate labelled \"\(label)\" in the store")
                }
            }
            let info = try authenticatedInfo(s)
            let cert = try Certificate(der: s.blob(RowQuery.leaf))
            try checkBlobs(info, leaf: cert, chain: [])
            return cert
        }
    }

    /// The token identity reference stored under `label`. Throws ``MTLSError/Code/notFound``.
    public func tokenIdentity(label: String) throws -> StoreTokenReference {
        try lock.withLock { _ in
            let s = try db.statement(RowQuery.tokenByLabel)
            defer { s.reset() }
            s.bind(.text(label))
            if try !s.step() {
                s.reset()
                if try rowWasListed(classes: [.tokenIdentity], label: label) {
                    s.bind(.text(label))
                    if try !s.step() { throw MTLSError(.notFound, "no token identity labelled \"\(label)\" in the store") }
                } else {
                    throw MTLSError(.notFound, "no token identity labelled \"\(label)\" in the store")
                }
            }
            let info = try authenticatedInfo(s)
            let cert = try Certificate(der: s.blob(RowQuery.leaf))
            let chain = try CredentialStore.splitDER(s.blob(RowQuery.chain))
            try checkBlobs(info, leaf: cert, chain: chain)
            let reference = StoreTokenReference(label: label, uri: info.tokenURI ?? "", certificate: cert, chain: chain)
            try StoreModulePolicy.check(reference, allowUnregistered: options.allowUnregisteredModulePaths)
            return reference
        }
    }

    /// Every token identity reference, in label order.
    public func tokenIdentities() throws -> [StoreTokenReference] {
        try list(itemClass: .tokenIdentity).map { try tokenIdentity(label: $0.label) }
    }

    /// Splits concatenated DER certificates.
    static func splitDER(_ blob: [UInt8]) throws -> [Certificate] {
        var out: [Certificate] = []
        try blob.withUnsafeBufferPointer { buf in
            guard let base = buf.baseAddress else { return }
            var p: UnsafePointer<UInt8>? = base
            while let cur = p, cur < base + buf.count {
                guard let x = d2i_X509(nil, &p, base + buf.count - cur) else {
                    throw MTLSError.openSSL(.corrupt, "a stored chain certificate cannot be decoded")
                }
                out.append(try Certificate(takingOwnership: x))
            }
        }
        return out
    }

    // MARK: metadata

    private static let infoColumns = "label, class, subject, issuer, not_after, leaf_sha256, chain_sha256, token_uri, created, modified, subject_cn, generation, mac, id"

    /// Column positions of ``infoColumns`` and of the blobs the reading queries add after them.
    enum RowQuery {
        static let subjectCN: Int32 = 10, generation: Int32 = 11, mac: Int32 = 12, id: Int32 = 13
        static let leaf: Int32 = 14, chain: Int32 = 15, sealedKey: Int32 = 16
        static let blobs = "\(infoColumns), leaf, chain, sealed_key"
        static let identityByLabel = "SELECT \(blobs) FROM items WHERE class = 1 AND label = ?"
        static let allIdentities = "SELECT \(blobs) FROM items WHERE class = 1 ORDER BY label"
        static let certificateByLabel = "SELECT \(blobs) FROM items WHERE class = 2 AND label = ?"
        static let tokenByLabel = "SELECT \(blobs) FROM items WHERE class = 3 AND label = ?"
    }

    /// The metadata of the current row after checking its tag; ``MTLSError/Code/corrupt``
    /// naming the label when it does not authenticate. Called with the lock held.
    private func authenticatedInfo(_ s: SQLiteDatabase.Statement) throws -> StoreItemInfo {
        try authenticateRow(s)
        let info = CredentialStore.info(s)
        try checkListed(itemClass: Int64(info.itemClass.rawValue), label: info.label, generation: s.int64(RowQuery.generation))
        return info
    }

    /// Checks the current row's tag (see ``authenticatedInfo(_:)``) without decoding it.
    func authenticate(_ s: SQLiteDatabase.Statement) throws {
        try authenticateRow(s)
        try checkListed(itemClass: s.int64(1), label: s.text(0) ?? "", generation: s.int64(RowQuery.generation))
    }

    /// Checks the current row's tag only (the caller checks it against the manifest).
    private func authenticateRow(_ s: SQLiteDatabase.Statement) throws {
        let classValue = s.int64(1)
        guard let itemClass = StoreItemClass(rawValue: Int32(truncatingIfNeeded: classValue)),
              Int64(itemClass.rawValue) == classValue,
              try authenticator().verifyRow(s, itemClass: 1, label: 0, subject: 2, subjectCN: RowQuery.subjectCN, issuer: 3,
                                            notAfter: 4, leafSHA256: 5, chainSHA256: 6, tokenURI: 7,
                                            generation: RowQuery.generation, mac: RowQuery.mac) else {
            // Another handle may have changed the secret (rotating the key the rows are tagged
            // under): that is bad_secret for this handle, not tampering.
            try refreshIntegrity()
            let label = s.text(0) ?? ""
            let what = StoreItemClass(rawValue: Int32(truncatingIfNeeded: classValue))?.name ?? "item"
            throw MTLSError(.corrupt, "the stored \(what) \"\(label)\" is tampered or damaged: its row does not authenticate under the store's key; it is not used (delete it and store it again)")
        }
    }

    /// Checks the leaf and chain read from a row against the fingerprints its tag covers.
    private func checkBlobs(_ info: StoreItemInfo, leaf: Certificate, chain: [Certificate]) throws {
        guard leaf.sha256Hex == info.leafSHA256, chain.map(\.sha256Hex) == info.chainSHA256 else {
            throw MTLSError(.corrupt, "the stored \(info.itemClass.name) \"\(info.label)\" is tampered or damaged: its certificates do not match its authenticated fingerprints; it is not used")
        }
    }

    static func info(_ s: SQLiteDatabase.Statement) -> StoreItemInfo {
        let chain = s.text(6) ?? ""
        return StoreItemInfo(
            label: s.text(0) ?? "", itemClass: StoreItemClass(rawValue: Int32(truncatingIfNeeded: s.int64(1))) ?? .certificate,
            subject: s.text(2) ?? "", issuer: s.text(3) ?? "",
            notAfter: Date(timeIntervalSince1970: Double(s.int64(4))), leafSHA256: s.text(5) ?? "",
            chainSHA256: chain.isEmpty ? [] : chain.split(separator: ",").map(String.init),
            tokenURI: s.isNull(7) ? nil : s.text(7),
            created: Date(timeIntervalSince1970: Double(s.int64(8)) / 1000),
            modified: Date(timeIntervalSince1970: Double(s.int64(9)) / 1000))
    }

    /// The metadata queries, spelled out once so that a lookup neither builds nor hashes a long
    /// string more than needed (find by label is the hot path).
    private enum InfoQuery {
        static let byClassAndLabel = "SELECT \(infoColumns) FROM items WHERE class = ? AND label = ?"
        static let byLabel = "SELECT \(infoColumns) FROM items WHERE label = ? ORDER BY class"
        static let byClass = "SELECT \(infoColumns) FROM items WHERE class = ? ORDER BY label"
        static let all = "SELECT \(infoColumns) FROM items ORDER BY label, class"
        static let bySHA256 = "SELECT \(infoColumns) FROM items WHERE leaf_sha256 = ? ORDER BY label, class"
        static let bySubject = "SELECT \(infoColumns) FROM items WHERE subject = ?1 OR subject_cn = ?1 ORDER BY label, class"
    }

    /// The rows a query selects, each authenticated and checked against the manifest. With
    /// `complete`, in one snapshot, and a row the manifest lists for that scope (every class
    /// with `.some(nil)`) but the file lacks is ``MTLSError/Code/corrupt``.
    private func infos(_ sql: String, _ values: SQLiteDatabase.Value..., complete: StoreItemClass?? = nil) throws -> [StoreItemInfo] {
        try lock.withLock { _ in
            func run() throws -> [StoreItemInfo] {
                let s = try db.statement(sql)
                defer { s.reset() }
                s.bind(values: values)
                var out: [StoreItemInfo] = []
                while try s.step() { out.append(try authenticatedInfo(s)) }
                s.reset()
                if let scope = complete { try checkComplete(itemClass: scope, seen: out.count) }
                return out
            }
            // A single lookup by label runs in its statement's own snapshot (the hot path).
            if complete == nil && sql == InfoQuery.byClassAndLabel { return try run() }
            return try db.readTransaction { try run() }
        }
    }

    /// Metadata of the item labelled `label` in `itemClass`, or — with no class — of the first
    /// match in the order identity, certificate, token identity. Decrypts nothing.
    /// Throws ``MTLSError/Code/notFound``.
    public func info(label: String, itemClass: StoreItemClass? = nil) throws -> StoreItemInfo {
        for attempt in 0..<2 {
            let found: [StoreItemInfo]
            if let itemClass {
                found = try infos(InfoQuery.byClassAndLabel, .int(Int64(itemClass.rawValue)), .text(label))
            } else {
                found = try infos(InfoQuery.byLabel, .text(label))
            }
            if let first = found.first { return first }
            let classes = itemClass.map { [$0] } ?? StoreItemClass.allCases
            guard attempt == 0, try lock.withLock({ _ in try rowWasListed(classes: classes, label: label) }) else { break }
        }
        throw MTLSError(.notFound, "no \(itemClass?.name ?? "item") labelled \"\(label)\" in the store")
    }

    /// Metadata of every item (or every item of one class), ordered by label then class.
    public func list(itemClass: StoreItemClass? = nil) throws -> [StoreItemInfo] {
        if let itemClass { return try infos(InfoQuery.byClass, .int(Int64(itemClass.rawValue)), complete: .some(itemClass)) }
        return try infos(InfoQuery.all, complete: .some(nil))
    }

    /// Items whose leaf certificate has this SHA-256 fingerprint (hex, any case, colons allowed).
    public func find(sha256 fingerprint: String) throws -> [StoreItemInfo] {
        let hex = fingerprint.lowercased().filter { $0 != ":" }
        guard hex.count == 64, hex.allSatisfy({ $0.isHexDigit }) else {
            throw MTLSError(.invalidArgument, "a SHA-256 fingerprint is 64 hex digits (got \"\(fingerprint)\")")
        }
        return try infos(InfoQuery.bySHA256, .text(hex))
    }

    /// Items whose leaf subject is `subject` (RFC 4514 text, exactly as ``StoreItemInfo/subject``
    /// shows it) or whose subject common name is `subject`.
    public func find(subject: String) throws -> [StoreItemInfo] {
        try infos(InfoQuery.bySubject, .text(subject))
    }

    // MARK: deleting

    /// Deletes the item labelled `label` in `itemClass`, or with no class every item with that
    /// label. Returns how many were deleted; throws ``MTLSError/Code/notFound`` when none.
    @discardableResult
    public func delete(label: String, itemClass: StoreItemClass? = nil) throws -> Int {
        let n: Int = try lock.withLock { _ in
            try integrityWrite {
                let s: SQLiteDatabase.Statement
                if let itemClass {
                    s = try db.statement("DELETE FROM items WHERE class = ? AND label = ? RETURNING class")
                        .bind(.int(Int64(itemClass.rawValue)), .text(label))
                } else {
                    s = try db.statement("DELETE FROM items WHERE label = ? RETURNING class").bind(.text(label))
                }
                defer { s.reset() }
                var deleted: [Int64] = []
                while try s.step() { deleted.append(s.int64(0)) }
                s.reset()
                for c in deleted { try manifestSet(StoreManifestKey(itemClass: c, label: label), generation: nil) }
                return deleted.count
            }
        }
        guard n > 0 else { throw MTLSError(.notFound, "no \(itemClass?.name ?? "item") labelled \"\(label)\" in the store") }
        return n
    }

    /// Deletes every item of a class; returns how many.
    @discardableResult
    public func deleteAll(itemClass: StoreItemClass) throws -> Int {
        try lock.withLock { _ in
            try integrityWrite {
                let s = try db.statement("DELETE FROM items WHERE class = ? RETURNING label").bind(.int(Int64(itemClass.rawValue)))
                defer { s.reset() }
                var deleted: [String] = []
                while try s.step() { deleted.append(s.text(0) ?? "") }
                s.reset()
                for label in deleted {
                    try manifestSet(StoreManifestKey(itemClass: Int64(itemClass.rawValue), label: label), generation: nil)
                }
                return deleted.count
            }
        }
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

    /// Allows (or stops allowing) stored token URIs whose `module-path` names a module p11-kit
    /// has not registered, for this open store (see ``Options/allowUnregisteredModulePaths``).
    public func allowUnregisteredModulePaths(_ allow: Bool) {
        lock.withLock { _ in options.allowUnregisteredModulePaths = allow }
    }

    // MARK: for tests

    /// Turns this (current) store into what an older libmtls wrote, schema `version` (1...3):
    /// the data key wrapped the old way, no header or manifest, rows tagged the schema-3 way or
    /// (below 3) not at all. Tests use it to make genuine older stores.
    func _testMakeLegacy(version: Int, secret: StoreSecret) throws {
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

    /// Runs raw SQL on the store's connection (tests simulate corruption, full disks, locks).
    /// Moves whenever a row may have changed: SQLite's `data_version` (commits by other
    /// connections, other processes included) and `total_changes()` (this connection's own).
    /// Two integers, no row read: what an identity source following a label looks at first.
    func changeMark() throws -> [Int64] {
        try lock.withLock { _ in [try db.integer("PRAGMA data_version"), try db.integer("SELECT total_changes()")] }
    }

    /// Every item's certificates (leaf first, then its chain), authenticated, without opening
    /// any private key: what expiry checks read. In label order, identities first.
    public func itemCertificates() throws -> [(info: StoreItemInfo, certificates: [Certificate])] {
        try lock.withLock { _ in
            try db.readTransaction {
                let s = try db.statement("SELECT \(RowQuery.blobs) FROM items ORDER BY class, label")
                defer { s.reset() }
                var out: [(info: StoreItemInfo, certificates: [Certificate])] = []
                while try s.step() {
                    let info = try authenticatedInfo(s)
                    let leaf = try Certificate(der: s.blob(RowQuery.leaf)), chain = try CredentialStore.splitDER(s.blob(RowQuery.chain))
                    try checkBlobs(info, leaf: leaf, chain: chain)
                    out.append((info, [leaf] + chain))
                }
                s.reset()
                // As list(): a row deleted behind the store's back is an error, not a shorter list.
                try checkComplete(itemClass: nil, seen: out.count)
                return out
            }
        }
    }

    func _testExecute(_ sql: String) throws { try lock.withLock { _ in try db.execute(sql) } }
    /// One text value from raw SQL (tests).
    func _testText(_ sql: String) throws -> String? { try lock.withLock { _ in try db.text(sql) } }
    /// One integer from raw SQL (tests).
    func _testInteger(_ sql: String) throws -> Int64 { try lock.withLock { _ in try db.integer(sql) } }
}

