import Foundation
import MTLS
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `mtls serve`'s log: one line per event, each starting with its RFC 3339 UTC time
/// (`2026-11-28T23:10:00Z accepted ...`), written at once.
/// With `--json`, each line is an object instead: `{"time", "event", "message"}` (`event` the
/// line's first word: accepted, rejected, rotated, policy, reload, recovered, SIGHUP...).
enum ServeLog {
    /// Set once by `serve --json`, before the first line.
    nonisolated(unsafe) static var json = false

    static func line(_ text: TerminalText) {
        let time = CLI.rfc3339(Date())
        if json {
            let word = text.text.prefix { $0 != " " && $0 != ":" }
            CLI.printJSON(["time": time, "event": String(word), "message": text.text])
        } else {
            print("\(time) \(text)")
        }
        fflush(nil)  // all streams: Swift 6 does not let code touch the C global `stdout`
    }
}

/// What `mtls serve` follows (issue 26): its identity when it is a store label, its policy file,
/// the client anchors it takes from store labels (`--client-anchor LABEL`), and SIGHUP, which
/// looks at the identity and the policy file at once. The library itself never installs a signal
/// handler; the command line does, here.
final class ServeFollowing: @unchecked Sendable {
    let store: CredentialStore?
    let source: IdentitySource?
    let policyWatch: PolicyFileWatch?
    /// The policy clients are judged by: the followed file's, else one made of `--revocation`
    /// alone; the stored client anchors are in its anchors.
    let clientPolicy: TrustPolicy
    /// The `--client-anchor` values that are files (fixed, given as overrides).
    let fileAnchors: [String]
    /// Follows the `--client-anchor` values that are store labels, in ``clientPolicy``.
    let anchorWatch: StoreAnchorWatch?
    private var signalSource: DispatchSourceSignal?

    /// Which `--client-anchor` values are stored certificates (`store:LABEL`, or a LABEL that is
    /// not a file when a store is given), by the rule of ``PolicyBuilder/anchorCertificates(_:store:)``.
    static func splitAnchors(_ anchors: [String], hasStore: Bool) -> (files: [String], labels: [String]) {
        var files: [String] = [], labels: [String] = []
        for a in anchors {
            if hasStore, a.hasPrefix("store:") {
                labels.append(String(a.dropFirst("store:".count)))
            } else if hasStore, !FileManager.default.fileExists(atPath: a) {
                labels.append(a)
            } else {
                files.append(a) // a file, or store:LABEL without a store (anchorCertificates says why)
            }
        }
        return (files, labels)
    }

    init(identityOptions: IdentityOptions, policyPath: String?, revocation: String? = nil, revocationMaxAge: Int64? = nil,
         clientAnchors: [String] = []) throws {
        let name = identityOptions.cert == nil ? identityOptions.identity : nil
        let isLabel = name.map { n in
            !PKCS11URI.isPKCS11URI(n) && !n.lowercased().hasSuffix(".p12") && !n.lowercased().hasSuffix(".pfx")
                && !FileManager.default.fileExists(atPath: n)
        } ?? false
        // The store is needed for a label; otherwise only for --metrics-port, if one is configured.
        store = isLabel ? try identityOptions.openStore() : (try? identityOptions.openStore()) ?? nil
        if isLabel, let store, let name {
            source = try IdentitySource(store: store, label: name, tokenPIN: try identityOptions.pinFile.map(CLI.readPINFile))
        } else {
            source = nil
        }
        let (files, labels) = ServeFollowing.splitAnchors(clientAnchors, hasStore: store != nil)
        fileAnchors = files
        // The stored anchors in force, added back to each new version of the policy file (a
        // reload replaces the policy's settings with the file's): set once the watch exists.
        let anchorsInForce = Locked<StoreAnchorWatch?>(nil)
        // --revocation and --revocation-max-age hold for every version of the file, not only the first one.
        policyWatch = try policyPath.map {
            try PolicyFileWatch(path: $0, adjust: { p in
                try PolicyBuilder.applyRevocation(revocation, maxAge: revocationMaxAge, to: p)
                if let w = anchorsInForce.withLock({ $0 }) { p.anchors += w.certificates }
            })
        }
        clientPolicy = try policyWatch?.policy ?? PolicyBuilder.policy(file: nil, revocation: revocation, revocationMaxAge: revocationMaxAge)
        if let store, !labels.isEmpty {
            // Anchors from store labels follow the store: a certificate replaced there by another
            // process (`mtls store add-cert --replace`) judges the clients that come next.
            let w = try StoreAnchorWatch(policy: clientPolicy, store: store, labels: labels)
            anchorsInForce.withLock { $0 = w }
            anchorWatch = w
        } else {
            anchorWatch = nil
        }
    }

