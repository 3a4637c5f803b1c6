// mtls_conn, mtls_listener, mtls_ssl_ctx_configure: mutual-TLS connections.
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif


/// The header's `MTLS_CLIENT_AUTH_*` constants.
private func clientAuthentication(_ v: Int32) throws -> ClientAuthentication {
    switch v {
    case MTLS_CLIENT_AUTH_NONE: return .none
    case MTLS_CLIENT_AUTH_OPTIONAL: return .optional
    case MTLS_CLIENT_AUTH_REQUIRE: return .require
    default: throw invalid("client_auth must be MTLS_CLIENT_AUTH_NONE, _OPTIONAL or _REQUIRE, not \(v)")
    }
}

/// The header's `MTLS_CLIENT_AUTH_*` value of a core setting.
private func clientAuthValue(_ auth: ClientAuthentication) -> Int32 {
    switch auth {
    case .none: return MTLS_CLIENT_AUTH_NONE
    case .optional: return MTLS_CLIENT_AUTH_OPTIONAL
    case .require: return MTLS_CLIENT_AUTH_REQUIRE
    }
}

private func tlsVersion(_ v: Int32, _ name: String) throws -> TLSVersion {
    switch v {
    case MTLS_TLS_1_2: return .tls12
    case MTLS_TLS_1_3: return .tls13
    default: throw invalid("\(name) must be MTLS_TLS_1_2 (12) or MTLS_TLS_1_3 (13), not \(v)")
    }
}

/// The header's `MTLS_TLS_*` value of a core version.
private func tlsVersionValue(_ v: TLSVersion) -> Int32 {
    switch v {
    case .tls12: return MTLS_TLS_1_2
    case .tls13: return MTLS_TLS_1_3
    }
}

/// A `*_timeout_ms` field in seconds, unit conversion only: what 0 and negative values mean is
/// the core's (``TLSDefaults/timeout(_:default:)``).
private func seconds(_ ms: Int32) -> Double { Double(ms) / 1000 }

/// A core timeout as a `*_timeout_ms` field: -1 for no limit.
private func milliseconds(_ s: Double?) -> Int32 {
    guard let s else { return -1 }
    return Int32(clamping: Int((s * 1000).rounded()))
}

/// A core count limit as a C field: -1 for no limit.
private func limitValue(_ n: Int?) -> Int32 { n.map { Int32(clamping: $0) } ?? -1 }

private func alpnList(_ p: UnsafePointer<CChar>?, _ name: String) throws -> [String] {
    try optionalString(p, name).map(ALPN.protocols(commaSeparated:)) ?? []
}

/// mtls_conn_options: version 1 ends where `overrides` (version 2, with `identity_source`) begins.
private let connOptionsSizes = [MemoryLayout<mtls_conn_options>.offset(of: \mtls_conn_options.overrides) ?? 0,
                                MemoryLayout<mtls_conn_options>.size]
/// mtls_listener_options: version 1 ends where `client_overrides` (version 2) begins, version 2
/// where `client_hello_timeout_ms` (version 3) begins.
private let listenerOptionsSizes = [MemoryLayout<mtls_listener_options>.offset(of: \mtls_listener_options.client_overrides) ?? 0,
                                    MemoryLayout<mtls_listener_options>.offset(of: \mtls_listener_options.client_hello_timeout_ms) ?? 0,
                                    MemoryLayout<mtls_listener_options>.size]

/// The header's `MTLS_CA_NAMES_*` value of a listener (with its certificates for `_LIST`).
private func clientCANames(_ v: Int32, _ certs: UnsafePointer<OpaquePointer?>?, _ count: Int) throws -> ClientCANames {
    switch v {
    case MTLS_CA_NAMES_ANCHORS: return .anchors
    case MTLS_CA_NAMES_NONE: return .omitted
    case MTLS_CA_NAMES_LIST: return .certificates(try handleList(certs, count, Certificate.self, "client_ca_certs"))
    default: throw invalid("client_ca_names must be MTLS_CA_NAMES_ANCHORS, _NONE or _LIST, not \(v)")
    }
}

/// The header's `MTLS_CA_NAMES_*` value of a core setting (the default's, for options_init).
private func clientCANamesValue(_ names: ClientCANames) -> Int32 {
    switch names {
    case .anchors: return MTLS_CA_NAMES_ANCHORS
    case .omitted: return MTLS_CA_NAMES_NONE
    case .certificates: return MTLS_CA_NAMES_LIST
    }
}

