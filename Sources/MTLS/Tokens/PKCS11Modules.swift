internal import CP11Kit
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A token in a slot of a PKCS#11 module, as listed by ``PKCS11Modules/tokens()``.
public struct TokenInfo: Sendable {
    /// The module's name (p11-kit's, e.g. `softhsm2`) and file.
    public let moduleName: String
    public let modulePath: String?
    /// The slot's id and description.
    public let slotID: UInt
    public let slotDescription: String
    /// CK_TOKEN_INFO's label, manufacturer, model and serial, without padding.
    public let label: String
    public let manufacturer: String
    public let model: String
    public let serial: String
    /// Whether the token needs a PIN before private objects can be used.
    public let loginRequired: Bool
    /// Whether the user PIN is set (false on a fresh token).
    public let userPINInitialized: Bool
    /// Whether the user PIN is locked (too many wrong tries).
    public let userPINLocked: Bool
    /// The token's RFC 7512 URI (`pkcs11:model=...;manufacturer=...;serial=...;token=...`).
    public let uri: String
}

/// A certificate or key on a token, as listed by ``PKCS11Modules/objects(tokenURI:pin:)``.
public struct TokenObject: Sendable {
    public enum Kind: String, Sendable {
        case certificate
        case privateKey = "private-key"
        case publicKey = "public-key"
    }
    public let kind: Kind
    /// CKA_LABEL and CKA_ID (the ID ties a key to its certificate).
    public let label: String?
    public let id: [UInt8]
    /// The token it lives on.
    public let token: TokenInfo
    /// The object's RFC 7512 URI (token attributes, `object=`, `id=`, `type=`).
    public let uri: String
    /// For certificates, the parsed certificate (nil if the token's value does not parse).
    public let certificate: Certificate?
}

/// PKCS#11 modules loaded through p11-kit: either every module registered with p11-kit
/// (`p11_kit_modules_load_and_initialize`), or one module file (`p11_kit_module_load`).
/// Modules are initialised when this object is made and finalised when it is released.
/// Use from one thread at a time.
public final class PKCS11Modules: @unchecked Sendable {
    private let modules: [UnsafeMutablePointer<CK_FUNCTION_LIST>]
    private let registered: UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?

    /// Loads `modulePath` (a PKCS#11 `.so`), or every module registered with p11-kit when nil.
    /// Throws ``MTLSError/Code/notFound`` for a missing file, ``MTLSError/Code/token`` when the
    /// module cannot be loaded or initialised.
    public init(modulePath: String? = nil) throws {
        if let modulePath {
            if !modulePath.contains("/") || access(modulePath, F_OK) != 0 {
                if modulePath.contains("/") {
                    throw MTLSError(.notFound, "no PKCS#11 module at \(modulePath)")
                }
            }
            guard let m = p11_kit_module_load(modulePath, 0) else {
                throw MTLSError(.token, "cannot load the PKCS#11 module \(modulePath)" + Self.p11KitMessage())
            }
            let rv = p11_kit_module_initialize(m)
            guard rv == CKR_OK else {
                p11_kit_module_release(m)
                throw MTLSError(.token, "cannot initialise the PKCS#11 module \(modulePath): \(Self.text(rv))")
            }
            modules = [m]
            registered = nil
        } else {
            guard let list = p11_kit_modules_load_and_initialize(0) else {
                throw MTLSError(.token, "cannot load the PKCS#11 modules registered with p11-kit" + Self.p11KitMessage())
            }
            var ms: [UnsafeMutablePointer<CK_FUNCTION_LIST>] = []
            var i = 0
            while let m = list[i] { ms.append(m); i += 1 }
            modules = ms
            registered = list
        }
    }

    deinit {
        if let registered {
            p11_kit_modules_finalize_and_release(registered)
        } else {
            for m in modules {
                _ = p11_kit_module_finalize(m)
                p11_kit_module_release(m)
            }
        }
    }

    // MARK: Listing

    /// Every token present in a slot of the loaded modules.
    public func tokens() throws -> [TokenInfo] {
        try modules.flatMap { try tokens(of: $0) }
    }

