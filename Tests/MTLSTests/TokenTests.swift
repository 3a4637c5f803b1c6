import Foundation
import XCTest
import COpenSSL
import CP11Kit
import Synchronization
@testable import MTLS
@testable import MTLSX509

/// SoftHSM2 tokens made once per test process by scripts/softhsm-token.sh (keys generated on
/// the token: no software copy exists, so a signature that verifies was made by the token).
enum SoftHSMFixture {
    static let dir: String = {
        let dir = try! TestPKI.tempDir()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../scripts/softhsm-token.sh").standardized.path
        try! TestPKI.sh("'\(script)' '\(dir)'")
        // SoftHSM reads its configuration when the module is initialised.
        setenv("SOFTHSM2_CONF", dir + "/softhsm2.conf", 1)
        return dir
    }()
    static var module: String {
        (try? String(contentsOfFile: dir + "/module", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            ?? "/usr/lib/softhsm/libsofthsm2.so"
    }
    static let pin = SecretBytes("1234")
}

final class TokenTests: XCTestCase {
    var module: String { SoftHSMFixture.module }

    override func setUpWithError() throws {
        // Other tests point SoftHSM elsewhere; modules read it when initialised (per test here).
        setenv("SOFTHSM2_CONF", SoftHSMFixture.dir + "/softhsm2.conf", 1)
        // Not a skip: scripts/install-deps.sh installs SoftHSM2, and a missing tool fails the suite.
        guard FileManager.default.fileExists(atPath: module) else {
            throw MTLSError(.notFound, "SoftHSM2 is not installed at \(module): run scripts/install-deps.sh")
        }
    }

    func testURIParsesTokenObjectIdTypeAndPINAttributes() throws {
        let uri = try PKCS11URI("pkcs11:token=My%20Token;object=client;id=%01%02;type=private;manufacturer=ACME;serial=42?pin-value=1234&module-path=/usr/lib/x.so")
        XCTAssertEqual(uri.token, "My Token")
        XCTAssertEqual(uri.object, "client")
        XCTAssertEqual(uri.id, [1, 2])
        XCTAssertEqual(uri.type, .privateKey)
        XCTAssertEqual(uri.manufacturer, "ACME")
        XCTAssertEqual(uri.serial, "42")
        XCTAssertEqual(uri.pinValue, "1234")
        XCTAssertEqual(uri.modulePath, "/usr/lib/x.so")
        let source = try PKCS11URI("pkcs11:token=T?pin-source=file:/tmp/pin")
        XCTAssertEqual(source.pinSource, "file:/tmp/pin")
        XCTAssertNil(source.pinValue)
    }

    func testBadURIsAreRejectedWithBadURI() {
        for text in ["https://example.com", "pkcs11:token=%zz", "pkcs11:id=%0", "token=T", ""] {
            XCTAssertThrowsError(try PKCS11URI(text), text) { XCTAssertEqual(($0 as? MTLSError)?.code, .badURI, text) }
            XCTAssertThrowsError(try Token.identity(uri: text, modulePath: module), text) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .badURI, text)
            }
        }
    }

    func testListShowsTheTokensWithTheirURIs() throws {
        let tokens = try PKCS11Modules(modulePath: module).tokens()
        XCTAssertEqual(Set(tokens.map(\.label)), ["mtls-test", "mtls-spare", "mtls-empty", "mtls-locked"])
        let t = try XCTUnwrap(tokens.first { $0.label == "mtls-test" })
        XCTAssertTrue(t.uri.hasPrefix("pkcs11:"))
        XCTAssertTrue(t.uri.contains("token=mtls-test"))
        XCTAssertTrue(t.loginRequired)
        XCTAssertEqual(t.manufacturer, "SoftHSM project")
        XCTAssertEqual(try PKCS11URI(t.uri).token, "mtls-test")
    }

    func testRegisteredModulesIncludeSoftHSM() throws {
        // Debian registers SoftHSM2 with p11-kit (/usr/share/p11-kit/modules/softhsm2.module).
        let tokens = try PKCS11Modules().tokens()
        XCTAssertFalse(tokens.isEmpty, "no p11-kit module registration for SoftHSM2 (the softhsm2 package installs it)")
        XCTAssertTrue(tokens.contains { $0.label == "mtls-test" })
    }

