internal import COpenSSL
import FoundationEssentials

/// Safety limits applied to PKCS#12 input. Iteration counts are read from the file's algorithm
/// parameters and checked BEFORE the KDF or MAC runs, so a hostile file fails fast instead of
/// keeping a thread busy for minutes.
public enum PKCS12Limits {
    /// The highest iteration count accepted for one KDF or MAC: 1,000,000 (above the 600,000
    /// OWASP recommends for PBKDF2-SHA256; common producers use 2,048 to 100,000).
    public static let maxIterations = 1_000_000
    /// The KDF work budget of a whole file, in PBKDF2 iterations: the MAC and every encrypted
    /// item together. A scrypt item costs N·r·p (one unit of scrypt work takes about as long as
    /// one PBKDF2-HMAC-SHA256 iteration). Every item visible before decryption is charged before
    /// any KDF runs, so a hostile file fails without doing its work.
    public static let maxTotalIterations = 4_000_000
    /// The highest scrypt cost parameter N accepted (2^20); r is limited to 32 and p to 16, and
    /// N·r·p counts against ``maxIterations`` and ``maxTotalIterations``.
    public static let maxScryptCost = 1 << 20
    /// The most password-encrypted items (encrypted contents and shrouded key bags) in one file.
    public static let maxEncryptedItems = 256
    /// The most safe bags accepted in one file (keys, certificates and others together).
    public static let maxBags = 10_000
}

