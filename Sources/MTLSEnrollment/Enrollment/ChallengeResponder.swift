internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Answers one ACME challenge while the CA validates it, then goes away.
final class ChallengeResponder: @unchecked Sendable {
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
            // The one small responder of libmtls: concurrent clients, each under a short deadline,
            // with a cap, so silent connections to the port cannot make the CA's validation fail.
            let path = "/.well-known/acme-challenge/" + token
            let body = Array(keyAuthorization.utf8)
            let http = try HTTPResponder(address: address, port: port, threadName: "mtls-http-01") { request in
                guard request.method == "GET" || request.method == "HEAD", request.path == path else {
                    return .status(404)
                }
                return HTTPAnswer(status: 200, body: body)
            }
            responder.cleanup = { http.stop() }
        case .webroot(let directory):
            let file = try WebrootFile(directory: directory, token: token, contents: Array(keyAuthorization.utf8))
            responder.cleanup = { file.remove() }
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

    // MARK: tls-alpn-01

    /// The RFC 8737 certificate: self-signed, the identifier as its only SAN (DNS or IP), and
    /// the critical acmeIdentifier extension (1.3.6.1.5.5.7.1.31) holding the SHA-256 of the key
    /// authorization as an OCTET STRING — encoded by OpenSSL.
    static func alpnIdentity(identifier: String, keyAuthorization: String) throws -> Identity {
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

/// An http-01 answer written under a web server's root, at
/// `DIRECTORY/.well-known/acme-challenge/TOKEN`, without following any link below the root the
/// operator named: each folder is opened from its parent's descriptor with `O_NOFOLLOW` (made
/// 0755 when missing), and the file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so a link
/// or a file someone planted there (the token is the CA's choice) is refused, never written
/// through. Removed through the same folder descriptor.
package final class WebrootFile: @unchecked Sendable {
    // @unchecked: set once in init; remove() is called once, by the responder's stop().
    private let folder: Int32
    private let name: String
    private let path: String

    package init(directory: String, token: String, contents: [UInt8]) throws {
        let root = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { throw MTLSError(.io, "cannot open the webroot \(directory): \(String(cString: strerror(errno)))") }
        defer { Glibc.close(root) }
        let wellKnown = try WebrootFile.folder(root, ".well-known", path: directory + "/.well-known")
        defer { Glibc.close(wellKnown) }
        let dirPath = directory + "/.well-known/acme-challenge"
        folder = try WebrootFile.folder(wellKnown, "acme-challenge", path: dirPath)
        name = token
        path = dirPath + "/" + token
        let fd = openat(folder, token, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let e = errno
            Glibc.close(folder)
            if e == EEXIST {
                throw MTLSError(.io, "\(path) already exists (a file or a link someone put there): the challenge file is not written")
            }
            throw MTLSError(.io, "cannot create \(path): \(String(cString: strerror(e)))")
        }
        var written = 0
        while written < contents.count {
            let n = contents[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n > 0 { written += n } else if n < 0 && errno == EINTR { continue } else { break }
        }
        Glibc.close(fd)
        guard written == contents.count else {
            unlinkat(folder, token, 0)
            Glibc.close(folder)
            throw MTLSError(.io, "cannot write \(path)")
        }
    }

    /// The folder `name` under the folder `parent`, made when missing, opened without following
    /// a link.
    private static func folder(_ parent: Int32, _ name: String, path: String) throws -> Int32 {
        if mkdirat(parent, name, 0o755) != 0 && errno != EEXIST {
            throw MTLSError(.io, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        let fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            if e == ELOOP || e == ENOTDIR {
                throw MTLSError(.io, "\(path) is a link or not a folder: the challenge file is not written through it")
            }
            throw MTLSError(.io, "cannot open \(path): \(String(cString: strerror(e)))")
        }
        return fd
    }

    /// Removes the file (whatever now has its name in the folder) and closes the folder.
    package func remove() {
        unlinkat(folder, name, 0)
        Glibc.close(folder)
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
