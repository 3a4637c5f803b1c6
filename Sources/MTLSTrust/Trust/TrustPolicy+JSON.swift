import FoundationEssentials

/// A JSON value, for reading policy files strictly (unknown keys are errors, not ignored).
package enum JSONValue: Decodable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    package init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let n = try? c.decode(Double.self) { self = .number(n) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    /// Deepest nesting a policy file may use; the format itself needs 4.
    package static let maximumDepth = 32

    /// The deepest nesting of arrays and objects in `bytes`, brackets inside strings not
    /// counted. Stops counting once past ``maximumDepth``; malformed text is the decoder's to refuse.
    package static func nestingDepth(_ bytes: [UInt8]) -> Int {
        var depth = 0, deepest = 0, inString = false, escaped = false
        for b in bytes {
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true } else if b == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch b {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
                if deepest > maximumDepth { return deepest }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth = max(0, depth - 1)
            default: break
            }
        }
        return deepest
    }
}

/// Reads the policy file format documented in README.md ("Trust policies").
struct PolicyFileReader {
    /// Relative certificate and CRL paths are resolved against this directory.
    let baseDirectory: String?
    /// The files whose contents the policy took in as it was read (anchor and CRL files), in
    /// the order read: a followed policy file is read again when one of them changes.
    final class FilesRead { var paths: [String] = [] }
    let filesRead = FilesRead()

    func error(_ m: String) -> MTLSError { MTLSError(.invalidPolicy, "policy: \(m)") }

