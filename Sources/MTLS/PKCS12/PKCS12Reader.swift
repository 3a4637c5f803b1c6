internal import COpenSSL
import FoundationEssentials

/// Safety limits applied to PKCS#12 input. Iteration counts are read from the file's algorithm
/// parameters and checked BEFORE the KDF or MAC runs, so a hostile file fails fast instead of
/// keeping a thread busy for minutes.
public enum PKCS12Limits {
    /// The highest iteration count accepted for one KDF or MAC: 1,000,000 (above the 600,000
    /// OWASP recommends for PBKDF2-SHA256; common producers use 2,048 to 100,000).
    public static let maxIterations = 1_000_000
    /// The most iterations accepted for a whole file: the MAC and every encrypted item together.
    public static let maxTotalIterations = 4_000_000
    /// The highest scrypt cost parameter N accepted (2^20); r is limited to 32 and p to 16.
    public static let maxScryptCost = 1 << 20
    /// The most safe bags accepted in one file (keys, certificates and others together).
    public static let maxBags = 10_000
}

/// Reads a PKCS#12 file bag by bag (OpenSSL's `PKCS12_parse` keeps one key only).
///
/// Password semantics: `nil` is the PKCS#12 "no password" (an absent BMPString), the empty
/// password is a BMPString holding only the terminating zero; files made with one do not open
/// with the other. OpenSSL does every decryption, MAC and KDF; this type only walks the
/// structure, checks limits and algorithm availability, and classifies failures.
struct PKCS12Reader {
    let data: [UInt8]
    let password: SecretBytes?

    /// A private key found in a key bag, with its bag attributes.
    private struct KeyEntry {
        let key: PrivateKey
        let friendlyName: String?
        let localKeyID: [UInt8]?
    }

    /// A certificate found in a cert bag, with its bag attributes.
    private struct CertEntry {
        let cert: Certificate
        let friendlyName: String?
        let localKeyID: [UInt8]?
    }

    /// Running state of one read.
    private final class State {
        var keys: [KeyEntry] = []
        var certs: [CertEntry] = []
        var bagCount = 0
        var iterationsUsed = 0
        /// The MAC was present and did not verify: the first decryption decides between a
        /// wrong password (it fails too) and corrupt data (it succeeds).
        var macFailed = false
        /// The MAC verified, so the password is right and any later failure means damage.
        var macVerified = false
        var decryptedSomething = false
        /// The first item that did not decrypt while nothing had decrypted yet.
        var failedDecryption: String?
    }

    func read() throws -> PKCS12Contents {
        guard data.count <= PKCS12.maxInputSize else {
            throw MTLSError(.limitExceeded, "PKCS#12 input of \(data.count) bytes exceeds the \(PKCS12.maxInputSize)-byte limit")
        }
        guard !data.isEmpty else { throw MTLSError(.notPKCS12, "empty input: not a PKCS#12 file") }

        // The password as OpenSSL wants it: a pointer (NULL for "no password") and a length.
        // The buffer keeps a trailing NUL so the empty password has a non-NULL pointer.
        var pw = [CChar]()
        if let password {
            if password.withBytes({ $0.contains(0) }) {
                throw MTLSError(.invalidArgument, "a PKCS#12 password cannot contain a NUL byte")
            }
            pw.reserveCapacity(password.count + 1)
            password.withBytes { for b in $0 { pw.append(CChar(bitPattern: b)) } }
            pw.append(0)
        }
        defer { pw.withUnsafeMutableBytes { if let b = $0.baseAddress { mtls_ossl_OPENSSL_cleanse(b, $0.count) } } }

        return try pw.withUnsafeBufferPointer { buf in
            let pass = password == nil ? nil : buf.baseAddress
            let passLen = Int32(password?.count ?? 0)
            return try LibraryContext.shared.asThreadDefault {
                try read(pass: pass, passLen: passLen)
            }
        }
    }

    // MARK: Structure

