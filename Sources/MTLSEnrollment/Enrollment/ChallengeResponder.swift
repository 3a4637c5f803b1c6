internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Answers one ACME challenge while the CA validates it, then goes away.
package final class ChallengeResponder: @unchecked Sendable {
    // @unchecked: `stopped` is atomic; the rest is set before the thread starts and only read.
    private let stopped = Atomic<Bool>(false)
    private var thread: pthread_t?
    private var cleanup: (() -> Void)?

    private init() {}

    /// Starts answering `method` for `identifier` with `keyAuthorization` (RFC 8555 §8.1).
    static func start(_ method: ACMEChallengeMethod, identifier: String, token: String, keyAuthorization: String) throws -> ChallengeResponder {
        let responder = ChallengeResponder()
        switch method {
        case .http01(let address, let port):
            let (fd, _) = try Socket.listen(address: address, port: port)
            Socket.setNonBlocking(fd, true)
            let path = "/.well-known/acme-challenge/" + token
            responder.thread = BackgroundThread.startJoinable(name: "mtls-acme-http") { [responder] in
                responder.serveHTTP(fd, path: path, body: Array(keyAuthorization.utf8))
                Glibc.close(fd)
            }
            guard responder.thread != nil else { Glibc.close(fd); throw MTLSError(.internal, "cannot start the http-01 responder thread") }
        case .webroot(let directory):
            let dir = directory + "/.well-known/acme-challenge"
            for d in [directory + "/.well-known", dir] where mkdir(d, 0o755) != 0 && errno != EEXIST {
                throw MTLSError(.io, "cannot create \(d): \(String(cString: strerror(errno)))")
            }
            let file = dir + "/" + token
            let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw MTLSError(.io, "cannot write \(file): \(String(cString: strerror(errno)))") }
            let bytes = Array(keyAuthorization.utf8)
            let n = write(fd, bytes, bytes.count)
            Glibc.close(fd)
            guard n == bytes.count else { unlink(file); throw MTLSError(.io, "cannot write \(file)") }
            responder.cleanup = { unlink(file) }
        case .tlsALPN01(let address, let port):
            let identity = try ChallengeResponder.alpnIdentity(identifier: identifier, keyAuthorization: keyAuthorization)
            var options = TLSServerOptions(identity: identity)
            options.alpn = ["acme-tls/1"]
            options.clientAuthentication = .none
            options.sessionTickets = false
            let listener = try TLSListener(address: address, port: port, options: options)
            responder.thread = BackgroundThread.startJoinable(name: "mtls-acme-alpn") { [responder] in
                while !responder.stopped.load(ordering: .acquiring) {
                    // The CA's validation is the handshake itself: accept, then close.
                    do { try listener.accept(timeout: 0.2).close() } catch let e as MTLSError where e.code == .timeout {
                    } catch {
                        usleep(50_000)  // a failed handshake or a transient error: no busy loop
                    }
                }
                listener.close()
            }
            guard responder.thread != nil else { listener.close(); throw MTLSError(.internal, "cannot start the tls-alpn-01 responder thread") }
        case .dns01(let command):
            let name = "_acme-challenge." + (identifier.hasPrefix("*.") ? String(identifier.dropFirst(2)) : identifier)
            let value = Base64URL.encode(Encoding.sha256(Array(keyAuthorization.utf8)))
            try runHook(command, action: "present", name: name, value: value, identifier: identifier)
            responder.cleanup = { _ = try? runHook(command, action: "cleanup", name: name, value: value, identifier: identifier) }
        }
        return responder
    }

    /// Stops the responder (joins its thread, removes files or records).
    func stop() {
        stopped.store(true, ordering: .releasing)
        if let thread { pthread_join(thread, nil) }
        thread = nil
        cleanup?()
        cleanup = nil
    }

    // MARK: http-01

    /// A minimal HTTP/1.1 responder: the token's path gets the key authorization, anything
    /// else 404. One request per connection; requests are read up to 8 KiB.
    private func serveHTTP(_ listener: Int32, path: String, body: [UInt8]) {
        while !stopped.load(ordering: .acquiring) {
            guard let (fd, _) = try? Socket.accept(listener, deadline: Deadline(seconds: 0.2)) else { continue }
            defer { Glibc.close(fd) }
            Socket.setNonBlocking(fd, true)
            var request: [UInt8] = []
            let deadline = Deadline(seconds: 5)
            while HTTPSClient.find([13, 10, 13, 10], in: request) == nil && request.count < 8192 {
                guard (try? Socket.wait(fd, forWriting: false, deadline: deadline, what: "http-01 read")) != nil else { break }
                var buf = [UInt8](repeating: 0, count: 2048)
                let n = read(fd, &buf, buf.count)
                if n <= 0 { break }
                request += buf[..<n]
            }
            let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self).split(separator: " ")
            let found = line.count >= 2 && line[0] == "GET" && String(line[1]) == path
            let payload = found ? body : Array("not found\n".utf8)
            let head = "HTTP/1.1 \(found ? "200 OK" : "404 Not Found")\r\nContent-Type: text/plain\r\nContent-Length: \(payload.count)\r\nConnection: close\r\n\r\n"
            let out = Array(head.utf8) + payload
            var sent = 0
            while sent < out.count {
                let n = out[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n > 0 { sent += n; continue }
                if errno == EAGAIN, (try? Socket.wait(fd, forWriting: true, deadline: deadline, what: "http-01 write")) != nil { continue }
                break
            }
        }
    }

    // MARK: tls-alpn-01

    /// The RFC 8737 certificate: self-signed, the identifier as its only SAN (DNS or IP), and
    /// the critical acmeIdentifier extension (1.3.6.1.5.5.7.1.31) holding the SHA-256 of the key
    /// authorization as an OCTET STRING — encoded by OpenSSL.
    package static func alpnIdentity(identifier: String, keyAuthorization: String) throws -> Identity {
        let key = try PrivateKey.generate(.ecP256)
        let digest = Encoding.sha256(Array(keyAuthorization.utf8))
        guard let octets = ASN1_OCTET_STRING_new() else { throw MTLSError(.noMemory, "out of memory") }
        defer { ASN1_OCTET_STRING_free(octets) }
        guard ASN1_OCTET_STRING_set(octets, digest, Int32(digest.count)) == 1,
              let inner = derEncode({ i2d_ASN1_OCTET_STRING(octets, $0) }) else {
            throw MTLSError.openSSL(.internal, "cannot encode the acmeIdentifier value")
        }
        guard let value = ASN1_OCTET_STRING_new() else { throw MTLSError(.noMemory, "out of memory") }
        defer { ASN1_OCTET_STRING_free(value) }
        guard ASN1_OCTET_STRING_set(value, inner, Int32(inner.count)) == 1, let oid = OBJ_txt2obj("1.3.6.1.5.5.7.1.31", 1) else {
            throw MTLSError.openSSL(.internal, "cannot make the acmeIdentifier extension")
        }
        defer { ASN1_OBJECT_free(oid) }
        guard let ext = X509_EXTENSION_create_by_OBJ(nil, oid, 1, value) else {
            throw MTLSError.openSSL(.internal, "cannot make the acmeIdentifier extension")
        }
        defer { X509_EXTENSION_free(ext) }
        let isIP = Socket.isIPLiteral(identifier)
        let cert = try SelfSigned.make(key: key, commonName: isIP ? "acme-tls-alpn-01" : identifier,
                                       dnsNames: isIP ? [] : [identifier], ipAddresses: isIP ? [identifier] : [],
                                       validityDays: 7, extensions: [ext])
        return try Identity(privateKey: key, leaf: cert)
    }

    // MARK: dns-01

    /// Runs the user's hook (an executable, or a `/bin/sh -c` command line) and waits for it; a non-zero exit is an error.
    static func runHook(_ command: String, action: String, name: String, value: String, identifier: String) throws {
        // A path to an executable runs directly with the three arguments; anything else is a
        // shell command line that sees them as $1 $2 $3.
        let direct = !command.contains(" ") && access(command, X_OK) == 0
        let words: [String] = direct ? [command, action, name, value] : ["/bin/sh", "-c", command, "mtls-dns-hook", action, name, value]
        var argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var env: [UnsafeMutablePointer<CChar>?] = []
        var e = environ
        while let p = e.pointee { env.append(strdup(p)); e += 1 }
        let added: [String] = ["MTLS_ACME_ACTION=\(action)", "MTLS_ACME_TXT_NAME=\(name)", "MTLS_ACME_TXT_VALUE=\(value)",
                               "MTLS_ACME_IDENTIFIER=\(identifier)"]
        env += added.map { strdup($0) }
        env.append(nil)
        defer { for p in env { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, direct ? command : "/bin/sh", nil, nil, &argv, &env)
        guard rc == 0 else { throw MTLSError(.io, "cannot run the dns-01 hook: \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = (status & 0x7f) == 0
        let code = (status >> 8) & 0xff
        guard exited && code == 0 else {
            throw MTLSError(.challengeFailed, "the dns-01 hook (\(action) \(name)) failed with status \(exited ? code : 128 + (status & 0x7f))")
        }
    }
}

/// Self-signed certificates libmtls makes for itself (the tls-alpn-01 certificate, the
/// enrollment record's carrier), built and signed by OpenSSL.
enum SelfSigned {
    static func make(key: PrivateKey, commonName: String, dnsNames: [String] = [], ipAddresses: [String] = [],
                     validityDays: Int, extensions: [OpaquePointer] = []) throws -> Certificate {
        guard let x = X509_new_ex(LibraryContext.shared.ctx, nil) else { throw MTLSError.openSSL(.noMemory, "X509_new_ex failed") }
        // Freed here: what is returned is the certificate parsed again from its DER (below).
        defer { X509_free(x) }
        guard X509_set_version(x, Int(X509_VERSION_3)) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the version") }
        try CertificateBuilder.setRandomSerial(x)
        guard let name = X509_NAME_new() else { throw MTLSError.openSSL(.noMemory, "X509_NAME_new failed") }
        defer { X509_NAME_free(name) }
        let cn = Array(commonName.utf8)
        guard X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, cn, Int32(cn.count), -1, 0) == 1,
              X509_set_subject_name(x, name) == 1, X509_set_issuer_name(x, name) == 1 else {
            throw MTLSError.openSSL(.invalidArgument, "cannot use \"\(commonName)\" as a name")
        }
        let now = Date()
        try CertificateBuilder.setTime(x, now.addingTimeInterval(-CertificateBuilder.backdate), X509_set1_notBefore)
        try CertificateBuilder.setTime(x, now.addingTimeInterval(TimeInterval(validityDays) * 86400), X509_set1_notAfter)
        guard X509_set_pubkey(x, key.pkey) == 1 else { throw MTLSError.openSSL(.internal, "cannot set the public key") }
        if !dnsNames.isEmpty || !ipAddresses.isEmpty {
            try CertificateBuilder.addSubjectAltNames(x, dns: dnsNames, ips: ipAddresses)
        }
        for ext in extensions {
            guard X509_add_ext(x, ext, -1) == 1 else { throw MTLSError.openSSL(.internal, "cannot add an extension") }
        }
        try CertificateBuilder.sign(x, with: key)
        // As CertificateBuilder.build: X509_set_pubkey keeps `key`'s object itself, so the
        // certificate is parsed again to carry only the key its bytes encode.
        guard let der = derEncode({ i2d_X509(x, $0) }) else {
            throw MTLSError.openSSL(.internal, "cannot encode the certificate just made")
        }
        return try Certificate(der: der)
    }
}
