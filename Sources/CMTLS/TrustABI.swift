// mtls_policy and mtls_trust_result: trust policies and evaluation.
import MTLS
import CMTLSHeader
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A ``TrustResult`` with its strings kept as C strings for the result's lifetime.
final class TrustResultBox {
    let result: TrustResult
    init(_ r: TrustResult) { result = r }
}

/// Calls a C report callback; the userdata's destroy function runs when the policy lets go.
/// Sendable (unchecked: a raw pointer is not): the fields never change, and the header tells the
/// application that `cb` runs on the evaluating thread with `userdata` as given.
public final class ReportCallbackBox: CallbackUserdata, @unchecked Sendable {
    public typealias Callback = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
                                         UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void
    let callback: Callback

    init(_ callback: Callback, _ userdata: UnsafeMutableRawPointer?, _ destroy: mtls_destroy_cb?) {
        self.callback = callback
        super.init(userdata, destroy)
    }

    func report(_ r: TrustReport) {
        for reason in r.reasons {
            callback(r.host, r.rule, reason.code, reason.message, userdata)
        }
    }
}

/// The chain a C caller passes as `certs[0..<count]` (at least one certificate handle), checked
/// the same way by every evaluate function.
private func chainArgument(_ certs: UnsafePointer<OpaquePointer?>?, _ count: Int) throws -> [Certificate] {
    let chain = try handleList(try require(certs, "certs"), count, Certificate.self, "certs")
    guard !chain.isEmpty else { throw invalid("count must be at least 1") }
    return chain
}

private func policy(_ p: OpaquePointer?) throws -> TrustPolicy {
    try handle(p, TrustPolicy.self, "policy")
}

/// `int mtls_policy_new(mtls_policy **out)`
@_cdecl("mtls_policy_new")
public func mtls_policy_new(_ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let out = try require(out, "out")
        out.pointee = retainHandle(TrustPolicy())
    }
}

/// `int mtls_policy_load(const char *path, mtls_policy **out)`
@_cdecl("mtls_policy_load")
public func mtls_policy_load(_ path: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try TrustPolicy.load(path: try string(path, "path")) }
    }
}

/// `int mtls_policy_from_json(const char *json, mtls_policy **out)`
@_cdecl("mtls_policy_from_json")
public func mtls_policy_from_json(_ json: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) { try TrustPolicy(json: Array(try string(json, "json").utf8)) }
    }
}

/// `void mtls_policy_free(mtls_policy *policy)`
@_cdecl("mtls_policy_free")
public func mtls_policy_free(_ p: OpaquePointer?) { releaseHandle(p, TrustPolicy.self) }

/// `int mtls_policy_replace(mtls_policy *policy, const mtls_policy *from)`
@_cdecl("mtls_policy_replace")
public func mtls_policy_replace(_ p: OpaquePointer?, _ from: OpaquePointer?) -> Int32 {
    abiCall {
        let target = try handle(p, TrustPolicy.self, "policy")
        target.replaceSettings(from: try policy(from))
    }
}

/// `int mtls_policy_add_anchor(mtls_policy *policy, const mtls_cert *cert)`
@_cdecl("mtls_policy_add_anchor")
public func mtls_policy_add_anchor(_ p: OpaquePointer?, _ cert: OpaquePointer?) -> Int32 {
    abiCall { try policy(p).addAnchor(try handle(cert, Certificate.self, "cert")) }
}

/// `int mtls_policy_set_anchors_only(mtls_policy *policy, int anchors_only)`
@_cdecl("mtls_policy_set_anchors_only")
public func mtls_policy_set_anchors_only(_ p: OpaquePointer?, _ on: Int32) -> Int32 {
    abiCall { try policy(p).anchorsOnly = on != 0 }
}

/// A C `system_anchors` value: 1 the system store as well as the anchors, 0 never the system
/// store, -1 the default (the rule's: only when there are no anchors in force).
private func systemAnchorsValue(_ on: Int32) throws -> Bool? {
    switch on {
    case -1: return nil
    case 0: return false
    case 1: return true
    default: throw MTLSError(.invalidArgument, "system_anchors must be -1 (the default), 0 or 1, not \(on)")
    }
}

/// `int mtls_policy_set_system_anchors(mtls_policy *policy, int system_anchors)`
@_cdecl("mtls_policy_set_system_anchors")
public func mtls_policy_set_system_anchors(_ p: OpaquePointer?, _ on: Int32) -> Int32 {
    abiCall { try policy(p).systemAnchors = try systemAnchorsValue(on) }
}