    private func read(pass: UnsafePointer<CChar>?, passLen: Int32) throws -> PKCS12Contents {
        defer { OpenSSLErrorQueue.clear() }
        let (p12Opt, consumed) = data.withUnsafeBufferPointer { buf -> (OpaquePointer?, Int) in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            let r = d2i_PKCS12(nil, &p, buf.count)
            return (r, p.map { $0 - buf.baseAddress! } ?? 0)
        }
        guard let p12 = p12Opt else { throw notDecodable() }
        defer { PKCS12_free(p12) }
        if consumed != data.count {
            throw MTLSError(.corrupt, "\(data.count - consumed) bytes of trailing data after the PKCS#12 structure")
        }

        let state = State()
        if PKCS12_mac_present(p12) == 1 {
            try checkMAC(p12, pass: pass, passLen: passLen, state: state)
        }

        guard let safes = PKCS12_unpack_authsafes(p12) else {
            // signedData contents (public-key integrity mode) carry no MAC; anything else that
            // does not decode is damage.
            if OpenSSLErrorQueue.peekLastReason() == PKCS12_R_CONTENT_TYPE_NOT_DATA && !state.macFailed {
                throw MTLSError.openSSL(.unsupported, "the PKCS#12 contents are not password-integrity data (public-key integrity mode is not supported)")
            }
            throw MTLSError.openSSL(.corrupt, "the PKCS#12 contents cannot be decoded: the file is damaged")
        }
        defer { mtls_ossl_sk_PKCS7_pop_free(safes) }
        for i in 0..<mtls_ossl_sk_PKCS7_num(safes) {
            guard let p7 = mtls_ossl_sk_PKCS7_value(safes, i) else { continue }
            try readAuthenticatedSafe(p7, index: Int(i), pass: pass, passLen: passLen, state: state)
        }
        if let what = state.failedDecryption {
            // Nothing decrypted with this password: it is the wrong one.
            throw MTLSError(.badPassword, password == nil
                ? "cannot decrypt \(what) without a password (the file may need one, possibly the empty password)"
                : "wrong password: cannot decrypt \(what)")
        }
        if state.macFailed {
            // Nothing could tell a wrong password from damage (no encrypted item).
            throw MTLSError(.badPassword, "the PKCS#12 MAC does not verify: wrong password (or a damaged file)")
        }
        return try assemble(state)
    }

    /// The error for bytes `d2i_PKCS12` rejects: damage when they start like a PKCS#12 PFX
    /// (`SEQUENCE { INTEGER 3, ...`), otherwise not PKCS#12 at all.
    private func notDecodable() -> MTLSError {
        let stack = OpenSSLErrorQueue.drain().joined(separator: "; ")
        if Certificate.looksLikePEM(data) {
            return MTLSError(.notPKCS12, "this is PEM text, not a binary PKCS#12 file")
        }
        if Self.startsLikePFX(data) {
            return MTLSError(.corrupt, "the PKCS#12 data is truncated or damaged: \(stack)")
        }
        return MTLSError(.notPKCS12, "not a PKCS#12 file")
    }

    /// Whether `d` opens with the DER header of a PFX: a SEQUENCE whose first element is
    /// INTEGER 3. Only a sniff to choose an error code; OpenSSL does the decoding.
    static func startsLikePFX(_ d: [UInt8]) -> Bool {
        guard d.count >= 5, d[0] == 0x30 else { return false }
        var i = 2
        if d[1] & 0x80 != 0 {
            let n = Int(d[1] & 0x7f)
            guard (1...4).contains(n) else { return false }
            i = 2 + n
        }
        guard d.count >= i + 3 else { return false }
        return d[i] == 0x02 && d[i + 1] == 0x01 && d[i + 2] == 0x03
    }

