import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The PROXY protocol version 2 header (haproxy's proxy-protocol.txt, section 2.2): what a
/// tunnel sends its plaintext target first, so the target knows the client's address and, with
/// the TLS TLVs, who the client is.
///
/// The header: the 12-byte signature, version 2 with command PROXY (0x21), the family and
/// transport (TCP over IPv4 0x11, TCP over IPv6 0x21, UNIX stream 0x31, unspecified 0x00), the
/// length of what follows (big endian), the addresses, then the TLVs.
public enum ProxyProtocolV2 {
    /// The 12 bytes every v2 header starts with.
    public static let signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]

    /// TLV types (proxy-protocol.txt 2.2.1–2.2.7).
    public enum TLVType {
        /// PP2_TYPE_ALPN: the negotiated application protocol.
        public static let alpn: UInt8 = 0x01
        /// PP2_TYPE_AUTHORITY: the host name the client asked for (SNI).
        public static let authority: UInt8 = 0x02
        /// PP2_TYPE_SSL: the client's TLS connection, with the sub-TLVs below.
        public static let ssl: UInt8 = 0x20
        /// PP2_SUBTYPE_SSL_VERSION: the TLS version's name.
        public static let sslVersion: UInt8 = 0x21
        /// PP2_SUBTYPE_SSL_CN: the client certificate's subject common name.
        public static let sslCommonName: UInt8 = 0x22
        /// PP2_SUBTYPE_SSL_CIPHER: the cipher suite's name.
        public static let sslCipher: UInt8 = 0x23
        /// PP2_SUBTYPE_SSL_SIG_ALG: the client certificate's signature algorithm.
        public static let sslSignatureAlgorithm: UInt8 = 0x24
        /// PP2_SUBTYPE_SSL_KEY_ALG: the client certificate's key algorithm.
        public static let sslKeyAlgorithm: UInt8 = 0x25
        /// libmtls's own TLV (in the range 0xE0–0xEF the specification leaves to applications):
        /// the client certificate, DER, as it was presented. Sent only when asked for.
        public static let mtlsClientCertificate: UInt8 = 0xE0
    }

    /// The `client` bit field of the PP2_TYPE_SSL TLV.
    public enum ClientFlags {
        /// PP2_CLIENT_SSL: the client connected over TLS.
        public static let ssl: UInt8 = 0x01
        /// PP2_CLIENT_CERT_CONN: the client presented a certificate on this connection.
        public static let certificateOnConnection: UInt8 = 0x02
        /// PP2_CLIENT_CERT_SESS: the client presented a certificate in this session (perhaps on an earlier connection it resumed).
        public static let certificateInSession: UInt8 = 0x04
    }

    /// The connection's two ends as the header carries them.
    public enum Addresses: Sendable, Equatable {
        /// Unknown or not representable (the families of the two ends differ): the receiver
        /// uses the connection's own addresses.
        case unspecified
        /// TCP over IPv4: 4-byte addresses, source first.
        case tcp4(source: [UInt8], sourcePort: UInt16, destination: [UInt8], destinationPort: UInt16)
        /// TCP over IPv6: 16-byte addresses, source first.
        case tcp6(source: [UInt8], sourcePort: UInt16, destination: [UInt8], destinationPort: UInt16)
        /// UNIX stream sockets: the two paths (at most 108 bytes each).
        case unix(source: String, destination: String)
    }

    /// What the PP2_TYPE_SSL TLV says about the client's TLS connection.
    public struct TLSInfo: Sendable, Equatable {
        /// "TLSv1.3", as OpenSSL names it (PP2_SUBTYPE_SSL_VERSION).
        public var version: String
        /// The cipher suite's OpenSSL name (PP2_SUBTYPE_SSL_CIPHER).
        public var cipher: String?
        /// The client certificate's signature algorithm, "sha256WithRSAEncryption" (PP2_SUBTYPE_SSL_SIG_ALG).
        public var signatureAlgorithm: String?
        /// The client certificate's key algorithm, "RSA2048" or "EC256" (PP2_SUBTYPE_SSL_KEY_ALG).
        public var keyAlgorithm: String?
        /// The client certificate's subject common name (PP2_SUBTYPE_SSL_CN).
        public var commonName: String?
        /// Whether the client presented a certificate on this connection (a full handshake).
        public var certificateOnConnection: Bool
        /// Whether the session carries a client certificate (this connection's, or the one of
        /// the handshake a resumed session came from).
        public var certificateInSession: Bool
        /// The client certificate, DER, sent in ``TLVType/mtlsClientCertificate`` when set.
        public var certificateDER: [UInt8]?

        /// What the TLV says; a client without a certificate leaves the certificate fields empty.
        public init(version: String, cipher: String? = nil, signatureAlgorithm: String? = nil, keyAlgorithm: String? = nil,
                    commonName: String? = nil, certificateOnConnection: Bool = false, certificateInSession: Bool = false,
                    certificateDER: [UInt8]? = nil) {
            self.version = version
            self.cipher = cipher
            self.signatureAlgorithm = signatureAlgorithm
            self.keyAlgorithm = keyAlgorithm
            self.commonName = commonName
            self.certificateOnConnection = certificateOnConnection
            self.certificateInSession = certificateInSession
            self.certificateDER = certificateDER
        }
    }

    /// The whole header. The peer was verified (the connection exists only then), so the SSL
    /// TLV's `verify` field is 0. Throws ``MTLSError/Code/invalidArgument`` when an address has
    /// the wrong length, a UNIX path is longer than 107 bytes, or the header would be longer
    /// than its 16-bit length field allows (a certificate over about 64 KiB).
    public static func header(_ addresses: Addresses, tls: TLSInfo? = nil) throws -> [UInt8] {
        var body: [UInt8] = []
        let family: UInt8
        switch addresses {
        case .unspecified:
            family = 0x00
        case .tcp4(let s, let sp, let d, let dp):
            guard s.count == 4, d.count == 4 else { throw MTLSError(.invalidArgument, "a TCP4 address is 4 bytes") }
            family = 0x11
            body = s + d + be16(sp) + be16(dp)
        case .tcp6(let s, let sp, let d, let dp):
            guard s.count == 16, d.count == 16 else { throw MTLSError(.invalidArgument, "a TCP6 address is 16 bytes") }
            family = 0x21
            body = s + d + be16(sp) + be16(dp)
        case .unix(let s, let d):
            family = 0x31
            body = try unixPath(s) + unixPath(d)
        }
        if let tls {
            var ssl: [UInt8] = [ClientFlags.ssl
                | (tls.certificateOnConnection ? ClientFlags.certificateOnConnection : 0)
                | (tls.certificateInSession ? ClientFlags.certificateInSession : 0),
                0, 0, 0, 0]
            ssl += try tlv(TLVType.sslVersion, Array(tls.version.utf8))
            if let cn = tls.commonName { ssl += try tlv(TLVType.sslCommonName, Array(cn.utf8)) }
            if let c = tls.cipher { ssl += try tlv(TLVType.sslCipher, Array(c.utf8)) }
            if let s = tls.signatureAlgorithm { ssl += try tlv(TLVType.sslSignatureAlgorithm, Array(s.utf8)) }
            if let k = tls.keyAlgorithm { ssl += try tlv(TLVType.sslKeyAlgorithm, Array(k.utf8)) }
            body += try tlv(TLVType.ssl, ssl)
            if let der = tls.certificateDER { body += try tlv(TLVType.mtlsClientCertificate, der) }
        }
        guard body.count <= 0xFFFF else { throw MTLSError(.invalidArgument, "the PROXY v2 header would be longer than 65,535 bytes") }
        return signature + [0x21, family] + be16(UInt16(body.count)) + body
    }

    static func be16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }

    static func tlv(_ type: UInt8, _ value: [UInt8]) throws -> [UInt8] {
        guard value.count <= 0xFFFF else { throw MTLSError(.invalidArgument, "a PROXY v2 TLV value is at most 65,535 bytes") }
        return [type] + be16(UInt16(value.count)) + value
    }

    static func unixPath(_ path: String) throws -> [UInt8] {
        let bytes = Array(path.utf8)
        guard bytes.count <= 107 else { throw MTLSError(.invalidArgument, "a UNIX socket path in a PROXY v2 header is at most 107 bytes") }
        return bytes + [UInt8](repeating: 0, count: 108 - bytes.count)
    }

    /// The addresses of a connected socket as the header carries them: its peer as the source,
    /// its own address as the destination. ``Addresses/unspecified`` when they are not both
    /// IPv4 or both IPv6 (a UNIX socket's peer has no useful path either).
    public static func addresses(ofConnection fd: Int32) -> Addresses {
        guard let source = socketAddress(fd, peer: true), let destination = socketAddress(fd, peer: false),
              source.bytes.count == destination.bytes.count else { return .unspecified }
        if source.bytes.count == 4 {
            return .tcp4(source: source.bytes, sourcePort: source.port, destination: destination.bytes, destinationPort: destination.port)
        }
        return .tcp6(source: source.bytes, sourcePort: source.port, destination: destination.bytes, destinationPort: destination.port)
    }

    static func socketAddress(_ fd: Int32, peer: Bool) -> (bytes: [UInt8], port: UInt16)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return withUnsafeMutablePointer(to: &storage) { p -> ([UInt8], UInt16)? in
            let rc = p.withMemoryRebound(to: sockaddr.self, capacity: 1) { peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length) }
            guard rc == 0 else { return nil }
            switch Int32(p.pointee.ss_family) {
            case AF_INET:
                return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    var a = sin.pointee.sin_addr
                    return (withUnsafeBytes(of: &a) { Array($0) }, UInt16(bigEndian: sin.pointee.sin_port))
                }
            case AF_INET6:
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin in
                    var a = sin.pointee.sin6_addr
                    return (withUnsafeBytes(of: &a) { Array($0) }, UInt16(bigEndian: sin.pointee.sin6_port))
                }
            default:
                return nil
            }
        }
    }
}
