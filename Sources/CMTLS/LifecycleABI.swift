// Identity sources, followed policy files, lifecycle events, listener counters and store expiry
// (issue 26): argument checks and conversions only, the logic is in the core.
import MTLS
import CMTLSHeader
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A C event callback with its user data; `destroy(userdata)` runs when the last holder lets go.
public final class EventCallbackBox: CallbackUserdata, @unchecked Sendable {
    public typealias Callback = @convention(c) (UnsafePointer<mtls_event>?, UnsafeMutableRawPointer?) -> Void
    let callback: Callback

    init(_ callback: Callback, _ userdata: UnsafeMutableRawPointer?, _ destroy: mtls_destroy_cb?) {
        self.callback = callback
        super.init(userdata, destroy)
    }

    /// The header's `MTLS_EVENT_*` value of an event kind.
    private func eventKindValue(_ kind: LifecycleEventKind) -> Int32 {
        switch kind {
        case .identityRotated: return MTLS_EVENT_IDENTITY_ROTATED
        case .policyReloaded: return MTLS_EVENT_POLICY_RELOADED
        case .reloadFailed: return MTLS_EVENT_RELOAD_FAILED
        case .expiryWarning: return MTLS_EVENT_EXPIRY_WARNING
        case .renewalScheduled: return MTLS_EVENT_RENEWAL_SCHEDULED
        case .renewalSucceeded: return MTLS_EVENT_RENEWAL_SUCCEEDED
        case .renewalFailed: return MTLS_EVENT_RENEWAL_FAILED
        case .renewalNotInstalled: return MTLS_EVENT_RENEWAL_NOT_INSTALLED
        case .revocationFetchFailed: return MTLS_EVENT_REVOCATION_FETCH_FAILED
        }
    }

    func deliver(_ e: LifecycleEvent) {
        withOptionalCString(e.label) { label in
            withOptionalCString(e.subject) { subject in
                withOptionalCString(e.sha256) { sha in
                    e.message.withCString { message in
                        var ev = mtls_event(kind: eventKindValue(e.kind), label: label, subject: subject, sha256: sha,
                                            not_after: e.notAfter.map { Int64($0.timeIntervalSince1970) } ?? 0,
                                            error_code: e.error?.code.rawValue ?? 0, message: message,
                                            next_attempt: e.nextAttempt.map { Int64($0.timeIntervalSince1970) } ?? 0)
                        callback(&ev, userdata)
                    }
                }
            }
        }
    }

    /// Sets `events`' handler to this C callback (cb nil: clears it).
    static func install(_ events: LifecycleEvents, _ cb: Callback?, _ userdata: UnsafeMutableRawPointer?,
                        _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) {
        guard let cb else { events.setHandler(nil); return }
        let box = EventCallbackBox(cb, userdata, destroy)
        events.setHandler { box.deliver($0) }
    }
}

private func withOptionalCString<R>(_ s: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let s else { return body(nil) }
    return s.withCString { body($0) }
}

private let watchOptionsSizes = [MemoryLayout<mtls_watch_options>.size]

private func watchOptions(_ p: UnsafePointer<mtls_watch_options>?) throws -> (days: Int, pin: SecretBytes?) {
    guard let p else { return (LifecycleDefaults.warningDays, nil) }
    let c = try readVersioned(p, zero: mtls_watch_options(), sizes: watchOptionsSizes, "mtls_watch_options")
    return (try LifecycleDefaults.warningDays(Int(c.warning_days)), secretBytes(c.token_pin))
}

/// `int mtls_watch_options_init(mtls_watch_options *opts, unsigned int version)`
@_cdecl("mtls_watch_options_init")
public func mtls_watch_options_init(_ opts: UnsafeMutablePointer<mtls_watch_options>?, _ version: UInt32) -> Int32 {
    abiCall {
        try initVersionedOptions(opts, version, sizes: watchOptionsSizes, "mtls_watch_options", versionField: \.version) {
            var o = mtls_watch_options()
            o.warning_days = Int32(clamping: LifecycleDefaults.warningDays)
            return o
        }
    }
}

private func source(_ p: OpaquePointer?) throws -> IdentitySource { try handle(p, IdentitySource.self, "source") }

