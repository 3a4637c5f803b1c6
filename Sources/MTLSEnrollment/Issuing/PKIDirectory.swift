internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A private PKI kept in one folder, as `mtls pki` makes it:
///
/// ```
/// D/root/cert.pem                      the root CA certificate (0644)
/// D/root/key.pem                       its private key (0600; encrypted with a key password)
/// D/root/crl-url, ocsp-url             where the root publishes its CRL and OCSP responder, if it
///                                       does (one URL each; what it issues carries them)
/// D/root/crl.pem, crl-number           the root's latest CRL, once written
/// D/ca/<ca>/cert.pem, key.pem          an intermediate CA (<ca> is its name as a slug:
///                                       "Customer A" → customer-a)
/// D/ca/<ca>/chain.pem                  the intermediate, then the root
/// D/ca/<ca>/crl-url, ocsp-url          where the intermediate publishes (as for the root)
/// D/ca/<ca>/revoked.txt                revocations: "<serial hex> <unix time> <reason>" per line
/// D/ca/<ca>/crl.pem, crl-number        the latest CRL and its number
/// D/ca/<ca>/issued/<name>/cert.pem     a server or client certificate issued by <ca>
/// D/ca/<ca>/issued/<name>/key.pem      its private key (0600)
/// D/ca/<ca>/issued/<name>/chain.pem    the leaf, the intermediate, the root
/// ```
///
/// Each item is written in a temporary folder beside its final place and renamed into place
/// once complete, so an interrupted command never leaves half an item behind. Not safe for two
/// processes changing the same folder at once.
public struct PKIDirectory: Sendable {
    /// The folder.
    public let path: String

    /// The PKI folder at `path` (nothing is read or created until a method is called).
    public init(path: String) { self.path = path }

    /// The root's folder, `D/root`.
    public var rootPath: String { path + "/root" }
    /// An intermediate's folder, `D/ca/<slug>`.
    public func caPath(_ name: String) throws -> String { path + "/ca/" + (try PKIDirectory.slug(name)) }

    /// One certificate and key written in the folder.
    public struct Item: Sendable {
        /// The key, the certificate, and the chain above it.
        public let identity: Identity
        /// The item's folder.
        public let directory: String
        /// The certificate, PEM: `DIR/cert.pem`.
        public var certificatePath: String { directory + "/cert.pem" }
        /// The private key, PEM (0600, encrypted when a key password was given): `DIR/key.pem`.
        public var keyPath: String { directory + "/key.pem" }
        /// The certificate followed by its issuers up to the root, PEM: `DIR/chain.pem`.
        public var chainPath: String { directory + "/chain.pem" }
    }

    // MARK: Making things

    /// Makes the root CA: `D/root/{cert.pem,key.pem}`. Fails with ``MTLSError/Code/duplicate``
    /// if the folder already has a root. `publication` is where the root will publish its CRL
    /// (and OCSP responder): the intermediates it issues carry the URLs.
    public func initRoot(commonName: String, keySpec: KeySpec = .issuingDefault, validityDays: Int? = nil,
                         keyPassword: SecretBytes? = nil, publication: CAPublication = .none,
                         now: Date = Date()) throws -> Item {
        guard !Self.exists(rootPath) else {
            throw MTLSError(.duplicate, "\(path) already has a root CA (\(rootPath))")
        }
        try publication.validate()
        // Everything that can fail on bad input fails before the folder is made.
        let identity = try CertificateAuthority.newRoot(commonName: commonName, keySpec: keySpec,
                                                        validityDays: validityDays, now: now)
        try Self.makeDirectories(path)
        try Self.writeItem(identity, at: rootPath, keyPassword: keyPassword, chain: false, publication: publication)
        return Item(identity: identity, directory: rootPath)
    }