/// `int mtls_policy_set_rule_system_anchors(mtls_policy *policy, const char *pattern, int system_anchors)`
@_cdecl("mtls_policy_set_rule_system_anchors")
public func mtls_policy_set_rule_system_anchors(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?, _ on: Int32) -> Int32 {
    abiCall {
        let v = try systemAnchorsValue(on)
        try policy(p).updateHostRule(try string(pattern, "pattern")) { r in r.systemAnchors = v }
    }
}

/// `int mtls_policy_set_name_check(mtls_policy *policy, int enabled)`
@_cdecl("mtls_policy_set_name_check")
public func mtls_policy_set_name_check(_ p: OpaquePointer?, _ on: Int32) -> Int32 {
    abiCall { try policy(p).nameCheck = on != 0 ? .ssl : .none }
}

/// `int mtls_policy_set_time(mtls_policy *policy, int64_t unix_time)`
@_cdecl("mtls_policy_set_time")
public func mtls_policy_set_time(_ p: OpaquePointer?, _ t: Int64) -> Int32 {
    abiCall { try policy(p).time = t == 0 ? nil : Date(timeIntervalSince1970: TimeInterval(t)) }
}

/// `int mtls_policy_add_crl_file(mtls_policy *policy, const char *path)`
@_cdecl("mtls_policy_add_crl_file")
public func mtls_policy_add_crl_file(_ p: OpaquePointer?, _ path: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        pol.addCRLs(try RevocationList.load(path: try string(path, "path")))
    }
}

/// `int mtls_policy_add_host_rule(mtls_policy *policy, const char *pattern, const char *verify_as, int skip_name_check)`
@_cdecl("mtls_policy_add_host_rule")
public func mtls_policy_add_host_rule(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?,
                                      _ verifyAs: UnsafePointer<CChar>?, _ skip: Int32) -> Int32 {
    abiCall {
        let v = try optionalString(verifyAs, "verify_as")
        try policy(p).updateHostRule(try string(pattern, "pattern")) { r in
            r.verifyAs = v
            r.skipNameCheck = skip != 0
        }
    }
}

/// `int mtls_policy_add_rule_anchor(mtls_policy *policy, const char *pattern, const mtls_cert *cert, int anchors_only)`
@_cdecl("mtls_policy_add_rule_anchor")
public func mtls_policy_add_rule_anchor(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?,
                                        _ cert: OpaquePointer?, _ anchorsOnly: Int32) -> Int32 {
    abiCall {
        let c = try handle(cert, Certificate.self, "cert")
        try policy(p).updateHostRule(try string(pattern, "pattern")) { r in r.addAnchor(c, anchorsOnly: anchorsOnly != 0 ? true : nil) }
    }
}

/// `int mtls_policy_add_pin(mtls_policy *policy, const char *pattern, const char *pin)`
@_cdecl("mtls_policy_add_pin")
public func mtls_policy_add_pin(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?, _ pin: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let parsed = try SPKIPin(try string(pin, "pin"))
        try policy(p).updateHostRule(try string(pattern, "pattern")) { r in
            r.addPin(parsed)
        }
    }
}

/// `int mtls_policy_set_pin_expiry(mtls_policy *policy, const char *pattern, int64_t expires, int after_expiry)`
@_cdecl("mtls_policy_set_pin_expiry")
public func mtls_policy_set_pin_expiry(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?, _ expires: Int64,
                                       _ after: Int32) -> Int32 {
    abiCall {
        let afterExpiry: PinExpiryBehavior
        switch after {
        case MTLS_PIN_STOP_ENFORCING: afterExpiry = .stopEnforcing
        case MTLS_PIN_FAIL_CLOSED: afterExpiry = .failClosed
        default: throw invalid("after_expiry must be MTLS_PIN_STOP_ENFORCING or MTLS_PIN_FAIL_CLOSED")
        }
        try policy(p).updateHostRule(try string(pattern, "pattern")) { r in
            r.pinsExpire = expires == 0 ? nil : Date(timeIntervalSince1970: TimeInterval(expires))
            r.afterExpiry = afterExpiry
        }
    }
}

