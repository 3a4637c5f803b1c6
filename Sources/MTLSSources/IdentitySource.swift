internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// Certificates that change under a running program (issue 26): identity sources, policy files
// that are followed, the events they report, and the one library thread that watches them.

/// Something told of each identity an ``IdentitySource`` puts in force, on the thread that does.
package protocol IdentityObserver: AnyObject, Sendable {
    func identityReplaced(_ identity: Identity)
}

/// Something the watcher thread looks at periodically.
protocol LifecycleWatched: AnyObject, Sendable {
    /// Looks for a change (cheap when nothing changed) and applies it.
    func refresh()
}

/// The library's one background thread for lifecycle work (`mtls-watch`): it looks at every
/// followed store label and policy file every ``interval`` seconds, so handshakes never read the
/// store. It starts with the first thing followed and ends when nothing is followed any more.
package enum LifecycleWatcher {
    /// Seconds between two looks: a change made by another process is in force within this
    /// (plus the time to load it), well under a second.
    static let interval = 0.25

    private struct Entry { weak var item: (any LifecycleWatched)? }
    private struct State {
        var entries: [Entry] = []
        var running = false
        /// Looks left before freed memory is given back (0: none due).
        var releaseIn = 0
        /// Complete looks at every followed item since the process started.
        var looks = 0
    }
    /// Looks between a rotation or reload and giving back what it freed: long enough for the
    /// connections still holding the previous identity or policy to end, and a burst of
    /// changes gives back once.
    static let releaseDelay = 3
    private static let state = Locked(State())

    static func watch(_ item: any LifecycleWatched) {
        let start: Bool = state.withLock { st in
            st.entries.append(Entry(item: item))
            guard !st.running else { return false }
            st.running = true
            return true
        }
        if start && !spawn() { state.withLock { $0.running = false } }
    }

    /// Asks for the memory a rotation or reload freed to be given back to the system
    /// ``releaseDelay`` looks from now (once for a burst of changes), when the connections that
    /// held the previous identity or policy have had time to end. Does nothing unless the
    /// watcher thread runs (something follows a store or a file).
    static func releaseFreedMemorySoon() {
        state.withLock { st in
            if st.running && st.releaseIn == 0 { st.releaseIn = releaseDelay }
        }
    }

    /// Complete looks at every followed item so far: after two more than now, whatever was
    /// changed before has been seen and its events delivered (tests wait on this, not on time).
    package static var completedLooks: Int { state.withLock { $0.looks } }

    private static func spawn() -> Bool {
        BackgroundThread.start(name: "mtls-watch") { LifecycleWatcher.run() }
    }

    private static func run() {
        while true {
            // The strong references live only while the items are looked at, never during the
            // sleep: a source the application let go is freed (and its destroy runs) at once.
            let more: Bool = {
                let items: [any LifecycleWatched]? = state.withLock { st in
                    st.entries.removeAll { $0.item == nil }
                    if st.entries.isEmpty { st.running = false; return nil }
                    return st.entries.compactMap(\.item)
                }
                guard let items else { return false }
                for i in items { i.refresh() }
                let release: Bool = state.withLock { st in
                    st.looks += 1
                    guard st.releaseIn > 0 else { return false }
                    st.releaseIn -= 1
                    return st.releaseIn == 0
                }
                // Under load, the previous identity's SSL_CTX and the connections' buffers are
                // freed across glibc's per-thread arenas, which keep the pages: without this a
                // rotating server's RSS climbs after each rotation to a new high-water mark
                // (measured: +13-25 % over 100 rotations under 64 clients), with its live heap
                // flat. malloc_trim changes no setting of the host; it runs here, at most once
                // per `releaseDelay` looks, never on a handshake.
                if release { mtls_release_free_memory() }
                return true
            }()
            guard more else { return }
            usleep(useconds_t(interval * 1_000_000))
        }
    }
}

