import COpenSSL
import Foundation
import XCTest
@testable import MTLS

/// Identities that change under a running listener or client (issue 26), against libmtls's own
/// listener on 127.0.0.1.
final class RotationTests: XCTestCase {
    var pki: String { TLSConnectionTests.pkiDir }
    func cert(_ name: String) throws -> Certificate { try Certificate.load(path: pki + "/" + name + ".pem")[0] }
    func identity(_ name: String, chain: [String] = ["int-a"]) throws -> Identity {
        let key = try PrivateKey(pem: FileIO.read(pki + "/" + name + ".key"), password: nil)
        return try Identity(privateKey: key, leaf: cert(name), certificates: chain.map { try cert($0) })
    }
    func policy(_ anchors: [String]) throws -> TrustPolicy { TrustPolicy(anchors: try anchors.map { try cert($0) }, anchorsOnly: true) }

    func listener(_ so: TLSServerOptions? = nil) throws -> TLSListener {
        var so = try so ?? TLSServerOptions(identity: identity("server"))
        so.clientAuthentication = .require
        so.clientPolicy = try policy(["int-a"])
        so.handshakeSeconds = 10
        return try TLSListener(address: "127.0.0.1", port: 0, options: so)
    }

    func clientOptions() throws -> TLSClientOptions {
        var o = TLSClientOptions()
        o.identity = .identity(try identity("client-a"))
        o.policy = try policy(["root"])
        o.validationName = "server.test"
        o.handshakeSeconds = 10
        o.ioSeconds = 10
        o.sessionResumption = false
        return o
    }

