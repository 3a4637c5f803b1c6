internal import CP11Kit
import FoundationEssentials

/// A token in a slot of a PKCS#11 module, as listed by ``PKCS11Modules/tokens()``.
public struct TokenInfo: Sendable {
    /// The module's name (p11-kit's, e.g. `softhsm2`; the file name for a module loaded by
    /// path) and file.
    public let moduleName: String
    /// The module's file, when known.
    public let modulePath: String?
    /// The slot's id and description.
    public let slotID: UInt
    /// The slot's description (CK_SLOT_INFO), without padding.
    public let slotDescription: String
    /// CK_TOKEN_INFO's label, manufacturer, model and serial, without padding.
    public let label: String
    /// CK_TOKEN_INFO's manufacturerID.
    public let manufacturer: String
    /// CK_TOKEN_INFO's model.
    public let model: String
    /// CK_TOKEN_INFO's serialNumber.
    public let serial: String
    /// Whether the token needs a PIN before private objects can be used.
    public let loginRequired: Bool
    /// Whether the token has its own PIN pad (login needs no PIN from libmtls).
    public let protectedAuthenticationPath: Bool
    /// Whether the user PIN is set (false on a fresh token).
    public let userPINInitialized: Bool
    /// Whether the user PIN is locked (too many wrong tries).
    public let userPINLocked: Bool
    /// Whether wrong PINs were entered since the last good one, and whether the next wrong one
    /// locks the PIN (as far as the token reports it).
    public let userPINCountLow: Bool
    /// Whether the next wrong user PIN locks it (CKF_USER_PIN_FINAL_TRY).
    public let userPINFinalTry: Bool
    /// The token's RFC 7512 URI (`pkcs11:model=...;manufacturer=...;serial=...;token=...`).
    public let uri: String
}

/// A certificate or key on a token, as listed by ``PKCS11Modules/objects(tokenURI:pin:)``.
public struct TokenObject: Sendable {
    /// The object's class (CKA_CLASS).
    public enum Kind: String, Sendable {
        /// A certificate (CKO_CERTIFICATE).
        case certificate
        /// A private key (CKO_PRIVATE_KEY).
        case privateKey = "private-key"
        /// A public key (CKO_PUBLIC_KEY).
        case publicKey = "public-key"
    }
    /// The object's class.
    public let kind: Kind
    /// CKA_LABEL and CKA_ID (the ID ties a key to its certificate).
    public let label: String?
    /// CKA_ID: the same on a key and its certificate.
    public let id: [UInt8]
    /// The token it lives on.
    public let token: TokenInfo
    /// The object's RFC 7512 URI (token attributes, `object=`, `id=`, `type=`).
    public let uri: String
    /// For certificates, the parsed certificate (nil if the token's value does not parse).
    public let certificate: Certificate?
    /// The key type (`rsa2048`, `p256`...), of a key as the token describes it, of a
    /// certificate's public key; nil when unknown.
    public let keyType: String?
}

/// PKCS#11 modules loaded through p11-kit: either every module registered with p11-kit
/// (`p11_kit_modules_load_and_initialize`), or one module file (`p11_kit_module_load`).
/// Modules are initialised when this object is made and finalised when it and every token
/// identity made from it are released. Use from one thread at a time.
public final class PKCS11Modules {
    let modules: [PKCS11Module]

    /// Loads `modulePath` (a PKCS#11 `.so`, or a bare file name looked up in p11-kit's module
    /// directory), or every module registered with p11-kit when nil.
    /// Throws ``MTLSError/Code/notFound`` for a missing file, ``MTLSError/Code/token`` when the
    /// module cannot be loaded or initialised.
    public init(modulePath: String? = nil) throws {
        modules = try modulePath.map { [try PKCS11Module.load(path: $0)] } ?? PKCS11Module.loadRegistered()
    }

    init(modules: [PKCS11Module]) { self.modules = modules }

    // MARK: Listing

    /// Every initialised token present in a slot of the loaded modules.
    public func tokens() throws -> [TokenInfo] {
        try Token.presentTokens(in: modules, matching: nil).map(\.token)
    }

