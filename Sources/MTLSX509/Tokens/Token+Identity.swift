internal import COpenSSL
internal import CP11Kit
import FoundationEssentials

extension Token {
    /// The identity a `pkcs11:` URI names: the certificate it matches (by `object`/`id`) and
    /// the private key with the same CKA_ID on the same token. The private key never leaves the
    /// token: the identity's ``PrivateKey`` signs through the token (its ``PrivateKey/tokenURI``
    /// is set), and keeps a session open (and the user logged in) for as long as it lives.
    ///
    /// The PIN comes from, in order: `pin`, `pinCallback`, the URI's `pin-value`, the file its
    /// `pin-source` names; a token that needs none (or has its own PIN pad) gets none.
    /// The module is the one at `modulePath`, else the URI's `module-path`/`module-name`, else
    /// every module registered with p11-kit.
    ///
    /// PIN safety: the PIN goes only to the token that holds the object (when the URI matches
    /// several tokens, the one that shows it without a login; when none does, the URI must name
    /// the token); a static PIN (`pin`, `pin-value`, `pin-source`) the token refused is not sent
    /// again while it is unchanged; a static PIN is not sent to a token at its final try unless
    /// `allowFinalTry` (``MTLSError/Code/pinLocked``). The callback is told the token's flags.
    ///
    /// Errors: ``MTLSError/Code/badURI`` (syntax, or a URI that matches several certificates),
    /// ``MTLSError/Code/tokenNotPresent`` (no token matches), ``MTLSError/Code/notFound``
    /// (no such certificate or key), ``MTLSError/Code/pinRequired``, ``MTLSError/Code/pinIncorrect``,
    /// ``MTLSError/Code/pinLocked``, ``MTLSError/Code/tokenRemoved``, ``MTLSError/Code/token``
    /// (anything else the module reports), ``MTLSError/Code/keyMismatch``.
    public static func identity(uri text: String, modulePath: String? = nil, pin: SecretBytes? = nil,
                                pinCallback: TokenPINCallback? = nil, allowFinalTry: Bool = false) throws -> Identity {
        try identity(uri: text, stored: nil, modulePath: modulePath, pin: pin, pinCallback: pinCallback,
                     allowFinalTry: allowFinalTry)
    }

    /// The identity of a token reference held in a store (`mtls store add-token`): the key is
    /// found on the token by the reference's URI; the certificate is the token's when it has
    /// one, else the stored certificate; the chain presented after the leaf is built from the
    /// stored chain and the other certificates on the token. PIN and errors as
    /// ``identity(uri:modulePath:pin:pinCallback:allowFinalTry:)``.
    public static func identity(reference: StoreTokenReference, modulePath: String? = nil, pin: SecretBytes? = nil,
                                pinCallback: TokenPINCallback? = nil, allowFinalTry: Bool = false) throws -> Identity {
        try identity(uri: reference.uri, stored: reference, modulePath: modulePath, pin: pin, pinCallback: pinCallback,
                     allowFinalTry: allowFinalTry)
    }

    /// How the PIN for one lookup is found, and the rules for sending it.
    struct PINPlan {
        let pin: SecretBytes?
        let callback: TokenPINCallback?
        let uri: PKCS11URI
        let allowFinalTry: Bool
    }