    /// The certificates and keys of the tokens matching `tokenURI` (every token when nil).
    /// With a `pin`, logs in first so that private objects (private keys) are listed too.
    /// Throws ``MTLSError/Code/badURI`` for a URI that does not parse,
    /// ``MTLSError/Code/tokenNotPresent`` when no token matches,
    /// ``MTLSError/Code/pinIncorrect`` / ``MTLSError/Code/pinLocked`` for a refused PIN.
    public func objects(tokenURI: String? = nil, pin: SecretBytes? = nil) throws -> [TokenObject] {
        let filter = try tokenURI.map(TokenURI.init)
        var found = false
        var out: [TokenObject] = []
        for m in modules {
            for (token, slot) in try tokens(of: m).map({ ($0, CK_SLOT_ID($0.slotID)) }) {
                if let filter, !(try filter.matches(module: m, slot: slot)) { continue }
                found = true
                out += try objects(of: m, slot: slot, token: token, pin: pin)
            }
        }
        if !found {
            throw MTLSError(.tokenNotPresent, tokenURI.map { "no token matches \($0)" } ?? "no token is present")
        }
        return out
    }

    private func tokens(of m: UnsafeMutablePointer<CK_FUNCTION_LIST>) throws -> [TokenInfo] {
        let f = m.pointee
        let path = p11_kit_module_get_filename(m).map { s -> String in defer { free(s) }; return String(cString: s) }
        // A module loaded by path has no p11-kit name: its file name stands in.
        let name = p11_kit_module_get_name(m).map { s -> String in defer { free(s) }; return String(cString: s) }
            ?? path.map { String($0.split(separator: "/").last ?? "module") } ?? "module"
        var count: CK_ULONG = 0
        var rv = f.C_GetSlotList(CK_BBOOL(CK_TRUE), nil, &count)
        guard rv == CKR_OK else { throw Self.error(rv, "cannot list the slots of \(name)") }
        var slots = [CK_SLOT_ID](repeating: 0, count: Int(count))
        rv = f.C_GetSlotList(CK_BBOOL(CK_TRUE), &slots, &count)
        guard rv == CKR_OK else { throw Self.error(rv, "cannot list the slots of \(name)") }
        return try slots.prefix(Int(count)).compactMap { slot -> TokenInfo? in
            var slotInfo = CK_SLOT_INFO()
            guard f.C_GetSlotInfo(slot, &slotInfo) == CKR_OK else { return nil }
            var info = CK_TOKEN_INFO()
            let rv = f.C_GetTokenInfo(slot, &info)
            if rv == CKR_TOKEN_NOT_PRESENT || rv == CKR_TOKEN_NOT_RECOGNIZED { return nil }
            guard rv == CKR_OK else { throw Self.error(rv, "cannot read the token in slot \(slot) of \(name)") }
            // A fresh slot (SoftHSM always keeps one) holds no usable token until initialised.
            guard info.flags & CK_FLAGS(CKF_TOKEN_INITIALIZED) != 0 else { return nil }
            return TokenInfo(
                moduleName: name, modulePath: path, slotID: UInt(slot),
                slotDescription: Self.padded(&slotInfo.slotDescription),
                label: Self.padded(&info.label), manufacturer: Self.padded(&info.manufacturerID),
                model: Self.padded(&info.model), serial: Self.padded(&info.serialNumber),
                loginRequired: info.flags & CK_FLAGS(CKF_LOGIN_REQUIRED) != 0,
                userPINInitialized: info.flags & CK_FLAGS(CKF_USER_PIN_INITIALIZED) != 0,
                userPINLocked: info.flags & CK_FLAGS(CKF_USER_PIN_LOCKED) != 0,
                uri: try Self.tokenURI(&info))
        }
    }

