// TEMPORARY stand-in for the trust engineer's evaluator (TrustPolicy / TrustResult), so the TLS
// layer compiles and can be tested before Sources/MTLS/Trust/ lands. Deleted when it does.
internal import COpenSSL
import FoundationEssentials

public enum TrustPurpose: Sendable { case serverAuth, clientAuth }

public final class TrustPolicy: @unchecked Sendable {
    public var anchors: [Certificate]
    public var anchorsOnly: Bool
    public init(anchors: [Certificate] = [], anchorsOnly: Bool = false) {
        self.anchors = anchors
        self.anchorsOnly = anchorsOnly
    }

    public func evaluate(chain: [Certificate], host: String?, purpose: TrustPurpose, at: Date? = nil) -> TrustResult {
        guard let leaf = chain.first else {
            return TrustResult(trusted: false, kind: .fatalFailure,
                               reasons: [.init(code: "no_certificate", certIndex: 0, message: "no certificate")], chain: [])
        }
        let store = X509_STORE_new()!
        defer { X509_STORE_free(store) }
        if !anchorsOnly { X509_STORE_set_default_paths(store) }
        for a in anchors { X509_STORE_add_cert(store, a.x509) }
        let untrusted = mtls_ossl_sk_X509_new_null()!
        defer { mtls_ossl_sk_X509_free(untrusted) }
        for c in chain.dropFirst() { _ = mtls_ossl_sk_X509_push(untrusted, c.x509) }
        let ctx = X509_STORE_CTX_new()!
        defer { X509_STORE_CTX_free(ctx) }
        X509_STORE_CTX_init(ctx, store, leaf.x509, untrusted)
        let param = X509_STORE_CTX_get0_param(ctx)
        X509_VERIFY_PARAM_set_flags(param, UInt(X509_V_FLAG_PARTIAL_CHAIN))
        X509_VERIFY_PARAM_set_purpose(param, purpose == .serverAuth ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT)
        if let host {
            if host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) {
                X509_VERIFY_PARAM_set1_ip_asc(param, host)
            } else {
                X509_VERIFY_PARAM_set1_host(param, host, 0)
            }
        }
        let ok = X509_verify_cert(ctx) == 1
        var built: [Certificate] = []
        if let sk = X509_STORE_CTX_get0_chain(ctx) {
            for i in 0..<mtls_ossl_sk_X509_num(sk) { if let c = try? Certificate(borrowing: mtls_ossl_sk_X509_value(sk, i)!) { built.append(c) } }
        }
        OpenSSLErrorQueue.clear()
        if ok { return TrustResult(trusted: true, kind: .proceed, reasons: [], chain: built) }
        let err = X509_STORE_CTX_get_error(ctx)
        let depth = Int(X509_STORE_CTX_get_error_depth(ctx))
        return TrustResult(trusted: false, kind: .recoverableFailure,
                           reasons: [.init(code: "x509_\(err)", certIndex: depth,
                                           message: String(cString: X509_verify_cert_error_string(Int(err))))],
                           chain: built)
    }
}

public struct TrustResult: Sendable {
    public enum Kind: String, Sendable { case proceed, recoverableFailure = "recoverable_failure", fatalFailure = "fatal_failure" }
    public struct Reason: Sendable {
        public var code: String
        public var certIndex: Int
        public var message: String
    }
    public var trusted: Bool
    public var kind: Kind
    public var reasons: [Reason]
    public var chain: [Certificate]
}