    private func checkMAC(_ p12: OpaquePointer, pass: UnsafePointer<CChar>?, passLen: Int32, state: State) throws {
        var macAlg: UnsafePointer<X509_ALGOR>? = nil
        var iterInt: UnsafePointer<ASN1_INTEGER>? = nil
        PKCS12_get0_mac(nil, &macAlg, nil, &iterInt, p12)
        // An absent iteration count means 1 (RFC 7292).
        let iterations = try iterInt.map { try Self.iterationCount($0, what: "MAC") } ?? 1
        try charge(iterations, what: "MAC", state: state)
        var mdObj: OpaquePointer? = nil
        if let macAlg { X509_ALGOR_get0(&mdObj, nil, nil, macAlg) }
        let mdNID = mdObj.map { OBJ_obj2nid($0) } ?? NID_undef
        guard mdNID != NID_undef, let md = EVP_MD_fetch(LibraryContext.shared.ctx, OBJ_nid2sn(mdNID), nil) else {
            throw MTLSError(.unsupported, "unsupported PKCS#12 MAC digest \(Self.name(mdObj))")
        }
        EVP_MD_free(md)
        if PKCS12_verify_mac(p12, pass, passLen) == 1 {
            state.macVerified = true
            return
        }
        OpenSSLErrorQueue.clear()
        // "No password" and the empty password are different PKCS#12 inputs, but PBES2 derives
        // the same key from both: a file made with one would decrypt with the other and look
        // damaged. Tell the caller which one it needs instead.
        if passLen == 0 {
            var empty: CChar = 0
            let otherVerifies = pass == nil
                ? PKCS12_verify_mac(p12, &empty, 0) == 1
                : PKCS12_verify_mac(p12, nil, 0) == 1
            if otherVerifies {
                throw MTLSError(.badPassword, pass == nil
                    ? "wrong password: the file is protected with the empty password, not with no password"
                    : "wrong password: the file is protected with no password (NULL), not with the empty password")
            }
            OpenSSLErrorQueue.clear()
        }
        state.macFailed = true
    }

    private func readAuthenticatedSafe(_ p7: UnsafeMutablePointer<PKCS7>, index: Int, pass: UnsafePointer<CChar>?,
                                       passLen: Int32, state: State) throws {
        let nid = mtls_ossl_PKCS7_type_nid(p7)
        let bags: OpaquePointer
        switch nid {
        case NID_pkcs7_data:
            guard let b = PKCS12_unpack_p7data(p7) else {
                throw MTLSError.openSSL(.corrupt, "PKCS#12 content #\(index + 1) cannot be decoded")
            }
            bags = b
        case NID_pkcs7_encrypted:
            guard let alg = mtls_ossl_PKCS7_encrypted_algor(p7) else {
                throw MTLSError(.corrupt, "PKCS#12 encrypted content #\(index + 1) has no algorithm")
            }
            try checkPBEOrDamage(alg, what: "encrypted content #\(index + 1)", state: state)
            let b = PKCS12_unpack_p7encdata(p7, pass, passLen)
            guard try decryptionOutcome(succeeded: b != nil, what: "encrypted content #\(index + 1)", state: state),
                  let b else { return }
            bags = b
        case NID_pkcs7_enveloped:
            throw MTLSError(.unsupported, "PKCS#12 content #\(index + 1) is public-key encrypted (envelopedData), which is not supported")
        default:
            throw MTLSError(.unsupported, "PKCS#12 content #\(index + 1) has unsupported type \(Self.name(nid))")
        }
        defer { mtls_ossl_sk_PKCS12_SAFEBAG_pop_free(bags) }
        try readBags(bags, pass: pass, passLen: passLen, state: state, depth: 0)
    }

