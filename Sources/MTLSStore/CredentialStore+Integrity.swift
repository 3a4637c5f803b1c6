import FoundationEssentials

// This file owns the store's integrity as a whole: the authenticated header (read, verified,
// written), the manifest of every row (checked on every read, updated in every write
// transaction), the explicit upgrade of stores from before row authentication, and the
// rotation of the data key when the secret changes. Everything here runs with the store's lock
// held, inside a transaction the caller opened (or an active statement's implicit one).

extension CredentialStore {
    /// The secret header and the authenticated header, as stored in `meta`.
    struct MetaRows {
        var kind: String
        var kdfParameters: String
        var salt: [UInt8]
        var wrapped: [UInt8]
        var header: [UInt8]?
        var headerMAC: [UInt8]?

        var parameters: StoreKDFParameters? {
            let p = kdfParameters.split(separator: ",").compactMap { Int($0) }
            guard p.count == 3 else { return nil }
            return StoreKDFParameters(logN: p[0], r: p[1], p: p[2])
        }
    }

    /// What ``CredentialStore/upgradePreview(path:secret:options:)`` shows before an upgrade.
    public struct UpgradePreview: Sendable {
        /// The schema version of the store as found.
        public let schemaVersion: Int
        /// Every row the upgrade will vouch for (token URIs shown without any `pin-value`).
        public let items: [StoreItemInfo]
        /// Pass it to ``CredentialStore/upgrade(path:secret:confirming:options:)``: the upgrade
        /// happens only if the store still holds exactly these rows.
        public let confirmation: String
    }

    /// What an open of a store from before row authentication was asked to do.
    enum UpgradeRequest {
        case preview
        case confirm(String)
    }

    static let dataKeyAADLegacy = Array("libmtls-store/data-key/v1".utf8)
    /// The data key of a current store is wrapped with this associated data: a key that opens
    /// with it proves the store has an authenticated header, so a missing or older-looking one is
    /// tampering, never a reason to migrate.
    static let dataKeyAADCurrent = Array("libmtls-store/data-key/v2".utf8)

    // MARK: reading the header

    func readMeta() throws -> MetaRows {
        var text: [String: String] = [:], blobs: [String: [UInt8]] = [:]
        let s = try db.statement("SELECT name, value FROM meta")
        defer { s.reset() }
        while try s.step() {
            guard let name = s.text(0) else { continue }
            switch name {
            case "salt", "wrapped_key", "header", "header_mac": blobs[name] = s.blob(1)
            default: text[name] = s.text(1) ?? ""
            }
        }
        guard let kind = text["kdf"], let params = text["kdf_params"], let salt = blobs["salt"], let wrapped = blobs["wrapped_key"] else {
            throw MTLSError(.notAStore, "\(path) has no libmtls store header")
        }
        return MetaRows(kind: kind, kdfParameters: params, salt: salt, wrapped: wrapped,
                        header: blobs["header"], headerMAC: blobs["header_mac"])
    }

    private func damaged(_ why: String) -> MTLSError {
        MTLSError(.corrupt, "the store \(path) is tampered or damaged: \(why); nothing was used or written")
    }

