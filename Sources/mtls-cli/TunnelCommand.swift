import ArgumentParser
import Dispatch
import Foundation
import MTLS
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `mtls tunnel server|client`: mutual TLS in front of, and out of, programs that know nothing
/// of it. A thin program over the library: ``TunnelAddress`` (addresses and the plaintext rule),
/// ``ProxyProtocolV2`` (the header for the target), ``TLSForwarder`` (the bytes: one epoll thread
/// for every connection, no thread per connection).
struct TunnelCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tunnel",
        abstract: "Put mutual TLS in front of a program (server) or out of one (client), forwarding plain TCP or UNIX-socket bytes.",
        subcommands: [TunnelServerCommand.self, TunnelClientCommand.self])
}

/// What both ends of a tunnel share: timeouts, the drain, the status and metrics endpoints, the log.
struct TunnelOperationOptions: ParsableArguments {
    @Option(help: "Seconds a connection may pass with no byte moving either way before it is closed (0: never).") var idleTimeout: Double = 600
    @Option(help: "Seconds for connecting to the target.") var connectTimeout: Double = 10
    @Option(help: "Threads forwarding bytes; each runs one epoll loop over its share of the connections (no thread per connection). Default: one per CPU, at most 8.") var forwardThreads: Int = min(max(ProcessInfo.processInfo.activeProcessorCount, 1), 8)
    @Option(help: "Connections open at once (accepted and not yet closed; 0: no limit but the open-file limit). At the limit no new connection is accepted until one closes: they wait in the kernel's queue (and, on the server, the listener's own).") var maxConnections: Int = 0
    @Option(help: "On SIGTERM: seconds the open connections have to finish before the process exits; new connections are refused from the signal on.") var drainTimeout: Double = 30
    @Option(help: "Answer GET /_status on 127.0.0.1:PORT: 200 with a JSON object; with ?check=target, 503 when the target cannot be reached; 503 while draining.") var statusPort: UInt16?
    @Option(help: "Serve Prometheus metrics on 127.0.0.1:PORT: connections, handshakes, refusals by reason, bytes, the certificate's end of validity.") var metricsPort: UInt16?
    @Option(help: "With --metrics-port: only scrapes sending 'Authorization: Bearer <token>' with the token in FILE (first line; chmod 600) see the metrics; others get 401.") var metricsTokenFile: String?
    @Option(help: "Lowest TLS version: 1.2 or 1.3 (default: the library's, \(TLSDefaults.minVersion)).") var tlsMin: String?
    @Option(help: "Highest TLS version: 1.2 or 1.3 (default: the library's, \(TLSDefaults.maxVersion)).") var tlsMax: String?
    @Flag(help: "Do not restrict the process with Landlock (by default, where the kernel has it, the tunnel writes files only beneath its credential store's folder and runs no program; the log says whether it was applied).") var noLandlock = false
    @Option(help: "Under Landlock, also let the tunnel write beneath this folder (repeatable): a PKCS#11 module's own files, for a module other than SoftHSM2 and tpm2-pkcs11 (whose folders are added when a token is used).") var landlockWritable: [String] = []
    @Flag(help: "Machine-readable log: one JSON object per line ({\"listening\": {...}}, then {time, event, message} per event); a failure to start is {error, message}.") var json = false

    func validate() throws {
        if metricsPort == nil && metricsTokenFile != nil { throw ValidationError("--metrics-token-file goes with --metrics-port") }
        if idleTimeout < 0 || connectTimeout <= 0 || drainTimeout < 0 {
            throw ValidationError("--idle-timeout and --drain-timeout must not be negative, --connect-timeout must be positive")
        }
        if !(1...64).contains(forwardThreads) { throw ValidationError("--forward-threads is 1 to 64") }
        if maxConnections < 0 { throw ValidationError("--max-connections must not be negative") }
    }

    var versions: (min: TLSVersion?, max: TLSVersion?) {
        get throws { (try tlsMin.map(ConnectCommand.version), try tlsMax.map(ConnectCommand.version)) }
    }
}