    /// The certificates and keys of the tokens matching `tokenURI` (every token when nil), and
    /// matching its `type`, `object` and `id` when it has them.
    ///
    /// With a `pin`, logs in first to ONE token so that its private objects (private keys) are
    /// listed too; every other token is listed without a login. A PIN belongs to one token, so
    /// it goes only to a token that needs a login and that the URI names (`token=`, `serial=`,
    /// `model=` or `manufacturer=` matching exactly one such token) or, when the URI names no
    /// token, that shows the object the URI names (`object=`/`id=`) without a login. A PIN with
    /// no such selection is refused before any token sees it, never tried on every token: a
    /// wrong PIN costs a try on a card, and one card's PIN must not reach another.
    /// The login lasts as long as the module stays loaded (PKCS#11 logins belong to the
    /// application, so logging out here would also log out token identities in use).
    /// Throws ``MTLSError/Code/badURI`` for a URI that does not parse or that selects several
    /// tokens for the PIN, ``MTLSError/Code/invalidArgument`` for a PIN without a URI that names a
    /// token or an object, ``MTLSError/Code/notFound`` when no token needing a login shows the
    /// object named, ``MTLSError/Code/tokenNotPresent`` when no token matches,
    /// ``MTLSError/Code/pinIncorrect`` / ``MTLSError/Code/pinLocked`` for a refused PIN.
    public func objects(tokenURI: String? = nil, pin: SecretBytes? = nil) throws -> [TokenObject] {
        let filter = try tokenURI.map { try P11KitURI($0) }
        let listed: [(session: PKCS11Session, token: TokenInfo)] = try Token.presentTokens(in: modules, matching: filter)
            .map { (try PKCS11Session(module: $0.module, slot: $0.slot), $0.token) }
        if listed.isEmpty {
            throw MTLSError(.tokenNotPresent, tokenURI.map { "no token matches \($0)" } ?? "no token is present")
        }
        if let pin {
            let target = try loginTarget(listed, tokenURI: tokenURI)
            do { try target.session.login(pin: pin) } catch let e as MTLSError {
                throw MTLSError(e.code, "cannot log in to token \"\(target.token.label)\": \(e.message)")
            }
        }
        return try listed.flatMap { try objects(on: $0.session, token: $0.token, filter: filter) }
    }

    /// The one token a listing PIN may go to (see ``objects(tokenURI:pin:)``); throws, naming the
    /// tokens, when the URI selects none or several.
    private func loginTarget(_ listed: [(session: PKCS11Session, token: TokenInfo)],
                             tokenURI: String?) throws -> (session: PKCS11Session, token: TokenInfo) {
        let needing = listed.filter { $0.token.loginRequired }
        let names = { (l: [(session: PKCS11Session, token: TokenInfo)]) in l.map { "\"\($0.token.label)\"" }.joined(separator: ", ") }
        guard let tokenURI, let uri = try? PKCS11URI(tokenURI),
              uri.token != nil || uri.serial != nil || uri.model != nil || uri.manufacturer != nil
                || uri.object != nil || uri.id != nil else {
            throw MTLSError(.invalidArgument,
                            "a PIN goes only to the token it belongs to: name the token with a URI (pkcs11:token=LABEL or serial=...) to log in to; without one, tokens are listed without a login")
        }
        let namesToken = uri.token != nil || uri.serial != nil || uri.model != nil || uri.manufacturer != nil
        // Named by the object: a token that shows it before any login (a certificate or a
        // public key beside the private key) holds it; the PIN goes to no other.
        let targets = namesToken ? needing : try needing.filter { try Token.holdsVisibly($0.session, uri: uri, stored: nil) }
        guard let target = targets.first else {
            if namesToken {
                throw MTLSError(.invalidArgument, "no token matching \(tokenURI) needs a PIN (\(names(listed)) are listed without a login)")
            }
            throw MTLSError(.notFound, "no token that needs a PIN shows \(Token.describeObject(uri)) without a login: add token= (or serial=) to \(tokenURI) so that the PIN goes only to the token it belongs to")
        }
        guard targets.count == 1 else {
            throw MTLSError(.badURI, "\(tokenURI) selects the tokens \(names(targets)), and a PIN belongs to one token: name it with token= or serial=")
        }
        return target
    }