    /// Verifies the header and the manifest's digests when another connection has committed
    /// since the last check (or when `force`). Cheap otherwise: one call into SQLite's pager.
    func refreshIntegrity(force: Bool = false) throws {
        let version = db.dataVersion()
        if !force, manifest.header != nil, manifest.dataVersion == version { return }
        let meta = try readMeta()
        guard let blob = meta.header, let mac = meta.headerMAC else {
            throw damaged("its authenticated header is missing")
        }
        guard let auth = headerAuth else { throw MTLSError(.invalidArgument, "the store is closed") }
        let input = StoreHeader.macInput(header: blob, kind: meta.kind, kdfParameters: meta.kdfParameters, salt: meta.salt, wrapped: meta.wrapped)
        guard try auth.verify(bytes: input, stored: mac) else {
            if meta.wrapped != openedWrapped {
                throw MTLSError(.badSecret, "the secret of \(path) was changed (and its data key rotated) since this handle opened it: open it again with the new secret")
            }
            throw damaged("its header does not authenticate under the store's key")
        }
        let header = try StoreHeader(decoding: blob)
        guard header.schemaVersion == Int64(CredentialStore.schemaVersion), header.flags & StoreHeader.rowsAuthenticated != 0 else {
            throw damaged("its authenticated header says schema \(header.schemaVersion), flags \(header.flags)")
        }
        let userVersion = try db.integer("PRAGMA user_version")
        guard userVersion == Int64(CredentialStore.schemaVersion) else {
            throw damaged("its schema version was set to \(userVersion) but its authenticated header says \(header.schemaVersion)")
        }
        guard header.counter >= manifest.highestCounter else {
            throw damaged("its write counter went back from \(manifest.highestCounter) to \(header.counter) while it was open (the file was replaced by an older copy)")
        }
        if force || manifest.header?.counter != header.counter || manifest.digests.count != StoreManifest.bucketCount {
            // Buckets never written are empty and have no row.
            var digests = [[UInt8]](repeating: StoreManifest.emptyDigest, count: StoreManifest.bucketCount)
            let s = try db.statement("SELECT bucket, digest FROM manifest ORDER BY bucket")
            defer { s.reset() }
            while try s.step() {
                let d = s.blob(1), i = s.int64(0)
                guard i >= 0, i < Int64(StoreManifest.bucketCount), d.count == 32 else { throw damaged("its manifest is malformed") }
                digests[Int(i)] = d
            }
            guard StoreManifest.root(digests) == header.root else {
                throw damaged("its manifest does not match its authenticated header")
            }
            manifest.setDigests(digests)
        }
        manifest.header = header
        manifest.dataVersion = version
        manifest.highestCounter = header.counter
        verifiedMeta = meta
    }

    /// The entries of bucket `i`, checked against the verified digest.
    func bucketEntries(_ i: Int) throws -> [StoreManifestKey: Int64] {
        if let e = manifest.cached(i) { return e }
        let s = try db.statement("SELECT entries FROM manifest WHERE bucket = ?")
        defer { s.reset() }
        s.bind(.int(Int64(i)))
        guard i < manifest.digests.count else { throw damaged("a bucket of its manifest is missing") }
        let blob = try s.step() ? s.blob(0) : StoreManifest.encode([:])
        let digest = Encoding.sha256(blob)
        guard digest == manifest.digests[i] else { throw damaged("its manifest does not match its authenticated header") }
        let entries = try StoreManifest.decode(blob)
        manifest.cache(i, entries: entries)
        return entries
    }

    /// Checks that a row just read (and authenticated) is the one the manifest lists: a row
    /// older than the manifest says, or one it does not list, is ``MTLSError/Code/corrupt``
    /// naming the label. Called inside the read's snapshot (its statement is still active).
    func checkListed(itemClass: Int64, label: String, generation: Int64) throws {
        try refreshIntegrity()
        let key = StoreManifestKey(itemClass: itemClass, label: label)
        let i = StoreManifest.bucket(of: key)
        let listed: Int64?
        if let hit = manifest.lookup(key, in: i) { listed = hit } else { listed = try bucketEntries(i)[key] }
        guard listed == generation else {
            let what = StoreItemClass(rawValue: Int32(truncatingIfNeeded: itemClass))?.name ?? "item"
            if listed == nil {
                throw MTLSError(.corrupt, "the stored \(what) \"\(label)\" is tampered or damaged: the store's authenticated manifest does not list it (it was added or restored behind the library's back); it is not used")
            }
            throw MTLSError(.corrupt, "the stored \(what) \"\(label)\" is tampered or damaged: it is not the version the store's authenticated manifest lists (an older copy was written back); it is not used")
        }
    }

    /// After a lookup by label found no row: ``MTLSError/Code/corrupt`` when the manifest lists
    /// one (it was deleted behind the library's back). Returns true when the row exists after
    /// all (another connection wrote it meanwhile): the caller looks again.
    func rowWasListed(classes: [StoreItemClass], label: String) throws -> Bool {
        try db.readTransaction {
            try refreshIntegrity()
            for c in classes {
                let key = StoreManifestKey(itemClass: Int64(c.rawValue), label: label)
                guard try bucketEntries(StoreManifest.bucket(of: key))[key] != nil else { continue }
                let s = try db.statement("SELECT 1 FROM items WHERE class = ? AND label = ?")
                defer { s.reset() }
                s.bind(.int(Int64(c.rawValue)), .text(label))
                if try s.step() { return true }
                throw MTLSError(.corrupt, "the stored \(c.name) \"\(label)\" is tampered or damaged: the store's authenticated manifest lists it but its row is gone (deleted behind the library's back)")
            }
            return false
        }
    }