/// `int mtls_identity_source_new(const mtls_identity *identity, mtls_identity_source **out)`
@_cdecl("mtls_identity_source_new")
public func mtls_identity_source_new(_ identity: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall { try putHandle(out) { IdentitySource(try handle(identity, Identity.self, "identity")) } }
}

/// `int mtls_identity_source_follow_store(mtls_store *store, const char *label, const mtls_watch_options *opts, mtls_identity_source **out)`
@_cdecl("mtls_identity_source_follow_store")
public func mtls_identity_source_follow_store(_ store: OpaquePointer?, _ label: UnsafePointer<CChar>?,
                                              _ opts: UnsafePointer<mtls_watch_options>?,
                                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let o = try watchOptions(opts)
            return try IdentitySource(store: try handle(store, CredentialStore.self, "store"), label: try string(label, "label"),
                                      tokenPIN: o.pin, warningDays: o.days)
        }
    }
}

/// `int mtls_identity_source_set(mtls_identity_source *source, const mtls_identity *identity)`
@_cdecl("mtls_identity_source_set")
public func mtls_identity_source_set(_ s: OpaquePointer?, _ identity: OpaquePointer?) -> Int32 {
    abiCall {
        let src = try source(s)
        try src.replace(with: try handle(identity, Identity.self, "identity"))
    }
}

/// `int mtls_identity_source_current(const mtls_identity_source *source, mtls_identity **out)`
@_cdecl("mtls_identity_source_current")
public func mtls_identity_source_current(_ s: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall { try putHandle(out) { try source(s).current } }
}

/// `int mtls_identity_source_set_event_callback(mtls_identity_source *source, mtls_event_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_identity_source_set_event_callback")
public func mtls_identity_source_set_event_callback(_ s: OpaquePointer?, _ cb: EventCallbackBox.Callback?,
                                                    _ userdata: UnsafeMutableRawPointer?,
                                                    _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall { EventCallbackBox.install(try source(s).events, cb, userdata, destroy) }
}

/// `void mtls_identity_source_free(mtls_identity_source *source)`
@_cdecl("mtls_identity_source_free")
public func mtls_identity_source_free(_ s: OpaquePointer?) { releaseHandle(s, IdentitySource.self) }

/// `int mtls_listener_new_with_source(const char *address, uint16_t port, const mtls_listener_options *opts, mtls_identity_source *source, mtls_listener **out)`
@_cdecl("mtls_listener_new_with_source")
public func mtls_listener_new_with_source(_ address: UnsafePointer<CChar>?, _ port: UInt16, _ opts: UnsafePointer<mtls_listener_options>?,
                                          _ s: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            try TLSListener(address: try optionalString(address, "address"), port: port, options: try serverOptions(opts, source: try source(s)))
        }
    }
}

private func listener(_ p: OpaquePointer?) throws -> TLSListener { try handle(p, TLSListener.self, "listener") }

/// `int mtls_listener_set_identity(mtls_listener *listener, const mtls_identity *identity)`
@_cdecl("mtls_listener_set_identity")
public func mtls_listener_set_identity(_ l: OpaquePointer?, _ identity: OpaquePointer?) -> Int32 {
    abiCall {
        let lst = try listener(l)
        try lst.setIdentity(try handle(identity, Identity.self, "identity"))
    }
}

/// `int mtls_listener_set_event_callback(mtls_listener *listener, mtls_event_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_listener_set_event_callback")
public func mtls_listener_set_event_callback(_ l: OpaquePointer?, _ cb: EventCallbackBox.Callback?,
                                             _ userdata: UnsafeMutableRawPointer?,
                                             _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall { EventCallbackBox.install(try listener(l).events, cb, userdata, destroy) }
}

/// `int mtls_listener_get_counters(const mtls_listener *listener, mtls_listener_counters *out)`
@_cdecl("mtls_listener_get_counters")
public func mtls_listener_get_counters(_ l: OpaquePointer?, _ out: UnsafeMutablePointer<mtls_listener_counters>?) -> Int32 {
    abiCall {
        let out = try require(out, "out")
        guard out.pointee.version == UInt32(MTLS_LISTENER_COUNTERS_VERSION) else {
            throw invalid("mtls_listener_counters version \(out.pointee.version) is not supported (\(MTLS_LISTENER_COUNTERS_VERSION) is)")
        }
        let c = try listener(l).counters
        out.pointee = mtls_listener_counters(version: out.pointee.version, accepted: c.accepted, resumed: c.resumed,
                                             refused: c.refused.values.reduce(0, +), current_connections: c.currentConnections)
    }
}

