// mtls_token, mtls_token_object and mtls_identity_from_pkcs11: PKCS#11 tokens through p11-kit.
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif

/// An `mtls_token` handle: one listed token (immutable).
final class TokenHandle {
    let info: TokenInfo
    init(_ info: TokenInfo) { self.info = info }
}

/// An `mtls_token_object` handle: one listed object (immutable).
final class TokenObjectHandle {
    let object: TokenObject
    init(_ object: TokenObject) { self.object = object }
}

// MARK: tokens

/// `int mtls_token_list(const char *module_path, mtls_token ***out, size_t *count)`
@_cdecl("mtls_token_list")
public func mtls_token_list(_ modulePath: UnsafePointer<CChar>?,
                            _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                            _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) { try PKCS11Modules(modulePath: optionalString(modulePath, "module_path")).tokens().map(TokenHandle.init) }
    }
}

/// `void mtls_token_list_free(mtls_token **list, size_t count)`
@_cdecl("mtls_token_list_free")
public func mtls_token_list_free(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int) {
    freeHandles(list, count, TokenHandle.self)
}

/// `mtls_token *mtls_token_ref(mtls_token *token)`
@_cdecl("mtls_token_ref")
public func mtls_token_ref(_ token: OpaquePointer?) -> OpaquePointer? { refHandle(token, TokenHandle.self) }

/// `void mtls_token_free(mtls_token *token)`
@_cdecl("mtls_token_free")
public func mtls_token_free(_ token: OpaquePointer?) { releaseHandle(token, TokenHandle.self) }

private func tokenString(_ token: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                         _ field: (TokenInfo) -> String?) -> Int32 {
    abiCall {
        try putOptionalString(out) { field(try handle(token, TokenHandle.self, "token").info) }
    }
}

/// `int mtls_token_label(const mtls_token *token, char **out)`
@_cdecl("mtls_token_label")
public func mtls_token_label(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.label }
}

/// `int mtls_token_uri(const mtls_token *token, char **out)`
@_cdecl("mtls_token_uri")
public func mtls_token_uri(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.uri }
}

/// `int mtls_token_manufacturer(const mtls_token *token, char **out)`
@_cdecl("mtls_token_manufacturer")
public func mtls_token_manufacturer(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.manufacturer }
}

/// `int mtls_token_model(const mtls_token *token, char **out)`
@_cdecl("mtls_token_model")
public func mtls_token_model(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.model }
}

/// `int mtls_token_serial(const mtls_token *token, char **out)`
@_cdecl("mtls_token_serial")
public func mtls_token_serial(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.serial }
}

/// `int mtls_token_module_name(const mtls_token *token, char **out)`
@_cdecl("mtls_token_module_name")
public func mtls_token_module_name(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.moduleName }
}

/// `int mtls_token_module_path(const mtls_token *token, char **out)`
@_cdecl("mtls_token_module_path")
public func mtls_token_module_path(_ t: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    tokenString(t, out) { $0.modulePath }
}

/// `int mtls_token_slot(const mtls_token *token, unsigned long *slot_id)`
@_cdecl("mtls_token_slot")
public func mtls_token_slot(_ t: OpaquePointer?, _ slot: UnsafeMutablePointer<UInt>?) -> Int32 {
    abiCall {
        let info = try handle(t, TokenHandle.self, "token").info
        try require(slot, "slot_id").pointee = info.slotID
    }
}

/// `int mtls_token_flags(const mtls_token *token, unsigned int *flags)`
@_cdecl("mtls_token_flags")
public func mtls_token_flags(_ t: OpaquePointer?, _ flags: UnsafeMutablePointer<UInt32>?) -> Int32 {
    abiCall {
        let info = try handle(t, TokenHandle.self, "token").info
        let flags = try require(flags, "flags")
        flags.pointee = flagBits(info)
    }
}

/// A token's flags as the header's MTLS_TOKEN_* bits.
private func flagBits(_ info: TokenInfo) -> UInt32 {
    var f: Int32 = 0
    if info.loginRequired { f |= MTLS_TOKEN_LOGIN_REQUIRED }
    if info.userPINLocked { f |= MTLS_TOKEN_PIN_LOCKED }
    if info.userPINCountLow { f |= MTLS_TOKEN_PIN_COUNT_LOW }
    if info.userPINFinalTry { f |= MTLS_TOKEN_PIN_FINAL_TRY }
    if info.protectedAuthenticationPath { f |= MTLS_TOKEN_PROTECTED_AUTH_PATH }
    if info.userPINInitialized { f |= MTLS_TOKEN_USER_PIN_INITIALIZED }
    return UInt32(bitPattern: f)
}

// MARK: objects

