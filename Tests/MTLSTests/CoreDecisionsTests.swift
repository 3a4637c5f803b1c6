import Foundation
import XCTest
@testable import MTLS

/// Decisions the core makes once for every front end (C, Python, the CLI): timeouts and
/// defaults, the CN of a certificate named by nothing else, and issuing with its `.p12` as one step.
final class CoreDecisionsTests: XCTestCase {
    func testTimeoutZeroIsTheDefaultAndNegativeIsNoLimit() throws {
        var o = TLSClientOptions()
        XCTAssertEqual(o.connectTimeout, 30)
        XCTAssertEqual(o.handshakeTimeout, 30)
        XCTAssertNil(o.ioTimeout)
        o.connectTimeout = 0
        o.handshakeTimeout = -1
        o.ioTimeout = 0
        XCTAssertEqual(o.connectTimeout, 30)  // the C ABI's 0: the default, not "forever"
        XCTAssertNil(o.handshakeTimeout)
        XCTAssertNil(o.ioTimeout)
        o.connectTimeout = 2.5
        XCTAssertEqual(o.connectTimeout, 2.5)
        o.connectTimeout = nil
        XCTAssertNil(o.connectTimeout)
        var s = TLSServerOptions(identity: try CertificateAuthority.newRoot(commonName: "Server"))
        XCTAssertEqual(s.handshakeTimeout, TLSDefaults.handshakeTimeout)
        XCTAssertEqual(s.clientAuthentication, TLSDefaults.clientAuthentication)
        s.handshakeTimeout = 0
        XCTAssertEqual(s.handshakeTimeout, 30)
        s.ioTimeout = -5
        XCTAssertNil(s.ioTimeout)
    }

    func testCommonNameFallsBackToTheCSRThenTheFirstDNSNameThenTheFirstIP() throws {
        XCTAssertEqual(try CertificateRequest.commonName(given: "n", dnsNames: ["d"], ipAddresses: ["1.2.3.4"]), "n")
        XCTAssertEqual(try CertificateRequest.commonName(given: nil, dnsNames: ["d", "e"], ipAddresses: ["1.2.3.4"]), "d")
        XCTAssertEqual(try CertificateRequest.commonName(given: nil, ipAddresses: ["1.2.3.4"]), "1.2.3.4")
        expectCode(.invalidArgument) { _ = try CertificateRequest.commonName(given: nil) }
        let dir = try TestPKI.tempDir()
        _ = try TestPKI.sh("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(dir)/k.pem "
                           + "-out \(dir)/named.csr -subj /CN=from-csr 2>/dev/null && "
                           + "openssl req -new -key \(dir)/k.pem -out \(dir)/nameless.csr -subj /O=NoCN 2>/dev/null")
        let named = try CertificateSigningRequest(path: "\(dir)/named.csr")
        let nameless = try CertificateSigningRequest(path: "\(dir)/nameless.csr")
        XCTAssertEqual(try CertificateRequest.commonName(given: nil, csr: named, dnsNames: ["d"]), "from-csr")
        XCTAssertEqual(try CertificateRequest.commonName(given: nil, csr: nameless, dnsNames: ["d"]), "d")
        expectCode(.invalidArgument) { _ = try CertificateRequest.commonName(given: nil, csr: nameless) }
    }

    func testServeAsksForClientCertificatesOnlyWhereClientsCanBeTrusted() {
        // mtls serve's rule, decided here for every front end: required when asked, and (issue
        // 35 item 2) by default where anchors or a policy can judge what a client presents;
        // optional only when asked for by name; not requested where nothing could trust one.
        XCTAssertEqual(ClientAuthentication.requested(certificateRequired: true, clientTrustGiven: true), .require)
        XCTAssertEqual(ClientAuthentication.requested(certificateRequired: true, clientTrustGiven: false), .require)
        XCTAssertEqual(ClientAuthentication.requested(certificateRequired: false, clientTrustGiven: true), .require)
        XCTAssertEqual(ClientAuthentication.requested(certificateRequired: false, certificateOptional: true,
                                                      clientTrustGiven: true), .optional)
        XCTAssertEqual(ClientAuthentication.requested(certificateRequired: false, clientTrustGiven: false), .none)
        XCTAssertEqual(TLSDefaults.clientAuthentication, .require)
    }

    func testTestServerOptionsTakeTheCoresClientAuthAndShortTimeouts() throws {
        var o = TLSServerOptions(identity: try CertificateAuthority.newRoot(commonName: "Server"))
        o.configureAsTestServer(certificateRequired: false, clientTrustGiven: true)
        XCTAssertEqual(o.clientAuthentication, .require)
        o.configureAsTestServer(certificateRequired: false, certificateOptional: true, clientTrustGiven: true)
        XCTAssertEqual(o.clientAuthentication, .optional)
        XCTAssertEqual(o.handshakeTimeout, TLSServerOptions.testServerTimeout)
        XCTAssertEqual(o.ioTimeout, TLSServerOptions.testServerTimeout)  // the listener default is none
        XCTAssertNil(TLSDefaults.ioTimeout)
        o.configureAsTestServer(certificateRequired: false, clientTrustGiven: false)
        XCTAssertEqual(o.clientAuthentication, ClientAuthentication.none)
    }

