import FoundationEssentials

/// The peer an evaluation is about, as the application reached it: the host it named (a DNS
/// name or an IP literal), the port, the SNI it sent, and the name the certificate is validated
/// as. Host rules are chosen by ``host`` and ``port`` (never by ``verifyAs``); ``verifyAs`` only
/// changes the name that is checked.
public struct TrustPeer: Hashable, Sendable, CustomStringConvertible {
    /// The host as the application named it: a DNS name or an IP literal, without a port or
    /// brackets. An address is kept in its canonical text, as the socket reaches it: `127.1`,
    /// `0177.0.0.1` or `2130706433` is `127.0.0.1`, `::ffff:10.0.0.5` is `10.0.0.5` — so a rule
    /// or pin for the address holds however the application spelt it. nil: no host (host rules
    /// do not apply).
    public var host: String?
    /// The IPv6 zone (scope) the host was named with (`eth0` of `fe80::1%eth0`, `1` of `::1%1`),
    /// kept apart from ``host`` so the rules for the address apply; a rule that names a zone
    /// applies only to that zone. A `%` in a host that is not an IPv6 literal with a valid zone
    /// stays in ``host``: such a host matches no rule and is `invalid_host` under a policy with
    /// host rules.
    public var zone: String?
    /// The port connected to; nil when unknown (then only rules without a port match).
    public var port: Int?
    /// The SNI sent, if any (informational: it selects nothing).
    public var sni: String?
    /// The name or IP the certificate must carry instead of ``host``.
    public var verifyAs: String?

    /// A peer. `host` may be bracketed (`[::1]`) and may carry an IPv6 zone (`fe80::1%eth0`,
    /// kept apart in ``zone``); an address is kept in its canonical text; an empty host is no
    /// host, a port of 0 or less no port.
    public init(host: String? = nil, port: Int? = nil, sni: String? = nil, verifyAs: String? = nil) {
        self.init(kept: TrustPeer.kept(host), port: port, sni: sni, verifyAs: verifyAs)
    }

    /// A peer whose host ``kept(_:)`` read already.
    package init(kept: KeptHost, port: Int?, sni: String?, verifyAs: String?) {
        host = kept.host
        zone = kept.zone
        self.port = port.flatMap { $0 > 0 ? $0 : nil }
        self.sni = sni
        self.verifyAs = verifyAs
    }

    /// No peer name: no host, port, SNI or verify-as (a server's client), made once.
    package static let none = TrustPeer(kept: KeptHost(host: nil, zone: nil, isAddress: false), port: nil, sni: nil, verifyAs: nil)

    /// A host as a peer keeps it, and whether it is an IP address.
    package struct KeptHost: Sendable {
        package var host: String?
        package var zone: String?
        /// The host is an IPv4 or IPv6 address (a client sends no SNI for one).
        package var isAddress: Bool
    }

    /// The one reading of a peer's host (see ``host`` and ``zone``): brackets removed, an
    /// address in its canonical text with its zone apart, an empty host none. A client connection
    /// reads its host once, here, for its rule and its SNI both (issue 40).
    package static func kept(_ host: String?) -> KeptHost {
        guard let h = host.map(HostLiteral.unbracketed), !h.isEmpty else { return KeptHost(host: nil, zone: nil, isAddress: false) }
        if let scoped = IPAddress.scoped(h), let text = IPAddress.text(scoped.address) {
            return KeptHost(host: text, zone: scoped.zone, isAddress: true)
        }
        return KeptHost(host: h, zone: nil, isAddress: false)
    }

    /// Reads `host`, `host:port`, `[v6]:port`, `[v6]` or a bare IPv6 literal (the text form
    /// `mtls verify --host` and ``TrustPolicy/evaluate(chain:host:purpose:at:overrides:)`` take).
    public init(hostText: String?) {
        guard let t = hostText, !t.isEmpty else { self.init(); return }
        let split = try? HostLiteral.split(Substring(t))
        self.init(host: split?.host ?? t, port: split?.port.map(Int.init))
    }

