import FoundationEssentials

/// Who may connect: allow-lists on the peer's certificate (issue 39), judged inside the one
/// trust decision (``TrustPolicy/evaluate(chain:peer:purpose:at:overrides:stapledOCSP:)``) after
/// the chain is trusted, for whichever peer the policy judges (clients on a listener, the server
/// on a client connection).
///
/// Semantics: a list with entries of several kinds is one list: the peer passes when **any one
/// entry of any kind** matches (entries are OR'ed, as ghostunnel's `--allow-*` flags are). Each
/// list in force is a requirement of its own, as sets of pins are: the selected host rule's, the
/// policy-wide one and the overrides' (the CLI's `--allow-*`) must each be passed.
///
/// Kinds and their matching:
/// - `cn`, `ou`: the subject's common name (the last CN) / any organizational unit. Compared
///   exactly (case-sensitive), in `.`-separated segments: `*` is one whole non-empty segment,
///   `**` any number of segments (zero or more).
/// - `dns`: any DNS subjectAltName, case-insensitive (a trailing dot ignored), in labels: `*` is
///   one whole label, `**` zero or more labels (`**.example.com` matches `example.com` and every
///   name below it). A `*` inside a label (`a*.example`) is refused at load.
/// - `uri`: any URI subjectAltName, as `scheme://authority/path` (SPIFFE IDs
///   `spiffe://trust-domain/ns/*/sa/**`). Scheme and authority are compared case-insensitively
///   and literally: a wildcard in the scheme or the authority (the trust domain) is refused at
///   load. The path is compared case-sensitively in `/`-separated segments, percent-encoding left
///   as it is (`%2F` is not `/`): `*` is one whole non-empty segment (never crossing a `/`), `**`
///   zero or more segments. A pattern or certificate URI with a query or fragment never matches
///   (patterns with one are refused).
/// - `spki`: an SPKI pin (`sha256/BASE64`, the form of ``SPKIPin``) of the peer's own key (the
///   leaf). Pins on any certificate of the chain are the policy's `pins`, a separate requirement.
/// - `issuer`: a CA of the built chain — the anchor it ends at or an intermediate on the way
///   (with OpenSSL's partial chains the chain ends at the first anchor it reaches, so listing a
///   root also covers chains through its intermediates only when they are not anchors
///   themselves: list the CA that issued the peers) — by its certificate's SHA-256, given as a
///   certificate or its SHA-256 fingerprint in hex (colons allowed). A chain of one certificate
///   (a pinned leaf) offers that certificate.
///
/// A refusal is reason ``TrustReason/Code/notAllowed`` naming each kind that was looked at and
/// what the certificate had.
public struct PeerAllowList: Sendable, Hashable {
    /// The kinds of entries; the raw value is the JSON key (`"allow": {"cn": [...]}`) and the
    /// CLI flag's suffix (`--allow-cn`).
    public enum Kind: String, Sendable, CaseIterable {
        /// Subject CN, subject OU, DNS SAN, URI SAN, SPKI pin, issuing CA.
        case cn, ou, dns, uri, spki, issuer

        /// The CLI flag that adds entries of this kind.
        public var flag: String { "--allow-\(rawValue)" }
    }

    /// One entry: its kind, its text as given, and its compiled form.
    public struct Entry: Sendable, Hashable, CustomStringConvertible {
        /// Which of the certificate's fields the entry is matched against.
        public let kind: Kind
        /// The pattern as given (for an issuer given as a certificate: its SHA-256 in hex).
        public let text: String
        let matcher: Matcher
        /// "KIND TEXT", as refusals and provenance name the entry.
        public var description: String { "\(kind.rawValue) \(text)" }
    }

    enum Segment: Hashable, Sendable {
        case literal(String)
        /// `*`: one whole non-empty segment.
        case one
        /// `**`: zero or more segments.
        case any
    }

    enum Matcher: Hashable, Sendable {
        /// `.`-separated segments (DNS names are compared lowercased, CN and OU as written).
        case dotted([Segment])
        /// `scheme://authority` lowercased, and the path's segments.
        case uri(prefix: String, path: [Segment])
        /// A SHA-256 digest (of the leaf's SPKI, or of the anchor certificate).
        case digest([UInt8])
    }

    /// The entries, in the order added.
    public private(set) var entries: [Entry] = []

