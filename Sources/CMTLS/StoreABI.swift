// mtls_store and mtls_store_item: the labeled credential store.
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif

/// mtls_store_options has one version.
private let storeOptionsSizes = [MemoryLayout<mtls_store_options>.size]

private func options(_ p: UnsafePointer<mtls_store_options>?) throws -> CredentialStore.Options {
    var o = CredentialStore.Options()
    guard let p else { return o }
    let c = try readVersioned(p, zero: mtls_store_options(), sizes: storeOptionsSizes, "mtls_store_options")
    o.busyTimeoutMilliseconds = c.busy_timeout_ms
    o.create = c.create != 0
    o.kdf = StoreKDFParameters(logN: Int(c.kdf_log_n), r: Int(c.kdf_r), p: Int(c.kdf_p))
    try o.kdf.validate()
    return o
}

private func secret(_ p: UnsafePointer<UInt8>?, _ len: Int, _ kind: Int32) throws -> StoreSecret {
    // The array built from C memory becomes the SecretBytes' own storage: no unwiped copy.
    switch kind {
    case MTLS_STORE_SECRET_PASSPHRASE: return .passphrase(SecretBytes(try bytes(p, len, "secret")))
    case MTLS_STORE_SECRET_KEY: return .key(SecretBytes(try bytes(p, len, "secret")))
    default: throw invalid("secret_kind must be MTLS_STORE_SECRET_PASSPHRASE or MTLS_STORE_SECRET_KEY")
    }
}

private func itemClass(_ c: Int32, allowAny: Bool) throws -> StoreItemClass? {
    switch c {
    case MTLS_STORE_ANY where allowAny: return nil
    case MTLS_STORE_IDENTITY: return .identity
    case MTLS_STORE_CERTIFICATE: return .certificate
    case MTLS_STORE_TOKEN_IDENTITY: return .tokenIdentity
    default: throw invalid("item_class \(c) is not an MTLS_STORE_* class")
    }
}

/// The header's `MTLS_STORE_*` value of an item class.
func itemClassValue(_ c: StoreItemClass) -> Int32 {
    switch c {
    case .identity: return MTLS_STORE_IDENTITY
    case .certificate: return MTLS_STORE_CERTIFICATE
    case .tokenIdentity: return MTLS_STORE_TOKEN_IDENTITY
    }
}

/// `int mtls_store_options_init(mtls_store_options *opts, unsigned int version)`
@_cdecl("mtls_store_options_init")
public func mtls_store_options_init(_ opts: UnsafeMutablePointer<mtls_store_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        try initVersionedOptions(opts, version, sizes: storeOptionsSizes, "mtls_store_options", versionField: \.version) {
            let d = CredentialStore.Options()
            var c = mtls_store_options()
            c.busy_timeout_ms = d.busyTimeoutMilliseconds
            c.create = d.create ? 1 : 0
            c.kdf_log_n = Int32(d.kdf.logN)
            c.kdf_r = Int32(d.kdf.r)
            c.kdf_p = Int32(d.kdf.p)
            return c
        }
    }
}

/// `int mtls_store_open(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
///                      const mtls_store_options *opts, mtls_store **out)`
@_cdecl("mtls_store_open")
public func mtls_store_open(_ path: UnsafePointer<CChar>?, _ secretData: UnsafePointer<UInt8>?, _ secretLen: Int,
                            _ secretKind: Int32, _ opts: UnsafePointer<mtls_store_options>?,
                            _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            // Opened through withStore: a store this call creates is removed again if the open fails.
            try CredentialStore.withStore(path: try string(path, "path"), secret: try secret(secretData, secretLen, secretKind),
                                          options: try options(opts)) { $0 }
        }
    }
}

/// `int mtls_store_open_secret_file(const char *path, const char *secret_file, const mtls_store_options *opts,
///                                  mtls_store **out)`
@_cdecl("mtls_store_open_secret_file")
public func mtls_store_open_secret_file(_ path: UnsafePointer<CChar>?, _ secretFile: UnsafePointer<CChar>?,
                                        _ opts: UnsafePointer<mtls_store_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let s = try StoreSecret.load(path: try string(secretFile, "secret_file"))
            return try CredentialStore.withStore(path: try string(path, "path"), secret: s, options: try options(opts)) { $0 }
        }
    }
}

