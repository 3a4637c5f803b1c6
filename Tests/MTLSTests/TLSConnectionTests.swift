import Foundation
import XCTest
import COpenSSL
@testable import MTLS

/// Connections against real peers on 127.0.0.1: `openssl s_server` and libmtls's own listener.
final class TLSConnectionTests: XCTestCase, ConnectionPKIFiles {
    /// The connection PKI (scripts/test-pki.sh), made once, on first use.
    static let pkiDir: String = {
        let dir = NSTemporaryDirectory() + "mtls-tls-pki-\(getpid())"
        try? TestPKI.make(dir)
        return dir
    }()

    override class func setUp() {
        super.setUp()
        _ = pkiDir
    }


    static func freePort() -> UInt16 {
        let (fd, port) = try! Socket.listen(address: "127.0.0.1", port: 0)
        close(fd)
        return port
    }

    /// Starts `openssl s_server` and waits until it accepts connections.
    func startSServer(_ args: String, port: UInt16) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = ["-c", "exec openssl s_server -accept 127.0.0.1:\(port) -naccept 20 -quiet \(args)"]
        p.standardInput = Pipe()
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        for _ in 0..<100 {
            if let fd = try? Socket.connect(host: "127.0.0.1", port: port, deadline: Deadline(seconds: 1)) { close(fd); return p }
            usleep(50_000)
        }
        p.terminate()
        throw MTLSError(.connect, "s_server did not start")
    }

    func sserverArgs(_ server: String = "server") -> String {
        "-cert \(path(server + ".pem")) -key \(path(server + ".key")) -cert_chain \(path("int-a.pem")) " +
            "-Verify 2 -CAfile \(path("root.pem")) -verify_return_error -www"
    }

    func clientOptions(identity: Identity?, anchors: [String] = ["root"]) throws -> TLSClientOptions {
        var o = TLSClientOptions()
        o.identity = identity.map { .identity($0) } ?? .none
        o.policy = try policy(anchors)
        o.validationName = "server.test"
        o.handshakeSeconds = 10
        o.ioSeconds = 10
        return o
    }

    func testClientPresentsIdentityToOpenSSLServerAndResumes() throws {
        for version in [TLSVersion.tls12, .tls13] {
            let port = Self.freePort()
            let server = try startSServer(sserverArgs(), port: port)
            defer { server.terminate() }
            var o = try clientOptions(identity: identity("client-a"))
            o.minVersion = version; o.maxVersion = version
            for round in 0..<3 {
                let c = try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
                XCTAssertEqual(c.tlsVersion, version)
                XCTAssertEqual(c.tlsVersionName, version.description)
                XCTAssertEqual(c.evaluation?.trusted, true)
                XCTAssertEqual(c.peerCertificate?.commonName, "server.test")
                try c.write(Array("GET / HTTP/1.0\r\n\r\n".utf8))
                var response: [UInt8] = []
                while true { let b = try c.read(maxLength: 4096); if b.isEmpty { break }; response += b }
                XCTAssertTrue(String(decoding: response, as: UTF8.self).contains("200 ok"), "round \(round)")
                if round > 0 { XCTAssertTrue(c.isResumed, "\(version) round \(round) should resume") }
                XCTAssertEqual(c.evaluation?.trusted, true)
                c.close()
            }
            TLSConnection.clearSessionCache()
            let fresh = try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
            XCTAssertFalse(fresh.isResumed, "a cleared cache means a full handshake")
            fresh.close()
        }
    }

    /// Issue 35 item 13: a connection knows when the policy that judged its peer has changed
    /// since it was made (what the Python pools drop idle connections on).
    func testConnectionSaysWhenItsPolicyChanged() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["root"])
        so.handshakeSeconds = 10
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        let served = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            for _ in 0..<2 { (try? listener.accept())?.close() }
            served.signal()
        }
        let o = try clientOptions(identity: identity("client-a"))
        let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        XCTAssertFalse(c.isPolicyChanged)
        o.policy?.replaceSettings(from: try policy(["root"]))
        XCTAssertTrue(c.isPolicyChanged, "replaced (even with the same settings): judged under the old version")
        let fresh = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        XCTAssertFalse(fresh.isPolicyChanged)
        fresh.close()
        c.close()
        served.wait()
    }

    func testPinnedIntermediateAndLeafAccepted() throws {
        let port = Self.freePort()
        let server = try startSServer(sserverArgs(), port: port)
        defer { server.terminate() }
        for anchors in [["int-a"], ["server"]] {
            var o = try clientOptions(identity: identity("client-a-rsa"), anchors: anchors)
            o.sessionResumption = false
            let c = try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
            XCTAssertEqual(c.evaluation?.trusted, true)
            c.close()
        }
    }

    func testUntrustedServerIsRejectedWithOurReasons() throws {
        let port = Self.freePort()
        let server = try startSServer(sserverArgs(), port: port)
        defer { server.terminate() }
        let o = try clientOptions(identity: identity("client-a"), anchors: ["other-root"])
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .untrusted, "\(e)")
        }
    }

    func testWrongValidationNameIsRejected() throws {
        let port = Self.freePort()
        let server = try startSServer(sserverArgs(), port: port)
        defer { server.terminate() }
        var o = try clientOptions(identity: identity("client-a"))
        o.validationName = nil // validates as 127.0.0.1, which the certificate does not name
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .untrusted, "\(e)")
        }
    }

    func testServerRejectingOurCertificateIsAPeerAlert() throws {
        for version in [TLSVersion.tls12, .tls13] {
            let port = Self.freePort()
            let server = try startSServer(sserverArgs(), port: port)
            defer { server.terminate() }
            var o = try clientOptions(identity: identity("client-c", chain: ["int-c"]))
            o.minVersion = version; o.maxVersion = version
            do {
                let c = try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
                try c.write(Array("GET / HTTP/1.0\r\n\r\n".utf8))
                _ = try c.read()
                XCTFail("\(version): the server should have refused us")
            } catch let e as MTLSError {
                XCTAssertEqual(e.code, .peerAlert, "\(version): \(e)")
                XCTAssertTrue(e.message.contains("unknown CA") || e.message.contains("certificate"), e.message)
            }
        }
    }

    /// Runs `openssl ARGS` with its input and (merged) output on pipes.
    func openssl(_ args: String) throws -> (Process, Pipe, Pipe) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = ["-c", "exec openssl " + args]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = output
        try p.run()
        return (p, input, output)
    }

    // MARK: cipher suites

    /// OpenSSL 3.0's default order, as `SSL_CTX_get_ciphers` gives it (a sample of each kind).
    func opensslDefaultSuites() -> [TLSContext.Suite] {
        let any = (NID_kx_any, NID_auth_any), ecdsa = (NID_kx_ecdhe, NID_auth_ecdsa), rsa = (NID_kx_ecdhe, NID_auth_rsa)
        func s(_ name: String, _ ka: (Int32, Int32), _ bits: Int = 0) -> TLSContext.Suite {
            TLSContext.Suite(name: name, kx: ka.0, auth: ka.1, aesGCMBits: bits)
        }
        return [s("TLS_AES_256_GCM_SHA384", any, 256), s("TLS_CHACHA20_POLY1305_SHA256", any), s("TLS_AES_128_GCM_SHA256", any, 128),
                s("ECDHE-ECDSA-AES256-GCM-SHA384", ecdsa, 256), s("ECDHE-RSA-AES256-GCM-SHA384", rsa, 256),
                s("DHE-RSA-AES256-GCM-SHA384", (NID_kx_dhe, NID_auth_rsa), 256),
                s("ECDHE-ECDSA-CHACHA20-POLY1305", ecdsa), s("ECDHE-RSA-CHACHA20-POLY1305", rsa),
                s("ECDHE-ECDSA-AES128-GCM-SHA256", ecdsa, 128), s("ECDHE-RSA-AES128-GCM-SHA256", rsa, 128),
                s("DHE-RSA-AES128-GCM-SHA256", (NID_kx_dhe, NID_auth_rsa), 128), s("ECDHE-ECDSA-AES256-SHA384", ecdsa),
                s("RSA-PSK-AES256-GCM-SHA384", (NID_kx_rsa_psk, NID_auth_rsa), 256), s("DHE-PSK-AES256-GCM-SHA384", (NID_kx_dhe_psk, NID_auth_psk), 256),
                s("AES256-GCM-SHA384", (NID_kx_rsa, NID_auth_rsa), 256), s("PSK-AES128-GCM-SHA256", (NID_kx_psk, NID_auth_psk), 128),
                s("AES128-GCM-SHA256", (NID_kx_rsa, NID_auth_rsa), 128), s("SRP-RSA-AES-256-CBC-SHA", (NID_kx_srp, NID_auth_rsa)),
                s("SRP-AES-128-CBC-SHA", (NID_kx_srp, NID_auth_srp)), s("AES128-SHA", (NID_kx_rsa, NID_auth_rsa))]
    }

    /// A client's host is read once and kept with its reading; the next host is compared byte
    /// for byte, so the reading is always that of the host given (issue 40).
    func testAClientHostIsReadByItsBytes() throws {
        let a = try ClientHost.reading("127.1")
        XCTAssertEqual(a.bare, "127.1")
        XCTAssertEqual(a.kept.host, "127.0.0.1")
        XCTAssertTrue(a.kept.isAddress)
        let again = try ClientHost.reading("127.1")
        XCTAssertEqual(again.kept.host, "127.0.0.1")
        // A port is refused right after the same host without one was read.
        XCTAssertThrowsError(try ClientHost.reading("127.1:443")) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument) }
        XCTAssertThrowsError(try ClientHost.reading("[::1")) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument) }
        let v6 = try ClientHost.reading("[fe80::1%eth0]")
        XCTAssertEqual(v6.bare, "fe80::1%eth0")
        XCTAssertEqual(v6.kept.host, "fe80::1")
        XCTAssertEqual(v6.kept.zone, "eth0")
        let name = try ClientHost.reading("server.test")
        XCTAssertEqual(name.kept.host, "server.test")
        XCTAssertFalse(name.kept.isAddress)
        // Canonically equivalent (Swift's == holds) but other bytes: another host, read anew.
        let composed = "caf\u{E9}.test", decomposed = "cafe\u{301}.test"
        XCTAssertEqual(composed, decomposed)
        XCTAssertEqual(Array(try ClientHost.reading(composed).bare.utf8), Array(composed.utf8))
        XCTAssertEqual(Array(try ClientHost.reading(decomposed).bare.utf8), Array(decomposed.utf8))
        XCTAssertEqual(Array(try ClientHost.reading(decomposed).kept.host!.utf8), Array(decomposed.utf8))
        // No host (a wrapped socket without one).
        XCTAssertNil(try ClientHost.reading("").kept.host)
    }

    func testOwnSuitesKeepWhatCanBeNegotiatedAndPreferAES128GCM() {
        let own = TLSContext.ownSuites(opensslDefaultSuites()).map(\.name)
        XCTAssertEqual(own, ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                             "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                             "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                             "DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384",
                             "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305", "ECDHE-ECDSA-AES256-SHA384",
                             "AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA"])
        // Already in that order: unchanged (the context keeps OpenSSL's list as it is).
        let again = TLSContext.ownSuites(TLSContext.ownSuites(opensslDefaultSuites()))
        XCTAssertEqual(again, TLSContext.ownSuites(opensslDefaultSuites()))
        // A configuration without AES-256-GCM (or with AES-128-GCM first already) keeps its order.
        let noAES256 = opensslDefaultSuites().filter { $0.aesGCMBits != 256 && !$0.name.contains("PSK") && !$0.name.contains("SRP") }
        XCTAssertEqual(TLSContext.ownSuites(noAES256), noAES256)
    }

    /// libmtls's client offers AES-128-GCM first, and connects to a server that allows only
    /// AES-256-GCM or ChaCha20 (the suites offered are OpenSSL's, in another order).
    func testClientPrefersAES128GCMAndKeepsTheOtherSuites() throws {
        let cases: [(TLSVersion, String, String)] = [
            (.tls13, "", "TLS_AES_128_GCM_SHA256"),
            (.tls13, "-ciphersuites TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
            (.tls13, "-ciphersuites TLS_CHACHA20_POLY1305_SHA256", "TLS_CHACHA20_POLY1305_SHA256"),
            (.tls12, "", "ECDHE-ECDSA-AES128-GCM-SHA256"),
            (.tls12, "-cipher ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
            (.tls12, "-cipher ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES256-SHA384"),
        ]
        for (version, only, expected) in cases {
            let port = Self.freePort()
            // s_server chooses in the client's order (OpenSSL's default).
            let server = try startSServer(sserverArgs() + " " + only, port: port)
            defer { server.terminate() }
            var o = try clientOptions(identity: identity("client-a"))
            o.minVersion = version; o.maxVersion = version
            o.sessionResumption = false
            let c = try TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
            XCTAssertEqual(c.cipherSuite, expected, "\(version) \(only)")
            c.close()
        }
    }

    /// libmtls's listener chooses AES-128-GCM over the client's AES-256-GCM, follows a client that
    /// lists ChaCha20 first (no AES hardware), and takes any suite a client offers alone.
    func testListenerChoosesAES128GCMUnlessTheClientPutsChaChaFirst() throws {
        let listener = try startListener()
        let cases: [(String, String)] = [
            ("-tls1_3", "TLS_AES_128_GCM_SHA256"),
            ("-tls1_3 -ciphersuites TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256"),
            ("-tls1_3 -ciphersuites TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
            ("-tls1_2", "ECDHE-ECDSA-AES128-GCM-SHA256"),
            ("-tls1_2 -cipher ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
        ]
        for (args, expected) in cases {
            let (cl, cin, cout) = try openssl("s_client -connect 127.0.0.1:\(listener.port) \(args) -cert \(path("client-a.pem")) " +
                                              "-key \(path("client-a.key")) -cert_chain \(path("int-a.pem")) -CAfile \(path("root.pem"))")
            defer { cl.terminate() }
            let c = try listener.accept(timeout: 10)
            XCTAssertEqual(c.cipherSuite, expected, args)
            c.close()
            try? cin.fileHandleForWriting.close()
            cl.terminate(); cl.waitUntilExit()
            _ = cout
        }
    }

    func testRenegotiationIsRefusedBothWays() throws {
        // A TLS 1.2 server that asks to renegotiate (openssl s_server's "R" command: a new
        // handshake with a certificate request): our client refuses with a no_renegotiation alert,
        // the server gives up, and the read ends with its alert at once, well within the timeout.
        let port = Self.freePort()
        let (q, qin, qout) = try openssl("s_server -accept 127.0.0.1:\(port) -tls1_2 -cert \(path("server.pem")) " +
                                         "-key \(path("server.key")) -cert_chain \(path("int-a.pem")) -verify 2 -CAfile \(path("root.pem"))")
        defer { q.terminate() }
        var o = try clientOptions(identity: identity("client-a"))
        o.minVersion = .tls12; o.maxVersion = .tls12
        o.sessionResumption = false
        o.ioSeconds = 3
        var c: TLSConnection?
        for _ in 0..<100 {
            if let conn = try? TLSConnection.connect(host: "127.0.0.1", port: port, options: o) { c = conn; break }
            usleep(50_000)
        }
        let conn = try XCTUnwrap(c)
        try conn.write(Array("hello\n".utf8))
        waitForOutput(qout, containing: "hello")  // the server has read it
        qin.fileHandleForWriting.write(Data("R\n".utf8))
        let start = Date()
        var ended: String = "no end"
        do {
            while true {
                let b = try conn.read()
                if b.isEmpty { ended = "closed"; break }
            }
        } catch let e as MTLSError {
            ended = "\(e.code.name): \(e.message)"
        }
        let took = Date().timeIntervalSince(start)
        conn.close()
        q.terminate(); q.waitUntilExit()
        let log = String(decoding: qout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertLessThan(took, 4.5, ended)
        XCTAssertTrue(ended.hasPrefix("peer_alert") && ended.contains("handshake failure"), "\(ended); s_server: \(log.suffix(400))")

        // A TLS 1.2 client that asks to renegotiate (openssl s_client's "R" command): our
        // listener refuses it, and the connection ends with a clear error within the timeout.
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeSeconds = 5
        so.ioSeconds = 3
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        let box = LockedBox<String>("no end")
        let served = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var outcome = "no end"
            do {
                let c = try listener.accept(timeout: 10)
                defer { c.close() }
                while true { if try c.read().isEmpty { outcome = "closed"; break } }
            } catch let e as MTLSError {
                outcome = "\(e.code.name): \(e.message)"
            } catch {
                outcome = "\(error)"
            }
            box.mutate { $0 = outcome }
            served.signal()
        }
        let (cl, cin, cout) = try openssl("s_client -connect 127.0.0.1:\(listener.port) -tls1_2 -cert \(path("client-a.pem")) " +
                                          "-key \(path("client-a.key")) -cert_chain \(path("int-a.pem")) -CAfile \(path("root.pem"))")
        defer { cl.terminate() }
        waitForOutput(cout, containing: "Verify return code")  // the handshake is done
        cin.fileHandleForWriting.write(Data("R\n".utf8))
        let asked = Date()
        XCTAssertEqual(served.wait(timeout: .now() + 8), .success, "the listener's connection ended")
        let serverTook = Date().timeIntervalSince(asked)
        try? cin.fileHandleForWriting.close()
        cl.terminate(); cl.waitUntilExit()
        let clog = String(decoding: cout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertLessThan(serverTook, 4.5, box.value)
        XCTAssertTrue(box.value.hasPrefix("peer_alert") && box.value.contains("handshake failure"), "\(box.value); s_client: \(clog.suffix(400))")

    }

    func testRefusedAndTimeout() throws {
        let port = Self.freePort()
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: port)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .connect)
        }
        // A listener that never answers the handshake.
        let (fd, silent) = try Socket.listen(address: "127.0.0.1", port: 0)
        defer { close(fd) }
        var o = TLSClientOptions()
        o.handshakeSeconds = 0.3
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: silent, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .timeout)
        }
        let timedOut = accept(fd, nil, nil)
        XCTAssertGreaterThanOrEqual(timedOut, 0)
        close(timedOut)
        // Bad options: an error before any TCP connection is made (the TLS side is set up first).
        var bad = TLSClientOptions()
        bad.alpn = [""]
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: silent, options: bad)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
            XCTAssertEqual((e as? MTLSError)?.side, .client)
        }
        var pending = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(poll(&pending, 1, 0), 0, "a TCP connection was made for a TLS set-up that failed")
    }

    func testAConnectToAnAddressEndsAsOpenWouldHaveEndedIt() throws {
        // connect() to an IP literal does not wait for the TCP connect before the ClientHello: the
        // ClientHello's write says how it went (issue 40). Its errors are open()'s, word for word.
        let (closedFD, closed) = try Socket.listen(address: "127.0.0.1", port: 0)
        close(closedFD)  // nothing listens there now: refused
        // A listener whose accept queue is full (backlog 0, one connection waiting in it) drops
        // the SYNs of the next: their connects stay under way.
        let (fd, full) = try Socket.listen(address: "127.0.0.1", port: 0, backlog: 0)
        defer { close(fd) }
        let filler = try Socket.connect(host: "127.0.0.1", port: full, deadline: Deadline(seconds: 5))
        defer { close(filler) }
        var o = TLSClientOptions()
        o.connectTimeout = 0.3
        o.handshakeSeconds = 10
        for (port, code, message) in [(closed, MTLSError.Code.connect, "cannot connect to 127.0.0.1 port \(closed) (127.0.0.1:\(closed)): Connection refused"),
                                      (full, .timeout, "connecting to 127.0.0.1 port \(full) (127.0.0.1:\(full)) timed out")] {
            for (how, attempt) in [("connect", { try TLSConnection.connect(host: "127.0.0.1", port: port, options: o) }),
                                   ("open", { try TLSConnection.open(host: "127.0.0.1", port: port, options: o) })] {
                let started = Date()
                XCTAssertThrowsError(try attempt(), how) { e in
                    XCTAssertEqual((e as? MTLSError)?.code, code, "\(how): \(e)")
                    XCTAssertEqual((e as? MTLSError)?.side, .server, "\(how): \(e)")
                    XCTAssertEqual((e as? MTLSError)?.message, message, how)
                }
                // The connect's own time limit, not the handshake's.
                XCTAssertLessThan(Date().timeIntervalSince(started), 5, how)
            }
        }
    }

    // MARK: libmtls server

    func startListener(require: ClientAuthentication = .require, clientAnchors: [String] = ["int-a"]) throws -> TLSListener {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientAuthentication = require
        so.clientPolicy = try policy(clientAnchors)
        so.alpn = ["echo/1"]
        so.handshakeSeconds = 10
        return try TLSListener(address: "127.0.0.1", port: 0, options: so)
    }

    /// Accepts one client in the background and returns what happened.
    func acceptOne(_ listener: TLSListener) -> () -> Result<(String?, Bool?, String?), Error> {
        let result = LockedBox<Result<(String?, Bool?, String?), Error>>(.failure(MTLSError(.timeout, "not run")))
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let r = Result {
                let c = try listener.accept(timeout: 10)
                defer { c.close() }
                let got = try c.read()
                try c.write(got)
                return (c.peerCertificate?.commonName, c.evaluation?.trusted, c.alpn)
            }
            result.mutate { $0 = r }
            done.signal()
        }
        return { done.wait(); return result.value }
    }

    func testListenerAcceptsRightCustomerAndRejectsOthers() throws {
        let listener = try startListener()
        // Right intermediate.
        var wait = acceptOne(listener)
        var o = try clientOptions(identity: identity("client-a"))
        o.alpn = ["echo/1"]
        let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        XCTAssertEqual(c.alpn, "echo/1")
        try c.write(Array("ping".utf8))
        XCTAssertEqual(String(decoding: try c.read(), as: UTF8.self), "ping")
        c.close()
        let (cn, trusted, alpn) = try wait().get()
        XCTAssertEqual(cn, "client-a"); XCTAssertEqual(trusted, true); XCTAssertEqual(alpn, "echo/1")

        // Another customer's intermediate, and no certificate at all.
        for id in [try identity("client-b", chain: ["int-b"]), nil] {
            wait = acceptOne(listener)
            var o = try clientOptions(identity: id)
            o.sessionResumption = false
            do {
                let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
                try c.write(Array("ping".utf8))
                _ = try c.read()
                XCTFail("client should have been refused")
            } catch let e as MTLSError {
                XCTAssertEqual(e.code, .peerAlert, "\(e)")
                // Our listener says why: the chain does not reach its anchor, or no certificate.
                XCTAssertTrue(e.message.contains(id == nil ? "certificate required" : "unknown CA"), e.message)
            }
            XCTAssertThrowsError(try wait().get()) { e in
                XCTAssertEqual((e as? MTLSError)?.code, .untrusted, "\(e)")
            }
        }
    }

    /// One client against `listener`: whether each side saw a resumed session, and whether the
    /// listener's connection reports a trusted evaluation (or the listener's error).
    func ticketRound(_ listener: TLSListener, _ o: TLSClientOptions) throws -> (client: Bool, server: Result<(Bool, Bool?), Error>) {
        let box = LockedBox<Result<(Bool, Bool?), Error>>(.failure(MTLSError(.timeout, "not run")))
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let r = Result { () throws -> (Bool, Bool?) in
                let c = try listener.accept(timeout: 10)
                defer { c.close() }
                try c.write(try c.read())
                return (c.isResumed, c.evaluation?.trusted)
            }
            box.mutate { $0 = r }
            done.signal()
        }
        var resumed = false
        if let c = try? TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o) {
            if (try? c.write(Array("ping".utf8))) != nil, (try? c.read()) != nil {  // the echo comes after a TLS 1.3 ticket
                resumed = c.isResumed
            }
            c.close()
        }
        done.wait()
        return (resumed, box.value)
    }

    func testListenerTicketsResumeOnlyUnderThePolicyThatJudgedTheClient() throws {
        for version in [TLSVersion.tls12, .tls13] {
            var so = TLSServerOptions(identity: try identity("server"))
            let clientPolicy = try policy(["int-a"])
            so.clientPolicy = clientPolicy
            so.handshakeSeconds = 10
            so.minVersion = version; so.maxVersion = version
            let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
            var o = try clientOptions(identity: identity("client-a"))
            o.minVersion = version; o.maxVersion = version
            var r = try ticketRound(listener, o)
            XCTAssertEqual(try r.server.get().0, false, "\(version): the first connection is a full handshake")
            r = try ticketRound(listener, o)
            XCTAssertTrue(r.client, "\(version): a returning client resumes")
            XCTAssertEqual(try r.server.get().0, true)
            XCTAssertEqual(try r.server.get().1, true, "\(version): the resumed connection reports the ticket's evaluation")
            // Any change to the client policy invalidates every ticket: the client is judged again.
            clientPolicy.replaceSettings(from: try policy(["int-b"]))
            r = try ticketRound(listener, o)
            XCTAssertFalse(r.client, "\(version): no resumption under another policy")
            XCTAssertThrowsError(try r.server.get(), "\(version): the new policy refuses client-a") { e in
                XCTAssertEqual((e as? MTLSError)?.code, .untrusted, "\(e)")
            }
            clientPolicy.replaceSettings(from: try policy(["int-a"]))
            r = try ticketRound(listener, o)
            XCTAssertEqual(try r.server.get().0, false, "\(version): judged afresh")
            XCTAssertEqual(try ticketRound(listener, o).server.get().0, true, "\(version): and its new ticket resumes")
            // A listener without tickets gives every client a full handshake.
            so.sessionTickets = false
            let plain = try TLSListener(address: "127.0.0.1", port: 0, options: so)
            for _ in 0..<2 {
                r = try ticketRound(plain, o)
                XCTAssertFalse(r.client)
                XCTAssertEqual(try r.server.get().0, false)
                XCTAssertEqual(try r.server.get().1, true)
            }
        }
    }

    func testIPv6AddressWithValidationNameAndNoSNI() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        let listener: TLSListener
        do { listener = try TLSListener(address: "::1", port: 0, options: so) } catch { throw XCTSkip("no IPv6 loopback: \(error)") }
        let wait = acceptOne(listener)
        var o = try clientOptions(identity: identity("client-a"))
        o.serverName = "" // none
        let c = try TLSConnection.connect(host: "[::1]", port: listener.port, options: o)
        XCTAssertEqual(c.evaluation?.trusted, true)
        try c.write(Array("v6".utf8))
        XCTAssertEqual(try c.read(), Array("v6".utf8))
        c.close()
        XCTAssertEqual(try wait().get().0, "client-a")
    }

    func testAutomaticSelectionPicksIdentityByServerCAList() throws {
        let listener = try startListener()
        let wait = acceptOne(listener)
        var o = try clientOptions(identity: nil)
        let candidates = [try identity("client-c", chain: ["int-c"]), try identity("client-b", chain: ["int-b"]), try identity("client-a")]
        o.identity = .automatic(candidates)
        let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        XCTAssertEqual(c.presentedIdentity?.leaf.commonName, "client-a")
        try c.write(Array("x".utf8))
        _ = try c.read()
        c.close()
        XCTAssertEqual(try wait().get().0, "client-a")

        // None fits: the error names the CA the server asked for.
        let wait2 = acceptOne(listener)
        o.identity = .automatic(Array(candidates.prefix(2)))
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .noMatchingIdentity)
            XCTAssertTrue("\(e)".contains("Customer A CA"), "\(e)")
        }
        _ = wait2()
    }

    func testListenerCANamesAreTheAnchorsOrNoneOrTheGivenList() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeSeconds = 10
        var o = try clientOptions(identity: nil)

        // A list the caller gives (customer C's CA): customer A's identity no longer fits the request.
        so.clientCANames = .certificates([try cert("int-c")])
        let given = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { given.close() }
        let waitGiven = acceptOne(given)
        o.identity = .automatic([try identity("client-a")])
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: given.port, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .noMatchingIdentity)
            XCTAssertTrue("\(e)".contains("Customer C CA"), "\(e)")
        }
        _ = waitGiven()

        // None: a client picks without names (customer C's identity, which the default request,
        // naming customer A's CA, rules out), and the trust decision is unchanged: it is refused.
        so.clientCANames = .omitted
        let omitted = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { omitted.close() }
        let waitOmitted = acceptOne(omitted)
        o.identity = .automatic([try identity("client-c", chain: ["int-c"])])
        if let c = try? TLSConnection.connect(host: "127.0.0.1", port: omitted.port, options: o) {
            XCTAssertEqual(c.presentedIdentity?.leaf.commonName, "client-c")
            _ = try? c.write(Array("x".utf8))
            _ = try? c.read()
            c.close()
        }
        guard case .failure(let refused) = waitOmitted() else { return XCTFail("customer C's client was accepted") }
        XCTAssertEqual((refused as? MTLSError)?.code, .untrusted, "\(refused)")

        // With no names a fitting client is accepted as before.
        let waitA = acceptOne(omitted)
        o.identity = .automatic([try identity("client-a")])
        let a = try TLSConnection.connect(host: "127.0.0.1", port: omitted.port, options: o)
        try a.write(Array("x".utf8))
        _ = try a.read()
        a.close()
        XCTAssertEqual(try waitA().get().0, "client-a")
    }

    func testAutomaticSelectionLoadsATokenCandidateOnlyWhenChosenAndFallsBackWhenItCannotLoad() throws {
        let listener = try startListener()
        // Token references whose token does not exist: loading one fails.
        let missingToken = "pkcs11:token=mtls-no-such-token;object=key?module-path=/nonexistent/mtls-module.so"
        func tokenCandidate(_ name: String, chain: [String]) throws -> IdentityCandidate {
            IdentityCandidate(token: StoreTokenReference(label: name, uri: missingToken, certificate: try cert(name),
                                                         chain: try chain.map { try cert($0) }))
        }
        let otherCustomer = try tokenCandidate("client-c", chain: ["int-c"])
        let brokenA = try tokenCandidate("client-a", chain: ["int-a"])
        let fileA = try identity("client-a")

        // The broken token candidate fits first, cannot load, and gives way to the file identity.
        let wait = acceptOne(listener)
        var o = try clientOptions(identity: nil)
        o.identity = .candidates([otherCustomer, brokenA, IdentityCandidate(fileA)])
        let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        XCTAssertTrue(c.presentedIdentity === fileA)
        try c.write(Array("x".utf8))
        _ = try c.read()
        c.close()
        XCTAssertEqual(try wait().get().0, "client-a")

        // Only the broken one fits: the handshake fails with the token's error, not "no match".
        let wait2 = acceptOne(listener)
        o.identity = .candidates([otherCustomer, brokenA])
        XCTAssertThrowsError(try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)) { e in
            let code = (e as? MTLSError)?.code
            XCTAssertNotNil(code)
            XCTAssertNotEqual(code, .noMatchingIdentity, "\(e)")
            XCTAssertTrue("\(e)".contains("the identity chosen for the server's certificate request cannot be used"), "\(e)")
        }
        _ = wait2()
    }

    func testNonBlockingHandshakeReportsWants() throws {
        let listener = try startListener()
        let wait = acceptOne(listener)
        var o = try clientOptions(identity: identity("client-a"))
        o.nonBlocking = true
        o.sessionResumption = false
        let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        var wants = 0
        XCTAssertFalse(c.isHandshakeComplete)
        while !c.isHandshakeComplete {
            do {
                try c.handshake()
            } catch let e as MTLSError {
                XCTAssertTrue(e.code == .wantRead || e.code == .wantWrite, "\(e)")
                wants += 1
                var p = pollfd(fd: c.fileDescriptor, events: Int16(e.code == .wantRead ? POLLIN : POLLOUT), revents: 0)
                _ = poll(&p, 1, 5000)
            }
        }
        _ = wants // a loaded machine may finish in one call; the silent peer below always waits
        let (silentFD, silentPort) = try Socket.listen(address: "127.0.0.1", port: 0)
        defer { close(silentFD) }
        let waiting = try TLSConnection.connect(host: "127.0.0.1", port: silentPort, options: o)
        var code: MTLSError.Code? = nil
        for _ in 0..<100 {
            do { try waiting.handshake() } catch let e as MTLSError { code = e.code }
            if code == .wantRead { break }
            usleep(10_000)
        }
        XCTAssertEqual(code, .wantRead)
        // Non-blocking connect to a closed port: the refusal comes from handshake().
        let closedPort = Self.freePort()
        var refused: MTLSError.Code? = nil
        do {
            let pending = try TLSConnection.connect(host: "127.0.0.1", port: closedPort, options: o)
            for _ in 0..<100 {
                do { try pending.handshake() } catch let e as MTLSError { refused = e.code }
                if refused != .wantWrite { break }
                usleep(10_000)
            }
        } catch let e as MTLSError { refused = e.code } // refused at once
        XCTAssertEqual(refused, .connect)
        XCTAssertEqual(c.evaluation?.trusted, true)
        var sent = false
        var got: [UInt8] = []
        while got.isEmpty {
            do {
                if !sent { try c.write(Array("nb".utf8)); sent = true }
                got = try c.read()
            } catch let e as MTLSError where e.code == .wantRead || e.code == .wantWrite {
                var p = pollfd(fd: c.fileDescriptor, events: Int16(POLLIN), revents: 0)
                _ = poll(&p, 1, 5000)
            }
        }
        XCTAssertEqual(got, Array("nb".utf8))
        c.close()
        _ = try wait().get()
    }
}