/// `int mtls_token_objects(const char *module_path, const char *token_uri, const char *pin, mtls_token_object ***out, size_t *count)`
@_cdecl("mtls_token_objects")
public func mtls_token_objects(_ modulePath: UnsafePointer<CChar>?, _ tokenURI: UnsafePointer<CChar>?,
                               _ pin: UnsafePointer<CChar>?,
                               _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                               _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) {
            let secret = secretBytes(pin)
            let objects = try PKCS11Modules(modulePath: optionalString(modulePath, "module_path"))
                .objects(tokenURI: optionalString(tokenURI, "token_uri"), pin: secret)
            return objects.map(TokenObjectHandle.init)
        }
    }
}

/// `void mtls_token_object_list_free(mtls_token_object **list, size_t count)`
@_cdecl("mtls_token_object_list_free")
public func mtls_token_object_list_free(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int) {
    freeHandles(list, count, TokenObjectHandle.self)
}

/// `mtls_token_object *mtls_token_object_ref(mtls_token_object *object)`
@_cdecl("mtls_token_object_ref")
public func mtls_token_object_ref(_ o: OpaquePointer?) -> OpaquePointer? { refHandle(o, TokenObjectHandle.self) }

/// `void mtls_token_object_free(mtls_token_object *object)`
@_cdecl("mtls_token_object_free")
public func mtls_token_object_free(_ o: OpaquePointer?) { releaseHandle(o, TokenObjectHandle.self) }

/// `int mtls_token_object_kind(const mtls_token_object *object, int *kind)`
@_cdecl("mtls_token_object_kind")
public func mtls_token_object_kind(_ o: OpaquePointer?, _ kind: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let object = try handle(o, TokenObjectHandle.self, "object").object
        let kind = try require(kind, "kind")
        switch object.kind {
        case .certificate: kind.pointee = MTLS_TOKEN_OBJECT_CERT
        case .privateKey: kind.pointee = MTLS_TOKEN_OBJECT_PRIVATE_KEY
        case .publicKey: kind.pointee = MTLS_TOKEN_OBJECT_PUBLIC_KEY
        }
    }
}

private func objectString(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                          _ field: (TokenObject) -> String?) -> Int32 {
    abiCall {
        try putOptionalString(out) { field(try handle(o, TokenObjectHandle.self, "object").object) }
    }
}

/// `int mtls_token_object_label(const mtls_token_object *object, char **out)`
@_cdecl("mtls_token_object_label")
public func mtls_token_object_label(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    objectString(o, out) { $0.label }
}

/// `int mtls_token_object_uri(const mtls_token_object *object, char **out)`
@_cdecl("mtls_token_object_uri")
public func mtls_token_object_uri(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    objectString(o, out) { $0.uri }
}

/// `int mtls_token_object_key_type(const mtls_token_object *object, char **out)`
@_cdecl("mtls_token_object_key_type")
public func mtls_token_object_key_type(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    objectString(o, out) { $0.keyType }
}

/// `int mtls_token_object_id(const mtls_token_object *object, uint8_t **out, size_t *len)`
@_cdecl("mtls_token_object_id")
public func mtls_token_object_id(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                                 _ len: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(out, len, names: ("out", "len")) { try handle(o, TokenObjectHandle.self, "object").object.id }
    }
}

/// `int mtls_token_object_cert(const mtls_token_object *object, mtls_cert **out)`
@_cdecl("mtls_token_object_cert")
public func mtls_token_object_cert(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let object = try handle(o, TokenObjectHandle.self, "object").object
        try putHandle(out) {
            guard let cert = object.certificate else {
                throw MTLSError(.notFound, "the token object \(object.uri) is not a certificate libmtls can read")
            }
            return cert
        }
    }
}

/// `int mtls_token_object_token(const mtls_token_object *object, mtls_token **out)`
@_cdecl("mtls_token_object_token")
public func mtls_token_object_token(_ o: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let object = try handle(o, TokenObjectHandle.self, "object").object
        let out = try require(out, "out")
        out.pointee = retainHandle(TokenHandle(object.token))
    }
}

// MARK: identities on tokens

/// `typedef int (*mtls_pin_cb)(const char *token_label, const char *token_uri, unsigned int flags,
///                             char *pin, size_t pin_size, void *userdata)`
public typealias mtls_pin_cb = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UInt32,
                                               UnsafeMutablePointer<CChar>?, Int, UnsafeMutableRawPointer?) -> Int32

/// `void (*destroy)(void *userdata)`: releases a callback's userdata.
public typealias mtls_destroy_cb = @convention(c) (UnsafeMutableRawPointer?) -> Void

