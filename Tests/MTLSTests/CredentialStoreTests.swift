import Foundation
import XCTest
@testable import MTLS

/// A root → intermediate PKI with EC P-256 keys (`scripts/test-pki.sh --chain`) and client
/// identities issued under it on demand (`--leaf`).
struct StorePKI {
    let dir: String
    let root: Certificate
    let intermediate: Certificate

    init() throws {
        dir = try TestPKI.tempDir()
        try TestPKI.make("--chain", dir)
        root = try Certificate.load(path: "\(dir)/root.pem")[0]
        intermediate = try Certificate.load(path: "\(dir)/int.pem")[0]
    }

    /// A new client identity named `cn`, issued by the intermediate; also writes `<cn>.key`
    /// (PEM), `<cn>.p8` (PKCS#8 DER) and `<cn>.pem` in the directory.
    func identity(_ cn: String) throws -> Identity {
        try TestPKI.make("--leaf", dir, cn)
        let p8 = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "\(dir)/\(cn).p8")))
        let key = try PrivateKey(pkcs8DER: p8)
        let leaf = try Certificate.load(path: "\(dir)/\(cn).pem")[0]
        // Unordered on purpose: the identity orders its chain.
        return try Identity(privateKey: key, leaf: leaf, certificates: [root, intermediate])
    }
}

final class CredentialStoreTests: XCTestCase {
    static let secret = StoreSecret.passphrase(SecretBytes("correct horse battery staple"))

    static func options(busyTimeout: Int32 = 10_000) -> CredentialStore.Options {
        var o = CredentialStore.Options()
        o.kdf = .testing
        o.busyTimeoutMilliseconds = busyTimeout
        return o
    }

    func open(_ path: String, _ secret: StoreSecret = secret, busyTimeout: Int32 = 10_000) throws -> CredentialStore {
        try CredentialStore(path: path, secret: secret, options: Self.options(busyTimeout: busyTimeout))
    }

    func assertCode(_ code: MTLSError.Code, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
        XCTAssertThrowsError(try body(), file: file, line: line) { e in
            XCTAssertEqual((e as? MTLSError)?.code, code, "\(e)", file: file, line: line)
        }
    }

    func testPutIdentityThenGetReturnsKeyLeafAndOrderedChain() throws {
        let pki = try StorePKI()
        let alice = try pki.identity("alice")
        let store = try open("\(pki.dir)/s/store.db")
        try store.putIdentity(alice, label: "alice")
        let back = try open("\(pki.dir)/s/store.db").identity(label: "alice")
        XCTAssertEqual(back.leaf, alice.leaf)
        XCTAssertEqual(back.chain, [pki.intermediate, pki.root])
        XCTAssertTrue(back.privateKey.matches(alice.leaf))
        XCTAssertEqual(back.friendlyName, "alice")
    }