    /// A server's options for `identity` with the client trust this follows: the followed
    /// identity source, the client policy, the `--client-anchor` files as fixed overrides (those
    /// from store labels are in the policy, kept up to date by the store) — anchors only when any
    /// was given — and the system store for clients when `systemAnchors`.
    func serverOptions(identity: Identity, clientAnchors: [String], systemAnchors: Bool, allow: PeerAllowOptions,
                       store: () throws -> CredentialStore?) throws -> TLSServerOptions {
        var o = TLSServerOptions(identity: identity)
        o.identitySource = source
        o.clientPolicy = clientPolicy
        o.clientOverrides = try PolicyBuilder.overrides(anchors: fileAnchors, anchorsOnly: !clientAnchors.isEmpty, pins: [],
                                                        verifyAs: nil, allow: allow, store: store)
        if systemAnchors { o.clientPolicy?.systemAnchorsForClients = true }
        return o
    }

    /// What a `recovered:` line names: each followed thing fails and recovers on its own.
    enum Followed: String, Sendable {
        case identity, policy, anchors, revocation
    }

    /// Prints one line per event (the client policy's revocation fetch failures too) and reloads
    /// on SIGHUP. After a failed reload of one followed thing (the identity, the policy file, the
    /// stored client anchors), its next successful reload adds one `recovered: THING ...` line:
    /// another thing's success says nothing about it. Without a listener (`mtls tunnel client`),
    /// the followed identity's own events are printed.
    func start(listener: TLSListener?) {
        let failing = Locked(Set<Followed>())
        let report: @Sendable (Followed, LifecycleEvent) -> Void = { thing, e in
            let what: String
            var message = e.message
            switch e.kind {
            case .identityRotated:
                what = "rotated"
                // The event's message starts with what happened; said once, not "rotated: identity rotated: ...".
                if message.hasPrefix("identity rotated: ") { message.removeFirst("identity rotated: ".count) }
            case .policyReloaded: what = "policy reloaded"
            case .reloadFailed: what = "reload failed [\(e.error?.code.name ?? "error")]"
            case .expiryWarning: what = "expiry warning"
            // A listener's source never reports renewals (a Renewer does), but the kinds are one enum.
            case .renewalScheduled: what = "renewal scheduled"
            case .renewalSucceeded: what = "renewed"
            case .renewalFailed, .renewalNotInstalled: what = "renewal failed [\(e.error?.code.name ?? "error")]"
            case .revocationFetchFailed: what = "revocation fetch failed [\(e.error?.code.name ?? "error")]"
            }
            let reloaded = e.kind == .identityRotated || e.kind == .policyReloaded
            let recovered = failing.withLock { failed -> Bool in
                if e.kind == .reloadFailed { failed.insert(thing); return false }
                return reloaded && failed.remove(thing) != nil
            }
            ServeLog.line("\(what): \(message)")
            if recovered {
                let name = e.label.map { " \($0)" } ?? ""
                ServeLog.line("recovered: \(thing.rawValue)\(name): the reload that failed before now succeeded (\(what))")
            }
        }
        if let listener { listener.events.setHandler { report(.identity, $0) } } else { source?.events.setHandler { report(.identity, $0) } }
        policyWatch?.events.setHandler { report(.policy, $0) }
        anchorWatch?.events.setHandler { report(.anchors, $0) }
        clientPolicy.events.setHandler { report(.revocation, $0) }
        signal(SIGHUP, SIG_IGN)
        let s = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        s.setEventHandler { [self] in
            ServeLog.line("SIGHUP: reloading")
            // Revocation too: the CRLs and OCSP answers cached until their nextUpdate are
            // dropped, so a CRL republished after a revocation is fetched for the next handshake.
            RevocationCache.clear()
            source?.reload()
            policyWatch?.reload()
        }
        s.resume()
        signalSource = s
    }
}
