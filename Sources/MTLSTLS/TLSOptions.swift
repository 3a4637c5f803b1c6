import Synchronization
import FoundationEssentials

/// A TLS protocol version libmtls speaks. The raw values are the header's `MTLS_TLS_*` numbers
/// (HeaderEnumTests compares them).
public enum TLSVersion: Int, CaseIterable, Sendable, Comparable, CustomStringConvertible {
    /// TLS 1.2 (RFC 5246).
    case tls12 = 12
    /// TLS 1.3 (RFC 8446).
    case tls13 = 13

    /// OpenSSL's name for the version ("TLSv1.2", "TLSv1.3").
    public var description: String { self == .tls12 ? "TLSv1.2" : "TLSv1.3" }

    /// TLS 1.2 is older than TLS 1.3.
    public static func < (a: TLSVersion, b: TLSVersion) -> Bool { a.rawValue < b.rawValue }
}

/// ALPN protocol lists: as applications write them, and on the wire (TLSCallbackState.swift).
public enum ALPN {
    /// The protocols of a comma-separated list, preferred first (`"h2, http/1.1"`): blanks
    /// around names and empty entries are dropped.
    public static func protocols(commaSeparated list: String) -> [String] {
        list.split(separator: ",").map { $0.trimmingBlanks() }.filter { !$0.isEmpty }
    }
}

private extension Substring {
    func trimmingBlanks() -> String {
        var s = self
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return String(s)
    }
}

/// Which client certificate to present.
public enum ClientIdentity: Sendable {
    /// Present no certificate.
    case none
    /// Always present this identity.
    case identity(Identity)
    /// Choose among these identities by the server's CertificateRequest: the first one whose
    /// chain reaches a CA name the server listed, that is currently valid, allows clientAuth and
    /// whose key can make a signature the server accepts. When none fits, the handshake stops
    /// with ``MTLSError/Code/noMatchingIdentity`` naming the CAs the server asked for.
    case automatic([Identity])
    /// Like ``automatic(_:)``, among candidates whose private key is loaded only once chosen
    /// (token identities held in a store: the token is opened, and logged in to, only when the
    /// server's request picks them). A chosen candidate that cannot be loaded (wrong PIN, token
    /// absent) gives way to the next that fits; when none loads, the handshake fails with the
    /// first candidate's error.
    case candidates([IdentityCandidate])

    /// The candidates for automatic selection, or nil for `.none` / `.identity`.
    var selectionCandidates: [IdentityCandidate]? {
        switch self {
        case .none, .identity: return nil
        case .automatic(let ids): return ids.map { IdentityCandidate($0) }
        case .candidates(let cs): return cs
        }
    }
}

/// An identity automatic selection may choose: its certificates are known up front, its private
/// key is loaded (once) when it is chosen.
public final class IdentityCandidate: Sendable {
    /// The leaf certificate.
    public let leaf: Certificate
    /// The issuers above the leaf, leaf's issuer first (as far as they are known).
    public let chain: [Certificate]
    private let load: @Sendable () throws -> Identity
    /// The identity once loaded; the lock is held while loading, so it is loaded once.
    private let loaded: Locked<Identity?>

    /// A candidate whose identity is already loaded.
    public init(_ identity: Identity) {
        leaf = identity.leaf
        chain = identity.chain
        loaded = Locked(identity)
        load = { identity }
    }

    /// A token identity held in a store: chosen by its stored certificates; when chosen, the
    /// key is found on the token with ``Token/identity(reference:modulePath:pin:pinCallback:allowFinalTry:)``
    /// (PIN: `pin`, else `pinCallback`, else the URI's pin-value/pin-source).
    public init(token reference: StoreTokenReference, pin: SecretBytes? = nil, pinCallback: TokenPINCallback? = nil) {
        leaf = reference.certificate
        chain = reference.chain
        loaded = Locked(nil)
        load = { try Token.identity(reference: reference, pin: pin, pinCallback: pinCallback) }
    }

    /// The identity, loaded on first use and kept (a token identity keeps its session).
    public func identity() throws -> Identity {
        try loaded.withLock { loaded in
            if let loaded { return loaded }
            let id = try load()
            loaded = id
            return id
        }
    }

    /// Leaf first, then the chain.
    var allCertificates: [Certificate] { [leaf] + chain }
}