    private func readBags(_ bags: OpaquePointer, pass: UnsafePointer<CChar>?, passLen: Int32,
                          state: State, depth: Int) throws {
        guard depth < 8 else { throw MTLSError(.limitExceeded, "PKCS#12 safe contents nested more than 8 deep") }
        for i in 0..<mtls_ossl_sk_PKCS12_SAFEBAG_num(bags) {
            guard let bag = mtls_ossl_sk_PKCS12_SAFEBAG_value(bags, i) else { continue }
            state.bagCount += 1
            guard state.bagCount <= PKCS12Limits.maxBags else {
                throw MTLSError(.limitExceeded, "more than \(PKCS12Limits.maxBags) bags in the PKCS#12 file")
            }
            try readBag(bag, pass: pass, passLen: passLen, state: state, depth: depth)
        }
    }

    private func readBag(_ bag: OpaquePointer, pass: UnsafePointer<CChar>?, passLen: Int32,
                         state: State, depth: Int) throws {
        let number = state.bagCount
        switch PKCS12_SAFEBAG_get_nid(bag) {
        case NID_keyBag:
            guard let p8 = PKCS12_SAFEBAG_get0_p8inf(bag) else {
                throw MTLSError(.corrupt, "key bag #\(number) is empty")
            }
            try addKey(p8, bag: bag, number: number, state: state)
        case NID_pkcs8ShroudedKeyBag:
            guard let sig = PKCS12_SAFEBAG_get0_pkcs8(bag) else {
                throw MTLSError(.corrupt, "shrouded key bag #\(number) is empty")
            }
            var alg: UnsafePointer<X509_ALGOR>? = nil
            X509_SIG_get0(sig, &alg, nil)
            guard let alg else { throw MTLSError(.corrupt, "shrouded key bag #\(number) has no algorithm") }
            try checkPBEOrDamage(alg, what: "the private key (bag #\(number))", state: state)
            let p8 = PKCS12_decrypt_skey_ex(bag, pass, passLen, LibraryContext.shared.ctx, nil)
            guard try decryptionOutcome(succeeded: p8 != nil, what: "the private key (bag #\(number))", state: state),
                  let p8 else { return }
            defer { PKCS8_PRIV_KEY_INFO_free(p8) }
            try addKey(p8, bag: bag, number: number, state: state)
        case NID_certBag:
            guard PKCS12_SAFEBAG_get_bag_nid(bag) == NID_x509Certificate else { return } // SDSI: ignored
            guard let x = PKCS12_SAFEBAG_get1_cert(bag) else {
                throw MTLSError.openSSL(.corrupt, "certificate bag #\(number) cannot be decoded")
            }
            let cert = try Certificate(takingOwnership: x)
            state.certs.append(CertEntry(cert: cert, friendlyName: Self.friendlyName(bag), localKeyID: Self.localKeyID(bag)))
        case NID_safeContentsBag:
            guard let inner = PKCS12_SAFEBAG_get0_safes(bag) else { return }
            try readBags(inner, pass: pass, passLen: passLen, state: state, depth: depth + 1)
        default:
            return // CRL and secret bags carry nothing an identity needs
        }
    }

    private func addKey(_ p8: OpaquePointer?, bag: OpaquePointer, number: Int, state: State) throws {
        guard let pkey = EVP_PKCS82PKEY_ex(p8, LibraryContext.shared.ctx, nil) else {
            if state.decryptedSomething || state.macVerified {
                throw MTLSError.openSSL(.unsupported, "the private key in bag #\(number) has an unsupported or damaged algorithm")
            }
            throw MTLSError.openSSL(.corrupt, "the private key in bag #\(number) cannot be decoded")
        }
        state.keys.append(KeyEntry(key: PrivateKey(takingOwnership: pkey),
                                   friendlyName: Self.friendlyName(bag), localKeyID: Self.localKeyID(bag)))
    }