    /// Makes an intermediate CA (path length 0) under the root: `D/ca/<slug>/`. `publication` is
    /// where the intermediate will publish its CRL (and OCSP responder): what it issues carries
    /// the URLs; the intermediate itself carries the root's.
    public func makeIntermediate(commonName: String, keySpec: KeySpec = .issuingDefault, validityDays: Int? = nil,
                                 keyPassword: SecretBytes? = nil, publication: CAPublication = .none,
                                 now: Date = Date()) throws -> Item {
        try publication.validate()
        let dir = try caPath(commonName)
        guard !Self.exists(dir) else {
            throw MTLSError(.duplicate, "an intermediate named \"\(commonName)\" already exists (\(dir))")
        }
        let root = try loadRoot(keyPassword: keyPassword)
        let identity = try root.issueWithNewKey(CertificateRequest(profile: .intermediate, commonName: commonName,
                                                                   validityDays: validityDays), keySpec: keySpec, now: now)
        try Self.makeDirectories(path + "/ca")
        try Self.writeItem(identity, at: dir, keyPassword: keyPassword, chain: true, publication: publication)
        return Item(identity: identity, directory: dir)
    }

    /// A `.p12` written with an issued certificate (``issue(_:caName:keySpec:keyPassword:p12:reissue:now:)``).
    public struct PKCS12Output: Sendable {
        /// Where to write it (0600); it must not exist yet.
        public var path: String
        /// Its password.
        public var password: SecretBytes
        /// Its encryption: modern (AES-256, SHA-256 MAC) or legacy (3DES, SHA-1 MAC).
        public var scheme: PKCS12ExportOptions.Scheme

        /// A `.p12` at `path` under `password`, `scheme` encryption (modern by default).
        public init(path: String, password: SecretBytes, scheme: PKCS12ExportOptions.Scheme = .modern) {
            self.path = path
            self.password = password
            self.scheme = scheme
        }
    }

    /// Issues a server or client certificate from the intermediate `caName`:
    /// `D/ca/<ca>/issued/<slug of the common name>/`, and with `p12` its `.p12` too
    /// (``PKCS12/exportIssued(_:password:scheme:)``), as one step: when the `.p12` cannot be
    /// made or written, the issued item is removed again, so a failure leaves neither behind.
    ///
    /// With `reissue`, a name already issued gets a new key and certificate: the old folder is
    /// kept beside it as `issued/<slug>@<old serial>/` (listed by ``inventory()``, revocable with
    /// its cert.pem), and is put back when the new one cannot be written. Without it, a name
    /// already issued is ``MTLSError/Code/duplicate``.
    public func issue(_ request: CertificateRequest, caName: String, keySpec: KeySpec = .issuingDefault,
                      keyPassword: SecretBytes? = nil, p12: PKCS12Output? = nil, reissue: Bool = false,
                      now: Date = Date()) throws -> Item {
        guard request.profile == .server || request.profile == .client else {
            throw MTLSError(.invalidArgument, "only server and client certificates are issued from an intermediate")
        }
        try request.validate()
        if let p12, Self.exists(p12.path) { throw MTLSError(.duplicate, "\(p12.path) already exists") }
        let caDir = try caPath(caName)
        let dir = caDir + "/issued/" + (try Self.slug(request.commonName))
        let previous = Self.exists(dir)
        guard !previous || reissue else {
            throw MTLSError(.duplicate, "\"\(request.commonName)\" was already issued by \"\(caName)\" (\(dir)): pass --reissue (reissue in the API) for a new certificate, the old one kept for revocation")
        }
        let (ca, chain) = try loadIntermediate(caName, keyPassword: keyPassword)
        let identity = try ca.issueWithNewKey(request, keySpec: keySpec, chain: chain, now: now)
        let p12Bytes = try p12.map { try PKCS12.exportIssued(identity, password: $0.password, scheme: $0.scheme) }
        let issuedDir = caDir + "/issued"
        let issuedDirExisted = Self.exists(issuedDir)
        try Self.makeDirectories(issuedDir)
        // The certificate issued before, kept (under its serial) so it can still be listed and revoked.
        var kept: String? = nil
        if previous {
            let old = try Certificate.load(path: dir + "/cert.pem")[0]
            let keep = dir + "@" + old.serialHex
            guard !Self.exists(keep), rename(dir, keep) == 0 else {
                throw MTLSError(.io, "cannot keep the previous certificate of \"\(request.commonName)\" as \(keep): \(String(cString: strerror(errno)))")
            }
            kept = keep
        }
        do {
            try Self.writeItem(identity, at: dir, keyPassword: keyPassword, chain: true)
        } catch {
            if let kept { _ = rename(kept, dir) }
            throw error
        }
        let item = Item(identity: identity, directory: dir)
        if let p12, var p12Bytes {
            defer { SecretBytes.wipe(&p12Bytes) }
            do {
                try FileIO.writeAtomically(p12.path, p12Bytes, mode: 0o600)
            } catch {
                // No certificate on disk without the .p12 that was asked for: the folder is left
                // as it was found.
                discard(item)
                if let kept { _ = rename(kept, dir) }
                if !issuedDirExisted { _ = rmdir(issuedDir) }
                throw error
            }
        }
        return item
    }