/// How a TLS client connects: names, versions, ALPN, timeouts, identity and trust.
///
/// Three names are kept apart: the address connected to (the `host` given to
/// ``TLSConnection/connect(host:port:options:)-877mc``), the SNI sent (``serverName``) and the name the
/// server certificate is validated as (``validationName``).
public struct TLSClientOptions: Sendable {
    /// SNI to send. `nil` (the default) sends the host when it is a DNS name and nothing when it
    /// is an IP address; `""` sends none.
    public var serverName: String?
    /// The name or IP the server's certificate must match; `nil` means the host connected to.
    /// The policy's host rules (`verify-as`) apply on top of this name.
    public var validationName: String?
    /// ALPN protocols to offer, most preferred first.
    public var alpn: [String] = []
    /// Lowest TLS version offered (default 1.2).
    public var minVersion: TLSVersion = TLSDefaults.minVersion
    /// Highest TLS version offered (default 1.3).
    public var maxVersion: TLSVersion = TLSDefaults.maxVersion
    /// The time allowed for the TCP connect (default 30 s). Setting `nil` restores the default;
    /// reading gives the limit in force, never nil. See ``TLSTimeLimit``.
    public var connectTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: connectSeconds) }
        set { connectSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// The time allowed for the TLS handshake (default 30 s; see ``connectTimeLimit``).
    public var handshakeTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: handshakeSeconds) }
        set { handshakeSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// The time allowed for each read and write (default ``TLSTimeLimit/forever``; see
    /// ``connectTimeLimit``).
    public var ioTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: ioSeconds) }
        set { ioSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// Seconds allowed for the TCP connect under ``TLSDefaults/timeout(_:default:)``'s
    /// convention: `nil` or negative waits forever, `0` is the default (30 s).
    @available(*, deprecated, renamed: "connectTimeLimit", message: "use connectTimeLimit, a TLSTimeLimit (Duration)")
    public var connectTimeout: Double? { get { connectSeconds } set { connectSeconds = newValue } }
    /// Seconds allowed for the TLS handshake (the convention of ``connectTimeout``; default 30).
    @available(*, deprecated, renamed: "handshakeTimeLimit", message: "use handshakeTimeLimit, a TLSTimeLimit (Duration)")
    public var handshakeTimeout: Double? { get { handshakeSeconds } set { handshakeSeconds = newValue } }
    /// Seconds allowed for each read and write (the convention of ``connectTimeout``; default:
    /// no limit).
    @available(*, deprecated, renamed: "ioTimeLimit", message: "use ioTimeLimit, a TLSTimeLimit (Duration)")
    public var ioTimeout: Double? { get { ioSeconds } set { ioSeconds = newValue } }
    /// The limits in seconds under the C convention, as the C ABI and the library read them.
    @TLSTimeout(default: TLSDefaults.connectTimeout) package var connectSeconds: Double?
    @TLSTimeout(default: TLSDefaults.handshakeTimeout) package var handshakeSeconds: Double?
    @TLSTimeout(default: TLSDefaults.ioTimeout) package var ioSeconds: Double?
    /// The identity to present.
    public var identity: ClientIdentity = .none
    /// An identity that can change (swapped by the application or following a store label):
    /// when set, it is presented instead of ``identity``, each connection taking the one in
    /// force when it starts. A session made with another identity is not resumed.
    public var identitySource: IdentitySource?
    /// How the server is judged. `nil` uses a default policy (the system trust store, name check
    /// against ``validationName``). Each handshake evaluates with the settings in force when it
    /// runs (see ``TrustPolicy/replaceSettings(from:)``).
    public var policy: TrustPolicy?
    /// This connection's overrides on top of ``policy`` (anchors, anchors-only, pins that are
    /// always enforced, a verify-as over every other): see ``TrustOverrides``. The policy object
    /// is never changed; sessions are resumed only under the same overrides.
    public var overrides: TrustOverrides?
    /// Reuse TLS sessions (TLS 1.3 tickets, TLS 1.2 sessions) for the same host, port, names,
    /// identity and policy.
    public var sessionResumption = TLSDefaults.sessionResumption
    /// Non-blocking mode for event loops: connect returns with the TCP connect under way (but a
    /// DNS name is first resolved with a blocking `getaddrinfo`: to never block, connect to an IP
    /// literal with ``serverName`` and ``validationName`` set to the name, or wrap a socket you
    /// connected yourself); handshake, read and write throw ``MTLSError/Code/wantRead``
    /// / ``MTLSError/Code/wantWrite`` instead of waiting: call again when the socket is ready. A
    /// failed TCP connect is ``MTLSError/Code/connect`` from ``TLSConnection/handshake()-2mgoe``.
    public var nonBlocking = false
    /// The key-exchange groups offered, in OpenSSL's names ("X25519", "P-256", "ffdhe2048"),
    /// instead of OpenSSL's defaults; `mtls doctor` offers one at a time to find which the server
    /// accepts. A name this OpenSSL does not know is ``MTLSError/Code/unsupported`` before any
    /// connection is made (``TLSContext/groupIsKnown(_:)``).
    package var groups: [String]?

    /// Options with every default: no identity, a default ``TrustPolicy`` (when ``policy`` is
    /// nil), TLS 1.2 to 1.3, session resumption on.
    public init() {}

    var policySource: TrustPolicy { policy ?? TrustPolicy() }
}