    private func objects(of m: UnsafeMutablePointer<CK_FUNCTION_LIST>, slot: CK_SLOT_ID, token: TokenInfo,
                         pin: SecretBytes?) throws -> [TokenObject] {
        let f = m.pointee
        var session: CK_SESSION_HANDLE = 0
        var rv = f.C_OpenSession(slot, CK_FLAGS(CKF_SERIAL_SESSION), nil, nil, &session)
        guard rv == CKR_OK else { throw Self.error(rv, "cannot open a session on token \"\(token.label)\"") }
        defer { _ = f.C_CloseSession(session) }
        if let pin {
            rv = pin.withBytes { p in
                f.C_Login(session, CK_USER_TYPE(CKU_USER), UnsafeMutablePointer(mutating: p.baseAddress), CK_ULONG(p.count))
            }
            guard rv == CKR_OK || rv == CKR_USER_ALREADY_LOGGED_IN else {
                throw Self.error(rv, "cannot log in to token \"\(token.label)\"")
            }
        }
        defer { if pin != nil { _ = f.C_Logout(session) } }

        var out: [TokenObject] = []
        for (cls, kind) in [(CKO_CERTIFICATE, TokenObject.Kind.certificate), (CKO_PRIVATE_KEY, .privateKey),
                            (CKO_PUBLIC_KEY, .publicKey)] {
            var value = CK_OBJECT_CLASS(cls)
            var template = CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_CLASS), pValue: &value,
                                        ulValueLen: CK_ULONG(MemoryLayout<CK_OBJECT_CLASS>.size))
            rv = f.C_FindObjectsInit(session, &template, 1)
            guard rv == CKR_OK else { throw Self.error(rv, "cannot search token \"\(token.label)\"") }
            var handles: [CK_OBJECT_HANDLE] = []
            var batch = [CK_OBJECT_HANDLE](repeating: 0, count: 64)
            while true {
                var n: CK_ULONG = 0
                rv = f.C_FindObjects(session, &batch, CK_ULONG(batch.count), &n)
                guard rv == CKR_OK else { _ = f.C_FindObjectsFinal(session); throw Self.error(rv, "cannot search token \"\(token.label)\"") }
                if n == 0 { break }
                handles += batch.prefix(Int(n))
            }
            _ = f.C_FindObjectsFinal(session)
            for h in handles {
                let label = Self.attribute(f, session, h, CKA_LABEL).map { String(decoding: $0, as: UTF8.self) }
                let id = Self.attribute(f, session, h, CKA_ID) ?? []
                var cert: Certificate? = nil
                if kind == .certificate, let der = Self.attribute(f, session, h, CKA_VALUE) {
                    cert = try? Certificate(der: der)
                }
                out.append(TokenObject(kind: kind, label: label, id: id, token: token,
                                       uri: try Self.objectURI(token: token, label: label, id: id, kind: kind),
                                       certificate: cert))
            }
        }
        return out
    }

    // MARK: Helpers

    /// One attribute's value, or nil when the object does not have it (or hides it).
    private static func attribute(_ f: CK_FUNCTION_LIST, _ session: CK_SESSION_HANDLE, _ object: CK_OBJECT_HANDLE,
                                  _ type: some BinaryInteger) -> [UInt8]? {
        var a = CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(type), pValue: nil, ulValueLen: 0)
        guard f.C_GetAttributeValue(session, object, &a, 1) == CKR_OK, a.ulValueLen != CK_ULONG.max,
              a.ulValueLen < 1 << 20 else { return nil }
        var buf = [UInt8](repeating: 0, count: Int(a.ulValueLen))
        let rv = buf.withUnsafeMutableBytes { p -> CK_RV in
            a.pValue = p.baseAddress
            return f.C_GetAttributeValue(session, object, &a, 1)
        }
        guard rv == CKR_OK else { return nil }
        return Array(buf.prefix(Int(a.ulValueLen)))
    }

    /// A space-padded PKCS#11 text field, trimmed.
    private static func padded<T>(_ field: inout T) -> String {
        withUnsafeBytes(of: &field) { raw in
            var bytes = Array(raw)
            while let last = bytes.last, last == 0x20 || last == 0 { bytes.removeLast() }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    private static func tokenURI(_ info: inout CK_TOKEN_INFO) throws -> String {
        guard let uri = p11_kit_uri_new() else { throw MTLSError(.noMemory, "p11_kit_uri_new failed") }
        defer { p11_kit_uri_free(uri) }
        p11_kit_uri_get_token_info(uri).pointee = info
        return try format(uri, P11_KIT_URI_FOR_TOKEN)
    }

    private static func objectURI(token: TokenInfo, label: String?, id: [UInt8], kind: TokenObject.Kind) throws -> String {
        guard let uri = p11_kit_uri_new() else { throw MTLSError(.noMemory, "p11_kit_uri_new failed") }
        defer { p11_kit_uri_free(uri) }
        let rc = p11_kit_uri_parse(token.uri, P11_KIT_URI_FOR_TOKEN, uri)
        guard rc == P11_KIT_URI_OK.rawValue else { throw MTLSError(.badURI, "cannot parse \(token.uri)") }
        func set(_ type: some BinaryInteger, _ bytes: [UInt8]) {
            var b = bytes
            b.withUnsafeMutableBytes { p in
                var a = CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(type), pValue: p.baseAddress, ulValueLen: CK_ULONG(p.count))
                _ = p11_kit_uri_set_attribute(uri, &a)
            }
        }
        if let label { set(CKA_LABEL, Array(label.utf8)) }
        if !id.isEmpty { set(CKA_ID, id) }
        var cls: CK_OBJECT_CLASS
        switch kind {
        case .certificate: cls = CK_OBJECT_CLASS(CKO_CERTIFICATE)
        case .privateKey: cls = CK_OBJECT_CLASS(CKO_PRIVATE_KEY)
        case .publicKey: cls = CK_OBJECT_CLASS(CKO_PUBLIC_KEY)
        }
        withUnsafeMutableBytes(of: &cls) { p in
            var a = CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_CLASS), pValue: p.baseAddress, ulValueLen: CK_ULONG(p.count))
            _ = p11_kit_uri_set_attribute(uri, &a)
        }
        return try format(uri, P11_KIT_URI_FOR_OBJECT_ON_TOKEN)
    }

    private static func format(_ uri: OpaquePointer, _ type: P11KitUriType) throws -> String {
        var s: UnsafeMutablePointer<CChar>? = nil
        guard p11_kit_uri_format(uri, type, &s) == P11_KIT_URI_OK.rawValue, let s else {
            throw MTLSError(.internal, "cannot format a pkcs11: URI")
        }
        defer { free(s) }
        return String(cString: s)
    }

    static func text(_ rv: CK_RV) -> String {
        p11_kit_strerror(rv).map { String(cString: $0) } ?? String(rv, radix: 16)
    }

    /// The ``MTLSError`` for a PKCS#11 return value: the token codes for PIN and presence
    /// problems, ``MTLSError/Code/token`` otherwise.
    static func error(_ rv: CK_RV, _ what: String) -> MTLSError {
        let code: MTLSError.Code
        switch rv {
        case CK_RV(CKR_PIN_INCORRECT), CK_RV(CKR_PIN_LEN_RANGE), CK_RV(CKR_PIN_INVALID): code = .pinIncorrect
        case CK_RV(CKR_PIN_LOCKED): code = .pinLocked
        case CK_RV(CKR_TOKEN_NOT_PRESENT), CK_RV(CKR_TOKEN_NOT_RECOGNIZED): code = .tokenNotPresent
        case CK_RV(CKR_DEVICE_REMOVED), CK_RV(CKR_SESSION_HANDLE_INVALID), CK_RV(CKR_SESSION_CLOSED): code = .tokenRemoved
        case CK_RV(CKR_USER_PIN_NOT_INITIALIZED): code = .pinRequired
        default: code = .token
        }
        return MTLSError(code, "\(what): \(text(rv))")
    }

    private static func p11KitMessage() -> String {
        p11_kit_message().map { ": " + String(cString: $0) } ?? ""
    }
}