/// Renewal inside the tunnel (`--renew`): `mtls renew --loop` for the followed store label, run
/// on a thread of the tunnel, so the label rotates with no second process.
struct TunnelRenewalOptions: ParsableArguments {
    @Flag(help: "With --identity LABEL and a store: renew the enrolled identity in this process when due (as `mtls renew --loop LABEL`: ACME, EST or the local CA, from the enrollment record); new connections present the renewed certificate.") var renew = false
    @Flag(help: "With --renew: renew once at start, whether due or not (as `mtls renew --loop --force`).") var renewForce = false
    @Option(help: "With --renew: seconds between checks (as `mtls renew --interval`).") var renewInterval: Double = Renewer.defaultCheckInterval
    @Option(help: "With --renew, for an identity enrolled from a local pki directory: the CA keys' password (default: $MTLS_PKI_KEY_PASSWORD_FILE).") var renewPasswordFile: String?
    @Option(help: "With --renew, for a token identity: delete a key replaced by a renewal this many seconds later (as `mtls renew --delete-previous-keys-after`; default: keep previous keys).")
    var renewDeletePreviousKeysAfter: Double?

    func validate() throws {
        if !renew && (renewForce || renewPasswordFile != nil || renewDeletePreviousKeysAfter != nil) {
            throw ValidationError("--renew-force, --renew-password-file and --renew-delete-previous-keys-after go with --renew")
        }
        try RenewCommand.checkGrace(renewDeletePreviousKeysAfter, flag: "--renew-delete-previous-keys-after")
        if !Renewer.checkIntervals.contains(renewInterval) {
            throw ValidationError("--renew-interval is \(Int(Renewer.checkIntervals.lowerBound)) to \(Int(Renewer.checkIntervals.upperBound)) seconds")
        }
    }

    /// Starts the renewal loop for the identity's label on a thread of its own, until `stop`
    /// says the tunnel is done; nil without `--renew`. The renewed chain is checked against the
    /// enrollment's recorded anchors, as `mtls renew` does without `--policy`/`--anchor`.
    func start(_ identityOptions: IdentityOptions, following: ServeFollowing, json: Bool, until stop: @escaping @Sendable () -> Bool) throws {
        guard renew else { return }
        guard following.source != nil, let label = identityOptions.identity, let store = following.store else {
            throw ValidationError("--renew needs --identity LABEL naming an enrolled identity of a store (--store)")
        }
        let pin = try identityOptions.pinFile.map(CLI.readPINFile)
        var renewalOptions = RenewalOptions()
        renewalOptions.deletePreviousTokenKeysAfter = renewDeletePreviousKeysAfter
        let renewer = RenewCommand.loopRenewer(store: store, label: label, policy: nil, tokenPIN: pin,
                                               caKeyPassword: try RenewCommand.caKeyPassword(renewPasswordFile),
                                               options: renewalOptions, json: json)
        let (force, interval) = (renewForce, renewInterval)
        Thread.detachNewThread {
            do {
                try renewer.runLoop(force: force, checkInterval: interval, until: stop)
            } catch {
                ServeLog.line("renewal stopped: \((error as? MTLSError)?.message ?? "\(error)") [\(CLI.errorName(error))]")
            }
        }
    }
}

/// The trust options both ends take for their peer: the policy file and revocation.
struct TunnelPolicyOptions: ParsableArguments {
    @Option(help: "A trust policy JSON file for the peer (followed: a change is in force for the next connection; SIGHUP rereads it).") var policy: String?
    @Option(help: PolicyBuilder.revocationHelp) var revocation: String?
    @Option(help: PolicyBuilder.revocationMaxAgeHelp) var revocationMaxAge: Int64?

    /// What the command follows: the identity (a store label), the policy file, the anchors from store labels.
    func following(_ identityOptions: IdentityOptions, anchors: [String]) throws -> ServeFollowing {
        try ServeFollowing(identityOptions: identityOptions, policyPath: policy, revocation: revocation,
                           revocationMaxAge: revocationMaxAge, clientAnchors: anchors)
    }
}

/// The running tunnel: its connections (forwarded by one ``TLSForwarder``), the drain on
/// SIGTERM, systemd's notifications, the status and metrics endpoints.
final class TunnelRuntime: @unchecked Sendable {
    let options: TunnelOperationOptions
    let bytes = ForwardCounters()
    private let forwarder: TLSForwarder
    private let open = Atomic<Int>(0)
    private let total = Atomic<UInt64>(0)
    private let draining_ = Atomic<Bool>(false)
    private let running = DispatchGroup()
    /// Connections held against --max-connections (guarded by `room`), and whether the limit was
    /// said to be reached since there was last room.
    private let room = NSCondition()
    private var held = 0, saidFull = false
    private var signalSource: DispatchSourceSignal?
    private var watchdog: DispatchSourceTimer?
    private var status: HTTPResponder?
    private var metrics: MetricsEndpoint?

