internal import COpenSSL
import FoundationEssentials
import Synchronization

/// An X.509 certificate, immutable once parsed. Safe to share across threads.
///
/// Owns one OpenSSL `X509` and frees it on deinit (the model is swift-nio-ssl's
/// `NIOSSLCertificate`). Parse with ``init(der:)`` or ``Certificate/parseAll(_:)``.
/// Sendable: the `X509` is never changed after parsing, and OpenSSL allows concurrent reads.
public final class Certificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// The OpenSSL object. Owned by this instance; never freed by anyone else.
    package let x509: OpaquePointer
    /// The DER as parsed or encoded at wrapping; nil for a certificate wrapped with
    /// `init(sharing:)`, whose DER is encoded from its `X509` when asked for (issue 40).
    private let storedDER: [UInt8]?

    /// The DER encoding: as parsed, or encoded from OpenSSL's object (for a certificate that
    /// shares it with a connection, as a listener's peer chain does: encoded at each call and not
    /// kept).
    public var der: [UInt8] { storedDER ?? encodedDER() }

    private func encodedDER() -> [UInt8] {
        // An X509 that was parsed (init(sharing:) checks it encodes) re-encodes; [] is unreachable.
        derEncode({ i2d_X509(x509, $0) }) ?? []
    }

    /// Takes ownership of `x509` (one reference).
    package init(takingOwnership x509: OpaquePointer) throws {
        self.x509 = x509
        guard let der = derEncode({ i2d_X509(x509, $0) }) else {
            X509_free(x509)
            throw MTLSError.openSSL(.parse, "cannot encode certificate")
        }
        storedDER = der
    }

    /// Adds a reference to `x509` and wraps it; the caller keeps its own reference.
    package convenience init(borrowing x509: OpaquePointer) throws {
        X509_up_ref(x509)
        try self.init(takingOwnership: x509)
    }

    /// Adds a reference to `x509` (an `X509` OpenSSL already keeps, such as a TLS peer's
    /// certificate, which its `SSL_SESSION` holds) and wraps it without a DER copy: ``der`` is
    /// encoded when asked for. Equality and hashing stay those of the DER. For the certificates
    /// a connection keeps for its life (issue 40: memory per idle connection).
    package init(sharing x509: OpaquePointer) throws {
        guard i2d_X509(x509, nil) > 0 else {
            OpenSSLErrorQueue.clear()
            throw MTLSError.openSSL(.parse, "cannot encode certificate")
        }
        X509_up_ref(x509)
        self.x509 = x509
        storedDER = nil
    }

    /// Parses one DER-encoded certificate. Trailing bytes are an error.
    public convenience init(der: [UInt8]) throws {
        guard !der.isEmpty else { throw MTLSError(.parse, "empty certificate data") }
        let (x, consumed) = der.withUnsafeBufferPointer { buf -> (OpaquePointer?, Int) in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            let x = d2i_X509(nil, &p, buf.count)
            let consumed = p.map { $0 - buf.baseAddress! } ?? 0
            return (x, consumed)
        }
        guard let x else { throw MTLSError.openSSL(.parse, "not a DER certificate") }
        guard consumed == der.count else {
            X509_free(x)
            throw MTLSError(.parse, "trailing data after the DER certificate (\(der.count - consumed) bytes)")
        }
        try self.init(takingOwnership: x)
    }

    /// Stable pointer to the DER bytes, valid while this certificate lives (for the C ABI).
    /// Made at the first call: a certificate the C ABI never shows (a listener's peer chains,
    /// issue 40) keeps no such copy.
    public var derPointer: UnsafePointer<UInt8> {
        UnsafePointer((derBlock() + MemoryLayout<Int>.size).assumingMemoryBound(to: UInt8.self))
    }

    /// The DER bytes at ``derPointer`` and their count (the C ABI's `mtls_cert_der`).
    package var derBuffer: UnsafeBufferPointer<UInt8> {
        let block = derBlock()
        return UnsafeBufferPointer(start: (block + MemoryLayout<Int>.size).assumingMemoryBound(to: UInt8.self),
                                   count: block.load(as: Int.self))
    }

    /// The C ABI's copy: the DER's count (an Int), then its bytes. One copy, made at the first
    /// call, the same every time, from any thread.
    private func derBlock() -> UnsafeMutableRawPointer {
        while true {
            if let block = derStorage.load(ordering: .acquiring) { return block }
            let bytes = der
            let block = UnsafeMutableRawPointer.allocate(byteCount: MemoryLayout<Int>.size + max(1, bytes.count),
                                                         alignment: MemoryLayout<Int>.alignment)
            block.storeBytes(of: bytes.count, as: Int.self)
            bytes.withUnsafeBytes { if let b = $0.baseAddress { (block + MemoryLayout<Int>.size).copyMemory(from: b, byteCount: $0.count) } }
            if derStorage.compareExchange(expected: nil, desired: block, ordering: .acquiringAndReleasing).exchanged {
                return block
            }
            block.deallocate() // another thread made it first: the next turn loads it
        }
    }
    private let derStorage = Atomic<UnsafeMutableRawPointer?>(nil)

    /// Returns a new reference to the `X509` for APIs that take ownership (`sk_X509_push` of an
    /// owning stack, `SSL_CTX_use_certificate`...). The caller must free it.
    func retainedX509() -> OpaquePointer {
        X509_up_ref(x509)
        return x509
    }

    deinit {
        X509_free(x509)
        derStorage.load(ordering: .acquiring)?.deallocate()
    }

    // MARK: Parsing bundles

    /// Parses every certificate in `data`: DER, PEM (one or many `CERTIFICATE` blocks, other
    /// blocks ignored), or a PKCS#7 bundle (DER or PEM). Throws ``MTLSError/Code/parse`` when
    /// no certificate is found.
    public static func parseAll(_ data: [UInt8]) throws -> [Certificate] {
        guard !data.isEmpty else { throw MTLSError(.parse, "empty input: no certificate") }
        if looksLikePEM(data) {
            let certs = try parsePEM(data)
            if !certs.isEmpty { return certs }
            if let p7 = try? parsePKCS7PEM(data), !p7.isEmpty { return p7 }
            throw MTLSError(.parse, "PEM input holds no CERTIFICATE or PKCS7 block")
        }
        if let cert = try? Certificate(der: data) { return [cert] }
        OpenSSLErrorQueue.clear()
        if let certs = try? parsePKCS7DER(data), !certs.isEmpty { return certs }
        OpenSSLErrorQueue.clear()
        throw MTLSError(.parse, "not a certificate: neither PEM, DER nor a PKCS#7 bundle")
    }

    /// Reads a file and parses every certificate in it (see ``parseAll(_:)``).
    public static func load(path: String) throws -> [Certificate] {
        try parseAll(FileIO.read(path))
    }

    package static func looksLikePEM(_ data: [UInt8]) -> Bool {
        let marker = Array("-----BEGIN ".utf8)
        let limit = min(data.count, 64 * 1024)
        guard limit >= marker.count else { return false }
        for i in 0...(limit - marker.count) where data[i] == marker[0] {
            if Array(data[i..<(i + marker.count)]) == marker { return true }
        }
        return false
    }

    static func parsePEM(_ data: [UInt8]) throws -> [Certificate] {
        let bio = try MemoryBIO(copying: data)
        var certs: [Certificate] = []
        while true {
            var name: UnsafeMutablePointer<CChar>? = nil
            var header: UnsafeMutablePointer<CChar>? = nil
            var body: UnsafeMutablePointer<UInt8>? = nil
            var len: Int = 0
            guard PEM_read_bio(bio.bio, &name, &header, &body, &len) == 1 else { break }
            defer {
                mtls_ossl_OPENSSL_free(name); mtls_ossl_OPENSSL_free(header); mtls_ossl_OPENSSL_free(body)
            }
            let label = name.map { String(cString: $0) } ?? ""
            guard label == "CERTIFICATE" || label == "X509 CERTIFICATE" || label == "TRUSTED CERTIFICATE",
                  let body else { continue }
            let der = Array(UnsafeBufferPointer(start: body, count: len))
            if label == "TRUSTED CERTIFICATE" {
                // OpenSSL's "trusted" form: a certificate followed by its trust settings.
                var p: UnsafePointer<UInt8>? = UnsafePointer(body)
                guard let x = d2i_X509_AUX(nil, &p, len) else {
                    throw MTLSError.openSSL(.parse, "bad TRUSTED CERTIFICATE block #\(certs.count + 1)")
                }
                certs.append(try Certificate(takingOwnership: x))
            } else {
                do { certs.append(try Certificate(der: der)) } catch let e as MTLSError {
                    throw MTLSError(.parse, "bad CERTIFICATE block #\(certs.count + 1): \(e.message)")
                }
            }
        }
        OpenSSLErrorQueue.clear() // PEM_read_bio leaves "no start line" at the end of input
        return certs
    }

    static func parsePKCS7DER(_ data: [UInt8]) throws -> [Certificate] {
        let p7 = data.withUnsafeBufferPointer { buf -> UnsafeMutablePointer<PKCS7>? in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_PKCS7(nil, &p, buf.count)
        }
        guard let p7 else { throw MTLSError.openSSL(.parse, "not a PKCS#7 bundle") }
        defer { PKCS7_free(p7) }
        return try certificates(ofPKCS7: p7)
    }

    static func parsePKCS7PEM(_ data: [UInt8]) throws -> [Certificate] {
        let bio = try MemoryBIO(copying: data)
        guard let p7 = PEM_read_bio_PKCS7(bio.bio, nil, nil, nil) else {
            throw MTLSError.openSSL(.parse, "no PKCS7 block")
        }
        defer { PKCS7_free(p7) }
        return try certificates(ofPKCS7: p7)
    }

    private static func certificates(ofPKCS7 p7: UnsafeMutablePointer<PKCS7>) throws -> [Certificate] {
        guard mtls_ossl_PKCS7_type_is_signed(p7) != 0, let sk = mtls_ossl_PKCS7_signed_certs(p7) else {
            throw MTLSError(.parse, "PKCS#7 data is not a certificate bundle (signedData)")
        }
        return try (0..<mtls_ossl_sk_X509_num(sk)).map { i in
            guard let x = mtls_ossl_sk_X509_value(sk, i) else { throw MTLSError(.parse, "PKCS#7 certificate #\(i + 1) is missing") }
            return try Certificate(borrowing: x)
        }
    }

    // MARK: Encodings

    /// The PEM encoding (`-----BEGIN CERTIFICATE-----`).
    public var pem: String {
        let b64 = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN CERTIFICATE-----\n\(b64)\n-----END CERTIFICATE-----\n"
    }

    // MARK: Hashable

    /// Two certificates are equal when their DER encodings are (one `X509` is one encoding).
    public static func == (a: Certificate, b: Certificate) -> Bool { a.x509 == b.x509 || a.der == b.der }
    /// Hashes the DER encoding.
    public func hash(into h: inout Hasher) { h.combine(der) }
    /// `Certificate(subject summary, sha256=first 16 hex digits)`, for logs.
    public var description: String { "Certificate(\(subjectSummary), sha256=\(sha256Hex.prefix(16)))" }
}
