import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif

// The C ABI's "Tunnels" section (issue 39): the library's forwarding loop, PROXY protocol v2
// header and plaintext-address rule, as `mtls tunnel` uses them.

/// `int mtls_conn_forward(mtls_conn *conn, int fd, int idle_timeout_ms, uint64_t *bytes_from_tls, uint64_t *bytes_to_tls)`
@_cdecl("mtls_conn_forward")
public func mtls_conn_forward(_ conn: OpaquePointer?, _ fd: Int32, _ idleTimeoutMS: Int32,
                              _ fromTLS: UnsafeMutablePointer<UInt64>?, _ toTLS: UnsafeMutablePointer<UInt64>?) -> Int32 {
    abiCall {
        fromTLS?.pointee = 0
        toTLS?.pointee = 0
        let c = try handle(conn, TLSConnection.self, "conn")
        guard fd >= 0 else { throw invalid("fd \(fd) is not a file descriptor") }
        guard idleTimeoutMS >= -1 else { throw invalid("idle_timeout_ms must be -1 (none) or more, not \(idleTimeoutMS)") }
        let r = c.forward(to: fd, idleTimeout: idleTimeoutMS < 0 ? nil : Double(idleTimeoutMS) / 1000)
        fromTLS?.pointee = r.bytesFromTLS
        toTLS?.pointee = r.bytesToTLS
        try forwardOutcome(r, idleTimeoutMS: idleTimeoutMS, server: c.isServer)
    }
}

/// How a forwarded pair ended, as the C ABI reports it: nothing for both directions ended;
/// MTLS_E_TIMEOUT for the idle timeout; MTLS_E_TRUNCATED for a TLS peer gone without close_notify;
/// else the error that stopped it.
private func forwardOutcome(_ r: ForwardResult, idleTimeoutMS: Int32, server: Bool) throws {
    if let e = r.error { throw e }
    if r.idleTimedOut { throw MTLSError(.timeout, "nothing moved either way for \(idleTimeoutMS) ms") }
    if r.truncated {
        throw MTLSError(.truncated, "the \(server ? "client" : "server") closed the connection without close_notify (passed on as the end of its data)")
    }
}

/// `int mtls_forwarder_new(int threads, mtls_forwarder **out)`
@_cdecl("mtls_forwarder_new")
public func mtls_forwarder_new(_ threads: Int32, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let out = try require(out, "out")
        out.pointee = nil
        guard (0...64).contains(threads) else { throw invalid("threads must be 0 (the default) to 64, not \(threads)") }
        out.pointee = retainHandle(try TLSForwarder(threads: threads == 0 ? TLSForwarder.defaultThreads : Int(threads)))
    }
}

/// The C caller's `user` pointer, carried to the forwarder's thread untouched.
private struct UserPointer: @unchecked Sendable { let p: UnsafeMutableRawPointer? }

/// `int mtls_forwarder_add(mtls_forwarder *fw, mtls_conn *conn, int fd, int idle_timeout_ms, mtls_forward_done_cb done, void *user)`
@_cdecl("mtls_forwarder_add")
public func mtls_forwarder_add(_ fw: OpaquePointer?, _ conn: OpaquePointer?, _ fd: Int32, _ idleTimeoutMS: Int32,
                               _ done: (@convention(c) (UnsafeMutableRawPointer?, Int32, UInt64, UInt64) -> Void)?,
                               _ user: UnsafeMutableRawPointer?) -> Int32 {
    abiCall {
        let f = try handle(fw, TLSForwarder.self, "fw")
        let c = try handle(conn, TLSConnection.self, "conn")
        guard fd >= 0 else { throw invalid("fd \(fd) is not a file descriptor") }
        guard idleTimeoutMS >= -1 else { throw invalid("idle_timeout_ms must be -1 (none) or more, not \(idleTimeoutMS)") }
        guard c.fileDescriptor != fd else { throw invalid("fd is the connection's own socket") }
        // The forwarder takes the connection: the handle's reference goes, the object lives on in the pair.
        releaseHandle(conn, TLSConnection.self)
        let server = c.isServer, userPointer = UserPointer(p: user)
        f.add(c, plain: fd, idleTimeout: idleTimeoutMS < 0 ? nil : Double(idleTimeoutMS) / 1000) { r in
            let status = abiCall { try forwardOutcome(r, idleTimeoutMS: idleTimeoutMS, server: server) }
            done?(userPointer.p, status, r.bytesFromTLS, r.bytesToTLS)
        }
    }
}

/// `int mtls_forwarder_active(const mtls_forwarder *fw, int *active)`
@_cdecl("mtls_forwarder_active")
public func mtls_forwarder_active(_ fw: OpaquePointer?, _ active: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let out = try require(active, "active")
        out.pointee = Int32(clamping: try handle(fw, TLSForwarder.self, "fw").active)
    }
}

/// `void mtls_forwarder_free(mtls_forwarder *fw)`
@_cdecl("mtls_forwarder_free")
public func mtls_forwarder_free(_ fw: OpaquePointer?) { closeHandle(fw, TLSForwarder.self) { $0.close() } }

/// `int mtls_conn_proxy_header(const mtls_conn *conn, int include_certificate, uint8_t **out, size_t *out_len)`
@_cdecl("mtls_conn_proxy_header")
public func mtls_conn_proxy_header(_ conn: OpaquePointer?, _ includeCertificate: Int32,
                                   _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?, _ outLen: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(out, outLen) {
            let c = try handle(conn, TLSConnection.self, "conn")
            guard includeCertificate == 0 || includeCertificate == 1 else {
                throw invalid("include_certificate must be 0 or 1, not \(includeCertificate)")
            }
            guard c.isHandshakeComplete else { throw invalid("the handshake has not finished") }
            return try ProxyProtocolV2.header(ProxyProtocolV2.addresses(ofConnection: c.fileDescriptor),
                                              tls: c.proxyProtocolTLSInfo(includeCertificate: includeCertificate == 1))
        }
    }
}

/// `int mtls_address_is_local(const char *address, int *is_local)`
@_cdecl("mtls_address_is_local")
public func mtls_address_is_local(_ address: UnsafePointer<CChar>?, _ isLocal: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let out = try require(isLocal, "is_local")
        out.pointee = 0
        out.pointee = try TunnelAddress(try string(address, "address")).isLocal ? 1 : 0
    }
}