/// `int mtls_policy_set_report_only(mtls_policy *policy, const char *pattern, int report_only)`
@_cdecl("mtls_policy_set_report_only")
public func mtls_policy_set_report_only(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?, _ on: Int32) -> Int32 {
    abiCall {
        try policy(p).updateHostRule(try string(pattern, "pattern")) { r in r.enforcement = on != 0 ? .reportOnly : .enforce }
    }
}

/// `int mtls_policy_set_report_callback(mtls_policy *policy, mtls_trust_report_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_policy_set_report_callback")
public func mtls_policy_set_report_callback(_ p: OpaquePointer?, _ cb: ReportCallbackBox.Callback?,
                                            _ userdata: UnsafeMutableRawPointer?,
                                            _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        guard let cb else { pol.reportHandler = nil; return }
        let box = ReportCallbackBox(cb, userdata, destroy)
        pol.reportHandler = { box.report($0) }
    }
}

/// `int mtls_policy_warnings(const mtls_policy *policy, char ***out, size_t *count)`
@_cdecl("mtls_policy_warnings")
public func mtls_policy_warnings(_ p: OpaquePointer?, _ out: CStringListOut?, _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try policy(p).warnings } }
}

/// `int mtls_evaluate(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host, int purpose, int64_t at, mtls_trust_result **out)`
@_cdecl("mtls_evaluate")
public func mtls_evaluate(_ p: OpaquePointer?, _ certs: UnsafePointer<OpaquePointer?>?, _ count: Int,
                          _ host: UnsafePointer<CChar>?, _ purpose: Int32, _ at: Int64,
                          _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    evaluation(p, certs, count, purpose, at, out) { policy, chain, purpose, at in
        policy.evaluate(chain: chain, host: try optionalString(host, "host"), purpose: purpose, at: at)
    }
}

/// The one marshalling path of mtls_evaluate, mtls_evaluate_peer and
/// mtls_evaluate_with_overrides: the policy and the chain checked, purpose and time converted,
/// `evaluate` run and its result written to `out` as a new handle.
private func evaluation(_ p: OpaquePointer?, _ certs: UnsafePointer<OpaquePointer?>?, _ count: Int, _ purpose: Int32,
                        _ at: Int64, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                        _ evaluate: (TrustPolicy, [Certificate], TrustPurpose?, Date?) throws -> TrustResult) -> Int32 {
    abiCall {
        try putHandle(out) {
            let policy = try handle(p, TrustPolicy.self, "policy")
            let chain = try chainArgument(certs, count)
            return TrustResultBox(try evaluate(policy, chain, try purposeArgument(purpose), timeArgument(at)))
        }
    }
}

/// `int mtls_evaluate_der(mtls_policy *policy, const uint8_t *const *ders, const size_t *lens, size_t count, const char *host, int purpose, int64_t at, mtls_trust_result **out)`
@_cdecl("mtls_evaluate_der")
public func mtls_evaluate_der(_ p: OpaquePointer?, _ ders: UnsafePointer<UnsafePointer<UInt8>?>?, _ lens: UnsafePointer<Int>?,
                              _ count: Int, _ host: UnsafePointer<CChar>?, _ purpose: Int32, _ at: Int64,
                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let h = try handle(p, TrustPolicy.self, "policy")
            let ders = try require(ders, "ders"), lens = try require(lens, "lens")
            guard count > 0 else { throw invalid("count must be at least 1") }
            let chain = try (0..<count).map { try bytes(ders[$0], lens[$0], "ders[\($0)]") }
            let result = try h.evaluate(derChain: chain, host: try optionalString(host, "host"), purpose: try purposeArgument(purpose),
                                        at: timeArgument(at))
            return TrustResultBox(result)
        }
    }
}

/// `int mtls_policy_set_cache(mtls_policy *policy, int enabled)`
@_cdecl("mtls_policy_set_cache")
public func mtls_policy_set_cache(_ p: OpaquePointer?, _ on: Int32) -> Int32 {
    abiCall { try policy(p).evaluationCacheEnabled = on != 0 }
}

/// An `int64_t at` argument (seconds since the epoch); 0 is the policy's time or now (nil).
private func timeArgument(_ at: Int64) -> Date? {
    at == 0 ? nil : Date(timeIntervalSince1970: TimeInterval(at))
}

private func purposeArgument(_ purpose: Int32) throws -> TrustPurpose? {
    switch purpose {
    case MTLS_PURPOSE_DEFAULT: return nil
    case MTLS_PURPOSE_SERVER: return .serverAuth
    case MTLS_PURPOSE_CLIENT: return .clientAuth
    default: throw invalid("purpose must be MTLS_PURPOSE_DEFAULT, _SERVER or _CLIENT")
    }
}