    func object(_ v: JSONValue, _ what: String, allowed: Set<String>) throws -> [String: JSONValue] {
        guard case .object(let o) = v else { throw error("\(what) must be an object") }
        if let bad = o.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw error("unknown key \"\(bad)\" in \(what)")
        }
        return o
    }
    func string(_ v: JSONValue?, _ key: String) throws -> String? {
        switch v {
        case nil, .null?: return nil
        case .string(let s)?: return s
        default: throw error("\(key) must be a string")
        }
    }
    func bool(_ v: JSONValue?, _ key: String) throws -> Bool? {
        switch v {
        case nil, .null?: return nil
        case .bool(let b)?: return b
        default: throw error("\(key) must be true or false")
        }
    }
    func int(_ v: JSONValue?, _ key: String) throws -> Int? {
        switch v {
        case nil, .null?: return nil
        case .number(let n)? where n == n.rounded() && n >= 0 && n < 1e9: return Int(n)
        default: throw error("\(key) must be a non-negative integer")
        }
    }
    func strings(_ v: JSONValue?, _ key: String) throws -> [String]? {
        switch v {
        case nil, .null?: return nil
        case .array(let a)?: return try a.map { try string($0, key) ?? "" }
        case .string(let s)?: return [s]
        default: throw error("\(key) must be a list of strings")
        }
    }
    func date(_ v: JSONValue?, _ key: String) throws -> Date? {
        guard let s = try string(v, key) else { return nil }
        return try parseRFC3339(s, key)
    }
    func parseRFC3339(_ s: String, _ key: String) throws -> Date {
        if let d = try? Date.ISO8601FormatStyle().parse(s) { return d }
        if let d = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(s) { return d }
        throw error("\(key) is not an RFC 3339 time: \(s)")
    }
    func path(_ p: String) -> String {
        guard let baseDirectory, !p.hasPrefix("/") else { return p }
        return baseDirectory + "/" + p
    }
    /// The bytes of the file `p` names, noted as a file whose contents the policy takes in. Only
    /// a regular file is read (a FIFO put in its place fails at once): a followed policy is read
    /// again on the library's one watcher thread when such a file changes, and must never wait.
    func contents(_ p: String) throws -> [UInt8] {
        let full = path(p)
        filesRead.paths.append(full)
        return try FileIO.readRegularFile(full)
    }
    /// Anchors: file paths or inline PEM.
    func certificates(_ v: JSONValue?, _ key: String) throws -> [Certificate]? {
        guard let list = try strings(v, key) else { return nil }
        return try list.flatMap { item -> [Certificate] in
            do {
                if item.contains("-----BEGIN") { return try Certificate.parseAll(Array(item.utf8)) }
                return try Certificate.parseAll(contents(item))
            } catch let e as MTLSError {
                throw error("\(key): \(e.message)")
            }
        }
    }

    static let policyKeys: Set<String> = [
        "version", "anchors", "anchors_only", "system_ca_file", "system_ca_dir", "purpose", "name_check",
        "min_rsa_bits", "min_ec_bits", "banned_signature_digests", "crls", "crl_check_all", "time",
        "max_chain_depth", "hosts", "system_anchors_for_clients", "pins", "verify_as", "revocation", "system_anchors",
        "allow",
    ]
    static let ruleKeys: Set<String> = [
        "host", "verify_as", "skip_name_check", "anchors", "anchors_only", "pins", "pins_expire", "after_expiry",
        "enforcement", "revocation", "system_anchors", "allow",
    ]
    static let revocationKeys: Set<String> = ["mode", "sources"]
    static let policyRevocationKeys: Set<String> = ["mode", "sources", "max_bytes", "timeout_ms", "cache_dir", "max_age_seconds"]

    /// `{"mode": "off"|"soft"|"hard", "sources": ["crl", "ocsp"]}` (sources default to ["crl"]).
    func revocation(_ o: [String: JSONValue], _ what: String) throws -> RevocationSettings {
        guard let m = try string(o["mode"], "\(what).mode") else { throw error("\(what) needs a \"mode\" (off, soft, hard)") }
        do {
            var r = RevocationSettings(mode: try RevocationSettings.mode(m))
            if let list = try strings(o["sources"], "\(what).sources") {
                r.sources = try list.map { try RevocationSettings.source($0) }
            }
            try r.validate()
            return r
        } catch let e as MTLSError { throw error("\(what): \(e.message)") }
    }

    /// `"allow": {"cn": [...], "ou": [...], "dns": [...], "uri": [...], "spki": [...], "issuer": [...]}`
    /// (each a list of patterns, or one string): who may connect (``PeerAllowList``). An issuer is
    /// the anchor's SHA-256 fingerprint in hex, its certificate in PEM, or a certificate file.
    func allow(_ v: JSONValue, _ what: String) throws -> PeerAllowList {
        let o = try object(v, what, allowed: Set(PeerAllowList.Kind.allCases.map(\.rawValue)))
        var list = PeerAllowList()
        for kind in PeerAllowList.Kind.allCases {
            for item in try strings(o[kind.rawValue], "\(what).\(kind.rawValue)") ?? [] {
                do {
                    if kind == .issuer, !item.contains("-----BEGIN"), (try? PeerAllowList.compile(.issuer, item)) == nil {
                        let certs = try Certificate.parseAll(contents(item))
                        for c in certs { list.add(issuer: c) }
                    } else {
                        try list.add(kind, item)
                    }
                } catch let e as MTLSError { throw error("\(what).\(kind.rawValue): \(e.message)") }
            }
        }
        return list
    }

    /// `"system_anchors": bool` (true: the system store as well as the anchors), or its old
    /// spelling `"anchors_only"` turned around; both, saying opposite things, are an error.
    func systemAnchors(_ o: [String: JSONValue], _ what: String) throws -> Bool? {
        let system = try bool(o["system_anchors"], "system_anchors")
        let only = try bool(o["anchors_only"], "anchors_only")
        if let system, let only, system == only {
            throw error("\(what) says both system_anchors \(system) and anchors_only \(only); give system_anchors only")
        }
        return system ?? only.map { !$0 }
    }

    func read(_ root: JSONValue) throws -> TrustPolicy {
        let o = try object(root, "the policy", allowed: Self.policyKeys)
        if let v = try int(o["version"], "version"), v != 1 { throw error("unsupported version \(v) (this libmtls reads 1)") }
        let p = TrustPolicy()
        if let a = try certificates(o["anchors"], "anchors") { p.anchors = a }
        p.systemAnchors = try systemAnchors(o, "the policy")
        if let f = try string(o["system_ca_file"], "system_ca_file") { p.systemCAFile = path(f) }
        if let d = try string(o["system_ca_dir"], "system_ca_dir") { p.systemCADirectory = path(d) }
        if let s = try string(o["purpose"], "purpose") {
            guard let v = TrustPurpose(rawValue: s) else { throw error("purpose must be \"server\" or \"client\"") }
            p.purpose = v
        }
        if let s = try string(o["name_check"], "name_check") {
            guard let v = NameCheck(rawValue: s) else { throw error("name_check must be \"ssl\" or \"none\"") }
            p.nameCheck = v
        }
        if let n = try int(o["min_rsa_bits"], "min_rsa_bits") { p.minimumRSABits = n }
        if let n = try int(o["min_ec_bits"], "min_ec_bits") { p.minimumECBits = n }
        if let l = try strings(o["banned_signature_digests"], "banned_signature_digests") { p.bannedSignatureDigests = Set(l) }
        if let l = try strings(o["crls"], "crls") {
            p.crls = try l.flatMap { f -> [RevocationList] in
                do { return try RevocationList.parseAll(contents(f), path: path(f)) } catch let e as MTLSError { throw error("crls: \(e.message)") }
            }
        }
        if let b = try bool(o["crl_check_all"], "crl_check_all") { p.checkCRLsForWholeChain = b }
        if let t = try date(o["time"], "time") { p.time = t }
        if let d = try int(o["max_chain_depth"], "max_chain_depth") { p.maxChainDepth = d }
        if let b = try bool(o["system_anchors_for_clients"], "system_anchors_for_clients") { p.systemAnchorsForClients = b }
        // Policy-wide pins and verify-as: on top of the selected host rule, for every peer.
        if let pins = try strings(o["pins"], "pins") {
            do { p.pins = try pins.map { try SPKIPin($0) } } catch let e as MTLSError { throw error("pins: \(e.message)") }
        }
        if let v = try string(o["verify_as"], "verify_as") {
            guard VerifyAsName.isValid(v) else {
                throw error("verify_as \"\(v)\" is not a host name or IP address (to turn the name check off, say name_check: \"none\")")
            }
            p.verifyAs = v
        }
        if let v = o["allow"] { p.allow = try allow(v, "allow") }
        if let v = o["revocation"] {
            let r = try object(v, "revocation", allowed: Self.policyRevocationKeys)
            p.revocation = try revocation(r, "revocation")
            var f = RevocationFetchOptions()
            if let n = try int(r["max_bytes"], "revocation.max_bytes") { f.maxBytes = n }
            if let n = try int(r["timeout_ms"], "revocation.timeout_ms") { f.timeout = Double(n) / 1000 }
            if let d = try string(r["cache_dir"], "revocation.cache_dir") { f.cacheDirectory = path(d) }
            if let n = try int(r["max_age_seconds"], "revocation.max_age_seconds") { f.maxAge = TimeInterval(n) }
            do { try f.validate() } catch let e as MTLSError { throw error("revocation: \(e.message)") }
            p.revocationFetch = f
        }
        if let hosts = o["hosts"] {
            guard case .array(let list) = hosts else { throw error("hosts must be a list") }
            var rules: [HostRule] = []
            for (i, h) in list.enumerated() {
                let r = try object(h, "hosts[\(i)]", allowed: Self.ruleKeys)
                guard let pattern = try string(r["host"], "host") else { throw error("hosts[\(i)] has no \"host\"") }
                let parsedPattern: HostPattern
                do { parsedPattern = try HostPattern(pattern) } catch let e as MTLSError { throw error("hosts[\(i)]: \(e.message)") }
                var rule = HostRule(pattern: parsedPattern)
                rule.verifyAs = try string(r["verify_as"], "verify_as")
                rule.skipNameCheck = try bool(r["skip_name_check"], "skip_name_check") ?? false
                rule.anchors = try certificates(r["anchors"], "hosts[\(i)].anchors")
                rule.systemAnchors = try systemAnchors(r, "hosts[\(i)]")
                do {
                    rule.pins = try (strings(r["pins"], "pins") ?? []).map { try SPKIPin($0) }
                } catch let e as MTLSError { throw error("host rule \(pattern): \(e.message)") }
                rule.pinsExpire = try date(r["pins_expire"], "pins_expire")
                if let s = try string(r["after_expiry"], "after_expiry") {
                    guard let v = PinExpiryBehavior(rawValue: s) else { throw error("after_expiry must be \"stop_enforcing\" or \"fail_closed\"") }
                    rule.afterExpiry = v
                }
                if let s = try string(r["enforcement"], "enforcement") {
                    guard let v = PinEnforcement(rawValue: s) else { throw error("enforcement must be \"enforce\" or \"report_only\"") }
                    rule.enforcement = v
                }
                if let v = r["revocation"] {
                    rule.revocation = try revocation(try object(v, "hosts[\(i)].revocation", allowed: Self.revocationKeys),
                                                     "hosts[\(i)].revocation")
                }
                if let v = r["allow"] { rule.allow = try allow(v, "hosts[\(i)].allow") }
                do { try rule.validate() } catch let e as MTLSError { throw error("hosts[\(i)]: \(e.message)") }
                if rules.contains(where: { $0.pattern.text.lowercased() == pattern.lowercased() }) {
                    throw error("host \(pattern) appears twice")
                }
                rules.append(rule)
            }
            p.hostRules = rules
        }
        return p
    }
}