    /// Signs a certificate signing request as a server or client certificate from the
    /// intermediate `caName` (the profiles of ``issue(_:caName:keySpec:keyPassword:p12:reissue:now:)``; the
    /// CSR's self-signature must verify). The subject's key stays wherever it is: the folder
    /// keeps `D/ca/<ca>/issued/<slug of the common name>/cert.pem` and `chain.pem` (leaf,
    /// intermediate, root) so the certificate can be listed and revoked like the others.
    /// Returns the certificate and the chain above it.
    public func sign(_ csr: CertificateSigningRequest, request: CertificateRequest, caName: String,
                     keyPassword: SecretBytes? = nil, now: Date = Date()) throws -> (Certificate, [Certificate]) {
        guard request.profile == .server || request.profile == .client else {
            throw MTLSError(.invalidArgument, "only server and client certificates are issued from an intermediate")
        }
        try request.validate()
        let caDir = try caPath(caName)
        let dir = caDir + "/issued/" + (try Self.slug(request.commonName))
        guard !Self.exists(dir) else {
            throw MTLSError(.duplicate, "\"\(request.commonName)\" was already issued by \"\(caName)\" (\(dir))")
        }
        let (ca, chain) = try loadIntermediate(caName, keyPassword: keyPassword)
        let leaf = try ca.issue(request, csr: csr, now: now)
        try Self.makeDirectories(caDir + "/issued")
        let tmp = dir + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        guard mkdir(tmp, 0o700) == 0 else {
            throw MTLSError(errno == ENOSPC ? .diskFull : .io, "cannot create \(tmp): \(String(cString: strerror(errno)))")
        }
        do {
            try FileIO.writeAtomically(tmp + "/cert.pem", Array(leaf.pem.utf8), mode: 0o644)
            try FileIO.writeAtomically(tmp + "/chain.pem", Array(([leaf] + chain).map(\.pem).joined().utf8), mode: 0o644)
            guard rename(tmp, dir) == 0 else {
                throw MTLSError(.io, "cannot create \(dir): \(String(cString: strerror(errno)))")
            }
        } catch {
            Self.removeTree(tmp)
            throw error
        }
        return (leaf, chain)
    }

    /// Removes an item this folder just wrote (when a later step of the same command failed).
    public func discard(_ item: Item) {
        let tmp = item.directory + ".discard-\(getpid())"
        if rename(item.directory, tmp) == 0 { Self.removeTree(tmp) }
    }

    // MARK: Loading

    /// The root CA with its key.
    public func loadRoot(keyPassword: SecretBytes?) throws -> CertificateAuthority {
        guard Self.exists(rootPath + "/cert.pem") else {
            throw MTLSError(.notFound, "\(path) has no root CA: run `mtls pki init --dir \(path) --name ...` first")
        }
        return try Self.loadCA(at: rootPath, keyPassword: keyPassword)
    }