// A client's host, SNI and verify-as, read once for the connections that repeat them.
private let hostArgument = CStringMemo(), sniArgument = CStringMemo(), verifyAsArgument = CStringMemo()

private func clientOptions(_ p: UnsafePointer<mtls_conn_options>?) throws -> TLSClientOptions {
    var o = TLSClientOptions()
    guard let p else { return o }
    let c = try readVersioned(p, zero: mtls_conn_options(), sizes: connOptionsSizes, "mtls_conn_options")
    o.overrides = try overridesArgument(c.overrides, "opts->overrides")
    o.serverName = try sniArgument.optionalString(c.sni, "sni")
    o.validationName = try verifyAsArgument.optionalString(c.verify_as, "verify_as")
    o.alpn = try alpnList(c.alpn, "alpn")
    o.minVersion = try tlsVersion(c.min_tls, "min_tls")
    o.maxVersion = try tlsVersion(c.max_tls, "max_tls")
    o.connectSeconds = seconds(c.connect_timeout_ms)
    o.handshakeSeconds = seconds(c.handshake_timeout_ms)
    o.ioSeconds = seconds(c.io_timeout_ms)
    o.nonBlocking = c.non_blocking != 0
    o.sessionResumption = c.no_session_resumption == 0
    _ = try size(c.candidate_count, "candidate_count")  // checked even when identity is set
    if let id = c.identity {
        o.identity = .identity(try handle(id, Identity.self, "identity"))
    } else {
        let candidates = try handleList(c.candidates, c.candidate_count, Identity.self, "candidates")
        if !candidates.isEmpty { o.identity = .automatic(candidates) }
    }
    if let policy = c.policy { o.policy = try handle(policy, TrustPolicy.self, "policy") }
    if let source = c.identity_source { o.identitySource = try handle(source, IdentitySource.self, "identity_source") }
    return o
}

/// `int mtls_conn_options_init(mtls_conn_options *opts, unsigned int version)`
@_cdecl("mtls_conn_options_init")
public func mtls_conn_options_init(_ opts: UnsafeMutablePointer<mtls_conn_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        try initVersionedOptions(opts, version, sizes: connOptionsSizes, "mtls_conn_options", versionField: \.version) {
            let d = TLSClientOptions()
            var o = mtls_conn_options()  // NULL pointers: no names, identity, policy or overrides
            o.min_tls = tlsVersionValue(d.minVersion)
            o.max_tls = tlsVersionValue(d.maxVersion)
            o.connect_timeout_ms = milliseconds(d.connectSeconds)
            o.handshake_timeout_ms = milliseconds(d.handshakeSeconds)
            o.io_timeout_ms = milliseconds(d.ioSeconds)
            o.non_blocking = d.nonBlocking ? 1 : 0
            o.no_session_resumption = d.sessionResumption ? 0 : 1
            return o
        }
    }
}

/// `int mtls_conn_connect(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)`
@_cdecl("mtls_conn_connect")
public func mtls_conn_connect(_ host: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_conn_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try TLSConnection.connect(host: try hostArgument.string(host, "host"), port: port, options: try clientOptions(opts)) }
    }
}

/// `int mtls_conn_open(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)`
@_cdecl("mtls_conn_open")
public func mtls_conn_open(_ host: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_conn_options>?,
                           _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try TLSConnection.open(host: try hostArgument.string(host, "host"), port: port, options: try clientOptions(opts)) }
    }
}

/// `int mtls_conn_wrap_fd(int fd, const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)`
@_cdecl("mtls_conn_wrap_fd")
public func mtls_conn_wrap_fd(_ fd: Int32, _ host: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_conn_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            try TLSConnection.wrap(fileDescriptor: fd, host: try hostArgument.string(host, "host"), port: port, options: try clientOptions(opts))
        }
    }
}

/// `int mtls_conn_handshake(mtls_conn *conn)`
@_cdecl("mtls_conn_handshake")
public func mtls_conn_handshake(_ conn: OpaquePointer?) -> Int32 {
    abiCall { try handle(conn, TLSConnection.self, "conn").handshake() }
}

/// `int mtls_conn_read(mtls_conn *conn, uint8_t *buf, size_t len, size_t *n)`
@_cdecl("mtls_conn_read")
public func mtls_conn_read(_ conn: OpaquePointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ len: Int,
                           _ n: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        let c = try handle(conn, TLSConnection.self, "conn")
        let n = try require(n, "n")
        n.pointee = 0
        let buf = try require(buf, "buf")
        n.pointee = try c.read(into: UnsafeMutableRawBufferPointer(start: buf, count: try size(len, "len")))
    }
}