/// The identity a listener, client connections or a configured `SSL_CTX` present: fixed, swapped
/// by the application (``replace(with:)``), or following a store label (``init(store:label:tokenPIN:warningDays:)``).
///
/// Each handshake takes ``current`` once, when it starts, and uses that identity whole (key,
/// leaf and chain together); connections in flight keep what they started with. Reading
/// ``current`` is a lock and a reference copy: a followed store is read by the watcher thread,
/// never on the handshake path.
public final class IdentitySource: Sendable, LifecycleWatched {
    /// Events of this source: rotations, failed reloads, expiry within the warning window.
    public let events = LifecycleEvents()
    /// Days before notAfter from which an ``LifecycleEventKind/expiryWarning`` is reported.
    public let warningDays: Int
    /// The store label followed, if any.
    public let label: String?

    private struct Current {
        var identity: Identity
        /// The leaf whose expiry was last warned about (once per identity).
        var warned: [UInt8]?
    }
    private let current_: Locked<Current>
    private let follow: StoreFollow?
    /// Told of each new identity before the event, on the thread that put it in force (a
    /// listener makes its context for it there: see ``ListenerContexts``). Held weakly.
    private let observers = Locked<[WeakObserver]>([])
    private struct WeakObserver { weak var item: (any IdentityObserver)? }

    /// What following a store needs: the store, the label and what was seen last.
    private final class StoreFollow: Sendable {
        let store: CredentialStore
        let tokenPIN: SecretBytes?
        /// The store's change mark when last looked at, and the row's ``fingerprint(_:)`` then.
        let seen: Locked<(mark: [Int64], leaf: String)>
        /// The last failure reported (its code and message): a look that keeps failing is retried
        /// at each look (a token put back in is found) but reported once.
        let reported = Locked<String?>(nil)
        /// Held for the whole of a look (see ``IdentitySource/refresh()``).
        let looking = Locked(())
        init(store: CredentialStore, tokenPIN: SecretBytes?, mark: [Int64], leaf: String) {
            self.store = store
            self.tokenPIN = tokenPIN
            seen = Locked((mark, leaf))
        }
    }

    /// A source presenting `identity` until ``replace(with:)`` says otherwise. Once an event
    /// handler is set, the watcher thread also looks at its expiry.
    public init(_ identity: Identity, warningDays: Int = LifecycleDefaults.warningDays) {
        current_ = Locked(Current(identity: identity))
        follow = nil
        label = nil
        self.warningDays = warningDays
        events.onFirstHandler.withLock { $0 = { [weak self] in if let self { LifecycleWatcher.watch(self) } } }
    }

    /// A source following the identity stored under `label` in `store` (a stored identity, else
    /// a token identity, whose key is found on its token with `tokenPIN` or its URI's PIN). The
    /// identity is loaded now (a failure throws); a replacement in the store, by this process or
    /// another, is in force within a second; one that fails to load keeps the last good identity
    /// and is reported (``LifecycleEventKind/reloadFailed``).
    public init(store: CredentialStore, label: String, tokenPIN: SecretBytes? = nil, warningDays: Int = LifecycleDefaults.warningDays) throws {
        let mark = try store.changeMark()
        let (identity, leaf) = try IdentitySource.load(store, label, tokenPIN)
        current_ = Locked(Current(identity: identity))
        follow = StoreFollow(store: store, tokenPIN: tokenPIN, mark: mark, leaf: leaf)
        self.label = label
        self.warningDays = warningDays
        LifecycleWatcher.watch(self)
    }

    /// The identity in force now, whole.
    public var current: Identity { current_.withLock { $0.identity } }

    /// Puts `identity` in force for every handshake that starts from now on, and reports it
    /// (``LifecycleEventKind/identityRotated``, on the calling thread).
    ///
    /// An identity whose certificate has expired or is not valid yet is refused: every peer
    /// would refuse it, so putting it in force would only stop every handshake. It throws
    /// ``MTLSError/Code/invalidArgument`` saying so, the identity in force stays, and the refusal
    /// is reported as ``LifecycleEventKind/reloadFailed`` (on the calling thread).
    public func replace(with identity: Identity) throws {
        if let refusal = IdentitySource.refusal(of: identity) {
            events.emit(LifecycleEvent(kind: .reloadFailed, label: label, certificate: identity.leaf, error: refusal,
                                       message: "\(refusal.message); the identity in force stays"))
            throw refusal
        }
        put(identity)
    }

