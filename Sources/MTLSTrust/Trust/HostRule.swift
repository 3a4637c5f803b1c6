import FoundationEssentials

/// An SPKI pin: the SHA-256 of a certificate's DER SubjectPublicKeyInfo, written
/// `sha256/BASE64` (the form of RFC 7469 and of ``Certificate/spkiPin``).
public struct SPKIPin: Hashable, Sendable, CustomStringConvertible {
    /// The 32-byte digest.
    public let sha256: [UInt8]

    /// The forms a pin may be written in, for error messages.
    static let acceptedForms = "write it sha256/BASE64 (as `mtls cert show` prints it) or curl's sha256//BASE64, " +
        "BASE64 being the 44-character base64 of the SHA-256 of the certificate's SubjectPublicKeyInfo"

    /// Parses `sha256/BASE64`, or curl's `sha256//BASE64` (`--pinnedpubkey`): the one pin parser
    /// of the library, C and Python. Throws ``MTLSError/Code/invalidPolicy`` for anything else,
    /// naming the accepted forms.
    public init(_ text: String) throws {
        let t = trimmedASCII(text)
        let lower = t.lowercased()
        // A base64 digest may itself begin with "/": "sha256/" followed by 44 characters is
        // libmtls's form whatever its first character; curl's form has one "/" more.
        let count = t.utf8.count
        let prefix = !lower.hasPrefix("sha256/") ? 0 : (lower.hasPrefix("sha256//") && count == 8 + 44) ? 8 : 7
        guard prefix > 0 else {
            throw MTLSError(.invalidPolicy, "pin \(text) is not a SHA-256 SPKI pin: \(Self.acceptedForms)")
        }
        let b64 = String(t.dropFirst(prefix))
        // Exactly the 44-character base64 of 32 bytes (one trailing "="), nothing looser.
        guard b64.utf8.count == 44, b64.hasSuffix("="), !b64.dropLast().contains("="),
              let d = Data(base64Encoded: b64), d.count == 32 else {
            throw MTLSError(.invalidPolicy, "pin \(text) is not the base64 of a 32-byte SHA-256 digest: \(Self.acceptedForms)")
        }
        sha256 = Array(d)
    }

    /// The pin of a certificate's public key.
    public init(certificate: Certificate) { sha256 = certificate.spkiSHA256 }

    /// `sha256/BASE64`.
    public var description: String { "sha256/" + Data(sha256).base64EncodedString() }
}