    /// Landlock's outcome, said once the tunnel listens.
    private let landlock: Landlock.Outcome?

    /// Restricts the process with Landlock first (unless `--no-landlock`): before any thread
    /// starts, so that every thread is restricted. Files are written only beneath the credential
    /// store's folder and `writable`.
    init(options: TunnelOperationOptions, identityOptions: IdentityOptions, policy: String?, writable: [String] = []) throws {
        self.options = options
        ServeLog.json = options.json
        if options.noLandlock {
            landlock = nil
        } else {
            let env = ProcessInfo.processInfo.environment
            let store = identityOptions.store ?? env["MTLS_STORE"].flatMap { $0.isEmpty ? nil : $0 } ?? CredentialStore.defaultPath(environment: env)
            // The policy file's CRL cache folder too (read here, before the watch starts its thread).
            let cache = policy.flatMap { try? TrustPolicy.load(path: $0).revocationFetch.cacheDirectory }
            // A token key's module writes from inside this process: SoftHSM2 a renewal's new key,
            // tpm2-pkcs11 its store's lock file on every session.
            let usesToken = identityOptions.identity?.lowercased().hasPrefix("pkcs11:") == true || identityOptions.pinFile != nil
            let modules = usesToken ? PKCS11ModuleState.folders(environment: env) : []
            let folders = [URL(fileURLWithPath: store).deletingLastPathComponent().path] + writable + (cache.map { [$0] } ?? [])
                + modules + options.landlockWritable
            landlock = Landlock.restrictWrites(writable: folders)
        }
        forwarder = try TLSForwarder(threads: options.forwardThreads, name: "mtls-forward")
    }

    var draining: Bool { draining_.load(ordering: .acquiring) }

    /// The forwarding loop's idle timeout (nil: none).
    var idleTimeout: Double? { options.idleTimeout == 0 ? nil : options.idleTimeout }

    /// Counts work that is not a connection yet (the tunnel client's connect and handshake) in
    /// what the drain waits for: +1 before it starts, -1 when it ended.
    func pending(_ delta: Int) {
        if delta > 0 { running.enter() } else { running.leave() }
    }

    /// Takes room for one more connection under --max-connections (always, without a limit),
    /// waiting up to half a second for one to close: false when there is none yet (the accepting
    /// loop checks for a drain and asks again). Each true is given back with ``giveRoom()``, or by
    /// ``forward(_:plain:who:prefix:rewriter:connectTimeout:)`` when the connection ends.
    func takeRoom() -> Bool {
        let limit = options.maxConnections
        guard limit > 0 else { return true }
        room.lock()
        defer { room.unlock() }
        if held >= limit {
            if !saidFull {
                saidFull = true
                ServeLog.line("connection limit reached: \(limit) connections open, new ones wait (--max-connections)")
            }
            _ = room.wait(until: Date(timeIntervalSinceNow: 0.5))
            guard held < limit else { return false }
        }
        held += 1
        saidFull = false
        return true
    }

    /// Gives back room ``takeRoom()`` took, for a connection that ended or was never made.
    func giveRoom() {
        guard options.maxConnections > 0 else { return }
        room.lock()
        held -= 1
        room.signal()
        room.unlock()
    }

    /// Hands one connection and its plaintext socket to the forwarder (which closes both when
    /// the connection ends), counted until it ends; its end is logged ("closed WHO: ...", or
    /// "target unreachable for WHO: ..." when `connectTimeout` is given and the target's
    /// non-blocking connect failed).
    func forward(_ conn: TLSConnection, plain: Int32, who: String, prefix: [UInt8] = [], rewriter: HTTPRequestRewriter? = nil,
                 connectTimeout: Double? = nil) {
        open.add(1, ordering: .relaxed)
        total.add(1, ordering: .relaxed)
        running.enter()
        forwarder.add(conn, plain: plain, idleTimeout: idleTimeout, counters: bytes, requestRewriter: rewriter, prefix: prefix,
                      connectTimeout: connectTimeout) { [self] r in
            if r.plainConnectFailed {
                ServeLog.line("target unreachable for \(who): \(r.error?.message ?? "?")")
            } else {
                logEnd(who, r)
            }
            open.subtract(1, ordering: .relaxed)
            giveRoom()
            running.leave()
        }
    }

