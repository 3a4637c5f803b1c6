// mtls_conn, mtls_listener, mtls_ssl_ctx_configure: mutual-TLS connections.
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif

private func tlsVersion(_ v: Int32, _ name: String) throws -> TLSVersion {
    switch v {
    case 12: return .tls12
    case 13: return .tls13
    default: throw invalid("\(name) must be MTLS_TLS_1_2 (12) or MTLS_TLS_1_3 (13), not \(v)")
    }
}

/// Milliseconds from C (0: the default, negative: no limit) to seconds.
private func seconds(_ ms: Int32, default d: Double?) -> Double? {
    if ms == 0 { return d }
    if ms < 0 { return nil }
    return Double(ms) / 1000
}

private func alpnList(_ p: UnsafePointer<CChar>?) -> [String] {
    optionalString(p).map(ALPN.protocols(commaSeparated:)) ?? []
}

private func clientOptions(_ p: UnsafePointer<mtls_conn_options>?) throws -> TLSClientOptions {
    var o = TLSClientOptions()
    guard let p else { return o }
    let c = p.pointee
    guard c.version == 1 else { throw invalid("mtls_conn_options version \(c.version) is not supported (1 is); use mtls_conn_options_init") }
    o.serverName = optionalString(c.sni)
    o.validationName = optionalString(c.verify_as)
    o.alpn = alpnList(c.alpn)
    o.minVersion = try tlsVersion(c.min_tls, "min_tls")
    o.maxVersion = try tlsVersion(c.max_tls, "max_tls")
    o.connectTimeout = seconds(c.connect_timeout_ms, default: 30)
    o.handshakeTimeout = seconds(c.handshake_timeout_ms, default: 30)
    o.ioTimeout = seconds(c.io_timeout_ms, default: nil)
    o.nonBlocking = c.non_blocking != 0
    o.sessionResumption = c.no_session_resumption == 0
    if let id = c.identity {
        o.identity = .identity(try handle(id, Identity.self, "identity"))
    } else if c.candidate_count > 0 {
        let list = try require(c.candidates, "candidates")
        o.identity = .automatic(try (0..<c.candidate_count).map { try handle(list[$0], Identity.self, "candidates[\($0)]") })
    }
    if let policy = c.policy { o.policy = try handle(policy, TrustPolicy.self, "policy") }
    return o
}

/// `int mtls_conn_options_init(mtls_conn_options *opts, unsigned int version)`
@_cdecl("mtls_conn_options_init")
public func mtls_conn_options_init(_ opts: UnsafeMutablePointer<mtls_conn_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        let opts = try require(opts, "opts")
        guard version == 1 else { throw invalid("mtls_conn_options version \(version) is not supported (1 is)") }
        var o = mtls_conn_options()  // zero: NULL pointers, 0 timeouts (the defaults), no flags
        o.version = 1
        o.min_tls = MTLS_TLS_1_2
        o.max_tls = MTLS_TLS_1_3
        opts.pointee = o
    }
}

/// `int mtls_conn_connect(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)`
@_cdecl("mtls_conn_connect")
public func mtls_conn_connect(_ host: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_conn_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try TLSConnection.connect(host: try string(host, "host"), port: port, options: try clientOptions(opts)) }
    }
}

/// `int mtls_conn_open(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)`
@_cdecl("mtls_conn_open")
public func mtls_conn_open(_ host: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_conn_options>?,
                           _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try TLSConnection.open(host: try string(host, "host"), port: port, options: try clientOptions(opts)) }
    }
}

/// `int mtls_conn_wrap_fd(int fd, const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out)`
@_cdecl("mtls_conn_wrap_fd")
public func mtls_conn_wrap_fd(_ fd: Int32, _ host: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_conn_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            try TLSConnection.wrap(fileDescriptor: fd, host: try string(host, "host"), port: port, options: try clientOptions(opts))
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
        try putString(c.tlsVersion, out)
    }
}

/// `int mtls_conn_resumed(const mtls_conn *conn, int *resumed)`
@_cdecl("mtls_conn_resumed")
public func mtls_conn_resumed(_ conn: OpaquePointer?, _ resumed: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall { try require(resumed, "resumed").pointee = try handle(conn, TLSConnection.self, "conn").isResumed ? 1 : 0 }
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
        let opts = try require(opts, "opts")
        guard version == 1 || version == 2 else {
            throw invalid("mtls_listener_options version \(version) is not supported (1 and 2 are)")
        }
        // A version 1 caller's struct ends before the version 2 fields: write only its part.
        var o = mtls_listener_options()
        o.version = version
        o.client_auth = MTLS_CLIENT_AUTH_REQUIRE
        o.min_tls = MTLS_TLS_1_2
        o.max_tls = MTLS_TLS_1_3
        let size = version == 1 ? MemoryLayout.offset(of: \mtls_listener_options.first_byte_timeout_ms) ?? 0
                                : MemoryLayout<mtls_listener_options>.size
        withUnsafeBytes(of: &o) { if let b = $0.baseAddress { UnsafeMutableRawPointer(opts).copyMemory(from: b, byteCount: size) } }
    }
}

/// `int mtls_listener_new(const char *address, uint16_t port, const mtls_listener_options *opts, mtls_listener **out)`
@_cdecl("mtls_listener_new")
public func mtls_listener_new(_ address: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_listener_options>?,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let p = try require(opts, "opts")
            let version = UnsafeRawPointer(p).load(as: UInt32.self)
            guard version == 1 || version == 2 else {
                throw invalid("mtls_listener_options version \(version) is not supported (1 and 2 are)")
            }
            // Read only what a version 1 caller's struct has; the rest keeps its defaults.
            var c = mtls_listener_options()
            let size = version == 1 ? MemoryLayout.offset(of: \mtls_listener_options.first_byte_timeout_ms) ?? 0
                                    : MemoryLayout<mtls_listener_options>.size
            withUnsafeMutableBytes(of: &c) { $0.baseAddress?.copyMemory(from: UnsafeRawPointer(p), byteCount: size) }
            var o = TLSServerOptions(identity: try handle(c.identity, Identity.self, "opts->identity"))
            guard let auth = ClientAuthentication(rawValue: Int(c.client_auth)) else {
                throw invalid("client_auth must be MTLS_CLIENT_AUTH_NONE, _OPTIONAL or _REQUIRE, not \(c.client_auth)")
            }
            o.clientAuthentication = auth
            if let p = c.client_policy { o.clientPolicy = try handle(p, TrustPolicy.self, "opts->client_policy") }
            o.alpn = alpnList(c.alpn)
            o.minVersion = try tlsVersion(c.min_tls, "min_tls")
            o.maxVersion = try tlsVersion(c.max_tls, "max_tls")
            o.handshakeTimeout = seconds(c.handshake_timeout_ms, default: 30)
            o.ioTimeout = seconds(c.io_timeout_ms, default: nil)
            o.sessionTickets = c.no_session_tickets == 0
            if version >= 2 {
                o.firstByteTimeout = seconds(c.first_byte_timeout_ms, default: 5)
                o.maxHandshakesPerAddress = c.max_handshakes_per_address == 0 ? 32 : max(0, Int(c.max_handshakes_per_address))
            }
            return try TLSListener(address: optionalString(address), port: port, options: o)
        }
    }
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
    let h = try string(host, "host")
    guard !h.isEmpty else { throw invalid("host must not be empty") }
    let v = optionalString(verifyAs)
    if let v, v.isEmpty { throw invalid("verify_as must be NULL (the host) or a name, not empty") }
    return TrustPeer(host: h, port: port == 0 ? nil : Int(port), verifyAs: v)
}