    /// After listing every row of a class (or all, with nil), in one snapshot: each was checked
    /// by ``checkListed(itemClass:label:generation:)``; this finds a listed row that is missing.
    func checkComplete(itemClass: StoreItemClass?, seen: Int) throws {
        try refreshIntegrity()
        if itemClass == nil, let header = manifest.header, header.count == Int64(seen) { return }
        var listed: [StoreManifestKey] = []
        for i in 0..<StoreManifest.bucketCount {
            for key in try bucketEntries(i).keys where itemClass == nil || key.itemClass == Int64(itemClass?.rawValue ?? 0) {
                listed.append(key)
            }
        }
        guard listed.count != seen else { return }
        // Name one missing row.
        for key in listed.sorted(by: { $0.label < $1.label }) {
            let s = try db.statement("SELECT 1 FROM items WHERE class = ? AND label = ?")
            defer { s.reset() }
            s.bind(.int(key.itemClass), .text(key.label))
            if try !s.step() {
                let what = StoreItemClass(rawValue: Int32(truncatingIfNeeded: key.itemClass))?.name ?? "item"
                throw MTLSError(.corrupt, "the stored \(what) \"\(key.label)\" is tampered or damaged: the store's authenticated manifest lists it but its row is gone (deleted behind the library's back)")
            }
        }
        throw damaged("it holds \(seen) rows where its authenticated manifest lists \(listed.count)")
    }

    // MARK: writing

    /// Runs `body` in a write transaction that also updates the manifest (through
    /// ``manifestSet(_:generation:)``) and, if anything changed, the header with the write
    /// counter incremented. On any error SQLite rolls it all back and the verified state is
    /// forgotten.
    func integrityWrite<T>(_ body: () throws -> T) throws -> T {
        do {
            let result = try db.writeTransaction {
                try refreshIntegrity()
                let result = try body()
                if !manifest.dirty.isEmpty { try commitIntegrity() }
                return result
            }
            // Only a committed counter counts: a write that failed (disk full) rolled it back.
            manifest.highestCounter = max(manifest.highestCounter, manifest.header?.counter ?? 0)
            return result
        } catch {
            manifest.invalidate()
            throw error
        }
    }

    /// Records a row's new generation (or its removal) in the manifest of this transaction.
    func manifestSet(_ key: StoreManifestKey, generation: Int64?) throws {
        let i = StoreManifest.bucket(of: key)
        _ = try bucketEntries(i)
        manifest.set(key, generation: generation, in: i)
    }

    /// Writes the changed buckets and the header with the next write counter.
    func commitIntegrity(meta: MetaRows? = nil, auth: StoreRowAuthenticator? = nil) throws {
        guard var header = manifest.header else { throw MTLSError(.internal, "the store's header was not verified before a write") }
        for change in manifest.takeDirty() {
            try db.statement("INSERT OR REPLACE INTO manifest(bucket, entries, digest) VALUES (?, ?, ?)")
                .bind(.int(Int64(change.bucket)), .blob(change.blob), .blob(change.digest)).run()
        }
        header.counter += 1
        header.root = manifest.root
        try writeHeader(header, meta: meta, auth: auth)
    }

    /// Writes `header` and its MAC over it and the secret header (`meta`, else the verified one).
    func writeHeader(_ header: StoreHeader, meta: MetaRows?, auth: StoreRowAuthenticator?) throws {
        guard let meta = meta ?? verifiedMeta, let auth = auth ?? headerAuth else {
            throw MTLSError(.internal, "the store's header was not verified before a write")
        }
        let blob = header.encoded
        let mac = try auth.tag(bytes: StoreHeader.macInput(header: blob, kind: meta.kind, kdfParameters: meta.kdfParameters,
                                                            salt: meta.salt, wrapped: meta.wrapped))
        try db.statement("INSERT OR REPLACE INTO meta(name, value) VALUES ('header', ?), ('header_mac', ?)")
            .bind(.blob(blob), .blob(mac)).run()
        manifest.header = header
        manifest.dataVersion = db.dataVersion()
        var m = meta
        m.header = blob
        m.headerMAC = mac
        verifiedMeta = m
    }