    /// The listening line, the endpoints, READY=1 (and the watchdog) for systemd, and SIGTERM's drain,
    /// which calls `stopAccepting`.
    func start(address: String, port: UInt16, target: TunnelAddress, identity: @escaping @Sendable () -> Identity?,
               listenerMetrics: (@Sendable () -> String)?, stopAccepting: @escaping @Sendable () -> Void) throws {
        if options.json {
            CLI.printJSON(["listening": ["address": address, "port": Int(port)] as [String: Any]])
        } else {
            print("listening on \(address)\(port == 0 ? "" : ":\(port)")")
        }
        switch landlock {
        case .applied(let abi)?: ServeLog.line("landlock: applied (ABI \(abi)): files are written only beneath the store's folder and the CRL cache, no program is run")
        case .notApplied(let why)?: ServeLog.line("landlock: not applied: \(why)")
        case nil: ServeLog.line("landlock: off (--no-landlock)")
        }
        if let statusPort = options.statusPort {
            let connectTimeout = options.connectTimeout
            let s = try HTTPResponder(address: MetricsEndpoint.defaultAddress, port: statusPort, threadName: "mtls-tunnel-status") { [self] request in
                guard request.path == "/_status" else { return .status(404) }
                var body: [String: Any] = ["status": draining ? "draining" : "ok", "connections": open.load(ordering: .relaxed),
                                           "connections_total": total.load(ordering: .relaxed), "target": target.description]
                var healthy = !draining
                if request.query.split(separator: "&").contains("check=target") {
                    let fd = try? target.connect(timeout: min(connectTimeout, 2))
                    if let fd { Glibc.close(fd) }
                    body["target_reachable"] = fd != nil
                    healthy = healthy && fd != nil
                }
                let data = (try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])) ?? Data()
                return HTTPAnswer(status: healthy ? 200 : 503,
                                  contentType: "application/json", body: Array(data) + [0x0A])
            }
            status = s
            announce("status", s.port)
        }
        if let metricsPort = options.metricsPort {
            let token = try options.metricsTokenFile.map { try FileIO.readSecret($0, kind: .bearerToken) }
            let m = try MetricsEndpoint(address: MetricsEndpoint.defaultAddress, port: metricsPort, bearerToken: token) { [self] in
                var out = listenerMetrics?() ?? ""
                out += "# HELP mtls_tunnel_connections Connections being forwarded.\n# TYPE mtls_tunnel_connections gauge\n"
                out += "mtls_tunnel_connections \(open.load(ordering: .relaxed))\n"
                out += "# HELP mtls_tunnel_connections_total Connections taken for forwarding.\n# TYPE mtls_tunnel_connections_total counter\n"
                out += "mtls_tunnel_connections_total \(total.load(ordering: .relaxed))\n"
                return out + Prometheus.text(bytes, identity: identity())
            }
            metrics = m
            announce("metrics", m.port)
        }
        signal(SIGTERM, SIG_IGN)
        signal(SIGPIPE, SIG_IGN)
        let s = DispatchSource.makeSignalSource(signal: SIGTERM, queue: .global())
        s.setEventHandler { [self] in
            guard !draining_.exchange(true, ordering: .acquiringAndReleasing) else { return }
            SystemdNotify.send("STOPPING=1")
            ServeLog.line("draining: SIGTERM; new connections refused, \(open.load(ordering: .relaxed)) open, up to \(options.drainTimeout) s")
            stopAccepting()
        }
        s.resume()
        signalSource = s
        SystemdNotify.send("READY=1")
        if let interval = SystemdNotify.watchdogInterval() {
            let t = DispatchSource.makeTimerSource(queue: .global())
            t.schedule(deadline: .now(), repeating: .microseconds(interval / 2))
            t.setEventHandler { SystemdNotify.send("WATCHDOG=1") }
            t.resume()
            watchdog = t
        }
        fflush(nil)
    }

    private func announce(_ what: String, _ port: UInt16) {
        if options.json {
            CLI.printJSON([what: ["address": MetricsEndpoint.defaultAddress, "port": Int(port)] as [String: Any]])
        } else {
            print("\(what) on \(MetricsEndpoint.defaultAddress):\(port)")
        }
    }

    /// After the accept loop ended (SIGTERM): waits for the open connections, up to the drain timeout.
    func drain() {
        let finished = running.wait(timeout: .now() + options.drainTimeout) == .success
        let left = open.load(ordering: .relaxed)
        ServeLog.line(finished ? "drained: every connection finished" : "drained: deadline reached, \(left) connections cut")
        forwarder.close()
        status?.close()
        metrics?.close()
    }

    /// One line for a connection that ended.
    func logEnd(_ who: String, _ r: ForwardResult) {
        var how = r.error.map { "error [\($0.code.name)] \($0.message)" } ?? (r.idleTimedOut ? "idle timeout" : "done")
        if r.truncated { how += " (the TLS peer hung up without close_notify)" }
        ServeLog.line("closed \(who): \(r.bytesFromTLS) bytes from TLS, \(r.bytesToTLS) bytes to TLS, \(how)")
    }
}