extension TrustPolicy {
    /// Reads a policy from JSON text (format in README.md, "Trust policies"). Relative file
    /// names are resolved against `baseDirectory` (the current directory when nil). Throws
    /// ``MTLSError/Code/invalidPolicy`` with the offending key for anything malformed.
    public convenience init(json: [UInt8], baseDirectory: String? = nil) throws {
        let (read, _) = try TrustPolicy.parse(json: json, baseDirectory: baseDirectory)
        self.init()
        copySettings(from: read)
    }

    /// The policy `json` says, and the files it took in (anchor and CRL files), for
    /// ``init(json:baseDirectory:)`` and a followed file.
    private static func parse(json: [UInt8], baseDirectory: String?) throws -> (TrustPolicy, [String]) {
        // JSON is UTF-8 (RFC 8259 §8.1); the decoder would also guess UTF-16/32, which the
        // depth count below could not follow.
        guard !json.contains(0), String(validating: json, as: UTF8.self) != nil else {
            throw MTLSError(.invalidPolicy, "policy: not UTF-8 text")
        }
        // The decoder recurses once per nesting level: a file of a few kilobytes of "[" would
        // exhaust the stack and kill the host (found by fuzz_policy). A policy is 4 levels deep.
        guard JSONValue.nestingDepth(json) <= JSONValue.maximumDepth else {
            throw MTLSError(.invalidPolicy, "policy: nested more than \(JSONValue.maximumDepth) levels deep")
        }
        let root: JSONValue
        do { root = try JSONDecoder().decode(JSONValue.self, from: Data(json)) } catch {
            throw MTLSError(.invalidPolicy, "policy: not valid JSON")
        }
        let reader = PolicyFileReader(baseDirectory: baseDirectory)
        let read = try reader.read(root)
        return (read, reader.filesRead.paths)
    }

    /// Reads a policy file; relative paths in it are resolved against the file's directory.
    public static func load(path: String) throws -> TrustPolicy {
        try load(bytes: try FileIO.read(path), path: path)
    }

    /// A policy file's bytes, already read from `path` (relative paths in it are resolved
    /// against the file's directory): what a followed file compares and parses.
    static func load(bytes: [UInt8], path: String) throws -> TrustPolicy {
        try loadNamingFiles(bytes: bytes, path: path).policy
    }

    /// ``load(bytes:path:)``, with the files the policy took in (anchor and CRL files).
    package static func loadNamingFiles(bytes: [UInt8], path: String) throws -> (policy: TrustPolicy, files: [String]) {
        let dir: String? = path.lastIndex(of: "/").map { String(path[..<$0]) }
        let (read, files) = try parse(json: bytes, baseDirectory: dir.map { $0.isEmpty ? "/" : $0 })
        let policy = TrustPolicy()
        policy.copySettings(from: read)
        return (policy, files)
    }
}