    private static func identity(uri text: String, stored: StoreTokenReference?, modulePath: String?, pin: SecretBytes?,
                                 pinCallback: TokenPINCallback?, allowFinalTry: Bool) throws -> Identity {
        let uri = try PKCS11URI(text)
        if let t = uri.type, t != .certificate, t != .privateKey {
            throw MTLSError(.badURI, "an identity URI names a certificate or a private key, not type=\(t.rawValue): \(text)")
        }
        let plan = PINPlan(pin: pin, callback: pinCallback, uri: uri, allowFinalTry: allowFinalTry)
        let candidates = try presentTokens(uri: uri, text: text, modulePath: modulePath)
        // The PIN goes only to a token that holds the object: with several tokens, the ones that
        // show it before any login; with one, that one (its objects may be private).
        var targets = candidates
        if candidates.count > 1 {
            targets = try candidates.filter { try holdsVisibly($0.session, uri: uri, stored: stored) }
            if targets.isEmpty {
                let names = candidates.map { "\"\($0.token.label)\"" }.joined(separator: ", ")
                throw MTLSError(.notFound, "none of the tokens \(names) shows \(describeObject(uri)) without a login, and the URI matches all of them: add token= (or serial=) to the URI so that the PIN goes only to the token that holds it")
            }
        }
        for c in targets {
            if let identity = try identity(on: c.session, token: c.token, info: c.info, uri: uri, plan: plan, stored: stored) {
                return identity
            }
        }
        throw MTLSError(.notFound, "no certificate matching \(describeObject(uri)) on token \(targets.map { "\"\($0.token.label)\"" }.joined(separator: ", "))")
    }

    /// A token present in a slot, with a session on it and PKCS#11's description of it.
    typealias PresentToken = (session: PKCS11Session, token: TokenInfo, info: CK_TOKEN_INFO)

    /// Token discovery, the one way: every token present that the URI (`uri`, parsed from
    /// `text`) matches by its module, token and slot attributes, in the module at `modulePath`,
    /// else the module the URI names, else every module registered with p11-kit; each with a new
    /// session (read-write for `readWrite`). ``MTLSError/Code/tokenNotPresent`` when none matches.
    static func presentTokens(uri: PKCS11URI, text: String, modulePath: String?, readWrite: Bool = false) throws -> [PresentToken] {
        let matcher = try P11KitURI(text)
        let found: [PresentToken] = try presentTokens(in: try PKCS11Module.candidates(path: modulePath, uri: uri), matching: matcher)
            .map { (try PKCS11Session(module: $0.module, slot: $0.slot, readWrite: readWrite), $0.token, $0.info) }
        if found.isEmpty { throw MTLSError(.tokenNotPresent, "no token present matches \(describeToken(uri)) (\(text))") }
        return found
    }

    /// The initialised tokens present in slots of `modules` that `matcher` matches by its module,
    /// slot and token attributes (every one when nil), in module and slot order, with PKCS#11's
    /// description of each; no session is opened. A slot whose token cannot be described (taken
    /// out meanwhile) is passed over. The one walk over modules and slots: identity lookup and
    /// enrollment (above) and ``PKCS11Modules``' listings go through it.
    static func presentTokens(in modules: [PKCS11Module], matching matcher: P11KitURI?) throws
        -> [(module: PKCS11Module, slot: CK_SLOT_ID, token: TokenInfo, info: CK_TOKEN_INFO)] {
        var found: [(module: PKCS11Module, slot: CK_SLOT_ID, token: TokenInfo, info: CK_TOKEN_INFO)] = []
        for m in modules where matcher?.matches(module: m.moduleInfo()) ?? true {
            for slot in try m.slotsWithToken() {
                guard let info = try? m.tokenInfo(slot), matcher?.matches(token: info) ?? true,
                      let slotInfo = try? m.slotInfo(slot), matcher?.matches(slot: slotInfo) ?? true,
                      let token = try TokenInfo(module: m, slot: slot, info: info, slotInfo: slotInfo) else { continue }
                found.append((m, slot, token, info))
            }
        }
        return found
    }

    /// Whether the token shows, without a login, an object the URI names (a certificate or a
    /// key with its `id`/`object`; any certificate or key when it names none).
    static func holdsVisibly(_ session: PKCS11Session, uri: PKCS11URI, stored: StoreTokenReference?) throws -> Bool {
        var template: [PKCS11Attribute] = []
        if let id = uri.id { template.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)) }
        if let label = uri.object { template.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        if !template.isEmpty { return try !session.findObjects(template, limit: 1).isEmpty }
        for cls in [CKO_CERTIFICATE, CKO_PRIVATE_KEY, CKO_PUBLIC_KEY] {
            if try !session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(cls))], limit: 1).isEmpty { return true }
        }
        return false
    }

    /// An X.509 certificate object on a token, with the attributes that select it.
    private struct TokenCertificate {
        let handle: CK_OBJECT_HANDLE
        let id: [UInt8]
        let label: String?
        let der: [UInt8]?
        /// CKA_SUBJECT and CKA_ISSUER: the DER names, to pick chain candidates without parsing
        /// every certificate (OpenSSL 3's d2i_X509 is not cheap).
        let subject: [UInt8]?
        let issuer: [UInt8]?
    }

    /// Every X.509 certificate on the token, read with one search and one attribute call each
    /// (tokens are slow at both; the leaf and the chain come from the same list).
    private static func certificates(on session: PKCS11Session) throws -> [TokenCertificate] {
        let types = [CK_ATTRIBUTE_TYPE(CKA_ID), CK_ATTRIBUTE_TYPE(CKA_LABEL), CK_ATTRIBUTE_TYPE(CKA_VALUE),
                     CK_ATTRIBUTE_TYPE(CKA_SUBJECT), CK_ATTRIBUTE_TYPE(CKA_ISSUER)]
        return try session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
                                        .ulong(CK_ATTRIBUTE_TYPE(CKA_CERTIFICATE_TYPE), CK_ULONG(CKC_X_509))])
            .map { h in
                let a = try session.attributes(h, types)
                return TokenCertificate(handle: h, id: a[types[0]] ?? [],
                                        label: a[types[1]].map { String(decoding: $0, as: UTF8.self) }, der: a[types[2]],
                                        subject: a[types[3]], issuer: a[types[4]])
            }
    }

    /// The identity on one token, or nil when the token has no matching certificate.
    private static func identity(on session: PKCS11Session, token: TokenInfo, info: CK_TOKEN_INFO, uri: PKCS11URI,
                                 plan: PINPlan, stored: StoreTokenReference?) throws -> Identity? {
        // Certificates are usually public objects; log in first only when the certificate is not
        // visible without it, or for the key.
        var loggedIn = false
        func logIn() throws {
            guard !loggedIn, token.loginRequired else { return }
            try login(session: session, token: token, plan: plan)
            loggedIn = true
        }
        func selected(_ all: [TokenCertificate]) -> [TokenCertificate] {
            all.filter { c in (uri.id.map { $0 == c.id } ?? true) && (uri.object.map { $0 == c.label } ?? true) }
        }
        var all = try certificates(on: session)
        var certs = selected(all)
        if certs.isEmpty && token.loginRequired {
            try logIn()
            all = try certificates(on: session)
            certs = selected(all)
        }
        if certs.isEmpty, uri.id != nil || uri.object != nil {
            // The URI may name the key by a label its certificate does not share: find the key,
            // then the certificate with the key's CKA_ID.
            try logIn()
            var selector: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))]
            if let id = uri.id { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)) }
            if let label = uri.object { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
            let keys = try session.findObjects(selector)
            if keys.count == 1, let keyID = try session.attribute(keys[0], CK_ATTRIBUTE_TYPE(CKA_ID)), !keyID.isEmpty {
                certs = all.filter { $0.id == keyID }
            }
        }
        if certs.isEmpty, let stored {
            // A key with no certificate object on the token: the stored certificate is its leaf.
            return try storedIdentity(on: session, token: token, info: info, uri: uri, stored: stored, others: all,
                                      plan: plan, logIn: logIn)
        }
        if certs.isEmpty { return nil }
        guard certs.count == 1 else {
            let labels = certs.map { $0.label.map { "\"\($0)\"" } ?? "(no label)" }
            throw MTLSError(.badURI, "\(uri.text) matches \(certs.count) certificates on token \"\(token.label)\" (\(labels.joined(separator: ", "))); add id= or object= to choose one")
        }
        let chosen = certs[0]
        guard let der = chosen.der else {
            throw MTLSError(.token, "the certificate \(describeObject(uri)) on token \"\(token.label)\" has no value")
        }
        let leaf = try Certificate(der: der)
        let id = chosen.id

        // The private key with the certificate's CKA_ID (its label when it has no ID).
        try logIn()
        var keyTemplate: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))]
        if !id.isEmpty {
            keyTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id))
        } else if let certLabel = chosen.label {
            keyTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(certLabel.utf8)))
        } else {
            throw MTLSError(.notFound, "the certificate \"\(leaf.subjectSummary)\" on token \"\(token.label)\" has neither CKA_ID nor label to find its private key by")
        }
        guard let key = try session.findObjects(keyTemplate, limit: 1).first else {
            throw MTLSError(.notFound, "no private key with the id \(Encoding.hex(id)) of certificate \"\(leaf.subjectSummary)\" on token \"\(token.label)\"")
        }
        let keyAttributes = try session.attributes(key, [CK_ATTRIBUTE_TYPE(CKA_LABEL), CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE),
                                                         CK_ATTRIBUTE_TYPE(CKA_ALWAYS_AUTHENTICATE)], guess: 256)
        let (privateKey, _) = try signingKey(key, attributes: keyAttributes, id: id, leaf: leaf, session: session,
                                                    token: token, info: info, plan: plan)

        // Other certificates on the token (a CA chain stored with the key) help build the chain:
        // those whose subject is an issuer on the leaf's path, and any whose names are unknown;
        // a stored reference adds its stored chain.
        var others: [Certificate] = stored?.chain ?? []
        var remaining = all.filter { $0.handle != chosen.handle }
        func parse(_ c: TokenCertificate) { if let der = c.der, let cert = try? Certificate(der: der) { others.append(cert) } }
        remaining.removeAll { c in
            guard c.subject == nil || c.issuer == nil else { return false }
            parse(c)
            return true
        }
        var wanted = chosen.issuer
        while let name = wanted, let i = remaining.firstIndex(where: { $0.subject == name }) {
            let issuer = remaining.remove(at: i)
            parse(issuer)
            wanted = issuer.issuer == issuer.subject ? nil : issuer.issuer
        }
        return try Identity(privateKey: privateKey, leaf: leaf, certificates: others, friendlyName: chosen.label,
                            localKeyID: id.isEmpty ? nil : id)
    }

    /// Where a `CKA_ALWAYS_AUTHENTICATE` key's PIN comes from for the context-specific login
    /// before each signature: the same sources as the user login (a callback is asked each
    /// time); nil for other keys (`attributes` must hold the key's CKA_ALWAYS_AUTHENTICATE).
    static func contextPIN(_ attributes: [CK_ATTRIBUTE_TYPE: [UInt8]], token: TokenInfo,
                           plan: PINPlan) -> (@Sendable () throws -> SecretBytes?)? {
        guard attributes[CK_ATTRIBUTE_TYPE(CKA_ALWAYS_AUTHENTICATE)]?.first ?? 0 != 0 else { return nil }
        let pin = plan.pin, callback = plan.callback, uri = plan.uri
        return {
            if let pin { return pin }
            if let callback {
                return try callback(TokenPINRequest(tokenLabel: token.label, tokenURI: token.uri, countLow: false,
                                                    finalTry: false, token: token))
            }
            if let v = uri.pinValue { return SecretBytes(v) }
            if let source = uri.pinSource { return try readPINSource(source) }
            return nil
        }
    }

    /// The token key must be the same kind as the certificate's (RSA, EC, Ed25519).
    static func checkKeyType(_ value: [UInt8]?, certificateKey: OpaquePointer, leaf: Certificate) throws {
        guard let value, value.count == MemoryLayout<CK_ULONG>.size else { return }
        let kt = value.withUnsafeBytes { $0.loadUnaligned(as: CK_ULONG.self) }
        let expected: CK_ULONG
        switch EVP_PKEY_get_base_id(certificateKey) {
        case EVP_PKEY_RSA: expected = CK_ULONG(CKK_RSA)
        case EVP_PKEY_EC: expected = CK_ULONG(CKK_EC)
        case EVP_PKEY_ED25519: expected = CK_ULONG(CKK_EC_EDWARDS)
        default: return  // TokenKey.make reports the unsupported type
        }
        guard kt == expected else {
            throw MTLSError(.keyMismatch, "the token's private key is not of the certificate \"\(leaf.subjectSummary)\"'s key type")
        }
    }

    /// Logs in with the first PIN available (see ``identity(uri:modulePath:pin:pinCallback:allowFinalTry:)``),
    /// under ``TokenLogin``'s rules.
    static func login(session: PKCS11Session, token known: TokenInfo, plan: PINPlan) throws {
        let token = TokenLogin.freshInfo(session, fallback: known)
        if token.userPINLocked {
            throw MTLSError(.pinLocked, "the user PIN of token \"\(token.label)\" is locked")
        }
        var chosen = plan.pin
        var origin = PINOrigin.given
        if chosen == nil, let callback = plan.callback {
            origin = .callback
            chosen = try callback(TokenPINRequest(tokenLabel: token.label, tokenURI: token.uri,
                                                  countLow: token.userPINCountLow, finalTry: token.userPINFinalTry,
                                                  token: token))
            if chosen == nil { throw MTLSError(.pinRequired, "no PIN was given for token \"\(token.label)\"") }
        }
        if chosen == nil, let v = plan.uri.pinValue { chosen = SecretBytes(v); origin = .uriValue }
        if chosen == nil, let source = plan.uri.pinSource { chosen = try readPINSource(source); origin = .uriSource(source) }
        if chosen == nil && !token.protectedAuthenticationPath {
            throw MTLSError(.pinRequired, "token \"\(token.label)\" needs a PIN (give one, a PIN callback, or pin-value/pin-source in the URI)")
        }
        try TokenLogin.logIn(session: session, token: token, pin: chosen, origin: origin, allowFinalTry: plan.allowFinalTry)
    }

    /// The identity of a stored reference whose key has no certificate object on the token: the
    /// key the URI names (by `id`/`object`; the only private key when it names neither), with
    /// the stored certificate as its leaf, proved to belong together by a signature.
    private static func storedIdentity(on session: PKCS11Session, token: TokenInfo, info: CK_TOKEN_INFO, uri: PKCS11URI,
                                       stored: StoreTokenReference, others: [TokenCertificate], plan: PINPlan,
                                       logIn: () throws -> Void) throws -> Identity? {
        try logIn()
        var selector: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))]
        if let id = uri.id { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)) }
        if let label = uri.object { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        let keys = try session.findObjects(selector, limit: 2)
        guard let key = keys.first else { return nil }
        guard keys.count == 1 else {
            throw MTLSError(.badURI, "\(uri.text) matches several private keys on token \"\(token.label)\"; add id= or object= to choose one")
        }
        let leaf = stored.certificate
        let attributes = try session.attributes(key, [CK_ATTRIBUTE_TYPE(CKA_LABEL), CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE),
                                                      CK_ATTRIBUTE_TYPE(CKA_ID), CK_ATTRIBUTE_TYPE(CKA_ALWAYS_AUTHENTICATE)],
                                                guess: 256)
        let id = attributes[CK_ATTRIBUTE_TYPE(CKA_ID)] ?? []
        let (privateKey, keyLabel) = try signingKey(key, attributes: attributes, id: id, leaf: leaf, session: session,
                                                    token: token, info: info, plan: plan)
        // The key's public half is the certificate's by construction; only a signature shows the
        // token key is the certificate's key.
        try proveKey(privateKey, belongsTo: leaf, tokenLabel: token.label)
        let tokenCertificates = others.compactMap { c in c.der.flatMap { try? Certificate(der: $0) } }
        return try Identity(privateKey: privateKey, leaf: leaf, certificates: stored.chain + tokenCertificates,
                            friendlyName: keyLabel, localKeyID: id.isEmpty ? nil : id)
    }

    /// The token key `key` as the private key of `leaf`: its type must match the certificate's
    /// key; it signs through the token (context-specific login for always-authenticate keys) and
    /// comes back after the token is removed and reinserted. Returns it with the key's label.
    private static func signingKey(_ key: CK_OBJECT_HANDLE, attributes: [CK_ATTRIBUTE_TYPE: [UInt8]], id: [UInt8],
                                   leaf: Certificate, session: PKCS11Session, token: TokenInfo, info: CK_TOKEN_INFO,
                                   plan: PINPlan) throws -> (PrivateKey, String?) {
        let keyLabel = attributes[CK_ATTRIBUTE_TYPE(CKA_LABEL)].map { String(decoding: $0, as: UTF8.self) }
        let keyURI = try P11KitURI.format(token: info, label: keyLabel, id: id.isEmpty ? nil : id,
                                          cls: CK_OBJECT_CLASS(CKO_PRIVATE_KEY))
        guard let publicKey = X509_get0_pubkey(leaf.x509) else {
            throw MTLSError.openSSL(.parse, "cannot read the public key of \"\(leaf.subjectSummary)\"")
        }
        try checkKeyType(attributes[CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)], certificateKey: publicKey, leaf: leaf)
        return (try tokenPrivateKey(key, attributes: attributes, keyURI: keyURI, id: id, label: keyLabel, publicKey: publicKey,
                                    session: session, token: token, plan: plan), keyLabel)
    }

    /// The one way a token key becomes a ``PrivateKey`` that signs on the token, for a handshake
    /// as for a CSR or any other signature: its context (the context-specific login before each
    /// signature of a `CKA_ALWAYS_AUTHENTICATE` key, with the PIN sources of `plan`; `attributes`
    /// must hold the key's CKA_ALWAYS_AUTHENTICATE) and its reconnection after the token came
    /// back. `publicKey` is the key's public half (not consumed).
    static func tokenPrivateKey(_ key: CK_OBJECT_HANDLE, attributes: [CK_ATTRIBUTE_TYPE: [UInt8]], keyURI: String,
                                id: [UInt8], label: String?, publicKey: OpaquePointer, session: PKCS11Session,
                                token: TokenInfo, plan: PINPlan) throws -> PrivateKey {
        let context = TokenKeyContext(session: session, key: key, uri: keyURI,
                                      contextPIN: contextPIN(attributes, token: token, plan: plan))
        reconnect(session, token: token, key: key, id: id, label: label, plan: plan)
        return PrivateKey(takingOwnership: try TokenKey.make(publicKey: publicKey, context: context), tokenURI: keyURI)
    }

    /// Lets the key's session come back after the token was removed and reinserted, or in a
    /// fork()ed child: the same token, the key by its id and label, a login with the static PIN
    /// source the identity was made with (a callback is not called again: it may be gone).
    static func reconnect(_ session: PKCS11Session, token: TokenInfo, key: CK_OBJECT_HANDLE, id: [UInt8], label: String?,
                          plan: PINPlan) {
        let staticPlan = PINPlan(pin: plan.pin, callback: nil, uri: plan.uri, allowFinalTry: plan.allowFinalTry)
        session.reconnection = TokenReconnection(tokenLabel: token.label, serial: token.serial, keyHandle: key, keyID: id,
                                                 keyLabel: id.isEmpty ? label : nil) { s in
            guard token.loginRequired else { return }
            try login(session: s, token: token, plan: staticPlan)
        }
    }

    /// Signs a random message with the token key and verifies it with the certificate's public
    /// key: ``MTLSError/Code/keyMismatch`` when the key is another.
    static func proveKey(_ key: PrivateKey, belongsTo leaf: Certificate, tokenLabel: String) throws {
        guard let publicKey = X509_get0_pubkey(leaf.x509) else {
            throw MTLSError.openSSL(.parse, "cannot read the public key of \"\(leaf.subjectSummary)\"")
        }
        var message = [UInt8](repeating: 0, count: 32)
        _ = RAND_bytes(&message, 32)
        let digest = EVP_PKEY_get_base_id(publicKey) == EVP_PKEY_ED25519 ? nil : EVP_sha256()
        guard let signing = EVP_MD_CTX_new() else { throw MTLSError(.noMemory, "EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(signing) }
        var signature = [UInt8](repeating: 0, count: 1024)
        var length = signature.count
        OpenSSLErrorQueue.clear()
        guard EVP_DigestSignInit(signing, nil, digest, nil, key.pkey) == 1,
              EVP_DigestSign(signing, &signature, &length, message, message.count) == 1 else {
            if let failure = TokenKey.takeFailure() { throw failure }
            throw MTLSError.openSSL(.token, "the key on token \"\(tokenLabel)\" cannot sign")
        }
        guard let verifying = EVP_MD_CTX_new() else { throw MTLSError(.noMemory, "EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(verifying) }
        guard EVP_DigestVerifyInit(verifying, nil, digest, nil, publicKey) == 1,
              EVP_DigestVerify(verifying, signature, length, message, message.count) == 1 else {
            OpenSSLErrorQueue.clear()
            throw MTLSError(.keyMismatch, "the key on token \"\(tokenLabel)\" is not the key of the certificate \"\(leaf.subjectSummary)\"")
        }
    }

    /// The PIN in the file a `pin-source` names (a path or a `file:` URI): its first line, read
    /// as a secret file (``FileIO/readSecret(_:kind:)``: refused when others can write it or
    /// everyone can read it, or when empty).
    package static func readPINSource(_ source: String) throws -> SecretBytes {
        var path = source
        if path.hasPrefix("file://") { path.removeFirst("file://".count) } else if path.hasPrefix("file:") { path.removeFirst("file:".count) }
        guard path.hasPrefix("/") else {
            throw MTLSError(.badURI, "pin-source must be an absolute path or a file: URI, not \"\(source)\"")
        }
        return try FileIO.readSecret(path, kind: .pin)
    }

    static func describeToken(_ uri: PKCS11URI) -> String {
        var parts: [String] = []
        if let t = uri.token { parts.append("token=\"\(t)\"") }
        if let s = uri.serial { parts.append("serial=\(s)") }
        if let m = uri.manufacturer { parts.append("manufacturer=\"\(m)\"") }
        if let m = uri.model { parts.append("model=\"\(m)\"") }
        return parts.isEmpty ? "the URI" : parts.joined(separator: " ")
    }

    static func describeObject(_ uri: PKCS11URI) -> String {
        var parts: [String] = []
        if let o = uri.object { parts.append("object=\"\(o)\"") }
        if let id = uri.id { parts.append("id=\(Encoding.hex(id))") }
        return parts.isEmpty ? "the URI" : parts.joined(separator: " ")
    }
}