/// systemd's notification protocol (sd_notify(3)), spoken directly: one datagram to the UNIX
/// socket `$NOTIFY_SOCKET` names (a path, or `@name` in the abstract namespace). Nothing when
/// the variable is not set.
enum SystemdNotify {
    static func send(_ state: String) {
        guard let path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !path.isEmpty,
              path.hasPrefix("/") || path.hasPrefix("@") else { return }
        var bytes = Array(path.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }
        var sa = sockaddr_un()
        guard bytes.count < MemoryLayout.size(ofValue: sa.sun_path) else { return }
        sa.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &sa.sun_path) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)
        _ = withUnsafePointer(to: &sa) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { addr in
                Array(state.utf8).withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), addr, length) }
            }
        }
    }

    /// `$WATCHDOG_USEC` (microseconds), when it is set for this process (`$WATCHDOG_PID`).
    static func watchdogInterval() -> Int? {
        let env = ProcessInfo.processInfo.environment
        guard let usec = env["WATCHDOG_USEC"].flatMap(Int.init), usec > 0 else { return nil }
        if let pid = env["WATCHDOG_PID"].flatMap(Int32.init), pid != getpid() { return nil }
        return usec
    }

    /// The listening socket systemd passed (socket activation: `$LISTEN_PID` is this process and
    /// `$LISTEN_FDS` at least 1): file descriptor 3, made non-blocking and close-on-exec.
    static func activatedSocket() -> Int32? {
        let env = ProcessInfo.processInfo.environment
        guard let pid = env["LISTEN_PID"].flatMap(Int32.init), pid == getpid(),
              let n = env["LISTEN_FDS"].flatMap(Int.init), n >= 1 else { return nil }
        _ = fcntl(3, F_SETFD, FD_CLOEXEC)
        _ = fcntl(3, F_SETFL, fcntl(3, F_GETFL) | O_NONBLOCK)
        return 3
    }
}