    /// An empty list (it allows every peer the rest of the policy trusts).
    public init() {}

    /// A list with these entries, each validated (``add(_:_:)``).
    public init(_ entries: [(Kind, String)]) throws {
        for (k, t) in entries { try add(k, t) }
    }

    /// True when the list has no entries (and so restricts nothing).
    public var isEmpty: Bool { entries.isEmpty }

    /// The entries of one kind, as given.
    public func patterns(_ kind: Kind) -> [String] { entries.filter { $0.kind == kind }.map(\.text) }

    /// Adds an entry, validating the pattern. Throws ``MTLSError/Code/invalidPolicy`` naming the
    /// kind and the pattern for a malformed one (an empty pattern, a `*` inside a segment, a
    /// wildcard in a URI's scheme or authority, a pin or fingerprint that does not parse). An
    /// entry already in the list is not added twice. For `issuer`, `text` is the anchor's SHA-256
    /// fingerprint in hex or its certificate in PEM.
    public mutating func add(_ kind: Kind, _ text: String) throws {
        let m = try Self.compile(kind, text)
        let entry = Entry(kind: kind, text: kind == .issuer ? Self.hex(Self.digest(m)) : text, matcher: m)
        if !entries.contains(entry) { entries.append(entry) }
    }

    /// Adds an `issuer` entry: peers whose built chain passes through or ends at this CA certificate.
    public mutating func add(issuer: Certificate) {
        let entry = Entry(kind: .issuer, text: issuer.sha256Hex, matcher: .digest(issuer.sha256))
        if !entries.contains(entry) { entries.append(entry) }
    }

    /// Adds every entry of `other` (those not already here).
    public mutating func add(contentsOf other: PeerAllowList) {
        for e in other.entries where !entries.contains(e) { entries.append(e) }
    }

    /// What tells two lists apart (cache and session keys): each pattern JSON-quoted, so no
    /// pattern (a CN may hold a comma or a quote) can read as two.
    var cacheKey: String { entries.map { "\($0.kind.rawValue)=\(JSONText.quoted($0.text))" }.joined(separator: ",") }

    private static func digest(_ m: Matcher) -> [UInt8] {
        if case .digest(let d) = m { return d }
        return []
    }

    private static func hex(_ b: [UInt8]) -> String { Encoding.hex(b) }

    static func invalid(_ kind: Kind, _ text: String, _ why: String) -> MTLSError {
        MTLSError(.invalidPolicy, "allow \(kind.rawValue) pattern \"\(text)\": \(why)")
    }

    /// The segments of `parts`, each a literal, `*` or `**`; a `*` inside a segment is refused.
    private static func segments(_ parts: [Substring], _ kind: Kind, _ text: String, literalOK: (Substring) -> Bool) throws -> [Segment] {
        try parts.map { p in
            if p == "*" { return .one }
            if p == "**" { return .any }
            if p.contains("*") { throw invalid(kind, text, "a wildcard must be a whole segment (* for one, ** for any number)") }
            guard literalOK(p) else { throw invalid(kind, text, "\"\(p)\" is not allowed here") }
            return .literal(String(p))
        }
    }