private func result(_ r: OpaquePointer?) throws -> TrustResultBox { try handle(r, TrustResultBox.self, "result") }

/// `void mtls_trust_result_free(mtls_trust_result *result)`
@_cdecl("mtls_trust_result_free")
public func mtls_trust_result_free(_ r: OpaquePointer?) { releaseHandle(r, TrustResultBox.self) }

/// `int mtls_trust_result_trusted(const mtls_trust_result *result, int *trusted)`
@_cdecl("mtls_trust_result_trusted")
public func mtls_trust_result_trusted(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall { try require(out, "trusted").pointee = try result(r).result.trusted ? 1 : 0 }
}

/// `int mtls_trust_result_kind(const mtls_trust_result *result, int *kind)`
@_cdecl("mtls_trust_result_kind")
public func mtls_trust_result_kind(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let k: Int32
        switch try result(r).result.kind {
        case .proceed: k = MTLS_TRUST_PROCEED
        case .recoverableFailure: k = MTLS_TRUST_RECOVERABLE_FAILURE
        case .fatalFailure: k = MTLS_TRUST_FATAL_FAILURE
        }
        try require(out, "kind").pointee = k
    }
}

/// `int mtls_trust_result_reasons(const mtls_trust_result *result, mtls_trust_reason **out, size_t *count)`
@_cdecl("mtls_trust_result_reasons")
public func mtls_trust_result_reasons(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<mtls_trust_reason>?>?,
                                      _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putArray(out, count, { try result(r).result.reasons }, convert: { reason in
            let code = try cString(reason.code)
            do {
                return mtls_trust_reason(code: code, cert_index: reason.certIndex.map { Int32($0) } ?? -1,
                                         message: try cString(reason.message))
            } catch {
                wipeAndFree(code)
                throw error
            }
        }, release: freeReason)
    }
}

private func freeReason(_ r: mtls_trust_reason) {
    wipeAndFree(r.code)
    wipeAndFree(r.message)
}

/// `void mtls_trust_reason_list_free(mtls_trust_reason *list, size_t count)`
@_cdecl("mtls_trust_reason_list_free")
public func mtls_trust_reason_list_free(_ list: UnsafeMutablePointer<mtls_trust_reason>?, _ count: Int) {
    freeArray(list, count, freeReason)
}

/// `int mtls_trust_result_chain(const mtls_trust_result *result, mtls_cert ***out, size_t *count)`
@_cdecl("mtls_trust_result_chain")
public func mtls_trust_result_chain(_ r: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                    _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) { try result(r).result.chain }
    }
}

/// `int mtls_trust_result_matched_rule(const mtls_trust_result *result, char **out)`
@_cdecl("mtls_trust_result_matched_rule")
public func mtls_trust_result_matched_rule(_ r: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putOptionalString(out) { try result(r).result.matchedRule } }
}

/// `int mtls_trust_result_matched_pin(const mtls_trust_result *result, char **out)`
@_cdecl("mtls_trust_result_matched_pin")
public func mtls_trust_result_matched_pin(_ r: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putOptionalString(out) { try result(r).result.matchedPin } }
}

/// `int mtls_evaluate_peer(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host, uint16_t port, const char *verify_as, int purpose, int64_t at, mtls_trust_result **out)`
@_cdecl("mtls_evaluate_peer")
public func mtls_evaluate_peer(_ p: OpaquePointer?, _ certs: UnsafePointer<OpaquePointer?>?, _ count: Int,
                               _ host: UnsafePointer<CChar>?, _ port: UInt16, _ verifyAs: UnsafePointer<CChar>?,
                               _ purpose: Int32, _ at: Int64, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    evaluation(p, certs, count, purpose, at, out) { policy, chain, purpose, at in
        let peer = TrustPeer(host: try optionalString(host, "host"), port: port == 0 ? nil : Int(port),
                             verifyAs: try optionalString(verifyAs, "verify_as"))
        return policy.evaluate(chain: chain, peer: peer, purpose: purpose, at: at)
    }
}

/// `int mtls_policy_set_system_anchors_for_clients(mtls_policy *policy, int enabled)`
@_cdecl("mtls_policy_set_system_anchors_for_clients")
public func mtls_policy_set_system_anchors_for_clients(_ p: OpaquePointer?, _ on: Int32) -> Int32 {
    abiCall { try policy(p).systemAnchorsForClients = on != 0 }
}