/// Whether a server asks clients for a certificate. The raw values are the header's
/// `MTLS_CLIENT_AUTH_*` numbers (HeaderEnumTests compares them).
public enum ClientAuthentication: Int, CaseIterable, Sendable {
    /// Do not ask.
    case none = 0
    /// Ask; a client without a certificate is accepted, one with an untrusted certificate is not.
    case optional = 1
    /// Ask, and refuse clients that present none.
    case require = 2

    /// What a server asks of clients when its caller says only whether a certificate is required
    /// or optional (`mtls serve --require-client-cert`, `--optional-client-cert`): `.require`
    /// when it is required; otherwise, when the caller gave a way to trust clients (client
    /// anchors or a client policy), `.require` (a server that names client anchors wants to know
    /// its clients; the listener's default too) unless optional certificates are asked for by
    /// name (`.optional`: a certificate a client presents is still judged), and `.none` when
    /// nothing could trust one (asking would only have clients present certificates that are
    /// then refused).
    package static func requested(certificateRequired: Bool, certificateOptional: Bool = false,
                                 clientTrustGiven: Bool) -> ClientAuthentication {
        if certificateRequired { return .require }
        guard clientTrustGiven else { return .none }
        return certificateOptional ? .optional : .require
    }
}

/// The CA names a server's certificate request carries (TLS 1.3 `certificate_authorities`, the
/// TLS 1.2 request's list), which clients use to pick the identity they present. They decide
/// nothing about trust: the client policy does.
public enum ClientCANames: Sendable {
    /// The subjects of the client anchors (the client policy's and the client overrides'): the
    /// default.
    case anchors
    /// No CA names: each client presents the identity it has. For clients that match the names
    /// against the wrong certificates: an Erlang/OTP 25 TLS 1.3 client compares them with its
    /// chain without the leaf, so a client certificate issued by a named intermediate is never
    /// sent.
    case omitted
    /// The subjects of these certificates, in this order.
    case certificates([Certificate])
}

extension ClientCANames {
    /// The certificates whose subjects are sent, given the client anchors.
    func certificates(anchors: [Certificate]) -> [Certificate] {
        switch self {
        case .anchors: return anchors
        case .omitted: return []
        case .certificates(let list): return list
        }
    }
}