    /// Writes a whole new manifest of `entries` and a header with `counter` (new stores,
    /// upgrades).
    func writeFreshManifest(_ entries: [(StoreManifestKey, Int64)], counter: Int64, meta: MetaRows, auth: StoreRowAuthenticator) throws {
        var buckets = [[StoreManifestKey: Int64]](repeating: [:], count: StoreManifest.bucketCount)
        for (key, generation) in entries { buckets[StoreManifest.bucket(of: key)][key] = generation }
        manifest.invalidate()
        try db.execute("DELETE FROM manifest")
        var digests: [[UInt8]] = []
        for (i, b) in buckets.enumerated() {
            guard !b.isEmpty else {
                digests.append(StoreManifest.emptyDigest)
                continue
            }
            let blob = StoreManifest.encode(b)
            let digest = Encoding.sha256(blob)
            try db.statement("INSERT OR REPLACE INTO manifest(bucket, entries, digest) VALUES (?, ?, ?)")
                .bind(.int(Int64(i)), .blob(blob), .blob(digest)).run()
            digests.append(digest)
        }
        manifest.setDigests(digests)
        for (i, b) in buckets.enumerated() { manifest.cache(i, entries: b) }
        let header = StoreHeader(schemaVersion: Int64(CredentialStore.schemaVersion), flags: StoreHeader.rowsAuthenticated,
                                 counter: counter, count: Int64(entries.count), root: StoreManifest.root(digests))
        try writeHeader(header, meta: meta, auth: auth)
    }

    // MARK: upgrading an older store

    /// The rows of a store as found, for an upgrade (schema < 4: no manifest yet). What a row
    /// says of its certificates (subject, issuer, expiry, fingerprints) is read from the
    /// certificates it holds, the bytes the upgrade authenticates, never from the row's text
    /// columns: in a store from before row authentication (schema 1, 2) anyone who could write
    /// the file may have put a rogue certificate's DER under a genuine fingerprint. A schema-3
    /// row's tag covers its columns: there, certificates that differ from them are tampering.
    private func legacyRows(version: Int64) throws -> [(info: StoreItemInfo, id: Int64, generation: Int64, subjectCN: String?)] {
        let columns = version >= 3 ? "label, class, subject, issuer, not_after, leaf_sha256, chain_sha256, token_uri, created, modified, subject_cn, generation, mac, id, leaf, chain"
                                   : "label, class, subject, issuer, not_after, leaf_sha256, chain_sha256, token_uri, created, modified, subject_cn, generation, NULL, id, leaf, chain"
        let s = try db.statement("SELECT \(columns) FROM items ORDER BY label, class")
        defer { s.reset() }
        let v3 = version >= 3 ? try StoreRowAuthenticator(dataKey: dataKey, purpose: StoreRowAuthenticator.rowsV3) : nil
        var out: [(StoreItemInfo, Int64, Int64, String?)] = []
        while try s.step() {
            let raw = CredentialStore.info(s)
            let classValue = s.int64(1)
            guard let itemClass = StoreItemClass(rawValue: Int32(truncatingIfNeeded: classValue)), Int64(itemClass.rawValue) == classValue else {
                throw MTLSError(.corrupt, "the stored row \"\(raw.label)\" has an unknown class \(classValue): the store is tampered or damaged")
            }
            if let v3, try !v3.verifyRow(s, itemClass: 1, label: 0, subject: 2, subjectCN: 10, issuer: 3, notAfter: 4, leafSHA256: 5,
                                         chainSHA256: 6, tokenURI: 7, generation: 11, mac: 12) {
                throw MTLSError(.corrupt, "the stored \(itemClass.name) \"\(raw.label)\" is tampered or damaged: its row does not authenticate under the store's key; the store is not upgraded (delete the row with a libmtls that reads it, or restore a backup)")
            }
            let leaf: Certificate, chain: [Certificate]
            do {
                leaf = try Certificate(der: s.blob(14))
                chain = try CredentialStore.splitDER(s.blob(15))
            } catch {
                throw MTLSError(.corrupt, "the stored \(itemClass.name) \"\(raw.label)\" holds a certificate that cannot be read: the store is not upgraded (delete the row with a libmtls that reads it, or restore a backup)")
            }
            if v3 != nil { try checkBlobs(raw, leaf: leaf, chain: chain) }
            let uri = raw.tokenURI.map { CredentialStore.strippingPINValue($0).uri }
            let info = StoreItemInfo(label: raw.label, itemClass: itemClass, subject: leaf.subject, issuer: leaf.issuer,
                                     notAfter: Date(timeIntervalSince1970: Double(Int64(leaf.notAfter.timeIntervalSince1970))),
                                     leafSHA256: leaf.sha256Hex, chainSHA256: chain.map(\.sha256Hex),
                                     tokenURI: uri, created: raw.created, modified: raw.modified)
            out.append((info, s.int64(13), s.int64(11), leaf.commonName))
        }
        return out
    }

