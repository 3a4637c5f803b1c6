import COpenSSL
import Foundation
import XCTest
@testable import MTLS

/// An `SSL_CTX` the application owns, configured with ``SSLContextConfiguration``, against
/// `openssl s_server`: the name the application sets on its `SSL` is the one checked, and an
/// `SSL` with no name at all is refused rather than accepted without a name check.
/// (An extension, to share the PKI and `s_server` helpers of ``TLSConnectionTests``.)
extension TLSConnectionTests {
    /// One handshake on a fresh `SSL` of `ctx`; `prepare` sets what the application would
    /// (SSL_set1_host, SNI). Returns whether it succeeded, OpenSSL's verify result and our evaluation.
    func handshake(_ ctx: OpaquePointer, port: UInt16, prepare: (OpaquePointer) -> Void) throws
        -> (ok: Bool, verifyResult: Int, evaluation: TrustResult?) {
        let fd = try Socket.connect(host: "127.0.0.1", port: port, deadline: Deadline(seconds: 10))
        defer { close(fd) }
        Socket.setNonBlocking(fd, false)
        let ssl = try XCTUnwrap(SSL_new(ctx))
        defer { SSL_free(ssl) }
        XCTAssertEqual(SSL_set_fd(ssl, fd), 1)
        prepare(ssl)
        let ok = SSL_connect(ssl) == 1
        if ok { _ = SSL_shutdown(ssl) }
        ERR_clear_error()
        return (ok, SSL_get_verify_result(ssl), TLSHandshakeState.of(ssl)?.evaluation)
    }

    func applicationContext(policy: TrustPolicy) throws -> OpaquePointer {
        let ctx = try XCTUnwrap(SSL_CTX_new(TLS_client_method()))
        try SSLContextConfiguration.configure(sslContext: UnsafeMutableRawPointer(ctx), identity: identity("client-a"),
                                              policy: policy)
        return ctx
    }

    func testApplicationSSLWithNoHostAndNoSNIIsRefusedAsNoPeerName() throws {
        let port = Self.freePort()
        let server = try startSServer(sserverArgs(), port: port)
        defer { server.terminate() }
        let ctx = try applicationContext(policy: policy(["root"]))
        defer { SSL_CTX_free(ctx) }

        let none = try handshake(ctx, port: port) { _ in }
        XCTAssertFalse(none.ok, "a server must not be accepted without a name check")
        XCTAssertEqual(none.verifyResult, Int(X509_V_ERR_HOSTNAME_MISMATCH))
        XCTAssertEqual(none.evaluation?.trusted, false)
        XCTAssertEqual(none.evaluation?.reasons.map(\.code), [TrustReason.Code.noPeerName])
        XCTAssertEqual(none.evaluation?.kind, .fatalFailure)

        let right = try handshake(ctx, port: port) { XCTAssertEqual(SSL_set1_host($0, "server.test"), 1) }
        XCTAssertTrue(right.ok)
        XCTAssertEqual(right.evaluation?.trusted, true, "\(String(describing: right.evaluation?.reasons))")

        let wrong = try handshake(ctx, port: port) { XCTAssertEqual(SSL_set1_host($0, "other.test"), 1) }
        XCTAssertFalse(wrong.ok)
        XCTAssertEqual(wrong.evaluation?.reasons.map(\.code), [TrustReason.Code.nameMismatch])

        let sniOnly = try handshake(ctx, port: port) { XCTAssertEqual(mtls_ossl_SSL_set_tlsext_host_name($0, "server.test"), 1) }
        XCTAssertTrue(sniOnly.ok, "the SNI name is checked when no host is set")
    }

    func testApplicationSSLOnASocketSelectsTheRuleForTheHostAndThePortReached() throws {
        let port = Self.freePort()
        let server = try startSServer(sserverArgs(), port: port)
        defer { server.terminate() }
        let wrong = [try SPKIPin(certificate: cert("other-root")), try SPKIPin(certificate: cert("client-b"))]
        for (pattern, applies) in [("server.test:\(port)", true), ("server.test:\(port &+ 1)", false), ("server.test", true)] {
            let p = try policy(["root"])
            p.addHostRule(HostRule(pattern: try HostPattern(pattern), pins: wrong))
            let ctx = try applicationContext(policy: p)
            defer { SSL_CTX_free(ctx) }
            let r = try handshake(ctx, port: port) { XCTAssertEqual(SSL_set1_host($0, "server.test"), 1) }
            XCTAssertEqual(r.ok, !applies, pattern)
            XCTAssertEqual(r.evaluation?.reasons.map(\.code), applies ? [TrustReason.Code.pinMismatch] : [], pattern)
        }
    }

    func testApplicationServerSSLJudgesAClientByTheRuleForItsAddress() throws {
        let (listener, port) = try Socket.listen(address: "127.0.0.1", port: 0)
        defer { close(listener) }
        for (rule, accepted) in [(nil as String?, true), ("127.0.0.1", false), ("10.0.0.5", true)] {
            let p = try policy(["int-a"])
            if let rule {
                p.addHostRule(HostRule(pattern: try HostPattern(rule),
                                       pins: [try SPKIPin(certificate: cert("other-root")), try SPKIPin(certificate: cert("client-b"))]))
            }
            let ctx = try XCTUnwrap(SSL_CTX_new(TLS_server_method()))
            defer { SSL_CTX_free(ctx) }
            XCTAssertEqual(SSL_CTX_use_certificate_chain_file(ctx, path("server-chain.pem")), 1)
            XCTAssertEqual(SSL_CTX_use_PrivateKey_file(ctx, path("server.key"), SSL_FILETYPE_PEM), 1)
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
            try SSLContextConfiguration.configure(sslContext: UnsafeMutableRawPointer(ctx), identity: nil, policy: p,
                                                  purpose: .clientAuth)
            // The client: libmtls's own, in the background; the server: the application's SSL.
            var o = try clientOptions(identity: identity("client-a"))
            o.maxVersion = .tls12 // the server's verdict is known when the handshake ends
            let options = o
            let client = Thread { _ = try? TLSConnection.connect(host: "127.0.0.1", port: port, options: options) }
            client.start()
            let fd = accept(listener, nil, nil)
            XCTAssertGreaterThanOrEqual(fd, 0)
            defer { close(fd) }
            let ssl = try XCTUnwrap(SSL_new(ctx))
            defer { SSL_free(ssl) }
            XCTAssertEqual(SSL_set_fd(ssl, fd), 1)
            let ok = SSL_accept(ssl) == 1
            ERR_clear_error()
            let evaluation = TLSHandshakeState.of(ssl)?.evaluation
            XCTAssertEqual(ok, accepted, "\(String(describing: rule))")
            XCTAssertEqual(evaluation?.reasons.map(\.code), accepted ? [] : [TrustReason.Code.pinMismatch], "\(String(describing: rule))")
            if let rule, !accepted { XCTAssertEqual(evaluation?.matchedRule, rule) }
        }
    }

    func testApplicationSSLWithNoHostIsAcceptedWhenThePolicyChecksNoName() throws {
        let port = Self.freePort()
        let server = try startSServer(sserverArgs(), port: port)
        defer { server.terminate() }
        let p = try policy(["root"])
        p.nameCheck = .none
        let ctx = try applicationContext(policy: p)
        defer { SSL_CTX_free(ctx) }
        let r = try handshake(ctx, port: port) { _ in }
        XCTAssertTrue(r.ok)
        XCTAssertEqual(r.evaluation?.trusted, true)
    }
}