    static func compile(_ kind: Kind, _ text: String) throws -> Matcher {
        guard !text.isEmpty else { throw invalid(kind, text, "empty") }
        guard !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) else {
            throw invalid(kind, text, "control characters")
        }
        switch kind {
        case .cn, .ou:
            return .dotted(try segments(text.split(separator: ".", omittingEmptySubsequences: false), kind, text) { _ in true })
        case .dns:
            var t = text.lowercased()
            if t.hasSuffix(".") { t.removeLast() }
            let labels = t.split(separator: ".", omittingEmptySubsequences: false)
            let segs = try segments(labels, kind, text) { l in
                !l.isEmpty && l.utf8.count <= 63 && l.utf8.allSatisfy { c in
                    (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c == 0x2d || c == 0x5f
                }
            }
            return .dotted(segs)
        case .uri:
            guard let u = URIParts(text) else {
                throw invalid(kind, text, "a URI pattern is scheme://authority/path (spiffe://trust-domain/path)")
            }
            let schemeOK = u.scheme.utf8.allSatisfy { c in
                (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c == 0x2b || c == 0x2d || c == 0x2e
            }
            guard schemeOK else { throw invalid(kind, text, "the scheme must be letters, digits, +, - or . (no wildcard)") }
            guard !u.hasQueryOrFragment else { throw invalid(kind, text, "no query or fragment: patterns match scheme://authority/path") }
            guard !u.authority.isEmpty else { throw invalid(kind, text, "no authority (trust domain) after ://") }
            guard !u.authority.contains("*") else {
                throw invalid(kind, text, "a wildcard in the authority (trust domain) is not allowed: list each trust domain")
            }
            let segs = try segments(u.path, kind, text) { _ in true }
            return .uri(prefix: u.prefix, path: segs)
        case .spki:
            do { return .digest(try SPKIPin(text).sha256) } catch let e as MTLSError { throw invalid(kind, text, e.message) }
        case .issuer:
            if text.contains("-----BEGIN") {
                do {
                    let certs = try Certificate.parseAll(Array(text.utf8))
                    guard certs.count == 1 else { throw invalid(kind, "PEM", "give one certificate per entry") }
                    return .digest(certs[0].sha256)
                } catch let e as MTLSError where e.code != .invalidPolicy { throw invalid(kind, "PEM", e.message) }
            }
            var h = text.lowercased().filter { $0 != ":" }
            if h.hasPrefix("sha256/") { h = String(h.dropFirst(7)) }
            guard h.utf8.count == 64, h.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
                throw invalid(kind, text, "an issuer is the anchor certificate (PEM, or a file in policy files and on the command line) or its SHA-256 fingerprint in hex")
            }
            var bytes: [UInt8] = []
            var i = h.startIndex
            while i < h.endIndex {
                let j = h.index(i, offsetBy: 2)
                bytes.append(UInt8(h[i..<j], radix: 16) ?? 0)
                i = j
            }
            return .digest(bytes)
        }
    }

    /// Whether `segments` matches `parts` (`*` one non-empty part, `**` zero or more), in time
    /// proportional to their product whatever the pattern (a peer's certificate may carry a
    /// long path; no backtracking).
    static func match(_ segments: ArraySlice<Segment>, _ parts: ArraySlice<Substring>) -> Bool {
        let segs = Array(segments), ps = Array(parts)
        // can[j]: the segments so far match the first j parts.
        var can = [Bool](repeating: false, count: ps.count + 1)
        can[0] = true
        for seg in segs {
            var next = [Bool](repeating: false, count: ps.count + 1)
            switch seg {
            case .any:
                var reached = false
                for j in 0...ps.count {
                    reached = reached || can[j]
                    next[j] = reached
                }
            case .one:
                for j in 0..<ps.count where can[j] && !ps[j].isEmpty { next[j + 1] = true }
            case .literal(let l):
                for j in 0..<ps.count where can[j] && ps[j] == l { next[j + 1] = true }
            }
            can = next
        }
        return can[ps.count]
    }

    /// What a certificate offers to the entries of each kind.
    struct Offer {
        let cn: String?
        let ous: [String]
        let dns: [String]
        let uris: [String]
        let spki: [UInt8]
        /// The SHA-256 of each CA certificate of the built chain (leaf excluded), anchor last.
        let cas: [[UInt8]]
        /// Their subjects, for messages.
        let caNames: [String]
    }
}

/// A certificate's offer: its CN, OUs, DNS and URI SANs, its key, and the CAs it chains through.
extension PeerAllowList.Offer {
    /// `built`: the chain OpenSSL built, leaf first, ending at the anchor.
    init(leaf: Certificate, built: [Certificate]) {
        cn = leaf.commonName
        ous = leaf.organizationalUnits
        var d: [String] = [], u: [String] = []
        for n in leaf.subjectAltNames {
            switch n {
            case .dns(let v): d.append(v)
            case .uri(let v): u.append(v)
            default: break
            }
        }
        dns = d
        uris = u
        spki = leaf.spkiSHA256
        let cas = built.count > 1 ? Array(built.dropFirst()) : built
        self.cas = cas.map(\.sha256)
        caNames = cas.map(\.subjectSummary)
    }
}