    /// Classifies a decryption result; returns whether the item decrypted (the caller skips it
    /// otherwise). Anything that decrypts proves the password right, so a failed MAC or another
    /// item that does not decrypt means damage. With a verified MAC any failure is damage.
    /// Failures with nothing decrypted so far are remembered: if nothing decrypts by the end of
    /// the file, the password is wrong (reported by the caller). A wrong password thus costs one
    /// KDF per encrypted item, never more.
    private func decryptionOutcome(succeeded: Bool, what: String, state: State) throws -> Bool {
        if succeeded {
            OpenSSLErrorQueue.clear()
            if state.macFailed {
                throw MTLSError(.corrupt, "the PKCS#12 MAC does not verify although the password decrypts \(what): the file is damaged")
            }
            if let failed = state.failedDecryption {
                throw MTLSError(.corrupt, "\(failed) does not decrypt although the password decrypts \(what): the file is damaged")
            }
            state.decryptedSomething = true
            return true
        }
        if state.macVerified || state.decryptedSomething {
            throw MTLSError.openSSL(.corrupt, "cannot decrypt \(what) although the password is right: the file is damaged")
        }
        OpenSSLErrorQueue.clear()
        if state.failedDecryption == nil { state.failedDecryption = what }
        return false
    }

    // MARK: Algorithms and limits

    /// ``checkPBE(_:what:state:)``, except that an unknown algorithm under a MAC that did not
    /// verify is most likely a damaged byte in its OID, and is reported as damage.
    private func checkPBEOrDamage(_ alg: UnsafePointer<X509_ALGOR>, what: String, state: State) throws {
        do {
            try checkPBE(alg, what: what, state: state)
        } catch let e as MTLSError where e.code == .unsupported && state.macFailed {
            throw MTLSError(.corrupt, "the PKCS#12 MAC does not verify and \(e.message): the file is damaged (or the password is wrong)")
        }
    }