/// `int mtls_store_open_key_file(const char *path, const char *key_file, const mtls_store_options *opts,
///                               mtls_store **out)`
@_cdecl("mtls_store_open_key_file")
public func mtls_store_open_key_file(_ path: UnsafePointer<CChar>?, _ keyFile: UnsafePointer<CChar>?,
                                     _ opts: UnsafePointer<mtls_store_options>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let s = try StoreSecret.loadKey(path: try string(keyFile, "key_file"))
            return try CredentialStore.withStore(path: try string(path, "path"), secret: s, options: try options(opts)) { $0 }
        }
    }
}

/// `int mtls_store_allow_module_paths(mtls_store *store, int allow)`
@_cdecl("mtls_store_allow_module_paths")
public func mtls_store_allow_module_paths(_ store: OpaquePointer?, _ allow: Int32) -> Int32 {
    abiCall { try handle(store, CredentialStore.self, "store").allowUnregisteredModulePaths(allow != 0) }
}

/// `void mtls_store_close(mtls_store *store)`
@_cdecl("mtls_store_close")
public func mtls_store_close(_ store: OpaquePointer?) { closeHandle(store, CredentialStore.self) { $0.close() } }

/// `int mtls_store_put_identity(mtls_store *store, const char *label, const mtls_identity *identity, int replace)`
@_cdecl("mtls_store_put_identity")
public func mtls_store_put_identity(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ identity: OpaquePointer?,
                                    _ replace: Int32) -> Int32 {
    abiCall {
        let s = try handle(store, CredentialStore.self, "store")
        try s.putIdentity(try handle(identity, Identity.self, "identity"), label: try string(label, "label"), replace: replace != 0)
    }
}

/// `int mtls_store_put_identities(mtls_store *store, const char *const *labels,
///                                mtls_identity *const *identities, size_t count, int replace)`
@_cdecl("mtls_store_put_identities")
public func mtls_store_put_identities(_ store: OpaquePointer?, _ labels: UnsafePointer<UnsafePointer<CChar>?>?,
                                      _ identities: UnsafePointer<OpaquePointer?>?, _ count: Int, _ replace: Int32) -> Int32 {
    abiCall {
        let s = try handle(store, CredentialStore.self, "store")
        var items: [(label: String, identity: Identity)] = []
        if try size(count, "count") > 0 {
            let l = try require(labels, "labels"), ids = try require(identities, "identities")
            for i in 0..<count {
                items.append((try string(l[i], "labels[\(i)]"), try handle(ids[i], Identity.self, "identities[\(i)]")))
            }
        }
        try s.putIdentities(items, replace: replace != 0)
    }
}

/// `int mtls_store_put_cert(mtls_store *store, const char *label, const mtls_cert *cert, int replace)`
@_cdecl("mtls_store_put_cert")
public func mtls_store_put_cert(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ cert: OpaquePointer?,
                                _ replace: Int32) -> Int32 {
    abiCall {
        let s = try handle(store, CredentialStore.self, "store")
        try s.putCertificate(try handle(cert, Certificate.self, "cert"), label: try string(label, "label"), replace: replace != 0)
    }
}

/// `int mtls_store_put_token_identity(mtls_store *store, const char *label, const char *uri, const mtls_cert *cert,
///                                    mtls_cert *const *chain, size_t chain_count, int replace)`
@_cdecl("mtls_store_put_token_identity")
public func mtls_store_put_token_identity(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ uri: UnsafePointer<CChar>?,
                                          _ cert: OpaquePointer?, _ chain: UnsafePointer<OpaquePointer?>?, _ chainCount: Int,
                                          _ replace: Int32) -> Int32 {
    abiCall {
        let s = try handle(store, CredentialStore.self, "store")
        var certs: [Certificate] = []
        if chainCount > 0 {
            let list = try require(chain, "chain")
            for i in 0..<chainCount { certs.append(try handle(list[i], Certificate.self, "chain[\(i)]")) }
        }
        try s.putTokenIdentity(uri: try string(uri, "uri"), certificate: try handle(cert, Certificate.self, "cert"),
                               chain: certs, label: try string(label, "label"), replace: replace != 0)
    }
}