    /// An intermediate CA with its key, and the chain above it (intermediate, root).
    public func loadIntermediate(_ name: String, keyPassword: SecretBytes?) throws -> (CertificateAuthority, [Certificate]) {
        let dir = try caPath(name)
        guard Self.exists(dir + "/cert.pem") else {
            let known = intermediateNames()
            throw MTLSError(.notFound, "no intermediate named \"\(name)\" in \(path)"
                + (known.isEmpty ? "" : " (there is: \(known.joined(separator: ", ")))"))
        }
        let ca = try Self.loadCA(at: dir, keyPassword: keyPassword)
        let chain = try Certificate.load(path: dir + "/chain.pem")
        return (ca, chain)
    }

    /// The common names of the intermediates in the folder, sorted.
    public func intermediateNames() -> [String] {
        Self.list(path + "/ca").compactMap { slug in
            (try? Certificate.load(path: path + "/ca/" + slug + "/cert.pem"))?.first?.subjectSummary
        }.sorted()
    }

    /// Loads an issued leaf certificate (`D/ca/<ca>/issued/<name>/cert.pem`).
    public func issuedCertificate(caName: String, name: String) throws -> Certificate {
        let file = try caPath(caName) + "/issued/" + (try Self.slug(name)) + "/cert.pem"
        guard Self.exists(file) else { throw MTLSError(.notFound, "\"\(caName)\" issued nothing named \"\(name)\" (\(file) is missing)") }
        return try Certificate.load(path: file)[0]
    }

    /// One certificate of the folder, as ``inventory()`` lists it.
    public struct Entry: Sendable {
        /// Root, intermediate, or (from its EKU) server or client.
        public let profile: CertificateProfile
        /// The issuing intermediate's name, for server and client certificates.
        public let caName: String?
        /// The certificate.
        public let certificate: Certificate
        /// The certificate file.
        public let path: String
        /// Its revocation, when the issuing intermediate recorded one.
        public let revocation: Revocation?
    }

    /// Every certificate in the folder: the root, then each intermediate followed by what it
    /// issued, sorted by name. Throws ``MTLSError/Code/notFound`` when the folder has no root.
    public func inventory() throws -> [Entry] {
        let rootFile = rootPath + "/cert.pem"
        guard Self.exists(rootFile) else {
            throw MTLSError(.notFound, "\(path) has no root CA: run `mtls pki init --dir \(path) --name ...` first")
        }
        var out = [Entry(profile: .root, caName: nil, certificate: try Certificate.load(path: rootFile)[0],
                         path: rootFile, revocation: nil)]
        for slug in Self.list(path + "/ca").sorted() {
            let dir = path + "/ca/" + slug
            guard let ca = try? Certificate.load(path: dir + "/cert.pem")[0] else { continue }
            out.append(Entry(profile: .intermediate, caName: nil, certificate: ca, path: dir + "/cert.pem", revocation: nil))
            let revoked = try revocations(caName: ca.subjectSummary)
            for name in Self.list(dir + "/issued").sorted() {
                let file = dir + "/issued/" + name + "/cert.pem"
                guard let leaf = try? Certificate.load(path: file)[0] else { continue }
                let profile: CertificateProfile = (leaf.extendedKeyUsages ?? []).contains(ExtendedKeyUsage.serverAuth) ? .server : .client
                out.append(Entry(profile: profile, caName: ca.subjectSummary, certificate: leaf, path: file,
                                 revocation: revoked.first { $0.serialHex == leaf.serialHex }))
            }
        }
        return out
    }

    // MARK: Revocation

    /// The revocations recorded for intermediate `caName`.
    public func revocations(caName: String) throws -> [Revocation] {
        try Self.revocations(file: try caPath(caName) + "/revoked.txt")
    }

    static func revocations(file: String) throws -> [Revocation] {
        guard Self.exists(file) else { return [] }
        let text = String(decoding: try FileIO.read(file), as: UTF8.self)
        return try text.split(separator: "\n").enumerated().map { (n, line) in
            let f = line.split(separator: " ").map(String.init)
            guard f.count >= 2, let t = Int64(f[1]) else {
                throw MTLSError(.parse, "\(file): line \(n + 1) is not \"<serial hex> <unix time> [reason]\"")
            }
            let reason = f.count > 2 ? Revocation.Reason(name: f[2]) : nil
            return Revocation(serialHex: f[0], date: Date(timeIntervalSince1970: TimeInterval(t)), reason: reason)
        }
    }