    /// A digest of exactly what a preview shows, so that a confirmation vouches for that.
    private static func confirmation(version: Int64, _ items: [StoreItemInfo]) -> String {
        var e = StoreEncoder(domain: "libmtls-store/upgrade-confirmation/v1")
        e.add(version)
        for i in items {
            e.add(Int64(i.itemClass.rawValue)); e.add(i.label); e.add(i.subject); e.add(i.issuer); e.add(i.leafSHA256)
            e.add(i.chainSHA256.joined(separator: ",")); e.add(i.tokenURI ?? ""); e.add(Int64(i.notAfter.timeIntervalSince1970))
        }
        return Encoding.hex(Encoding.sha256(e.bytes))
    }

    /// Brings a store from before the authenticated header to the current schema, in one
    /// transaction. A schema-3 store (rows already authenticated) is upgraded on open after
    /// every row's tag checks; an older one only when `request` confirms what a preview showed.
    /// Returns the preview when one was asked for.
    func upgradeLegacy(version: Int64, kek: SecretBytes, request: UpgradeRequest?) throws -> UpgradePreview? {
        guard version >= 1, Int(version) < CredentialStore.migrations.count else {
            throw MTLSError(.corrupt, "\(path) has an invalid schema version \(version): the store file is damaged")
        }
        if version < 3 {
            switch request {
            case nil:
                throw MTLSError(.upgradeRequired, "\(path) was made by a libmtls from before row authentication (schema \(version)): its rows cannot be trusted until someone who knows what it should hold vouches for them. Review and upgrade it with `mtls store upgrade` (mtls_store_upgrade, Store.upgrade in Python)")
            case .preview:
                let items = try db.readTransaction { try legacyRows(version: version).map(\.info) }
                return UpgradePreview(schemaVersion: Int(version), items: items,
                                      confirmation: CredentialStore.confirmation(version: version, items))
            case .confirm:
                break
            }
        }
        let wrapped = try StoreCrypto.seal(dataKey, key: kek, aad: CredentialStore.dataKeyAADCurrent)
        do {
            try db.writeTransaction {
                let current = try db.integer("PRAGMA user_version")
                if current == Int64(CredentialStore.schemaVersion) { return }  // another process upgraded it
                guard current == version else {
                    throw MTLSError(.invalidArgument, "\(path) changed while it was being upgraded; run the upgrade again")
                }
                let rows = try legacyRows(version: version)
                if case .confirm(let expected)? = request, version < 3 {
                    guard expected == CredentialStore.confirmation(version: version, rows.map(\.info)) else {
                        throw MTLSError(.invalidArgument, "\(path) no longer holds what was reviewed (or the confirmation is wrong): nothing was upgraded; review it again")
                    }
                }
                for step in CredentialStore.migrations[Int(version)...] { try db.execute(step) }
                let auth = try authenticator()
                for row in rows {
                    let i = row.info
                    let tag = try auth.tag(StoreRowAuthenticator.RowFields(
                        itemClass: Int64(i.itemClass.rawValue), label: i.label, subject: i.subject, subjectCN: row.subjectCN,
                        issuer: i.issuer, notAfter: Int64(i.notAfter.timeIntervalSince1970), leafSHA256: i.leafSHA256,
                        chainSHA256: i.chainSHA256.joined(separator: ","), tokenURI: i.tokenURI, generation: row.generation))
                    // The columns as read from the row's certificates (what the preview showed).
                    try db.statement("""
                        UPDATE items SET mac = ?, token_uri = ?, subject = ?, subject_cn = ?, issuer = ?, not_after = ?,
                                         leaf_sha256 = ?, chain_sha256 = ? WHERE id = ?
                        """)
                        .bind(.blob(tag), i.tokenURI.map { .text($0) } ?? .null, .text(i.subject), row.subjectCN.map { .text($0) } ?? .null,
                              .text(i.issuer), .int(Int64(i.notAfter.timeIntervalSince1970)), .text(i.leafSHA256),
                              .text(i.chainSHA256.joined(separator: ",")), .int(row.id)).run()
                }
                try db.statement("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)").bind(.text("wrapped_key"), .blob(wrapped)).run()
                var meta = try readMeta()
                meta.wrapped = wrapped
                guard let headerAuth else { throw MTLSError(.invalidArgument, "the store is closed") }
                try writeFreshManifest(rows.map { (StoreManifestKey(itemClass: Int64($0.info.itemClass.rawValue), label: $0.info.label), $0.generation) },
                                       counter: 1, meta: meta, auth: headerAuth)
                try db.execute("PRAGMA user_version=\(CredentialStore.schemaVersion)")
            }
        } catch {
            manifest.invalidate()
            throw error
        }
        // The wrapped key as stored: another process may have done the upgrade (same data key,
        // another nonce) while this one waited for the lock.
        openedWrapped = try db.readTransaction { try readMeta().wrapped }
        try db.readTransaction { try refreshIntegrity(force: true) }
        return nil
    }

