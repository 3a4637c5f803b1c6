import Foundation
import XCTest
@testable import MTLS
@testable import MTLSSources

/// How followed store labels and policy files fail, and come back (issue 26, server side): each
/// failure says why and is reported once, not again at every other write to the store; an
/// explicit reload reports how it went; a policy file rewritten in place without its size or
/// modification time changing is still seen; symlinks, deletions and directories in its place.
final class RotationFailureTests: XCTestCase {
    var pki: String { TLSConnectionTests.pkiDir }
    func cert(_ name: String) throws -> Certificate { try Certificate.load(path: pki + "/" + name + ".pem")[0] }
    func identity(_ name: String) throws -> Identity {
        let key = try PrivateKey(pem: FileIO.read(pki + "/" + name + ".key"), password: nil)
        return try Identity(privateKey: key, leaf: cert(name), certificates: [cert("int-a")])
    }

    /// Two handles on one new store file: ours follows, the other writes as another process would.
    func stores() throws -> (ours: CredentialStore, other: CredentialStore) {
        let path = try TestPKI.tempDir() + "/s.db"
        let other = try CredentialStore(path: path, secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        let ours = try CredentialStore(path: path, secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        return (ours, other)
    }

    /// Until the watcher has looked twice more: what was written before has been seen.
    func settle() { waitForWatcherLooks() }

    func testATamperedRowIsReportedAsTamperedOnceWhateverElseIsWrittenToTheStore() throws {
        let (ours, other) = try stores()
        try other.putIdentity(try identity("server"), label: "srv")
        let source = try IdentitySource(store: ours, label: "srv")
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        // Someone with write access to the file but not the secret edits the row.
        try other._testExecute("UPDATE items SET subject = 'CN=evil' WHERE label = 'srv'")
        settle()
        // Other labels written afterwards: the same failure is not news.
        try other.putCertificate(try cert("root"), label: "a")
        settle()
        try other.putCertificate(try cert("int-b"), label: "b")
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed], "\(events.value.map(\.message))")
        XCTAssertEqual(events.value.first?.error?.code, .corrupt, "the event says the row is tampered, not that no token identity exists")
        XCTAssertEqual(source.current.leaf, try cert("server"), "the last good identity stays")
    }

