internal import COpenSSL
import FoundationEssentials

/// A PKCS#10 certificate signing request: a subject name and a public key, signed by the
/// matching private key (in memory or on a token — a token key signs with C_Sign, so the CSR
/// proves the token holds the key). OpenSSL builds, encodes and verifies it.
/// Sendable (unchecked: OpaquePointer is not): the `X509_REQ` is never changed after `make`/parsing.
public final class CertificateSigningRequest: @unchecked Sendable {
    let req: OpaquePointer

    private init(takingOwnership req: OpaquePointer) { self.req = req }

    deinit { X509_REQ_free(req) }

    /// Makes a CSR for `key`'s public half with `subject` ("CN=alice", "CN=alice,O=Example" in
    /// RFC 4514 order, or OpenSSL's "/O=Example/CN=alice"), signed by `key` (SHA-256; pure
    /// EdDSA for Ed25519).
    ///
    /// `dnsNames` and `ipAddresses`, when given, are requested as a subjectAltName extension
    /// (PKCS#9 extensionRequest), as ACME and EST servers read them.
    public static func make(subject: String, key: PrivateKey, dnsNames: [String] = [],
                            ipAddresses: [String] = []) throws -> CertificateSigningRequest {
        guard let req = X509_REQ_new_ex(LibraryContext.shared.ctx, nil) else {
            throw MTLSError.openSSL(.noMemory, "X509_REQ_new_ex failed")
        }
        let csr = CertificateSigningRequest(takingOwnership: req)
        guard X509_REQ_set_version(req, 0) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the CSR version") }
        guard let name = X509_NAME_new() else { throw MTLSError.openSSL(.noMemory, "X509_NAME_new failed") }
        defer { X509_NAME_free(name) }
        for (field, value) in try parseSubject(subject) {
            let bytes = Array(value.utf8)
            guard X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0) == 1 else {
                throw MTLSError.openSSL(.invalidArgument, "cannot use \(field)=\(value) in a subject name")
            }
        }
        guard X509_REQ_set_subject_name(req, name) == 1, X509_REQ_set_pubkey(req, key.pkey) == 1 else {
            throw MTLSError.openSSL(.invalidArgument, "cannot set the CSR's subject or public key")
        }
        if !dnsNames.isEmpty || !ipAddresses.isEmpty {
            let names = try CertificateBuilder.generalNames(dns: dnsNames, ips: ipAddresses)
            defer { mtls_ossl_GENERAL_NAMES_free(names) }
            var extensions: OpaquePointer? = nil
            defer { if let extensions { mtls_ossl_sk_X509_EXTENSION_pop_free(extensions) } }
            guard X509V3_add1_i2d(&extensions, NID_subject_alt_name, UnsafeMutableRawPointer(names), 0, UInt(X509V3_ADD_DEFAULT)) == 1,
                  X509_REQ_add_extensions(req, extensions) == 1 else {
                throw MTLSError.openSSL(.internal, "cannot add the subjectAltName request to the CSR")
            }
        }
        let md = try CertificateBuilder.signingDigest(for: key)
        defer { if let md { EVP_MD_free(md) } }
        OpenSSLErrorQueue.clear()
        guard X509_REQ_sign(req, key.pkey, md) > 0 else {
            if let failure = TokenKey.takeFailure() { throw failure }
            throw MTLSError.openSSL(key.tokenURI == nil ? .internal : .token,
                                    "cannot sign the CSR with the \(key.keyType.shortName) key" + (key.tokenURI.map { " \($0)" } ?? ""))
        }
        // The request as its bytes say, parsed again. X509_REQ_set_pubkey keeps the very key
        // object it was given (OpenSSL caches it beside the encoding), so the request would
        // otherwise carry `key` itself: for a token key an object of libmtls's token provider,
        // which signs and never verifies, so a local CA's self-signature check
        // (X509_REQ_verify) failed where a CA reading the DER succeeds; and what a CA issues
        // for must be the encoded key, not the caller's object. Parsed, the public key is an
        // ordinary one, as for a CSR read from a file.
        guard let reparsed = Self.decode(der: csr.der) else {
            throw MTLSError.openSSL(.internal, "the CSR just made cannot be read back")
        }
        return CertificateSigningRequest(takingOwnership: reparsed)
    }

    /// A DER-encoded PKCS#10 request, nil when it is not one.
    private static func decode(der: [UInt8]) -> OpaquePointer? {
        der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_X509_REQ(nil, &p, buf.count)
        }
    }

    /// Parses a CSR in PEM (`-----BEGIN CERTIFICATE REQUEST-----`) or DER. Throws
    /// ``MTLSError/Code/parse``. Does not check the signature (see ``verifySelfSignature()``).
    public convenience init(data: [UInt8]) throws {
        let pemMarker = Array("-----BEGIN".utf8)
        let isPEM = data.count >= pemMarker.count && (0...(data.count - pemMarker.count)).contains { i in
            data[i] == pemMarker[0] && Array(data[i..<(i + pemMarker.count)]) == pemMarker
        }
        var parsed: OpaquePointer?
        if isPEM {
            let bio = try MemoryBIO(copying: data)
            parsed = PEM_read_bio_X509_REQ(bio.bio, nil, nil, nil)
        } else {
            parsed = Self.decode(der: data)
        }
        guard let parsed else { throw MTLSError.openSSL(.parse, "not a certificate signing request (PKCS#10, PEM or DER)") }
        self.init(takingOwnership: parsed)
    }

    /// Reads a CSR file (PEM or DER).
    public convenience init(path: String) throws {
        try self.init(data: try FileIO.read(path, limit: 1 << 20))
    }

    /// Checks that the CSR is signed by the key it carries. Throws ``MTLSError/Code/corrupt``.
    public func verifySelfSignature() throws {
        guard let key = X509_REQ_get0_pubkey(req) else {
            throw MTLSError.openSSL(.parse, "the CSR's public key cannot be read")
        }
        OpenSSLErrorQueue.clear()
        guard X509_REQ_verify_ex(req, key, LibraryContext.shared.ctx, nil) == 1 else {
            throw MTLSError.openSSL(.corrupt, "the CSR's signature does not verify with its own public key")
        }
    }

    package func withPublicKey<T>(_ body: (OpaquePointer) throws -> T) throws -> T {
        guard let key = X509_REQ_get0_pubkey(req) else {
            throw MTLSError.openSSL(.parse, "the CSR's public key cannot be read")
        }
        return try body(key)
    }

    /// The key type of the public key ("p256", "rsa2048", "ed25519"...).
    public var keyType: KeyType? { X509_REQ_get0_pubkey(req).map { KeyType(pkey: $0) } }

    /// The subject's common name (the last CN), if any.
    public var commonName: String? {
        guard let name = X509_REQ_get_subject_name(req) else { return nil }
        var last: String?
        var i: Int32 = -1
        while true {
            i = X509_NAME_get_index_by_NID(name, NID_commonName, i)
            if i < 0 { break }
            guard let entry = X509_NAME_get_entry(name, i), let data = X509_NAME_ENTRY_get_data(entry) else { continue }
            var out: UnsafeMutablePointer<UInt8>? = nil
            let n = ASN1_STRING_to_UTF8(&out, data)
            if n >= 0, let out {
                last = String(decoding: UnsafeBufferPointer(start: out, count: Int(n)), as: UTF8.self)
                mtls_ossl_OPENSSL_free(out)
            }
        }
        return last
    }

    /// DER encoding.
    public var der: [UInt8] { derEncode { i2d_X509_REQ(req, $0) } ?? [] }

    /// PEM encoding (`-----BEGIN CERTIFICATE REQUEST-----`).
    public var pem: String {
        let b64 = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN CERTIFICATE REQUEST-----\n\(b64)\n-----END CERTIFICATE REQUEST-----\n"
    }

    /// "CN=a,O=b" (RFC 4514: the last element is the first RDN) or "/O=b/CN=a" (in order), as
    /// (field, value) pairs in DER order. Backslash escapes a separator.
    static func parseSubject(_ text: String) throws -> [(String, String)] {
        func trim(_ s: String) -> String {
            String(s.drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed())
        }
        let slashForm = text.hasPrefix("/")
        let separator: Character = slashForm ? "/" : ","
        var parts: [String] = []
        var current = ""
        var escaped = false
        for ch in (slashForm ? String(text.dropFirst()) : text) {
            if escaped { current.append(ch); escaped = false; continue }
            if ch == "\\" { escaped = true; continue }
            if ch == separator { parts.append(current); current = ""; continue }
            current.append(ch)
        }
        parts.append(current)
        var pairs: [(String, String)] = []
        for part in parts {
            let trimmed = trim(part)
            guard let eq = trimmed.firstIndex(of: "="), eq != trimmed.startIndex else {
                throw MTLSError(.invalidArgument, "a subject is FIELD=VALUE pairs such as \"CN=alice\", not \"\(text)\"")
            }
            let field = trim(String(trimmed[..<eq]))
            let value = trim(String(trimmed[trimmed.index(after: eq)...]))
            guard !value.isEmpty else { throw MTLSError(.invalidArgument, "\(field) has no value in \"\(text)\"") }
            guard OBJ_txt2nid(field) != NID_undef else {
                throw MTLSError(.invalidArgument, "unknown subject field \"\(field)\" in \"\(text)\"")
            }
            pairs.append((field, value))
        }
        return slashForm ? pairs : pairs.reversed()
    }
}
