import Foundation
import XCTest
@testable import MTLS

/// Issue 40: the thread calling accept runs its client's handshake itself — no thread per
/// handshake, no connection handed from one thread to another when the client is quick.
extension TLSConnectionTests {
    /// The listener threads alive in this process ("mtls-listener" before issue 40, the
    /// listener's one thread "mtls-handshakes" now).
    private func listenerThreads() -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { t in
            let name = (try? String(contentsOfFile: "/proc/self/task/\(t)/comm", encoding: .utf8)) ?? ""
            return name.hasPrefix("mtls-listener") || name.hasPrefix("mtls-handshakes")
        }.count
    }

    func testAcceptRunsAQuickClientsHandshakeOnItsOwnThread() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeTimeout = 10
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { listener.close() }
        let before = listenerThreads()
        let port = listener.port
        let options = try clientOptions(identity: identity("client-a"))
        let client = LockedBox<Result<TLSConnection, any Error>?>(nil)
        let connected = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let r = Result { try TLSConnection.connect(host: "127.0.0.1", port: port, options: options) }
            client.mutate { $0 = r }
            connected.signal()
        }
        let server = try listener.accept(timeout: 10)
        defer { server.close() }
        connected.wait()
        let c = try XCTUnwrap(client.value).get()
        defer { c.close() }
        XCTAssertTrue(server.isHandshakeComplete)
        try c.write(Array("ping".utf8))
        XCTAssertEqual(try server.read(), Array("ping".utf8))
        // The accept call did it all: at most the listener's one thread exists (started as the
        // accept returned, for clients that come while the application is not in accept).
        XCTAssertLessThanOrEqual(listenerThreads(), before + 1)
        XCTAssertEqual(listener.counters.accepted, 1)
    }
}