    func testObjectsListCertificatesAndWithThePINPrivateKeys() throws {
        let publicOnly = try PKCS11Modules(modulePath: module).objects(tokenURI: "pkcs11:token=mtls-test")
        XCTAssertEqual(Set(publicOnly.filter { $0.kind == .certificate }.compactMap(\.label)),
                       ["rsa-client", "ec-client", "p384-client", "ca"])
        XCTAssertTrue(publicOnly.filter { $0.kind == .privateKey }.isEmpty, "private keys are private objects")

        let all = try PKCS11Modules(modulePath: module).objects(tokenURI: "pkcs11:token=mtls-test", pin: SoftHSMFixture.pin)
        let keys = all.filter { $0.kind == .privateKey }
        XCTAssertEqual(Set(keys.compactMap(\.label)), ["rsa-client", "ec-client", "p384-client"])
        XCTAssertEqual(keys.first { $0.label == "rsa-client" }?.keyType, "rsa2048")
        XCTAssertEqual(keys.first { $0.label == "p384-client" }?.keyType, "p384")
        let onlyKeyTwo = try PKCS11Modules(modulePath: module).objects(tokenURI: "pkcs11:token=mtls-test;id=%02;type=private",
                                                                        pin: SoftHSMFixture.pin)
        XCTAssertEqual(onlyKeyTwo.map(\.label), ["ec-client"])
        XCTAssertEqual(onlyKeyTwo.map(\.kind), [.privateKey])
        let cert = try XCTUnwrap(all.first { $0.kind == .certificate && $0.label == "ec-client" })
        XCTAssertEqual(cert.id, [2])
        XCTAssertEqual(cert.certificate?.subjectSummary, "token ec-client")
        let uri = try PKCS11URI(cert.uri)
        XCTAssertEqual(uri.object, "ec-client")
        XCTAssertEqual(uri.id, [2])
        XCTAssertEqual(uri.type, .certificate)
        XCTAssertEqual(uri.token, "mtls-test")
    }