    /// Why `identity` must not replace the identity in force at `now`: a certificate outside its
    /// validity (expired, or not valid yet). Nil when it may.
    static func refusal(of identity: Identity, at now: Date = Date()) -> MTLSError? {
        let leaf = identity.leaf
        if leaf.notAfter < now {
            return MTLSError(.invalidArgument, "the certificate \"\(leaf.subjectSummary)\" expired at \(leaf.notAfter): it is not put in force")
        }
        if leaf.notBefore > now {
            return MTLSError(.invalidArgument, "the certificate \"\(leaf.subjectSummary)\" is not valid before \(leaf.notBefore): it is not put in force")
        }
        return nil
    }

    /// Reports that a TLS context could not present `refused` (its security level, its
    /// signature schemes) and presents `fallback`, the last identity it could, instead (nil: none,
    /// the handshake fails). On the thread of the handshake that found it.
    package func reportRefusedByContext(_ refused: Identity, error: MTLSError, fallback: Identity?) {
        let stays = fallback.map { "the last good identity there, \"\($0.leaf.subjectSummary)\", stays in use" }
            ?? "that context has no identity it could present, its handshakes fail"
        events.emit(LifecycleEvent(kind: .reloadFailed, label: label, certificate: refused.leaf, error: error,
                                   message: "a TLS context cannot present \"\(refused.leaf.subjectSummary)\" (\(error.message)); \(stays)"))
    }

    /// Puts `identity` in force (checked), tells the observers, reports the rotation.
    private func put(_ identity: Identity) {
        current_.withLock { $0.identity = identity }
        let told = observers.withLock { list in
            list.removeAll { $0.item == nil }
            return list.compactMap(\.item)
        }
        for o in told { o.identityReplaced(identity) }
        LifecycleWatcher.releaseFreedMemorySoon()
        events.emit(LifecycleEvent(kind: .identityRotated, label: label, certificate: identity.leaf,
                                   message: "identity rotated: now presenting \"\(identity.leaf.subjectSummary)\" (sha256 \(identity.leaf.sha256Hex.prefix(16)))"))
        warnIfExpiring()
    }

    /// Tells `observer` of every identity put in force from now on (held weakly).
    package func observe(_ observer: any IdentityObserver) {
        observers.withLock { $0.append(WeakObserver(item: observer)) }
    }

    /// What the followed label holds now: its row's metadata (a stored identity, else a token
    /// identity; nothing decrypted). Only "no stored identity" falls through to the token
    /// identities: any other failure (a row that fails authentication) is that failure, so the
    /// event says why (``MTLSError/Code/corrupt``), not "no token identity".
    private static func rowInfo(_ store: CredentialStore, _ label: String) throws -> StoreItemInfo {
        do {
            return try store.info(label: label, itemClass: .identity)
        } catch let e as MTLSError where e.code == .notFound {
            do {
                return try store.info(label: label, itemClass: .tokenIdentity)
            } catch let t as MTLSError where t.code == .notFound {
                throw MTLSError(.notFound, "no identity or token identity labelled \"\(label)\" in the store")
            }
        }
    }

    /// What a replacement changes: the class (a label switched between a stored identity and a
    /// token identity of the same certificate), the leaf, the chain above it (an intermediate
    /// re-issued or cross-signed under the same leaf), and a token identity's key URI (the key
    /// moved to another token). The row's metadata says it without decrypting anything.
    private static func fingerprint(_ info: StoreItemInfo) -> String {
        ([info.itemClass.name, info.leafSHA256] + info.chainSHA256 + [info.tokenURI ?? ""]).joined(separator: ",")
    }

    private static func load(_ store: CredentialStore, _ label: String, _ pin: SecretBytes?) throws -> (Identity, String) {
        // The metadata is read first: if the row is replaced between the two reads, the next
        // look sees a fingerprint that differs from this one and loads the row again.
        let info = try rowInfo(store, label)
        if info.itemClass == .identity {
            return (try store.identity(label: label), fingerprint(info))
        }
        let reference = try store.tokenIdentity(label: label)
        return (try Token.identity(reference: reference, pin: pin), fingerprint(info))
    }

