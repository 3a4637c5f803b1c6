import FoundationEssentials

// This file owns the store's whole-file integrity data, independent of SQLite: the
// authenticated header (schema version, "rows are authenticated", write counter, manifest root)
// and the manifest of every row's (class, label, generation), with their byte encodings.
// CredentialStore+Integrity.swift reads and writes them in the database.

/// Length-prefixed, unambiguous serialisation for MAC inputs and the header blob.
struct StoreEncoder {
    private(set) var bytes: [UInt8] = []

    init(domain: String) { bytes = Array(domain.utf8) + [0] }

    mutating func add(_ v: Int64) {
        withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func add(_ b: [UInt8]) {
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: b.count).bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: b)
    }

    mutating func add(_ s: String) {
        var s = s
        s.withUTF8 { u in
            withUnsafeBytes(of: UInt32(truncatingIfNeeded: u.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: u)
        }
    }

    mutating func reserve(_ n: Int) { bytes.reserveCapacity(n) }
}

/// Reads what ``StoreEncoder`` wrote; any short or malformed input is ``MTLSError/Code/corrupt``.
struct StoreDecoder {
    private let bytes: [UInt8]
    private var at: Int

    init(_ bytes: [UInt8], domain: String) throws {
        self.bytes = bytes
        let prefix = Array(domain.utf8) + [0]
        guard bytes.count >= prefix.count, Array(bytes[0..<prefix.count]) == prefix else {
            throw MTLSError(.corrupt, "the store header is tampered or damaged: it is not a libmtls header")
        }
        at = prefix.count
    }

    var atEnd: Bool { at == bytes.count }

    mutating func int64() throws -> Int64 {
        guard bytes.count - at >= 8 else { throw MTLSError(.corrupt, "the store header is tampered or damaged: it is truncated") }
        var v: Int64 = 0
        for i in 0..<8 { v = (v << 8) | Int64(bytes[at + i]) }
        at += 8
        return v
    }

    mutating func blob() throws -> [UInt8] {
        guard bytes.count - at >= 4 else { throw MTLSError(.corrupt, "the store header is tampered or damaged: it is truncated") }
        let n = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
        at += 4
        guard bytes.count - at >= n else { throw MTLSError(.corrupt, "the store header is tampered or damaged: it is truncated") }
        defer { at += n }
        return Array(bytes[at..<at + n])
    }
}

/// The store's authenticated header: stored in `meta` as `header` with its HMAC in
/// `header_mac`, under a key derived from the data key. The MAC also covers the secret header
/// (KDF kind and parameters, salt, wrapped data key), so none of them can be changed unnoticed.
struct StoreHeader: Equatable {
    static let domain = "libmtls-store/header/v1"
    /// Bit 0: every row carries a tag under the row key.
    static let rowsAuthenticated: Int64 = 1

    var schemaVersion: Int64
    var flags: Int64
    /// Incremented by every write transaction; never goes back.
    var counter: Int64
    /// How many rows the manifest lists.
    var count: Int64
    /// SHA-256 over the manifest's bucket digests, in bucket order.
    var root: [UInt8]

    var encoded: [UInt8] {
        var e = StoreEncoder(domain: Self.domain)
        e.add(schemaVersion); e.add(flags); e.add(counter); e.add(count); e.add(root)
        return e.bytes
    }

    init(schemaVersion: Int64, flags: Int64, counter: Int64, count: Int64, root: [UInt8]) {
        self.schemaVersion = schemaVersion
        self.flags = flags
        self.counter = counter
        self.count = count
        self.root = root
    }

    init(decoding bytes: [UInt8]) throws {
        var d = try StoreDecoder(bytes, domain: Self.domain)
        schemaVersion = try d.int64(); flags = try d.int64(); counter = try d.int64(); count = try d.int64(); root = try d.blob()
        guard d.atEnd, root.count == 32, counter >= 0, count >= 0 else {
            throw MTLSError(.corrupt, "the store header is tampered or damaged: its fields are malformed")
        }
    }