    func testHandshakeLimitAndWarningWindowFollowTheTimeoutConvention() throws {
        var s = TLSServerOptions(identity: try CertificateAuthority.newRoot(commonName: "Server"))
        XCTAssertEqual(s.maxHandshakesPerAddress, 32)
        s.maxHandshakesPerAddress = 0  // the C ABI's 0: the default, decided here and not in CMTLS
        XCTAssertEqual(s.maxHandshakesPerAddress, TLSDefaults.maxHandshakesPerAddress)
        s.maxHandshakesPerAddress = -1
        XCTAssertNil(s.maxHandshakesPerAddress)
        s.maxHandshakesPerAddress = 3
        XCTAssertEqual(s.maxHandshakesPerAddress, 3)
        XCTAssertEqual(try LifecycleDefaults.warningDays(0), 14)
        XCTAssertEqual(try LifecycleDefaults.warningDays(3), 3)
        expectCode(.invalidArgument) { _ = try LifecycleDefaults.warningDays(-1) }
    }

    func testConnectErrorsSayWhichSideFailed() throws {
        // A name that does not resolve is ours; a server that refuses the TCP connection, theirs.
        // The CLI's "side" reads this field (it used to match the message text "cannot resolve").
        var o = TLSClientOptions()
        o.connectTimeout = 10
        do {
            _ = try TLSConnection.connect(host: "no-such-host.invalid", port: 443, options: o)
            XCTFail("connected to no-such-host.invalid")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .connect)
            XCTAssertEqual(e.side, .client, e.message)
        }
        let (fd, port) = try Socket.listen(address: "127.0.0.1", port: 0)
        close(fd)  // nothing listens on the port now
        do {
            _ = try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
            XCTFail("connected to a closed port")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .connect)
            XCTAssertEqual(e.side, .server, e.message)
        }
        XCTAssertNil(MTLSError(.parse, "not a certificate").side)
    }

    func testAStoreCreatedForAFailedFirstWriteIsRemoved() throws {
        let dir = try TestPKI.tempDir()
        let secret = StoreSecret.passphrase(SecretBytes("pw"))
        var options = CredentialStore.Options()
        options.kdf = .testing  // fast: the test is about files
        let path = "\(dir)/new-folder/store.db"
        expectCode(.notFound) {
            _ = try CredentialStore.withStore(path: path, secret: secret, options: options) { store in
                _ = try store.certificate(label: "missing")
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/new-folder"))  // made for it, removed
        // An existing store stays, whatever the write does.
        let cert = try CertificateAuthority.newRoot(commonName: "Kept").leaf
        try CredentialStore.withStore(path: path, secret: secret, options: options) { try $0.putCertificate(cert, label: "kept") }
        expectCode(.duplicate) {
            try CredentialStore.withStore(path: path, secret: secret, options: options) { try $0.putCertificate(cert, label: "kept") }
        }
        XCTAssertEqual(try CredentialStore(path: path, secret: secret, options: options).certificate(label: "kept").sha256Hex, cert.sha256Hex)
    }

    func testIssuingWithAPKCS12ThatCannotBeWrittenLeavesNothing() throws {
        let dir = try TestPKI.tempDir()
        let pki = PKIDirectory(path: dir)
        _ = try pki.initRoot(commonName: "Root")
        _ = try pki.makeIntermediate(commonName: "Customer A")
        let unwritable = PKIDirectory.PKCS12Output(path: "\(dir)/no-such-folder/alice.p12", password: SecretBytes("pw"))
        expectCode(.io) {
            _ = try pki.issue(CertificateRequest(profile: .client, commonName: "alice"), caName: "Customer A", p12: unwritable)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/ca/customer-a/issued"))  // the folder as it was
        // An existing .p12 is refused before anything is issued.
        FileManager.default.createFile(atPath: "\(dir)/taken.p12", contents: Data())
        expectCode(.duplicate) {
            _ = try pki.issue(CertificateRequest(profile: .client, commonName: "alice"), caName: "Customer A",
                              p12: PKIDirectory.PKCS12Output(path: "\(dir)/taken.p12", password: SecretBytes("pw")))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/ca/customer-a/issued"))
        // Both, when it can: the .p12 carries the chain and the CN as friendly name.
        let item = try pki.issue(CertificateRequest(profile: .client, commonName: "alice"), caName: "Customer A",
                                 p12: PKIDirectory.PKCS12Output(path: "\(dir)/alice.p12", password: SecretBytes("pw"), scheme: .legacy))
        let p12 = try PKCS12.load(path: "\(dir)/alice.p12", password: SecretBytes("pw")).requireIdentity()
        XCTAssertEqual(p12.leaf.sha256Hex, item.identity.leaf.sha256Hex)
        XCTAssertEqual(p12.friendlyName, "alice")
        XCTAssertEqual(p12.chain.count, 2)
        let mode = (try FileManager.default.attributesOfItem(atPath: "\(dir)/alice.p12")[.posixPermissions] as? NSNumber)?.intValue
        XCTAssertEqual(mode, 0o600)
    }

    func testCRLOfSerialsRevokesEachAsOfItsTime() throws {
        let root = try CertificateAuthority.newRoot(commonName: "Root")
        let ca = try CertificateAuthority(certificate: root.leaf, privateKey: root.privateKey)
        let at = Date(timeIntervalSince1970: 1_893_456_000)  // 2030-01-01
        let der = try ca.makeCRL(revokedSerials: ["01AB"], number: 7, now: at)
        let dir = try TestPKI.tempDir()
        try FileIO.writeAtomically("\(dir)/crl.der", der, mode: 0o644)
        let text = try TestPKI.sh("openssl crl -inform DER -in \(dir)/crl.der -noout -text")
        XCTAssertTrue(text.contains("Serial Number: 01AB"), text)
        XCTAssertTrue(text.contains("Revocation Date: Jan  1 00:00:00 2030 GMT"), text)
    }
}