// MARK: one effective policy: policy-wide pins and verify-as, overrides, provenance

/// `int mtls_policy_set_pins(mtls_policy *policy, const char *const *pins, size_t count)`
@_cdecl("mtls_policy_set_pins")
public func mtls_policy_set_pins(_ p: OpaquePointer?, _ pins: UnsafePointer<UnsafePointer<CChar>?>?, _ count: Int) -> Int32 {
    abiCall {
        let h = try policy(p)
        let list = try stringList(pins, count, "pins")
        h.pins = try list.map { try SPKIPin($0) }
    }
}

/// `int mtls_policy_pins(const mtls_policy *policy, char ***out, size_t *count)`
@_cdecl("mtls_policy_pins")
public func mtls_policy_pins(_ p: OpaquePointer?, _ out: CStringListOut?, _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try policy(p).pins.map(\.description) } }
}

/// `int mtls_policy_set_verify_as(mtls_policy *policy, const char *verify_as)`
@_cdecl("mtls_policy_set_verify_as")
public func mtls_policy_set_verify_as(_ p: OpaquePointer?, _ verifyAs: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let h = try policy(p)
        let v = try verifyAs.map { try string($0, "verify_as") }
        if let v { try TrustPolicy.validateVerifyAs(v) }
        h.verifyAs = v
    }
}

/// `int mtls_policy_verify_as(const mtls_policy *policy, char **out)`
@_cdecl("mtls_policy_verify_as")
public func mtls_policy_verify_as(_ p: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putOptionalString(out) { try policy(p).verifyAs } }
}

/// `int mtls_trust_overrides_init(mtls_trust_overrides *overrides, unsigned int version)`
@_cdecl("mtls_trust_overrides_init")
public func mtls_trust_overrides_init(_ o: UnsafeMutablePointer<mtls_trust_overrides>?, _ version: UInt32) -> Int32 {
    abiCall {
        try initVersionedOptions(o, version, sizes: overridesSizes, "mtls_trust_overrides", versionField: \.version) {
            var v = mtls_trust_overrides()  // zero: no anchors, no pins, no verify_as
            v.anchors_only = anchorsOnlyValue(TrustOverrides().anchorsOnly)
            return v
        }
    }
}

/// mtls_trust_overrides has one version.
private let overridesSizes = [MemoryLayout<mtls_trust_overrides>.size]

/// The `anchors_only` field of an overrides setting: -1 for "as the policy says".
private func anchorsOnlyValue(_ v: Bool?) -> Int32 { v.map { $0 ? 1 : 0 } ?? -1 }

/// The overrides a C caller passed (NULL: none). A malformed pin or verify-as is
/// MTLS_E_INVALID_ARGUMENT.
func overridesArgument(_ p: UnsafePointer<mtls_trust_overrides>?, _ name: String = "overrides") throws -> TrustOverrides? {
    guard let p else { return nil }
    let c = try readVersioned(p, zero: mtls_trust_overrides(), sizes: overridesSizes, "mtls_trust_overrides")
    var o = TrustOverrides()
    o.anchors = try handleList(c.anchors, c.anchor_count, Certificate.self, "\(name)->anchors")
    switch c.anchors_only {
    case -1: o.anchorsOnly = nil
    case 0: o.anchorsOnly = false
    case 1: o.anchorsOnly = true
    default: throw invalid("\(name)->anchors_only must be -1 (as the policy says), 0 or 1, not \(c.anchors_only)")
    }
    do {
        o.pins = try stringList(c.pins, c.pin_count, "\(name)->pins").map { try SPKIPin($0) }
    } catch let e as MTLSError where e.code == .invalidPolicy {
        throw invalid("\(name)->pins: \(e.message)")
    }
    if let v = c.verify_as { o.verifyAs = try string(v, "\(name)->verify_as") }
    try o.validate()
    return o
}

