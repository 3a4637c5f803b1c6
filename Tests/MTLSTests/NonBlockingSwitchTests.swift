import Foundation
import XCTest
@testable import MTLS

/// TLSConnection.setNonBlocking (mtls_conn_set_non_blocking): kept apart from
/// TLSConnectionTests.swift so that it merges without touching that file.
extension TLSConnectionTests {
    /// A listener (clients under int-a; handshakes within 10 s, I/O within `ioSeconds`) whose
    /// accept of one client runs on a thread: `accepted()` waits for it.
    private func listenerAcceptingOne(ioSeconds: Double) throws -> (listener: TLSListener, accepted: () throws -> TLSConnection) {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeSeconds = 10
        so.ioSeconds = ioSeconds
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        let accepted = LockedBox<TLSConnection?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let c = try? listener.accept(timeout: 10)
            accepted.mutate { $0 = c }
            done.signal()
        }
        return (listener, {
            done.wait()
            return try XCTUnwrap(accepted.value)
        })
    }

    func testAcceptedConnectionSwitchesToNonBlockingAndBack() throws {
        let (listener, accepted) = try listenerAcceptingOne(ioSeconds: 0.3)
        // A client opened non-blocking and switched to blocking before its handshake: the
        // handshake waits for the TCP connect and completes in one call.
        var o = try clientOptions(identity: identity("client-a"))
        o.nonBlocking = true
        o.sessionResumption = false
        let client = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        try client.setNonBlocking(false)
        try client.handshake()
        XCTAssertTrue(client.isHandshakeComplete)
        let server = try accepted()
        defer { server.close(); client.close() }

        // Blocking (as accepted): a read waits out the I/O timeout.
        XCTAssertThrowsError(try server.read()) { XCTAssertEqual(($0 as? MTLSError)?.code, .timeout) }
        // Non-blocking: the same read says it would wait; data arrives whole.
        try server.setNonBlocking(true)
        XCTAssertThrowsError(try server.read()) { XCTAssertEqual(($0 as? MTLSError)?.code, .wantRead) }
        try client.write(Array("ping".utf8))
        var p = pollfd(fd: server.fileDescriptor, events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(poll(&p, 1, 10_000), 1)
        XCTAssertEqual(try server.read(), Array("ping".utf8))
        // Back to blocking: reads wait again.
        try server.setNonBlocking(false)
        XCTAssertThrowsError(try server.read()) { XCTAssertEqual(($0 as? MTLSError)?.code, .timeout) }
        try client.write(Array("back".utf8))
        XCTAssertEqual(try server.read(), Array("back".utf8))
    }

    /// A blocking client's read right after its write polls before it reads (no recv that fails
    /// first); switched to non-blocking mode, where its caller may wait for an edge, a read right
    /// after a write takes what has come already instead of saying it would wait.
    func testAClientReadAfterItsWriteTakesWhatCameInNonBlockingMode() throws {
        let (listener, accepted) = try listenerAcceptingOne(ioSeconds: 10)
        var o = try clientOptions(identity: identity("client-a"))
        o.sessionResumption = false
        let client = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: o)
        let server = try accepted()
        defer { server.close(); client.close() }
        func waitReadable(_ c: TLSConnection) {
            var p = pollfd(fd: c.fileDescriptor, events: Int16(POLLIN), revents: 0)
            XCTAssertEqual(poll(&p, 1, 10_000), 1)
        }
        // Blocking: the server's answer is read after the client's own wait.
        try client.write(Array("ping".utf8))
        XCTAssertEqual(try server.read(), Array("ping".utf8))
        try server.write(Array("pong".utf8))
        XCTAssertEqual(try client.read(), Array("pong".utf8))
        // Non-blocking: the server speaks first; its record is in the client's socket before the
        // client writes, and the client's next read takes it.
        try client.setNonBlocking(true)
        try server.write(Array("first".utf8))
        waitReadable(client)
        try client.write(Array("then".utf8))
        XCTAssertEqual(try client.read(), Array("first".utf8))
        XCTAssertEqual(try server.read(), Array("then".utf8))
        // Back to blocking: a read after a write waits for the answer again.
        try client.setNonBlocking(false)
        try client.write(Array("again".utf8))
        XCTAssertEqual(try server.read(), Array("again".utf8))
        try server.write(Array("done".utf8))
        XCTAssertEqual(try client.read(), Array("done".utf8))
    }
}
