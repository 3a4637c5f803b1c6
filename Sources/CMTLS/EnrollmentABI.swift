import MTLS

// MARK: renewal (issue 27)

/// `int mtls_renew(mtls_store *store, const char *label, int force, const mtls_policy *policy,
///                 const char *pin, int *renewed)`
@_cdecl("mtls_renew")
public func mtls_renew(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?, _ force: Int32, _ policy: OpaquePointer?,
                       _ pin: UnsafePointer<CChar>?, _ renewed: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        renewed?.pointee = 0
        let s = try handle(store, CredentialStore.self, "store")
        let p = try policy.map { try handle($0, TrustPolicy.self, "policy") }
        let outcome = try Enrollment.renew(store: s, label: try string(label, "label"), force: force != 0, policy: p,
                                           tokenPIN: secretBytes(pin))
        renewed?.pointee = outcome.renewed ? 1 : 0
    }
}