/// `mtls tunnel server`: accepts mutual TLS, judges the client, forwards to a plaintext target.
struct TunnelServerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Accept mutual-TLS clients and forward each one's bytes to a plain TCP or UNIX-socket target.")

    @Option(help: "The TLS address to listen on: HOST:PORT or [IPv6]:PORT (port 0 picks one; the first line printed says which). Under systemd socket activation ($LISTEN_FDS) the passed socket is used instead.") var listen: String
    @Option(help: "The plaintext target: HOST:PORT, [IPv6]:PORT, unix:PATH or /PATH. Must be loopback or a UNIX socket unless --unsafe-target.") var target: String
    @Flag(help: "Allow a target that is not loopback or a UNIX socket: the plaintext then crosses a network.") var unsafeTarget = false
    @OptionGroup var identityOptions: IdentityOptions
    @Option(help: "An anchor for client certificates: a file, or a stored certificate's label (LABEL with a store, or store:LABEL); repeatable.") var clientAnchor: [String] = []
    @OptionGroup var trust: TunnelPolicyOptions
    @OptionGroup(title: "Who may connect (clients whose chain is trusted must match one entry)") var allow: PeerAllowOptions
    @Flag(help: "Also accept client certificates of the system trust store (public CAs).") var clientSystemAnchors = false
    @Flag(help: "Send the target a PROXY protocol v2 header first: the client's address and the TLS TLVs (version, cipher, the client certificate's CN, signature and key algorithm).") var proxyProtocol = false
    @Flag(help: "With --proxy-protocol: also send the whole client certificate (DER) in TLV 0xE0.") var proxyProtocolCertificate = false
    @Option(help: "The target speaks HTTP/1.x: set this header (e.g. X-Client-Cert-Subject) on every request to the client certificate's value (--http-client-header-value), removing every header of that name the client sent. CONNECT, Upgrade and streams that are not HTTP/1.x are refused.") var httpClientHeader: String?
    @Option(help: "With --http-client-header: subject (RFC 4514, the default), cn, uri (the URI SANs, comma-separated) or sha256 (the certificate's fingerprint, hex). Bytes outside printable ASCII and '%' are percent-encoded.") var httpClientHeaderValue: String = "subject"
    @OptionGroup var operation: TunnelOperationOptions
    @OptionGroup(title: "Renewal in process") var renewal: TunnelRenewalOptions

    func validate() throws {
        if proxyProtocolCertificate && !proxyProtocol { throw ValidationError("--proxy-protocol-certificate goes with --proxy-protocol") }
        if let name = httpClientHeader {
            guard (try? HTTPRequestRewriter(name: name, value: "")) != nil else {
                throw ValidationError("--http-client-header: \"\(name)\" is not an HTTP header name")
            }
        }
        guard ["subject", "cn", "uri", "sha256"].contains(httpClientHeaderValue) else {
            throw ValidationError("--http-client-header-value: subject, cn, uri or sha256, not \"\(httpClientHeaderValue)\"")
        }
    }

    /// The value --http-client-header sets for the client certificate `cert`.
    static func clientHeaderValue(_ kind: String, _ cert: Certificate?) -> String {
        guard let cert else { return "" }
        switch kind {
        case "cn": return cert.commonName ?? ""
        case "uri": return cert.subjectAltNames.compactMap { if case .uri(let u) = $0 { u } else { nil } }.joined(separator: ",")
        case "sha256": return cert.sha256Hex
        default: return cert.subject
        }
    }

    func run() throws {
        do {
            let listenAddress = try TunnelAddress(listen)
            guard case .tcp(let host, let port) = listenAddress else {
                throw MTLSError(.invalidArgument, "--listen: the TLS side listens on TCP (HOST:PORT)")
            }
            let targetAddress = try TunnelAddress(target)
            try targetAddress.requirePlaintextSafe(option: "--target", allowed: unsafeTarget, unsafeFlag: "--unsafe-target")
            let runtime = try TunnelRuntime(options: operation, identityOptions: identityOptions, policy: trust.policy)
            let follow = try trust.following(identityOptions, anchors: clientAnchor)
            guard let identity = try follow.source?.current ?? identityOptions.explicitIdentity() else {
                throw ValidationError("tunnel server needs --identity (or --cert and --key)")
            }
            if clientAnchor.isEmpty && trust.policy == nil && !clientSystemAnchors {
                throw ValidationError("tunnel server needs --client-anchor or --policy: who may connect")
            }
            var o = try follow.serverOptions(identity: identity, clientAnchors: clientAnchor, systemAnchors: clientSystemAnchors, allow: allow,
                                             store: identityOptions.openStore)
            o.clientAuthentication = .require
            let (minVersion, maxVersion) = try operation.versions
            if let minVersion { o.minVersion = minVersion }
            if let maxVersion { o.maxVersion = maxVersion }
            CLI.raiseOpenFileLimit()
            // Under systemd socket activation, the socket it passed (fd 3) instead of --listen.
            let activated = SystemdNotify.activatedSocket()
            let listener = try activated.map { try TLSListener(listeningSocket: $0, options: o) }
                ?? TLSListener(address: host, port: port, options: o)
            follow.start(listener: listener)
            try renewal.start(identityOptions, following: follow, json: operation.json, until: { runtime.draining })
            CLI.printWarnings()
            let source = listener.identitySource
            try runtime.start(address: host, port: listener.port, target: targetAddress, identity: { source.current },
                              listenerMetrics: { Prometheus.exposition(listener.counters, store: follow.store) },
                              stopAccepting: { listener.close() })
            let connectTimeout = operation.connectTimeout
            let proxy = proxyProtocol, proxyCertificate = proxyProtocolCertificate
            let headerName = httpClientHeader, headerValue = httpClientHeaderValue
            while !runtime.draining {
                guard runtime.takeRoom() else { continue }
                let conn: TLSConnection
                do {
                    conn = try listener.accept(timeout: 0.5)
                } catch let e as MTLSError where e.code == .timeout {
                    runtime.giveRoom()
                    continue
                } catch let e as MTLSError {
                    runtime.giveRoom()
                    if runtime.draining { break }
                    ServeLog.line("rejected \(e.message) [\(e.code.name)]")
                    continue
                }
                let who = "\(conn.peerAddress) \(conn.peerCertificate?.subject ?? "(no certificate)")"
                ServeLog.line("accepted \(who) \(conn.tlsVersionName): \(PolicyBuilder.summary(conn.evaluation))")
                // On this (accepting) thread: start the target's connect without waiting and make
                // the PROXY header and the rewriter; the forwarder's thread waits for the connect.
                let plain: Int32, connecting: Bool
                do {
                    (plain, connecting) = try targetAddress.startConnect(timeout: connectTimeout)
                } catch {
                    ServeLog.line("target unreachable for \(who): \((error as? MTLSError)?.message ?? "\(error)")")
                    conn.close()
                    runtime.giveRoom()
                    continue
                }
                var header: [UInt8] = []
                var rewriter: HTTPRequestRewriter?
                do {
                    if proxy {
                        header = try ProxyProtocolV2.header(ProxyProtocolV2.addresses(ofConnection: conn.fileDescriptor),
                                                            tls: conn.proxyProtocolTLSInfo(includeCertificate: proxyCertificate))
                    }
                    if let headerName {
                        rewriter = try HTTPRequestRewriter(name: headerName, value: Self.clientHeaderValue(headerValue, conn.peerCertificate))
                    }
                } catch {
                    ServeLog.line("\(proxy && header.isEmpty ? "proxy header" : "client header") failed for \(who): \((error as? MTLSError)?.message ?? "\(error)")")
                    conn.close()
                    Glibc.close(plain)
                    runtime.giveRoom()
                    continue
                }
                runtime.forward(conn, plain: plain, who: who, prefix: header, rewriter: rewriter, connectTimeout: connecting ? connectTimeout : nil)
            }
            runtime.drain()
        } catch {
            if operation.json {
                let name = error is ValidationError ? MTLSError.Code.invalidArgument.name : CLI.errorName(error)
                CLI.printJSON(["error": name, "message": (error as? MTLSError)?.message ?? "\(error)"])
            }
            throw CLI.fail(error)
        }
    }
}