/// How a ``TLSListener`` accepts clients.
public struct TLSServerOptions: Sendable {
    /// The server's own identity (required).
    public var identity: Identity
    /// An identity that can change (see ``IdentitySource``): when set, each handshake presents
    /// its current identity instead of ``identity``. Without it a listener makes a source of
    /// ``identity``, which ``TLSListener/setIdentity(_:)`` swaps.
    public var identitySource: IdentitySource?
    /// Whether a client certificate is requested or required.
    public var clientAuthentication: ClientAuthentication = TLSDefaults.clientAuthentication
    /// How client certificates are judged (purpose clientAuth, no name check). Pin one
    /// customer's intermediate as its anchor to accept only that customer's clients.
    public var clientPolicy: TrustPolicy?
    /// Overrides on top of ``clientPolicy`` for every client (see ``TrustOverrides``): anchors
    /// added (also sent as CA names), anchors-only, pins that are always enforced, a verify-as.
    public var clientOverrides: TrustOverrides?
    /// The CA names sent in the certificate request, from which clients pick their identity:
    /// by default the subjects of the client anchors; none, or the subjects of certificates the
    /// caller gives (see ``ClientCANames``). Which clients are trusted does not change.
    public var clientCANames: ClientCANames = TLSDefaults.clientCANames
    /// ALPN protocols the server accepts, most preferred first.
    public var alpn: [String] = []
    /// Lowest TLS version accepted (default 1.2).
    public var minVersion: TLSVersion = TLSDefaults.minVersion
    /// Highest TLS version accepted (default 1.3).
    public var maxVersion: TLSVersion = TLSDefaults.maxVersion
    /// The time allowed for each accepted client's handshake (default 30 s). Setting `nil`
    /// restores the default; reading gives the limit in force, never nil. See ``TLSTimeLimit``.
    public var handshakeTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: handshakeSeconds) }
        set { handshakeSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// The time allowed for each read and write on an accepted connection (default
    /// ``TLSTimeLimit/forever``; see ``handshakeTimeLimit``).
    public var ioTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: ioSeconds) }
        set { ioSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// The time an accepted client has to send its first byte (default 5 s; ``TLSTimeLimit/forever``:
    /// no limit other than ``handshakeTimeLimit``): see ``firstByteTimeout`` for what it does.
    public var firstByteTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: firstByteSeconds) }
        set { firstByteSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// The time an accepted client has to send its whole ClientHello (default 10 s;
    /// ``TLSTimeLimit/forever``: no limit other than ``handshakeTimeLimit``): see
    /// ``clientHelloTimeout`` for what it does.
    public var clientHelloTimeLimit: TLSTimeLimit? {
        get { TLSTimeLimit(seconds: clientHelloSeconds) }
        set { clientHelloSeconds = TLSTimeLimit.seconds(newValue) }
    }
    /// Seconds allowed for each accepted client's handshake (the convention of
    /// ``TLSDefaults/timeout(_:default:)``; default 30).
    @available(*, deprecated, renamed: "handshakeTimeLimit", message: "use handshakeTimeLimit, a TLSTimeLimit (Duration)")
    public var handshakeTimeout: Double? { get { handshakeSeconds } set { handshakeSeconds = newValue } }
    /// Seconds allowed for each read and write on an accepted connection (default: no limit).
    @available(*, deprecated, renamed: "ioTimeLimit", message: "use ioTimeLimit, a TLSTimeLimit (Duration)")
    public var ioTimeout: Double? { get { ioSeconds } set { ioSeconds = newValue } }
    /// The limits in seconds under the C convention, as the C ABI and the listener read them.
    @TLSTimeout(default: TLSDefaults.handshakeTimeout) package var handshakeSeconds: Double?
    @TLSTimeout(default: TLSDefaults.ioTimeout) package var ioSeconds: Double?
    @TLSTimeout(default: TLSDefaults.firstByteTimeout) package var firstByteSeconds: Double?
    @TLSTimeout(default: TLSDefaults.clientHelloTimeout) package var clientHelloSeconds: Double?
    /// Seconds an accepted client has to send its first byte (its ClientHello), under the
    /// convention of ``TLSDefaults/timeout(_:default:)`` (0: the default, 5 s; nil or negative: no
    /// limit other than ``handshakeTimeLimit``, which also bounds it). Until then it takes no
    /// handshake slot and no thread: one thread watches every such socket, so clients that
    /// connect and stay silent cannot hold the listener's handshakes up; when the time is over
    /// the socket is closed without a word (nothing is reported to ``TLSListener/accept(timeout:)``).
    @available(*, deprecated, renamed: "firstByteTimeLimit", message: "use firstByteTimeLimit, a TLSTimeLimit (Duration)")
    public var firstByteTimeout: Double? { get { firstByteSeconds } set { firstByteSeconds = newValue } }
    /// The most clients from one source address in a handshake at once, under the convention of
    /// the timeouts (``TLSDefaults/limit(_:default:)``: 0 is the default, 32; nil or negative: no
    /// limit). More from that address wait, having sent their first byte, until one of its
    /// handshakes ends (or their first-byte time is over), so one address cannot take every
    /// handshake slot.
    @TLSLimit(default: TLSDefaults.maxHandshakesPerAddress) public var maxHandshakesPerAddress: Int?
    /// Seconds an accepted client has, from its connection, to send its whole ClientHello, under
    /// the convention of ``TLSDefaults/timeout(_:default:)`` (0: the default, 10 s; nil or
    /// negative: no limit other than ``handshakeTimeLimit``, which also bounds it). Until its
    /// ClientHello is whole a client takes no handshake slot and no thread (as before its first
    /// byte): a client that sends a byte or a part of a ClientHello and stalls is watched with the
    /// silent ones, and closed when this time is over (``TLSListener/accept(timeout:)`` throws
    /// ``MTLSError/Code/timeout`` for it, as for a handshake that timed out).
    @available(*, deprecated, renamed: "clientHelloTimeLimit", message: "use clientHelloTimeLimit, a TLSTimeLimit (Duration)")
    public var clientHelloTimeout: Double? { get { clientHelloSeconds } set { clientHelloSeconds = newValue } }
    /// How many leading bits of an IPv6 source address make one source for
    /// ``maxHandshakesPerAddress`` (and for choosing which stalled handshake goes first), under the
    /// convention of the limits: 0 is the default, 64 (one customer's or one host's network: an
    /// IPv6 host may use any address of its /64); nil or negative counts each address alone (as
    /// 128 does). IPv4 sources always count by address (an IPv4-mapped address is its IPv4
    /// address). A listener refuses a value above 128 (``MTLSError/Code/invalidArgument``).
    @TLSLimit(default: TLSDefaults.ipv6SourcePrefixLength) public var ipv6SourcePrefixLength: Int?
    /// Issue session tickets, so a returning client resumes without the certificate work. A
    /// ticket resumes only under the client policy version that judged the client, from the
    /// same address, while its chain is valid; otherwise the client gets a full handshake.
    public var sessionTickets = TLSDefaults.sessionTickets

    /// Options for a server presenting `identity`, every other option at its default (a client
    /// certificate required; set ``clientPolicy`` to say which clients are trusted).
    public init(identity: Identity) { self.identity = identity }

    var clientPolicySource: TrustPolicy { clientPolicy ?? TrustPolicy() }
}

