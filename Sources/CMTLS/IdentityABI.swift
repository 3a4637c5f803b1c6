// mtls_identity and mtls_pkcs12: identities, PKCS#12 import and export.
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif

/// The object behind an `mtls_pkcs12` handle: an immutable import result.
final class PKCS12Handle {
    let contents: PKCS12Contents
    init(_ contents: PKCS12Contents) { self.contents = contents }
}

/// `mtls_identity *mtls_identity_ref(mtls_identity *identity)`
@_cdecl("mtls_identity_ref")
public func mtls_identity_ref(_ identity: OpaquePointer?) -> OpaquePointer? { refHandle(identity, Identity.self) }

/// `void mtls_identity_free(mtls_identity *identity)`
@_cdecl("mtls_identity_free")
public func mtls_identity_free(_ identity: OpaquePointer?) { releaseHandle(identity, Identity.self) }

/// `int mtls_identity_from_pem(const char *cert_pem, const char *key_pem, const char *password, mtls_identity **out)`
@_cdecl("mtls_identity_from_pem")
public func mtls_identity_from_pem(_ certPEM: UnsafePointer<CChar>?, _ keyPEM: UnsafePointer<CChar>?,
                                   _ pass: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let certs = Array(try string(certPEM, "cert_pem").utf8)
            let key = Array(try string(keyPEM, "key_pem").utf8)
            return try Identity(certificatePEM: certs, keyPEM: key, password: secretBytes(pass))
        }
    }
}

/// `int mtls_identity_leaf(const mtls_identity *identity, mtls_cert **out)`
@_cdecl("mtls_identity_leaf")
public func mtls_identity_leaf(_ identity: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let id = try handle(identity, Identity.self, "identity")
        try require(out, "out").pointee = retainHandle(id.leaf)
    }
}

/// `int mtls_identity_chain(const mtls_identity *identity, mtls_cert ***out, size_t *count)`
@_cdecl("mtls_identity_chain")
public func mtls_identity_chain(_ identity: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putHandles(out, count) { try handle(identity, Identity.self, "identity").chain } }
}

/// `void mtls_identity_list_free(mtls_identity **list, size_t count)`
@_cdecl("mtls_identity_list_free")
public func mtls_identity_list_free(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int) {
    freeHandles(list, count, Identity.self)
}

/// `int mtls_identity_friendly_name(const mtls_identity *identity, char **out)`
@_cdecl("mtls_identity_friendly_name")
public func mtls_identity_friendly_name(_ identity: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        try putOptionalString(out) { try handle(identity, Identity.self, "identity").friendlyName }
    }
}

/// `int mtls_identity_local_key_id(const mtls_identity *identity, uint8_t **out, size_t *len)`
@_cdecl("mtls_identity_local_key_id")
public func mtls_identity_local_key_id(_ identity: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                                       _ len: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(out, len, names: ("out", "len")) { try handle(identity, Identity.self, "identity").localKeyID }
    }
}

/// `int mtls_identity_key_type(const mtls_identity *identity, char **name, int *bits)`
@_cdecl("mtls_identity_key_type")
public func mtls_identity_key_type(_ identity: OpaquePointer?, _ name: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                                   _ bits: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let id = try handle(identity, Identity.self, "identity")
        let bits = try require(bits, "bits")
        let type = id.privateKey.keyType
        try putString(type.shortName, name)
        bits.pointee = Int32(type.bits)
    }
}

/// `int mtls_identity_chain_check(const mtls_identity *identity, unsigned int *flags, int *openssl_code, char **message)`
@_cdecl("mtls_identity_chain_check")
public func mtls_identity_chain_check(_ identity: OpaquePointer?, _ flags: UnsafeMutablePointer<UInt32>?,
                                      _ code: UnsafeMutablePointer<Int32>?,
                                      _ message: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let id = try handle(identity, Identity.self, "identity")
        let flags = try require(flags, "flags")
        let e = id.chainEvaluation
        var f: UInt32 = 0
        if e.verified { f |= UInt32(MTLS_CHAIN_VERIFIED) }
        if e.reachesSelfSignedRoot { f |= UInt32(MTLS_CHAIN_COMPLETE) }
        if e.signaturesValid { f |= UInt32(MTLS_CHAIN_SIGNATURES_OK) }
        if e.withinValidity { f |= UInt32(MTLS_CHAIN_WITHIN_VALIDITY) }
        if let message { try putString(e.message, message) }
        flags.pointee = f
        code?.pointee = e.openSSLCode
    }
}