/// The host a rule applies to: `name.example`, `*.example` (one more label), `**.example` (one
/// or more labels), an IP literal (`192.0.2.7`, `2001:db8::7`, `[2001:db8::7]`), each optionally
/// followed by `:port`. Names compare case-insensitively, IP addresses by their bytes.
///
/// An IPv6 address may carry a zone (`fe80::1%eth0`, `[fe80::1%2]:8443`): such a rule applies
/// only to peers reached on that link (the same interface by name or index) and beats the rule
/// for the address alone; a rule without a zone applies to the address on every link. A port
/// after an IPv6 address is written in brackets, `[::1]:8443`: a bare literal whose last group
/// could be read as a port (`::1:8443`, `2001:db8::1:443`: the text before the last colon is an
/// address and the last group is a decimal port) is refused as ambiguous, as is a zone
/// followed by `:port` without brackets. Bare literals where no such reading exists (`::1`,
/// `fe80::1`, a full eight-group address) stay valid.
public struct HostPattern: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Hashable, Sendable {
        case exact(String)
        case ip([UInt8], zone: String?)
        case oneLabel(String)   // suffix without the leading dot
        case anyDepth(String)
    }
    let kind: Kind
    /// The port the pattern is limited to, if any.
    public let port: Int?
    /// The pattern as written.
    public let text: String

    /// Parses a pattern. Throws ``MTLSError/Code/invalidPolicy`` for anything that is not a host
    /// name, a wildcard pattern or an IP literal, or for a bad port.
    public init(_ text: String) throws {
        self.text = text
        let trimmed = trimmedASCII(text)
        try Self.refuseAmbiguousPort(trimmed)
        let (hostPart, port) = try Self.splitPort(trimmed)
        self.port = port
        guard !hostPart.isEmpty else { throw MTLSError(.invalidPolicy, "empty host pattern") }
        if let scoped = IPAddress.scoped(hostPart) {  // any spelling of an address is that address
            kind = .ip(scoped.address, zone: scoped.zone)
        } else if hostPart.contains("%") {
            throw MTLSError(.invalidPolicy, "invalid host pattern: \(text) (a zone, %IFACE, follows only an IPv6 address and is an interface name or index)")
        } else if hostPart.hasPrefix("**.") {
            kind = .anyDepth(try Self.name(String(hostPart.dropFirst(3)), text))
        } else if hostPart.hasPrefix("*.") {
            kind = .oneLabel(try Self.name(String(hostPart.dropFirst(2)), text))
        } else {
            kind = .exact(try Self.name(hostPart, text))
        }
    }

    /// The pattern as it was written (`host`, `*.suffix`, `**.suffix`, an IP literal, with its
    /// `:port` if any).
    public var description: String { text }

    private static func name(_ s: String, _ whole: String) throws -> String {
        let n = s.lowercased().hasSuffix(".") ? String(s.lowercased().dropLast()) : s.lowercased()
        guard HostName.isValidReferenceName(n) else {
            throw MTLSError(.invalidPolicy, "invalid host pattern: \(whole)")
        }
        return n
    }

    /// Refuses an unbracketed IPv6 pattern that reads two ways: `::1:8443` is the address
    /// `::1:8443` and also `::1` on port 8443. It is ambiguous when the text before the last
    /// colon is itself an IPv6 address (with its zone, if any) and the last group is a decimal
    /// port (1–65535); `fe80::1`'s `fe80:` is no address and a full eight-group address leaves
    /// seven groups without `::`, so those read one way only. A zone followed by `:port` is
    /// refused the same way.
    static func refuseAmbiguousPort(_ s: String) throws {
        guard !s.hasPrefix("["), s.filter({ $0 == ":" }).count > 1, let last = s.lastIndex(of: ":") else { return }
        let head = String(s[..<last]), tail = s[s.index(after: last)...]
        let zoneWithPort = head.contains("%")
        guard zoneWithPort || (tail.allSatisfy(\.isASCII) && tail.allSatisfy(\.isNumber) && Int(tail).map { (1...65535).contains($0) } == true
                              && IPAddress.scoped(head) != nil) else { return }
        let other = zoneWithPort ? "" : ", or [\(s)] for the address \(s) on any port"
        throw MTLSError(.invalidPolicy,
                        "ambiguous host pattern \(s): write [\(head)]:\(tail) for port \(tail) of \(head)\(other) (a port after an IPv6 address goes after brackets)")
    }

    /// Splits `host:port`, `[v6]:port`, `[v6]`, or a bare IPv6 literal with the one splitter
    /// (`HostLiteral.split`); a malformed one is ``MTLSError/Code/invalidPolicy``.
    static func splitPort(_ s: String) throws -> (String, Int?) {
        do {
            let a = try HostLiteral.split(Substring(s))
            return (a.host, a.port.map(Int.init))
        } catch HostLiteral.Malformed.unclosedBracket {
            throw MTLSError(.invalidPolicy, "unterminated [ in \(s)")
        } catch {
            throw MTLSError(.invalidPolicy, "bad port in \(s)")
        }
    }

    /// How specific the pattern is; the highest matching one wins. Exact names and IPs beat
    /// wildcards, longer suffixes beat shorter ones, a port beats no port.
    var specificity: Int {
        let base: Int
        switch kind {
        case .ip(_, .some): base = 3_000_002  // the address on one link beats the address alone
        case .exact, .ip: base = 3_000_000
        case .oneLabel(let s): base = 2_000_000 + 1000 * s.split(separator: ".").count
        case .anyDepth(let s): base = 1_000_000 + 1000 * s.split(separator: ".").count
        }
        return base + (port == nil ? 0 : 1)
    }

    /// Whether the pattern covers `host` (already normalised: lowercase name without a trailing
    /// dot, or IP bytes, with the IPv6 zone apart) on `port`. A pattern without a zone covers the
    /// address on any link; one with a zone only that link.
    package func matches(name: String?, ip: [UInt8]?, zone: String? = nil, port: Int?) -> Bool {
        if let p = self.port, p != port { return false }
        switch kind {
        case .ip(let b, let z): return ip == b && (z == nil || IPAddress.sameZone(z, zone))
        case .exact(let n): return name == n
        case .oneLabel(let suffix):
            guard let name, name.hasSuffix("." + suffix) else { return false }
            return !name.dropLast(suffix.count + 1).contains(".")
        case .anyDepth(let suffix):
            guard let name else { return false }
            return name.hasSuffix("." + suffix) && name.count > suffix.count + 1
        }
    }
}

