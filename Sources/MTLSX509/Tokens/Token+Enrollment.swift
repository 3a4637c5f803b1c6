internal import COpenSSL
internal import CP11Kit
import FoundationEssentials

/// Key types ``Token/generateKey(uri:type:modulePath:pin:pinCallback:allowFinalTry:)`` makes.
/// Their names are ``KeySpec``'s (the header's `MTLS_KEY_TYPE_*`, aliases accepted): one
/// spelling for a key type, whether it is made in memory or on a token.
public enum TokenKeyType: Sendable, CaseIterable, RawRepresentable {
    /// EC P-256.
    case ecP256
    /// EC P-384.
    case ecP384
    /// RSA 2048.
    case rsa2048
    /// RSA 3072.
    case rsa3072
    /// Ed25519.
    case ed25519

    /// The key kind in ``KeySpec`` terms.
    public var keySpec: KeySpec {
        switch self {
        case .ecP256: return .ecP256
        case .ecP384: return .ecP384
        case .rsa2048: return .rsa(bits: 2048)
        case .rsa3072: return .rsa(bits: 3072)
        case .ed25519: return .ed25519
        }
    }

    /// The canonical name (``KeySpec/issuingName``).
    public var rawValue: String { keySpec.issuingName }

    /// A canonical name or an alias (``KeySpec/init(issuingName:)``); nil for a kind no token
    /// key is made of (RSA-4096) or an unknown name.
    public init?(rawValue: String) {
        guard let spec = try? KeySpec(issuingName: rawValue),
              let type = Self.allCases.first(where: { $0.keySpec == spec }) else { return nil }
        self = type
    }
}