    private func objects(on session: PKCS11Session, token: TokenInfo, filter: P11KitURI?) throws -> [TokenObject] {
        let info = try session.module.tokenInfo(session.slot)
        var out: [TokenObject] = []
        for (cls, kind) in [(CKO_CERTIFICATE, TokenObject.Kind.certificate), (CKO_PRIVATE_KEY, .privateKey),
                            (CKO_PUBLIC_KEY, .publicKey)] {
            for h in try session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(cls))]) {
                let label = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_LABEL)).map { String(decoding: $0, as: UTF8.self) }
                let id = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_ID)) ?? []
                if let filter, !filter.matches(objectClass: CK_OBJECT_CLASS(cls), label: label, id: id) { continue }
                var certificate: Certificate? = nil
                var keyType: String? = nil
                if kind == .certificate {
                    certificate = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_VALUE)).flatMap { try? Certificate(der: $0) }
                    keyType = certificate?.keyType.shortName
                } else {
                    keyType = try Self.keyTypeName(session, h)
                }
                let uri = try P11KitURI.format(token: info, label: label, id: id.isEmpty ? nil : id,
                                               cls: CK_OBJECT_CLASS(cls))
                out.append(TokenObject(kind: kind, label: label, id: id, token: token, uri: uri,
                                       certificate: certificate, keyType: keyType))
            }
        }
        return out
    }

    /// "rsa2048", "p256"... from a key object's attributes, when the token says.
    private static func keyTypeName(_ session: PKCS11Session, _ h: CK_OBJECT_HANDLE) throws -> String? {
        switch try session.ulongAttribute(h, CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)) {
        case CK_ULONG(CKK_RSA):
            guard let n = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_MODULUS)) else { return "rsa" }
            let bytes = n.drop { $0 == 0 }
            return "rsa\(bytes.count * 8 - (bytes.first.map { $0.leadingZeroBitCount } ?? 0))"
        case CK_ULONG(CKK_EC):
            // CKA_EC_PARAMS is the DER of the curve's OID.
            guard let params = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS)) else { return "ec" }
            let curves: [[UInt8]: String] = [
                [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]: "p256",
                [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22]: "p384",
                [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23]: "p521",
            ]
            return curves[params] ?? "ec"
        case nil: return nil
        default: return "other"
        }
    }
}

extension TokenInfo {
    /// The token in `slot`, or nil when the slot's token is absent or not initialised (a fresh
    /// slot, which SoftHSM always keeps, holds no usable token).
    init?(module m: PKCS11Module, slot: CK_SLOT_ID) throws {
        let info: CK_TOKEN_INFO
        do { info = try m.tokenInfo(slot) } catch let e as MTLSError where e.code == .tokenNotPresent { return nil }
        try self.init(module: m, slot: slot, info: info, slotInfo: try m.slotInfo(slot))
    }

    /// The same, from the token and slot information already read.
    init?(module m: PKCS11Module, slot: CK_SLOT_ID, info: CK_TOKEN_INFO, slotInfo: CK_SLOT_INFO) throws {
        guard info.flags & CK_FLAGS(CKF_TOKEN_INITIALIZED) != 0 else { return nil }
        var tokenInfo = info
        var slotInfo = slotInfo
        func has(_ f: some BinaryInteger) -> Bool { info.flags & CK_FLAGS(f) != 0 }
        self.init(
            moduleName: m.name ?? m.path.map { String($0.split(separator: "/").last ?? "module") } ?? "module",
            modulePath: m.path, slotID: UInt(slot),
            slotDescription: PKCS11Text.padded(&slotInfo.slotDescription),
            label: PKCS11Text.padded(&tokenInfo.label), manufacturer: PKCS11Text.padded(&tokenInfo.manufacturerID),
            model: PKCS11Text.padded(&tokenInfo.model), serial: PKCS11Text.padded(&tokenInfo.serialNumber),
            loginRequired: has(CKF_LOGIN_REQUIRED), protectedAuthenticationPath: has(CKF_PROTECTED_AUTHENTICATION_PATH),
            userPINInitialized: has(CKF_USER_PIN_INITIALIZED), userPINLocked: has(CKF_USER_PIN_LOCKED),
            userPINCountLow: has(CKF_USER_PIN_COUNT_LOW), userPINFinalTry: has(CKF_USER_PIN_FINAL_TRY),
            uri: try P11KitURI.format(token: info))
    }
}