/// `int mtls_listener_refused_count(const mtls_listener *listener, int code, uint64_t *count)`
@_cdecl("mtls_listener_refused_count")
public func mtls_listener_refused_count(_ l: OpaquePointer?, _ code: Int32, _ count: UnsafeMutablePointer<UInt64>?) -> Int32 {
    abiCall { try require(count, "count").pointee = try listener(l).counters.refused[MTLSError.Code(rawValue: code), default: 0] }
}

/// `int mtls_listener_metrics(const mtls_listener *listener, char **out)`
@_cdecl("mtls_listener_metrics")
public func mtls_listener_metrics(_ l: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putString(Prometheus.text(try listener(l).counters), out) }
}

/// `int mtls_ssl_ctx_configure_source(void *ssl_ctx, mtls_identity_source *source, const mtls_policy *policy, int accepts_clients, const mtls_trust_overrides *overrides)`
@_cdecl("mtls_ssl_ctx_configure_source")
public func mtls_ssl_ctx_configure_source(_ sslCtx: UnsafeMutableRawPointer?, _ s: OpaquePointer?, _ policy: OpaquePointer?,
                                          _ acceptsClients: Int32, _ overrides: UnsafePointer<mtls_trust_overrides>?) -> Int32 {
    abiCall {
        let ctx = try require(sslCtx, "ssl_ctx")
        let src = try source(s)
        let p = try policy.map { try handle($0, TrustPolicy.self, "policy") }
        try SSLContextConfiguration.configure(sslContext: ctx, identitySource: src, policy: p,
                                              purpose: acceptsClients != 0 ? .clientAuth : .serverAuth,
                                              overrides: try overridesArgument(overrides))
    }
}

private func watch(_ p: OpaquePointer?) throws -> PolicyFileWatch { try handle(p, PolicyFileWatch.self, "watch") }

/// `int mtls_policy_watch_new(const char *path, const mtls_watch_options *opts, mtls_policy_watch **out)`
@_cdecl("mtls_policy_watch_new")
public func mtls_policy_watch_new(_ path: UnsafePointer<CChar>?, _ opts: UnsafePointer<mtls_watch_options>?,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        let o = try watchOptions(opts)
        try putHandle(out) { try PolicyFileWatch(path: try string(path, "path"), warningDays: o.days) }
    }
}

/// `int mtls_policy_watch_policy(const mtls_policy_watch *watch, mtls_policy **out)`
@_cdecl("mtls_policy_watch_policy")
public func mtls_policy_watch_policy(_ w: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall { try putHandle(out) { try watch(w).policy } }
}

/// `int mtls_policy_watch_reload(mtls_policy_watch *watch)`
@_cdecl("mtls_policy_watch_reload")
public func mtls_policy_watch_reload(_ w: OpaquePointer?) -> Int32 {
    abiCall { try watch(w).reload() }
}

/// `int mtls_policy_watch_set_event_callback(mtls_policy_watch *watch, mtls_event_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_policy_watch_set_event_callback")
public func mtls_policy_watch_set_event_callback(_ w: OpaquePointer?, _ cb: EventCallbackBox.Callback?,
                                                 _ userdata: UnsafeMutableRawPointer?,
                                                 _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall { EventCallbackBox.install(try watch(w).events, cb, userdata, destroy) }
}

/// `void mtls_policy_watch_free(mtls_policy_watch *watch)`
@_cdecl("mtls_policy_watch_free")
public func mtls_policy_watch_free(_ w: OpaquePointer?) { releaseHandle(w, PolicyFileWatch.self) }