    /// Records that `certificate` (issued by `caName`) is revoked, then writes a new CRL.
    /// Revoking twice is an error (``MTLSError/Code/duplicate``).
    @discardableResult
    public func revoke(_ certificate: Certificate, caName: String, reason: Revocation.Reason? = nil,
                       crlValidityDays: Int = CertificateAuthority.defaultCRLValidityDays, keyPassword: SecretBytes?, now: Date = Date()) throws -> (path: String, der: [UInt8]) {
        let (ca, _) = try loadIntermediate(caName, keyPassword: keyPassword)
        let signedByCA = X509_verify(certificate.x509, X509_get0_pubkey(ca.certificate.x509)) == 1
        OpenSSLErrorQueue.clear()
        guard certificate.issuerNameDER == ca.certificate.subjectNameDER, signedByCA else {
            throw MTLSError(.invalidArgument, "\"\(certificate.subjectSummary)\" was not issued by \"\(caName)\"")
        }
        var list = try revocations(caName: caName)
        guard !list.contains(where: { $0.serialHex == certificate.serialHex }) else {
            throw MTLSError(.duplicate, "\"\(certificate.subjectSummary)\" (serial \(certificate.serialHex)) is already revoked")
        }
        list.append(Revocation(serialHex: certificate.serialHex, date: now, reason: reason))
        // The CRL is made before anything is written, so a failure leaves both files as they were.
        let crl = try nextCRL(ca, dir: try caPath(caName), revocations: list, validityDays: crlValidityDays, now: now)
        let text = list.map { "\($0.serialHex) \(Int64($0.date.timeIntervalSince1970))" + ($0.reason.map { " \($0.name)" } ?? "") }
            .joined(separator: "\n") + "\n"
        try FileIO.writeAtomically(try caPath(caName) + "/revoked.txt", Array(text.utf8), mode: 0o644)
        try writeCRL(crl, dir: try caPath(caName))
        return (try caPath(caName) + "/crl.pem", crl.der)
    }

    /// Writes a new CRL for `caName` with the recorded revocations (`D/ca/<ca>/crl.pem`) and
    /// returns its path and DER.
    @discardableResult
    public func makeCRL(caName: String, validityDays: Int = CertificateAuthority.defaultCRLValidityDays, keyPassword: SecretBytes?,
                        now: Date = Date()) throws -> (path: String, der: [UInt8]) {
        let (ca, _) = try loadIntermediate(caName, keyPassword: keyPassword)
        let crl = try nextCRL(ca, dir: try caPath(caName), revocations: try revocations(caName: caName), validityDays: validityDays, now: now)
        try writeCRL(crl, dir: try caPath(caName))
        return (try caPath(caName) + "/crl.pem", crl.der)
    }

    /// One CRL written by ``publishCRLs(to:validityDays:keyPassword:now:)``.
    public struct PublishedCRL: Sendable {
        /// The CA's name (its CN).
        public let caName: String
        /// Whether it is the root.
        public let isRoot: Bool
        /// Where the CA says its CRL is served.
        public let url: String
        /// The DER file written (the URL's last path segment, in the output folder).
        public let path: String
        /// How many certificates it lists.
        public let revokedCount: Int
        /// Its nextUpdate.
        public let nextUpdate: Date
    }