/// `int mtls_evaluate_with_overrides(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host, uint16_t port, const char *verify_as, int purpose, int64_t at, const mtls_trust_overrides *overrides, mtls_trust_result **out)`
@_cdecl("mtls_evaluate_with_overrides")
public func mtls_evaluate_with_overrides(_ p: OpaquePointer?, _ certs: UnsafePointer<OpaquePointer?>?, _ count: Int,
                                         _ host: UnsafePointer<CChar>?, _ port: UInt16, _ verifyAs: UnsafePointer<CChar>?,
                                         _ purpose: Int32, _ at: Int64, _ overrides: UnsafePointer<mtls_trust_overrides>?,
                                         _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    evaluation(p, certs, count, purpose, at, out) { policy, chain, purpose, at in
        // Port 0: the host may carry its port as text, as mtls_evaluate takes it.
        let hostText = try optionalString(host, "host")
        var peer = port == 0 ? TrustPeer(hostText: hostText) : TrustPeer(host: hostText, port: Int(port))
        peer.verifyAs = try optionalString(verifyAs, "verify_as")
        return policy.evaluate(chain: chain, peer: peer, purpose: purpose, at: at, overrides: try overridesArgument(overrides))
    }
}

/// `int mtls_trust_result_provenance(const mtls_trust_result *result, char **out)`
@_cdecl("mtls_trust_result_provenance")
public func mtls_trust_result_provenance(_ r: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putOptionalString(out) { try result(r).result.provenance?.jsonText } }
}

// MARK: Revocation (issue 28)

private func revocationSettings(_ mode: Int32, _ sources: Int32) throws -> RevocationSettings {
    let m: RevocationMode
    switch mode {
    case MTLS_REVOCATION_OFF: m = .off
    case MTLS_REVOCATION_SOFT: m = .soft
    case MTLS_REVOCATION_HARD: m = .hard
    default: throw invalid("mode must be MTLS_REVOCATION_OFF, _SOFT or _HARD")
    }
    let known = MTLS_REVOCATION_SOURCE_CRL | MTLS_REVOCATION_SOURCE_OCSP
    guard sources & ~known == 0 else { throw invalid("sources must be MTLS_REVOCATION_SOURCE_CRL and/or _OCSP flags") }
    if sources == 0 { return RevocationSettings(mode: m) }  // the core's default sources
    var list: [RevocationSource] = []
    if sources & MTLS_REVOCATION_SOURCE_CRL != 0 { list.append(.crl) }
    if sources & MTLS_REVOCATION_SOURCE_OCSP != 0 { list.append(.ocsp) }
    return RevocationSettings(mode: m, sources: list)
}

/// `int mtls_policy_set_revocation(mtls_policy *policy, int mode, int sources)`
@_cdecl("mtls_policy_set_revocation")
public func mtls_policy_set_revocation(_ p: OpaquePointer?, _ mode: Int32, _ sources: Int32) -> Int32 {
    abiCall {
        let pol = try policy(p)
        pol.revocation = try revocationSettings(mode, sources)
    }
}

/// `int mtls_policy_set_rule_revocation(mtls_policy *policy, const char *pattern, int mode, int sources)`
@_cdecl("mtls_policy_set_rule_revocation")
public func mtls_policy_set_rule_revocation(_ p: OpaquePointer?, _ pattern: UnsafePointer<CChar>?, _ mode: Int32,
                                            _ sources: Int32) -> Int32 {
    abiCall {
        let pol = try policy(p)
        let settings = try revocationSettings(mode, sources)
        try pol.updateHostRule(try string(pattern, "pattern")) { r in r.revocation = settings }
    }
}

/// `int mtls_policy_set_revocation_limits(mtls_policy *policy, size_t max_bytes, int timeout_ms)`
@_cdecl("mtls_policy_set_revocation_limits")
public func mtls_policy_set_revocation_limits(_ p: OpaquePointer?, _ maxBytes: Int, _ timeoutMs: Int32) -> Int32 {
    abiCall {
        let pol = try policy(p)
        var f = pol.revocationFetch
        do {
            try f.setLimits(maxBytes: try size(maxBytes, "max_bytes"), timeout: Double(timeoutMs) / 1000)
        } catch let e as MTLSError where e.code == .invalidPolicy {
            throw invalid(e.message)
        }
        pol.revocationFetch = f
    }
}

/// `int mtls_policy_set_revocation_max_age(mtls_policy *policy, int64_t seconds)`
@_cdecl("mtls_policy_set_revocation_max_age")
public func mtls_policy_set_revocation_max_age(_ p: OpaquePointer?, _ seconds: Int64) -> Int32 {
    abiCall {
        let pol = try policy(p)
        var f = pol.revocationFetch
        do { try f.setMaxAge(seconds: seconds) } catch let e as MTLSError where e.code == .invalidPolicy { throw invalid(e.message) }
        pol.revocationFetch = f
    }
}