    /// Checks a password-based encryption algorithm before it runs: known scheme, available
    /// cipher and PRF (RC2 and DES need the legacy provider), and iteration count within limits.
    private func checkPBE(_ alg: UnsafePointer<X509_ALGOR>, what: String, state: State) throws {
        var obj: OpaquePointer? = nil
        var ptype: Int32 = 0
        var pval: UnsafeRawPointer? = nil
        X509_ALGOR_get0(&obj, &ptype, &pval, alg)
        let nid = obj.map { OBJ_obj2nid($0) } ?? NID_undef
        let param = alg.pointee.parameter
        let ctx = LibraryContext.shared.ctx

        if nid == NID_pbes2 {
            guard let pbe2 = mtls_ossl_PBE2PARAM_unpack(param) else {
                throw MTLSError(.corrupt, "bad PBES2 parameters for \(what)")
            }
            defer { PBE2PARAM_free(pbe2) }
            // Cipher
            let cipherObj = pbe2.pointee.encryption?.pointee.algorithm
            let cipherNID = cipherObj.map { OBJ_obj2nid($0) } ?? NID_undef
            guard cipherNID != NID_undef, let c = EVP_CIPHER_fetch(ctx, OBJ_nid2sn(cipherNID), nil) else {
                throw MTLSError(.unsupported, "unsupported PBES2 cipher \(Self.name(cipherObj)) for \(what)")
            }
            EVP_CIPHER_free(c)
            // KDF
            let kdfObj = pbe2.pointee.keyfunc?.pointee.algorithm
            switch kdfObj.map({ OBJ_obj2nid($0) }) ?? NID_undef {
            case NID_id_pbkdf2:
                guard let kdf = mtls_ossl_PBKDF2PARAM_unpack(pbe2.pointee.keyfunc.pointee.parameter) else {
                    throw MTLSError(.corrupt, "bad PBKDF2 parameters for \(what)")
                }
                defer { PBKDF2PARAM_free(kdf) }
                let prfObj = kdf.pointee.prf?.pointee.algorithm
                let prfNID = prfObj.map { OBJ_obj2nid($0) } ?? NID_hmacWithSHA1
                var mdNID: Int32 = NID_undef
                guard EVP_PBE_find_ex(EVP_PBE_TYPE_PRF, prfNID, nil, &mdNID, nil, nil) == 1,
                      let md = EVP_MD_fetch(ctx, OBJ_nid2sn(mdNID), nil) else {
                    throw MTLSError(.unsupported, "unsupported PBKDF2 PRF \(prfObj.map { Self.name($0) } ?? "hmacWithSHA1") for \(what)")
                }
                EVP_MD_free(md)
                let iterations = try Self.iterationCount(kdf.pointee.iter, what: what)
                try charge(iterations, what: what, state: state)
            case NID_id_scrypt:
                guard let s = mtls_ossl_SCRYPT_PARAMS_unpack(pbe2.pointee.keyfunc.pointee.parameter) else {
                    throw MTLSError(.corrupt, "bad scrypt parameters for \(what)")
                }
                defer { SCRYPT_PARAMS_free(s) }
                let n = ASN1_INTEGER_get(s.pointee.costParameter)
                let r = ASN1_INTEGER_get(s.pointee.blockSize)
                let p = ASN1_INTEGER_get(s.pointee.parallelizationParameter)
                OpenSSLErrorQueue.clear()
                // Time grows with N * r * p: bound each.
                guard n > 0, n <= PKCS12Limits.maxScryptCost, (1...32).contains(r), (1...16).contains(p) else {
                    throw MTLSError(.limitExceeded, "scrypt parameters N=\(n) r=\(r) p=\(p) for \(what) exceed the limits (N <= \(PKCS12Limits.maxScryptCost), r <= 32, p <= 16)")
                }
                try charge(Int(n), what: what, state: state)
            default:
                throw MTLSError(.unsupported, "unsupported PBES2 key derivation \(Self.name(kdfObj)) for \(what)")
            }
            return
        }

        // PKCS#12 (pbeWithSHAAnd...) and PKCS#5 v1 schemes: one OID names cipher and digest.
        var cipherNID: Int32 = NID_undef
        var mdNID: Int32 = NID_undef
        guard nid != NID_undef, EVP_PBE_find_ex(EVP_PBE_TYPE_OUTER, nid, &cipherNID, &mdNID, nil, nil) == 1 else {
            throw MTLSError(.unsupported, "unsupported encryption algorithm \(Self.name(obj)) for \(what)")
        }
        if cipherNID != NID_undef {
            guard let c = EVP_CIPHER_fetch(ctx, OBJ_nid2sn(cipherNID), nil) else {
                OpenSSLErrorQueue.clear()
                let legacy = LibraryContext.shared.hasLegacy ? "" : " (OpenSSL's legacy provider is not installed)"
                throw MTLSError(.unsupported, "unsupported cipher \(Self.name(cipherNID)) of \(Self.name(obj)) for \(what)\(legacy)")
            }
            EVP_CIPHER_free(c)
        }
        guard let pbe = mtls_ossl_PBEPARAM_unpack(param) else {
            throw MTLSError(.corrupt, "bad \(Self.name(obj)) parameters for \(what)")
        }
        defer { PBEPARAM_free(pbe) }
        let iterations = try Self.iterationCount(pbe.pointee.iter, what: what)
        try charge(iterations, what: what, state: state)
    }

    /// Counts `iterations` against the per-algorithm and the per-file limits.
    private func charge(_ iterations: Int, what: String, state: State) throws {
        guard iterations <= PKCS12Limits.maxIterations else {
            throw MTLSError(.limitExceeded, "\(what) uses \(iterations) iterations, above the limit of \(PKCS12Limits.maxIterations)")
        }
        state.iterationsUsed += iterations
        guard state.iterationsUsed <= PKCS12Limits.maxTotalIterations else {
            throw MTLSError(.limitExceeded, "the PKCS#12 file needs more than \(PKCS12Limits.maxTotalIterations) KDF iterations in total")
        }
    }