    /// What the header MAC covers: the header and the secret header beside it.
    static func macInput(header: [UInt8], kind: String, kdfParameters: String, salt: [UInt8], wrapped: [UInt8]) -> [UInt8] {
        var e = StoreEncoder(domain: "libmtls-store/header-mac-input/v1")
        e.add(header); e.add(kind); e.add(kdfParameters); e.add(salt); e.add(wrapped)
        return e.bytes
    }
}

/// A manifest entry's key: a row's class and label.
struct StoreManifestKey: Hashable {
    var itemClass: Int64
    var label: String
}

/// The set of (class, label, generation) of every row, split into ``bucketCount`` buckets by a
/// hash of the key so that a write rewrites one small bucket (about 100 entries, one database
/// page, at 100,000 rows), not the whole set. Each bucket is a blob in the `manifest` table with
/// its SHA-256 beside it; the header's root is a two-level hash of the digests (groups of
/// ``groupSize``), so the header MAC covers every entry. Buckets are decoded on demand, checked
/// against the verified digest, and kept while their digest is unchanged.
///
/// Not thread-safe: ``CredentialStore`` uses it under its lock.
struct StoreManifest {
    static let bucketCount = 1024
    /// Buckets per group: the root is the SHA-256 of the group digests, each the SHA-256 of its
    /// buckets' digests, so a write rehashes one group (1 KiB) and the root (1 KiB).
    static let groupSize = 32
    /// The digest of an empty bucket, which has no row in the `manifest` table.
    static let emptyDigest = Encoding.sha256(encode([:]))

    /// The verified header, nil until the first refresh (or after a failed write).
    var header: StoreHeader?
    /// The verified digest of each bucket. Set through ``setDigests(_:)``, which drops the
    /// decoded buckets whose digest changed.
    private(set) var digests: [[UInt8]] = []
    /// Decoded buckets, each matching `digests[i]` (nil: not decoded, or changed since).
    private var buckets: [[StoreManifestKey: Int64]?] = Array(repeating: nil, count: StoreManifest.bucketCount)
    /// Buckets changed by the current write transaction.
    private(set) var dirty: Set<Int> = []
    /// SQLite's data version of the snapshot the state was verified in.
    var dataVersion: UInt32?
    /// The highest write counter this handle has seen: a lower one later is a file rolled back
    /// under an open handle.
    var highestCounter: Int64 = -1

    /// The bucket of a key: FNV-1a over the class and the label (a partition, not a security
    /// boundary: an entry looked up in the wrong bucket is simply not listed).
    static func bucket(of key: StoreManifestKey) -> Int {
        var h: UInt32 = 2_166_136_261
        h = (h ^ UInt32(truncatingIfNeeded: key.itemClass)) &* 16_777_619
        for b in key.label.utf8 { h = (h ^ UInt32(b)) &* 16_777_619 }
        return Int(h % UInt32(bucketCount))
    }

    static func groupDigest(_ digests: [[UInt8]], _ g: Int) -> [UInt8] {
        var all: [UInt8] = []
        all.reserveCapacity(groupSize * 32)
        for d in digests[(g * groupSize)..<min((g + 1) * groupSize, digests.count)] { all.append(contentsOf: d) }
        return Encoding.sha256(all)
    }

    static func root(groups: [[UInt8]]) -> [UInt8] {
        var all: [UInt8] = []
        all.reserveCapacity(groups.count * 32)
        for d in groups { all.append(contentsOf: d) }
        return Encoding.sha256(all)
    }

    /// The root over `digests` (all ``bucketCount`` of them).
    static func root(_ digests: [[UInt8]]) -> [UInt8] {
        root(groups: (0..<(digests.count + groupSize - 1) / groupSize).map { groupDigest(digests, $0) })
    }

