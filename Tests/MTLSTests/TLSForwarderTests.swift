import XCTest
import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS

/// `TLSForwarder` (issue 39, forwarding that costs nothing): many pairs on one epoll thread, the
/// same state machine as `forward(to:)`, with the connection tests' PKI.
extension TLSConnectionTests {
    /// A listener whose accepted connections arrive on `accepted` (accepted on a thread of the test).
    final class Accepting: @unchecked Sendable {
        let listener: TLSListener
        let accepted = LockedBox<[TLSConnection]>([])
        init(_ pki: TLSConnectionTests) throws {
            var so = TLSServerOptions(identity: try pki.identity("server"))
            so.clientPolicy = try pki.policy(["root"])
            so.handshakeTimeLimit = .after(.seconds(10))
            listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
            Thread.detachNewThread { [self] in
                while let c = try? listener.accept(timeout: 30) { accepted.mutate { $0.append(c) } }
            }
        }
        /// The `n`th accepted connection, once there is one.
        func take(_ n: Int) throws -> TLSConnection {
            XCTAssertTrue(waitUntil { accepted.value.count > n })
            return try XCTUnwrap(accepted.value.count > n ? accepted.value[n] : nil)
        }
    }

    /// A forwarded pair: the TLS client end, the plaintext program's end of a socket pair, the result.
    struct Forwarded {
        let client: TLSConnection
        let far: Int32
        let done = DispatchSemaphore(value: 0)
        let result = LockedBox<ForwardResult?>(nil)

        func wait() throws -> ForwardResult {
            XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
            return try XCTUnwrap(result.value)
        }
    }

    func forwarded(_ forwarder: TLSForwarder, _ accepting: Accepting, index: Int, idleTimeout: Double? = 20,
                           rewriter: HTTPRequestRewriter? = nil, counters: ForwardCounters? = nil) throws -> Forwarded {
        let client = try TLSConnection.connect(host: "127.0.0.1", port: accepting.listener.port,
                                               options: try clientOptions(identity: identity("client-a")))
        let server = try accepting.take(index)
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        let f = Forwarded(client: client, far: fds[1])
        let (box, done) = (f.result, f.done)
        forwarder.add(server, plain: fds[0], idleTimeout: idleTimeout, counters: counters, requestRewriter: rewriter) { r in
            box.mutate { $0 = r }
            done.signal()
        }
        return f
    }