    func testIdentityFromURIMatchesCertificateAndKeyByID() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: module, pin: SoftHSMFixture.pin)
        XCTAssertEqual(identity.leaf.subjectSummary, "token ec-client")
        XCTAssertEqual(identity.privateKey.keyType.shortName, "p256")
        XCTAssertEqual(identity.chain.map(\.subjectSummary), ["libmtls token test CA"], "the CA stored on the token completes the chain")
        let keyURI = try XCTUnwrap(identity.privateKey.tokenURI)
        XCTAssertEqual(try PKCS11URI(keyURI).type, .privateKey)
        XCTAssertEqual(try PKCS11URI(keyURI).id, [2])
        XCTAssertEqual(identity.friendlyName, "ec-client")
    }

    func testTokenKeyIsNeverExported() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%01", modulePath: module, pin: SoftHSMFixture.pin)
        XCTAssertThrowsError(try identity.privateKey.pkcs8DER()) { XCTAssertEqual(($0 as? MTLSError)?.code, .unsupported) }
        XCTAssertThrowsError(try PKCS12.export(identity, password: SecretBytes("pw"))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .unsupported)
        }
    }

    /// Below libmtls's own guards, OpenSSL itself cannot get the private half out of a token key:
    /// the key belongs to libmtls's provider, which has no export, and the private encoders and
    /// parameter reads find nothing.
    func testTokenKeyHasNoPrivatePartForOpenSSL() throws {
        for uri in ["pkcs11:token=mtls-test;id=%01", "pkcs11:token=mtls-test;id=%02", "pkcs11:token=mtls-spare;id=%07"] {
            let identity = try Token.identity(uri: uri, modulePath: module, pin: SoftHSMFixture.pin)
            let pkey = identity.privateKey.pkey
            XCTAssertEqual(String(cString: OSSL_PROVIDER_get0_name(EVP_PKEY_get0_provider(pkey))), "mtls-token", uri)
            XCTAssertLessThanOrEqual(i2d_PrivateKey(pkey, nil), 0, uri)
            var params: UnsafeMutablePointer<OSSL_PARAM>? = nil
            XCTAssertNotEqual(EVP_PKEY_todata(pkey, OSSL_KEYMGMT_SELECT_ALL_PARAMETERS | OSSL_KEYMGMT_SELECT_KEYPAIR, &params), 1, uri)
            OSSL_PARAM_free(params)
            var d: OpaquePointer? = nil
            XCTAssertNotEqual(EVP_PKEY_get_bn_param(pkey, "d", &d), 1, uri)
            XCTAssertNil(EVP_PKEY_dup(pkey), uri)
            // The public half is there, and is the certificate's.
            XCTAssertTrue(identity.privateKey.matches(identity.leaf), uri)
            OpenSSLErrorQueue.clear()
        }
    }

    /// What enrollment needs from the provider: OpenSSL signs an X.509 request with the token key
    /// (X509_REQ_sign asks the signature for its AlgorithmIdentifier), and the request verifies
    /// with the certificate's public key: RSA (sha256WithRSAEncryption), ECDSA, Ed25519.
    func testCertificateRequestsAreSignedOnTheToken() throws {
        for (uri, md) in [("pkcs11:token=mtls-test;id=%01", EVP_sha256()), ("pkcs11:token=mtls-test;id=%03", EVP_sha384()),
                          ("pkcs11:token=mtls-spare;id=%07", nil)] {
            let identity = try Token.identity(uri: uri, modulePath: module, pin: SoftHSMFixture.pin)
            let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
            let req = try XCTUnwrap(X509_REQ_new())
            defer { X509_REQ_free(req) }
            XCTAssertEqual(X509_REQ_set_pubkey(req, X509_get0_pubkey(identity.leaf.x509)), 1)
            XCTAssertGreaterThan(X509_REQ_sign(req, identity.privateKey.pkey, md), 0, "\(uri): \(OpenSSLErrorQueue.drain())")
            XCTAssertEqual(context.signatureCount.load(ordering: .relaxed), 1, uri)
            XCTAssertEqual(X509_REQ_verify(req, X509_get0_pubkey(identity.leaf.x509)), 1, uri)
        }
    }

    /// What `mtls enroll pki --token-uri` does in one process: libmtls's own CSR for a token key
    /// (RSA, P-256, Ed25519) passes a local CA's self-signature check, and the certificate issued
    /// for it carries the encoded key (not the token's key object: OpenSSL caches the object it is
    /// given, and the token provider signs but never verifies), which is the token key's public
    /// half. Before the CSR was parsed back from its DER, the check failed with `corrupt`.
    func testLocalCAIssuesForALibraryMadeCSROfATokenKey() throws {
        let root = try CertificateAuthority.newRoot(commonName: "CSR Root", keySpec: .ecP256)
        let ca = try CertificateAuthority(certificate: root.leaf, privateKey: root.privateKey)
        for uri in ["pkcs11:token=mtls-test;id=%01", "pkcs11:token=mtls-test;id=%02", "pkcs11:token=mtls-spare;id=%07"] {
            let key = try Token.signingKey(uri: uri, modulePath: module, pin: SoftHSMFixture.pin)
            let csr = try CertificateSigningRequest.make(subject: "CN=csr token", key: key)
            XCTAssertNoThrow(try csr.verifySelfSignature(), uri)
            XCTAssertNil(try csr.withPublicKey { TokenKey.context(pkey: $0) }, uri)
            let leaf = try ca.issue(CertificateRequest(profile: .client, commonName: "csr token"), csr: csr)
            let leafKey = try XCTUnwrap(X509_get0_pubkey(leaf.x509))
            XCTAssertNil(TokenKey.context(pkey: leafKey), uri)
            XCTAssertTrue(key.matches(leaf), uri)
            // The certificate's key is the token's (its certificate on the token has the same key).
            let identity = try Token.identity(uri: uri, modulePath: module, pin: SoftHSMFixture.pin)
            XCTAssertEqual(EVP_PKEY_eq(leafKey, X509_get0_pubkey(identity.leaf.x509)), 1, uri)
            OpenSSLErrorQueue.clear()
        }
    }

    /// The host program's default OpenSSL context never gets libmtls's provider; libmtls's own
    /// context (where its TLS contexts live) does not either: it has a context of its own.
    func testProviderIsOnlyInItsOwnLibraryContext() throws {
        _ = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: module, pin: SoftHSMFixture.pin)
        XCTAssertEqual(OSSL_PROVIDER_available(nil, "mtls-token"), 0)
        XCTAssertEqual(OSSL_PROVIDER_available(LibraryContext.shared.ctx, "mtls-token"), 0)
        XCTAssertEqual(OSSL_PROVIDER_available(try XCTUnwrap(LibraryContext.shared.tokenKeys), "mtls-token"), 1)
        // Fetches in libmtls's context get the default provider's algorithms.
        let sig = try XCTUnwrap(EVP_SIGNATURE_fetch(LibraryContext.shared.ctx, "ECDSA", nil))
        defer { EVP_SIGNATURE_free(sig) }
        XCTAssertEqual(String(cString: OSSL_PROVIDER_get0_name(EVP_SIGNATURE_get0_provider(sig))), "default")
    }

    /// A CKA_ALWAYS_AUTHENTICATE key: SoftHSM refuses C_Sign without the context-specific login,
    /// and libmtls makes one before each signature, with the PIN from the callback (asked again
    /// for every signature) or the static PIN.
    func testAlwaysAuthenticateKeyLogsInBeforeEachSignature() throws {
        let calls = Atomic<Int>(0)
        let identity = try Token.identity(uri: "pkcs11:token=mtls-spare;id=%08", modulePath: module) { request in
            XCTAssertEqual(request.tokenLabel, "mtls-spare")
            calls.add(1, ordering: .relaxed)
            return SoftHSMFixture.pin
        }
        let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
        XCTAssertNotNil(context.contextPIN)
        let before = calls.load(ordering: .relaxed)
        for i in 0..<3 {
            let message = Array("always \(i)".utf8)
            let signature = try Self.sign(message, with: identity.privateKey.pkey, padding: 0)
            XCTAssertTrue(try Self.verify(message, signature, with: X509_get0_pubkey(identity.leaf.x509)!, padding: 0))
        }
        XCTAssertEqual(context.contextLoginCount.load(ordering: .relaxed), 3)
        XCTAssertEqual(calls.load(ordering: .relaxed) - before, 3, "the PIN callback is asked for each signature")
        // In a TLS handshake, with the PIN given once.
        let tls = try Token.identity(uri: "pkcs11:token=mtls-spare;id=%08", modulePath: module, pin: SoftHSMFixture.pin)
        let tlsContext = try XCTUnwrap(TokenKey.context(of: tls.privateKey))
        for version in [TLS1_2_VERSION, TLS1_3_VERSION] {
            let server = try SServer(dir: SoftHSMFixture.dir, clientSigalgs: nil)
            _ = try handshake(port: server.port, identity: tls, version: version)
            XCTAssertTrue(server.finish().contains("subject=CN = token always-auth"))
        }
        XCTAssertEqual(tlsContext.contextLoginCount.load(ordering: .relaxed), 2)
        // A wrong PIN for the context-specific login is pinIncorrect, not a generic failure.
        let wrong = try Token.identity(uri: "pkcs11:token=mtls-spare;id=%08", modulePath: module) { _ in
            calls.add(1, ordering: .relaxed)
            return calls.load(ordering: .relaxed) <= before + 4 ? SoftHSMFixture.pin : SecretBytes("0000")
        }
        XCTAssertThrowsError(try Self.sign(Array("x".utf8), with: wrong.privateKey.pkey, padding: 0))
        OpenSSLErrorQueue.clear()
    }

    /// A CSR signed by a CKA_ALWAYS_AUTHENTICATE key (`mtls token csr`, Python's `make_csr`):
    /// the key made for it logs in before its signature as the handshake's does (one key
    /// context). Before, C_Sign failed with pinRequired (CKR_USER_NOT_LOGGED_IN).
    func testCSRForAnAlwaysAuthenticateKeyLogsInBeforeSigning() throws {
        let uri = "pkcs11:token=mtls-spare;id=%08"
        let key = try Token.signingKey(uri: uri, modulePath: module, pin: SoftHSMFixture.pin)
        let context = try XCTUnwrap(TokenKey.context(of: key))
        XCTAssertNotNil(context.contextPIN)
        let csr = try Token.makeCSR(uri: uri, subject: "CN=always csr", modulePath: module, pin: SoftHSMFixture.pin)
        XCTAssertNoThrow(try csr.verifySelfSignature())
        let again = try CertificateSigningRequest.make(subject: "CN=always csr 2", key: key)
        XCTAssertNoThrow(try again.verifySelfSignature())
        XCTAssertEqual(context.contextLoginCount.load(ordering: .relaxed), 1)
        // With a PIN callback, asked for the login and again for the signature.
        let calls = Atomic<Int>(0)
        let byCallback = try Token.makeCSR(uri: uri, subject: "CN=always csr 3", modulePath: module) { _ in
            calls.add(1, ordering: .relaxed)
            return SoftHSMFixture.pin
        }
        XCTAssertNoThrow(try byCallback.verifySelfSignature())
        XCTAssertEqual(calls.load(ordering: .relaxed), 2)
    }

    /// Token URIs leave out a module's padding, NULs as blanks (tpm2-pkcs11 pads its model with
    /// NULs: the URIs read model=SW%20%20%20TPM%00...), and a URI printed with the NULs still
    /// names the token.
    func testTokenURIsTrimNULAndBlankPadding() throws {
        var info = CK_TOKEN_INFO()
        func fill<T>(_ field: inout T, _ text: String, pad: UInt8) {
            withUnsafeMutableBytes(of: &field) { p in
                for i in 0..<p.count { p[i] = pad }
                for (i, b) in text.utf8.enumerated() { p[i] = b }
            }
        }
        fill(&info.label, "tpm token", pad: 0x20)
        fill(&info.manufacturerID, "IBM", pad: 0)
        fill(&info.model, "SW   TPM", pad: 0)
        fill(&info.serialNumber, "0000000000000000", pad: 0x20)
        let uri = try P11KitURI.format(token: info, label: "k", id: [1], cls: CK_OBJECT_CLASS(CKO_PRIVATE_KEY))
        XCTAssertFalse(uri.contains("%00"), uri)
        XCTAssertTrue(uri.contains("model=SW%20%20%20TPM;") && uri.contains("manufacturer=IBM;"), uri)
        XCTAssertTrue(try P11KitURI(uri).matches(token: info), uri)
        let old = "pkcs11:model=SW%20%20%20TPM%00%00%00%00%00%00%00%00;manufacturer=IBM;serial=0000000000000000;token=tpm%20token"
        XCTAssertTrue(try P11KitURI(old).matches(token: info))
        XCTAssertEqual(try PKCS11URI(old).model, "SW   TPM")
        XCTAssertFalse(try P11KitURI("pkcs11:model=SW%20%20%20TPM2").matches(token: info))
    }

    func testIdentityByObjectLabelWithPINFromURIAndFromPINSource() throws {
        let a = try Token.identity(uri: "pkcs11:token=mtls-test;object=rsa-client?pin-value=1234", modulePath: module)
        XCTAssertEqual(a.leaf.subjectSummary, "token rsa-client")
        let b = try Token.identity(uri: "pkcs11:token=mtls-test;object=p384-client;type=private?pin-source=file:\(SoftHSMFixture.dir)/pin",
                                   modulePath: module)
        XCTAssertEqual(b.privateKey.keyType.shortName, "p384")
        let c = try Token.identity(uri: "pkcs11:token=mtls-test;object=ec-client?module-path=\(module)", pin: SoftHSMFixture.pin)
        XCTAssertEqual(c.leaf.subjectSummary, "token ec-client")
    }

    func testURINamingTheKeyFindsTheCertificateByTheKeyID() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-spare;object=spare-key;type=private", modulePath: module,
                                          pin: SoftHSMFixture.pin)
        XCTAssertEqual(identity.friendlyName, "spare-cert")
        XCTAssertEqual(identity.localKeyID, [3])
        XCTAssertEqual(try PKCS11URI(try XCTUnwrap(identity.privateKey.tokenURI)).object, "spare-key")
    }

    func testPINCallbackIsAskedWithTheTokenLabel() throws {
        let asked = LockedBox<[String]>([])
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%01", modulePath: module) { request in
            asked.mutate { $0.append(request.tokenLabel) }
            return SoftHSMFixture.pin
        }
        XCTAssertEqual(asked.value, ["mtls-test"])
        XCTAssertEqual(identity.leaf.subjectSummary, "token rsa-client")
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-test;id=%01", modulePath: module) { _ in nil }) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinRequired)
        }
    }

    func testTokenSignaturesVerifyWithTheCertificateKey() throws {
        for (id, padding) in [("%01", RSA_PKCS1_PADDING), ("%01", RSA_PKCS1_PSS_PADDING), ("%02", 0), ("%03", 0)] {
            let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=\(id)", modulePath: module, pin: SoftHSMFixture.pin)
            let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
            let message = Array("libmtls token test \(id) \(padding)".utf8)
            let signature = try Self.sign(message, with: identity.privateKey.pkey, padding: padding)
            XCTAssertEqual(context.signatureCount.load(ordering: .relaxed), 1, "signed on the token")
            XCTAssertTrue(try Self.verify(message, signature, with: X509_get0_pubkey(identity.leaf.x509)!, padding: padding), "\(id) \(padding)")
        }
    }

    /// An ECDSA signature from the token is encoded into the caller's buffer: one of the key's
    /// maximum size (what OpenSSL's own callers give) is written at once, a smaller one is
    /// measured first and refused when the encoding does not fit, never written past.
    func testTokenECDSASignatureFitsTheBufferOrIsRefused() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: module, pin: SoftHSMFixture.pin)
        let pkey = identity.privateKey.pkey
        let message = Array("libmtls buffer sizes".utf8)
        let maxSize = Int(EVP_PKEY_get_size(pkey))
        XCTAssertEqual(maxSize, 72, "P-256: the largest DER ECDSA-Sig-Value")
        for size in [maxSize, maxSize + 40, 16] {
            let md = EVP_MD_CTX_new()!
            defer { EVP_MD_CTX_free(md) }
            XCTAssertEqual(EVP_DigestSignInit(md, nil, EVP_sha256(), nil, pkey), 1)
            var buffer = [UInt8](repeating: 0xA5, count: size + 8)  // 8 guard bytes after the buffer
            var len = size
            let ok = EVP_DigestSign(md, &buffer, &len, message, message.count) == 1
            XCTAssertEqual(Array(buffer[size...]), [UInt8](repeating: 0xA5, count: 8), "nothing written past \(size) bytes")
            if size < 70 {
                XCTAssertFalse(ok, "\(size) bytes cannot hold a P-256 signature")
            } else {
                XCTAssertTrue(ok, "\(size) bytes")
                XCTAssertTrue((8...maxSize).contains(len), "\(len)")
                XCTAssertTrue(try Self.verify(message, Array(buffer.prefix(len)), with: X509_get0_pubkey(identity.leaf.x509)!, padding: 0))
            }
            ERR_clear_error()
        }
    }

    /// One token identity shared by several threads: signatures are serialised on its session
    /// (PKCS#11 forbids concurrent use of a session) and every one verifies.
    func testConcurrentSignaturesOnOneTokenKeyAllVerify() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: module, pin: SoftHSMFixture.pin)
        let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
        let failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for i in 0..<10 {
                let message = Array("thread \(thread) signature \(i)".utf8)
                guard let sig = try? Self.sign(message, with: identity.privateKey.pkey, padding: 0),
                      (try? Self.verify(message, sig, with: X509_get0_pubkey(identity.leaf.x509)!, padding: 0)) == true else {
                    failures.add(1, ordering: .relaxed)
                    continue
                }
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0)
        XCTAssertEqual(context.signatureCount.load(ordering: .relaxed), 40)
    }

    func testWrongPINIsPinIncorrect() throws {
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-spare;object=spare", modulePath: module, pin: SecretBytes("0000"))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinIncorrect, "\($0)")
        }
    }

    func testLockedPINIsPinLockedWithoutTryingThePIN() throws {
        let locked = try XCTUnwrap(PKCS11Modules(modulePath: module).tokens().first { $0.label == "mtls-locked" })
        XCTAssertTrue(locked.userPINLocked)
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-locked;object=locked", modulePath: module, pin: SoftHSMFixture.pin)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinLocked, "\($0)")
        }
    }

    func testMissingPINIsPinRequired() throws {
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-spare;object=spare", modulePath: module)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .pinRequired, "\($0)")
        }
    }

    func testMissingTokenLabelIsTokenNotPresent() throws {
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=no-such-token;id=%01", modulePath: module, pin: SoftHSMFixture.pin)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .tokenNotPresent, "\($0)")
        }
    }

    func testMissingObjectIsNotFoundAndAmbiguousURIIsBadURI() throws {
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-test;id=%99", modulePath: module, pin: SoftHSMFixture.pin)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .notFound, "\($0)")
        }
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-empty", modulePath: module, pin: SoftHSMFixture.pin)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .notFound, "\($0)")
        }
        XCTAssertThrowsError(try Token.identity(uri: "pkcs11:token=mtls-test", modulePath: module, pin: SoftHSMFixture.pin)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .badURI, "\($0)")
        }
    }

    /// A lost session on a token that is still there comes back (new session, login, key found
    /// again by its id); a session that cannot come back reports tokenRemoved. (A real removal,
    /// the token's files moved away and back, is tested in Tests/c/test_token_field.c.)
    func testLostSessionComesBackAndOtherwiseIsTokenRemoved() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%02", modulePath: module, pin: SoftHSMFixture.pin)
        let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
        context.session.closeAllSessions()
        let digest = [UInt8](repeating: 1, count: 32)
        try digest.withUnsafeBufferPointer { input in
            let signature = try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_ECDSA), input: input, maxLength: 64)
            XCTAssertEqual(signature.count, 64)
            context.session.reconnection = nil
            context.session.closeAllSessions()
            XCTAssertThrowsError(try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_ECDSA), input: input, maxLength: 64)) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .tokenRemoved, "\($0)")
            }
        }
    }

    /// libmtls's own TLS client with a token identity; every session closed under it: the next
    /// handshake reconnects; a session that cannot come back fails with tokenRemoved, not a
    /// generic handshake error.
    func testTLSConnectionSignsOnTheTokenAndReportsARemovedToken() throws {
        let identity = try Token.identity(uri: "pkcs11:token=mtls-test;id=%01", modulePath: module, pin: SoftHSMFixture.pin)
        let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
        var options = TLSClientOptions()
        options.identity = .identity(identity)
        let policy = TrustPolicy()
        policy.addAnchor(try Certificate.load(path: SoftHSMFixture.dir + "/ca.pem")[0])
        policy.anchorsOnly = true
        options.policy = policy
        options.sessionResumption = false
        options.handshakeSeconds = 10
        for version in [TLSVersion.tls12, .tls13] {
            options.minVersion = version
            options.maxVersion = version
            let server = try SServer(dir: SoftHSMFixture.dir, clientSigalgs: nil)
            let before = context.signatureCount.load(ordering: .relaxed)
            let conn = try TLSConnection.connect(host: "127.0.0.1", port: server.port, options: options)
            _ = try conn.write(Array("ping\n".utf8))
            conn.close()
            let log = server.finish()
            XCTAssertEqual(context.signatureCount.load(ordering: .relaxed), before + 1, "\(version)")
            XCTAssertTrue(log.contains("subject=CN = token rsa-client"), log)
        }
        // Every session closed under the identity, the token still there: the next handshake
        // reconnects and signs.
        context.session.closeAllSessions()
        var server = try SServer(dir: SoftHSMFixture.dir, clientSigalgs: nil)
        let again = try TLSConnection.connect(host: "127.0.0.1", port: server.port, options: options)
        again.close()
        _ = server.finish()
        // A session that cannot come back: the handshake says tokenRemoved, not a generic failure.
        context.session.reconnection = nil
        context.session.closeAllSessions()
        server = try SServer(dir: SoftHSMFixture.dir, clientSigalgs: nil)
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: server.port, options: options)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .tokenRemoved, "\($0)")
        }
        _ = server.finish()
    }

    func testPKCS11ReturnValuesMapToTheirOwnCodes() {
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_PIN_INCORRECT)), .pinIncorrect)
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_PIN_LOCKED)), .pinLocked)
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_TOKEN_NOT_PRESENT)), .tokenNotPresent)
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_DEVICE_REMOVED)), .tokenRemoved)
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_SESSION_HANDLE_INVALID)), .tokenRemoved)
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_USER_NOT_LOGGED_IN)), .pinRequired)
        XCTAssertEqual(PKCS11.code(CK_RV(CKR_FUNCTION_FAILED)), .token)
    }

    /// The proof that TLS signs on the token: `openssl s_server -Verify 1 -verify_return_error`
    /// accepts a client whose key exists only on the token, for RSA (PKCS#1 v1.5 in TLS 1.2,
    /// RSA-PSS in TLS 1.2 and 1.3) and ECDSA P-256/P-384, with a TLS context made the way
    /// libmtls makes them (in its own library context).
    func testTLSHandshakesSignOnTheToken() throws {
        let cases: [(id: String, version: Int32, clientSigalgs: String?, expectSig: Int32)] = [
            ("mtls-test;id=%01", TLS1_2_VERSION, "RSA+SHA256", NID_rsaEncryption),
            ("mtls-test;id=%01", TLS1_2_VERSION, nil, NID_rsassaPss),
            ("mtls-test;id=%01", TLS1_3_VERSION, nil, NID_rsassaPss),
            ("mtls-test;id=%02", TLS1_2_VERSION, nil, NID_X9_62_id_ecPublicKey),
            ("mtls-test;id=%02", TLS1_3_VERSION, nil, NID_X9_62_id_ecPublicKey),
            ("mtls-test;id=%03", TLS1_2_VERSION, nil, NID_X9_62_id_ecPublicKey),
            ("mtls-test;id=%03", TLS1_3_VERSION, nil, NID_X9_62_id_ecPublicKey),
            ("mtls-spare;id=%07", TLS1_2_VERSION, nil, NID_ED25519),
            ("mtls-spare;id=%07", TLS1_3_VERSION, nil, NID_ED25519),
        ]
        for c in cases {
            let identity = try Token.identity(uri: "pkcs11:token=\(c.id)", modulePath: module, pin: SoftHSMFixture.pin)
            let context = try XCTUnwrap(TokenKey.context(of: identity.privateKey))
            let server = try SServer(dir: SoftHSMFixture.dir, clientSigalgs: c.clientSigalgs)
            let result: (Int32, Int32)
            do { result = try handshake(port: server.port, identity: identity, version: c.version) } catch {
                XCTFail("\(error)\n\(server.finish())"); continue
            }
            let (version, sigNID) = result
            let serverLog = server.finish()
            let what = "\(c.id) \(c.version) \(c.clientSigalgs ?? "")"
            XCTAssertEqual(version, c.version, what)
            XCTAssertEqual(sigNID, c.expectSig, what)
            XCTAssertGreaterThanOrEqual(context.signatureCount.load(ordering: .relaxed), 1, "the token signed: \(what)")
            XCTAssertTrue(serverLog.contains("subject=CN = token"), "s_server saw the client certificate: \(what)\n\(serverLog)")
        }
    }

    /// `openssl s_server` on a free port, requiring a client certificate from the test CA.
    final class SServer {
        let process = Process()
        let output = Pipe()
        /// Kept open: s_server quits when its stdin ends.
        let input = Pipe()
        var port: UInt16 = 0
        var log = ""

        init(dir: String, clientSigalgs: String?) throws {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = ["s_server", "-accept", "127.0.0.1:0", "-naccept", "1", "-cert", dir + "/server.pem",
                                 "-key", dir + "/server.key", "-CAfile", dir + "/ca.pem", "-Verify", "1",
                                 "-verify_return_error"] + (clientSigalgs.map { ["-client_sigalgs", $0] } ?? [])
            process.standardOutput = output
            process.standardError = output
            process.standardInput = input
            try process.run()
            let handle = output.fileHandleForReading
            while port == 0 {
                let data = handle.availableData
                if data.isEmpty { throw MTLSError(.connect, "s_server exited: \(log)") }
                log += String(decoding: data, as: UTF8.self)
                if let line = log.split(separator: "\n").first(where: { $0.hasPrefix("ACCEPT ") }),
                   let p = line.split(separator: ":").last.flatMap({ UInt16($0) }) {
                    port = p
                }
            }
        }

        /// Waits (up to 10 s) for the server to print what the client sent, then stops it.
        func finish() -> String {
            let handle = output.fileHandleForReading
            let deadline = Date().addingTimeInterval(10)
            while !log.contains("ping"), Date() < deadline {
                let data = handle.availableData
                if data.isEmpty { break }
                log += String(decoding: data, as: UTF8.self)
            }
            process.terminate()
            process.waitUntilExit()
            log += String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
            return log
        }
    }

    /// A TLS client handshake with raw OpenSSL in libmtls's library context; returns the
    /// negotiated version and the NID of the signature type the client used.
    private func handshake(port: UInt16, identity: Identity, version: Int32) throws -> (Int32, Int32) {
        let ctx = try XCTUnwrap(SSL_CTX_new_ex(LibraryContext.shared.ctx, nil, TLS_client_method()))
        defer { SSL_CTX_free(ctx) }
        _ = mtls_ossl_SSL_CTX_set_min_proto_version(ctx, version)
        _ = mtls_ossl_SSL_CTX_set_max_proto_version(ctx, version)
        XCTAssertEqual(SSL_CTX_use_certificate(ctx, identity.leaf.x509), 1)
        XCTAssertEqual(SSL_CTX_use_PrivateKey(ctx, identity.privateKey.pkey), 1, "\(OpenSSLErrorQueue.drain())")
        XCTAssertEqual(SSL_CTX_load_verify_locations(ctx, SoftHSMFixture.dir + "/ca.pem", nil), 1)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        let ssl = try XCTUnwrap(SSL_new(ctx))
        defer { SSL_free(ssl) }
        let bio = try XCTUnwrap(BIO_new_connect("127.0.0.1:\(port)"))
        SSL_set_bio(ssl, bio, bio)
        let rc = SSL_connect(ssl)
        guard rc == 1 else {
            throw MTLSError.openSSL(.handshake, "handshake failed (SSL_connect \(rc), SSL_get_error \(SSL_get_error(ssl, rc)), errno \(errno))")
        }
        // TLS 1.3 sends the client's CertificateVerify after the server's Finished: a round trip
        // makes sure the server has processed (and accepted) it.
        let ping = Array("ping\n".utf8)
        XCTAssertEqual(SSL_write(ssl, ping, Int32(ping.count)), Int32(ping.count))
        var nid: Int32 = 0
        _ = SSL_get_signature_type_nid(ssl, &nid)
        let v = SSL_version(ssl)
        _ = SSL_shutdown(ssl)
        return (v, nid)
    }

    // MARK: helpers (raw OpenSSL, so the proof does not depend on libmtls's own code)

    private static func sign(_ message: [UInt8], with pkey: OpaquePointer, padding: Int32) throws -> [UInt8] {
        let md = EVP_MD_CTX_new()!
        defer { EVP_MD_CTX_free(md) }
        var pctx: OpaquePointer? = nil
        XCTAssertEqual(EVP_DigestSignInit(md, &pctx, EVP_sha256(), nil, pkey), 1)
        if padding != 0 { XCTAssertEqual(EVP_PKEY_CTX_set_rsa_padding(pctx, padding), 1) }
        var len = 0
        XCTAssertEqual(EVP_DigestSign(md, nil, &len, message, message.count), 1)
        var sig = [UInt8](repeating: 0, count: len)
        guard EVP_DigestSign(md, &sig, &len, message, message.count) == 1 else {
            throw MTLSError.openSSL(.token, "EVP_DigestSign failed")
        }
        return Array(sig.prefix(len))
    }

    private static func verify(_ message: [UInt8], _ sig: [UInt8], with pkey: OpaquePointer, padding: Int32) throws -> Bool {
        let md = EVP_MD_CTX_new()!
        defer { EVP_MD_CTX_free(md) }
        var pctx: OpaquePointer? = nil
        XCTAssertEqual(EVP_DigestVerifyInit(md, &pctx, EVP_sha256(), nil, pkey), 1)
        if padding != 0 { XCTAssertEqual(EVP_PKEY_CTX_set_rsa_padding(pctx, padding), 1) }
        return EVP_DigestVerify(md, sig, sig.count, message, message.count) == 1
    }
}