/// What happens once a rule's pins have expired.
public enum PinExpiryBehavior: String, Sendable {
    /// Pins are no longer checked (the chain and name checks still apply).
    case stopEnforcing = "stop_enforcing"
    /// Every evaluation under the rule fails with `pin_expired` until the policy is updated.
    case failClosed = "fail_closed"
}

/// Whether a rule's pin failures fail the evaluation or are only reported.
public enum PinEnforcement: String, Sendable {
    /// A pin failure makes the evaluation fail (`pin_mismatch`).
    case enforce
    /// The failure goes to the policy's report handler and the evaluation goes on.
    case reportOnly = "report_only"
}

/// A per-host override of the policy's defaults.
public struct HostRule: Sendable {
    /// The hosts the rule applies to.
    public var pattern: HostPattern
    /// Validate the certificate as this DNS name or IP address instead of the connected host
    /// (for connecting by IP to a server whose certificate names it).
    public var verifyAs: String?
    /// Skip the name check entirely (chain, EKU and pins still apply).
    public var skipNameCheck: Bool
    /// The rule's own anchors; nil uses the policy's.
    public var anchors: [Certificate]?
    /// Whether the system store is trusted as well as the anchors for this rule's peers; nil
    /// uses the policy's ``TrustPolicy/systemAnchors`` (by default: the rule's own anchors, when
    /// it has some, are the only ones).
    public var systemAnchors: Bool?
    /// Compatibility name of ``systemAnchors``, turned around (true: the anchors only).
    public var anchorsOnly: Bool? {
        get { systemAnchors.map { !$0 } } set { systemAnchors = newValue.map { !$0 } }
    }
    /// SPKI pins; one must match a certificate of the built chain (any depth).
    public var pins: [SPKIPin]
    /// When the pins stop being valid, if ever.
    public var pinsExpire: Date?
    /// What happens after ``pinsExpire``.
    public var afterExpiry: PinExpiryBehavior
    /// Enforce pin failures, or only report them.
    public var enforcement: PinEnforcement
    /// Revocation checking for peers under this rule, over the policy's (nil: the policy's).
    public var revocation: RevocationSettings? = nil
    /// Who may connect, for peers under this rule (``PeerAllowList``): a requirement of its own,
    /// on top of the policy's ``TrustPolicy/allow``. Empty: no restriction.
    public var allow = PeerAllowList()

    /// A rule for the peers `pattern` matches; each parameter sets the property of the same name
    /// (``pinsExpire`` nil: the pins never expire). The rule takes effect when added to a policy
    /// (``TrustPolicy/addHostRule(_:)``), which validates it.
    public init(pattern: HostPattern, verifyAs: String? = nil, skipNameCheck: Bool = false,
                anchors: [Certificate]? = nil, anchorsOnly: Bool? = nil, systemAnchors: Bool? = nil, pins: [SPKIPin] = [],
                pinsExpire: Date? = nil, afterExpiry: PinExpiryBehavior = .stopEnforcing,
                enforcement: PinEnforcement = .enforce) {
        self.pattern = pattern
        self.verifyAs = verifyAs
        self.skipNameCheck = skipNameCheck
        self.anchors = anchors
        self.systemAnchors = systemAnchors ?? anchorsOnly.map { !$0 }
        self.pins = pins
        self.pinsExpire = pinsExpire
        self.afterExpiry = afterExpiry
        self.enforcement = enforcement
    }