/// `int mtls_conn_write(mtls_conn *conn, const uint8_t *buf, size_t len, size_t *n)`
@_cdecl("mtls_conn_write")
public func mtls_conn_write(_ conn: OpaquePointer?, _ buf: UnsafePointer<UInt8>?, _ len: Int,
                            _ n: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        let c = try handle(conn, TLSConnection.self, "conn")
        let n = try require(n, "n")
        n.pointee = 0
        if try size(len, "len") == 0 { return }
        let buf = try require(buf, "buf")
        n.pointee = try c.write(UnsafeRawBufferPointer(start: buf, count: len))
    }
}

/// `int mtls_conn_shutdown(mtls_conn *conn)`
@_cdecl("mtls_conn_shutdown")
public func mtls_conn_shutdown(_ conn: OpaquePointer?) -> Int32 {
    abiCall { try handle(conn, TLSConnection.self, "conn").shutdown() }
}

/// `void mtls_conn_free(mtls_conn *conn)`
@_cdecl("mtls_conn_free")
public func mtls_conn_free(_ conn: OpaquePointer?) { closeHandle(conn, TLSConnection.self) { $0.close() } }

/// `int mtls_conn_fd(const mtls_conn *conn, int *fd)`
@_cdecl("mtls_conn_fd")
public func mtls_conn_fd(_ conn: OpaquePointer?, _ fd: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall { try require(fd, "fd").pointee = try handle(conn, TLSConnection.self, "conn").fileDescriptor }
}

/// `int mtls_conn_set_non_blocking(mtls_conn *conn, int non_blocking)`
@_cdecl("mtls_conn_set_non_blocking")
public func mtls_conn_set_non_blocking(_ conn: OpaquePointer?, _ nonBlocking: Int32) -> Int32 {
    abiCall {
        let c = try handle(conn, TLSConnection.self, "conn")
        guard nonBlocking == 0 || nonBlocking == 1 else { throw invalid("non_blocking must be 0 or 1, not \(nonBlocking)") }
        try c.setNonBlocking(nonBlocking == 1)
    }
}

/// `int mtls_conn_may_block(const mtls_conn *conn, int *may_block)`
@_cdecl("mtls_conn_may_block")
public func mtls_conn_may_block(_ conn: OpaquePointer?, _ mayBlock: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall { try require(mayBlock, "may_block").pointee = try handle(conn, TLSConnection.self, "conn").mayBlock ? 1 : 0 }
}

/// `int mtls_conn_peer_chain(const mtls_conn *conn, mtls_cert ***out, size_t *count)`
@_cdecl("mtls_conn_peer_chain")
public func mtls_conn_peer_chain(_ conn: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                 _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) { try handle(conn, TLSConnection.self, "conn").peerChain }
    }
}

/// `int mtls_conn_alpn(const mtls_conn *conn, char **out)`
@_cdecl("mtls_conn_alpn")
public func mtls_conn_alpn(_ conn: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        try putOptionalString(out) { try handle(conn, TLSConnection.self, "conn").alpn }
    }
}

/// `int mtls_conn_tls_version(const mtls_conn *conn, char **out)`
@_cdecl("mtls_conn_tls_version")
public func mtls_conn_tls_version(_ conn: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let c = try handle(conn, TLSConnection.self, "conn")
        try require(out, "out").pointee = nil
        guard c.isHandshakeComplete else { throw invalid("the handshake has not completed") }
        try putString(c.tlsVersionName, out)
    }
}

/// `int mtls_conn_resumed(const mtls_conn *conn, int *resumed)`
@_cdecl("mtls_conn_resumed")
public func mtls_conn_resumed(_ conn: OpaquePointer?, _ resumed: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall { try require(resumed, "resumed").pointee = try handle(conn, TLSConnection.self, "conn").isResumed ? 1 : 0 }
}

/// `int mtls_conn_policy_changed(const mtls_conn *conn, int *changed)`
@_cdecl("mtls_conn_policy_changed")
public func mtls_conn_policy_changed(_ conn: OpaquePointer?, _ changed: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall { try require(changed, "changed").pointee = try handle(conn, TLSConnection.self, "conn").isPolicyChanged ? 1 : 0 }
}

/// `int mtls_conn_presented_identity(const mtls_conn *conn, mtls_identity **out)`
@_cdecl("mtls_conn_presented_identity")
public func mtls_conn_presented_identity(_ conn: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let c = try handle(conn, TLSConnection.self, "conn")
        let out = try require(out, "out")
        out.pointee = c.presentedIdentity.map { retainHandle($0) }
    }
}

