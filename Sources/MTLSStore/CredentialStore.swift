internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// This file owns the store handle: its state, opening (and the explicit upgrade's entry
// points), the write counter, closing, and the test hooks on its connection. Elsewhere: the file
// on disk (CredentialStore+File.swift), the keyring — creating and unlocking the data key,
// the secret header, sealing's associated data, changing the secret (CredentialStore+Keyring.swift),
// schema and migrations (CredentialStore+Schema.swift), the identity cache
// (CredentialStore+IdentityCache.swift), putting, getting and deleting items
// (CredentialStore+Items.swift), metadata queries and row authentication
// (CredentialStore+Queries.swift), the store as a whole — header, manifest, upgrade, key rotation
// (CredentialStore+Integrity.swift, StoreManifest.swift), sealing and scrypt (StoreCrypto.swift),
// row tags (StoreRowAuthenticator.swift), PKCS#12 import/export (CredentialStore+PKCS12.swift).

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
        /// Create the store (and its directory, mode 0700) when the file does not exist: initialised
        /// in a temporary file in the same folder and linked into place once complete.
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

    /// The file's path.
    public let path: String
    let db: SQLiteDatabase
    let lock = Locked<Void>(())
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
    private(set) var options: Options
    var cache = IdentityCache()
    /// Set by an open that was asked for an upgrade preview.
    private var preview: UpgradePreview?

    /// Opens the store at `path`, creating it (mode 0600, directory 0700) when it does not exist
    /// and `options.create` is set (``MTLSError/Code/notFound`` naming the path otherwise). A new
    /// store is initialised in a temporary file in the same folder and appears at `path` only
    /// once complete: an interrupted creation leaves no file at `path`.
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

    /// `initialising`: `path` is a new empty temporary file that ``prepareFile(_:secret:options:)``
    /// initialises before linking it into place.
    init(path: String, secret: StoreSecret, options: Options, upgrade: UpgradeRequest?, initialising: Bool = false) throws {
        guard !path.isEmpty else { throw MTLSError(.invalidArgument, "the store path is empty") }
        self.path = path
        self.options = options
        if !initialising { try CredentialStore.prepareFile(path, secret: secret, options: options) }
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

    /// Allows (or stops allowing) stored token URIs whose `module-path` names a module p11-kit
    /// has not registered, for this open store (see ``Options/allowUnregisteredModulePaths``).
    public func allowUnregisteredModulePaths(_ allow: Bool) {
        lock.withLock { _ in options.allowUnregisteredModulePaths = allow }
    }

    // MARK: for tests

    /// Runs raw SQL on the store's connection (tests simulate corruption, full disks, locks).
    package func _testExecute(_ sql: String) throws { try lock.withLock { _ in try db.execute(sql) } }
    /// One text value from raw SQL (tests).
    package func _testText(_ sql: String) throws -> String? { try lock.withLock { _ in try db.text(sql) } }
    /// One integer from raw SQL (tests).
    package func _testInteger(_ sql: String) throws -> Int64 { try lock.withLock { _ in try db.integer(sql) } }
}