    /// Adds a pin unless the rule already has it (a repeated pin is no backup pin).
    public mutating func addPin(_ pin: SPKIPin) {
        if !pins.contains(pin) { pins.append(pin) }
    }

    /// Adds `anchor` to the rule's own anchors (the rule then has anchors of its own, in place of
    /// the policy's) and sets whether they are the only ones (`anchorsOnly`; nil: as the
    /// policy's ``TrustPolicy/systemAnchors`` says, by default the only ones).
    public mutating func addAnchor(_ anchor: Certificate, anchorsOnly: Bool?) {
        anchors = (anchors ?? []) + [anchor]
        self.anchorsOnly = anchorsOnly
    }

    /// Checks what a rule must not say: an empty or whitespace verify-as (which would silently
    /// turn the name check off), a verify-as that is neither a host name nor an IP address, or
    /// both a verify-as and skip_name_check. Throws ``MTLSError/Code/invalidPolicy`` naming the
    /// rule. The name check is off only where ``skipNameCheck`` says so.
    public func validate() throws {
        if let v = verifyAs {
            let t = trimmedASCII(v)
            guard !t.isEmpty else {
                throw MTLSError(.invalidPolicy, "host rule \(pattern.text): verify_as is empty (to turn the name check off, say skip_name_check: true)")
            }
            let bare = HostLiteral.unbracketed(t)
            guard t == v, IPAddress.scoped(bare) != nil || HostName.isValidReferenceName(bare) else {
                throw MTLSError(.invalidPolicy, "host rule \(pattern.text): verify_as \"\(v)\" is not a host name or IP address")
            }
            if skipNameCheck {
                throw MTLSError(.invalidPolicy, "host rule \(pattern.text): both verify_as and skip_name_check; say one")
            }
        }
        if let r = revocation {
            do { try r.validate() } catch let e as MTLSError {
                throw MTLSError(.invalidPolicy, "host rule \(pattern.text): \(e.message)")
            }
        }
    }

    /// Load-time warnings (a single distinct pin has no backup).
    public var warnings: [String] {
        Set(pins).count == 1
            ? ["host rule \(pattern.text): only one pin and no backup pin; a key change will lock clients out"]
            : []
    }
}

/// Host name syntax (RFC 1123 LDH labels) shared by patterns, reference names and SAN checks.
enum HostName {
    /// A name a client may connect to: LDH labels of 1–63 characters, no leading or trailing
    /// hyphen, 253 characters at most, not all-numeric at the top.
    static func isValidReferenceName(_ name: String) -> Bool {
        let n = name.hasSuffix(".") ? String(name.dropLast()) : name
        guard !n.isEmpty, n.utf8.count <= 253 else { return false }
        let labels = n.split(separator: ".", omittingEmptySubsequences: false)
        for l in labels where !isLDHLabel(Substring(l)) { return false }
        return true
    }

    static func isLDHLabel(_ l: Substring) -> Bool {
        guard !l.isEmpty, l.utf8.count <= 63, l.first != "-", l.last != "-" else { return false }
        return l.utf8.allSatisfy { c in
            (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c == 0x2d
        }
    }

    /// A DNS name as it may appear in a SAN: a reference name, optionally with `*` as the whole
    /// leftmost label.
    static func isValidSANName(_ name: String) -> Bool {
        if name.hasPrefix("*.") { return isValidReferenceName(String(name.dropFirst(2))) && !name.hasSuffix(".") }
        return isValidReferenceName(name) && !name.hasSuffix(".")
    }
}

/// `s` without leading and trailing ASCII spaces and tabs.
func trimmedASCII(_ s: String) -> String {
    var sub = Substring(s)
    while let f = sub.first, f == " " || f == "\t" || f == "\n" || f == "\r" { sub = sub.dropFirst() }
    while let l = sub.last, l == " " || l == "\t" || l == "\n" || l == "\r" { sub = sub.dropLast() }
    return String(sub)
}
