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

    /// A client connecting to `listener` from a thread of its own, and the connection `accept`
    /// gave for it: (server side, client side), both the caller's to close.
    private func acceptConnecting(_ listener: TLSListener, options: TLSClientOptions) throws -> (TLSConnection, TLSConnection) {
        let port = listener.port
        let client = LockedBox<Result<TLSConnection, any Error>?>(nil)
        let connected = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let r = Result { try TLSConnection.connect(host: "127.0.0.1", port: port, options: options) }
            client.mutate { $0 = r }
            connected.signal()
        }
        let server: TLSConnection
        do { server = try listener.accept(timeout: 10) } catch {
            connected.wait()
            try? client.value?.get().close()
            throw error
        }
        connected.wait()
        do { return (server, try XCTUnwrap(client.value).get()) } catch {
            server.close()
            throw error
        }
    }

    func testAcceptRunsAQuickClientsHandshakeOnItsOwnThread() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeTimeout = 10
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { listener.close() }
        let before = listenerThreads()
        let (server, c) = try acceptConnecting(listener, options: clientOptions(identity: identity("client-a")))
        defer { server.close(); c.close() }
        XCTAssertTrue(server.isHandshakeComplete)
        try c.write(Array("ping".utf8))
        XCTAssertEqual(try server.read(), Array("ping".utf8))
        // The accept call did it all: at most the listener's one thread exists (started as the
        // accept returned, for clients that come while the application is not in accept).
        XCTAssertLessThanOrEqual(listenerThreads(), before + 1)
        XCTAssertEqual(listener.counters.accepted, 1)
    }

    /// Issue 40: an accepted socket has TCP_NODELAY without a `setsockopt` of its own (the
    /// listening socket's is copied to it): so for a listener on an address, and for one handed a
    /// listening socket without the option (as systemd may pass it).
    func testAcceptedSocketsHaveNoDelay() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeTimeout = 10
        let options = try clientOptions(identity: identity("client-a"))
        func noDelay(_ fd: Int32) -> Int32 {
            var on: Int32 = -1
            var len = socklen_t(MemoryLayout<Int32>.size)
            XCTAssertEqual(getsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, &len), 0)
            return on
        }
        let bare = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(bare, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        XCTAssertEqual(bound, 0)
        XCTAssertEqual(listen(bare, 16), 0)
        XCTAssertEqual(noDelay(bare), 0)
        for listener in [try TLSListener(address: "127.0.0.1", port: 0, options: so),
                         try TLSListener(listeningSocket: bare, options: so)] {
            defer { listener.close() }
            // Twice: the first accepted socket is checked, the next ones trust what it showed.
            for _ in 0..<2 {
                let (server, c) = try acceptConnecting(listener, options: options)
                defer { server.close(); c.close() }
                XCTAssertEqual(noDelay(server.fileDescriptor), 1)
                XCTAssertEqual(noDelay(c.fileDescriptor), 1)
            }
        }
    }
}
