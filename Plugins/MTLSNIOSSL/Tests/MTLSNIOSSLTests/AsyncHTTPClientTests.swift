import AsyncHTTPClient
import Foundation
import MTLS
import MTLSNIOSSL
import NIOCore
import NIOSSL
import XCTest

/// AsyncHTTPClient with MTLSNIOSSL against nginx requiring client certificates: the client
/// connects by 127.0.0.1, validates the server as server.test (a host rule), pins the root.
final class AsyncHTTPClientTests: XCTestCase {
    static let server: Result<NginxServer, Error> = Result {
        try Fixture.make()
        let pki = Fixture.pki
        return try NginxServer(name: "a", serverChain: pki + "/server-chain.pem", serverKey: pki + "/server.key",
                               clientCAs: Fixture.dir + "/client-cas.pem")
    }
    static let otherServer: Result<NginxServer, Error> = Result {
        try Fixture.make()
        let pki = Fixture.pki
        return try NginxServer(name: "other", serverChain: pki + "/other-server-chain.pem", serverKey: pki + "/other-server.key",
                               clientCAs: Fixture.dir + "/client-cas.pem")
    }

    override class func tearDown() {
        (try? server.get())?.stop()
        (try? otherServer.get())?.stop()
    }

    /// The seed policy: only the pinned root, and 127.0.0.1 validated as server.test.
    func seedPolicy() throws -> TrustPolicy {
        let policy = TrustPolicy(anchors: [try Fixture.certificate("root")], anchorsOnly: true)
        policy.addHostRule(HostRule(pattern: try HostPattern("127.0.0.1"), verifyAs: "server.test"))
        return policy
    }

    func p12Identity(_ name: String) throws -> Identity {
        try PKCS12.load(path: "\(Fixture.pki)/\(name).p12", password: SecretBytes("pw")).requireIdentity()
    }

    func tokenIdentity(_ object: String) throws -> Identity {
        try Token.identity(uri: "pkcs11:token=mtls-test;object=\(object)", modulePath: Fixture.module, pin: SecretBytes("1234"))
    }

    /// GET https://127.0.0.1:PORT/ with `tls`; the body, or the error the request failed with.
    func get(_ tls: MTLSClientTLS, port: Int, version: NIOSSL.TLSVersion) async throws -> String {
        var tlsConfiguration = tls.tlsConfiguration
        tlsConfiguration.minimumTLSVersion = version
        tlsConfiguration.maximumTLSVersion = version
        var configuration = HTTPClient.Configuration(tlsConfiguration: tlsConfiguration)
        configuration.httpVersion = .http1Only
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.http1_1ConnectionDebugInitializer = tls.connectionVerifier
        configuration.http2ConnectionDebugInitializer = tls.connectionVerifier
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            let response = try await client.execute(HTTPClientRequest(url: "https://127.0.0.1:\(port)/"), timeout: .seconds(20))
            let body = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            XCTAssertEqual(response.status, .ok)
            return String(buffer: body)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    func testP12IdentityGETsByAddressValidatingAsTheNameTLS13AndTLS12() async throws {
        let server = try Self.server.get()
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy())
        for version in [NIOSSL.TLSVersion.tlsv13, .tlsv12] {
            let body = try await get(tls, port: server.port, version: version)
            XCTAssertTrue(body.hasPrefix("hello "), "\(version): \(body)")
            XCTAssertTrue(body.contains("client-a"), "\(version): nginx saw \(body)")
        }
    }

    func testP12KeySignedByLibmtlsGETs() async throws {
        let server = try Self.server.get()
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy(), keyUse: .alwaysLibmtls)
        for version in [NIOSSL.TLSVersion.tlsv13, .tlsv12] {
            let body = try await get(tls, port: server.port, version: version)
            XCTAssertTrue(body.contains("client-a"), "\(version): \(body)")
        }
    }

    /// The key is generated on the SoftHSM token: no copy exists, so nginx accepting the client
    /// proves the token signed (through MTLSSigningKey, off the event loop). EC and RSA keys,
    /// TLS 1.3 (ECDSA, RSA-PSS) and TLS 1.2.
    func testTokenIdentityGETsTLS13AndTLS12() async throws {
        let server = try Self.server.get()
        for object in ["ec-client", "rsa-client"] {
            let identity = try tokenIdentity(object)
            XCTAssertNotNil(identity.privateKey.tokenURI)
            // The server's issuing CA: the token identity's own chain is the token CA's.
            let tls = try MTLSClientTLS(identity: identity, policy: try seedPolicy(), intermediates: [try Fixture.certificate("int-a")])
            for version in [NIOSSL.TLSVersion.tlsv13, .tlsv12] {
                let body = try await get(tls, port: server.port, version: version)
                XCTAssertTrue(body.hasPrefix("hello "), "\(object) \(version): \(body)")
                XCTAssertTrue(body.contains("CN="), "\(object) \(version): nginx saw no client: \(body)")
            }
        }
    }

    func testWrongPinIsRefusedWithLibmtlsReason() async throws {
        let server = try Self.server.get()
        let wrongPin = try SPKIPin("sha256/" + Data(repeating: 7, count: 32).base64EncodedString())
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy(),
                                    overrides: TrustOverrides(pins: [wrongPin]))
        do {
            let body = try await get(tls, port: server.port, version: .tlsv13)
            XCTFail("a server that matches no pin was trusted: \(body)")
        } catch let rejected as MTLSPeerRejected {
            XCTAssertTrue(rejected.result.reasonCodes.contains(TrustReason.Code.pinMismatch), "\(rejected)")
            XCTAssertTrue("\(rejected)".contains("pin_mismatch"), "\(rejected)")
        }
    }

    func testRightPinGETs() async throws {
        let server = try Self.server.get()
        let pin = SPKIPin(certificate: try Fixture.certificate("server"))
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy(), overrides: TrustOverrides(pins: [pin]))
        let body = try await get(tls, port: server.port, version: .tlsv13)
        XCTAssertTrue(body.contains("client-a"), body)
    }

    /// The other server has a valid certificate for server.test, from a root nobody pinned.
    func testServerOutsideThePinnedAnchorIsRefused() async throws {
        let other = try Self.otherServer.get()
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy())
        do {
            let body = try await get(tls, port: other.port, version: .tlsv13)
            XCTFail("a server outside the pinned root was trusted: \(body)")
        } catch {
            // BoringSSL refuses it first (its trust store holds only the pinned root).
            XCTAssertTrue("\(error)".contains("CERTIFICATE_VERIFY_FAILED"), "\(error)")
        }
        // Judged by libmtls alone (no BoringSSL trust store): refused with libmtls's reason.
        var config = tls.tlsConfiguration
        config.certificateVerification = .none
        let open = MTLSClientTLS(copying: tls, tlsConfiguration: config)
        do {
            let body = try await get(open, port: other.port, version: .tlsv13)
            XCTFail("a server outside the pinned root was trusted: \(body)")
        } catch let rejected as MTLSPeerRejected {
            XCTAssertFalse(rejected.result.trusted)
            XCTAssertTrue(rejected.result.reasonCodes.contains { ["untrusted_root", "unknown_issuer"].contains($0) }, "\(rejected)")
        }
    }
}

extension MTLSClientTLS {
    init(copying other: MTLSClientTLS, tlsConfiguration: TLSConfiguration) {
        self = other
        self.tlsConfiguration = tlsConfiguration
    }
}
