import Foundation
import XCTest
@testable import MTLS

/// Issue 38 item 9: the Swift user's API — async entry points on library threads with
/// cancellation, `Duration` time limits, the typed TLS version, and errors that keep the side
/// that failed and the failed connection's details. Peers: libmtls's own listener on 127.0.0.1.
final class SwiftAsyncAPITests: XCTestCase, ConnectionPKIFiles {
    /// A connection handed to a task while this one waits for it (never used by both at once).
    struct Unchecked<Value>: @unchecked Sendable { let value: Value }


    func listener(clientAuthentication: ClientAuthentication = .require) throws -> TLSListener {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["root"])
        so.clientAuthentication = clientAuthentication
        so.handshakeTimeLimit = .after(.seconds(10))
        return try TLSListener(address: "127.0.0.1", port: 0, options: so)
    }

    func clientOptions(identity id: Identity?, anchors: [String] = ["root"]) throws -> TLSClientOptions {
        var o = TLSClientOptions()
        o.identity = id.map { .identity($0) } ?? .none
        o.policy = try policy(anchors)
        o.validationName = "server.test"
        o.handshakeTimeLimit = .after(.seconds(10))
        return o
    }

    // In async code the async overloads are chosen; a synchronous function calls the blocking ones.
    static func blockingConnect(_ port: UInt16, _ options: TLSClientOptions) throws -> TLSConnection {
        try TLSConnection.connect(host: "127.0.0.1", port: port, options: options)
    }
    static func blockingRead(_ c: TLSConnection) throws -> [UInt8] {
        try c.read(maxLength: 10, timeLimit: .after(.seconds(1)))
    }

    /// Waits (on a condition, with a bound) until `n` async operations are under way.
    func waitForOperations(_ n: Int) async throws {
        let end = Date().addingTimeInterval(10)
        while AsyncOperations.inFlight < n {
            guard Date() < end else { return XCTFail("no async operation started") }
            await Task.yield()
        }
    }

    func testAsyncConnectHandshakeWriteReadRoundTrip() async throws {
        let server = try listener()
        defer { server.close() }
        let echo = Task {
            let conn = try await server.accept(timeLimit: .after(.seconds(10)))
            defer { conn.close() }
            let got = try await conn.read()
            try await conn.write(got.reversed())
            return conn.tlsVersion
        }
        let c = try await TLSConnection.connect(host: "127.0.0.1", port: server.port,
                                                 options: clientOptions(identity: identity("client-a")))
        defer { c.close() }
        XCTAssertTrue(c.isHandshakeComplete)
        XCTAssertEqual(c.tlsVersion, .tls13)
        XCTAssertEqual(c.tlsVersionName, "TLSv1.3")
        XCTAssertEqual(c.evaluation?.trusted, true)
        try await c.handshake() // complete: nothing to do
        let written = try await c.write(Array("ping".utf8))
        XCTAssertEqual(written, 4)
        let reply = try await c.read(timeLimit: .after(.seconds(10)))
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), "gnip")
        let serverVersion = try await echo.value
        XCTAssertEqual(serverVersion, .tls13)
    }

    /// A read that would block forever: cancelling its task ends it at once with
    /// CancellationError, and the connection is unusable but safe (later calls throw `closed`,
    /// close() frees it).
    /// What a library thread did before it answers happens before the awaiting caller goes on,
    /// for ThreadSanitizer too (`make tsan`): TSan does not always see a continuation's ordering
    /// on Linux; once it reported a connection abandoned on the thread and then used by the
    /// caller (the test below) as a race. The answers are now announced to it; this checks the
    /// hand-off awaited directly and through another task.
    func testWhatTheLibraryThreadDidHappensBeforeTheCallerGoesOn() async throws {
        final class Plain: @unchecked Sendable { var value = 0 }
        for i in 1...20 {
            let plain = Plain()
            // Awaited directly, and through another task (as a cancelled read is, below).
            let got = try await LibraryThreadCall<Int>.run { _ in
                plain.value = i
                return HandedOver(value: i)
            }
            XCTAssertEqual(plain.value, got)
            let task = Task {
                try await LibraryThreadCall<Int>.run { _ in
                    plain.value = -i
                    return HandedOver(value: -i)
                }
            }
            let fromTask = try await task.value
            XCTAssertEqual(plain.value, fromTask)
        }
    }

    func testCancelledReadReturnsPromptlyAndLeavesTheConnectionUnusable() async throws {
        let server = try listener()
        defer { server.close() }
        let accepted = Task { Unchecked(value: try await server.accept(timeLimit: .after(.seconds(10)))) }
        var o = try clientOptions(identity: identity("client-a"))
        o.ioTimeLimit = .forever
        let c = try await TLSConnection.connect(host: "127.0.0.1", port: server.port, options: o)
        let peer = try await accepted.value.value // holds the connection open and silent
        defer { peer.close() }
        let before = AsyncOperations.inFlight
        let handed = Unchecked(value: c)
        let reading = Task { try await handed.value.read() }
        try await waitForOperations(before + 1)
        let started = Date()
        reading.cancel()
        do {
            _ = try await reading.value
            XCTFail("a cancelled read returned data")
        } catch is CancellationError {
        } catch {
            XCTFail("expected CancellationError, got \(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "the cancelled read should return at once")
        XCTAssertThrowsError(try Self.blockingRead(c)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .closed, "\(e)")
            XCTAssertEqual((e as? MTLSError)?.side, .client)
        }
        do {
            try await c.write(Array("x".utf8))
            XCTFail("an abandoned connection wrote")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .closed)
        }
        c.close()
        c.close() // twice is fine
    }

    func testCancelledTaskNeverStartsTheOperation() async throws {
        let server = try listener()
        defer { server.close() }
        let t = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return Unchecked(value: try await TLSConnection.connect(host: "127.0.0.1", port: server.port, options: TLSClientOptions()))
        }
        do {
            _ = try await t.value
            XCTFail("connected although cancelled")
        } catch is CancellationError {}
    }

    func testCancelledAcceptStopsWaiting() async throws {
        let server = try listener()
        defer { server.close() }
        let before = AsyncOperations.inFlight
        let waiting = Task { Unchecked(value: try await server.accept()) }
        try await waitForOperations(before + 1)
        waiting.cancel()
        do {
            _ = try await waiting.value
            XCTFail("accept returned a connection")
        } catch is CancellationError {}
    }

    /// A time limit given to one read: MTLSError.timeout, the peer's side (it did not answer).
    func testAsyncReadTimeLimit() async throws {
        let server = try listener()
        defer { server.close() }
        let accepted = Task { Unchecked(value: try await server.accept(timeLimit: .after(.seconds(10)))) }
        let c = try await TLSConnection.connect(host: "127.0.0.1", port: server.port,
                                                 options: clientOptions(identity: identity("client-a")))
        defer { c.close() }
        let peer = try await accepted.value.value
        defer { peer.close() }
        do {
            _ = try await c.read(timeLimit: .after(.milliseconds(200)))
            XCTFail("read returned")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .timeout, "\(e)")
            XCTAssertEqual(e.side, .server)
        }
    }

    /// A refused TCP connect is reported at once, with the server's side.
    func testAsyncConnectRefused() async throws {
        let (fd, port) = try Socket.listen(address: "127.0.0.1", port: 0)
        close(fd) // nothing listens there now
        do {
            _ = try await TLSConnection.connect(host: "127.0.0.1", port: port, options: TLSClientOptions())
            XCTFail("connected")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .connect, "\(e)")
            XCTAssertEqual(e.side, .server)
            XCTAssertNil(e.connectionFailure, "no TLS connection was made")
        }
    }

    /// connect() keeps the side that failed and what the failed connection learnt, as
    /// open()+handshake() does: our evaluation refused the server (our side, with its chain and
    /// the evaluation), and the server refused us (its side, with its alert) — sync and async.
    func testConnectErrorsKeepTheSideAndTheFailedConnection() async throws {
        let server = try listener()
        defer { server.close() }
        // The listener's handshakes run once someone accepts: accept (and refuse) until closed.
        DispatchQueue.global().async {
            while true {
                do { try server.accept(timeout: 10).close() } catch let e as MTLSError where e.code == .io { return } catch {}
            }
        }
        // Our evaluation refuses a server under an anchor we do not pin.
        let untrusting = try clientOptions(identity: identity("client-a"), anchors: ["other-root"])
        XCTAssertThrowsError(try Self.blockingConnect(server.port, untrusting)) { error in
            let e = error as? MTLSError
            XCTAssertEqual(e?.code, .untrusted, "\(error)")
            XCTAssertEqual(e?.side, .client)
            let failure = e?.connectionFailure
            XCTAssertEqual(failure?.side, .client)
            XCTAssertEqual(failure?.peerChain.first?.commonName, "server.test")
            XCTAssertEqual(failure?.evaluation?.trusted, false)
            XCTAssertEqual(failure?.peerAddress, "127.0.0.1")
        }
        do {
            _ = try await TLSConnection.connect(host: "127.0.0.1", port: server.port, options: untrusting)
            XCTFail("connected to an untrusted server")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .untrusted)
            XCTAssertEqual(e.side, .client)
            XCTAssertEqual(e.connectionFailure?.evaluation?.trusted, false)
        }
        // The server refuses a client without a certificate (TLS 1.2: during the handshake).
        var anonymous = try clientOptions(identity: nil)
        anonymous.maxVersion = .tls12
        XCTAssertThrowsError(try Self.blockingConnect(server.port, anonymous)) { error in
            let e = error as? MTLSError
            XCTAssertEqual(e?.code, .peerAlert, "\(error)")
            XCTAssertEqual(e?.side, .server)
            XCTAssertNotNil(e?.connectionFailure?.receivedAlert)
            XCTAssertEqual(e?.connectionFailure?.tlsVersion, .tls12)
            XCTAssertEqual(e?.connectionFailure?.peerChain.isEmpty, false)
        }
    }

    /// nil is the default, `.forever` no limit, a Duration that many seconds; the deprecated
    /// Double properties read and write the same limits.
    @available(*, deprecated)
    func testTimeLimitsUnderTheCConvention() throws {
        var o = TLSClientOptions()
        XCTAssertEqual(o.connectTimeLimit, .after(.seconds(30)))
        XCTAssertEqual(o.handshakeTimeLimit, .after(.seconds(30)))
        XCTAssertEqual(o.ioTimeLimit, .forever)
        o.connectTimeLimit = .after(.milliseconds(1500))
        XCTAssertEqual(o.connectTimeout, 1.5)
        XCTAssertEqual(o.connectTimeLimit, .after(.milliseconds(1500)))
        o.connectTimeLimit = .forever
        XCTAssertNil(o.connectTimeout)
        o.connectTimeLimit = nil
        XCTAssertEqual(o.connectTimeLimit, .after(.seconds(30)), "nil: back to the default")
        o.handshakeTimeLimit = .after(.zero)
        XCTAssertNotEqual(o.handshakeTimeLimit, .after(.seconds(30)), "a zero duration is not the default")
        XCTAssertNotEqual(o.handshakeTimeLimit, .forever)
        o.ioTimeout = 0
        XCTAssertEqual(o.ioTimeLimit, .forever, "0 is the default, which for reads is no limit")
        var s = TLSServerOptions(identity: try identity("server"))
        XCTAssertEqual(s.firstByteTimeLimit, .after(.seconds(5)))
        XCTAssertEqual(s.clientHelloTimeLimit, .after(.seconds(10)))
        s.clientHelloTimeLimit = .after(.seconds(2))
        XCTAssertEqual(s.clientHelloTimeout, 2)
        s.firstByteTimeLimit = .forever
        XCTAssertNil(s.firstByteTimeout)
        s.ioTimeLimit = .after(.seconds(3))
        XCTAssertEqual(s.ioTimeout, 3)
        o.connectTimeout = .infinity // the deprecated Double: no limit, read back without a trap
        XCTAssertEqual(o.connectTimeLimit, .forever)
        o.connectTimeout = 1e12
        XCTAssertEqual(o.connectTimeLimit, .forever)
    }

    /// An expired handshake time limit, set as a Duration, stops a handshake with a silent peer.
    func testHandshakeTimeLimitAsDuration() async throws {
        let (fd, port) = try Socket.listen(address: "127.0.0.1", port: 0) // accepts, never answers
        defer { close(fd) }
        var o = TLSClientOptions()
        o.handshakeTimeLimit = .after(.milliseconds(300))
        let started = Date()
        do {
            _ = try await TLSConnection.connect(host: "127.0.0.1", port: port, options: o)
            XCTFail("connected to a silent peer")
        } catch let e as MTLSError {
            XCTAssertEqual(e.code, .timeout, "\(e)")
            XCTAssertEqual(e.side, .server)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
    }
}