/// `int mtls_store_import_p12(mtls_store *store, const char *label, const uint8_t *data, size_t len,
///                            const char *password, int replace, mtls_identity **out)`
@_cdecl("mtls_store_import_p12")
public func mtls_store_import_p12(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ data: UnsafePointer<UInt8>?,
                                  _ len: Int, _ password: UnsafePointer<CChar>?, _ replace: Int32,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        out?.pointee = nil
        let s = try handle(store, CredentialStore.self, "store")
        let pw = secretBytes(password)
        let identity = try s.importPKCS12(try bytes(data, len, "data"), password: pw, label: try string(label, "label"),
                                          replace: replace != 0)
        out?.pointee = retainHandle(identity)
    }
}

/// `int mtls_store_get_identity(mtls_store *store, const char *label, mtls_identity **out)`
@_cdecl("mtls_store_get_identity")
public func mtls_store_get_identity(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?,
                                    _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try handle(store, CredentialStore.self, "store").identity(label: try string(label, "label")) }
    }
}

/// `int mtls_store_get_cert(mtls_store *store, const char *label, mtls_cert **out)`
@_cdecl("mtls_store_get_cert")
public func mtls_store_get_cert(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?,
                                _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try handle(store, CredentialStore.self, "store").certificate(label: try string(label, "label")) }
    }
}

/// `int mtls_store_get_token_identity(mtls_store *store, const char *label, char **uri, mtls_cert **cert)`
@_cdecl("mtls_store_get_token_identity")
public func mtls_store_get_token_identity(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?,
                                          _ uri: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                                          _ cert: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let uriOut = try require(uri, "uri"), certOut = try require(cert, "cert")
        uriOut.pointee = nil
        certOut.pointee = nil
        let ref = try handle(store, CredentialStore.self, "store").tokenIdentity(label: try string(label, "label"))
        try putString(ref.uri, uriOut)
        certOut.pointee = retainHandle(ref.certificate)
    }
}

/// `int mtls_store_identities(mtls_store *store, mtls_identity ***out, size_t *count)`
@_cdecl("mtls_store_identities")
public func mtls_store_identities(_ store: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                  _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) { try handle(store, CredentialStore.self, "store").identities() }
    }
}

// MARK: item metadata

/// The handle of an `mtls_store_item`: a ``StoreItemInfo``; every accessor returns a new copy.
final class StoreItemHandle {
    let info: StoreItemInfo
    init(_ info: StoreItemInfo) { self.info = info }
}

private func item(_ p: OpaquePointer?) throws -> StoreItemInfo { try handle(p, StoreItemHandle.self, "item").info }

/// An accessor: `value` of the item written to `out`.
private func itemValue<T>(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<T>?, _ value: (StoreItemInfo) -> T) -> Int32 {
    abiCall {
        let out = try require(out, "out")
        out.pointee = value(try item(p))
    }
}

/// A string accessor: a new copy of `value` of the item (NULL when nil) written to `out`.
private func itemString(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                        _ value: @escaping (StoreItemInfo) -> String?) -> Int32 {
    abiCall { try putOptionalString(out) { value(try item(p)) } }
}

/// `int mtls_store_item_info(mtls_store *store, const char *label, int item_class, mtls_store_item **out)`
@_cdecl("mtls_store_item_info")
public func mtls_store_item_info(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ cls: Int32,
                                 _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let s = try handle(store, CredentialStore.self, "store")
            let info = try s.info(label: try string(label, "label"), itemClass: try itemClass(cls, allowAny: true))
            return StoreItemHandle(info)
        }
    }
}

/// The shape every item-array function shares: check the out-parameters, run `query` on the
/// store, hand out the items.
private func storeItems(_ store: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                        _ count: UnsafeMutablePointer<Int>?, _ query: (CredentialStore) throws -> [StoreItemInfo]) -> Int32 {
    abiCall {
        try putHandles(out, count) { try query(try handle(store, CredentialStore.self, "store")).map(StoreItemHandle.init) }
    }
}

/// `int mtls_store_list(mtls_store *store, int item_class, mtls_store_item ***out, size_t *count)`
@_cdecl("mtls_store_list")
public func mtls_store_list(_ store: OpaquePointer?, _ cls: Int32, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                            _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    storeItems(store, out, count) { try $0.list(itemClass: try itemClass(cls, allowAny: true)) }
}