    /// Looks at the followed label now, whatever the change mark says (`mtls serve` on SIGHUP):
    /// a row whose leaf, chain or key URI changed is loaded and put in force; a failure is
    /// reported, even one already reported (whoever asked for the reload hears how it went).
    /// Does nothing for a source that follows no store.
    public func reload() {
        guard let follow, let label else { return }
        apply(follow.looking.withLock { _ in
            follow.reported.withLock { $0 = nil }
            follow.seen.withLock { $0.mark = [] }
            return look(follow, label)
        })
    }

    /// The watcher's look: the store's change mark first (two integers from SQLite); only when
    /// it moved, the row's metadata; only when the row's fingerprint changed, the row itself.
    /// A failure keeps the mark as it was, so that the next look tries again (a token put back
    /// in, a row stored again), and is reported once until a look succeeds: a label deleted or a
    /// row that fails authentication is not reported again at every other write to the store.
    /// One look at a time (the watcher's, a reload on another thread): two that found the same
    /// replacement would put it in force, and report it, twice. What a look finds is put in
    /// force and reported after it, so that a handler may call back into the source.
    func refresh() {
        warnIfExpiring()
        guard let follow, let label else { return }
        apply(follow.looking.withLock { _ in look(follow, label) })
    }

    private func apply(_ found: Found) {
        switch found {
        case .rotated(let identity): put(identity)
        case .failed(let e): reportFailure(e)
        case .unchanged: break
        }
    }

    /// What a look found.
    private enum Found: Sendable { case unchanged, rotated(Identity), failed(MTLSError) }

    private func look(_ follow: StoreFollow, _ label: String) -> Found {
        guard let mark = try? follow.store.changeMark() else { return .unchanged }
        let before = follow.seen.withLock { $0 }
        guard mark != before.mark else { return .unchanged }
        do {
            let info = try IdentitySource.rowInfo(follow.store, label)
            if IdentitySource.fingerprint(info) == before.leaf {
                // The row in force (still, or again): nothing to load, and a later failure is news.
                follow.seen.withLock { $0.mark = mark }
                follow.reported.withLock { $0 = nil }
                return .unchanged
            }
            let (identity, loaded) = try IdentitySource.load(follow.store, label, follow.tokenPIN)
            // An expired or not yet valid replacement is a failed reload: the last good identity
            // stays (one that becomes valid later is put in force then, at a later look).
            if let refusal = IdentitySource.refusal(of: identity) { throw refusal }
            follow.seen.withLock { $0 = (mark, loaded) }
            follow.reported.withLock { $0 = nil }
            return .rotated(identity)
        } catch let e as MTLSError where e.code == .locked {
            return .unchanged // another process's write holds the store beyond the busy timeout: the next look retries
        } catch {
            // The mark is kept as it was, so the next look tries again (a token put back in, a
            // certificate that becomes valid).
            let e = error as? MTLSError ?? MTLSError(.io, "\(error)")
            let key = "\(e.code.rawValue)\u{0}\(e.message)"
            let first: Bool = follow.reported.withLock { last in
                guard last != key else { return false }
                last = key
                return true
            }
            return first ? .failed(e) : .unchanged
        }
    }

    private func reportFailure(_ e: MTLSError) {
        events.emit(LifecycleEvent(kind: .reloadFailed, label: label, error: e,
                                   message: "reloading \"\(label ?? "")\" failed, the last good identity stays in use: \(e.message)"))
    }

    private func warnIfExpiring() {
        let now = Date()
        let due: Identity? = current_.withLock { c in
            let leaf = c.identity.leaf
            guard leaf.notAfter.timeIntervalSince(now) < Double(warningDays) * 86400, c.warned != leaf.sha256 else { return nil }
            c.warned = leaf.sha256
            return c.identity
        }
        guard let id = due else { return }
        let days = Int((id.leaf.notAfter.timeIntervalSince(now) / 86400).rounded(.down))
        events.emit(LifecycleEvent(kind: .expiryWarning, label: label, certificate: id.leaf,
                                   message: "\"\(id.leaf.subjectSummary)\" expires in \(days) days"))
    }
}