    /// One round: the server's leaf the client saw, the client's leaf the listener saw, and
    /// whether each side resumed.
    func round(_ l: TLSListener, _ o: TLSClientOptions) throws -> (server: String, client: String?, resumed: Bool, serverResumed: Bool) {
        let box = LockedBox<Result<(String?, Bool), Error>>(.failure(MTLSError(.timeout, "not run")))
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let r = Result { () throws -> (String?, Bool) in
                let c = try l.accept(timeout: 10)
                defer { c.close() }
                try c.write(try c.read())
                return (c.peerCertificate?.sha256Hex, c.isResumed)
            }
            box.mutate { $0 = r }
            done.signal()
        }
        let c = try TLSConnection.connect(host: "127.0.0.1", port: l.port, options: o)
        try c.write(Array("ping".utf8))
        _ = try c.read() // after a TLS 1.3 ticket
        let server = c.peerCertificate?.sha256Hex ?? ""
        let resumed = c.isResumed
        c.close()
        done.wait()
        let (client, serverResumed) = try box.value.get()
        return (server, client, resumed, serverResumed)
    }

    func testListenerSetIdentityPresentsTheNewIdentityFromTheNextHandshake() throws {
        let l = try listener()
        defer { l.close() }
        let events = LockedBox<[LifecycleEventKind]>([])
        l.events.setHandler { e in events.mutate { $0.append(e.kind) } }
        XCTAssertEqual(try round(l, clientOptions()).server, try cert("server").sha256Hex)
        try l.setIdentity(try identity("server-rsa"))
        XCTAssertEqual(try round(l, clientOptions()).server, try cert("server-rsa").sha256Hex)
        XCTAssertEqual(events.value, [.identityRotated])
        XCTAssertEqual(l.counters.accepted, 2)
        XCTAssertEqual(l.counters.refused.values.reduce(0, +), 0)
    }

    /// A listener's handshakes start from an `SSL_CTX` that already holds the identity in force
    /// (one per identity, made at the first handshake after a rotation): nothing is installed per
    /// handshake, before or after rotations, and no ticket of the previous identity resumes.
    func testAListenerKeepsOneContextPerIdentityAndResumesNothingAcrossARotation() throws {
        let a = try identity("server"), b = try identity("server-rsa")
        var so = TLSServerOptions(identity: a)
        so.clientAuthentication = .require
        so.clientPolicy = try policy(["int-a"])
        let source = IdentitySource(a)
        let first = try TLSContext.server(so, identitySource: source)
        let contexts = ListenerContexts(first, source: source, options: so)
        XCTAssertTrue(contexts.current() === first)
        try source.replace(with: b)
        let second = contexts.current()
        XCTAssertFalse(second === first)
        XCTAssertTrue(second.config.installedIdentity === b)
        XCTAssertTrue(contexts.current() === second, "made once per identity, not per handshake")
        try source.replace(with: a)
        XCTAssertTrue(contexts.current().config.installedIdentity === a)

        let l = try listener()
        defer { l.close() }
        var o = try clientOptions()
        o.sessionResumption = true
        XCTAssertEqual(try round(l, o).server, try cert("server").sha256Hex)
        let again = try round(l, o)
        XCTAssertTrue(again.resumed && again.serverResumed, "the same identity resumes")
        try l.setIdentity(b)
        let rotated = try round(l, o)
        XCTAssertEqual(rotated.server, try cert("server-rsa").sha256Hex)
        XCTAssertFalse(rotated.resumed || rotated.serverResumed, "a session of the previous identity is not resumed")
        try l.setIdentity(a)
        XCTAssertEqual(try round(l, o).server, try cert("server").sha256Hex)
    }

    func testListenerFollowsAStoreLabelReplacedElsewhereAndKeepsTheLastGoodOnABrokenRow() throws {
        let dir = try TestPKI.tempDir()
        let ours = try CredentialStore(path: dir + "/s.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        let other = try CredentialStore(path: dir + "/s.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        try other.putIdentity(try identity("server"), label: "srv")
        let source = try IdentitySource(store: ours, label: "srv")
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        var so = TLSServerOptions(identity: try identity("server"))
        so.identitySource = source
        let l = try listener(so)
        defer { l.close() }
        XCTAssertEqual(try round(l, clientOptions()).server, try cert("server").sha256Hex)

        // Another connection (as another process would) replaces the row: seen within a second.
        try other.putIdentity(try identity("server-rsa"), label: "srv", replace: true)
        waitUntil { !events.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(try round(l, clientOptions()).server, try cert("server-rsa").sha256Hex)
        XCTAssertEqual(events.value.map(\.kind), [.identityRotated])

        // A row that fails authentication: the last good identity keeps serving, and it is reported.
        try other._testExecute("UPDATE items SET leaf_sha256 = '\(try cert("server").sha256Hex)', generation = generation + 1 WHERE label = 'srv'")
        waitUntil { events.value.count >= 2 }
        waitForWatcherLooks()
        XCTAssertEqual(try round(l, clientOptions()).server, try cert("server-rsa").sha256Hex)
        let failed = events.value.filter { $0.kind == .reloadFailed }
        XCTAssertEqual(failed.count, 1, "\(events.value.map(\.message))")
        XCTAssertNotNil(failed.first?.error)
        XCTAssertEqual(l.counters.refused.values.reduce(0, +), 0)
    }

    /// A replacement that keeps the leaf and changes only the chain above it (an intermediate
    /// re-issued, or a cross-signed one added) is a replacement: the source was comparing leaves
    /// only, and kept presenting the old chain.
    func testAReplacementThatChangesOnlyTheChainIsFollowed() throws {
        let dir = try TestPKI.tempDir()
        let ours = try CredentialStore(path: dir + "/s.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        let other = try CredentialStore(path: dir + "/s.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        try other.putIdentity(try identity("server", chain: []), label: "srv")
        let source = try IdentitySource(store: ours, label: "srv")
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        XCTAssertEqual(source.current.chain.count, 0)

        try other.putIdentity(try identity("server", chain: ["int-a"]), label: "srv", replace: true)
        waitUntil { !source.current.chain.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(source.current.chain.map(\.sha256Hex), [try cert("int-a").sha256Hex])
        XCTAssertEqual(events.value.map(\.kind), [.identityRotated])

        // The same row put again (same leaf, same chain) is no replacement.
        try other.putIdentity(try identity("server", chain: ["int-a"]), label: "srv", replace: true)
        waitForWatcherLooks()
        XCTAssertEqual(events.value.map(\.kind), [.identityRotated])
    }

    func testClientSessionIsNotResumedAfterTheClientIdentityChanges() throws {
        let l = try listener()
        defer { l.close() }
        let source = IdentitySource(try identity("client-a"))
        var o = try clientOptions()
        o.identity = .none
        o.identitySource = source
        o.sessionResumption = true
        o.minVersion = .tls13
        let first = try round(l, o)
        XCTAssertEqual(first.client, try cert("client-a").sha256Hex)
        let second = try round(l, o)
        XCTAssertTrue(second.resumed && second.serverResumed, "the same identity resumes")
        try source.replace(with: try identity("client-a-rsa"))
        let third = try round(l, o)
        XCTAssertFalse(third.resumed, "a session made with the old identity must not be resumed")
        XCTAssertEqual(third.client, try cert("client-a-rsa").sha256Hex, "the server sees the new client certificate")
        XCTAssertEqual(l.counters.resumed, 1)
    }

    func testPolicyFileFollowedReloadsAndKeepsTheOldOnABrokenFile() throws {
        let dir = try TestPKI.tempDir()
        let path = dir + "/p.json"
        try Array(#"{"anchors_only": true}"#.utf8).withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: path)) }
        let watch = try PolicyFileWatch(path: path)
        let events = LockedBox<[LifecycleEventKind]>([])
        watch.events.setHandler { e in events.mutate { $0.append(e.kind) } }
        let v0 = watch.policy.version
        try Data(#"{"anchors_only": false}"#.utf8).write(to: URL(fileURLWithPath: path + ".new"))
        rename(path + ".new", path)
        waitUntil { !events.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.policyReloaded])
        XCTAssertGreaterThan(watch.policy.version, v0)
        let v1 = watch.policy.version
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: path + ".new"))
        rename(path + ".new", path)
        waitUntil { events.value.count >= 2 }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.policyReloaded, .reloadFailed])
        XCTAssertEqual(watch.policy.version, v1, "a broken file leaves the policy in force")
    }

    /// A followed policy file is read again when an anchor file it names changes (a CA bundle
    /// updated in place or replaced), not only when the policy file itself does; a broken anchor
    /// file keeps the policy in force and is reported.
    func testAFollowedPolicyIsReadAgainWhenAnAnchorFileItNamesChanges() throws {
        let dir = try TestPKI.tempDir()
        let path = dir + "/p.json"
        func put(_ bytes: [UInt8], _ to: String) throws {
            try Data(bytes).write(to: URL(fileURLWithPath: to + ".new"))
            XCTAssertEqual(rename(to + ".new", to), 0)
        }
        try put(FileIO.read(pki + "/int-a.pem"), dir + "/ca.pem")
        try put(Array(#"{"anchors": ["ca.pem"], "anchors_only": true}"#.utf8), path)
        let watch = try PolicyFileWatch(path: path)
        let events = LockedBox<[LifecycleEventKind]>([])
        watch.events.setHandler { e in if e.kind != .expiryWarning { events.mutate { $0.append(e.kind) } } }
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("int-a").sha256Hex])

        // The bundle replaced: the policy file is untouched, the anchors in force change.
        try put(FileIO.read(pki + "/root.pem"), dir + "/ca.pem")
        waitUntil { !events.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.policyReloaded])
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("root").sha256Hex])

        // A broken bundle: the anchors in force stay, and it is reported once.
        try put(Array("not a certificate".utf8), dir + "/ca.pem")
        waitUntil { events.value.count >= 2 }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.policyReloaded, .reloadFailed])
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("root").sha256Hex])

        // Nothing changed: no reload (a look only stats the files).
        try put(FileIO.read(pki + "/int-a.pem"), dir + "/ca.pem")
        waitUntil { events.value.count >= 3 }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.policyReloaded, .reloadFailed, .policyReloaded])
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.policyReloaded, .reloadFailed, .policyReloaded])
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("int-a").sha256Hex])

        // A FIFO put in the bundle's place is a failed reload at once, not a watcher thread
        // waiting for a writer: the bundle put back is seen at the next looks.
        XCTAssertEqual(unlink(dir + "/ca.pem"), 0)
        XCTAssertEqual(mkfifo(dir + "/ca.pem", 0o600), 0)
        waitUntil { events.value.last == .reloadFailed }
        XCTAssertEqual(events.value.last, .reloadFailed)
        XCTAssertEqual(unlink(dir + "/ca.pem"), 0)
        try put(FileIO.read(pki + "/root.pem"), dir + "/ca.pem")
        waitUntil { events.value.last == .policyReloaded }
        XCTAssertEqual(events.value.last, .policyReloaded)
        XCTAssertEqual(watch.policy.anchors.map(\.sha256Hex), [try cert("root").sha256Hex])
    }

    func testIdentityAndAnchorsWithinTheWarningWindowAreReported() throws {
        // A window of 100 years: the test certificates (30 days) are inside it; 0 days: outside.
        let source = IdentitySource(try identity("server"), warningDays: 36500)
        let events = LockedBox<[LifecycleEventKind]>([])
        source.events.setHandler { e in events.mutate { $0.append(e.kind) } }
        // With a handler set, the watcher looks at the fixed identity's expiry too (once).
        waitUntil { !events.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.expiryWarning])
        try source.replace(with: try identity("server-rsa"))
        waitUntil { events.value.count >= 3 }
        waitForWatcherLooks()
        XCTAssertEqual(events.value, [.expiryWarning, .identityRotated, .expiryWarning], "once per identity")
        let quiet = IdentitySource(try identity("server"), warningDays: 0)
        let none = LockedBox<[LifecycleEventKind]>([])
        quiet.events.setHandler { e in none.mutate { $0.append(e.kind) } }
        try quiet.replace(with: try identity("server-rsa"))
        XCTAssertEqual(none.value, [.identityRotated])

        let dir = try TestPKI.tempDir()
        try Data(#"{"anchors": ["\#(pki)/root.pem"]}"#.utf8).write(to: URL(fileURLWithPath: dir + "/p.json"))
        let watch = try PolicyFileWatch(path: dir + "/p.json", warningDays: 36500)
        let warned = LockedBox<[String]>([])
        watch.events.setHandler { e in if e.kind == .expiryWarning { warned.mutate { $0.append(e.sha256 ?? "") } } }
        waitUntil { !warned.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(warned.value, [try cert("root").sha256Hex], "once per anchor")
    }

    func testApplicationServerContextPresentsTheSourcesIdentityPerHandshake() throws {
        let (listenFD, port) = try Socket.listen(address: "127.0.0.1", port: 0)
        defer { close(listenFD) }
        let ctx = try XCTUnwrap(SSL_CTX_new(TLS_server_method()))
        defer { SSL_CTX_free(ctx) }
        let source = IdentitySource(try identity("server"))
        try SSLContextConfiguration.configure(sslContext: UnsafeMutableRawPointer(ctx), identitySource: source,
                                              policy: try policy(["int-a"]), purpose: .clientAuth)
        for (swapTo, expected) in [(nil as String?, "server"), ("server-rsa", "server-rsa")] {
            if let swapTo { try source.replace(with: try identity(swapTo)) }
            let seen = LockedBox<String?>(nil)
            var o = try clientOptions()
            o.maxVersion = .tls12
            let options = o
            let client = Thread {
                let c = try? TLSConnection.connect(host: "127.0.0.1", port: port, options: options)
                seen.mutate { $0 = c?.peerCertificate?.sha256Hex }
                c?.close()
            }
            client.start()
            let fd = accept(listenFD, nil, nil)
            XCTAssertGreaterThanOrEqual(fd, 0)
            let ssl = try XCTUnwrap(SSL_new(ctx))
            XCTAssertEqual(SSL_set_fd(ssl, fd), 1)
            XCTAssertEqual(SSL_accept(ssl), 1)
            _ = SSL_shutdown(ssl)
            SSL_free(ssl)
            close(fd)
            waitUntil { seen.value != nil }
            XCTAssertEqual(seen.value, try cert(expected).sha256Hex)
        }
    }

    func testAFollowedTokenIdentityWhoseTokenIsGoneKeepsTheLastGoodAndReports() throws {
        setenv("SOFTHSM2_CONF", SoftHSMFixture.dir + "/softhsm2.conf", 1)
        let good = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: SoftHSMFixture.module, pin: SoftHSMFixture.pin)
        let dir = try TestPKI.tempDir()
        let ours = try CredentialStore(path: dir + "/t.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        let other = try CredentialStore(path: dir + "/t.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        try other.putTokenIdentity(uri: "pkcs11:token=mtls-test;id=%02", certificate: good.leaf, chain: good.chain, label: "tok")
        let source = try IdentitySource(store: ours, label: "tok", tokenPIN: SoftHSMFixture.pin)
        XCTAssertEqual(source.current.leaf, good.leaf)
        XCTAssertNotNil(source.current.privateKey.tokenURI, "the key stays on the token")
        let events = LockedBox<[LifecycleEvent]>([])
        source.events.setHandler { e in events.mutate { $0.append(e) } }
        // Another process points the label at a token that is not there.
        try other.putTokenIdentity(uri: "pkcs11:token=no-such-token;id=%02", certificate: try cert("server"), label: "tok", replace: true)
        waitUntil { !events.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(source.current.leaf, good.leaf, "the last good identity stays in use")
        XCTAssertEqual(events.value.map(\.kind), [.reloadFailed], "\(events.value.map(\.message))")
        XCTAssertEqual(events.value.first?.error?.code, .tokenNotPresent)
    }

    func testAClientSourceSwapsBetweenATokenKeyAndASoftwareKey() throws {
        setenv("SOFTHSM2_CONF", SoftHSMFixture.dir + "/softhsm2.conf", 1)
        let token = try Token.identity(uri: "pkcs11:token=mtls-test;id=%01", modulePath: SoftHSMFixture.module, pin: SoftHSMFixture.pin)
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientAuthentication = .require
        so.clientPolicy = TrustPolicy(anchors: [try cert("int-a"), try Certificate.load(path: SoftHSMFixture.dir + "/ca.pem")[0]],
                                      anchorsOnly: true)
        so.handshakeSeconds = 10
        let l = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { l.close() }
        let source = IdentitySource(token)
        var o = try clientOptions()
        o.identity = .none
        o.identitySource = source
        XCTAssertEqual(try round(l, o).client, token.leaf.sha256Hex, "signed on the token")
        try source.replace(with: try identity("client-a"))
        XCTAssertEqual(try round(l, o).client, try cert("client-a").sha256Hex)
        try source.replace(with: token)
        XCTAssertEqual(try round(l, o).client, token.leaf.sha256Hex)
    }

    func testAnchorsTakenFromStoreLabelsFollowTheStore() throws {
        let dir = try TestPKI.tempDir()
        let ours = try CredentialStore(path: dir + "/a.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        let other = try CredentialStore(path: dir + "/a.db", secret: CredentialStoreTests.secret, options: CredentialStoreTests.options())
        try other.putCertificate(try cert("int-a"), label: "customer")
        let clients = TrustPolicy(anchors: [], anchorsOnly: true)
        let watch = try StoreAnchorWatch(policy: clients, store: ours, labels: ["customer"])
        let events = LockedBox<[LifecycleEventKind]>([])
        watch.events.setHandler { e in events.mutate { $0.append(e.kind) } }
        XCTAssertEqual(clients.anchors.map(\.sha256Hex), [try cert("int-a").sha256Hex])
        let version = clients.version
        // Another process pins another customer's intermediate under the label.
        try other.putCertificate(try cert("int-b"), label: "customer", replace: true)
        waitUntil { !events.value.isEmpty }
        waitForWatcherLooks()
        XCTAssertEqual(clients.anchors.map(\.sha256Hex), [try cert("int-b").sha256Hex])
        XCTAssertGreaterThan(clients.version, version, "sessions of the old anchors are not resumed")
        XCTAssertEqual(events.value, [.policyReloaded])
        _ = try other.delete(label: "customer")
        waitUntil { events.value.count >= 2 }
        waitForWatcherLooks()
        XCTAssertEqual(clients.anchors.map(\.sha256Hex), [try cert("int-b").sha256Hex], "the anchors in force stay")
        XCTAssertEqual(events.value, [.policyReloaded, .reloadFailed])
    }
}