    /// A peer an application names for its own `SSL` or `SSL_CTX` (``SSLContextConfiguration``'s
    /// `setPeer`): the host is required and a verify-as, when given, is a name, never empty.
    /// Throws ``MTLSError/Code/invalidArgument`` otherwise.
    public static func named(host: String, port: Int?, verifyAs: String?) throws -> TrustPeer {
        guard !host.isEmpty else { throw MTLSError(.invalidArgument, "host must not be empty") }
        if let v = verifyAs, v.isEmpty { throw MTLSError(.invalidArgument, "verify_as must be NULL (the host) or a name, not empty") }
        return TrustPeer(host: host, port: port, verifyAs: verifyAs)
    }

    /// Splits a `HOST:PORT` target (`[v6]:PORT` for an IPv6 address, `[v6%zone]:PORT` with a
    /// zone), the form `mtls connect` takes, with the one splitter (`HostLiteral.split`), or an `https://` URL
    /// (``URLAuthority/hostAndPort(https:)``). The host is kept as written (brackets removed).
    /// Throws ``MTLSError/Code/invalidArgument`` without a port (1 to 65535) or a host.
    public static func splitTarget(_ target: String) throws -> (host: String, port: UInt16) {
        if target.contains("://") {
            do { return try URLAuthority.hostAndPort(https: target) } catch let e as MTLSError {
                throw MTLSError(.invalidArgument, e.message)
            }
        }
        let hint = target.filter({ $0 == ":" }).count > 1 && !target.hasPrefix("[") ? " ([ADDRESS]:PORT for an IPv6 address)" : ""
        guard let split = try? HostLiteral.split(Substring(target)), let port = split.port, !split.host.isEmpty else {
            throw MTLSError(.invalidArgument, "expected HOST:PORT, got \(target)\(hint)")
        }
        return (split.host, port)
    }

    /// A client as a server sees it: the address it connected from selects the client's host
    /// rule (its source port selects nothing: only rules without a port match a client); the
    /// address is not a name the client's certificate must carry. An IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.5`, from a dual-stack socket) is the IPv4 address.
    public static func client(address: String?) -> TrustPeer {
        TrustPeer(host: TrustPeer(hostText: address).host)
    }

    /// ``client(address:)`` for a host already apart from its port: a listener's numeric host,
    /// as `getnameinfo` wrote it (issue 40: not written out with its port and read back per
    /// connection). Its zone is dropped, as ``client(address:)`` drops it.
    package static func client(numericHost: String?) -> TrustPeer {
        var p = TrustPeer(host: numericHost)
        p.zone = nil
        return p
    }

    /// The name to validate: ``verifyAs`` when set, else ``host``.
    public var nameToValidate: String? { verifyAs ?? host }

    /// `host:port` (`[v6]:port`, `[v6%zone]:port`), or the host alone.
    public var description: String {
        guard let host else { return "(no host)" }
        let scoped = zone.map { "\(host)%\($0)" } ?? host
        let h = scoped.contains(":") ? "[\(scoped)]" : scoped
        return port.map { "\(h):\($0)" } ?? h
    }

    /// Whether the host is one no rule can be chosen for: a `%` that is no IPv6 zone
    /// (`::1%`, `10.0.0.1%1`, `name%eth0`).
    var hasUnmatchableZone: Bool { zone == nil && host?.contains("%") == true }

    /// The host normalised for rule matching: lowercase name without a trailing dot, or IP bytes
    /// (the zone is apart, in ``zone``).
    var normalized: (name: String?, ip: [UInt8]?) {
        guard let host else { return (nil, nil) }
        if let b = IPAddress.bytes(host) { return (nil, b) }
        let n = host.lowercased()
        return (n.hasSuffix(".") ? String(n.dropLast()) : n, nil)
    }
}

extension TrustPolicy {
    /// The host rule that applies to `peer`: the most specific rule matching its host and port
    /// (exact `host:port`, then the host, then wildcards, longest suffix first), else nil (the
    /// policy's defaults). ``TrustPeer/verifyAs`` plays no part.
    public func hostRule(for peer: TrustPeer) -> HostRule? {
        Self.rule(for: peer, in: hostRules)
    }

    static func rule(for peer: TrustPeer, in rules: [HostRule]) -> HostRule? {
        let (name, ip) = peer.normalized
        guard name != nil || ip != nil, !peer.hasUnmatchableZone else { return nil }
        return rules
            .filter { $0.pattern.matches(name: name, ip: ip, zone: peer.zone, port: peer.port) }
            .max { $0.pattern.specificity < $1.pattern.specificity }
    }
}