/// A policy that follows its JSON file: when the file changes (its size, modification or change
/// time, inode or device — or, while its times are within a timestamp's granularity of the last
/// read, its bytes), the new file is parsed in full and only then put in force with
/// ``TrustPolicy/replaceSettings(from:)`` — so sessions made under the old settings are not
/// resumed (see the resumption binding). A file that does not parse keeps the old settings and
/// is reported.
public final class PolicyFileWatch: Sendable, LifecycleWatched {
    /// The policy kept up to date; give it to listeners, connections and contexts.
    public let policy: TrustPolicy
    /// The file followed.
    public let path: String
    /// Reloads, failed reloads and anchors within the warning window.
    public let events = LifecycleEvents()
    /// Days before an anchor's notAfter from which an ``LifecycleEventKind/expiryWarning`` is reported.
    public let warningDays: Int
    private let seen: Locked<Seen>
    /// Held for the whole of a look or a reload.
    private let looking = Locked(())
    /// What the program sets on top of the file's settings (a command line's `--revocation`),
    /// applied to every version of the file before it is put in force, so a reload never drops it.
    private let adjust: (@Sendable (TrustPolicy) throws -> Void)?
    /// The anchors already warned about (once per anchor).
    private let warned = Locked<Set<String>>([])

    package struct FileStamp: Equatable {
        var size: Int64, inode: UInt64, device: UInt64
        var mtime: Int, mtimeNanos: Int, ctime: Int, ctimeNanos: Int
        /// The later of the modification and change times, in seconds since 1970.
        var changedAt: Double { max(Double(mtime) + Double(mtimeNanos) / 1e9, Double(ctime) + Double(ctimeNanos) / 1e9) }
    }

    /// What the last read saw: the file's stamp, the SHA-256 of its bytes (nil when it could not
    /// be read), when it was read (seconds since 1970, taken before the read), and the failure of
    /// that load (its code and message; nil when the file was put in force). A file that failed
    /// is loaded again at each look, since what failed may be a file it names (an anchor written
    /// after the policy), and reported again only when the failure is another one.
    struct Seen {
        var stamp: FileStamp?; var digest: [UInt8]?; var readAt: Double; var failure: String? = nil
        /// The anchor and CRL files the policy in force took in, with their stamps from before
        /// they were read (from just after, for a file named the first time): when one changes,
        /// the policy file is read again, as when the policy file itself changes.
        var named: [NamedFile] = []
    }
    struct NamedFile: Sendable { var path: String; var stamp: FileStamp? }

    /// Stamps `files`, taking each one's stamp from `before` when it was taken there.
    static func named(_ files: [String], before: [String: FileStamp?]) -> [NamedFile] {
        files.map { f in
            if let s = before[f] { return NamedFile(path: f, stamp: s) }
            return NamedFile(path: f, stamp: stamp(f))
        }
    }

    /// How far a file's timestamps may lag behind a write: the kernel stamps files from a clock
    /// that ticks once per jiffy, and some filesystems keep whole seconds (two for FAT). A
    /// rewrite of the same size within that of the last read leaves the stamp as it was; while
    /// the stamp is that recent, the bytes are compared too (git's "racy clean" rule), then no more.
    static let timestampGranularity = 2.0

    /// Loads `path` (a failure throws) and follows it from now on. `adjust`, when given, is applied
    /// to the file's policy at every load, before it is put in force (a failure there is a failed
    /// reload, and the previous policy stays).
    public init(path: String, warningDays: Int = LifecycleDefaults.warningDays, adjust: (@Sendable (TrustPolicy) throws -> Void)? = nil) throws {
        self.path = path
        self.warningDays = warningDays
        self.adjust = adjust
        let stamp = PolicyFileWatch.stamp(path)
        let readAt = Date().timeIntervalSince1970
        let bytes = try FileIO.read(path)
        let (loaded, files) = try TrustPolicy.loadNamingFiles(bytes: bytes, path: path)
        try adjust?(loaded)
        policy = loaded
        seen = Locked(Seen(stamp: stamp, digest: Encoding.sha256(bytes), readAt: readAt,
                          named: PolicyFileWatch.named(files, before: [:])))
        LifecycleWatcher.watch(self)
    }

    /// Whether a file whose stamp is `stamp` may have been written after it was read at `readAt`
    /// (seconds since 1970) with its stamp unchanged: its last change is within a timestamp's
    /// granularity of the read.
    package static func mayHaveChangedUnseen(_ stamp: FileStamp, readAt: Double) -> Bool {
        stamp.changedAt + timestampGranularity >= readAt
    }

