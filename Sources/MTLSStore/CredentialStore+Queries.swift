import FoundationEssentials

// This file owns reading the store's metadata: the columns and queries, each row authenticated
// and checked against the manifest (and its certificates against its fingerprints), lookups by
// label, class, fingerprint and subject, the certificates expiry checks read, and the change mark
// an identity source polls.

extension CredentialStore {
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
    func authenticatedInfo(_ s: SQLiteDatabase.Statement) throws -> StoreItemInfo {
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
    func checkBlobs(_ info: StoreItemInfo, leaf: Certificate, chain: [Certificate]) throws {
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

    /// Moves whenever a row may have changed: SQLite's `data_version` (commits by other
    /// connections, other processes included) and `total_changes()` (this connection's own).
    /// Two integers, no row read: what an identity source following a label looks at first.
    package func changeMark() throws -> [Int64] {
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
}
