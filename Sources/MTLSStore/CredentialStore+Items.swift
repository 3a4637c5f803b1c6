internal import COpenSSL
import FoundationEssentials

// This file owns the store's items: putting identities, certificates and token references (a
// token URI's PIN stripped first), getting them back decoded and checked, and deleting them.
// Reading metadata and authenticating rows is in CredentialStore+Queries.swift.

extension CredentialStore {
    /// `uri` without its PIN, and whether it had one. A PIN is never stored: when p11-kit's parser
    /// finds a `pin-value` — in the query or among the path attributes, however it is spelt —
    /// the URI is rebuilt from p11-kit's parsed form without it (`PKCS11URI.withoutPINValue(_:)`).
    /// `pin-source` (a file the PIN is read from, not the PIN) stays, written where p11-kit puts
    /// it. A URI p11-kit cannot parse is returned unchanged (it is refused before it is stored).
    public static func strippingPINValue(_ uri: String) -> (uri: String, stripped: Bool) {
        guard let rebuilt = try? PKCS11URI.withoutPINValue(uri) else { return (uri, false) }
        return rebuilt
    }

    // MARK: putting items

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
                throw MTLSError(.duplicate, "an item of class \(current?.itemClass.name ?? "?") labelled \"\(current?.label ?? "")\" already exists: pass --replace (replace in the C, Python and Swift APIs) to overwrite it, or choose another label")
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
        if let hit = cache.identity(id: id, generation: generation) { return hit }
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
        cache.keep(identity, id: id, generation: generation, capacity: options.identityCacheSize)
        return identity
    }

    /// Every stored identity (decrypted), in label order — the candidates for automatic
    /// identity selection. Token references are not included (see ``tokenIdentities()``), nor
    /// are enrollment records (``StoreItemInfo/isEnrollmentRecord``), which are no identity
    /// anyone presents (each row is still authenticated).
    public func identities() throws -> [Identity] {
        try lock.withLock { _ in
            try db.readTransaction {
                let s = try db.statement(RowQuery.allIdentities)
                defer { s.reset() }
                var out: [Identity] = []
                var seen = 0
                while try s.step() {
                    let identity = try decodeIdentity(s)
                    seen += 1
                    if !CredentialStore.info(s).isEnrollmentRecord { out.append(identity) }
                }
                s.reset()
                try checkComplete(itemClass: .identity, seen: seen)
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
}