    static func stamp(_ path: String) -> FileStamp? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return FileStamp(size: Int64(st.st_size), inode: UInt64(st.st_ino), device: UInt64(st.st_dev),
                         mtime: st.st_mtim.tv_sec, mtimeNanos: st.st_mtim.tv_nsec, ctime: st.st_ctim.tv_sec, ctimeNanos: st.st_ctim.tv_nsec)
    }

    /// Reloads now, whether or not the file looks changed (`mtls serve` on SIGHUP); a failure is
    /// reported even when it is the one already reported.
    public func reload() {
        if let e = looking.withLock({ _ in load(reportingAgain: true) }) { events.emit(e) }
    }

    /// Reads, parses and puts the file in force; a failure keeps the policy in force and is
    /// reported when `reportingAgain` or when it is not the last failure reported. Returns the
    /// event to report, emitted by the caller once ``looking`` is released (a handler may call
    /// back into the watch).
    private func load(reportingAgain: Bool) -> LifecycleEvent? {
        // The stamp and the time before the bytes: a write after them is seen by the next look.
        let stamp = PolicyFileWatch.stamp(path)
        let readAt = Date().timeIntervalSince1970
        let (previous, named) = seen.withLock { ($0.failure, $0.named) }
        // The files the last version named, stamped before this read takes them in again.
        let before = Dictionary(named.map { ($0.path, PolicyFileWatch.stamp($0.path)) }, uniquingKeysWith: { a, _ in a })
        do {
            let bytes: [UInt8]
            do {
                bytes = try FileIO.readRegularFile(path)
            } catch {
                seen.withLock { $0 = Seen(stamp: stamp, digest: nil, readAt: readAt, failure: previous, named: named) }
                throw error
            }
            seen.withLock { $0 = Seen(stamp: stamp, digest: Encoding.sha256(bytes), readAt: readAt, failure: previous, named: named) }
            let (fresh, files) = try TrustPolicy.loadNamingFiles(bytes: bytes, path: path)
            try adjust?(fresh)
            policy.replaceSettings(from: fresh)
            seen.withLock { $0.failure = nil; $0.named = PolicyFileWatch.named(files, before: before) }
            LifecycleWatcher.releaseFreedMemorySoon()
            return LifecycleEvent(kind: .policyReloaded, label: path, message: "policy \(path) reloaded")
        } catch {
            let e = error as? MTLSError ?? MTLSError(.io, "\(error)")
            let key = "\(e.code.rawValue)\u{0}\(e.message)"
            seen.withLock { $0.failure = key }
            guard reportingAgain || key != previous else { return nil }
            return LifecycleEvent(kind: .reloadFailed, label: path, error: e,
                                  message: "reloading policy \(path) failed, the previous policy stays in force: \(e.message)")
        }
    }

    func refresh() {
        warnAboutAnchors()
        if let e = looking.withLock({ _ in look() }) { events.emit(e) }
    }

    /// One look (under ``looking``: the watcher's and a reload on another thread never load the
    /// same version twice, nor interleave their notes of what they read).
    private func look() -> LifecycleEvent? {
        let stamp = PolicyFileWatch.stamp(path)
        let last = seen.withLock { $0 }
        // Another version of the file: loaded, and its failure reported whatever came before.
        guard stamp == last.stamp else { return load(reportingAgain: true) }
        // The same version failed last time: tried again, quietly unless it fails otherwise.
        if last.failure != nil { return load(reportingAgain: false) }
        // An anchor or CRL file the policy took in was replaced or rewritten (a CA bundle
        // updated, a fresh CRL): the policy is read again, whole, like a changed policy file.
        if last.named.contains(where: { PolicyFileWatch.stamp($0.path) != $0.stamp }) { return load(reportingAgain: true) }
        // Same stamp: only a file written within a timestamp's granularity of the last read can
        // have changed unseen; its bytes say whether it did.
        guard let stamp, PolicyFileWatch.mayHaveChangedUnseen(stamp, readAt: last.readAt) else { return nil }
        let readAt = Date().timeIntervalSince1970
        guard let bytes = try? FileIO.readRegularFile(path) else { return nil }
        if Encoding.sha256(bytes) != last.digest { return load(reportingAgain: true) }
        seen.withLock { $0.readAt = readAt }
        return nil
    }

    /// Reports each anchor of the policy (its own and its host rules') within the warning window.
    private func warnAboutAnchors() {
        let limit = Date().addingTimeInterval(Double(warningDays) * 86400)
        let anchors = policy.anchors + policy.hostRules.flatMap { $0.anchors ?? [] }
        let due: [Certificate] = warned.withLock { done in
            let due = anchors.filter { $0.notAfter < limit && !done.contains($0.sha256Hex) }
            for c in due { done.insert(c.sha256Hex) }
            return due
        }
        for c in due {
            let days = Int((c.notAfter.timeIntervalSinceNow / 86400).rounded(.down))
            events.emit(LifecycleEvent(kind: .expiryWarning, label: path, certificate: c,
                                       message: "anchor \"\(c.subjectSummary)\" of policy \(path) expires in \(days) days"))
        }
    }
}

