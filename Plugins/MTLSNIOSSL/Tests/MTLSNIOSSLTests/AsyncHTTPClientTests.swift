import AsyncHTTPClient
import Foundation
import MTLS
import MTLSAsyncHTTPClient
import MTLSNIOSSL
import NIOCore
import NIOPosix
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

    /// AsyncHTTPClient configured by `HTTPClient.Configuration(mtls:)` (libmtls decides), HTTP/1.1
    /// over `version` only, no connection retries unless `retry`.
    func configuration(_ tls: MTLSClientTLS, version: NIOSSL.TLSVersion, retry: Bool = false) -> HTTPClient.Configuration {
        var tls = tls
        tls.tlsConfiguration.minimumTLSVersion = version
        tls.tlsConfiguration.maximumTLSVersion = version
        var configuration = HTTPClient.Configuration(mtls: tls)
        configuration.httpVersion = .http1Only
        configuration.connectionPool.retryConnectionEstablishment = retry
        return configuration
    }

    /// GET https://127.0.0.1:PORT/ with `tls` (see ``configuration(_:version:retry:)``); the body,
    /// or the error the request failed with.
    func get(_ tls: MTLSClientTLS, port: Int, version: NIOSSL.TLSVersion) async throws -> String {
        try await get(configuration(tls, version: version), port: port)
    }

    func get(_ configuration: HTTPClient.Configuration, port: Int, timeout: TimeAmount = .seconds(20)) async throws -> String {
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            let response = try await client.execute(HTTPClientRequest(url: "https://127.0.0.1:\(port)/"), timeout: timeout)
            let body = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            XCTAssertEqual(response.status, .ok)
            return String(buffer: body)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// The refusal `error` must be: libmtls's, with one of `codes` among its reasons, its code and
    /// message in the text the caller prints.
    func assertRefusedByLibmtls(_ error: Error, with codes: [String], file: StaticString = #filePath, line: UInt = #line) {
        guard let rejected = error as? MTLSPeerRejected else {
            return XCTFail("refused, but not by libmtls: \(error)", file: file, line: line)
        }
        XCTAssertFalse(rejected.result.trusted, file: file, line: line)
        guard let reason = rejected.result.reasons.first(where: { codes.contains($0.code) }) else {
            return XCTFail("libmtls refused for other reasons than \(codes): \(rejected)", file: file, line: line)
        }
        XCTAssertFalse(reason.message.isEmpty, file: file, line: line)
        XCTAssertTrue("\(error)".contains("\(reason.code): \(reason.message)"), "\(error)", file: file, line: line)
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
        for version in [NIOSSL.TLSVersion.tlsv13, .tlsv12] {
            do {
                let body = try await get(tls, port: server.port, version: version)
                XCTFail("\(version): a server that matches no pin was trusted: \(body)")
            } catch {
                assertRefusedByLibmtls(error, with: [TrustReason.Code.pinMismatch])
            }
        }
    }

    func testRightPinGETs() async throws {
        let server = try Self.server.get()
        let pin = SPKIPin(certificate: try Fixture.certificate("server"))
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy(), overrides: TrustOverrides(pins: [pin]))
        let body = try await get(tls, port: server.port, version: .tlsv13)
        XCTAssertTrue(body.contains("client-a"), body)
    }

    /// The other server has a valid certificate for server.test, from a root nobody pinned:
    /// AsyncHTTPClient's caller sees libmtls's refusal (its code and message), TLS 1.3 and 1.2,
    /// and also with AsyncHTTPClient's connection retries on (the request then fails at its
    /// deadline with the last connection's error).
    func testServerOutsideThePinnedAnchorIsRefusedWithLibmtlsReason() async throws {
        let other = try Self.otherServer.get()
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy())
        let outside = [TrustReason.Code.unknownIssuer, TrustReason.Code.untrustedRoot]
        for version in [NIOSSL.TLSVersion.tlsv13, .tlsv12] {
            do {
                let body = try await get(tls, port: other.port, version: version)
                XCTFail("\(version): a server outside the pinned root was trusted: \(body)")
            } catch {
                assertRefusedByLibmtls(error, with: outside)
            }
        }
        do {
            let body = try await get(configuration(tls, version: .tlsv13, retry: true), port: other.port, timeout: .seconds(2))
            XCTFail("a server outside the pinned root was trusted: \(body)")
        } catch {
            assertRefusedByLibmtls(error, with: outside)
        }
    }

    /// A 127.0.0.1 port nothing listens on: bound (an ephemeral port), then closed.
    static func closedPort() throws -> Int {
        let channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).wait()
        let port = channel.localAddress?.port ?? 0
        try channel.close().wait()
        guard port > 0 else { throw MTLSError(.internal, "no ephemeral port") }
        return port
    }

    /// Issue 38: `HTTPClient.Configuration(mtls:)` turns connection retries off, so a server
    /// libmtls refuses, and a port that refuses the TCP connection, fail the request at once (not
    /// at its 20 s deadline) with their own error.
    func testConfigurationReportsRefusalsAtOnce() async throws {
        let other = try Self.otherServer.get()
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy())
        var configuration = HTTPClient.Configuration(mtls: tls)
        XCTAssertFalse(configuration.connectionPool.retryConnectionEstablishment)
        configuration.httpVersion = .http1Only
        var started = Date()
        do {
            let body = try await get(configuration, port: other.port, timeout: .seconds(20))
            XCTFail("a server outside the pinned root was trusted: \(body)")
        } catch {
            assertRefusedByLibmtls(error, with: [TrustReason.Code.unknownIssuer, TrustReason.Code.untrustedRoot])
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "libmtls's refusal should fail the request at once")
        // A port where nothing listens: the connection is refused, and so is the request, at once.
        let closedPort = try Self.closedPort()
        started = Date()
        do {
            let body = try await get(configuration, port: Int(closedPort), timeout: .seconds(20))
            XCTFail("a closed port answered: \(body)")
        } catch {
            XCTAssertFalse("\(error)".lowercased().contains("deadline"), "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "a refused connection should fail the request at once")
    }

    /// ``MTLSClientTLS/tlsConfiguration`` alone, without libmtls's connection verifier (a stack
    /// that takes no callback): BoringSSL still refuses a server outside the pinned root.
    func testTLSConfigurationAloneRefusesServerOutsideThePinnedAnchor() async throws {
        let other = try Self.otherServer.get()
        let tls = try MTLSClientTLS(identity: try p12Identity("client-a"), policy: try seedPolicy())
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls.tlsConfiguration)
        configuration.httpVersion = .http1Only
        configuration.connectionPool.retryConnectionEstablishment = false
        do {
            let body = try await get(configuration, port: other.port)
            XCTFail("a server outside the pinned root was trusted: \(body)")
        } catch {
            XCTAssertTrue("\(error)".contains("CERTIFICATE_VERIFY_FAILED"), "\(error)")
        }
    }
}