    /// Writes a fresh CRL (DER, 0644) for every CA of the folder that publishes one (made with a
    /// CRL URL) into `outputDirectory`, each named as its URL's last path segment, ready for a
    /// web server to serve the folder as is; each CA's `crl.pem` is updated too. CAs without a
    /// CRL URL are left out. Two CAs naming the same file is ``MTLSError/Code/duplicate``, found
    /// before anything is written.
    public func publishCRLs(to outputDirectory: String, validityDays: Int = CertificateAuthority.defaultCRLValidityDays,
                            keyPassword: SecretBytes?, now: Date = Date()) throws -> [PublishedCRL] {
        guard Self.exists(rootPath + "/cert.pem") else {
            throw MTLSError(.notFound, "\(path) has no root CA: run `mtls pki init --dir \(path) --name ...` first")
        }
        var cas: [(dir: String, isRoot: Bool)] = [(rootPath, true)]
        cas += Self.list(path + "/ca").sorted().map { (path + "/ca/" + $0, false) }
        var plan: [(dir: String, isRoot: Bool, url: String, file: String)] = []
        var files: [String: String] = [:]
        for ca in cas {
            guard let url = try Self.readPublication(ca.dir).crlURL else { continue }
            let file = try CAPublication.fileName(ofCRLURL: url)
            if let other = files[file] {
                throw MTLSError(.duplicate, "\(other) and \(ca.dir) both publish their CRL as \(file)")
            }
            files[file] = ca.dir
            plan.append((ca.dir, ca.isRoot, url, file))
        }
        if !plan.isEmpty { try Self.makeDirectories(outputDirectory) }
        var out: [PublishedCRL] = []
        for item in plan {
            let ca = try Self.loadCA(at: item.dir, keyPassword: keyPassword)
            let revoked = try Self.revocations(file: item.dir + "/revoked.txt")
            let crl = try nextCRL(ca, dir: item.dir, revocations: revoked, validityDays: validityDays, now: now)
            let target = outputDirectory + "/" + item.file
            try FileIO.writeAtomically(target, crl.der, mode: 0o644)
            try writeCRL(crl, dir: item.dir)
            out.append(PublishedCRL(caName: ca.certificate.subjectSummary, isRoot: item.isRoot, url: item.url, path: target,
                                    revokedCount: revoked.count,
                                    nextUpdate: now.addingTimeInterval(TimeInterval(validityDays) * 86400)))
        }
        return out
    }

    /// Where the CA in `dir` publishes (its `crl-url` and `ocsp-url` files; none when absent).
    static func readPublication(_ dir: String) throws -> CAPublication {
        func read(_ name: String) throws -> String? {
            let file = dir + "/" + name
            guard exists(file) else { return nil }
            let text = String(decoding: try FileIO.read(file, limit: 2048), as: UTF8.self).filter { !$0.isWhitespace }
            return text.isEmpty ? nil : text
        }
        let p = CAPublication(crlURL: try read("crl-url"), ocspURL: try read("ocsp-url"))
        try p.validate()
        return p
    }

    private func nextCRL(_ ca: CertificateAuthority, dir: String, revocations: [Revocation],
                         validityDays: Int, now: Date) throws -> (der: [UInt8], number: UInt64) {
        let numberFile = dir + "/crl-number"
        var number: UInt64 = 1
        if Self.exists(numberFile) {
            let text = String(decoding: try FileIO.read(numberFile, limit: 64), as: UTF8.self)
            guard let n = UInt64(text.filter { !$0.isWhitespace }) else {
                throw MTLSError(.parse, "\(numberFile) does not hold a number")
            }
            number = n + 1
        }
        return (try ca.makeCRL(revocations: revocations, number: number, validityDays: validityDays, now: now), number)
    }

    private func writeCRL(_ crl: (der: [UInt8], number: UInt64), dir: String) throws {
        try FileIO.writeAtomically(dir + "/crl.pem", Array(CertificateAuthority.crlPEM(crl.der).utf8), mode: 0o644)
        try FileIO.writeAtomically(dir + "/crl-number", Array("\(crl.number)\n".utf8), mode: 0o644)
    }

    // MARK: Files

    /// A name as a folder name: lowercase ASCII letters and digits, other runs turned into one
    /// `-` ("Customer A" → `customer-a`, "api.example.com" → `api.example.com`).
    static func slug(_ name: String) throws -> String {
        var out = ""
        for s in name.lowercased().unicodeScalars {
            if (s >= "a" && s <= "z") || (s >= "0" && s <= "9") || s == "." || s == "_" {
                out.unicodeScalars.append(s)
            } else if !out.hasSuffix("-") {
                out.append("-")
            }
        }
        while out.hasPrefix("-") || out.hasPrefix(".") { out.removeFirst() }
        while out.hasSuffix("-") { out.removeLast() }
        guard !out.isEmpty else {
            throw MTLSError(.invalidArgument, "\"\(name)\" has no letters or digits to name a folder with")
        }
        return out
    }