    /// The group digests of the verified `digests`, kept up to date by ``takeDirty()``.
    private(set) var groups: [[UInt8]] = []

    /// The root of the current digests (after ``takeDirty()``).
    var root: [UInt8] { Self.root(groups: groups) }

    /// A bucket's blob: each entry as class (8) ‖ label length (4) ‖ label ‖ generation (8), in
    /// no particular order (the digest is of the blob as stored).
    static func encode(_ entries: [StoreManifestKey: Int64]) -> [UInt8] {
        var e = StoreEncoder(domain: "libmtls-store/manifest-bucket/v1")
        e.reserve(64 + entries.count * 40)
        for (key, generation) in entries {
            e.add(key.itemClass); e.add(key.label); e.add(generation)
        }
        return e.bytes
    }

    static func decode(_ blob: [UInt8]) throws -> [StoreManifestKey: Int64] {
        var d = try StoreDecoder(blob, domain: "libmtls-store/manifest-bucket/v1")
        var out: [StoreManifestKey: Int64] = [:]
        while !d.atEnd {
            let cls = try d.int64()
            let label = String(decoding: try d.blob(), as: UTF8.self)
            out[StoreManifestKey(itemClass: cls, label: label)] = try d.int64()
        }
        return out
    }

    /// Replaces the verified digests, forgetting the decoded buckets that changed.
    mutating func setDigests(_ new: [[UInt8]]) {
        for i in 0..<Self.bucketCount where i >= digests.count || i >= new.count || digests[i] != new[i] { buckets[i] = nil }
        digests = new
        groups = (0..<(new.count + Self.groupSize - 1) / Self.groupSize).map { Self.groupDigest(new, $0) }
    }

    /// The decoded bucket `i` if it is cached (and so current).
    func cached(_ i: Int) -> [StoreManifestKey: Int64]? { buckets[i] }

    /// The generation the manifest lists for `key` in bucket `i`, when that bucket is decoded:
    /// `.some(nil)` for a key it does not list, nil when the bucket must be loaded first.
    func lookup(_ key: StoreManifestKey, in i: Int) -> Int64?? {
        guard let b = buckets[i] else { return nil }
        return .some(b[key])
    }

    /// Keeps a decoded bucket whose blob matched `digests[i]`.
    mutating func cache(_ i: Int, entries: [StoreManifestKey: Int64]) {
        buckets[i] = entries
    }

    /// Sets (or with nil removes) an entry of a loaded bucket; the caller loaded it first.
    mutating func set(_ key: StoreManifestKey, generation: Int64?, in i: Int) {
        guard buckets[i] != nil else { return }
        let had = buckets[i]?.updateValue(generation ?? 0, forKey: key) != nil
        if generation == nil { buckets[i]?.removeValue(forKey: key) }
        dirty.insert(i)
        if had && generation == nil { header?.count -= 1 }
        if !had && generation != nil { header?.count += 1 }
    }

    /// The new blob and digest of every dirty bucket; updates `digests` and clears `dirty`.
    mutating func takeDirty() -> [(bucket: Int, blob: [UInt8], digest: [UInt8])] {
        var out: [(Int, [UInt8], [UInt8])] = []
        for i in dirty.sorted() {
            guard let b = buckets[i], i < digests.count else { continue }
            let blob = Self.encode(b)
            let digest = Encoding.sha256(blob)
            digests[i] = digest
            out.append((i, blob, digest))
        }
        for g in Set(out.map { $0.0 / Self.groupSize }) where g < groups.count { groups[g] = Self.groupDigest(digests, g) }
        dirty.removeAll()
        return out
    }

    /// Forgets everything verified (after a failed write, whose changes SQLite rolled back).
    mutating func invalidate() {
        header = nil
        dataVersion = nil
        dirty.removeAll()
        digests = []
        groups = []
        buckets = Array(repeating: nil, count: Self.bucketCount)
    }
}