/// `int mtls_policy_set_revocation_cache_dir(mtls_policy *policy, const char *dir)`
@_cdecl("mtls_policy_set_revocation_cache_dir")
public func mtls_policy_set_revocation_cache_dir(_ p: OpaquePointer?, _ dir: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        var f = pol.revocationFetch
        f.cacheDirectory = try optionalString(dir, "dir")
        if f.cacheDirectory?.isEmpty == true { throw invalid("dir must not be empty (NULL: memory only)") }
        pol.revocationFetch = f
    }
}

/// `int mtls_trust_result_revocation(const mtls_trust_result *result, char **out)`
@_cdecl("mtls_trust_result_revocation")
public func mtls_trust_result_revocation(_ r: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putOptionalString(out) { try result(r).result.revocation?.jsonText } }
}

/// `int mtls_trust_result_warnings(const mtls_trust_result *result, char ***out, size_t *count)`
@_cdecl("mtls_trust_result_warnings")
public func mtls_trust_result_warnings(_ r: OpaquePointer?, _ out: CStringListOut?, _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try result(r).result.warnings } }
}

/// `void mtls_revocation_cache_clear(void)`
@_cdecl("mtls_revocation_cache_clear")
public func mtls_revocation_cache_clear() { RevocationCache.clear() }

// MARK: who may connect: allow-lists on the peer's certificate

/// The ``PeerAllowList/Kind`` of an `MTLS_ALLOW_*` constant.
private func allowKind(_ kind: Int32) throws -> PeerAllowList.Kind {
    switch kind {
    case MTLS_ALLOW_CN: return .cn
    case MTLS_ALLOW_OU: return .ou
    case MTLS_ALLOW_DNS: return .dns
    case MTLS_ALLOW_URI: return .uri
    case MTLS_ALLOW_SPKI: return .spki
    case MTLS_ALLOW_ISSUER: return .issuer
    default: throw invalid("kind must be one of MTLS_ALLOW_CN, _OU, _DNS, _URI, _SPKI, _ISSUER")
    }
}

/// `int mtls_policy_allow_add(mtls_policy *policy, int kind, const char *pattern)`
@_cdecl("mtls_policy_allow_add")
public func mtls_policy_allow_add(_ p: OpaquePointer?, _ kind: Int32, _ pattern: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        try pol.addAllow(try allowKind(kind), try string(pattern, "pattern"))
    }
}

/// `int mtls_policy_rule_allow_add(mtls_policy *policy, const char *rule, int kind, const char *pattern)`
@_cdecl("mtls_policy_rule_allow_add")
public func mtls_policy_rule_allow_add(_ p: OpaquePointer?, _ rule: UnsafePointer<CChar>?, _ kind: Int32,
                                       _ pattern: UnsafePointer<CChar>?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        let k = try allowKind(kind)
        let text = try string(pattern, "pattern")
        try pol.updateHostRule(try string(rule, "rule")) { r in try r.allow.add(k, text) }
    }
}

/// `int mtls_policy_allow_add_issuer(mtls_policy *policy, const char *rule, const mtls_cert *anchor)`
@_cdecl("mtls_policy_allow_add_issuer")
public func mtls_policy_allow_add_issuer(_ p: OpaquePointer?, _ rule: UnsafePointer<CChar>?, _ anchor: OpaquePointer?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        let c = try handle(anchor, Certificate.self, "anchor")
        if let rule = try optionalString(rule, "rule") {
            try pol.updateHostRule(rule) { r in r.allow.add(issuer: c) }
        } else {
            pol.addAllow(issuer: c)
        }
    }
}

/// `int mtls_policy_allow_patterns(const mtls_policy *policy, const char *rule, int kind, char ***out, size_t *count)`
@_cdecl("mtls_policy_allow_patterns")
public func mtls_policy_allow_patterns(_ p: OpaquePointer?, _ rule: UnsafePointer<CChar>?, _ kind: Int32, _ out: CStringListOut?,
                                       _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        let pol = try policy(p)
        let k = try allowKind(kind)
        let r = try optionalString(rule, "rule")
        try putStrings(out, count) {
            if let r {
                return pol.hostRules.first { $0.pattern.text.lowercased() == r.lowercased() }?.allow.patterns(k) ?? []
            }
            return pol.allow.patterns(k)
        }
    }
}
