internal import CP11Kit
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// An RFC 7512 `pkcs11:` URI, parsed by p11-kit: which token (`token`, `manufacturer`, `model`,
/// `serial`), which object (`object` = CKA_LABEL, `id` = CKA_ID, `type`), and where the PIN and
/// the module come from (`pin-value`, `pin-source`, `module-path`, `module-name`).
/// Immutable; safe to share across threads.
public struct PKCS11URI: Sendable, CustomStringConvertible {
    /// The kinds of object a URI's `type` attribute names.
    public enum ObjectType: String, Sendable {
        /// `type=cert`: a certificate.
        case certificate = "cert"
        /// `type=private`: a private key.
        case privateKey = "private"
        /// `type=public`: a public key.
        case publicKey = "public"
        /// `type=secret-key`: a secret key.
        case secretKey = "secret-key"
        /// `type=data`: a data object.
        case data
    }

    /// The text the URI was parsed from.
    public let text: String
    /// Token attributes (CK_TOKEN_INFO's label, manufacturerID, model, serialNumber).
    public let token: String?
    /// The `manufacturer` attribute.
    public let manufacturer: String?
    /// The `model` attribute.
    public let model: String?
    /// The `serial` attribute.
    public let serial: String?
    /// Object attributes: CKA_LABEL, CKA_ID and CKA_CLASS.
    public let object: String?
    /// The `id` attribute (CKA_ID), decoded.
    public let id: [UInt8]?
    /// The `type` attribute (CKA_CLASS: cert, private...).
    public let type: ObjectType?
    /// The PIN given in the URI itself (`pin-value`), and a file to read it from (`pin-source`,
    /// a path or a `file:` URI).
    public let pinValue: String?
    /// The `pin-source` query attribute.
    public let pinSource: String?
    /// The module to load (`module-path`), or the p11-kit registration to use (`module-name`).
    public let modulePath: String?
    /// The `module-name` query attribute.
    public let moduleName: String?

    /// The URI's text as given.
    public var description: String { text }

    /// Parses `text`. Throws ``MTLSError/Code/badURI`` when it is not a `pkcs11:` URI, has bad
    /// syntax or percent-encoding, or an attribute p11-kit does not know (which would
    /// otherwise match nothing without saying why).
    public init(_ text: String) throws {
        let parsed = try P11KitURI(text)
        self.text = text
        func tokenField<T>(_ keyPath: KeyPath<CK_TOKEN_INFO, T>) -> String? {
            guard let info = p11_kit_uri_get_token_info(parsed.uri) else { return nil }
            var field = info.pointee[keyPath: keyPath]
            return PKCS11Text.padded(&field).nilIfEmpty
        }
        token = tokenField(\.label)
        manufacturer = tokenField(\.manufacturerID)
        model = tokenField(\.model)
        serial = tokenField(\.serialNumber)
        object = parsed.attribute(CK_ATTRIBUTE_TYPE(CKA_LABEL)).map { String(decoding: $0, as: UTF8.self) }
        id = parsed.attribute(CK_ATTRIBUTE_TYPE(CKA_ID))
        if let cls = parsed.attribute(CK_ATTRIBUTE_TYPE(CKA_CLASS)), cls.count == MemoryLayout<CK_ULONG>.size {
            switch cls.withUnsafeBytes({ $0.loadUnaligned(as: CK_ULONG.self) }) {
            case CK_ULONG(CKO_CERTIFICATE): type = .certificate
            case CK_ULONG(CKO_PRIVATE_KEY): type = .privateKey
            case CK_ULONG(CKO_PUBLIC_KEY): type = .publicKey
            case CK_ULONG(CKO_SECRET_KEY): type = .secretKey
            default: type = .data
            }
        } else {
            type = nil
        }
        pinValue = p11_kit_uri_get_pin_value(parsed.uri).map { String(cString: $0) }
        pinSource = p11_kit_uri_get_pin_source(parsed.uri).map { String(cString: $0) }
        modulePath = p11_kit_uri_get_module_path(parsed.uri).map { String(cString: $0) }
        moduleName = p11_kit_uri_get_module_name(parsed.uri).map { String(cString: $0) }
    }

    /// Whether `text` looks like a PKCS#11 URI (to tell it from a label or a file name).
    public static func isPKCS11URI(_ text: String) -> Bool {
        text.lowercased().hasPrefix("pkcs11:")
    }
}

