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
        if let e = r.error { throw e }
        if r.idleTimedOut { throw MTLSError(.timeout, "nothing moved either way for \(idleTimeoutMS) ms") }
        if r.truncated {
            throw MTLSError(.truncated, "the \(c.isServer ? "client" : "server") closed the connection without close_notify (passed on as the end of its data)")
        }
    }
}

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