extension TLSClientOptions {
    /// Seconds `mtls connect` allows by default for the TCP connect, the handshake and each read
    /// of the reply (its `--timeout`). Shorter than the library's defaults on purpose
    /// (``TLSDefaults/connectTimeout`` and ``TLSDefaults/handshakeTimeout`` 30 s, reads
    /// unbounded): a person waits at a terminal for a one-shot probe, so a peer that does not
    /// answer is reported within seconds, and a reply that never ends does not hang the command.
    package static let commandLineTimeout: Double = 10
}

extension TLSServerOptions {
    /// Seconds a small test server (`mtls serve`) allows each client's handshake and each read
    /// or write: short, because its clients are tools such as `openssl s_client -quiet`, which
    /// never closes, and the server lets go of an idle client so that `--count` can end.
    package static let testServerTimeout: Double = 10

    /// What a small test server (`mtls serve`) decides beyond the listener defaults: client
    /// authentication from whether a certificate is required and whether client trust was given
    /// (``ClientAuthentication/requested(certificateRequired:certificateOptional:clientTrustGiven:)``), and
    /// ``testServerTimeout`` for handshakes, reads and writes.
    package mutating func configureAsTestServer(certificateRequired: Bool, certificateOptional: Bool = false,
                                               clientTrustGiven: Bool) {
        clientAuthentication = .requested(certificateRequired: certificateRequired, certificateOptional: certificateOptional,
                                          clientTrustGiven: clientTrustGiven)
        handshakeSeconds = Self.testServerTimeout
        ioSeconds = Self.testServerTimeout
    }
}

/// The defaults of ``TLSClientOptions`` and ``TLSServerOptions``, and the one meaning of a
/// timeout, written once: the options start from them, and the C ABI's `mtls_conn_options_init`
/// and `mtls_listener_options_init` read them (the C layer converts, it does not decide).
public enum TLSDefaults {
    /// Lowest TLS version offered or accepted.
    public static let minVersion = TLSVersion.tls12
    /// Highest TLS version offered or accepted.
    public static let maxVersion = TLSVersion.tls13
    /// Seconds an accepted client has to send its first byte.
    public static let firstByteTimeout: Double? = 5
    /// Handshakes one source address may have under way at a listener at once.
    public static let maxHandshakesPerAddress: Int? = 32
    /// Seconds an accepted client has to send its whole ClientHello.
    public static let clientHelloTimeout: Double? = 10
    /// IPv6 sources are counted by their /64.
    public static let ipv6SourcePrefixLength: Int? = 64
    /// Seconds for the TCP connect.
    public static let connectTimeout: Double? = 30
    /// Seconds for the TLS handshake.
    public static let handshakeTimeout: Double? = 30
    /// Reads and writes wait as long as the peer takes.
    public static let ioTimeout: Double? = nil
    /// Client sessions are resumed.
    public static let sessionResumption = true
    /// Servers issue session tickets.
    public static let sessionTickets = true
    /// A listener requires a client certificate.
    public static let clientAuthentication = ClientAuthentication.require
    /// A listener's certificate request names the client anchors.
    public static let clientCANames = ClientCANames.anchors

