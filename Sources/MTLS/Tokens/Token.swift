internal import COpenSSL
internal import CP11Kit
import FoundationEssentials

/// A PKCS#11 token (smart card, USB token, HSM partition) in a slot of a module loaded through
/// p11-kit, as listed by ``Token/list(modulePath:)``. A value; safe to share across threads.
public struct Token: Sendable {
    /// p11-kit's name for the module (`softhsm2`), and its file.
    public let moduleName: String?
    public let modulePath: String?
    /// The slot's id and description.
    public let slotID: UInt
    public let slotDescription: String
    /// CK_TOKEN_INFO's label, manufacturer, model and serial number, without padding.
    public let label: String
    public let manufacturer: String
    public let model: String
    public let serial: String
    /// Whether the token is initialised (has a label and can hold objects).
    public let initialized: Bool
    /// Whether a PIN is needed before private objects can be used.
    public let loginRequired: Bool
    /// Whether the token has its own PIN pad (login without a PIN from libmtls).
    public let protectedAuthenticationPath: Bool
    /// Whether the user PIN is initialised, locked (too many wrong tries), or near locking.
    public let userPINInitialized: Bool
    public let userPINLocked: Bool
    public let userPINCountLow: Bool
    public let userPINFinalTry: Bool
    /// The token's RFC 7512 URI (`pkcs11:model=...;manufacturer=...;serial=...;token=...`).
    public let uri: String

    /// A certificate or key on a token, as listed by ``Token/objects(modulePath:uri:pin:)``.
    public struct Object: Sendable {
        public enum Kind: String, Sendable {
            case certificate = "cert"
            case privateKey = "private"
            case publicKey = "public"
        }
        /// What it is (the names are the URI `type=` values).
        public let kind: Kind
        /// CKA_LABEL and CKA_ID (the ID ties a private key to its certificate).
        public let label: String?
        public let id: [UInt8]
        /// The token it lives on.
        public let token: Token
        /// The object's RFC 7512 URI (token attributes, `object=`, `id=`, `type=`).
        public let uri: String
        /// For certificates, the certificate (nil if the token's value does not parse).
        public let certificate: Certificate?
        /// For keys, the key type (`rsa2048`, `p256`...) when the token says.
        public let keyType: String?
    }
}

/// Called when a token needs the user PIN. Returns the PIN, or nil to give up
/// (``MTLSError/Code/pinRequired``). May throw to abort with its own error.
public typealias TokenPINCallback = (_ request: TokenPINRequest) throws -> SecretBytes?

/// What a PIN callback is told.
public struct TokenPINRequest: Sendable {
    /// The token's label and URI.
    public let tokenLabel: String
    public let tokenURI: String
    /// The token says some wrong PINs were entered, or that the next wrong one locks it.
    public let countLow: Bool
    public let finalTry: Bool
}

extension Token {
    /// Every token present in the module at `modulePath`, or in every module registered with
    /// p11-kit when it is nil.
    public static func list(modulePath: String? = nil) throws -> [Token] {
        try PKCS11Module.candidates(path: modulePath, uri: nil).flatMap { m in
            // A slot's uninitialised token (SoftHSM always offers one) can hold no identity.
            try m.slotsWithToken().compactMap { try? Token(module: m, slot: $0) }.filter(\.initialized)
        }
    }

    /// The certificates and keys on the tokens matching `uri` (all tokens when nil). With a
    /// `pin`, logs in first so private keys (and private certificates) are listed too.
    public static func objects(modulePath: String? = nil, uri: String? = nil, pin: SecretBytes? = nil) throws -> [Object] {
        let filter = try uri.map(P11KitURI.init)
        var out: [Object] = []
        for m in try PKCS11Module.candidates(path: modulePath, uri: try uri.map(PKCS11URI.init)) {
            guard filter?.matches(module: m.moduleInfo()) ?? true else { continue }
            for slot in try m.slotsWithToken() {
                guard let token = try? Token(module: m, slot: slot),
                      filter?.matches(token: try m.tokenInfo(slot)) ?? true else { continue }
                let session = try PKCS11Session(module: m, slot: slot)
                if let pin, token.loginRequired { try session.login(pin: pin) }
                out += try objects(on: session, token: token)
            }
        }
        return out
    }

    private static func objects(on session: PKCS11Session, token: Token) throws -> [Object] {
        var out: [Object] = []
        let info = try session.module.tokenInfo(session.slot)
        for (cls, kind) in [(CKO_CERTIFICATE, Object.Kind.certificate), (CKO_PRIVATE_KEY, .privateKey), (CKO_PUBLIC_KEY, .publicKey)] {
            for h in try session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(cls))]) {
                let label = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_LABEL)).map { String(decoding: $0, as: UTF8.self) }
                let id = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_ID)) ?? []
                var certificate: Certificate? = nil
                var keyType: String? = nil
                if kind == .certificate {
                    certificate = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_VALUE)).flatMap { try? Certificate(der: $0) }
                    keyType = certificate?.keyType.shortName
                } else {
                    keyType = try keyTypeName(session, h)
                }
                let uri = try P11KitURI.format(token: info, label: label, id: id.isEmpty ? nil : id, cls: CK_OBJECT_CLASS(cls))
                out.append(Object(kind: kind, label: label, id: id, token: token, uri: uri,
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
            guard let params = try session.attribute(h, CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS)) else { return "ec" }
            // CKA_EC_PARAMS is the DER of the curve's OID.
            let p256: [UInt8] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]
            let p384: [UInt8] = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22]
            let p521: [UInt8] = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23]
            return params == p256 ? "p256" : params == p384 ? "p384" : params == p521 ? "p521" : "ec"
        case nil: return nil
        default: return "other"
        }
    }

    init(module m: PKCS11Module, slot: CK_SLOT_ID) throws {
        var info = try m.tokenInfo(slot)
        var slotInfo = try m.slotInfo(slot)
        moduleName = m.name
        modulePath = m.path
        slotID = UInt(slot)
        slotDescription = PKCS11Text.padded(&slotInfo.slotDescription)
        label = PKCS11Text.padded(&info.label)
        manufacturer = PKCS11Text.padded(&info.manufacturerID)
        model = PKCS11Text.padded(&info.model)
        serial = PKCS11Text.padded(&info.serialNumber)
        let flags = info.flags
        func has(_ f: some BinaryInteger) -> Bool { flags & CK_FLAGS(f) != 0 }
        initialized = has(CKF_TOKEN_INITIALIZED)
        loginRequired = has(CKF_LOGIN_REQUIRED)
        protectedAuthenticationPath = has(CKF_PROTECTED_AUTHENTICATION_PATH)
        userPINInitialized = has(CKF_USER_PIN_INITIALIZED)
        userPINLocked = has(CKF_USER_PIN_LOCKED)
        userPINCountLow = has(CKF_USER_PIN_COUNT_LOW)
        userPINFinalTry = has(CKF_USER_PIN_FINAL_TRY)
        uri = try P11KitURI.format(token: info)
    }
}