/// `int mtls_pkcs12_import(const uint8_t *data, size_t len, const char *password, mtls_pkcs12 **out)`
@_cdecl("mtls_pkcs12_import")
public func mtls_pkcs12_import(_ data: UnsafePointer<UInt8>?, _ len: Int, _ pass: UnsafePointer<CChar>?,
                               _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let input = try bytes(data, len, "data")
            return PKCS12Handle(try PKCS12.parse(input, password: secretBytes(pass)))
        }
    }
}

/// `int mtls_pkcs12_load(const char *path, const char *password, mtls_pkcs12 **out)`
@_cdecl("mtls_pkcs12_load")
public func mtls_pkcs12_load(_ path: UnsafePointer<CChar>?, _ pass: UnsafePointer<CChar>?,
                             _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let path = try string(path, "path")
            return PKCS12Handle(try PKCS12.load(path: path, password: secretBytes(pass)))
        }
    }
}

/// `void mtls_pkcs12_free(mtls_pkcs12 *p12)`
@_cdecl("mtls_pkcs12_free")
public func mtls_pkcs12_free(_ p12: OpaquePointer?) { releaseHandle(p12, PKCS12Handle.self) }

/// `int mtls_pkcs12_identities(const mtls_pkcs12 *p12, mtls_identity ***out, size_t *count)`
@_cdecl("mtls_pkcs12_identities")
public func mtls_pkcs12_identities(_ p12: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                   _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putHandles(out, count) { try handle(p12, PKCS12Handle.self, "p12").contents.identities } }
}

/// `int mtls_pkcs12_certs(const mtls_pkcs12 *p12, mtls_cert ***out, size_t *count)`
@_cdecl("mtls_pkcs12_certs")
public func mtls_pkcs12_certs(_ p12: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                              _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putHandles(out, count) { try handle(p12, PKCS12Handle.self, "p12").contents.certificates } }
}

/// `int mtls_pkcs12_export(const mtls_identity *identity, const char *password, int flags,
///                         const char *friendly_name, uint8_t **out, size_t *len)`
@_cdecl("mtls_pkcs12_export")
public func mtls_pkcs12_export(_ identity: OpaquePointer?, _ pass: UnsafePointer<CChar>?, _ flags: Int32,
                               _ friendlyName: UnsafePointer<CChar>?,
                               _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                               _ len: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(out, len, names: ("out", "len")) {
            let id = try handle(identity, Identity.self, "identity")
            let pw = try require(secretBytes(pass), "password")
            var options = try pkcs12ExportOptions(flags)
            options.friendlyName = try optionalString(friendlyName, "friendly_name")
            return try PKCS12.export(id, password: pw, options: options)
        }
    }
}

/// `int mtls_identity_resolve(const char *name, const char *key_path, const char *password,
///                            const char *pin, mtls_store *store, mtls_identity **out)`
@_cdecl("mtls_identity_resolve")
public func mtls_identity_resolve(_ name: UnsafePointer<CChar>?, _ keyPath: UnsafePointer<CChar>?,
                                  _ password: UnsafePointer<CChar>?, _ pin: UnsafePointer<CChar>?,
                                  _ store: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let store = try store.map { try handle($0, CredentialStore.self, "store") }
            return try Identity.resolve(try string(name, "name"), keyPath: try optionalString(keyPath, "key_path"),
                                        password: secretBytes(password), pin: secretBytes(pin), store: store)
        }
    }
}

/// `int mtls_pkcs12_password_encoding(const mtls_pkcs12 *p12, char **out)`
@_cdecl("mtls_pkcs12_password_encoding")
public func mtls_pkcs12_password_encoding(_ p12: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall {
        try putOptionalString(out) {
            switch try handle(p12, PKCS12Handle.self, "p12").contents.passwordEncoding {
            case .given: "given"
            case .empty: "empty"
            case .absent: "absent"
            }
        }
    }
}

/// The export options the `MTLS_PKCS12_*` flags name (every mtls_*_export_p12 function takes
/// them); unknown bits are an invalid argument.
func pkcs12ExportOptions(_ flags: Int32) throws -> PKCS12ExportOptions {
    guard flags & ~Int32(MTLS_PKCS12_LEGACY) == 0 else {
        throw invalid("unknown PKCS#12 export flags 0x\(String(flags, radix: 16))")
    }
    return flags & Int32(MTLS_PKCS12_LEGACY) != 0 ? .legacy : .modern
}