/// Owns a `P11KitUri`.
package final class P11KitURI {
    package let uri: OpaquePointer

    package init(_ text: String) throws {
        guard PKCS11URI.isPKCS11URI(text) else {
            throw MTLSError(.badURI, "not a PKCS#11 URI (it must start with \"pkcs11:\"): \(text)")
        }
        guard let uri = p11_kit_uri_new() else { throw MTLSError(.noMemory, "p11_kit_uri_new failed") }
        let rc = p11_kit_uri_parse(text, P11KitUriType(rawValue: P11_KIT_URI_FOR_ANY.rawValue), uri)
        guard rc == P11_KIT_URI_OK.rawValue else {
            p11_kit_uri_free(uri)
            let why = p11_kit_uri_message(rc).map { String(cString: $0) } ?? "bad syntax"
            throw MTLSError(.badURI, "invalid PKCS#11 URI \"\(text)\": \(why)")
        }
        if p11_kit_uri_any_unrecognized(uri) != 0 {
            p11_kit_uri_free(uri)
            throw MTLSError(.badURI, "invalid PKCS#11 URI \"\(text)\": it has an attribute p11-kit does not know")
        }
        // A URI printed before padding was trimmed (model=SW%20%20%20TPM%00...) names the token
        // as a trimmed one does.
        if let info = p11_kit_uri_get_token_info(uri) { info.pointee = PKCS11Text.blankPadded(info.pointee) }
        if let info = p11_kit_uri_get_module_info(uri) { info.pointee = PKCS11Text.blankPadded(info.pointee) }
        self.uri = uri
    }

    /// An empty URI, to be filled and formatted.
    init() throws {
        guard let uri = p11_kit_uri_new() else { throw MTLSError(.noMemory, "p11_kit_uri_new failed") }
        self.uri = uri
    }

    deinit { p11_kit_uri_free(uri) }

    func attribute(_ type: CK_ATTRIBUTE_TYPE) -> [UInt8]? {
        guard let a = p11_kit_uri_get_attribute(uri, type) else { return nil }
        guard let v = a.pointee.pValue, a.pointee.ulValueLen > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: v, count: Int(a.pointee.ulValueLen)))
    }

    func setAttribute(_ type: CK_ATTRIBUTE_TYPE, _ value: [UInt8]) {
        var copy = value
        copy.withUnsafeMutableBytes { p in
            var a = CK_ATTRIBUTE(type: type, pValue: p.baseAddress, ulValueLen: CK_ULONG(p.count))
            _ = p11_kit_uri_set_attribute(uri, &a)
        }
    }

    func matches(token info: CK_TOKEN_INFO) -> Bool {
        var info = PKCS11Text.blankPadded(info)
        return p11_kit_uri_match_token_info(uri, &info) == 1
    }

    func matches(module info: CK_INFO?) -> Bool {
        guard let info else { return true }
        var padded = PKCS11Text.blankPadded(info)
        return p11_kit_uri_match_module_info(uri, &padded) == 1
    }

    func matches(slot info: CK_SLOT_INFO) -> Bool {
        var info = info
        return p11_kit_uri_match_slot_info(uri, &info) == 1
    }

    /// Whether an object with these CKA_CLASS, CKA_LABEL and CKA_ID matches the URI's object
    /// attributes (`type`, `object`, `id`); a URI without them matches every object.
    func matches(objectClass: CK_OBJECT_CLASS, label: String?, id: [UInt8]) -> Bool {
        var attrs: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(objectClass)),
                                        .bytes(CK_ATTRIBUTE_TYPE(CKA_ID), id)]
        if let label { attrs.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        return (try? PKCS11Attribute.withTemplate(attrs) { t, n in p11_kit_uri_match_attributes(uri, t, n) == 1 }) ?? false
    }

    /// The URI of a token, or of an object on it (`label`/`id`/`cls` given).
    static func format(token: CK_TOKEN_INFO, label: String? = nil, id: [UInt8]? = nil,
                       cls: CK_OBJECT_CLASS? = nil) throws -> String {
        let u = try P11KitURI()
        p11_kit_uri_get_token_info(u.uri).pointee = PKCS11Text.blankPadded(token)
        if let label { u.setAttribute(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8)) }
        if let id { u.setAttribute(CK_ATTRIBUTE_TYPE(CKA_ID), id) }
        if let cls { u.setAttribute(CK_ATTRIBUTE_TYPE(CKA_CLASS), withUnsafeBytes(of: cls) { Array($0) }) }
        let type = (label == nil && id == nil && cls == nil) ? P11_KIT_URI_FOR_TOKEN : P11_KIT_URI_FOR_OBJECT_ON_TOKEN
        var s: UnsafeMutablePointer<CChar>? = nil
        guard p11_kit_uri_format(u.uri, type, &s) == P11_KIT_URI_OK.rawValue, let s else {
            throw MTLSError(.internal, "p11_kit_uri_format failed")
        }
        defer { free(s) }
        return String(cString: s)
    }
}

/// PKCS#11's fixed-size, blank-padded text fields. The one place their padding is trimmed: some
/// modules pad with NULs instead of blanks (tpm2-pkcs11's model), and both paddings are
/// trimmed, as p11-kit trims blanks.
enum PKCS11Text {
    static func padded<T>(_ field: inout T) -> String {
        withUnsafeBytes(of: &field) { p in
            var bytes = Array(p)
            while let last = bytes.last, isPadding(last) { bytes.removeLast() }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    private static func isPadding(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0 }

    /// The field with its trailing padding (blanks and NULs) made blanks, as PKCS#11 has it, so
    /// that p11-kit trims it from a URI and matches it against a URI that has none. A field that
    /// starts with a NUL stays as it is: p11-kit reads it as absent (in a URI: any value).
    static func blankPadded<T>(_ field: T) -> T {
        var field = field
        withUnsafeMutableBytes(of: &field) { p in
            guard p.count > 0, p[0] != 0 else { return }
            var i = p.count
            while i > 0, isPadding(p[i - 1]) { i -= 1; p[i] = 0x20 }
        }
        return field
    }

    /// The token's text fields (label, manufacturer, model, serial) blank-padded.
    static func blankPadded(_ info: CK_TOKEN_INFO) -> CK_TOKEN_INFO {
        var info = info
        info.label = blankPadded(info.label)
        info.manufacturerID = blankPadded(info.manufacturerID)
        info.model = blankPadded(info.model)
        info.serialNumber = blankPadded(info.serialNumber)
        return info
    }

    /// The module's text fields (manufacturer, library description) blank-padded.
    static func blankPadded(_ info: CK_INFO) -> CK_INFO {
        var info = info
        info.manufacturerID = blankPadded(info.manufacturerID)
        info.libraryDescription = blankPadded(info.libraryDescription)
        return info
    }
}

fileprivate extension String {
    var nilIfEmpty: String? { isEmpty ? nil : self }
}