// MARK: listener

/// `int mtls_listener_options_init(mtls_listener_options *opts, unsigned int version)`
@_cdecl("mtls_listener_options_init")
public func mtls_listener_options_init(_ opts: UnsafeMutablePointer<mtls_listener_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        try initVersionedOptions(opts, version, sizes: listenerOptionsSizes, "mtls_listener_options", versionField: \.version) {
            var o = mtls_listener_options()  // NULL pointers: the identity, policy and overrides are the caller's
            o.client_auth = clientAuthValue(TLSDefaults.clientAuthentication)
            o.min_tls = tlsVersionValue(TLSDefaults.minVersion)
            o.max_tls = tlsVersionValue(TLSDefaults.maxVersion)
            o.handshake_timeout_ms = milliseconds(TLSDefaults.handshakeTimeout)
            o.io_timeout_ms = milliseconds(TLSDefaults.ioTimeout)
            o.no_session_tickets = TLSDefaults.sessionTickets ? 0 : 1
            o.first_byte_timeout_ms = milliseconds(TLSDefaults.firstByteTimeout)
            o.max_handshakes_per_address = limitValue(TLSDefaults.maxHandshakesPerAddress)
            o.client_ca_names = clientCANamesValue(TLSDefaults.clientCANames)
            o.client_hello_timeout_ms = milliseconds(TLSDefaults.clientHelloTimeout)
            o.ipv6_source_prefix_length = limitValue(TLSDefaults.ipv6SourcePrefixLength)
            return o
        }
    }
}

/// `int mtls_listener_new(const char *address, uint16_t port, const mtls_listener_options *opts, mtls_listener **out)`
@_cdecl("mtls_listener_new")
public func mtls_listener_new(_ address: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_listener_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            try TLSListener(address: try optionalString(address, "address"), port: port, options: try serverOptions(opts, source: nil))
        }
    }
}

/// The listener options `opts` say; with `source`, its identity is presented and
/// `opts->identity` is not read.
func serverOptions(_ opts: UnsafePointer<mtls_listener_options>?, source: IdentitySource?) throws -> TLSServerOptions {
            let c = try readVersioned(try require(opts, "opts"), zero: mtls_listener_options(), sizes: listenerOptionsSizes,
                                      "mtls_listener_options")
            var o = TLSServerOptions(identity: try source?.current ?? handle(c.identity, Identity.self, "opts->identity"))
            o.identitySource = source
            o.clientAuthentication = try clientAuthentication(c.client_auth)
            if let p = c.client_policy { o.clientPolicy = try handle(p, TrustPolicy.self, "opts->client_policy") }
            o.alpn = try alpnList(c.alpn, "opts->alpn")
            o.minVersion = try tlsVersion(c.min_tls, "min_tls")
            o.maxVersion = try tlsVersion(c.max_tls, "max_tls")
            o.handshakeSeconds = seconds(c.handshake_timeout_ms)
            o.ioSeconds = seconds(c.io_timeout_ms)
            o.sessionTickets = c.no_session_tickets == 0
            o.clientOverrides = try overridesArgument(c.client_overrides, "opts->client_overrides")
            o.firstByteSeconds = seconds(c.first_byte_timeout_ms)
            o.maxHandshakesPerAddress = Int(c.max_handshakes_per_address)  // 0 and negative: the core's convention
            o.clientCANames = try clientCANames(c.client_ca_names, c.client_ca_certs, c.client_ca_cert_count)
            o.clientHelloSeconds = seconds(c.client_hello_timeout_ms)
            o.ipv6SourcePrefixLength = Int(c.ipv6_source_prefix_length)  // 0 and negative: the core's convention
            return o
}

/// `int mtls_listener_port(const mtls_listener *listener, uint16_t *port)`
@_cdecl("mtls_listener_port")
public func mtls_listener_port(_ listener: OpaquePointer?, _ port: UnsafeMutablePointer<UInt16>?) -> Int32 {
    abiCall { try require(port, "port").pointee = try handle(listener, TLSListener.self, "listener").port }
}

/// `int mtls_listener_accept(mtls_listener *listener, int timeout_ms, mtls_conn **out)`
@_cdecl("mtls_listener_accept")
public func mtls_listener_accept(_ listener: OpaquePointer?, _ timeoutMS: Int32, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            try handle(listener, TLSListener.self, "listener").accept(timeout: timeoutMS < 0 ? nil : Double(timeoutMS) / 1000)
        }
    }
}