/// Reads a PKCS#12 file bag by bag (OpenSSL's `PKCS12_parse` keeps one key only).
///
/// Password semantics: `nil` is the PKCS#12 "no password" (an absent BMPString), the empty
/// password is a BMPString holding only the terminating zero. Producers disagree on which one
/// "no password" means, so (as OpenSSL's `PKCS12_parse` does) a file given either is tried with
/// the other too, and ``PKCS12Contents/passwordEncoding`` says which opened it. OpenSSL does
/// every decryption, MAC and KDF; this type only walks the structure, checks limits and
/// algorithm availability, and classifies failures.
package struct PKCS12Reader {
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

    /// The KDF work charged for one file, over every password encoding tried.
    private final class Budget {
        var iterationsUsed = 0
        var encryptedItems = 0
        /// Every item visible without decrypting (the MAC, encrypted contents, shrouded key bags
        /// in plain contents) was charged up front.
        var prescanned = false
    }

    /// Running state of one read.
    private final class State {
        let budget: Budget
        init(budget: Budget) { self.budget = budget }
        var keys: [KeyEntry] = []
        var certs: [CertEntry] = []
        var bagCount = 0
        /// Items inside decrypted contents were not visible to the prescan and are charged as met.
        var insideEncrypted = false
        /// Charging is off while the walk meets items the prescan already charged.
        var charging: Bool { !budget.prescanned || insideEncrypted }
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
            guard password.count <= Int(Int32.max) else {
                throw MTLSError(.limitExceeded, "a PKCS#12 password of \(password.count) bytes is too long")
            }
            pw.reserveCapacity(password.count + 1)
            password.withBytes { for b in $0 { pw.append(CChar(bitPattern: b)) } }
            pw.append(0)
        } else {
            pw.append(0)
        }
        defer { pw.withUnsafeMutableBytes { if let b = $0.baseAddress { mtls_ossl_OPENSSL_cleanse(b, $0.count) } } }

        let budget = Budget()
        return try pw.withUnsafeBufferPointer { buf in
            let passLen = Int32(password?.count ?? 0)
            return try LibraryContext.shared.asThreadDefault {
                guard passLen == 0 else {
                    return try read(pass: buf.baseAddress, passLen: passLen, encoding: .given, budget: budget)
                }
                // No password or the empty one: try the encoding asked for, then the other.
                let first: PKCS12PasswordEncoding = password == nil ? .absent : .empty
                let second: PKCS12PasswordEncoding = password == nil ? .empty : .absent
                do {
                    return try read(pass: first == .absent ? nil : buf.baseAddress, passLen: 0, encoding: first, budget: budget)
                } catch let e as MTLSError where e.code == .badPassword {
                    do {
                        return try read(pass: second == .absent ? nil : buf.baseAddress, passLen: 0, encoding: second, budget: budget)
                    } catch let e2 as MTLSError where e2.code == .badPassword {
                        throw MTLSError(.badPassword, "\(e.message) (tried both no password and the empty password)")
                    }
                }
            }
        }
    }

    // MARK: Structure

    private func read(pass: UnsafePointer<CChar>?, passLen: Int32, encoding: PKCS12PasswordEncoding,
                      budget: Budget) throws -> PKCS12Contents {
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

        let state = State(budget: budget)
        let hasMAC = PKCS12_mac_present(p12) == 1
        if !budget.prescanned {
            // Charge everything visible before any KDF or MAC runs.
            if hasMAC { try chargeMAC(p12, state: state) }
            try prescan(p12, state: state)
            budget.prescanned = true
        }
        if hasMAC {
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
            throw MTLSError(.badPassword, password == nil || password?.count == 0
                ? "cannot decrypt \(what) without a password (the file needs one: give it with --password-file FILE, the password argument in the C, Python and Swift APIs)"
                : "wrong password: cannot decrypt \(what)")
        }
        if state.macFailed {
            // Nothing could tell a wrong password from damage (no encrypted item).
            throw MTLSError(.badPassword, "the PKCS#12 MAC does not verify: wrong password (or a damaged file)")
        }
        return try assemble(state, encoding: encoding)
    }

    /// Charges the MAC's iterations (before it is verified).
    private func chargeMAC(_ p12: OpaquePointer, state: State) throws {
        var iterInt: UnsafePointer<ASN1_INTEGER>? = nil
        PKCS12_get0_mac(nil, nil, nil, &iterInt, p12)
        // An absent iteration count means 1 (RFC 7292).
        let iterations = try iterInt.map { try Self.iterationCount($0, what: "MAC") } ?? 1
        try charge(iterations, what: "MAC", item: false, state: state)
    }

    /// Charges every encrypted item visible without decrypting (encrypted contents and
    /// shrouded key bags in plain contents, nested ones included) against the file's budget and
    /// item cap, before any KDF runs. Only limits are reported here; unsupported or damaged
    /// items are reported by the walk, in file order, as before.
    private func prescan(_ p12: OpaquePointer, state: State) throws {
        guard let safes = PKCS12_unpack_authsafes(p12) else { OpenSSLErrorQueue.clear(); return }
        defer { mtls_ossl_sk_PKCS7_pop_free(safes) }
        func chargeAlgorithm(_ alg: UnsafePointer<X509_ALGOR>, what: String) throws {
            do { try checkPBE(alg, what: what, state: state) } catch let e as MTLSError where e.code == .limitExceeded {
                throw e
            } catch {
                OpenSSLErrorQueue.clear()
            }
        }
        func scanBags(_ bags: OpaquePointer, depth: Int) throws {
            guard depth < 8 else { return }
            for i in 0..<mtls_ossl_sk_PKCS12_SAFEBAG_num(bags) {
                guard let bag = mtls_ossl_sk_PKCS12_SAFEBAG_value(bags, i) else { continue }
                switch PKCS12_SAFEBAG_get_nid(bag) {
                case NID_pkcs8ShroudedKeyBag:
                    guard let sig = PKCS12_SAFEBAG_get0_pkcs8(bag) else { continue }
                    var alg: UnsafePointer<X509_ALGOR>? = nil
                    X509_SIG_get0(sig, &alg, nil)
                    if let alg { try chargeAlgorithm(alg, what: "a private key") }
                case NID_safeContentsBag:
                    if let inner = PKCS12_SAFEBAG_get0_safes(bag) { try scanBags(inner, depth: depth + 1) }
                default:
                    continue
                }
            }
        }
        for i in 0..<mtls_ossl_sk_PKCS7_num(safes) {
            guard let p7 = mtls_ossl_sk_PKCS7_value(safes, i) else { continue }
            switch mtls_ossl_PKCS7_type_nid(p7) {
            case NID_pkcs7_data:
                guard let bags = PKCS12_unpack_p7data(p7) else { OpenSSLErrorQueue.clear(); continue }
                defer { mtls_ossl_sk_PKCS12_SAFEBAG_pop_free(bags) }
                try scanBags(bags, depth: 0)
            case NID_pkcs7_encrypted:
                if let alg = mtls_ossl_PKCS7_encrypted_algor(p7) { try chargeAlgorithm(alg, what: "encrypted content #\(i + 1)") }
            default:
                continue
            }
        }
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
        PKCS12_get0_mac(nil, &macAlg, nil, nil, p12)
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
        // damaged. When the other encoding verifies, this one is simply wrong (the caller then
        // tries the other).
        if passLen == 0 {
            var empty: CChar = 0
            let otherVerifies = pass == nil
                ? PKCS12_verify_mac(p12, &empty, 0) == 1
                : PKCS12_verify_mac(p12, nil, 0) == 1
            OpenSSLErrorQueue.clear()
            if otherVerifies {
                throw MTLSError(.badPassword, pass == nil
                    ? "the file is protected with the empty password, not with no password"
                    : "the file is protected with no password (NULL), not with the empty password")
            }
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
            // Decrypted bags are freed on every path, the throwing ones included.
            guard let b else {
                _ = try decryptionOutcome(succeeded: false, what: "encrypted content #\(index + 1)", state: state)
                return
            }
            defer { mtls_ossl_sk_PKCS12_SAFEBAG_pop_free(b) }
            _ = try decryptionOutcome(succeeded: true, what: "encrypted content #\(index + 1)", state: state)
            state.insideEncrypted = true
            defer { state.insideEncrypted = false }
            try readBags(b, pass: pass, passLen: passLen, state: state, depth: 0)
            return
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
            // The decrypted key is freed (OpenSSL clears a PKCS#8 key's bytes when it frees it) on
            // every path, the throwing ones included.
            guard let p8 else {
                _ = try decryptionOutcome(succeeded: false, what: "the private key (bag #\(number))", state: state)
                return
            }
            defer { PKCS8_PRIV_KEY_INFO_free(p8) }
            _ = try decryptionOutcome(succeeded: true, what: "the private key (bag #\(number))", state: state)
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
                try charge(iterations, what: what, item: true, state: state)
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
                try charge(Int(n) * Int(r) * Int(p), what: what, item: true, state: state)
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
        try charge(iterations, what: what, item: true, state: state)
    }

    /// Counts `iterations` (or scrypt's N·r·p) against the per-algorithm and the per-file
    /// limits, and an encrypted `item` against the item cap. Items the prescan charged are not
    /// charged again by the walk.
    private func charge(_ iterations: Int, what: String, item: Bool, state: State) throws {
        guard iterations <= PKCS12Limits.maxIterations else {
            throw MTLSError(.limitExceeded, "\(what) needs \(iterations) units of KDF work, above the limit of \(PKCS12Limits.maxIterations) per item")
        }
        guard state.charging else { return }
        let budget = state.budget
        if item {
            budget.encryptedItems += 1
            guard budget.encryptedItems <= PKCS12Limits.maxEncryptedItems else {
                throw MTLSError(.limitExceeded, "the PKCS#12 file has more than \(PKCS12Limits.maxEncryptedItems) encrypted items")
            }
        }
        budget.iterationsUsed += iterations
        guard budget.iterationsUsed <= PKCS12Limits.maxTotalIterations else {
            throw MTLSError(.limitExceeded, "the PKCS#12 file needs more than \(PKCS12Limits.maxTotalIterations) units of KDF work in total (PBKDF2 iterations and scrypt N·r·p)")
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

    /// The friendlyName attribute, decoded from its BMPString (UTF-16 big-endian, surrogate
    /// pairs included) to exact UTF-8; nil when absent or not valid UTF-16.
    private static func friendlyName(_ bag: OpaquePointer) -> String? {
        guard let s = mtls_ossl_ASN1_TYPE_bmpstring(PKCS12_SAFEBAG_get0_attr(bag, NID_friendlyName)) else { return nil }
        let n = Int(ASN1_STRING_length(s))
        guard n > 0, n % 2 == 0, let d = mtls_ossl_ASN1_STRING_get0_data(s) else { return nil }
        return decodeBMPString(Array(UnsafeBufferPointer(start: d, count: n)))
    }

    /// UTF-16BE bytes to a String, refusing unpaired surrogates (nil) rather than guessing.
    /// A trailing NUL some producers add is dropped.
    package static func decodeBMPString(_ bytes: [UInt8]) -> String? {
        guard bytes.count % 2 == 0 else { return nil }
        var units: [UInt16] = []
        units.reserveCapacity(bytes.count / 2)
        var i = 0
        while i + 1 < bytes.count {
            units.append(UInt16(bytes[i]) << 8 | UInt16(bytes[i + 1]))
            i += 2
        }
        while units.last == 0 { units.removeLast() }
        var out = String.UnicodeScalarView()
        var it = units.makeIterator()
        var decoder = UTF16()
        loop: while true {
            switch decoder.decode(&it) {
            case .scalarValue(let v): out.append(v)
            case .emptyInput: break loop
            case .error: return nil
            }
        }
        return out.isEmpty ? nil : String(out)
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
    private func assemble(_ state: State, encoding: PKCS12PasswordEncoding) throws -> PKCS12Contents {
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
        return PKCS12Contents(identities: identities, certificates: certificates, passwordEncoding: encoding)
    }
}