/// Anchors taken from store labels (stored certificates), kept up to date in a policy: when
/// another process replaces one (`mtls store add-cert --replace`...), the policy's anchors are
/// swapped for the new ones with ``TrustPolicy/replaceSettings(from:)`` within a second (so
/// sessions judged under the old anchors are not resumed). A label that fails to load keeps the
/// anchors in force and is reported once.
public final class StoreAnchorWatch: Sendable, LifecycleWatched {
    /// The policy whose anchors follow the labels.
    public let policy: TrustPolicy
    /// The labels followed.
    public let labels: [String]
    /// Reloads and failed reloads.
    public let events = LifecycleEvents()
    private let store: CredentialStore
    /// The store's change mark when last looked at, the certificates in force, the last failure reported.
    private let state: Locked<(mark: [Int64], certificates: [Certificate], reported: String?)>

    /// Adds the certificates stored under `labels` to `policy`'s anchors now (a failure throws)
    /// and follows them from now on.
    public init(policy: TrustPolicy, store: CredentialStore, labels: [String]) throws {
        let mark = try store.changeMark()
        let certificates = try labels.map { try store.certificate(label: $0) }
        let next = policy.copy()
        next.anchors = policy.anchors + certificates
        policy.replaceSettings(from: next)
        self.policy = policy
        self.labels = labels
        self.store = store
        state = Locked((mark, certificates, nil))
        LifecycleWatcher.watch(self)
    }

    /// The certificates of ``labels`` in force now (the last good load), in the order of the labels:
    /// what a program that also replaces the policy's settings by other means (a followed policy
    /// file) adds back to each new version.
    public var certificates: [Certificate] { state.withLock { $0.certificates } }

    func refresh() {
        guard let mark = try? store.changeMark() else { return }
        let before = state.withLock { $0 }
        guard mark != before.mark else { return }
        let fresh: [Certificate]
        do {
            fresh = try labels.map { try store.certificate(label: $0) }
        } catch {
            let e = error as? MTLSError ?? MTLSError(.io, "\(error)")
            let first: Bool = state.withLock { st in
                guard st.reported != e.message else { return false }
                st.reported = e.message
                return true
            }
            if first {
                events.emit(LifecycleEvent(kind: .reloadFailed, label: labels.joined(separator: ","), error: e,
                                           message: "reloading the anchors \(labels.joined(separator: ", ")) failed, the anchors in force stay: \(e.message)"))
            }
            return
        }
        state.withLock { $0.mark = mark; $0.reported = nil }
        guard fresh.map(\.sha256Hex) != before.certificates.map(\.sha256Hex) else { return }
        let old = Set(before.certificates.map(\.sha256Hex))
        let next = policy.copy()
        next.anchors = policy.anchors.filter { !old.contains($0.sha256Hex) } + fresh
        policy.replaceSettings(from: next)
        state.withLock { $0.certificates = fresh }
        LifecycleWatcher.releaseFreedMemorySoon()
        events.emit(LifecycleEvent(kind: .policyReloaded, label: labels.joined(separator: ","),
                                   message: "anchors \(labels.joined(separator: ", ")) reloaded from the store"))
    }
}