/// `int mtls_policy_follow_store_anchors(mtls_policy *policy, mtls_store *store, const char *const *labels, size_t count, mtls_anchor_watch **out)`
@_cdecl("mtls_policy_follow_store_anchors")
public func mtls_policy_follow_store_anchors(_ p: OpaquePointer?, _ store: OpaquePointer?,
                                             _ labels: UnsafePointer<UnsafePointer<CChar>?>?, _ count: Int,
                                             _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            let names = try stringList(labels, count, "labels")
            guard !names.isEmpty else { throw invalid("count must be at least 1") }
            return try StoreAnchorWatch(policy: try handle(p, TrustPolicy.self, "policy"),
                                        store: try handle(store, CredentialStore.self, "store"), labels: names)
        }
    }
}

/// `int mtls_anchor_watch_set_event_callback(mtls_anchor_watch *watch, mtls_event_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_anchor_watch_set_event_callback")
public func mtls_anchor_watch_set_event_callback(_ w: OpaquePointer?, _ cb: EventCallbackBox.Callback?,
                                                 _ userdata: UnsafeMutableRawPointer?,
                                                 _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall { EventCallbackBox.install(try handle(w, StoreAnchorWatch.self, "watch").events, cb, userdata, destroy) }
}

/// `void mtls_anchor_watch_free(mtls_anchor_watch *watch)`
@_cdecl("mtls_anchor_watch_free")
public func mtls_anchor_watch_free(_ w: OpaquePointer?) { releaseHandle(w, StoreAnchorWatch.self) }

private func releaseExpiryItem(_ i: mtls_expiry_item) {
    wipeAndFree(i.label)
    wipeAndFree(i.subject)
    wipeAndFree(i.sha256)
}

/// `int mtls_store_expiry(mtls_store *store, mtls_expiry_item **out, size_t *count)`
@_cdecl("mtls_store_expiry")
public func mtls_store_expiry(_ store: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<mtls_expiry_item>?>?,
                              _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putArray(out, count, { try handle(store, CredentialStore.self, "store").expiry() }, convert: { i in
            let label = try cString(i.label)
            guard let subject = strdup(i.subject), let sha = strdup(i.sha256) else {
                wipeAndFree(label)
                throw MTLSError(.noMemory, "out of memory")
            }
            return mtls_expiry_item(label: label, item_class: itemClassValue(i.itemClass), position: Int32(clamping: i.position),
                                    subject: subject, sha256: sha, not_before: Int64(i.notBefore.timeIntervalSince1970),
                                    not_after: Int64(i.notAfter.timeIntervalSince1970))
        }, release: releaseExpiryItem)
    }
}

/// `void mtls_expiry_items_free(mtls_expiry_item *items, size_t count)`
@_cdecl("mtls_expiry_items_free")
public func mtls_expiry_items_free(_ items: UnsafeMutablePointer<mtls_expiry_item>?, _ count: Int) {
    freeArray(items, count, releaseExpiryItem)
}

/// `int mtls_store_earliest_expiry(mtls_store *store, int64_t *not_after, char **label)`
@_cdecl("mtls_store_earliest_expiry")
public func mtls_store_earliest_expiry(_ store: OpaquePointer?, _ notAfter: UnsafeMutablePointer<Int64>?, _ label: CStringOut?) -> Int32 {
    abiCall {
        let notAfter = try require(notAfter, "not_after")
        guard let first = try handle(store, CredentialStore.self, "store").expiry().first else {
            throw MTLSError(.notFound, "the store holds no certificate")
        }
        if let label { try putString(first.label, label) }
        notAfter.pointee = Int64(first.notAfter.timeIntervalSince1970)
    }
}

/// `int mtls_store_metrics(mtls_store *store, char **out)`
@_cdecl("mtls_store_metrics")
public func mtls_store_metrics(_ store: OpaquePointer?, _ out: CStringOut?) -> Int32 {
    abiCall { try putString(try handle(store, CredentialStore.self, "store").prometheusMetrics(), out) }
}

// ---- Revocation events (issue 28)

/// `int mtls_policy_set_event_callback(mtls_policy *policy, mtls_event_cb cb, void *userdata, void (*destroy)(void *))`
@_cdecl("mtls_policy_set_event_callback")
public func mtls_policy_set_event_callback(_ p: OpaquePointer?, _ cb: EventCallbackBox.Callback?,
                                           _ userdata: UnsafeMutableRawPointer?,
                                           _ destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) -> Int32 {
    abiCall { EventCallbackBox.install(try handle(p, TrustPolicy.self, "policy").events, cb, userdata, destroy) }
}