/// A parsed `pkcs11:` URI used to pick tokens.
final class TokenURI {
    let uri: OpaquePointer

    init(_ text: String) throws {
        guard text.hasPrefix("pkcs11:") else {
            throw MTLSError(.badURI, "not a PKCS#11 URI (it must start with pkcs11:): \(text)")
        }
        guard let uri = p11_kit_uri_new() else { throw MTLSError(.noMemory, "p11_kit_uri_new failed") }
        let rc = p11_kit_uri_parse(text, P11_KIT_URI_FOR_ANY, uri)
        guard rc == P11_KIT_URI_OK.rawValue else {
            p11_kit_uri_free(uri)
            let why = p11_kit_uri_message(rc).map { String(cString: $0) } ?? "bad syntax"
            throw MTLSError(.badURI, "invalid PKCS#11 URI \(text): \(why)")
        }
        self.uri = uri
    }

    deinit { p11_kit_uri_free(uri) }

    func matches(module m: UnsafeMutablePointer<CK_FUNCTION_LIST>, slot: CK_SLOT_ID) throws -> Bool {
        var info = CK_TOKEN_INFO()
        guard m.pointee.C_GetTokenInfo(slot, &info) == CKR_OK else { return false }
        return p11_kit_uri_match_token_info(uri, &info) == 1
    }
}