/// `mtls tunnel client`: accepts plain connections locally, opens a mutual-TLS connection for each.
struct TunnelClientCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract: "Accept plain local connections and carry each one over a mutual-TLS connection to HOST:PORT.")

    @Option(help: "The plaintext address to listen on: HOST:PORT, [IPv6]:PORT, unix:PATH or /PATH. Must be loopback or a UNIX socket unless --unsafe-listen. Under systemd socket activation the passed socket is used instead.") var listen: String
    @Option(help: "The TLS server: HOST:PORT or [IPv6]:PORT.") var target: String
    @Flag(help: "Allow a listen address that is not loopback or a UNIX socket: plaintext then comes over a network.") var unsafeListen = false
    @OptionGroup var identityOptions: IdentityOptions
    @OptionGroup var trust: TunnelPolicyOptions
    @Option(help: "A pinned anchor for the server: a file, or a stored certificate's label (LABEL with a store, or store:LABEL); repeatable. Anchors are the only ones trusted unless --system-anchors.") var anchor: [String] = []
    @Flag(help: "Trust the system store as well as the anchors.") var systemAnchors = false
    @Option(help: "Validate the server's certificate as this name instead of HOST.") var verifyAs: String?
    @Option(help: "An SPKI pin sha256/BASE64 the server's chain must hold; repeatable; always enforced.") var pin: [String] = []
    @OptionGroup(title: "Which server may answer (on top of the anchors, --verify-as and --pin)") var allow: PeerAllowOptions
    @OptionGroup var operation: TunnelOperationOptions
    @OptionGroup(title: "Renewal in process") var renewal: TunnelRenewalOptions
    @Option(help: "Threads opening the mutual-TLS connections (connect and handshake, which block): accepted local connections wait for one in turn; the bytes then move on the forwarding threads.") var connectThreads: Int = 4

    func validate() throws {
        if !(1...256).contains(connectThreads) { throw ValidationError("--connect-threads is 1 to 256") }
    }

    func run() throws {
        do {
            let listenAddress = try TunnelAddress(listen)
            guard case .tcp(let host, let port) = try TunnelAddress(target) else {
                throw MTLSError(.invalidArgument, "--target: the TLS side connects over TCP (HOST:PORT)")
            }
            let activated = SystemdNotify.activatedSocket()
            // The plaintext rule judges the socket systemd passed as it judges --listen: by the
            // address it is bound to (a socket unit may say ListenStream=0.0.0.0:8080).
            let activatedAddress = try activated.map { try TunnelAddress.bound(listeningSocket: $0) }
            try (activatedAddress ?? listenAddress).requirePlaintextSafe(
                option: activated == nil ? "--listen" : "the activated socket (fd 3)", allowed: unsafeListen, unsafeFlag: "--unsafe-listen")
            var socketFolder: [String] = []
            if case .unix(let path) = listenAddress { socketFolder = [URL(fileURLWithPath: path).deletingLastPathComponent().path] }
            let runtime = try TunnelRuntime(options: operation, identityOptions: identityOptions, policy: trust.policy, writable: socketFolder)
            let follow = try trust.following(identityOptions, anchors: anchor)
            var o = TLSClientOptions()
            if let source = follow.source {
                o.identitySource = source
            } else {
                o.identity = try identityOptions.clientIdentity()
            }
            o.policy = follow.clientPolicy
            o.overrides = try PolicyBuilder.overrides(anchors: follow.fileAnchors, anchorsOnly: false, systemAnchors: systemAnchors, pins: pin,
                                                      verifyAs: verifyAs, allow: allow, store: identityOptions.openStore)
            o.connectSeconds = operation.connectTimeout
            let (minVersion, maxVersion) = try operation.versions
            if let minVersion { o.minVersion = minVersion }
            if let maxVersion { o.maxVersion = maxVersion }
            CLI.raiseOpenFileLimit()
            let (listenFD, boundPort) = try activated.map { fd -> (Int32, UInt16) in
                if case .tcp(_, let port) = activatedAddress { return (fd, port) }
                return (fd, 0)
            } ?? listenAddress.listen()
            follow.start(listener: nil)
            try renewal.start(identityOptions, following: follow, json: operation.json, until: { runtime.draining })
            CLI.printWarnings()
            let shown: String
            switch activatedAddress ?? listenAddress {
            case .tcp(let h, _): shown = h
            case .unix(let path): shown = "unix:\(path)"
            }
            let closed = Atomic<Bool>(false)
            let source = follow.source
            let fixed = try? identityOptions.explicitIdentity()
            try runtime.start(address: shown, port: boundPort, target: .tcp(host: host, port: port),
                              identity: { source?.current ?? fixed }, listenerMetrics: nil,
                              stopAccepting: { if !closed.exchange(true, ordering: .acquiringAndReleasing) { Glibc.shutdown(listenFD, Int32(SHUT_RDWR)) } })
            let options = o
            let connecting = WorkPool(threads: connectThreads, name: "mtls-connect")
            while !runtime.draining {
                guard runtime.takeRoom() else { continue }
                let plain: Int32, from: String
                do {
                    (plain, from) = try Socket.accept(listenFD, deadline: Deadline(seconds: 0.5))
                } catch let e as MTLSError where e.code == .timeout {
                    runtime.giveRoom()
                    continue
                } catch let e as MTLSError {
                    runtime.giveRoom()
                    if runtime.draining { break }
                    ServeLog.line("accept failed: \(e.message) [\(e.code.name)]")
                    continue
                }
                let who = from == "?" ? "local client" : from
                // Counted from here, so a connect under way at SIGTERM is drained too.
                runtime.pending(+1)
                connecting.run {
                    defer { runtime.pending(-1) }
                    let conn: TLSConnection
                    do {
                        conn = try TLSConnection.connect(host: host, port: port, options: options)
                    } catch {
                        Glibc.close(plain)
                        runtime.giveRoom()
                        ServeLog.line("refused \(who) → \(host):\(port): \((error as? MTLSError)?.message ?? "\(error)") [\(CLI.errorName(error))]")
                        return
                    }
                    ServeLog.line("connected \(who) → \(host):\(port) \(conn.tlsVersionName) server \(conn.peerCertificate?.subject ?? "?")")
                    runtime.forward(conn, plain: plain, who: who)
                }
            }
            Glibc.close(listenFD)
            if case .unix(let path) = listenAddress, activated == nil { unlink(path) }
            runtime.drain()
        } catch {
            if operation.json {
                let name = error is ValidationError ? MTLSError.Code.invalidArgument.name : CLI.errorName(error)
                CLI.printJSON(["error": name, "message": (error as? MTLSError)?.message ?? "\(error)"])
            }
            throw CLI.fail(error)
        }
    }
}

/// A fixed number of threads running queued jobs in turn (the tunnel client's blocking connects
/// and handshakes): the thread count does not grow with the connections.
final class WorkPool: Sendable {
    private let jobs = Locked<[@Sendable () -> Void]>([])
    private let ready = DispatchSemaphore(value: 0)

    /// The threads run until the process ends.
    init(threads: Int, name: String) {
        for _ in 0..<threads {
            Thread.detachNewThread { [self] in
                Thread.current.name = name
                while true {
                    ready.wait()
                    if let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { job() }
                }
            }
        }
    }

    func run(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
        ready.signal()
    }
}