    /// A timeout under the one convention every front end shares (the C ABI's `*_timeout_ms`
    /// fields are this, in milliseconds): `0` is `defaultValue`, `nil` or a negative value is no
    /// limit (nil), anything else that many seconds.
    public static func timeout(_ seconds: Double?, default defaultValue: Double?) -> Double? {
        conventional(seconds, default: defaultValue)
    }

    /// A count limit under the timeouts' convention (the C ABI's `max_handshakes_per_address` is
    /// this): `0` is `defaultValue`, `nil` or a negative value is no limit (nil).
    public static func limit(_ count: Int?, default defaultValue: Int?) -> Int? {
        conventional(count, default: defaultValue)
    }

    /// The convention itself, written once for timeouts and limits.
    static func conventional<Value: Numeric & Comparable>(_ value: Value?, default defaultValue: Value?) -> Value? {
        guard let value, value >= 0 else { return nil }
        return value == 0 ? defaultValue : value
    }
}

/// A time limit, as the Swift API takes it: a `Duration`, or no limit. The options' `…TimeLimit`
/// properties are `TLSTimeLimit?`, where `nil` means "the default" (what `0` means to the C ABI's
/// `*_timeout_ms` fields and the older `Double` properties) and ``forever`` means no limit (their
/// negative values):
///
/// ```swift
/// var options = TLSClientOptions()
/// options.handshakeTimeLimit = .after(.seconds(5))
/// options.ioTimeLimit = .forever          // the default for reads and writes
/// options.connectTimeLimit = nil          // back to the default, 30 s
/// ```
///
/// A zero or negative duration is a limit that has already passed: the step fails with
/// ``MTLSError/Code/timeout`` unless it can finish without waiting.
public enum TLSTimeLimit: Sendable, Hashable {
    /// Wait at most this long.
    case after(Duration)
    /// Wait as long as it takes.
    case forever

    /// The limit of a number of seconds as the options keep it (nil: no limit).
    package init(seconds: Double?) {
        // Infinite or past any Int64 of nanoseconds (292 years): no limit, not a trap.
        guard let seconds, seconds.isFinite, seconds < 9e9 else { self = .forever; return }
        self = .after(.nanoseconds(Int64((seconds * 1e9).rounded())))
    }

    /// The seconds under the C convention: 0 for the default (nil), -1 for ``forever``, and at
    /// least a nanosecond for a duration (0 would mean the default).
    package static func seconds(_ limit: TLSTimeLimit?) -> Double {
        switch limit {
        case nil: return 0
        case .forever: return -1
        case .after(let d):
            let (s, atto) = d.components
            return max(Double(s) + Double(atto) / 1e18, 1e-9)
        }
    }

    /// The seconds of a limit given to one call (nil: no limit), for the calls that take one.
    package var seconds: Double? {
        switch self {
        case .forever: return nil
        case .after: return TLSTimeLimit.seconds(self)
        }
    }
}

/// An option (a timeout in seconds, a count limit) kept under ``TLSDefaults/timeout(_:default:)``'s
/// convention: a value is read back as it will be used (`0` set reads as the default, a negative
/// value as nil). ``TLSTimeout`` and ``TLSLimit`` are its two kinds.
@propertyWrapper
public struct TLSConventionalOption<Value: Numeric & Comparable & Sendable>: Sendable {
    private var value: Value?
    private let defaultValue: Value?

    /// Starts at `defaultValue`, which is also what `0` means.
    public init(default defaultValue: Value?) {
        self.value = defaultValue
        self.defaultValue = defaultValue
    }

    /// The value as it will be used (nil: no limit); setting it applies the convention.
    public var wrappedValue: Value? {
        get { value }
        set { value = TLSDefaults.conventional(newValue, default: defaultValue) }
    }
}

/// A timeout option (seconds) under the convention of ``TLSDefaults/timeout(_:default:)``.
public typealias TLSTimeout = TLSConventionalOption<Double>
/// A count limit option under the same convention (``TLSDefaults/limit(_:default:)``).
public typealias TLSLimit = TLSConventionalOption<Int>