    // MARK: rotating the data key

    /// Re-seals every private key and re-authenticates every row, the manifest and the header
    /// under `newKey`, and wraps it under `kek`, in one transaction. The caller derived `kek`.
    func rotateDataKey(to newKey: SecretBytes, kek: SecretBytes, secret: StoreSecret, salt: [UInt8], parameters: StoreKDFParameters) throws {
        let newRows = try StoreRowAuthenticator(dataKey: newKey)
        let newHeader = try StoreRowAuthenticator(dataKey: newKey, purpose: StoreRowAuthenticator.header)
        let wrapped = try StoreCrypto.seal(newKey, key: kek, aad: CredentialStore.dataKeyAADCurrent)
        try integrityWrite {
            var updates: [(id: Int64, mac: [UInt8], sealed: [UInt8]?)] = []
            let s = try db.statement("SELECT \(RowQuery.blobs) FROM items ORDER BY label, class")
            defer { s.reset() }
            while try s.step() {
                try authenticate(s)
                let info = CredentialStore.info(s)
                var sealed: [UInt8]? = nil
                if !s.isNull(RowQuery.sealedKey) {
                    let aad = CredentialStore.aad(info.itemClass, info.label, leafDER: s.blob(RowQuery.leaf), chainDER: s.blob(RowQuery.chain))
                    guard let plain = try StoreCrypto.open(s.blob(RowQuery.sealedKey), key: dataKey, aad: aad) else {
                        throw MTLSError(.corrupt, "the sealed key of \"\(info.label)\" does not authenticate: the secret is not changed")
                    }
                    sealed = try StoreCrypto.seal(plain, key: newKey, aad: aad)
                }
                let tag = try newRows.tag(StoreRowAuthenticator.RowFields(
                    itemClass: Int64(info.itemClass.rawValue), label: info.label, subject: info.subject,
                    subjectCN: s.isNull(RowQuery.subjectCN) ? nil : s.text(RowQuery.subjectCN), issuer: info.issuer,
                    notAfter: s.int64(4), leafSHA256: info.leafSHA256, chainSHA256: s.text(6) ?? "", tokenURI: info.tokenURI,
                    generation: s.int64(RowQuery.generation)))
                updates.append((s.int64(RowQuery.id), tag, sealed))
            }
            s.reset()
            try checkComplete(itemClass: nil, seen: updates.count)
            for u in updates {
                try db.statement("UPDATE items SET mac = ?, sealed_key = ? WHERE id = ?")
                    .bind(.blob(u.mac), u.sealed.map { .blob($0) } ?? .null, .int(u.id)).run()
            }
            try writeSecretHeader(secret: secret, salt: salt, parameters: parameters, wrapped: wrapped)
            let meta = MetaRows(kind: secret.kind, kdfParameters: "\(parameters.logN),\(parameters.r),\(parameters.p)",
                                salt: salt, wrapped: wrapped, header: nil, headerMAC: nil)
            try commitIntegrity(meta: meta, auth: newHeader)
        }
        dataKey = newKey
        rowAuth = newRows
        headerAuth = newHeader
        openedWrapped = wrapped
        cache.removeAll()
    }
}