    func testADeletedLabelIsReportedOnceAndAgainWhenDeletedAgainAfterComingBack() throws {
        let (ours, other) = try stores()
        try other.putIdentity(try identity("server"), label: "srv")
        let source = try IdentitySource(store: ours, label: "srv")
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        _ = try other.delete(label: "srv")
        settle()
        try other.putCertificate(try cert("root"), label: "a")
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed], "\(events.value.map(\.message))")
        XCTAssertEqual(events.value.first?.error?.code, .notFound)
        // Stored again (the same identity): in force as it was, nothing to report.
        try other.putIdentity(try identity("server"), label: "srv")
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed])
        // Deleted again: that is news again.
        _ = try other.delete(label: "srv")
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed, .reloadFailed], "\(events.value.map(\.message))")
        XCTAssertEqual(source.current.leaf, try cert("server"))
    }

    func testAnExplicitReloadReportsAFailureAlreadyReported() throws {
        setenv("SOFTHSM2_CONF", SoftHSMFixture.dir + "/softhsm2.conf", 1)
        let good = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: SoftHSMFixture.module, pin: SoftHSMFixture.pin)
        let (ours, other) = try stores()
        try other.putTokenIdentity(uri: "pkcs11:token=mtls-test;id=%02", certificate: good.leaf, chain: good.chain, label: "tok")
        let source = try IdentitySource(store: ours, label: "tok", tokenPIN: SoftHSMFixture.pin)
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        try other.putTokenIdentity(uri: "pkcs11:token=no-such-token;id=%02", certificate: try cert("server"), label: "tok", replace: true)
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed], "retried at every look, reported once")
        // `mtls serve` on SIGHUP: whoever asked for the reload hears that it failed.
        source.reload()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed, .reloadFailed], "\(events.value.map(\.message))")
        XCTAssertEqual(events.value.last?.error?.code, .tokenNotPresent)
        XCTAssertEqual(source.current.leaf, good.leaf)
    }

    /// `mtls serve` prints one line per event: a common name (or a label) with line breaks in it
    /// must not print lines of its own ("reload failed ..." made up by whoever chose the name).
    func testAnEventMessageIsOneLineWhateverTheCommonNameHolds() throws {
        // libmtls's own issuing refuses such a name; OpenSSL makes it.
        let dir = try TestPKI.tempDir()
        _ = try TestPKI.sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -utf8 -keyout \(dir)/k.pem -out \(dir)/c.pem -subj \"$(printf '/CN=x\\nreload failed [corrupt]: forged\\r\\302\\205\\342\\200\\250end')\" 2>/dev/null")
        let forged = try Identity(privateKey: try PrivateKey(pem: FileIO.read(dir + "/k.pem"), password: nil),
                                  leaf: try Certificate.load(path: dir + "/c.pem")[0])
        XCTAssertTrue(forged.leaf.subjectSummary.contains("\n"), forged.leaf.subjectSummary)
        let source = IdentitySource(try identity("server"))
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        try source.replace(with: forged)
        let rotated = try XCTUnwrap(events.value.first { $0.kind == .identityRotated })
        XCTAssertTrue(rotated.message.contains("reload failed [corrupt]: forged"), rotated.message)
        XCTAssertFalse(rotated.message.unicodeScalars.contains { ["\n", "\r", "\u{85}", "\u{2028}"].contains($0) }, rotated.message)
        XCTAssertEqual(rotated.subject, forged.leaf.subject, "the event's fields stay as they are")
    }

    /// `mtls serve` reloads on SIGHUP from a thread of its own while the watcher looks too: one
    /// replacement is one rotation, however many look at it at once.
    func testConcurrentReloadsPutAReplacementInForceOnce() throws {
        let (ours, other) = try stores()
        try other.putIdentity(try identity("server"), label: "srv")
        let source = try IdentitySource(store: ours, label: "srv")
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        for round in 0..<5 {
            try other.putIdentity(try identity(round % 2 == 0 ? "server-rsa" : "server"), label: "srv", replace: true)
            DispatchQueue.concurrentPerform(iterations: 8) { _ in source.reload() }
            settle()
            XCTAssertEqual(events.value.filter { $0.kind == .identityRotated }.count, round + 1, "\(events.value.map(\.message))")
        }
        XCTAssertEqual(source.current.leaf, try cert("server-rsa"))
        XCTAssertTrue(events.value.allSatisfy { $0.kind == .identityRotated })
    }

    func testAPolicyFileRewrittenInPlaceWithItsSizeAndModificationTimeUnchangedIsReloaded() throws {
        let path = try TestPKI.tempDir() + "/p.json"
        let before = #"{"anchors_only": true} "#, after = #"{"anchors_only": false}"#
        XCTAssertEqual(before.utf8.count, after.utf8.count)
        try Data(before.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        let watch = try PolicyFileWatch(path: path)
        XCTAssertTrue(watch.policy.anchorsOnly)
        let version = watch.policy.version
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        waitForWatcherLooks()  // the watcher has the file's state before the rewrite
        // The same inode, the same size, and the modification time put back as it was: what a
        // rewrite within one timestamp tick (or a copy that keeps times) leaves behind.
        let fd = open(path, O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(Array(after.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, after.utf8.count)
        close(fd)
        var times = [st.st_atim, st.st_mtim]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)
        waitUntil { watch.policy.version > version }
        XCTAssertGreaterThan(watch.policy.version, version, "the new file is in force")
        XCTAssertFalse(watch.policy.anchorsOnly)
    }

    func testAStampWithinATimestampTickOfTheLastReadHasItsBytesCompared() {
        func stamp(_ changedAt: Int) -> PolicyFileWatch.FileStamp {
            PolicyFileWatch.FileStamp(size: 10, inode: 1, device: 1, mtime: changedAt, mtimeNanos: 0, ctime: changedAt, ctimeNanos: 500_000_000)
        }
        XCTAssertTrue(PolicyFileWatch.mayHaveChangedUnseen(stamp(1000), readAt: 1000.2), "written in the tick of the read")
        XCTAssertTrue(PolicyFileWatch.mayHaveChangedUnseen(stamp(1000), readAt: 1002.4), "within a 2 s filesystem granularity")
        XCTAssertFalse(PolicyFileWatch.mayHaveChangedUnseen(stamp(1000), readAt: 1003), "read well after its last change: the stamp says it all")
    }

    func testAFollowedPolicyFileThroughASymlinkDeletedReplacedByADirectoryAndPutBack() throws {
        let dir = try TestPKI.tempDir()
        try Data(#"{"anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: dir + "/v1.json"), options: .atomic)
        try Data(#"{"anchors_only": false}"#.utf8).write(to: URL(fileURLWithPath: dir + "/v2.json"), options: .atomic)
        let path = dir + "/policy.json"
        XCTAssertEqual(symlink(dir + "/v1.json", path), 0)
        let watch = try PolicyFileWatch(path: path)
        let events = LockedBox<[LifecycleEvent]>([])
        watch.events.setHandler { e in events.mutate { $0.append(e) } }
        // The link swapped atomically to another file (as Kubernetes does with a ConfigMap).
        XCTAssertEqual(symlink(dir + "/v2.json", dir + "/next"), 0)
        XCTAssertEqual(rename(dir + "/next", path), 0)
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.policyReloaded])
        XCTAssertFalse(watch.policy.anchorsOnly)
        let v2 = watch.policy.version
        // Gone: reported once, the policy in force stays.
        XCTAssertEqual(unlink(path), 0)
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.policyReloaded, .reloadFailed])
        // A directory where the file was: reported once.
        XCTAssertEqual(mkdir(path, 0o700), 0)
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.policyReloaded, .reloadFailed, .reloadFailed], "\(events.value.map(\.message))")
        XCTAssertEqual(watch.policy.version, v2)
        XCTAssertFalse(watch.policy.anchorsOnly)
        // Put back: in force again. (A look between the rmdir and the file may see it missing: one
        // more failure.)
        try Data(#"{"anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: dir + "/back.json"), options: .atomic)
        XCTAssertEqual(rmdir(path), 0)
        XCTAssertEqual(rename(dir + "/back.json", path), 0)
        settle()
        let kinds = events.value.map(\.kind)
        XCTAssertEqual(Array(kinds.prefix(3)), [.policyReloaded, .reloadFailed, .reloadFailed])
        XCTAssertEqual(kinds.last, .policyReloaded)
        XCTAssertTrue(kinds.count <= 5 && kinds.dropFirst(3).dropLast().allSatisfy { $0 == .reloadFailed }, "\(kinds)")
        XCTAssertTrue(watch.policy.anchorsOnly)
    }

    /// A deployment that writes the policy before the anchor file it names: the new policy fails
    /// (reported once, the old one stays), and is in force once the anchor file is there.
    func testAPolicyFileNamingAnAnchorWrittenAfterItIsPutInForceOnceTheAnchorIsThere() throws {
        let dir = try TestPKI.tempDir()
        let path = dir + "/policy.json"
        try Data(#"{"anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        let watch = try PolicyFileWatch(path: path)
        let events = LockedBox<[LifecycleEvent]>([])
        watch.events.setHandler { e in events.mutate { $0.append(e) } }
        try Data(#"{"anchors": ["customer.pem"], "anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: path + ".new"), options: .atomic)
        XCTAssertEqual(rename(path + ".new", path), 0)
        settle()
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed], "tried at each look, reported once: \(events.value.map(\.message))")
        XCTAssertTrue(watch.policy.anchors.isEmpty)
        _ = try TestPKI.sh("cp \(pki)/int-a.pem \(dir)/customer.tmp && mv \(dir)/customer.tmp \(dir)/customer.pem")
        settle()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed, .policyReloaded])
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("int-a").sha256Hex])
        // An explicit reload of a file that fails reports it, whatever was reported before.
        try Data("{ broken".utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        settle()
        watch.reload()
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed, .policyReloaded, .reloadFailed, .reloadFailed])
    }

    /// An editor that truncates the file and writes it in two steps: the half-written file is a
    /// failed reload (the policy in force stays), the whole one is put in force.
    func testAPolicyFileWrittenInPlaceInTwoStepsIsPutInForceWhenWhole() throws {
        let path = try TestPKI.tempDir() + "/policy.json"
        try Data(#"{"anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        let watch = try PolicyFileWatch(path: path)
        let events = LockedBox<[LifecycleEvent]>([])
        watch.events.setHandler { e in events.mutate { $0.append(e) } }
        let whole = Array(#"{"anchors": ["\#(pki)/int-a.pem"], "anchors_only": false}"#.utf8)
        let fd = open(path, O_WRONLY | O_TRUNC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(whole[..<20].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, 20)
        settle()
        // (The empty file between the truncation and the first write may be seen too: one more failure.)
        let failed = events.value.map(\.kind)
        XCTAssertTrue(!failed.isEmpty && failed.allSatisfy { $0 == .reloadFailed }, "\(events.value.map(\.message))")
        XCTAssertTrue(watch.policy.anchorsOnly && watch.policy.anchors.isEmpty, "the policy in force stays")
        XCTAssertEqual(whole[20...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, whole.count - 20)
        close(fd)
        settle()
        XCTAssertEqual(events.value.map(\.kind), failed + [.policyReloaded])
        XCTAssertFalse(watch.policy.anchorsOnly)
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("int-a").sha256Hex])
    }

    /// A FIFO put where a followed policy file was: refused as not a regular file, and the
    /// watcher thread, which every followed label and file shares, goes on (it waited for a
    /// writer for ever, and nothing else in the process was followed any more).
    func testAFIFOInPlaceOfAPolicyFileHoldsUpNothing() throws {
        let dir = try TestPKI.tempDir()
        let path = dir + "/policy.json", other = dir + "/other.json"
        try Data(#"{"anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        try Data(#"{"anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: other), options: .atomic)
        let watch = try PolicyFileWatch(path: path), bystander = try PolicyFileWatch(path: other)
        let events = LockedBox<[LifecycleEvent]>([])
        watch.events.setHandler { e in events.mutate { $0.append(e) } }
        // Renamed over the file in one step: the watcher sees the FIFO, never a missing file.
        XCTAssertEqual(mkfifo(dir + "/fifo", 0o600), 0)
        XCTAssertEqual(rename(dir + "/fifo", path), 0)
        defer {
            // Whatever happened, let a reader stuck on the FIFO go (open fails with ENXIO when none waits).
            let w = open(path, O_WRONLY | O_NONBLOCK)
            if w >= 0 { close(w) }
        }
        settle()
        try Data(#"{"anchors_only": false}"#.utf8).write(to: URL(fileURLWithPath: other + ".new"), options: .atomic)
        XCTAssertEqual(rename(other + ".new", other), 0)
        settle()
        XCTAssertFalse(bystander.policy.anchorsOnly, "the watcher went on to the other file")
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed], "\(events.value.map(\.message))")
        XCTAssertTrue(events.value.first?.message.contains("not a regular file") ?? false)
        XCTAssertTrue(watch.policy.anchorsOnly, "the policy in force stays")
    }

    /// A client resuming a ticket after the listener's followed policy file changed is judged by
    /// the new file: refused when it no longer trusts the client, never resumed.
    func testAResumedClientObeysTheReloadedPolicyFile() throws {
        let dir = try TestPKI.tempDir()
        let path = dir + "/clients.json"
        try Data(#"{"anchors": ["\#(pki)/int-a.pem"], "anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        let watch = try PolicyFileWatch(path: path)
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientAuthentication = .require
        so.clientPolicy = watch.policy
        so.handshakeSeconds = 10
        let l = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { l.close() }
        var o = TLSClientOptions()
        o.identity = .identity(try identity("client-a"))
        o.policy = TrustPolicy(anchors: [try cert("root")], anchorsOnly: true)
        o.validationName = "server.test"
        o.handshakeSeconds = 10
        o.ioSeconds = 10
        o.minVersion = .tls13
        let options = o

        /// One client; what the listener made of it (its resumption, or the error it refused it with).
        func round() -> Result<Bool, Error> {
            let finished = DispatchSemaphore(value: 0)
            let client = Thread {
                if let c = try? TLSConnection.connect(host: "127.0.0.1", port: l.port, options: options) {
                    _ = try? c.write(Array("ping".utf8))
                    _ = try? c.read() // after the TLS 1.3 ticket: the session is kept for the next round
                    c.close()
                }
                finished.signal()
            }
            client.start()
            let r = Result {
                let c = try l.accept(timeout: 10)
                defer { c.close() }
                try c.write(try c.read())
                return c.isResumed
            }
            finished.wait()
            return r
        }
        XCTAssertEqual(try round().get(), false)
        XCTAssertEqual(try round().get(), true, "the same policy resumes")
        try Data(#"{"anchors": ["\#(pki)/int-b.pem"], "anchors_only": true}"#.utf8).write(to: URL(fileURLWithPath: path + ".new"), options: .atomic)
        XCTAssertEqual(rename(path + ".new", path), 0)
        settle()
        XCTAssertThrowsError(try round().get()) { e in XCTAssertEqual((e as? MTLSError)?.code, .untrusted, "\(e)") }
        XCTAssertEqual(l.counters.resumed, 1)
    }
}

/// Expiry as data on the awkward rows: a token identity whose token is absent (its certificates
/// are in the row), a chain that repeats a certificate, an intermediate that ends before its leaf.
final class StoreExpiryAuditTests: XCTestCase {
    var pki: String { TLSConnectionTests.pkiDir }
    func cert(_ name: String) throws -> Certificate { try Certificate.load(path: pki + "/" + name + ".pem")[0] }

    func testATokenIdentityWithoutItsTokenAndARepeatedChainCertificateAreEachListedOnce() throws {
        let store = try CredentialStore(path: try TestPKI.tempDir() + "/s.db", secret: CredentialStoreTests.secret,
                                        options: CredentialStoreTests.options())
        try store.putTokenIdentity(uri: "pkcs11:token=no-such-token;id=%01", certificate: try cert("server"),
                                   chain: [try cert("int-a"), try cert("int-a"), try cert("root")], label: "tok")
        let items = try store.expiry()
        XCTAssertEqual(Set(items.map(\.sha256)), Set(try ["server", "int-a", "root"].map { try cert($0).sha256Hex }))
        XCTAssertEqual(items.count, 3, "one entry per certificate of the item: \(items.map(\.position))")
        XCTAssertTrue(items.allSatisfy { $0.label == "tok" && $0.itemClass == .tokenIdentity })
        // Prometheus refuses a whole scrape with one series twice.
        let series = try store.prometheusMetrics().split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.split(separator: "}")[0] }
        XCTAssertEqual(Set(series).count, series.count, "\(series)")
        // Earliest first, whatever the position: what ends first is what needs doing first.
        XCTAssertEqual(items.map(\.notAfter), items.map(\.notAfter).sorted())
        XCTAssertEqual(try store.expiring(withinDays: 36500).count, 3)
    }
}