/// `int mtls_identity_from_pkcs11(const char *uri, mtls_pin_cb pin_cb, void *userdata, void (*destroy)(void *),
///                                mtls_identity **out)`
@_cdecl("mtls_identity_from_pkcs11")
public func mtls_identity_from_pkcs11(_ uri: UnsafePointer<CChar>?, _ pinCallback: mtls_pin_cb?,
                                      _ userdata: UnsafeMutableRawPointer?,
                                      _ destroy: mtls_destroy_cb?,
                                      _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    // destroy(userdata) runs once, when the last holder of the callback lets it go: this call, or
    // an identity whose key asks again before each signature (CKA_ALWAYS_AUTHENTICATE).
    let box = CallbackUserdata(userdata, destroy)
    return abiCall {
        try putHandle(out) {
            try Token.identity(uri: try string(uri, "uri"), pinCallback: pinCallback.map { pinAdapter($0, box) })
        }
    }
}

/// A core PIN callback that asks the application's C callback, through a buffer it writes the
/// PIN into.
private func pinAdapter(_ cb: mtls_pin_cb, _ box: CallbackUserdata) -> TokenPINCallback {
    pinAdapter(cb, box.userdata, keeping: box)
}

private func pinAdapter(_ cb: mtls_pin_cb, _ userdata: UnsafeMutableRawPointer?, keeping box: CallbackUserdata? = nil)
    -> TokenPINCallback {
    // Core PIN callbacks are @Sendable (a token may ask again on a handshake thread); this one
    // is used only during the C call that registered it (see mtls_pin_cb in the header), and
    // its user data is handed back to the application untouched.
    nonisolated(unsafe) let userdata = userdata
    return { request in
        _ = box  // the callback holds its userdata (and so delays destroy) for as long as it lives
        // The buffer the application writes the PIN into; wiped before it is freed.
        let size = 1024
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
        buffer.initialize(repeating: 0, count: size)
        defer {
            explicit_bzero(buffer, size)
            buffer.deallocate()
        }
        let flags = flagBits(request.token)
        let rc = request.tokenLabel.withCString { label in
            request.tokenURI.withCString { tokenURI in cb(label, tokenURI, flags, buffer, size, userdata) }
        }
        guard rc == 0 else { return nil }
        buffer[size - 1] = 0
        return secretBytes(buffer)
    }
}

/// `int mtls_identity_token_uri(const mtls_identity *identity, char **out)`
@_cdecl("mtls_identity_token_uri")
public func mtls_identity_token_uri(_ identity: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        try putOptionalString(out) { try handle(identity, Identity.self, "identity").privateKey.tokenURI }
    }
}

// MARK: enrollment

/// `int mtls_token_keygen(const char *uri, const char *key_type, mtls_pin_cb pin_cb, void *userdata,
///                        char **key_uri)`
@_cdecl("mtls_token_keygen")
public func mtls_token_keygen(_ uri: UnsafePointer<CChar>?, _ keyType: UnsafePointer<CChar>?, _ pinCallback: mtls_pin_cb?,
                              _ userdata: UnsafeMutableRawPointer?,
                              _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let uri = try string(uri, "uri")
        let name = try string(keyType, "key_type")
        _ = try require(out, "key_uri")
        guard let type = TokenKeyType(rawValue: name) else {
            throw MTLSError(.invalidArgument, "unknown key type \"\(name)\" (use \(TokenKeyType.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        try putString(try Token.generateKey(uri: uri, type: type, pinCallback: pinCallback.map { pinAdapter($0, userdata) }), out)
    }
}

/// `int mtls_token_csr(const char *uri, const char *subject, mtls_pin_cb pin_cb, void *userdata, char **csr_pem)`
@_cdecl("mtls_token_csr")
public func mtls_token_csr(_ uri: UnsafePointer<CChar>?, _ subject: UnsafePointer<CChar>?, _ pinCallback: mtls_pin_cb?,
                           _ userdata: UnsafeMutableRawPointer?,
                           _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let uri = try string(uri, "uri")
        let subject = try string(subject, "subject")
        _ = try require(out, "csr_pem")
        let csr = try Token.makeCSR(uri: uri, subject: subject, pinCallback: pinCallback.map { pinAdapter($0, userdata) })
        try putString(csr.pem, out)
    }
}

/// `int mtls_token_import_cert(const char *uri, const mtls_cert *cert, mtls_pin_cb pin_cb, void *userdata,
///                             char **cert_uri)`
@_cdecl("mtls_token_import_cert")
public func mtls_token_import_cert(_ uri: UnsafePointer<CChar>?, _ cert: OpaquePointer?, _ pinCallback: mtls_pin_cb?,
                                   _ userdata: UnsafeMutableRawPointer?,
                                   _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let uri = try string(uri, "uri")
        let certificate = try handle(cert, Certificate.self, "cert")
        let certURI = try Token.importCertificate(certificate, uri: uri, pinCallback: pinCallback.map { pinAdapter($0, userdata) })
        if out != nil { try putString(certURI, out) }
    }
}