/// Enrollment without other tools: a key pair made on the token, a CSR signed by it, and the
/// issued certificate written back beside it.
extension Token {
    // DER of the curves' OIDs, as CKA_EC_PARAMS carries them.
    private static let p256Params: [UInt8] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]
    private static let p384Params: [UInt8] = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22]
    private static let ed25519Params: [UInt8] = [0x06, 0x03, 0x2b, 0x65, 0x70]
    /// RFC 8410's curve as a PrintableString, which some tokens use instead of the OID.
    private static let ed25519NameParams: [UInt8] = [0x13, 0x0c] + Array("edwards25519".utf8)

    /// The one token the URI names, with a session (read-write for `readWrite`). With several
    /// matching tokens, the one that shows the URI's object (`requireObject`), else an error
    /// asking for `token=`.
    private static func openToken(uri: PKCS11URI, text: String, modulePath: String?, readWrite: Bool,
                                  requireObject: Bool) throws -> PresentToken {
        var found = try presentTokens(uri: uri, text: text, modulePath: modulePath, readWrite: readWrite)
        if found.count > 1 && requireObject {
            found = try found.filter { try holdsVisibly($0.session, uri: uri, stored: nil) }
        }
        guard found.count == 1 else {
            throw MTLSError(.badURI, "\(text) matches \(found.isEmpty ? "no token showing the object among several" : "\(found.count) tokens"): add token= (or serial=) to name one")
        }
        return found[0]
    }

    private static func requireLogin(_ session: PKCS11Session, _ token: TokenInfo, uri: PKCS11URI, pin: SecretBytes?,
                                     pinCallback: TokenPINCallback?, allowFinalTry: Bool) throws {
        guard token.loginRequired else { return }
        try login(session: session, token: token,
                  plan: PINPlan(pin: pin, callback: pinCallback, uri: uri, allowFinalTry: allowFinalTry))
    }

    /// Generates a key pair on the token the URI names: the private key sensitive, never
    /// extractable, for signing; CKA_ID from the URI's `id` (random 16 bytes when it has none)
    /// and CKA_LABEL from its `object`. Returns the private key's `pkcs11:` URI.
    /// ``MTLSError/Code/duplicate`` when the token already has a key with that id or label;
    /// ``MTLSError/Code/unsupported`` when the token cannot make that type.
    public static func generateKey(uri text: String, type: TokenKeyType, modulePath: String? = nil, pin: SecretBytes? = nil,
                                   pinCallback: TokenPINCallback? = nil, allowFinalTry: Bool = false) throws -> String {
        let uri = try PKCS11URI(text)
        guard uri.id != nil || uri.object != nil else {
            throw MTLSError(.badURI, "name the new key with object= (its label) and/or id= in \(text)")
        }
        let (session, token, info) = try openToken(uri: uri, text: text, modulePath: modulePath, readWrite: true, requireObject: false)
        try requireLogin(session, token, uri: uri, pin: pin, pinCallback: pinCallback, allowFinalTry: allowFinalTry)
        if let id = uri.id,
           try !session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY)),
                                     .bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)], limit: 1).isEmpty {
            throw MTLSError(.duplicate, "token \"\(token.label)\" already has a private key with id \(Encoding.hex(id))")
        }
        if let label = uri.object,
           try !session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY)),
                                     .bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))], limit: 1).isEmpty {
            throw MTLSError(.duplicate, "token \"\(token.label)\" already has a private key labelled \"\(label)\"")
        }
        var id = uri.id ?? []
        if id.isEmpty {
            id = [UInt8](repeating: 0, count: 16)
            guard RAND_bytes(&id, 16) == 1 else { throw MTLSError.openSSL(.internal, "no random bytes for the key id") }
        }
        var common: [PKCS11Attribute] = [.bool(CK_ATTRIBUTE_TYPE(CKA_TOKEN), true), .bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)]
        if let label = uri.object { common.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        var publicTemplate = common + [.bool(CK_ATTRIBUTE_TYPE(CKA_VERIFY), true), .bool(CK_ATTRIBUTE_TYPE(CKA_PRIVATE), false)]
        let privateTemplate = common + [.bool(CK_ATTRIBUTE_TYPE(CKA_PRIVATE), true), .bool(CK_ATTRIBUTE_TYPE(CKA_SENSITIVE), true),
                                        .bool(CK_ATTRIBUTE_TYPE(CKA_EXTRACTABLE), false), .bool(CK_ATTRIBUTE_TYPE(CKA_SIGN), true)]
        let mechanism: CK_MECHANISM_TYPE
        switch type {
        case .rsa2048, .rsa3072:
            mechanism = CK_MECHANISM_TYPE(CKM_RSA_PKCS_KEY_PAIR_GEN)
            let bits: CK_ULONG = type == .rsa2048 ? 2048 : 3072
            if let info = session.mechanismInfo(mechanism), info.ulMaxKeySize > 0,
               bits < info.ulMinKeySize || bits > info.ulMaxKeySize {
                throw MTLSError(.unsupported, "token \"\(token.label)\" cannot generate \(type.rawValue) keys: CKA_MODULUS_BITS \(bits) is outside its \(info.ulMinKeySize)..\(info.ulMaxKeySize) (C_GetMechanismInfo)")
            }
            publicTemplate += [.ulong(CK_ATTRIBUTE_TYPE(CKA_MODULUS_BITS), bits),
                               .bytes(CK_ATTRIBUTE_TYPE(CKA_PUBLIC_EXPONENT), [0x01, 0x00, 0x01])]
        case .ecP256, .ecP384:
            mechanism = CK_MECHANISM_TYPE(CKM_EC_KEY_PAIR_GEN)
            publicTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS), type == .ecP256 ? p256Params : p384Params))
        case .ed25519:
            mechanism = CK_MECHANISM_TYPE(CKM_EC_EDWARDS_KEY_PAIR_GEN)
            publicTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS), ed25519Params))
        }
        try KeyTemplate.generate(session, token: token, type: type, mechanism: mechanism,
                                 publicTemplate: publicTemplate, privateTemplate: privateTemplate)
        return try P11KitURI.format(token: info, label: uri.object, id: id, cls: CK_OBJECT_CLASS(CKO_PRIVATE_KEY))
    }

    /// The private key the URI names, usable for signing (a CSR) without a certificate: its
    /// public half is read from the token's public key object with the same CKA_ID (or from
    /// the private key's own attributes), private operations run on the token.
    public static func signingKey(uri text: String, modulePath: String? = nil, pin: SecretBytes? = nil,
                                  pinCallback: TokenPINCallback? = nil, allowFinalTry: Bool = false) throws -> PrivateKey {
        let uri = try PKCS11URI(text)
        let (session, token, info) = try openToken(uri: uri, text: text, modulePath: modulePath, readWrite: false, requireObject: true)
        try requireLogin(session, token, uri: uri, pin: pin, pinCallback: pinCallback, allowFinalTry: allowFinalTry)
        let key = try findPrivateKey(session, token: token, uri: uri)
        let attributes = try session.attributes(key, [CK_ATTRIBUTE_TYPE(CKA_ID), CK_ATTRIBUTE_TYPE(CKA_LABEL),
                                                      CK_ATTRIBUTE_TYPE(CKA_ALWAYS_AUTHENTICATE)], guess: 256)
        let id = attributes[CK_ATTRIBUTE_TYPE(CKA_ID)] ?? []
        let label = attributes[CK_ATTRIBUTE_TYPE(CKA_LABEL)].map { String(decoding: $0, as: UTF8.self) }
        let publicKey = try publicKey(session, token: token, privateKey: key, id: id)
        defer { EVP_PKEY_free(publicKey) }
        let keyURI = try P11KitURI.format(token: info, label: label, id: id.isEmpty ? nil : id, cls: CK_OBJECT_CLASS(CKO_PRIVATE_KEY))
        return try tokenPrivateKey(key, attributes: attributes, keyURI: keyURI, id: id, label: label, publicKey: publicKey,
                                   session: session, token: token,
                                   plan: PINPlan(pin: pin, callback: pinCallback, uri: uri, allowFinalTry: allowFinalTry))
    }

    /// A CSR for the key the URI names, signed on the token (C_Sign).
    public static func makeCSR(uri: String, subject: String, modulePath: String? = nil, pin: SecretBytes? = nil,
                               pinCallback: TokenPINCallback? = nil, allowFinalTry: Bool = false) throws -> CertificateSigningRequest {
        let key = try signingKey(uri: uri, modulePath: modulePath, pin: pin, pinCallback: pinCallback, allowFinalTry: allowFinalTry)
        return try CertificateSigningRequest.make(subject: subject, key: key)
    }

    /// Writes `certificate` onto the token beside the private key the URI names: an X.509
    /// certificate object with the key's CKA_ID and label (the URI's `object`, else the key's).
    /// ``MTLSError/Code/keyMismatch`` when the certificate is not for that key;
    /// ``MTLSError/Code/duplicate`` when the same certificate is already there.
    ///
    /// `chain` (the CA certificates above it) is written too, as certificate objects without a
    /// key (no CKA_ID; those already on the token are skipped), so that an identity made from
    /// the token alone finds its chain there and sends it.
    /// Returns the certificate object's URI.
    @discardableResult
    public static func importCertificate(_ certificate: Certificate, chain: [Certificate] = [], uri text: String,
                                         modulePath: String? = nil, pin: SecretBytes? = nil,
                                         pinCallback: TokenPINCallback? = nil, allowFinalTry: Bool = false) throws -> String {
        let uri = try PKCS11URI(text)
        let (session, token, info) = try openToken(uri: uri, text: text, modulePath: modulePath, readWrite: true, requireObject: true)
        try requireLogin(session, token, uri: uri, pin: pin, pinCallback: pinCallback, allowFinalTry: allowFinalTry)
        let key = try findPrivateKey(session, token: token, uri: uri)
        let attributes = try session.attributes(key, [CK_ATTRIBUTE_TYPE(CKA_ID), CK_ATTRIBUTE_TYPE(CKA_LABEL)], guess: 256)
        let id = attributes[CK_ATTRIBUTE_TYPE(CKA_ID)] ?? []
        let label = uri.object ?? attributes[CK_ATTRIBUTE_TYPE(CKA_LABEL)].map { String(decoding: $0, as: UTF8.self) }
        let tokenPublic = try publicKey(session, token: token, privateKey: key, id: id)
        defer { EVP_PKEY_free(tokenPublic) }
        guard let certificateKey = X509_get0_pubkey(certificate.x509), EVP_PKEY_eq(tokenPublic, certificateKey) == 1 else {
            OpenSSLErrorQueue.clear()
            throw MTLSError(.keyMismatch, "the certificate \"\(certificate.subjectSummary)\" is not for the key \(text) on token \"\(token.label)\"")
        }
        let der = certificate.der
        if try !session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
                                     .bytes(CK_ATTRIBUTE_TYPE(CKA_VALUE), der)], limit: 1).isEmpty {
            throw MTLSError(.duplicate, "token \"\(token.label)\" already holds the certificate \"\(certificate.subjectSummary)\"")
        }
        let subject = derEncode { i2d_X509_NAME(X509_get_subject_name(certificate.x509), $0) } ?? []
        let issuer = derEncode { i2d_X509_NAME(X509_get_issuer_name(certificate.x509), $0) } ?? []
        let serial = derEncode { i2d_ASN1_INTEGER(X509_get_serialNumber(certificate.x509), $0) } ?? []
        var template: [PKCS11Attribute] = [
            .ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
            .ulong(CK_ATTRIBUTE_TYPE(CKA_CERTIFICATE_TYPE), CK_ULONG(CKC_X_509)),
            .bool(CK_ATTRIBUTE_TYPE(CKA_TOKEN), true), .bool(CK_ATTRIBUTE_TYPE(CKA_PRIVATE), false),
            .bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id), .bytes(CK_ATTRIBUTE_TYPE(CKA_VALUE), der),
            .bytes(CK_ATTRIBUTE_TYPE(CKA_SUBJECT), subject), .bytes(CK_ATTRIBUTE_TYPE(CKA_ISSUER), issuer),
            .bytes(CK_ATTRIBUTE_TYPE(CKA_SERIAL_NUMBER), serial),
        ]
        if let label { template.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        _ = try session.createObject(template)
        for ca in chain where ca != certificate {
            let caDER = ca.der
            if try !session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
                                         .bytes(CK_ATTRIBUTE_TYPE(CKA_VALUE), caDER)], limit: 1).isEmpty { continue }
            var caTemplate: [PKCS11Attribute] = [
                .ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_CERTIFICATE)),
                .ulong(CK_ATTRIBUTE_TYPE(CKA_CERTIFICATE_TYPE), CK_ULONG(CKC_X_509)),
                .bool(CK_ATTRIBUTE_TYPE(CKA_TOKEN), true), .bool(CK_ATTRIBUTE_TYPE(CKA_PRIVATE), false),
                .bytes(CK_ATTRIBUTE_TYPE(CKA_VALUE), caDER),
                .bytes(CK_ATTRIBUTE_TYPE(CKA_SUBJECT), derEncode { i2d_X509_NAME(X509_get_subject_name(ca.x509), $0) } ?? []),
                .bytes(CK_ATTRIBUTE_TYPE(CKA_ISSUER), derEncode { i2d_X509_NAME(X509_get_issuer_name(ca.x509), $0) } ?? []),
                .bytes(CK_ATTRIBUTE_TYPE(CKA_SERIAL_NUMBER), derEncode { i2d_ASN1_INTEGER(X509_get_serialNumber(ca.x509), $0) } ?? []),
            ]
            if let cn = ca.commonName { caTemplate.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(cn.utf8))) }
            _ = try session.createObject(caTemplate)
        }
        return try P11KitURI.format(token: info, label: label, id: id.isEmpty ? nil : id, cls: CK_OBJECT_CLASS(CKO_CERTIFICATE))
    }

    /// Deletes the private key the URI names and every object sharing its CKA_ID (its public
    /// key, its certificates): what a renewal's grace period ends with. Returns how many objects
    /// were destroyed. ``MTLSError/Code/notFound`` when the key is not there.
    @discardableResult
    public static func deleteKey(uri text: String, modulePath: String? = nil, pin: SecretBytes? = nil) throws -> Int {
        let uri = try PKCS11URI(text)
        let (session, token, _) = try openToken(uri: uri, text: text, modulePath: modulePath, readWrite: true, requireObject: true)
        try requireLogin(session, token, uri: uri, pin: pin, pinCallback: nil, allowFinalTry: false)
        let key = try findPrivateKey(session, token: token, uri: uri)
        let id = try session.attributes(key, [CK_ATTRIBUTE_TYPE(CKA_ID)], guess: 256)[CK_ATTRIBUTE_TYPE(CKA_ID)] ?? []
        var objects = [key]
        if !id.isEmpty {
            // A key without an id shares nothing we could tell apart from other keys' objects.
            for cls in [CKO_PUBLIC_KEY, CKO_CERTIFICATE] {
                objects += try session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(cls)),
                                                    .bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)])
            }
        }
        for o in objects { try session.destroyObject(o) }
        return objects.count
    }

    /// The one private key the URI names (by `id` and/or `object`).
    private static func findPrivateKey(_ session: PKCS11Session, token: TokenInfo, uri: PKCS11URI) throws -> CK_OBJECT_HANDLE {
        var selector: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))]
        if let id = uri.id { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)) }
        if let label = uri.object { selector.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        let keys = try session.findObjects(selector, limit: 2)
        guard let key = keys.first else {
            throw MTLSError(.notFound, "no private key matching \(describeObject(uri)) on token \"\(token.label)\"")
        }
        guard keys.count == 1 else {
            throw MTLSError(.badURI, "\(uri.text) matches several private keys on token \"\(token.label)\"; add id= or object=")
        }
        return key
    }

    /// The public half of a token key as an `EVP_PKEY` (one reference, the caller's): RSA from
    /// CKA_MODULUS and CKA_PUBLIC_EXPONENT, EC and Ed25519 from CKA_EC_PARAMS and CKA_EC_POINT
    /// of the public key object with the same CKA_ID.
    static func publicKey(_ session: PKCS11Session, token: TokenInfo, privateKey: CK_OBJECT_HANDLE,
                          id: [UInt8]) throws -> OpaquePointer {
        let types = [CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE), CK_ATTRIBUTE_TYPE(CKA_MODULUS), CK_ATTRIBUTE_TYPE(CKA_PUBLIC_EXPONENT),
                     CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS), CK_ATTRIBUTE_TYPE(CKA_EC_POINT)]
        var a = try session.attributes(privateKey, types)
        if a[types[4]] == nil || a[types[1]] == nil, !id.isEmpty,
           let pub = try session.findObjects([.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PUBLIC_KEY)),
                                              .bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)], limit: 1).first {
            for (k, v) in try session.attributes(pub, types) where a[k] == nil { a[k] = v }
        }
        guard let kt = a[types[0]], kt.count == MemoryLayout<CK_ULONG>.size else {
            throw MTLSError(.token, "the key on token \"\(token.label)\" has no key type")
        }
        let keyType = kt.withUnsafeBytes { $0.loadUnaligned(as: CK_ULONG.self) }
        let ctx = LibraryContext.shared.ctx
        switch keyType {
        case CK_ULONG(CKK_RSA):
            guard let n = a[types[1]], let e = a[types[2]] else {
                throw MTLSError(.token, "the RSA key on token \"\(token.label)\" shows no modulus or exponent")
            }
            // OSSL_PARAM BIGNUMs are native-endian.
            var nLE = Array(n.reversed()), eLE = Array(e.reversed())
            return try nLE.withUnsafeMutableBytes { nb in
                try eLE.withUnsafeMutableBytes { eb in
                    var params = [OSSL_PARAM_construct_BN(paramKey("n"), nb.baseAddress?.assumingMemoryBound(to: UInt8.self), nb.count),
                                  OSSL_PARAM_construct_BN(paramKey("e"), eb.baseAddress?.assumingMemoryBound(to: UInt8.self), eb.count),
                                  OSSL_PARAM_construct_end()]
                    return try fromData("RSA", &params, token: token)
                }
            }
        case CK_ULONG(CKK_EC), CK_ULONG(CKK_EC_EDWARDS):
            guard let params = a[types[3]], let wrapped = a[types[4]] else {
                throw MTLSError(.token, "the EC key on token \"\(token.label)\" shows no curve or point (no public key object with its id)")
            }
            let point = unwrapOctetString(wrapped)
            if params == ed25519Params || params == ed25519NameParams {
                guard let key = EVP_PKEY_new_raw_public_key_ex(ctx, "ED25519", nil, point, point.count) else {
                    throw MTLSError.openSSL(.token, "the Ed25519 public key on token \"\(token.label)\" is not valid")
                }
                return key
            }
            let group: String
            switch params {
            case p256Params: group = "P-256"
            case p384Params: group = "P-384"
            default: throw MTLSError(.unsupported, "the curve of the key on token \"\(token.label)\" is not P-256, P-384 or Ed25519")
            }
            var pointBytes = point
            return try group.withCString { g in
                try pointBytes.withUnsafeMutableBytes { pb in
                    var p = [OSSL_PARAM_construct_utf8_string(paramKey("group"), UnsafeMutablePointer(mutating: g), 0),
                             OSSL_PARAM_construct_octet_string(paramKey("pub"), pb.baseAddress, pb.count),
                             OSSL_PARAM_construct_end()]
                    return try fromData("EC", &p, token: token)
                }
            }
        default:
            throw MTLSError(.unsupported, "the key on token \"\(token.label)\" is of an unsupported type (CKK 0x\(String(keyType, radix: 16)))")
        }
    }

    /// An OSSL_PARAM key: OSSL_PARAM keeps the pointer, so it must outlive the call (a Swift
    /// string bridged to C lives only during one call; a static string lives forever).
    private static func paramKey(_ key: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(key.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// EVP_PKEY_PUBLIC_KEY (evp.h: all parameters 0x84 | public key 0x02), which does not import.
    private static let publicKeySelection: Int32 = 0x86

    private static func fromData(_ name: String, _ params: inout [OSSL_PARAM], token: TokenInfo) throws -> OpaquePointer {
        guard let pctx = EVP_PKEY_CTX_new_from_name(LibraryContext.shared.ctx, name, nil) else {
            throw MTLSError.openSSL(.internal, "EVP_PKEY_CTX_new_from_name(\(name)) failed")
        }
        defer { EVP_PKEY_CTX_free(pctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(pctx) == 1,
              EVP_PKEY_fromdata(pctx, &key, publicKeySelection, &params) == 1, let key else {
            throw MTLSError.openSSL(.token, "the \(name) public key on token \"\(token.label)\" is not valid")
        }
        return key
    }

    /// CKA_EC_POINT is a DER OCTET STRING around the point (PKCS#11 2.40); some tokens give the
    /// bare point. OpenSSL's DER decoder decides which.
    private static func unwrapOctetString(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBufferPointer { buf -> [UInt8] in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            guard let s = d2i_ASN1_OCTET_STRING(nil, &p, buf.count) else { OpenSSLErrorQueue.clear(); return bytes }
            defer { ASN1_OCTET_STRING_free(s) }
            guard let start = buf.baseAddress, p == start + buf.count, let data = ASN1_STRING_get0_data(s) else { return bytes }
            return Array(UnsafeBufferPointer(start: data, count: Int(ASN1_STRING_length(s))))
        }
    }
}
