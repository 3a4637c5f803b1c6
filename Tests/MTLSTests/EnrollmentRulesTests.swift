import XCTest
@testable import MTLS

/// The rules about which enrollment options go together, as the core checks them for every
/// front end (EnrollmentRules.swift): each rule refuses with `invalid_argument` and a message
/// naming the options in the caller's spelling, before anything is sent or made.
final class EnrollmentRulesTests: XCTestCase {
    /// A spelling that marks every name, so a test can see which options a message names.
    private let marked = EnrollmentOptionNames { "<\($0.rawValue)>" }

    private func refused(_ body: () throws -> Void, naming expected: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            let e = error as? MTLSError
            XCTAssertEqual(e?.code, .invalidArgument, "\(error)", file: file, line: line)
            XCTAssertEqual(e?.message, expected, file: file, line: line)
        }
    }

    private func acme(_ challenge: ACMEChallengeMethod = .http01(address: nil, port: 5002)) -> ACMEEnrollment {
        var r = ACMEEnrollment(directoryURL: "https://127.0.0.1:1/dir", identifiers: ["svc.test"], challenge: challenge)
        r.optionNames = marked
        return r
    }

    // MARK: the challenge method

    func testExactlyOneChallengeMethodIsAskedFor() throws {
        refused({ _ = try ACMEChallengeOptions().method(names: marked) },
                naming: "give exactly one of <http01>, <webroot>, <tlsALPN01>, <dns01>")
        var two = ACMEChallengeOptions()
        two.kinds = [.http01, .tlsALPN01]
        two.port = 80
        refused({ _ = try two.method(names: marked) }, naming: "give exactly one of <http01>, <webroot>, <tlsALPN01>, <dns01>")
        var one = ACMEChallengeOptions()
        one.kinds = [.tlsALPN01]
        one.port = 443
        one.listenAddress = "127.0.0.1"
        XCTAssertEqual(try one.method(names: marked), .tlsALPN01(address: "127.0.0.1", port: 443))
    }

    func testAChallengeMethodNeedsItsParameter() {
        var http = ACMEChallengeOptions()
        http.kinds = [.http01]
        refused({ _ = try http.method(names: marked) }, naming: "<http01> needs <port> from 1 to 65535")
        http.port = 0
        refused({ _ = try http.method(names: marked) }, naming: "<http01> needs <port> from 1 to 65535")
        var webroot = ACMEChallengeOptions()
        webroot.kinds = [.webroot]
        webroot.webroot = ""
        refused({ _ = try webroot.method(names: marked) }, naming: "<webroot> needs <webrootDirectory>")
        var dns = ACMEChallengeOptions()
        dns.kinds = [.dns01]
        refused({ _ = try dns.method(names: marked) }, naming: "<dns01> needs <dnsHook>")
    }

    func testAParameterOfAnotherMethodIsRefusedNotIgnored() {
        var o = ACMEChallengeOptions()
        o.kinds = [.http01]
        o.port = 80
        o.webroot = "/srv/www"
        refused({ _ = try o.method(names: marked) }, naming: "<webrootDirectory> does not go with <http01>")
        o = ACMEChallengeOptions()
        o.kinds = [.webroot]
        o.webroot = "/srv/www"
        // The listen address is where a responder would listen: unused without one, not refused.
        o.listenAddress = "127.0.0.1"
        XCTAssertEqual(try o.method(names: marked), .webroot(directory: "/srv/www"))
        o.port = 80
        refused({ _ = try o.method(names: marked) }, naming: "<port> does not go with <webroot>")
        o = ACMEChallengeOptions()
        o.kinds = [.dns01]
        o.dnsHook = "/bin/true"
        o.webroot = "/srv/www"
        refused({ _ = try o.method(names: marked) }, naming: "<webrootDirectory> does not go with <dns01>")
    }

    // MARK: ACME

    func testACMEValidationRefusesEachBrokenRule() throws {
        XCTAssertNoThrow(try acme().validate())
        var r = acme()
        r.identifiers = []
        refused({ try r.validate() }, naming: "give at least one <identifiers>")
        r = acme()
        r.identifiers = ["not a name!"]
        refused({ try r.validate() }, naming: "not a DNS name or IP address: \"not a name!\"")
        // A method made directly (not through ACMEChallengeOptions) is held to the same rule.
        refused({ try acme(.http01(address: nil, port: 0)).validate() }, naming: "<http01> needs <port> from 1 to 65535")
        refused({ try acme(.dns01(command: "")).validate() }, naming: "<dns01> needs <dnsHook>")
        r = acme()
        r.keySpec = .ecP384
        r.tokenURI = "pkcs11:token=t;object=k"
        refused({ try r.validate() }, naming: "<keyType> makes a new key; it does not go with <tokenURI>")
        r = acme()
        for bad in [0, -1, 86401, Double.nan] {
            r.pollTimeout = bad
            refused({ try r.validate() }, naming: "<pollTimeout> must be 1 to 86400 seconds")
        }
        r.pollTimeout = ACMEEnrollment.maxPollTimeout
        XCTAssertNoThrow(try r.validate())
    }

    func testExternalAccountKeyIdentifierAndKeyGoTogether() throws {
        refused({ _ = try ACMEExternalAccount.given(keyID: "kid-1", key: nil, names: marked) },
                naming: "<eabKeyID> and <eabKey> go together")
        refused({ _ = try ACMEExternalAccount.given(keyID: nil, key: SecretBytes(Array("a2V5".utf8)), names: marked) },
                naming: "<eabKeyID> and <eabKey> go together")
        refused({ try ACMEExternalAccount.checkParts(keyID: false, key: true, names: marked) },
                naming: "<eabKeyID> and <eabKey> go together")
        XCTAssertNil(try ACMEExternalAccount.given(keyID: nil, key: nil, names: marked))
        let account = try XCTUnwrap(ACMEExternalAccount.given(keyID: "kid-1", key: SecretBytes(Array("a2V5".utf8)), names: marked))
        XCTAssertEqual(account.keyID, "kid-1")
        account.hmacKey.withBytes { XCTAssertEqual(Array($0), Array("key".utf8)) }
    }

    // MARK: EST and the local CA

    func testESTValidationRefusesEachBrokenRule() throws {
        var r = ESTEnrollment(url: "https://127.0.0.1:1/.well-known/est", subject: "CN=device-1")
        r.optionNames = marked
        refused({ try r.validate() }, naming: "give <user> and <password>, or <bootstrap>")
        r.keepPassword = true
        refused({ try r.validate() }, naming: "<keepPassword> needs <user> and <password>")
        r.user = "device"
        refused({ try r.validate() }, naming: "<user> and <password> go together")
        r.password = SecretBytes(Array("secret".utf8))
        XCTAssertNoThrow(try r.validate())
        r.keySpec = .ecP256
        r.tokenURI = "pkcs11:token=t;object=k"
        refused({ try r.validate() }, naming: "<keyType> makes a new key; it does not go with <tokenURI>")
        r.keySpec = nil
        r.profile = .intermediate
        refused({ try r.validate() }, naming: "<profile> is server or client, not intermediate")
    }

    func testPKIValidationRefusesEachBrokenRule() throws {
        var r = PKIEnrollment(directory: "/nowhere", caName: "CA", name: "svc.test")
        r.optionNames = marked
        XCTAssertNoThrow(try r.validate())
        r.profile = .root
        refused({ try r.validate() }, naming: "<profile> is server or client, not root")
        r.profile = .client
        r.keySpec = .rsa(bits: 2048)
        r.tokenURI = "pkcs11:token=t;object=k"
        refused({ try r.validate() }, naming: "<keyType> makes a new key; it does not go with <tokenURI>")
    }

    /// The enroll functions check the request themselves, before the store or the CA is touched:
    /// a Swift caller that never calls validate() gets the same refusal, and nothing is stored.
    func testEnrollFunctionsValidateBeforeAnythingIsMade() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rules-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var options = CredentialStore.Options()
        options.create = true
        options.kdf = .testing
        let store = try CredentialStore(path: dir + "/store.db", secret: .passphrase(SecretBytes("pw")), options: options)
        var a = ACMEEnrollment(directoryURL: "https://127.0.0.1:1/dir", identifiers: [], challenge: .http01(address: nil, port: 5002))
        refused({ _ = try Enrollment.enrollACME(a, store: store, label: "a") }, naming: "give at least one DNS name or IP address")
        a.identifiers = ["svc.test"]
        a.keySpec = .ecP256
        a.tokenURI = "pkcs11:token=t;object=k"
        refused({ _ = try Enrollment.enrollACME(a, store: store, label: "a") },
                naming: "a key type makes a new key; it does not go with a token URI")
        let e = ESTEnrollment(url: "https://127.0.0.1:1/.well-known/est", subject: "CN=device-1")
        refused({ _ = try Enrollment.enrollEST(e, store: store, label: "e") },
                naming: "give a user and a password, or a bootstrap identity")
        var p = PKIEnrollment(directory: dir + "/no-pki", caName: "CA", name: "svc.test")
        p.profile = .intermediate
        refused({ _ = try Enrollment.enrollPKI(p, store: store, label: "p") },
                naming: "the profile is server or client, not intermediate")
        XCTAssertTrue(try store.list().isEmpty)
    }
}