/// `void mtls_listener_free(mtls_listener *listener)`
@_cdecl("mtls_listener_free")
public func mtls_listener_free(_ listener: OpaquePointer?) { closeHandle(listener, TLSListener.self) { $0.close() } }

// MARK: bring your own SSL_CTX

/// `int mtls_ssl_ctx_configure(void *ssl_ctx, const mtls_identity *identity, const mtls_policy *policy, int accepts_clients)`
@_cdecl("mtls_ssl_ctx_configure")
public func mtls_ssl_ctx_configure(_ sslCtx: UnsafeMutableRawPointer?, _ identity: OpaquePointer?, _ policy: OpaquePointer?,
                                   _ acceptsClients: Int32) -> Int32 {
    abiCall {
        let ctx = try require(sslCtx, "ssl_ctx")
        let id = try identity.map { try handle($0, Identity.self, "identity") }
        let purpose: TrustPurpose = acceptsClients != 0 ? .clientAuth : .serverAuth
        if let policy {
            try SSLContextConfiguration.configure(sslContext: ctx, identity: id,
                                                  policy: try handle(policy, TrustPolicy.self, "policy"), purpose: purpose)
        } else {
            try SSLContextConfiguration.configure(sslContext: ctx, identity: id, policy: nil, purpose: purpose)
        }
    }
}

/// `int mtls_ssl_ctx_configure_overrides(void *ssl_ctx, const mtls_identity *identity, const mtls_policy *policy, int accepts_clients, const mtls_trust_overrides *overrides)`
@_cdecl("mtls_ssl_ctx_configure_overrides")
public func mtls_ssl_ctx_configure_overrides(_ sslCtx: UnsafeMutableRawPointer?, _ identity: OpaquePointer?, _ policy: OpaquePointer?,
                                             _ acceptsClients: Int32, _ overrides: UnsafePointer<mtls_trust_overrides>?) -> Int32 {
    abiCall {
        let ctx = try require(sslCtx, "ssl_ctx")
        let id = try identity.map { try handle($0, Identity.self, "identity") }
        let p = try policy.map { try handle($0, TrustPolicy.self, "policy") }
        try SSLContextConfiguration.configure(sslContext: ctx, identity: id, policy: p,
                                              purpose: acceptsClients != 0 ? .clientAuth : .serverAuth,
                                              overrides: try overridesArgument(overrides))
    }
}

/// `int mtls_conn_evaluation(const mtls_conn *conn, mtls_trust_result **out)`
@_cdecl("mtls_conn_evaluation")
public func mtls_conn_evaluation(_ conn: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let c = try handle(conn, TLSConnection.self, "conn")
        let out = try require(out, "out")
        out.pointee = c.evaluation.map { retainHandle(TrustResultBox($0)) }
    }
}

/// `void mtls_conn_cache_clear(void)`
@_cdecl("mtls_conn_cache_clear")
public func mtls_conn_cache_clear() {
    TLSConnection.clearSessionCache()
}

/// `int mtls_ssl_set_peer(void *ssl, const char *host, uint16_t port, const char *verify_as)`
@_cdecl("mtls_ssl_set_peer")
public func mtls_ssl_set_peer(_ ssl: UnsafeMutableRawPointer?, _ host: UnsafePointer<CChar>?, _ port: UInt16,
                              _ verifyAs: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let s = try require(ssl, "ssl")
        SSLContextConfiguration.setPeer(ssl: s, try sslPeer(host, port, verifyAs))
    }
}

/// `int mtls_ssl_ctx_set_peer(void *ssl_ctx, const char *host, uint16_t port, const char *verify_as)`
@_cdecl("mtls_ssl_ctx_set_peer")
public func mtls_ssl_ctx_set_peer(_ ctx: UnsafeMutableRawPointer?, _ host: UnsafePointer<CChar>?, _ port: UInt16,
                                  _ verifyAs: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let c = try require(ctx, "ssl_ctx")
        SSLContextConfiguration.setPeer(sslContext: c, try sslPeer(host, port, verifyAs))
    }
}

private func sslPeer(_ host: UnsafePointer<CChar>?, _ port: UInt16, _ verifyAs: UnsafePointer<CChar>?) throws -> TrustPeer {
    try TrustPeer.named(host: try string(host, "host"), port: port == 0 ? nil : Int(port),
                        verifyAs: try optionalString(verifyAs, "verify_as"))
}
