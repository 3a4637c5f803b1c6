internal import CP11Kit

/// The templates of a key pair made on a token: what the key must be (sensitive, never
/// extractable, for signing: always sent), and what libmtls only prefers (no encryption,
/// decryption, wrapping or unwrapping with a signing key). Some modules fix a key's usages
/// themselves — tpm2-pkcs11's keys always sign and decrypt, and it refuses a template saying
/// otherwise with a bare CKR_GENERAL_ERROR —, so a refused template is tried again without the
/// preferences, and what the module did not keep of them is said in a warning.
enum KeyTemplate {
    /// Attributes a signing key is better without; not required of the module.
    static let publicPreferences: [PKCS11Attribute] = [.bool(CK_ATTRIBUTE_TYPE(CKA_ENCRYPT), false),
                                                       .bool(CK_ATTRIBUTE_TYPE(CKA_WRAP), false)]
    static let privatePreferences: [PKCS11Attribute] = [.bool(CK_ATTRIBUTE_TYPE(CKA_DECRYPT), false),
                                                        .bool(CK_ATTRIBUTE_TYPE(CKA_UNWRAP), false)]

    /// Return values by which a module refuses a template (or, as tpm2-pkcs11 does, an attribute
    /// it cannot honour: CKR_GENERAL_ERROR, CKR_FUNCTION_FAILED).
    static let refusals: Set<CK_RV> = Set([CKR_ATTRIBUTE_VALUE_INVALID, CKR_ATTRIBUTE_TYPE_INVALID, CKR_ATTRIBUTE_READ_ONLY,
                                           CKR_TEMPLATE_INCONSISTENT, CKR_TEMPLATE_INCOMPLETE, CKR_GENERAL_ERROR,
                                           CKR_FUNCTION_FAILED].map { CK_RV($0) })

    /// Generates the key pair: with the preferences, then (when the module refused that
    /// template) without them. The error of a template still refused names the attributes sent;
    /// a mechanism the token lacks is ``MTLSError/Code/unsupported``.
    static func generate(_ session: PKCS11Session, token: TokenInfo, type: TokenKeyType, mechanism: CK_MECHANISM_TYPE,
                         publicTemplate: [PKCS11Attribute], privateTemplate: [PKCS11Attribute]) throws {
        let first = try session.generateKeyPair(mechanism: mechanism, publicTemplate: publicTemplate + publicPreferences,
                                                privateTemplate: privateTemplate + privatePreferences)
        if first.rv == CKR_OK { return }
        guard refusals.contains(first.rv) else { throw refused(first.rv, token: token, type: type, sent: nil) }
        let second = try session.generateKeyPair(mechanism: mechanism, publicTemplate: publicTemplate, privateTemplate: privateTemplate)
        guard second.rv == CKR_OK else {
            throw refused(second.rv, token: token, type: type, sent: (publicTemplate, privateTemplate))
        }
        let kept = (notKept(session, second.publicKey, publicPreferences) + notKept(session, second.privateKey, privatePreferences))
        if !kept.isEmpty {
            LibraryWarnings.emit("token \"\(token.label)\" refused the template with \(names(publicPreferences + privatePreferences)) false (\(PKCS11.text(first.rv))); the \(type.rawValue) key was made without them, and has \(kept.joined(separator: ", ")) true")
        }
    }

    /// The preferences (all false) the module set true on `object` anyway.
    private static func notKept(_ session: PKCS11Session, _ object: CK_OBJECT_HANDLE, _ preferences: [PKCS11Attribute]) -> [String] {
        let values = (try? session.attributes(object, preferences.map(\.type))) ?? [:]
        return preferences.filter { (values[$0.type]?.first ?? 0) != 0 }.map { name($0.type) }
    }

    private static func refused(_ rv: CK_RV, token: TokenInfo, type: TokenKeyType,
                                sent: ([PKCS11Attribute], [PKCS11Attribute])?) -> MTLSError {
        let base = PKCS11.error(rv, "C_GenerateKeyPair")
        if rv == CKR_MECHANISM_INVALID || rv == CKR_MECHANISM_PARAM_INVALID || rv == CKR_DOMAIN_PARAMS_INVALID
            || rv == CKR_CURVE_NOT_SUPPORTED {
            return MTLSError(.unsupported, "token \"\(token.label)\" cannot generate \(type.rawValue) keys: \(base.message)")
        }
        guard let (pub, priv) = sent else { return base }
        let attribute = rv == CKR_ATTRIBUTE_VALUE_INVALID || rv == CKR_ATTRIBUTE_TYPE_INVALID
        let what = attribute ? "one of the attributes" : "the template"
        return MTLSError(attribute ? .unsupported : base.code,
                         "token \"\(token.label)\" refused \(what) of a \(type.rawValue) key, also without \(names(publicPreferences + privatePreferences)): \(base.message); sent public key \(describe(pub)), private key \(describe(priv))")
    }

    private static func names(_ attributes: [PKCS11Attribute]) -> String {
        attributes.map { name($0.type) }.joined(separator: ", ")
    }

    private static func describe(_ attributes: [PKCS11Attribute]) -> String {
        attributes.map { a in
            switch a.type {
            case CK_ATTRIBUTE_TYPE(CKA_TOKEN), CK_ATTRIBUTE_TYPE(CKA_PRIVATE), CK_ATTRIBUTE_TYPE(CKA_SENSITIVE),
                 CK_ATTRIBUTE_TYPE(CKA_EXTRACTABLE), CK_ATTRIBUTE_TYPE(CKA_SIGN), CK_ATTRIBUTE_TYPE(CKA_VERIFY):
                return "\(name(a.type))=\((a.value.first ?? 0) != 0)"
            default:
                return name(a.type)
            }
        }.joined(separator: " ")
    }

    /// The PKCS#11 name of an attribute libmtls sends in a key template.
    static func name(_ type: CK_ATTRIBUTE_TYPE) -> String {
        let known: [CK_ATTRIBUTE_TYPE: String] = [
            CK_ATTRIBUTE_TYPE(CKA_TOKEN): "CKA_TOKEN", CK_ATTRIBUTE_TYPE(CKA_ID): "CKA_ID", CK_ATTRIBUTE_TYPE(CKA_LABEL): "CKA_LABEL",
            CK_ATTRIBUTE_TYPE(CKA_PRIVATE): "CKA_PRIVATE", CK_ATTRIBUTE_TYPE(CKA_SENSITIVE): "CKA_SENSITIVE",
            CK_ATTRIBUTE_TYPE(CKA_EXTRACTABLE): "CKA_EXTRACTABLE", CK_ATTRIBUTE_TYPE(CKA_SIGN): "CKA_SIGN",
            CK_ATTRIBUTE_TYPE(CKA_VERIFY): "CKA_VERIFY", CK_ATTRIBUTE_TYPE(CKA_ENCRYPT): "CKA_ENCRYPT",
            CK_ATTRIBUTE_TYPE(CKA_DECRYPT): "CKA_DECRYPT", CK_ATTRIBUTE_TYPE(CKA_WRAP): "CKA_WRAP",
            CK_ATTRIBUTE_TYPE(CKA_UNWRAP): "CKA_UNWRAP", CK_ATTRIBUTE_TYPE(CKA_MODULUS_BITS): "CKA_MODULUS_BITS",
            CK_ATTRIBUTE_TYPE(CKA_PUBLIC_EXPONENT): "CKA_PUBLIC_EXPONENT", CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS): "CKA_EC_PARAMS",
        ]
        return known[type] ?? "CKA 0x\(String(type, radix: 16))"
    }
}