/// `int mtls_store_find_sha256(mtls_store *store, const char *sha256_hex, mtls_store_item ***out, size_t *count)`
@_cdecl("mtls_store_find_sha256")
public func mtls_store_find_sha256(_ store: OpaquePointer?, _ hex: UnsafePointer<CChar>?,
                                   _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                   _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    storeItems(store, out, count) { try $0.find(sha256: try string(hex, "sha256_hex")) }
}

/// `int mtls_store_find_subject(mtls_store *store, const char *subject, mtls_store_item ***out, size_t *count)`
@_cdecl("mtls_store_find_subject")
public func mtls_store_find_subject(_ store: OpaquePointer?, _ subject: UnsafePointer<CChar>?,
                                    _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                    _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    storeItems(store, out, count) { try $0.find(subject: try string(subject, "subject")) }
}

/// `void mtls_store_item_free(mtls_store_item *item)`
@_cdecl("mtls_store_item_free")
public func mtls_store_item_free(_ p: OpaquePointer?) { releaseHandle(p, StoreItemHandle.self) }

/// `void mtls_store_item_list_free(mtls_store_item **list, size_t count)`
@_cdecl("mtls_store_item_list_free")
public func mtls_store_item_list_free(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int) {
    freeHandles(list, count, StoreItemHandle.self)
}

/// `int mtls_store_item_label(const mtls_store_item *item, char **out)`
@_cdecl("mtls_store_item_label")
public func mtls_store_item_label(_ p: OpaquePointer?, _ out: CStringOut?) -> Int32 { itemString(p, out) { $0.label } }

/// `int mtls_store_item_class(const mtls_store_item *item, int *out)`
@_cdecl("mtls_store_item_class")
public func mtls_store_item_class(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    itemValue(p, out) { itemClassValue($0.itemClass) }
}

/// `int mtls_store_item_subject(const mtls_store_item *item, char **out)`
@_cdecl("mtls_store_item_subject")
public func mtls_store_item_subject(_ p: OpaquePointer?, _ out: CStringOut?) -> Int32 { itemString(p, out) { $0.subject } }

/// `int mtls_store_item_issuer(const mtls_store_item *item, char **out)`
@_cdecl("mtls_store_item_issuer")
public func mtls_store_item_issuer(_ p: OpaquePointer?, _ out: CStringOut?) -> Int32 { itemString(p, out) { $0.issuer } }

/// `int mtls_store_item_leaf_sha256(const mtls_store_item *item, char **out)`
@_cdecl("mtls_store_item_leaf_sha256")
public func mtls_store_item_leaf_sha256(_ p: OpaquePointer?, _ out: CStringOut?) -> Int32 { itemString(p, out) { $0.leafSHA256 } }

/// `int mtls_store_item_token_uri(const mtls_store_item *item, char **out)`
@_cdecl("mtls_store_item_token_uri")
public func mtls_store_item_token_uri(_ p: OpaquePointer?, _ out: CStringOut?) -> Int32 { itemString(p, out) { $0.tokenURI } }

/// `int mtls_store_item_not_after(const mtls_store_item *item, int64_t *out)`
@_cdecl("mtls_store_item_not_after")
public func mtls_store_item_not_after(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    itemValue(p, out) { Int64($0.notAfter.timeIntervalSince1970) }
}

/// `int mtls_store_item_created(const mtls_store_item *item, int64_t *out)`
@_cdecl("mtls_store_item_created")
public func mtls_store_item_created(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    itemValue(p, out) { Int64($0.created.timeIntervalSince1970) }
}

/// `int mtls_store_item_modified(const mtls_store_item *item, int64_t *out)`
@_cdecl("mtls_store_item_modified")
public func mtls_store_item_modified(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    itemValue(p, out) { Int64($0.modified.timeIntervalSince1970) }
}

/// `int mtls_store_item_chain_sha256s(const mtls_store_item *item, char ***out, size_t *count)`
@_cdecl("mtls_store_item_chain_sha256s")
public func mtls_store_item_chain_sha256s(_ p: OpaquePointer?, _ out: CStringListOut?,
                                          _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try item(p).chainSHA256 } }
}

// MARK: deleting, exporting, the secret

