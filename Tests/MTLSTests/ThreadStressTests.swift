import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS

/// Threads at once on one listener and one forwarder (issue 40): run under ThreadSanitizer by
/// `make tsan`, where a race among the threads (accept callers taking the turn from each other and
/// from the listener's own thread, parked handshakes, an identity rotation, a close under them; pairs
/// handed to two forwarding threads from four) is reported and fails the run. Without TSan they
/// check that no connection or completion is lost.
extension TLSConnectionTests {
    func testManyAcceptCallersClientsAndARotationAtOnceThenACloseUnderThem() throws {
        var so = TLSServerOptions(identity: try identity("server"))
        so.clientPolicy = try policy(["int-a"])
        so.handshakeSeconds = 20
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        defer { listener.close() }
        let port = listener.port
        let options = try clientOptions(identity: identity("client-a"))
        let rotated = try identity("server")
        let (acceptors, clients, rounds) = (3, 4, 6)
        let stop = LockedBox(false)
        let served = LockedBox(0)
        let ended = DispatchGroup()
        // Accept callers that echo one message; they stop when asked (between accepts), or when
        // the listener closes under them.
        func acceptLoop(until: @escaping @Sendable () -> Bool) {
            ended.enter()
            Thread.detachNewThread {
                defer { ended.leave() }
                while !until() {
                    do {
                        let c = try listener.accept(timeout: 0.2)
                        if let m = try? c.read(timeout: 20) { _ = try? c.write(m) }
                        c.close()
                        served.mutate { $0 += 1 }
                    } catch let e as MTLSError where e.code == .timeout {
                        continue
                    } catch {
                        return  // the listener is closed
                    }
                }
            }
        }
        for _ in 0..<acceptors { acceptLoop { stop.value } }
        let failures = LockedBox<[String]>([])
        func runClients(_ count: Int, rounds: Int) -> DispatchGroup {
            let group = DispatchGroup()
            for t in 0..<count {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    for r in 0..<rounds {
                        do {
                            let c = try TLSConnection.connect(host: "127.0.0.1", port: port, options: options)
                            defer { c.close() }
                            let m = Array("client \(t) round \(r)".utf8)
                            try c.write(m)
                            if try c.read(timeout: 20) != m { failures.mutate { $0.append("\(t)/\(r): another echo") } }
                        } catch {
                            failures.mutate { $0.append("\(t)/\(r): \(error)") }
                        }
                    }
                }
            }
            return group
        }
        let first = runClients(clients, rounds: rounds)
        // The server's identity rotates while the clients come (new contexts, tickets of the old one).
        for _ in 0..<3 { try listener.setIdentity(rotated) }
        XCTAssertEqual(first.wait(timeout: .now() + 120), .success)
        XCTAssertTrue(waitUntil(timeout: 30) { served.value == clients * rounds })
        // No accept caller: the listener's thread handshakes the next clients and queues them.
        stop.mutate { $0 = true }
        XCTAssertEqual(ended.wait(timeout: .now() + 30), .success)
        let second = runClients(2, rounds: 2)
        // One accept caller takes them (queued, or handshaken in its own turn), then one waits
        // with no limit until the listener closes under it.
        acceptLoop { served.value >= clients * rounds + 4 }
        XCTAssertEqual(second.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(ended.wait(timeout: .now() + 30), .success)
        let closed = DispatchSemaphore(value: 0)
        let afterClose = LockedBox<Result<TLSConnection, any Error>?>(nil)
        Thread.detachNewThread {
            let r = Result { try listener.accept() }
            afterClose.mutate { $0 = r }
            closed.signal()
        }
        XCTAssertTrue(waitUntil { listener.counters.accepted == UInt64(clients * rounds + 4) })
        listener.close()
        XCTAssertEqual(closed.wait(timeout: .now() + 30), .success)
        XCTAssertThrowsError(try XCTUnwrap(afterClose.value).get(), "an accept waiting with no limit ends when the listener closes")
        XCTAssertEqual(failures.value, [])
        XCTAssertEqual(served.value, clients * rounds + 4)
        XCTAssertEqual(listener.counters.refused, [:])
    }

    func testPairsHandedToTwoForwardingThreadsFromFourThreadsAtOnce() throws {
        let accepting = try Accepting(self)
        defer { accepting.listener.close() }
        let forwarder = try TLSForwarder(threads: 2)
        defer { forwarder.close() }
        let options = try clientOptions(identity: identity("client-a"))
        let (adders, each) = (4, 6)
        var clients: [TLSConnection] = [], servers: [TLSConnection] = [], fars: [Int32] = [], nears: [Int32] = []
        for i in 0..<adders * each {
            clients.append(try TLSConnection.connect(host: "127.0.0.1", port: accepting.listener.port, options: options))
            servers.append(try accepting.take(i))
            var fds: [Int32] = [0, 0]
            XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
            nears.append(fds[0])
            fars.append(fds[1])
        }
        defer { for (c, far) in zip(clients, fars) { c.close(); close(far) } }
        let results = LockedBox<[Int: ForwardResult]>([:])
        let done = DispatchGroup()
        nonisolated(unsafe) let handed = servers
        let plain = nears
        for a in 0..<adders {
            for _ in 0..<each { done.enter() }
            Thread.detachNewThread {
                for i in a * each..<(a + 1) * each {
                    forwarder.add(handed[i], plain: plain[i], idleTimeout: 300) { r in
                        results.mutate { $0[i] = r }
                        done.leave()
                    }
                }
            }
        }
        for (i, (c, far)) in zip(clients, fars).enumerated() {
            try c.write(Array("up \(i)".utf8))
            try c.shutdown()
            XCTAssertEqual(String(decoding: Self.readToEnd(far), as: UTF8.self), "up \(i)")
            Self.writeAll(far, Array("down \(i)".utf8))
            shutdown(far, Int32(SHUT_WR))
            XCTAssertEqual(String(decoding: Self.readTLSToEnd(c), as: UTF8.self), "down \(i)")
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        let all = results.value
        XCTAssertEqual(all.count, adders * each)
        for (i, r) in all {
            XCTAssertNil(r.error, "\(i)")
            XCTAssertEqual(r.bytesFromTLS, UInt64("up \(i)".utf8.count))
            XCTAssertEqual(r.bytesToTLS, UInt64("down \(i)".utf8.count))
        }
        XCTAssertEqual(forwarder.active, 0)
    }
}