extension PeerAllowList {
    static func matches(_ e: Entry, _ o: Offer) -> Bool {
        switch (e.kind, e.matcher) {
        case (.cn, .dotted(let s)):
            guard let cn = o.cn else { return false }
            return match(s[...], cn.split(separator: ".", omittingEmptySubsequences: false)[...])
        case (.ou, .dotted(let s)):
            return o.ous.contains { match(s[...], $0.split(separator: ".", omittingEmptySubsequences: false)[...]) }
        case (.dns, .dotted(let s)):
            return o.dns.contains { name in
                var n = name.lowercased()
                if n.hasSuffix(".") { n.removeLast() }
                return match(s[...], n.split(separator: ".", omittingEmptySubsequences: false)[...])
            }
        case (.uri, .uri(let prefix, let path)):
            return o.uris.contains { (uri: String) -> Bool in
                guard let u = URIParts(uri), !u.hasQueryOrFragment, u.prefix == prefix else { return false }
                return match(path[...], u.path[...])
            }
        case (.spki, .digest(let d)): return o.spki == d
        case (.issuer, .digest(let d)): return o.cas.contains(d)
        default: return false
        }
    }

    /// The first entry the peer matches, or nil.
    func firstMatch(leaf: Certificate, built: [Certificate]) -> Entry? {
        let offer = Offer(leaf: leaf, built: built)
        return entries.first { Self.matches($0, offer) }
    }

    /// Why no entry matched: for each kind in the list, what the certificate had.
    func refusal(leaf: Certificate, built: [Certificate], role: String, whose: String) -> String {
        let o = Offer(leaf: leaf, built: built)
        func list(_ l: [String]) -> String { "[" + l.prefix(8).joined(separator: ", ") + (l.count > 8 ? ", ..." : "") + "]" }
        var parts: [String] = []
        for kind in Kind.allCases where entries.contains(where: { $0.kind == kind }) {
            let flag = kind.flag
            switch kind {
            case .cn: parts.append(o.cn.map { "CN \"\($0)\" matches no \(flag)" } ?? "no CN to match \(flag)")
            case .ou: parts.append("OU \(list(o.ous.map { "\"\($0)\"" })) match no \(flag)")
            case .dns: parts.append("DNS SANs \(list(o.dns)) match no \(flag)")
            case .uri: parts.append("URI SANs \(list(o.uris)) match no \(flag)")
            case .spki: parts.append("key \(SPKIPin(certificate: leaf)) matches no \(flag)")
            case .issuer:
                let anchor = o.cas.last.map { "anchor \"\(o.caNames.last ?? "")\" (sha256 \(Self.hex($0)))" } ?? "no anchor"
                let between = o.caNames.dropLast().map { "\"\($0)\"" }
                parts.append(anchor + (between.isEmpty ? " matches" : " and intermediates [\(between.joined(separator: ", "))] match") + " no \(flag)")
            }
        }
        return "\(role) certificate is not allowed by \(whose): " + parts.joined(separator: "; ")
            + " (a peer passes with any one entry of any kind)"
    }
}

/// A URI cut as the allow-list compares it: `scheme://authority`, then the path's segments.
struct URIParts {
    let scheme: Substring
    let authority: Substring
    /// The segments after the authority's `/` (none when there is no `/`).
    let path: [Substring]
    let hasQueryOrFragment: Bool
    /// `scheme://authority`, lowercased.
    var prefix: String { (String(scheme) + "://" + String(authority)).lowercased() }

    init?(_ text: String) {
        guard let sep = text.firstRange(of: "://"), sep.lowerBound != text.startIndex else { return nil }
        scheme = text[..<sep.lowerBound]
        let rest = text[sep.upperBound...]
        hasQueryOrFragment = rest.contains("?") || rest.contains("#")
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        authority = rest[..<slash]
        path = slash == rest.endIndex ? [] : rest[rest.index(after: slash)...].split(separator: "/", omittingEmptySubsequences: false)
    }
}

/// One allow-list in force for an evaluation, and who gave it.
struct AllowRequirement {
    let source: TrustProvenance.Source
    let list: PeerAllowList
    let ruleText: String?

    /// Whose list it is, for messages.
    var whose: String {
        switch source {
        case .rule: return "the allow-list of host rule \(ruleText ?? "")"
        case .override: return "the allow-list given for this connection, listener, SSL_CTX or call (--allow-*)"
        default: return "the policy's allow-list (\"allow\")"
        }
    }
}
