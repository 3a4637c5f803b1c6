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
    /// Errors: ``MTLSError/Code/badURI`` (syntax, or a URI that matches several certificates),
    /// ``MTLSError/Code/tokenNotPresent`` (no token matches), ``MTLSError/Code/notFound``
    /// (no such certificate or key), ``MTLSError/Code/pinRequired``, ``MTLSError/Code/pinIncorrect``,
    /// ``MTLSError/Code/pinLocked``, ``MTLSError/Code/tokenRemoved``, ``MTLSError/Code/token``
    /// (anything else the module reports), ``MTLSError/Code/keyMismatch``.
    public static func identity(uri text: String, modulePath: String? = nil, pin: SecretBytes? = nil,
                                pinCallback: TokenPINCallback? = nil) throws -> Identity {
        let uri = try PKCS11URI(text)
        let matcher = try P11KitURI(text)
        if let t = uri.type, t != .certificate, t != .privateKey {
            throw MTLSError(.badURI, "an identity URI names a certificate or a private key, not type=\(t.rawValue): \(text)")
        }
        var tokensSeen: [String] = []
        for m in try PKCS11Module.candidates(path: modulePath, uri: uri) {
            guard matcher.matches(module: m.moduleInfo()) else { continue }
            for slot in try m.slotsWithToken() {
                guard let info = try? m.tokenInfo(slot), matcher.matches(token: info),
                      let slotInfo = try? m.slotInfo(slot), matcher.matches(slot: slotInfo) else { continue }
                guard let token = try TokenInfo(module: m, slot: slot) else { continue }
                tokensSeen.append(token.label)
                let session = try PKCS11Session(module: m, slot: slot)
                if let identity = try identity(on: session, token: token, uri: uri, pin: pin, pinCallback: pinCallback) {
                    return identity
                }
            }
        }
        if tokensSeen.isEmpty {
            throw MTLSError(.tokenNotPresent, "no token present matches \(describeToken(uri)) (\(text))")
        }
        throw MTLSError(.notFound, "no certificate matching \(describeObject(uri)) on token \(tokensSeen.map { "\"\($0)\"" }.joined(separator: ", "))")
    }

    /// The identity on one token, or nil when the token has no matching certificate.
    private static func identity(on session: PKCS11Session, token: TokenInfo, uri: PKCS11URI, pin: SecretBytes?,
                                 pinCallback: TokenPINCallback?) throws -> Identity? {
        var selector: [PKCS11Attribute] = []
        if let id = uri.id { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)) }
        if let label = uri.object { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        let certTemplate = selector + [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
                                       .ulong(CK_ATTRIBUTE_TYPE(CKA_CERTIFICATE_TYPE), CK_ULONG(CKC_X_509))]

        // Certificates are usually public objects; log in first only when a PIN is at hand or the
        // certificate is not visible without it.
        var loggedIn = false
        func logIn() throws {
            guard !loggedIn else { return }
            try login(session: session, token: token, uri: uri, pin: pin, pinCallback: pinCallback)
            loggedIn = true
        }
        var certs = try session.findObjects(certTemplate)
        if certs.isEmpty && token.loginRequired {
            try logIn()
            certs = try session.findObjects(certTemplate)
        }
        if certs.isEmpty, !selector.isEmpty {
            // The URI may name the key by a label its certificate does not share: find the key,
            // then the certificate with the key's CKA_ID.
            if token.loginRequired { try logIn() }
            let keys = try session.findObjects(selector + [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))])
            if keys.count == 1, let keyID = try session.attribute(keys[0], CK_ATTRIBUTE_TYPE(CKA_ID)), !keyID.isEmpty {
                certs = try session.findObjects([.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), keyID),
                                                 .ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
                                                 .ulong(CK_ATTRIBUTE_TYPE(CKA_CERTIFICATE_TYPE), CK_ULONG(CKC_X_509))])
            }
        }
        if certs.isEmpty { return nil }
        guard certs.count == 1 else {
            let labels = try certs.map { h in
                try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_LABEL)).map { "\"" + String(decoding: $0, as: UTF8.self) + "\"" } ?? "(no label)"
            }
            throw MTLSError(.badURI, "\(uri.text) matches \(certs.count) certificates on token \"\(token.label)\" (\(labels.joined(separator: ", "))); add id= or object= to choose one")
        }
        guard let der = try session.attribute(certs[0], CK_ATTRIBUTE_TYPE(CKA_VALUE)) else {
            throw MTLSError(.token, "the certificate \(describeObject(uri)) on token \"\(token.label)\" has no value")
        }
        let leaf = try Certificate(der: der)
        let id = try session.attribute(certs[0], CK_ATTRIBUTE_TYPE(CKA_ID)) ?? []
        let certLabel = try session.attribute(certs[0], CK_ATTRIBUTE_TYPE(CKA_LABEL)).map { String(decoding: $0, as: UTF8.self) }

        // The private key with the certificate's CKA_ID (its label when it has no ID).
        if token.loginRequired { try logIn() }
        var keyTemplate: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))]
        if !id.isEmpty {
            keyTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id))
        } else if let certLabel {
            keyTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(certLabel.utf8)))
        } else {
            throw MTLSError(.notFound, "the certificate \"\(leaf.subjectSummary)\" on token \"\(token.label)\" has neither CKA_ID nor label to find its private key by")
        }
        let keys = try session.findObjects(keyTemplate)
        guard let key = keys.first else {
            throw MTLSError(.notFound, "no private key with the id \(Encoding.hex(id)) of certificate \"\(leaf.subjectSummary)\" on token \"\(token.label)\"")
        }
        let keyLabel = try session.attribute(key, CK_ATTRIBUTE_TYPE(CKA_LABEL)).map { String(decoding: $0, as: UTF8.self) }
        let keyURI = try P11KitURI.format(token: try session.module.tokenInfo(session.slot), label: keyLabel,
                                          id: id.isEmpty ? nil : id, cls: CK_OBJECT_CLASS(CKO_PRIVATE_KEY))
        guard let publicKey = X509_get0_pubkey(leaf.x509) else {
            throw MTLSError.openSSL(.parse, "cannot read the public key of \"\(leaf.subjectSummary)\"")
        }
        try checkKeyType(session: session, key: key, certificateKey: publicKey, leaf: leaf)
        let context = TokenKeyContext(session: session, key: key, uri: keyURI)
        let pkey = try TokenKey.make(publicKey: publicKey, context: context)
        let privateKey = PrivateKey(takingOwnership: pkey, tokenURI: keyURI)

        // Other certificates on the token (a CA chain stored with the key) help build the chain.
        let others = try session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE))])
            .filter { $0 != certs[0] }
            .compactMap { try session.attribute($0, CK_ATTRIBUTE_TYPE(CKA_VALUE)).flatMap { try? Certificate(der: $0) } }
        return try Identity(privateKey: privateKey, leaf: leaf, certificates: others, friendlyName: certLabel,
                            localKeyID: id.isEmpty ? nil : id)
    }

    /// The token key must be the same kind as the certificate's (RSA, EC).
    private static func checkKeyType(session: PKCS11Session, key: CK_OBJECT_HANDLE, certificateKey: OpaquePointer,
                                     leaf: Certificate) throws {
        guard let kt = try session.ulongAttribute(key, CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)) else { return }
        let expected: CK_ULONG
        switch EVP_PKEY_get_base_id(certificateKey) {
        case EVP_PKEY_RSA: expected = CK_ULONG(CKK_RSA)
        case EVP_PKEY_EC: expected = CK_ULONG(CKK_EC)
        default: return  // TokenKey.make reports the unsupported type
        }
        guard kt == expected else {
            throw MTLSError(.keyMismatch, "the token's private key is not of the certificate \"\(leaf.subjectSummary)\"'s key type")
        }
    }

    /// Logs in with the first PIN available (see ``identity(uri:modulePath:pin:pinCallback:)``).
    private static func login(session: PKCS11Session, token: TokenInfo, uri: PKCS11URI, pin: SecretBytes?,
                              pinCallback: TokenPINCallback?) throws {
        if token.userPINLocked {
            throw MTLSError(.pinLocked, "the user PIN of token \"\(token.label)\" is locked")
        }
        var chosen = pin
        if chosen == nil, let pinCallback {
            chosen = try pinCallback(TokenPINRequest(tokenLabel: token.label, tokenURI: token.uri,
                                                     countLow: token.userPINCountLow, finalTry: token.userPINFinalTry))
            if chosen == nil { throw MTLSError(.pinRequired, "no PIN was given for token \"\(token.label)\"") }
        }
        if chosen == nil, let v = uri.pinValue { chosen = SecretBytes(v) }
        if chosen == nil, let source = uri.pinSource { chosen = try readPINSource(source) }
        if chosen == nil && !token.protectedAuthenticationPath {
            throw MTLSError(.pinRequired, "token \"\(token.label)\" needs a PIN (give one, a PIN callback, or pin-value/pin-source in the URI)")
        }
        do {
            try session.login(pin: chosen)
        } catch let e as MTLSError {
            switch e.code {
            case .pinIncorrect: throw MTLSError(.pinIncorrect, "wrong PIN for token \"\(token.label)\": \(e.message)")
            case .pinLocked: throw MTLSError(.pinLocked, "the user PIN of token \"\(token.label)\" is locked: \(e.message)")
            default: throw e
            }
        }
    }

    /// The PIN in the file a `pin-source` names (a path or a `file:` URI): its first line.
    static func readPINSource(_ source: String) throws -> SecretBytes {
        var path = source
        if path.hasPrefix("file://") { path.removeFirst("file://".count) } else if path.hasPrefix("file:") { path.removeFirst("file:".count) }
        guard path.hasPrefix("/") else {
            throw MTLSError(.badURI, "pin-source must be an absolute path or a file: URI, not \"\(source)\"")
        }
        var bytes = try FileIO.read(path, limit: 4096)
        defer { SecretBytes.wipe(&bytes) }
        var end = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
        if end > 0, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        return SecretBytes(Array(bytes[0..<end]))
    }

    private static func describeToken(_ uri: PKCS11URI) -> String {
        var parts: [String] = []
        if let t = uri.token { parts.append("token=\"\(t)\"") }
        if let s = uri.serial { parts.append("serial=\(s)") }
        if let m = uri.manufacturer { parts.append("manufacturer=\"\(m)\"") }
        if let m = uri.model { parts.append("model=\"\(m)\"") }
        return parts.isEmpty ? "the URI" : parts.joined(separator: " ")
    }

    private static func describeObject(_ uri: PKCS11URI) -> String {
        var parts: [String] = []
        if let o = uri.object { parts.append("object=\"\(o)\"") }
        if let id = uri.id { parts.append("id=\(Encoding.hex(id))") }
        return parts.isEmpty ? "the URI" : parts.joined(separator: " ")
    }
}