    static func readToEnd(_ fd: Int32) -> [UInt8] {
        var got: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { return got }
            got += buf[0..<n]
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            off += n
        }
    }

    static func readTLSToEnd(_ c: TLSConnection) -> [UInt8] {
        var reply: [UInt8] = []
        while let chunk = try? c.read(timeout: 20), !chunk.isEmpty { reply += chunk }
        return reply
    }

    private static func threadCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
    }

    /// 200 pairs open at once on one forwarding thread: no thread per pair; then each passes its
    /// half-close both ways (the client's close_notify → EOF on the plaintext side, whose answer
    /// and EOF → the client), and every completion reports the bytes.
    func testForwarderRuns200PairsOnOneThreadWithHalfCloseBothWays() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder(threads: 1)
        defer { forwarder.close() }
        let counters = ForwardCounters()
        var pairs: [Forwarded] = []
        let before = Self.threadCount()
        // The idle timeout only ends a stuck pair: it outlasts opening all 200 (about 20 s under
        // ThreadSanitizer on a loaded machine), or the first pairs end idle before they are used.
        for i in 0..<200 { pairs.append(try forwarded(forwarder, accepting, index: i, idleTimeout: 300, counters: counters)) }
        XCTAssertEqual(forwarder.active, 200)
        XCTAssertLessThanOrEqual(Self.threadCount(), before + 2, "threads grew with the pairs")
        for (i, p) in pairs.enumerated() {
            try p.client.write(Array("hello \(i)".utf8))
            try p.client.shutdown()
            let got = Self.readToEnd(p.far)  // ends: the close_notify became shutdown(SHUT_WR)
            XCTAssertEqual(String(decoding: got, as: UTF8.self), "hello \(i)")
            Self.writeAll(p.far, Array("answer \(i)".utf8))
            shutdown(p.far, Int32(SHUT_WR))
            XCTAssertEqual(String(decoding: Self.readTLSToEnd(p.client), as: UTF8.self), "answer \(i)")
        }
        for (i, p) in pairs.enumerated() {
            let r = try p.wait()
            XCTAssertNil(r.error, "\(i)")
            XCTAssertFalse(r.truncated)
            XCTAssertEqual(r.bytesFromTLS, UInt64("hello \(i)".utf8.count))
            XCTAssertEqual(r.bytesToTLS, UInt64("answer \(i)".utf8.count))
            p.client.close()
            close(p.far)
        }
        XCTAssertEqual(forwarder.active, 0)
        XCTAssertEqual(counters.bytesFromTLS, UInt64(pairs.indices.map { "hello \($0)".utf8.count }.reduce(0, +)))
    }

    /// 4 MiB each way while neither end reads: the socket buffers fill, short writes leave bytes
    /// pending in the pair (both directions), and once the ends read, every byte arrives in order.
    func testForwarderShortWritesKeepPendingBytesBothWays() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder()
        defer { forwarder.close() }
        // Made before the pair is added: under ThreadSanitizer making them takes seconds, which
        // the pair's idle timeout would count.
        let up = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let down = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let p = try forwarded(forwarder, accepting, index: 0)
        defer { p.client.close(); close(p.far) }
        let sent = DispatchSemaphore(value: 0)
        let far = p.far
        Thread.detachNewThread {
            Self.writeAll(far, down)
            shutdown(far, Int32(SHUT_WR))
            sent.signal()
        }
        nonisolated(unsafe) let client = p.client
        let received = LockedBox<[UInt8]>([])
        Thread.detachNewThread {
            // Written while nobody reads the plaintext side: the pair holds what the socket refused.
            try? client.write(up)
            try? client.shutdown()
            received.mutate { $0 = Self.readTLSToEnd(client) }
            sent.signal()
        }
        // The plaintext program reads only now.
        let got = Self.readToEnd(p.far)
        XCTAssertEqual(got.count, up.count)
        XCTAssertTrue(got == up, "the bytes to the plaintext side differ")
        XCTAssertEqual(sent.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(sent.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(received.value == down, "the bytes to the TLS side differ (\(received.value.count))")
        let r = try p.wait()
        XCTAssertNil(r.error)
        XCTAssertEqual(r.bytesFromTLS, UInt64(up.count))
        XCTAssertEqual(r.bytesToTLS, UInt64(down.count))
    }

    /// A TLS peer that hangs up without close_notify: passed on as EOF, marked truncated; an idle
    /// pair ends by its idle timeout; the rewriter's refusal answers 400 and ends the pair.
    func testForwarderTruncationIdleTimeoutAndRewriterRefusal() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder()
        defer { forwarder.close() }

        let truncated = try forwarded(forwarder, accepting, index: 0)
        try truncated.client.write(Array("cut".utf8))
        shutdown(truncated.client.fileDescriptor, Int32(SHUT_RDWR))
        XCTAssertEqual(String(decoding: Self.readToEnd(truncated.far), as: UTF8.self), "cut")
        close(truncated.far)
        let t = try truncated.wait()
        XCTAssertTrue(t.truncated)
        XCTAssertEqual(t.bytesFromTLS, 3)
        truncated.client.close()

        let idle = try forwarded(forwarder, accepting, index: 1, idleTimeout: 0.2)
        let i = try idle.wait()
        XCTAssertTrue(i.idleTimedOut)
        XCTAssertNil(i.error)
        idle.client.close()
        close(idle.far)

        let refused = try forwarded(forwarder, accepting, index: 2, rewriter: try HTTPRequestRewriter(name: "X-Who", value: "alice"))
        try refused.client.write(Array("\u{16}\u{03}\u{01}hello".utf8))
        let answer = String(decoding: Self.readTLSToEnd(refused.client), as: UTF8.self)
        XCTAssertTrue(answer.hasPrefix("HTTP/1.1 400 "), answer)
        let f = try refused.wait()
        XCTAssertEqual(f.error?.code, .parse)
        XCTAssertEqual(f.bytesFromTLS, 0)
        refused.client.close()
        close(refused.far)
        XCTAssertEqual(forwarder.active, 0)
    }

    /// A plaintext socket still connecting (TunnelAddress.startConnect) with a prefix: the prefix
    /// comes first, uncounted, then the bytes; a connect that fails ends the pair marked so.
    func testForwarderConnectsAndWritesThePrefixFirst() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder()
        defer { forwarder.close() }
        let (target, port) = try TunnelAddress("127.0.0.1:0").listen()
        defer { close(target) }
        let client = try TLSConnection.connect(host: "127.0.0.1", port: accepting.listener.port,
                                               options: try clientOptions(identity: identity("client-a")))
        defer { client.close() }
        let server = try accepting.take(0)
        let (plain, _) = try TunnelAddress.tcp(host: "127.0.0.1", port: port).startConnect(timeout: 10)
        let done = DispatchSemaphore(value: 0)
        let result = LockedBox<ForwardResult?>(nil)
        forwarder.add(server, plain: plain, prefix: Array("PREFIX|".utf8), connectTimeout: 10) { r in
            result.mutate { $0 = r }
            done.signal()
        }
        try client.write(Array("data".utf8))
        try client.shutdown()
        let (far, _) = try Socket.accept(target, deadline: Deadline(seconds: 20))
        Socket.setNonBlocking(far, false)
        XCTAssertEqual(String(decoding: Self.readToEnd(far), as: UTF8.self), "PREFIX|data")
        close(far)
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        XCTAssertNil(result.value?.error)
        XCTAssertEqual(result.value?.bytesFromTLS, 4)

        // A host name is connected at once (its addresses tried in turn, as connect(timeout:)
        // does: localhost may say ::1 first, where nothing listens).
        let (named, namedInProgress) = try TunnelAddress.tcp(host: "localhost", port: port).startConnect(timeout: 10)
        XCTAssertFalse(namedInProgress)
        close(named)

        // Nothing listens on the closed port any more.
        let (gone, gonePort) = try TunnelAddress("127.0.0.1:0").listen()
        close(gone)
        let second = try TLSConnection.connect(host: "127.0.0.1", port: accepting.listener.port,
                                               options: try clientOptions(identity: identity("client-a")))
        defer { second.close() }
        let failed = DispatchSemaphore(value: 0)
        let failure = LockedBox<ForwardResult?>(nil)
        do {
            let (fd, _) = try TunnelAddress.tcp(host: "127.0.0.1", port: gonePort).startConnect(timeout: 10)
            forwarder.add(try accepting.take(1), plain: fd, connectTimeout: 10) { r in
                failure.mutate { $0 = r }
                failed.signal()
            }
            XCTAssertEqual(failed.wait(timeout: .now() + 20), .success)
            XCTAssertEqual(failure.value?.plainConnectFailed, true)
            XCTAssertEqual(failure.value?.error?.code, .connect)
        } catch let e as MTLSError {
            // Loopback may refuse at once: startConnect reports it itself.
            XCTAssertEqual(e.code, .connect)
        }
    }

    /// Closing the forwarder ends every running pair with a `.closed` error (completions called,
    /// sockets closed); a pair added after ends at once the same way.
    func testForwarderCloseEndsActivePairs() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder(threads: 2)
        let pairs = try (0..<3).map { try forwarded(forwarder, accepting, index: $0) }
        XCTAssertEqual(forwarder.active, 3)
        forwarder.close(drainTimeout: 0)
        XCTAssertEqual(forwarder.active, 0)
        for p in pairs {
            XCTAssertEqual(try p.wait().error?.code, .closed)
            XCTAssertEqual(Self.readToEnd(p.far), [])  // the plaintext socket was closed
            p.client.close()
            close(p.far)
        }
        let late = try forwarded(forwarder, accepting, index: 3)
        XCTAssertEqual(try late.wait().error?.code, .closed)
        late.client.close()
        close(late.far)
    }

    /// A non-blocking connection handed over before its handshake (C `mtls_forwarder_add` of an
    /// `opts->non_blocking` connection) has its handshake finished by the forwarding thread, without
    /// blocking it, then forwards. Before, the pair ended at once with the want-read error.
    func testForwarderFinishesANonBlockingConnectionsHandshake() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder(threads: 1)
        defer { forwarder.close() }
        var o = try clientOptions(identity: identity("client-a"))
        o.nonBlocking = true
        let client = try TLSConnection.open(host: "127.0.0.1", port: accepting.listener.port, options: o)
        XCTAssertFalse(client.isHandshakeComplete)
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        let done = DispatchSemaphore(value: 0)
        let result = LockedBox<ForwardResult?>(nil)
        forwarder.add(client, plain: fds[0], idleTimeout: 20) { r in
            result.mutate { $0 = r }
            done.signal()
        }
        let server = try accepting.take(0)  // the listener finished the handshake the forwarder drove
        defer { server.close() }
        try server.write(Array("ping".utf8))
        var got: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16)
        while got.count < 4 {
            let n = read(fds[1], &buf, buf.count)
            guard n > 0 else { break }
            got += buf[0..<n]
        }
        XCTAssertEqual(String(decoding: got, as: UTF8.self), "ping")
        Self.writeAll(fds[1], Array("pong".utf8))
        shutdown(fds[1], Int32(SHUT_WR))
        XCTAssertEqual(String(decoding: Self.readTLSToEnd(server), as: UTF8.self), "pong")
        try server.shutdown()
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        XCTAssertNotNil(result.value)
        XCTAssertNil(result.value?.error)
        close(fds[1])
    }
}