    static func loadCA(at dir: String, keyPassword: SecretBytes?) throws -> CertificateAuthority {
        let cert = try Certificate.load(path: dir + "/cert.pem")[0]
        let keyFile = dir + "/key.pem"
        var pem = try FileIO.readSecret(keyFile, kind: .privateKey).withBytes { Array($0) }
        defer { SecretBytes.wipe(&pem) }
        let key: PrivateKey
        do { key = try PrivateKey(pem: pem, password: keyPassword) } catch let e as MTLSError where e.code == .badPassword {
            throw MTLSError(.badPassword, keyPassword == nil
                ? "\(keyFile) is encrypted: give the key password (--password-file)"
                : "wrong key password for \(keyFile)")
        }
        return try CertificateAuthority(certificate: cert, privateKey: key, publication: try readPublication(dir))
    }

    /// Writes cert.pem, key.pem (0600) and, for `chain`, chain.pem into a temporary folder
    /// beside `dir`, then renames it to `dir`.
    static func writeItem(_ identity: Identity, at dir: String, keyPassword: SecretBytes?, chain: Bool,
                          publication: CAPublication = .none) throws {
        let tmp = dir + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        guard mkdir(tmp, 0o700) == 0 else {
            throw MTLSError(errno == ENOSPC ? .diskFull : .io, "cannot create \(tmp): \(String(cString: strerror(errno)))")
        }
        var done = false
        defer { if !done { removeTree(tmp) } }
        let keyPEM = try identity.privateKey.pemFile(password: keyPassword)
        try keyPEM.withBytes { try FileIO.writeAtomically(tmp + "/key.pem", Array($0), mode: 0o600) }
        try FileIO.writeAtomically(tmp + "/cert.pem", Array(identity.leaf.pem.utf8), mode: 0o644)
        if chain {
            try FileIO.writeAtomically(tmp + "/chain.pem", Array(identity.allCertificates.map(\.pem).joined().utf8), mode: 0o644)
        }
        if let url = publication.crlURL { try FileIO.writeAtomically(tmp + "/crl-url", Array((url + "\n").utf8), mode: 0o644) }
        if let url = publication.ocspURL { try FileIO.writeAtomically(tmp + "/ocsp-url", Array((url + "\n").utf8), mode: 0o644) }
        _ = chmod(tmp, 0o755)
        guard rename(tmp, dir) == 0 else {
            throw MTLSError(errno == EEXIST || errno == ENOTEMPTY ? .duplicate : .io,
                            "cannot move \(tmp) to \(dir): \(String(cString: strerror(errno)))")
        }
        done = true
    }

    static func exists(_ p: String) -> Bool { FileIO.exists(p) }

    static func makeDirectories(_ p: String) throws {
        var built = p.hasPrefix("/") ? "" : "."
        for part in p.split(separator: "/") {
            built += "/" + part
            if mkdir(built, 0o755) != 0 && errno != EEXIST {
                throw MTLSError(.io, "cannot create \(built): \(String(cString: strerror(errno)))")
            }
        }
        var st = stat()
        guard stat(p, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw MTLSError(.io, "\(p) is not a folder")
        }
    }

    static func list(_ dir: String) -> [String] {
        guard let d = opendir(dir) else { return [] }
        defer { closedir(d) }
        var names: [String] = []
        while let e = readdir(d) {
            let name = withUnsafePointer(to: e.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
            if !name.hasPrefix(".") && !name.contains(".tmp-") { names.append(name) }
        }
        return names
    }

    /// Removes a temporary folder made by ``writeItem`` (flat: files only).
    static func removeTree(_ dir: String) {
        if let d = opendir(dir) {
            while let e = readdir(d) {
                let name = withUnsafePointer(to: e.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
                if name != "." && name != ".." { unlink(dir + "/" + name) }
            }
            closedir(d)
        }
        rmdir(dir)
    }
}