/// `int mtls_store_delete(mtls_store *store, const char *label, int item_class, size_t *deleted)`
@_cdecl("mtls_store_delete")
public func mtls_store_delete(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ cls: Int32,
                              _ deleted: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        deleted?.pointee = 0
        let s = try handle(store, CredentialStore.self, "store")
        let n = try s.delete(label: try string(label, "label"), itemClass: try itemClass(cls, allowAny: true))
        deleted?.pointee = n
    }
}

/// `int mtls_store_delete_class(mtls_store *store, int item_class, size_t *deleted)`
@_cdecl("mtls_store_delete_class")
public func mtls_store_delete_class(_ store: OpaquePointer?, _ cls: Int32, _ deleted: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        deleted?.pointee = 0
        let s = try handle(store, CredentialStore.self, "store")
        let n = try s.deleteAll(itemClass: try itemClass(cls, allowAny: false)!)
        deleted?.pointee = n
    }
}

/// `int mtls_store_export_p12(mtls_store *store, const char *label, const char *password, int flags,
///                            uint8_t **out, size_t *out_len)`
@_cdecl("mtls_store_export_p12")
public func mtls_store_export_p12(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ password: UnsafePointer<CChar>?,
                                  _ flags: Int32, _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                                  _ outLen: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putBytes(out, outLen) {
            let s = try handle(store, CredentialStore.self, "store")
            let pw = try require(secretBytes(password), "password")
            return try s.exportPKCS12(label: try string(label, "label"), password: pw, options: try pkcs12ExportOptions(flags))
        }
    }
}

/// `int mtls_store_change_secret(mtls_store *store, const uint8_t *secret, size_t secret_len, int secret_kind)`
@_cdecl("mtls_store_change_secret")
public func mtls_store_change_secret(_ store: OpaquePointer?, _ secretData: UnsafePointer<UInt8>?, _ secretLen: Int,
                                     _ secretKind: Int32) -> Int32 {
    abiCall {
        let s = try handle(store, CredentialStore.self, "store")
        try s.changeSecret(to: try secret(secretData, secretLen, secretKind))
    }
}

// MARK: the store as a whole (0.2.0)

/// `int mtls_store_write_counter(mtls_store *store, uint64_t *out)`
@_cdecl("mtls_store_write_counter")
public func mtls_store_write_counter(_ store: OpaquePointer?, _ out: UnsafeMutablePointer<UInt64>?) -> Int32 {
    abiCall {
        let o = try require(out, "out")
        o.pointee = 0
        o.pointee = try handle(store, CredentialStore.self, "store").writeCounter()
    }
}

/// `int mtls_store_upgrade_preview(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
///                                 const mtls_store_options *opts, mtls_store_item ***items, size_t *count,
///                                 char **confirmation)`
@_cdecl("mtls_store_upgrade_preview")
public func mtls_store_upgrade_preview(_ path: UnsafePointer<CChar>?, _ secretData: UnsafePointer<UInt8>?, _ secretLen: Int,
                                       _ secretKind: Int32, _ opts: UnsafePointer<mtls_store_options>?,
                                       _ items: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                       _ count: UnsafeMutablePointer<Int>?,
                                       _ confirmation: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let conf = try require(confirmation, "confirmation")
        conf.pointee = nil
        var preview: CredentialStore.UpgradePreview?
        try putHandles(items, count) {
            preview = try CredentialStore.upgradePreview(path: try string(path, "path"), secret: try secret(secretData, secretLen, secretKind),
                                                         options: try options(opts))
            return (preview?.items ?? []).map(StoreItemHandle.init)
        }
        if let preview { try putString(preview.confirmation, conf) }
    }
}

/// `int mtls_store_upgrade(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
///                         const mtls_store_options *opts, const char *confirmation, size_t *vouched)`
@_cdecl("mtls_store_upgrade")
public func mtls_store_upgrade(_ path: UnsafePointer<CChar>?, _ secretData: UnsafePointer<UInt8>?, _ secretLen: Int,
                               _ secretKind: Int32, _ opts: UnsafePointer<mtls_store_options>?,
                               _ confirmation: UnsafePointer<CChar>?, _ vouched: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        vouched?.pointee = 0
        let n = try CredentialStore.upgrade(path: try string(path, "path"), secret: try secret(secretData, secretLen, secretKind),
                                            confirming: try string(confirmation, "confirmation"), options: try options(opts))
        vouched?.pointee = n
    }
}
