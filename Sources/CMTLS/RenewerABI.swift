// The renewer and its events (issue 27): argument checks and conversions only, the logic is in
// the core (Renewer).
import MTLS
import CMTLSHeader
import FoundationEssentials

private let renewerOptionsSizes = [MemoryLayout<mtls_renewer_options>.size]

private func renewerDefaults() -> mtls_renewer_options {
    var o = mtls_renewer_options()
    o.delete_previous_keys_after = -1
    return o
}

/// `int mtls_renewer_options_init(mtls_renewer_options *opts, unsigned int version)`
@_cdecl("mtls_renewer_options_init")
public func mtls_renewer_options_init(_ opts: UnsafeMutablePointer<mtls_renewer_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        try initVersionedOptions(opts, version, sizes: renewerOptionsSizes, "mtls_renewer_options", versionField: \.version,
                                 renewerDefaults)
    }
}

/// `int mtls_renewer_new(mtls_store *store, const char *label, const mtls_renewer_options *opts, mtls_renewer **out)`
@_cdecl("mtls_renewer_new")
public func mtls_renewer_new(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ opts: UnsafePointer<mtls_renewer_options>?,
                             _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let s = try handle(store, CredentialStore.self, "store")
            let o = try opts.map { try readVersioned($0, zero: renewerDefaults(), sizes: renewerOptionsSizes, "mtls_renewer_options") }
                ?? renewerDefaults()
            var options = RenewalOptions()
            if o.delete_previous_keys_after >= 0 { options.deletePreviousTokenKeysAfter = Double(o.delete_previous_keys_after) }
            let policy = try o.policy.map { try handle($0, TrustPolicy.self, "opts->policy") }
            return Renewer(store: s, label: try optionalString(label, "label"), policy: policy, tokenPIN: secretBytes(o.token_pin),
                           caKeyPassword: secretBytes(o.ca_key_password), options: options)
        }
    }
}

private func renewer(_ p: OpaquePointer?) throws -> Renewer { try handle(p, Renewer.self, "renewer") }

/// `int mtls_renewer_set_event_callback(mtls_renewer *renewer, mtls_event_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_renewer_set_event_callback")
public func mtls_renewer_set_event_callback(_ r: OpaquePointer?, _ cb: EventCallbackBox.Callback?,
                                            _ userdata: UnsafeMutableRawPointer?,
                                            _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall { EventCallbackBox.install(try renewer(r).events, cb, userdata, destroy) }
}

/// `int mtls_renewer_run_once(mtls_renewer *renewer, int force, size_t *renewed, int64_t *next_wake)`
@_cdecl("mtls_renewer_run_once")
public func mtls_renewer_run_once(_ r: OpaquePointer?, _ force: Int32, _ renewed: UnsafeMutablePointer<Int>?,
                                  _ nextWake: UnsafeMutablePointer<Int64>?) -> Int32 {
    abiCall {
        renewed?.pointee = 0
        let rn = try renewer(r)
        let attempts = try rn.runOnce(force: force != 0)
        renewed?.pointee = attempts.filter { $0.outcome?.renewed == true }.count
        nextWake?.pointee = rn.nextWake.map { Int64($0.timeIntervalSince1970) } ?? 0
    }
}

/// `void mtls_renewer_free(mtls_renewer *renewer)`
@_cdecl("mtls_renewer_free")
public func mtls_renewer_free(_ r: OpaquePointer?) { releaseHandle(r, Renewer.self) }