    func testNewStoreFileAndDirectoryAreOwnerOnlyAndInWALMode() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/new/dir/store.db"
        let store = try open(path)
        try store.putIdentity(try pki.identity("a"), label: "a")
        for p in [path, path + "-wal", path + "-shm"] {
            let mode = try FileManager.default.attributesOfItem(atPath: p)[.posixPermissions] as! Int
            XCTAssertEqual(mode & 0o077, 0, "\(p) has mode \(String(mode, radix: 8))")
        }
        let dirMode = try FileManager.default.attributesOfItem(atPath: "\(pki.dir)/new/dir")[.posixPermissions] as! Int
        XCTAssertEqual(dirMode, 0o700)
        XCTAssertEqual(try store._testInteger("SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1)
        XCTAssertEqual(try store._testInteger("PRAGMA user_version"), Int64(CredentialStore.schemaVersion))
    }

    func testPuttingAnExistingLabelIsDuplicateUnlessReplacing() throws {
        let pki = try StorePKI()
        let (a, b) = (try pki.identity("a"), try pki.identity("b"))
        let store = try open("\(pki.dir)/store.db")
        try store.putIdentity(a, label: "client")
        let before = try store.info(label: "client")
        assertCode(.duplicate) { try store.putIdentity(b, label: "client") }
        XCTAssertEqual(try store.identity(label: "client").leaf, a.leaf)
        // Time passing is what is tested: the replacement's modified time is later than the
        // creation time, which the replacement keeps.
        Thread.sleep(forTimeInterval: 0.01)
        try store.putIdentity(b, label: "client", replace: true)
        XCTAssertEqual(try store.identity(label: "client").leaf, b.leaf)
        let after = try store.info(label: "client")
        XCTAssertEqual(after.created, before.created)
        XCTAssertGreaterThan(after.modified, before.modified)
        XCTAssertEqual(try store.list().count, 1)
    }

    func testPutIdentitiesWritesAllOrNothing() throws {
        let pki = try StorePKI()
        let store = try open("\(pki.dir)/store.db")
        let a = try pki.identity("a"), b = try pki.identity("b")
        try store.putIdentities([("one", a), ("two", b)])
        assertCode(.duplicate) { try store.putIdentities([("three", a), ("two", a)]) }
        XCTAssertEqual(try store.list().map(\.label), ["one", "two"])
        try store.putIdentities([("three", a), ("two", a)], replace: true)
        XCTAssertEqual(try store.identity(label: "two").leaf, a.leaf)
        XCTAssertEqual(try store.list().count, 3)
    }

    func testLabelsAreUniquePerClass() throws {
        let pki = try StorePKI()
        let store = try open("\(pki.dir)/store.db")
        let a = try pki.identity("a")
        try store.putIdentity(a, label: "server")
        try store.putCertificate(pki.root, label: "server")
        try store.putTokenIdentity(uri: "pkcs11:token=t;object=k", certificate: a.leaf, chain: [pki.root, pki.intermediate], label: "server")
        assertCode(.duplicate) { try store.putCertificate(pki.intermediate, label: "server") }
        XCTAssertEqual(try store.list().map(\.itemClass), [.identity, .certificate, .tokenIdentity])
        XCTAssertEqual(try store.certificate(label: "server"), pki.root)
        let ref = try store.tokenIdentity(label: "server")
        XCTAssertEqual(ref.uri, "pkcs11:token=t;object=k")
        XCTAssertEqual(ref.chain, [pki.intermediate, pki.root])
        XCTAssertEqual(try store.info(label: "server", itemClass: .tokenIdentity).tokenURI, "pkcs11:token=t;object=k")
        assertCode(.badURI) { try store.putTokenIdentity(uri: "file:///x", certificate: a.leaf, label: "x") }
        assertCode(.invalidArgument) { try store.putCertificate(pki.root, label: "") }
    }

    func testListFindAndDeleteUseMetadataOnly() throws {
        let pki = try StorePKI()
        let store = try open("\(pki.dir)/store.db")
        let a = try pki.identity("alice"), b = try pki.identity("bob")
        try store.putIdentity(a, label: "alice")
        try store.putIdentity(b, label: "bob")
        try store.putCertificate(pki.root, label: "root")
        let list = try store.list()
        XCTAssertEqual(list.map(\.label), ["alice", "bob", "root"])
        let alice = list[0]
        XCTAssertEqual(alice.subject, a.leaf.subject)
        XCTAssertEqual(alice.issuer, pki.intermediate.subject)
        XCTAssertEqual(alice.leafSHA256, a.leaf.sha256Hex)
        XCTAssertEqual(alice.chainSHA256, [pki.intermediate.sha256Hex, pki.root.sha256Hex])
        XCTAssertEqual(alice.notAfter, a.leaf.notAfter)
        XCTAssertEqual(try store.list(itemClass: .certificate).map(\.label), ["root"])
        XCTAssertEqual(try store.find(sha256: b.leaf.sha256Hex.uppercased()).map(\.label), ["bob"])
        XCTAssertEqual(try store.find(sha256: String(repeating: "0", count: 64)), [])
        assertCode(.invalidArgument) { _ = try store.find(sha256: "abc") }
        XCTAssertEqual(try store.find(subject: "bob").map(\.label), ["bob"])
        XCTAssertEqual(try store.find(subject: pki.root.subject).map(\.label), ["root"])
        XCTAssertEqual(try store.delete(label: "bob"), 1)
        assertCode(.notFound) { try store.delete(label: "bob") }
        assertCode(.notFound) { _ = try store.identity(label: "bob") }
        assertCode(.notFound) { _ = try store.certificate(label: "alice") }
        assertCode(.notFound) { _ = try store.info(label: "nobody") }
        XCTAssertEqual(try store.deleteAll(itemClass: .identity), 1)
        XCTAssertEqual(try store.list().map(\.label), ["root"])
    }

    func testWrongSecretIsBadSecretAndLeavesTheFileUntouched() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        try open(path).putIdentity(try pki.identity("a"), label: "a")
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        assertCode(.badSecret) { _ = try self.open(path, .passphrase(SecretBytes("wrong"))) }
        assertCode(.badSecret) { _ = try self.open(path, .key(SecretBytes([UInt8](repeating: 7, count: 32)))) }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), before)
        XCTAssertEqual(try open(path).list().count, 1)
    }

    func testKeyFileSecretAndChangingTheSecret() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let keyFile = "\(pki.dir)/store.key"
        // Random, but not starting with a line ending (read as a passphrase below, that would be
        // an empty first line: a 1-in-256 failure).
        try TestPKI.sh("(printf k; head -c 31 /dev/urandom) > \(keyFile) && chmod 600 \(keyFile)")
        let key = try StoreSecret.loadKey(path: keyFile)
        guard case .key = key else { return XCTFail("a key file is a raw key") }
        // The same file read as a passphrase file is a passphrase: chosen explicitly, never by length.
        guard case .passphrase = try StoreSecret.load(path: keyFile) else { return XCTFail("a secret file is always a passphrase") }
        try TestPKI.sh("chmod 600 \(pki.dir)/root.pem")  // a key file's mode is checked before its length
        assertCode(.invalidArgument) { _ = try StoreSecret.loadKey(path: "\(pki.dir)/root.pem") }
        let store = try open(path, key)
        XCTAssertNil(try store.kdfParameters())
        try store.putIdentity(try pki.identity("a"), label: "a")
        try store.changeSecret(to: .passphrase(SecretBytes("new passphrase")), kdf: .testing)
        XCTAssertEqual(try store.kdfParameters(), .testing)
        assertCode(.badSecret) { _ = try self.open(path, key) }
        let reopened = try open(path, .passphrase(SecretBytes("new passphrase")))
        XCTAssertTrue(try reopened.identity(label: "a").privateKey.matches(try store.identity(label: "a").leaf))
        try TestPKI.writeSecret("line one\nline two\n", to: "\(pki.dir)/pass.txt")
        guard case .passphrase(let p) = try StoreSecret.load(path: "\(pki.dir)/pass.txt") else { return XCTFail() }
        XCTAssertEqual(p.count, "line one".utf8.count)
    }

    func testDefaultKDFMeetsTheBar() {
        let d = StoreKDFParameters.default
        XCTAssertGreaterThanOrEqual(d.logN, 17)
        XCTAssertGreaterThanOrEqual(d.r, 8)
        assertCode(.limitExceeded) { try StoreKDFParameters(logN: 40, r: 8, p: 1).validate() }
    }

    func testAFileThatIsNotAStoreIsNotAStore() throws {
        let dir = try TestPKI.tempDir()
        try Data("this is not an sqlite file at all, just text that is long enough".utf8).write(to: URL(fileURLWithPath: "\(dir)/text.db"))
        assertCode(.notAStore) { _ = try self.open("\(dir)/text.db") }
        try TestPKI.sh("sqlite3 \(dir)/other.db 'CREATE TABLE t(x)'")
        assertCode(.notAStore) { _ = try self.open("\(dir)/other.db") }
        var o = Self.options()
        o.create = false
        XCTAssertThrowsError(try CredentialStore(path: "\(dir)/missing.db", secret: Self.secret, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .notFound)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/missing.db"))
    }

    func testAThirtyTwoBytePassphraseFileIsStretched() throws {
        let dir = try TestPKI.tempDir()
        // 31 characters and a newline: exactly 32 bytes, and still a passphrase.
        try TestPKI.writeSecret("0123456789012345678901234567890\n", to: "\(dir)/pass.txt")
        let secret = try StoreSecret.load(path: "\(dir)/pass.txt")
        guard case .passphrase(let p) = secret else { return XCTFail("a 32-byte passphrase file must be stretched") }
        XCTAssertEqual(p.count, 31)
        let store = try open("\(dir)/store.db", secret)
        XCTAssertEqual(try store.kdfParameters(), .testing)
        XCTAssertEqual(try store._testText("SELECT value FROM meta WHERE name = 'kdf'"), "scrypt")
        // The environment chooses the kind by variable, explicit flags over the environment.
        let env = ["MTLS_STORE_KEY_FILE": "/k", "MTLS_STORE_SECRET_FILE": "/s"]
        XCTAssertEqual(try CredentialStore.secretSource(secretFile: nil, keyFile: nil, environment: env), .keyFile("/k"))
        XCTAssertEqual(try CredentialStore.secretSource(secretFile: "/p", keyFile: nil, environment: env), .passphraseFile("/p"))
        XCTAssertEqual(try CredentialStore.secretSource(secretFile: nil, keyFile: nil, environment: ["MTLS_STORE_SECRET_FILE": "/s"]), .passphraseFile("/s"))
        assertCode(.invalidArgument) { _ = try CredentialStore.secretSource(secretFile: "/a", keyFile: "/b") }
    }

    func testNegativeOrOutOfRangeSchemaVersionIsCorruptNotATrap() throws {
        let dir = try TestPKI.tempDir()
        try open("\(dir)/store.db")._testExecute("PRAGMA user_version=-1")
        assertCode(.corrupt) { _ = try self.open("\(dir)/store.db") }
        try TestPKI.sh("sqlite3 \(dir)/store.db 'PRAGMA user_version=-2147483648'")
        assertCode(.corrupt) { _ = try self.open("\(dir)/store.db") }
    }

    func testSwappedCertificateRowIsRefused() throws {
        let pki = try StorePKI()
        let store = try open("\(pki.dir)/store.db")
        try store.putCertificate(pki.root, label: "anchor")
        try store.putIdentity(try pki.identity("a"), label: "a")
        // An attacker's root, written through sqlite3 into the anchor row (no secret needed).
        // (another test PKI's root: the same name, "Test Root", another key)
        let evilDir = try TestPKI.tempDir()
        try TestPKI.make("--chain", evilDir)
        let evil = try Certificate.load(path: "\(evilDir)/root.pem")[0]
        try Data(evil.der).write(to: URL(fileURLWithPath: "\(pki.dir)/evil.der"))
        try TestPKI.sh("sqlite3 \(pki.dir)/store.db \"UPDATE items SET leaf = readfile('\(pki.dir)/evil.der') WHERE label = 'anchor'\"")
        let fresh = try open("\(pki.dir)/store.db")
        XCTAssertThrowsError(try fresh.certificate(label: "anchor")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .corrupt)
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"anchor\" is tampered or damaged") ?? false, "\(e)")
        }
        // ... and with the metadata changed to match it.
        try TestPKI.sh("sqlite3 \(pki.dir)/store.db \"UPDATE items SET leaf_sha256 = '\(evil.sha256Hex)' WHERE label = 'anchor'\"")
        assertCode(.corrupt) { _ = try fresh.certificate(label: "anchor") }
        assertCode(.corrupt) { _ = try fresh.info(label: "anchor") }
        // A whole row copied from another store (rows authenticate under their own store's key).
        let other = try open("\(pki.dir)/other.db")
        try other.putCertificate(evil, label: "anchor")
        other.close()
        try TestPKI.sh("sqlite3 \(pki.dir)/store.db \"ATTACH '\(pki.dir)/other.db' AS o; DELETE FROM items WHERE label = 'anchor'; INSERT INTO items SELECT * FROM o.items WHERE label = 'anchor'\"")
        assertCode(.corrupt) { _ = try fresh.certificate(label: "anchor") }
        assertCode(.corrupt) { _ = try fresh.list() }
        // Other rows are unaffected, and deleting the bad row needs no read.
        XCTAssertNoThrow(try fresh.identity(label: "a"))
        XCTAssertEqual(try fresh.delete(label: "anchor"), 1)
        XCTAssertEqual(try fresh.list().map(\.label), ["a"])
    }

    func testEditedTokenRowIsRefusedAndNoPINIsStored() throws {
        let pki = try StorePKI()
        let a = try pki.identity("a")
        let store = try open("\(pki.dir)/store.db")
        let r = try store.putTokenIdentity(uri: "pkcs11:token=t;object=k?pin-source=file:/run/pin&pin-value=123456", certificate: a.leaf,
                                           chain: [pki.root, pki.intermediate], label: "tok")
        XCTAssertTrue(r.pinValueRemoved)
        // Rebuilt by p11-kit: the pin-source stays (percent-encoded as p11-kit writes it).
        XCTAssertEqual(r.storedURI, "pkcs11:token=t;object=k?pin-source=file%3A%2Frun%2Fpin")
        XCTAssertEqual(try PKCS11URI(r.storedURI).pinSource, "file:/run/pin")
        XCTAssertEqual(try store.tokenIdentity(label: "tok").uri, r.storedURI)
        XCTAssertEqual(CredentialStore.strippingPINValue("pkcs11:token=t?pin-value=1").uri, "pkcs11:token=t")
        XCTAssertFalse(CredentialStore.strippingPINValue("pkcs11:token=t;object=pin-value").stripped)
        // A pin-value among the path attributes (which p11-kit also reads) is removed too.
        let path = CredentialStore.strippingPINValue("pkcs11:token=t;object=k;pin-value=98765")
        XCTAssertTrue(path.stripped)
        XCTAssertFalse(path.uri.contains("98765"), path.uri)
        XCTAssertNil(try PKCS11URI(path.uri).pinValue)
        XCTAssertEqual(try PKCS11URI(path.uri).object, "k")
        store.close()
        // No PIN anywhere in the file (WAL checkpointed by the close).
        let file = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "\(pki.dir)/store.db")))
        let pin = Array("123456".utf8)
        XCTAssertFalse((0...(file.count - pin.count)).contains { Array(file[$0..<($0 + pin.count)]) == pin }, "the PIN is in the file")
        // module-path edited in through sqlite3: refused on read.
        try TestPKI.sh("sqlite3 \(pki.dir)/store.db \"UPDATE items SET token_uri = 'pkcs11:token=t;object=k?module-path=/tmp/evil.so' WHERE label = 'tok'\"")
        let fresh = try open("\(pki.dir)/store.db")
        XCTAssertThrowsError(try fresh.tokenIdentity(label: "tok")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .corrupt)
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"tok\"") ?? false, "\(e)")
        }
        assertCode(.corrupt) { _ = try fresh.tokenIdentities() }
    }

    func testStoredModulePathMustBeRegisteredWithP11KitOrAllowed() throws {
        let pki = try StorePKI()
        let a = try pki.identity("a")
        let store = try open("\(pki.dir)/store.db")
        try store.putTokenIdentity(uri: "pkcs11:token=t;object=k?module-path=/tmp/evil-module.so", certificate: a.leaf, label: "evil")
        XCTAssertThrowsError(try store.tokenIdentity(label: "evil")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
            XCTAssertTrue((e as? MTLSError)?.message.contains("not a PKCS#11 module registered with p11-kit") ?? false, "\(e)")
        }
        assertCode(.invalidArgument) { _ = try store.tokenIdentities() }
        store.allowUnregisteredModulePaths(true)
        XCTAssertEqual(try store.tokenIdentity(label: "evil").uri, "pkcs11:token=t;object=k?module-path=/tmp/evil-module.so")
        store.allowUnregisteredModulePaths(false)
        // SoftHSM2's module, registered with p11-kit by its Debian package, is honoured.
        let registered = PKCS11Module.registeredPaths()
        let softhsm = try XCTUnwrap(registered.first { $0.contains("softhsm") }, "\(registered)")
        // One registry: every module a listing initialises is one of the paths checked without
        // initialising. Not equal sets: p11-kit skips a registered module whose C_Initialize
        // fails (tpm2-pkcs11 without a TPM), and what else is installed is the machine's.
        let initialised = Set(try PKCS11Module.loadRegistered().compactMap(\.path))
        XCTAssertTrue(initialised.isSubset(of: Set(registered)), "\(initialised) not within \(registered)")
        XCTAssertTrue(initialised.contains(softhsm), "\(initialised)")
        try store.putTokenIdentity(uri: "pkcs11:token=t;object=k?module-path=\(softhsm)", certificate: a.leaf, label: "hsm")
        XCTAssertNoThrow(try store.tokenIdentity(label: "hsm"))
    }

    func testVersion2StoreOpensOnlyAfterAnExplicitUpgradeThatShowsItsRows() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let store = try open(path)
        try store.putIdentity(try pki.identity("a"), label: "a")
        try store.putCertificate(pki.root, label: "root")
        try store.putTokenIdentity(uri: "pkcs11:token=t;object=k", certificate: pki.intermediate, label: "tok")
        // Make it what libmtls 2 wrote: no tags, and a PIN in a token URI.
        try store._testMakeLegacy(version: 2, secret: Self.secret)
        store.close()
        try TestPKI.sh("sqlite3 \(path) \"UPDATE items SET token_uri = 'pkcs11:token=t;object=k?pin-value=4242'\"")
        XCTAssertThrowsError(try open(path)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .upgradeRequired)
            XCTAssertTrue((e as? MTLSError)?.message.contains("mtls store upgrade") ?? false, "\(e)")
        }
        let preview = try XCTUnwrap(try CredentialStore.upgradePreview(path: path, secret: Self.secret, options: Self.options()))
        XCTAssertEqual(preview.schemaVersion, 2)
        XCTAssertEqual(preview.items.map(\.label), ["a", "root", "tok"])
        XCTAssertEqual(preview.items.first { $0.label == "root" }?.leafSHA256, pki.root.sha256Hex)
        XCTAssertEqual(preview.items.first { $0.label == "tok" }?.tokenURI, "pkcs11:token=t;object=k")
        // The preview changed nothing; a wrong confirmation upgrades nothing.
        XCTAssertEqual(try TestPKI.sh("sqlite3 \(path) 'PRAGMA user_version'").trimmingCharacters(in: .whitespacesAndNewlines), "2")
        assertCode(.invalidArgument) { try CredentialStore.upgrade(path: path, secret: Self.secret, confirming: "00", options: Self.options()) }
        XCTAssertEqual(try CredentialStore.upgrade(path: path, secret: Self.secret, confirming: preview.confirmation, options: Self.options()), 3)
        let migrated = try open(path)
        XCTAssertEqual(try migrated._testInteger("PRAGMA user_version"), 4)
        XCTAssertNoThrow(try migrated.identity(label: "a"))
        XCTAssertEqual(try migrated.certificate(label: "root"), pki.root)
        XCTAssertEqual(try migrated.tokenIdentity(label: "tok").uri, "pkcs11:token=t;object=k")
        XCTAssertEqual(try migrated.list().count, 3)
        XCTAssertNil(try CredentialStore.upgradePreview(path: path, secret: Self.secret, options: Self.options()))
        // After the upgrade an untagged row is refused.
        try migrated._testExecute("UPDATE items SET mac = NULL WHERE label = 'root'")
        assertCode(.corrupt) { _ = try migrated.certificate(label: "root") }
    }

    func testVersion3StoreIsUpgradedOnOpenAfterEveryRowAuthenticates() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let store = try open(path)
        try store.putIdentity(try pki.identity("a"), label: "a")
        try store.putCertificate(pki.root, label: "root")
        try store._testMakeLegacy(version: 3, secret: Self.secret)
        store.close()
        try TestPKI.sh("cp \(path) \(pki.dir)/tampered.db")
        let upgraded = try open(path)
        XCTAssertEqual(try upgraded._testInteger("PRAGMA user_version"), 4)
        XCTAssertEqual(try upgraded.certificate(label: "root"), pki.root)
        XCTAssertEqual(try upgraded.writeCounter(), 1)
        // A schema-3 row edited behind the library's back stops the upgrade: nothing is written.
        try TestPKI.sh("sqlite3 \(pki.dir)/tampered.db \"UPDATE items SET subject = 'CN=Evil' WHERE label = 'root'\"")
        XCTAssertThrowsError(try open("\(pki.dir)/tampered.db")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .corrupt)
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"root\"") ?? false, "\(e)")
        }
        XCTAssertEqual(try TestPKI.sh("sqlite3 \(pki.dir)/tampered.db 'PRAGMA user_version'").trimmingCharacters(in: .whitespacesAndNewlines), "3")
    }

    // MARK: the store as a whole (issue 24), as an attacker who can write the file but lacks the secret

    func testDowngradeOfACurrentStoreIsCorruptAndNeverMigrated() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let store = try open(path)
        try store.putCertificate(pki.root, label: "acme-root")
        store.close()
        let evil = try pki.identity("evil")
        // Drop the tags, claim schema 2, rewrite the anchor: the laundering of defect 1.
        try TestPKI.sh("sqlite3 \(path) \"ALTER TABLE items DROP COLUMN mac; PRAGMA user_version=2; UPDATE items SET leaf = x'\(Encoding.hex(evil.leaf.der))', leaf_sha256 = '\(evil.leaf.sha256Hex)', subject = '\(evil.leaf.subject)' WHERE label = 'acme-root'\"")
        assertCode(.corrupt) { _ = try self.open(path) }
        assertCode(.corrupt) { _ = try CredentialStore.upgradePreview(path: path, secret: Self.secret, options: Self.options()) }
        XCTAssertEqual(try TestPKI.sh("sqlite3 \(path) 'PRAGMA user_version'").trimmingCharacters(in: .whitespacesAndNewlines), "2")
        // Deleting the header as well does not make it look old.
        try TestPKI.sh("sqlite3 \(path) \"DELETE FROM meta WHERE name IN ('header', 'header_mac'); DROP TABLE manifest\"")
        assertCode(.corrupt) { _ = try self.open(path) }
    }

    func testRolledBackAndDeletedAndResurrectedRowsAreCorruptNamingTheLabel() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let store = try open(path)
        try store.putCertificate(pki.root, label: "anchor")
        try store.putCertificate(pki.intermediate, label: "gone")
        let old = try TestPKI.sh("sqlite3 \(path) \"SELECT quote(leaf), quote(mac), generation, subject, leaf_sha256, issuer, not_after FROM items WHERE label = 'anchor'\"")
        let f = old.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map(String.init)
        try store.putCertificate(pki.intermediate, label: "anchor", replace: true)
        let before = try store.writeCounter()
        try store.delete(label: "gone")
        XCTAssertEqual(try store.writeCounter(), before + 1)
        store.close()
        // 1. The anchor before it was replaced, written back with its old (valid) tag.
        try TestPKI.sh("sqlite3 \(path) \"UPDATE items SET leaf = \(f[0]), mac = \(f[1]), generation = \(f[2]), subject = '\(f[3])', leaf_sha256 = '\(f[4])', issuer = '\(f[5])', not_after = \(f[6]) WHERE label = 'anchor'\"")
        let fresh = try open(path)
        XCTAssertThrowsError(try fresh.certificate(label: "anchor")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .corrupt)
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"anchor\"") ?? false, "\(e)")
        }
        assertCode(.corrupt) { _ = try fresh.list() }
        assertCode(.corrupt) { _ = try fresh.info(label: "anchor", itemClass: .certificate) }
        fresh.close()
        // 2. A row deleted behind the library's back.
        let s2 = try open("\(pki.dir)/s2.db")
        try s2.putCertificate(pki.root, label: "pinned")
        try s2.putCertificate(pki.intermediate, label: "other")
        s2.close()
        try TestPKI.sh("sqlite3 \(pki.dir)/s2.db \"DELETE FROM items WHERE label = 'pinned'\"")
        let d = try open("\(pki.dir)/s2.db")
        XCTAssertThrowsError(try d.certificate(label: "pinned")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .corrupt)
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"pinned\"") ?? false, "\(e)")
        }
        XCTAssertThrowsError(try d.list()) { e in
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"pinned\"") ?? false, "\(e)")
        }
        assertCode(.notFound) { _ = try d.certificate(label: "never-stored") }
        // 3. A deleted row written back (copied from an older file).
        let s3 = try open("\(pki.dir)/s3.db")
        try s3.putCertificate(pki.root, label: "revoked")
        s3.close()
        try TestPKI.sh("cp \(pki.dir)/s3.db \(pki.dir)/s3-old.db")
        let s3b = try open("\(pki.dir)/s3.db")
        try s3b.delete(label: "revoked")
        s3b.close()
        try TestPKI.sh("sqlite3 \(pki.dir)/s3.db \"ATTACH '\(pki.dir)/s3-old.db' AS old; INSERT INTO items SELECT * FROM old.items WHERE label = 'revoked'\"")
        XCTAssertThrowsError(try open("\(pki.dir)/s3.db").certificate(label: "revoked")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .corrupt)
            XCTAssertTrue((e as? MTLSError)?.message.contains("\"revoked\"") ?? false, "\(e)")
        }
    }

    func testChangingTheSecretRotatesTheDataKey() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let store = try open(path)
        try store.putIdentity(try pki.identity("a"), label: "before")
        try TestPKI.sh("sqlite3 \(path) \"CREATE TABLE old_meta AS SELECT * FROM meta\"")
        try store.changeSecret(to: .passphrase(SecretBytes("new passphrase")), kdf: .testing)
        try store.putIdentity(try pki.identity("b"), label: "after")
        XCTAssertNoThrow(try store.identity(label: "before"))
        store.close()
        // The pre-rotation header rows put back: the old secret opens nothing of the new file.
        try TestPKI.sh("sqlite3 \(path) \"DELETE FROM meta; INSERT INTO meta SELECT * FROM old_meta\"")
        assertCode(.corrupt) { _ = try self.open(path) }
        // Without a write after the change, the old header still matches the manifest, but no
        // row (re-authenticated under the new key) and no sealed key opens under the old one.
        let p2 = "\(pki.dir)/store2.db"
        let s2 = try open(p2)
        try s2.putIdentity(try pki.identity("c"), label: "before")
        try TestPKI.sh("sqlite3 \(p2) \"CREATE TABLE old_meta AS SELECT * FROM meta\"")
        try s2.changeSecret(to: .passphrase(SecretBytes("new passphrase")), kdf: .testing)
        s2.close()
        try TestPKI.sh("sqlite3 \(p2) \"DELETE FROM meta; INSERT INTO meta SELECT * FROM old_meta\"")
        let old = try open(p2)
        assertCode(.corrupt) { _ = try old.identity(label: "before") }
        assertCode(.corrupt) { _ = try old.list() }
    }

    func testAnotherHandleChangingTheSecretIsBadSecretNotCorrupt() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let a = try open(path), b = try open(path)
        try a.putIdentity(try pki.identity("a"), label: "a")
        try a.putCertificate(pki.root, label: "root")
        XCTAssertNoThrow(try b.identity(label: "a"))
        try a.changeSecret(to: .passphrase(SecretBytes("new passphrase")), kdf: .testing)
        assertCode(.badSecret) { _ = try b.identity(label: "a") }
        assertCode(.badSecret) { _ = try b.certificate(label: "root") }
        assertCode(.badSecret) { _ = try b.list() }
        XCTAssertEqual(try a.certificate(label: "root"), pki.root)
        XCTAssertEqual(try open(path, .passphrase(SecretBytes("new passphrase"))).list().count, 2)
    }

    func testWriteCounterCountsEveryWriteAndAnotherHandleSeesIt() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let a = try open(path), b = try open(path)
        XCTAssertEqual(try a.writeCounter(), 0)
        try a.putCertificate(pki.root, label: "r")
        try b.putCertificate(pki.intermediate, label: "i")
        XCTAssertEqual(try a.writeCounter(), 2)
        XCTAssertEqual(try b.certificate(label: "r"), pki.root)
        try a.delete(label: "r")
        XCTAssertEqual(try b.writeCounter(), 3)
        assertCode(.notFound) { _ = try b.certificate(label: "r") }
    }

    func testNewerSchemaIsSchemaTooNew() throws {
        let dir = try TestPKI.tempDir()
        try open("\(dir)/store.db")._testExecute("PRAGMA user_version=99")
        assertCode(.schemaTooNew) { _ = try self.open("\(dir)/store.db") }
    }

    func testOlderSchemaIsUpgradedOnlyExplicitly() throws {
        let dir = try TestPKI.tempDir()
        let old = try open("\(dir)/store.db")
        try old._testMakeLegacy(version: 1, secret: Self.secret)
        old.close()
        assertCode(.upgradeRequired) { _ = try self.open("\(dir)/store.db") }
        let preview = try XCTUnwrap(try CredentialStore.upgradePreview(path: "\(dir)/store.db", secret: Self.secret, options: Self.options()))
        XCTAssertEqual(preview.items.count, 0)
        try CredentialStore.upgrade(path: "\(dir)/store.db", secret: Self.secret, confirming: preview.confirmation, options: Self.options())
        let store = try open("\(dir)/store.db")
        XCTAssertEqual(try store._testInteger("PRAGMA user_version"), 4)
        XCTAssertEqual(try store._testInteger("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'items_%'"), 3)
    }

    func testReadOnlyLocationIsReadOnly() throws {
        assertCode(.readOnly) { _ = try self.open("/sys/mtls-store-test.db") }
        let dir = try TestPKI.tempDir()
        let path = "\(dir)/store.db"
        try open(path).putCertificate(try StorePKI().root, label: "root")
        guard (try? TestPKI.sh("chattr +i \(path)")) != nil else { return }
        defer { _ = try? TestPKI.sh("chattr -i \(path)") }
        let readOnly = try open(path)
        assertCode(.readOnly) { try readOnly.putCertificate(try StorePKI().root, label: "r2") }
        XCTAssertEqual(try readOnly.list().map(\.label), ["root"])
    }

    func testFullDiskIsDiskFullAndLosesNothing() throws {
        let pki = try StorePKI()
        let store = try open("\(pki.dir)/store.db")
        try store.putIdentity(try pki.identity("a"), label: "a")
        let pages = try store._testInteger("PRAGMA page_count")
        try store._testExecute("PRAGMA max_page_count=\(pages)")
        var failed = false
        for i in 0..<50 where !failed {
            do { try store.putIdentity(try pki.identity("x\(i)"), label: "x\(i)") } catch let e as MTLSError {
                XCTAssertEqual(e.code, .diskFull, "\(e)")
                failed = true
            }
        }
        XCTAssertTrue(failed)
        XCTAssertTrue(try store.identity(label: "a").privateKey.matches(try store.identity(label: "a").leaf))
        XCTAssertEqual(try store._testInteger("SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'"), 1)
    }

    func testLockHeldBeyondTheBusyTimeoutIsLocked() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let holder = try open(path)
        let waiter = try open(path, busyTimeout: 100)
        try holder._testExecute("BEGIN IMMEDIATE")
        assertCode(.locked) { try waiter.putCertificate(pki.root, label: "root") }
        try holder._testExecute("COMMIT")
        try waiter.putCertificate(pki.root, label: "root")
    }

    func testSealedKeyMovedToAnotherLabelDoesNotOpen() throws {
        let pki = try StorePKI()
        let store = try open("\(pki.dir)/store.db")
        try store.putIdentity(try pki.identity("a"), label: "a")
        try store.putIdentity(try pki.identity("b"), label: "b")
        try store._testExecute("UPDATE items SET sealed_key = (SELECT sealed_key FROM items WHERE label = 'a'), leaf = (SELECT leaf FROM items WHERE label = 'a') WHERE label = 'b'")
        let fresh = try open("\(pki.dir)/store.db")
        assertCode(.corrupt) { _ = try fresh.identity(label: "b") }
        XCTAssertNoThrow(try fresh.identity(label: "a"))
        // Swapping only the certificates is caught too: they are bound into the associated data.
        try store.putIdentity(try pki.identity("c"), label: "c")
        try store._testExecute("UPDATE items SET leaf = (SELECT leaf FROM items WHERE label = 'a') WHERE label = 'c'")
        assertCode(.corrupt) { _ = try self.open("\(pki.dir)/store.db").identity(label: "c") }
        try store._testExecute("UPDATE items SET chain = x'' WHERE label = 'a'")
        assertCode(.corrupt) { _ = try self.open("\(pki.dir)/store.db").identity(label: "a") }
    }

    func testNoPrivateKeyByteIsWrittenInTheClear() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let store = try open(path)
        var names: [String] = []
        for i in 0..<5 {
            let name = "scan\(i)"
            try store.putIdentity(try pki.identity(name), label: name, replace: true)
            names.append(name)
        }
        try store.putIdentity(try pki.identity("scan0"), label: "scan0", replace: true) // a replaced row too
        var files: [Data] = []
        for suffix in ["", "-wal", "-journal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            files.append(try Data(contentsOf: URL(fileURLWithPath: path + suffix)))
        }
        XCTAssertGreaterThanOrEqual(files.count, 2)
        for name in names {
            let p8 = try Data(contentsOf: URL(fileURLWithPath: "\(pki.dir)/\(name).p8"))
            let pem = try String(contentsOfFile: "\(pki.dir)/\(name).key", encoding: .utf8)
            let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            // The private scalar, as openssl prints it.
            let text = try TestPKI.sh("openssl pkey -in \(pki.dir)/\(name).key -noout -text")
            let privHex = text.components(separatedBy: "priv:")[1].components(separatedBy: "pub:")[0]
                .filter { $0.isHexDigit }
            var scalar = Data(stride(from: 0, to: privHex.count, by: 2).map {
                UInt8(privHex[privHex.index(privHex.startIndex, offsetBy: $0)..<privHex.index(privHex.startIndex, offsetBy: $0 + 2)], radix: 16)!
            })
            if scalar.count > 32 { scalar = scalar.suffix(32) }
            for f in files {
                XCTAssertNil(f.range(of: p8))
                XCTAssertNil(f.range(of: scalar))
                XCTAssertNil(f.range(of: Data(body.utf8.prefix(40))))
                XCTAssertNil(f.range(of: Data("PRIVATE KEY".utf8)))
            }
        }
    }

    func testImportPKCS12UnderALabelAndExportItBack() throws {
        let pki = try StorePKI()
        let a = try pki.identity("p12user")
        try TestPKI.sh("cd \(pki.dir) && cat int.pem root.pem > chain.pem && openssl pkcs12 -export -inkey p12user.key -in p12user.pem -certfile chain.pem -passout pass:pw -out p12user.p12")
        let data = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "\(pki.dir)/p12user.p12")))
        let store = try open("\(pki.dir)/store.db")
        assertCode(.badPassword) { try store.importPKCS12(data, password: SecretBytes("nope"), label: "u") }
        XCTAssertEqual(try store.list(), [])
        try store.importPKCS12(data, password: SecretBytes("pw"), label: "u")
        assertCode(.duplicate) { try store.importPKCS12(data, password: SecretBytes("pw"), label: "u") }
        try store.importPKCS12(data, password: SecretBytes("pw"), label: "u", replace: true)
        XCTAssertEqual(try store.identity(label: "u").chain, [pki.intermediate, pki.root])
        let exported = try store.exportPKCS12(label: "u", password: SecretBytes("out"))
        let back = try PKCS12.parse(exported, password: SecretBytes("out")).requireIdentity()
        XCTAssertEqual(back.leaf, a.leaf)
        XCTAssertEqual(back.chain.count, 2)
        try Data(exported).write(to: URL(fileURLWithPath: "\(pki.dir)/out.p12"))
        XCTAssertTrue(try TestPKI.sh("openssl pkcs12 -in \(pki.dir)/out.p12 -passin pass:out -nokeys -info 2>&1").contains("friendlyName: u"))
        let legacy = try store.exportPKCS12(label: "u", password: SecretBytes("out"), options: .legacy)
        XCTAssertTrue(try PKCS12.parse(legacy, password: SecretBytes("out")).requireIdentity().privateKey.matches(a.leaf))
        assertCode(.notFound) { _ = try store.exportPKCS12(label: "nope", password: SecretBytes("x")) }
    }

    func testReplaceByAnotherConnectionInvalidatesTheCache() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let reader = try open(path), writer = try open(path)
        let a = try pki.identity("a"), b = try pki.identity("b")
        try writer.putIdentity(a, label: "x")
        XCTAssertEqual(try reader.identity(label: "x").leaf, a.leaf)
        XCTAssertTrue(try reader.identity(label: "x") === reader.identity(label: "x"))
        try writer.putIdentity(b, label: "x", replace: true)
        XCTAssertEqual(try reader.identity(label: "x").leaf, b.leaf)
        XCTAssertEqual(try reader.identities().map(\.leaf), [b.leaf])
    }

    func testSmallIdentityCacheEvictsButAlwaysReturnsTheRightIdentity() throws {
        let pki = try StorePKI()
        var o = Self.options()
        o.identityCacheSize = 4
        let store = try CredentialStore(path: "\(pki.dir)/store.db", secret: Self.secret, options: o)
        let ids = try (0..<3).map { try pki.identity("c\($0)") }
        try store.putIdentities((0..<10).map { ("l\($0)", ids[$0 % 3]) })
        for round in 0..<3 {
            for i in (0..<10).reversed() where (i + round) % 2 == 0 || round == 2 {
                XCTAssertEqual(try store.identity(label: "l\(i)").leaf, ids[i % 3].leaf)
            }
        }
        let first = try store.identity(label: "l9")
        XCTAssertTrue(first === (try store.identity(label: "l9")))
    }

    func testEightThreadsWritingSameAndDifferentLabelsLoseNothing() throws {
        let pki = try StorePKI()
        let path = "\(pki.dir)/store.db"
        let ids = try (0..<4).map { try pki.identity("t\($0)") }
        let shared = try open(path)
        let errors = ErrorBox()
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            do {
                // Half the threads share one handle, half open their own connection.
                let store = t % 2 == 0 ? shared : try CredentialStore(path: path, secret: Self.secret, options: Self.options(busyTimeout: 10_000))
                for i in 0..<20 {
                    try store.putIdentity(ids[(t + i) % 4], label: "thread\(t)-\(i)")
                    try store.putIdentity(ids[i % 4], label: "same", replace: true)
                    let got = try store.identity(label: "same")
                    XCTAssertTrue(ids.contains { $0.leaf == got.leaf })
                    _ = try store.list()
                }
            } catch { errors.append(error) }
        }
        XCTAssertEqual(errors.all.map { "\($0)" }, [])
        XCTAssertEqual(try shared.list().count, 8 * 20 + 1)
        for t in 0..<8 { for i in 0..<20 {
            XCTAssertEqual(try shared.identity(label: "thread\(t)-\(i)").leaf, ids[(t + i) % 4].leaf)
        } }
    }
}

final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var errors: [Error] = []
    func append(_ e: Error) { lock.lock(); errors.append(e); lock.unlock() }
    var all: [Error] { lock.lock(); defer { lock.unlock() }; return errors }
}