    private static func iterationCount(_ i: UnsafePointer<ASN1_INTEGER>?, what: String) throws -> Int {
        guard let i else { return 1 }
        let v = ASN1_INTEGER_get(i)
        OpenSSLErrorQueue.clear()
        if v == -1 && i.pointee.length > 8 || v > PKCS12Limits.maxIterations {
            throw MTLSError(.limitExceeded, "\(what) uses an iteration count above the limit of \(PKCS12Limits.maxIterations)")
        }
        guard v > 0 else { throw MTLSError(.corrupt, "\(what) has an invalid iteration count \(v)") }
        return v
    }
    private static func iterationCount(_ i: UnsafeMutablePointer<ASN1_INTEGER>?, what: String) throws -> Int {
        try iterationCount(UnsafePointer(i), what: what)
    }

    // MARK: Attributes and names

    private static func friendlyName(_ bag: OpaquePointer) -> String? {
        guard let p = PKCS12_get_friendlyname(bag) else { return nil }
        defer { mtls_ossl_OPENSSL_free(p) }
        return String(cString: p)
    }

    private static func localKeyID(_ bag: OpaquePointer) -> [UInt8]? {
        guard let s = mtls_ossl_ASN1_TYPE_octet_string(PKCS12_SAFEBAG_get0_attr(bag, NID_localKeyID)) else { return nil }
        let n = Int(ASN1_STRING_length(s))
        guard n > 0, let d = mtls_ossl_ASN1_STRING_get0_data(s) else { return nil }
        return Array(UnsafeBufferPointer(start: d, count: n))
    }

    /// An OID's short name (`aes-256-cbc`) or, when OpenSSL does not know it, its dotted form.
    static func name(_ obj: OpaquePointer?) -> String {
        guard let obj else { return "(none)" }
        var buf = [CChar](repeating: 0, count: 128)
        let nid = OBJ_obj2nid(obj)
        if nid != NID_undef, let ln = OBJ_nid2ln(nid) {
            OBJ_obj2txt(&buf, Int32(buf.count), obj, 1)
            return "\(String(cString: ln)) (\(String(cBuffer: buf)))"
        }
        OBJ_obj2txt(&buf, Int32(buf.count), obj, 1)
        return "OID \(String(cBuffer: buf))"
    }
    static func name(_ nid: Int32) -> String {
        guard nid != NID_undef, let sn = OBJ_nid2sn(nid) else { return "(unknown)" }
        return String(cString: sn)
    }

    // MARK: Identities

    /// Pairs every key with its certificate (first by localKeyID, then by public key) and
    /// builds one identity per key, in file order.
    private func assemble(_ state: State) throws -> PKCS12Contents {
        let certificates = state.certs.map(\.cert)
        var identities: [Identity] = []
        for (n, k) in state.keys.enumerated() {
            let byID = k.localKeyID.flatMap { id in state.certs.first { $0.localKeyID == id } }
            let leafEntry: CertEntry
            if let byID, k.key.matches(byID.cert) {
                leafEntry = byID
            } else if let byKey = state.certs.first(where: { k.key.matches($0.cert) }) {
                leafEntry = byKey
            } else {
                let label = k.friendlyName.map { " (\"\($0)\")" } ?? ""
                if certificates.isEmpty {
                    throw MTLSError(.noIdentity, "the PKCS#12 file holds private key #\(n + 1)\(label) but no certificate for it")
                }
                if let byID {
                    throw MTLSError(.keyMismatch, "private key #\(n + 1)\(label) does not match the certificate \"\(byID.cert.subjectSummary)\" that carries its local key id")
                }
                throw MTLSError(.keyMismatch, "private key #\(n + 1)\(label) matches none of the \(certificates.count) certificate(s) in the file")
            }
            let identity = try Identity(privateKey: k.key, leaf: leafEntry.cert, certificates: certificates,
                                        friendlyName: k.friendlyName ?? leafEntry.friendlyName,
                                        localKeyID: k.localKeyID ?? leafEntry.localKeyID)
            identities.append(identity)
        }
        return PKCS12Contents(identities: identities, certificates: certificates)
    }
}
