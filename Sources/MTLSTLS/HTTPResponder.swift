internal import COpenSSL
import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// The one small HTTP/1.x responder of libmtls: the Prometheus scrape endpoint
// (``MetricsEndpoint``) and the ACME http-01 challenge responder both serve through it. One
// thread polls every client, so no client holds up another: each has a short deadline for its
// request head and again for taking the answer, at most ``HTTPResponder/maxClients`` are open
// at once (the oldest is dropped for a newcomer), and running out of descriptors leaves clients
// in the backlog rather than ending the responder. Requests are read by
// ``HTTPRequestParser/parse(_:maxHead:)``, a pure function of the bytes (fuzzable).

/// A request head as the responder read it.
package struct HTTPRequest: Sendable, Equatable {
    /// The method, as sent (`GET`, `HEAD`...).
    package var method: String
    /// The path of the request target, without its query.
    package var path: String
    /// The query of the request target (after `?`, before any `#`), "" when none.
    package var query: String = ""
    /// Header names lowercased, values with their spaces trimmed, in order.
    package var headers: [HTTPHeader]

    /// The first header with this (case-insensitive) name.
    package func header(_ name: String) -> String? {
        let n = name.lowercased()
        return headers.first { $0.name == n }?.value
    }
}

/// One header line.
package struct HTTPHeader: Sendable, Equatable {
    package var name: String
    package var value: String
}

/// The reader of request heads: pure, over the bytes a client sent so far.
package enum HTTPRequestParser {
    /// What the bytes so far hold.
    package enum Result: Sendable, Equatable {
        /// A whole, well-formed request head.
        case complete(HTTPRequest)
        /// Not yet the end of the head.
        case incomplete
        /// More than `maxHead` bytes without the end of the head.
        case tooLarge
        /// Not an HTTP/1.x request head.
        case malformed
    }

    /// Reads the request head at the start of `bytes` (what follows it is not looked at).
    /// `METHOD SP origin-form SP HTTP/1.x` (``HTTPRequestLine``, with a target that starts with
    /// "/"), then header lines; no bare line feed, no control character in a header.
    package static func parse(_ bytes: [UInt8], maxHead: Int = 8192) -> Result {
        guard let end = headEnd(bytes, limit: maxHead + 4) else { return bytes.count > maxHead ? .tooLarge : .incomplete }
        guard end <= maxHead else { return .tooLarge }
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var i = 0
        while i < end {
            if bytes[i] == 13 {
                guard i + 1 < bytes.count, bytes[i + 1] == 10 else { return .malformed }
                lines.append(bytes[start..<i])
                i += 2
                start = i
            } else {
                i += 1
            }
        }
        lines.append(bytes[start..<end])
        // The request line as the one reader (MTLSNet) reads it; here also an origin-form target.
        guard let line = HTTPRequestLine.parse(lines[0]), line.method.count <= 32, line.target.first == UInt8(ascii: "/") else {
            return .malformed
        }
        let target = line.target
        let path = target.prefix { $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        var headers: [HTTPHeader] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                  line[..<colon].allSatisfy({ $0 > 32 && $0 < 127 }),
                  line[(colon + 1)...].allSatisfy({ $0 == 9 || ($0 >= 32 && $0 != 127) }) else { return .malformed }
            headers.append(HTTPHeader(name: String(decoding: line[..<colon], as: UTF8.self).lowercased(),
                                      value: String(decoding: line[(colon + 1)...], as: UTF8.self).trimmedSpaces))
        }
        let query = target.dropFirst(path.count + 1).prefix { $0 != UInt8(ascii: "#") }
        return .complete(HTTPRequest(method: String(decoding: line.method, as: UTF8.self), path: String(decoding: path, as: UTF8.self),
                                     query: String(decoding: query, as: UTF8.self), headers: headers))
    }

    /// Where the head ends (the index of its blank line's CR LF CR LF), looked for within `limit` bytes.
    static func headEnd(_ bytes: [UInt8], limit: Int) -> Int? {
        let n = min(bytes.count, limit)
        guard n >= 4 else { return nil }
        for i in 0...(n - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }
}

/// The one small HTTP/1.x responder (see the top of this file).
package final class HTTPResponder: Sendable {
    /// The port listened on (the one the system picked when 0 was asked for).
    package let port: UInt16
    private let core: Core?
    private let tlsCore: TLSCore?

    /// The most clients open at once, by default.
    package static let maxClients = 64
    /// The largest request head read.
    package static let maxRequestHead = 8192
    /// Seconds a client has to send its request head (and, again, to take the answer), by default.
    package static let requestTimeout = 5.0

    /// Listens on `address`:`port` (nil address: every IPv4 address; port 0: an ephemeral one)
    /// and answers each request head with `handler`, called on the responder's thread (named
    /// `threadName`). A head over ``maxRequestHead`` is answered 431, a malformed one 400, one not
    /// complete in time 400.
    package init(address: String?, port: UInt16, threadName: String, maxClients: Int = HTTPResponder.maxClients,
                 requestTimeout: Double = HTTPResponder.requestTimeout,
                 handler: @escaping @Sendable (HTTPRequest) -> HTTPAnswer) throws {
        let (fd, bound) = try Socket.listen(address: address, port: port, backlog: 128)
        Socket.setNonBlocking(fd, true)
        let core = Core(fd: fd, maxClients: max(1, maxClients), requestTimeout: requestTimeout, handler: handler)
        guard BackgroundThread.start(name: threadName, { core.run() }) else {
            Glibc.close(fd)
            throw MTLSError(.io, "cannot start the \(threadName) thread")
        }
        self.core = core
        self.tlsCore = nil
        self.port = bound
    }

    /// Serves the clients `listener` accepts (their handshakes done by the listener, under its
    /// options: a client certificate required and judged by its client policy, say), each on a
    /// thread of its own under `requestTimeout` for its request and again for the answer, at most
    /// `maxClients` at once (a client beyond them is closed at once). The responder owns the
    /// listener and closes it.
    package init(listener: TLSListener, threadName: String, maxClients: Int = HTTPResponder.maxClients,
                 requestTimeout: Double = HTTPResponder.requestTimeout,
                 handler: @escaping @Sendable (HTTPRequest) -> HTTPAnswer) throws {
        let core = TLSCore(listener: listener, threadName: threadName, maxClients: max(1, maxClients), requestTimeout: requestTimeout,
                           handler: handler)
        guard BackgroundThread.start(name: threadName, { core.run() }) else {
            listener.close()
            throw MTLSError(.io, "cannot start the \(threadName) thread")
        }
        self.core = nil
        self.tlsCore = core
        self.port = listener.port
    }

    deinit { close() }

    /// Stops listening; the responder's thread closes every client and ends within 250 ms.
    package func close() {
        core?.close()
        tlsCore?.close()
    }

    /// ``close()``, then waits (up to 2 s) until the thread has closed the listening socket, so
    /// that the port can be listened on again at once (the next challenge on the same port).
    package func stop() {
        close()
        let deadline = Deadline.now() + 2
        func ended() -> Bool {
            if let core { return core.ended.load(ordering: .acquiring) }
            return tlsCore?.ended.load(ordering: .acquiring) ?? true
        }
        while !ended() && Deadline.now() < deadline { usleep(5_000) }
    }

    /// The answer to what a client sent.
    package static func answer(_ result: HTTPRequestParser.Result, handler: (HTTPRequest) -> HTTPAnswer) -> HTTPAnswer {
        switch result {
        case .complete(let request):
            var a = handler(request)
            if request.method == "HEAD" { a.headOnly = true }
            return a
        case .tooLarge: return .status(431)
        case .incomplete, .malformed: return .status(400)
        }
    }

    /// A connection handed from the accept loop to the one thread that serves it (and only it).
    private final class Handed: @unchecked Sendable {
        let conn: TLSConnection
        init(_ conn: TLSConnection) { self.conn = conn }
    }

    /// The TLS side: an accept loop, and a short-lived thread per client.
    private final class TLSCore: Sendable {
        let listener: TLSListener
        let threadName: String
        let maxClients: Int
        let requestTimeout: Double
        let handler: @Sendable (HTTPRequest) -> HTTPAnswer
        private let closed = Atomic<Bool>(false)
        let ended = Atomic<Bool>(false)
        private let active = Atomic<Int>(0)

        init(listener: TLSListener, threadName: String, maxClients: Int, requestTimeout: Double,
             handler: @escaping @Sendable (HTTPRequest) -> HTTPAnswer) {
            self.listener = listener
            self.threadName = threadName
            self.maxClients = maxClients
            self.requestTimeout = requestTimeout
            self.handler = handler
        }

        func close() { closed.store(true, ordering: .relaxed) }

        func run() {
            defer {
                listener.close()
                ended.store(true, ordering: .releasing)
            }
            while !closed.load(ordering: .relaxed) {
                // A refused client (no certificate, an untrusted one) is the listener's to report: go on.
                guard let conn = try? listener.accept(timeout: 0.25) else { continue }
                guard active.add(1, ordering: .relaxed).newValue <= maxClients else {
                    active.subtract(1, ordering: .relaxed)
                    conn.close()
                    continue
                }
                let handed = Handed(conn)
                let started = BackgroundThread.start(name: threadName) { [self] in
                    serve(handed.conn)
                    active.subtract(1, ordering: .relaxed)
                }
                if !started {
                    active.subtract(1, ordering: .relaxed)
                    conn.close()
                }
            }
        }

        private func serve(_ conn: TLSConnection) {
            defer { conn.close() }
            var head: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            let deadline = Deadline(seconds: requestTimeout)
            var result = HTTPRequestParser.Result.incomplete
            while result == .incomplete {
                guard let n = try? chunk.withUnsafeMutableBytes({ try conn.read(into: $0, deadline: deadline) }), n > 0 else { break }
                head += chunk[..<n]
                result = HTTPRequestParser.parse(head, maxHead: HTTPResponder.maxRequestHead)
            }
            let answer = HTTPResponder.answer(result, handler: handler).bytes
            _ = try? answer.withUnsafeBytes { try conn.write($0, deadline: Deadline(seconds: requestTimeout)) }
        }
    }

    /// One client: reading its head, then writing the answer (and dropping what else it sends),
    /// then, the answer sent, waiting briefly for it to close so that closing first does not
    /// reset the connection under the answer.
    private struct Client {
        enum Phase { case reading, writing, draining }
        var phase = Phase.reading
        var head: [UInt8] = []
        var answer: [UInt8] = []
        var sent = 0
        var deadline: Double
        let order: UInt64
    }

    /// The state the responder's thread owns.
    private final class Core: Sendable {
        let fd: Int32
        let maxClients: Int
        let requestTimeout: Double
        let handler: @Sendable (HTTPRequest) -> HTTPAnswer
        private let closed = Atomic<Bool>(false)
        let ended = Atomic<Bool>(false)

        init(fd: Int32, maxClients: Int, requestTimeout: Double, handler: @escaping @Sendable (HTTPRequest) -> HTTPAnswer) {
            self.fd = fd
            self.maxClients = maxClients
            self.requestTimeout = requestTimeout
            self.handler = handler
        }

        func close() { closed.store(true, ordering: .relaxed) }

        /// Serves until closed. The listening socket and the clients are closed here, by the one
        /// thread that polls them, so no descriptor number is reused under a poll.
        func run() {
            var clients: [Int32: Client] = [:]
            var accepted: UInt64 = 0
            // After a failed accept (out of descriptors), the listening socket rests a while
            // rather than wake every poll at once.
            var acceptRestsUntil = 0.0
            var chunk = [UInt8](repeating: 0, count: 4096)
            defer {
                for c in clients.keys { Glibc.close(c) }
                Glibc.close(fd)
                ended.store(true, ordering: .releasing)
            }
            while !closed.load(ordering: .relaxed) {
                let now = Deadline.now()
                for (c, client) in clients where client.deadline <= now {
                    // Out of time: a silent or slow client gets 400 once, a slow reader nothing more.
                    if client.phase == .reading {
                        clients[c]?.answer = HTTPResponder.answer(.incomplete, handler: handler).bytes
                        clients[c]?.phase = .writing
                        clients[c]?.deadline = now + 0.5
                    } else {
                        clients[c] = nil
                        Glibc.close(c)
                    }
                }
                var fds = [pollfd(fd: fd, events: now < acceptRestsUntil ? 0 : Int16(POLLIN), revents: 0)]
                for (c, client) in clients {
                    fds.append(pollfd(fd: c, events: Int16(client.phase == .writing ? POLLIN | POLLOUT : POLLIN), revents: 0))
                }
                let soonest = clients.values.map(\.deadline).min().map { max(0, $0 - now) } ?? 0.25
                guard poll(&fds, nfds_t(fds.count), Int32(min(soonest, 0.25) * 1000) + 1) > 0 else { continue }
                for p in fds.dropFirst() where p.revents != 0 {
                    guard var client = clients[p.fd] else { continue }
                    if p.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                        let n = recv(p.fd, &chunk, chunk.count, 0)
                        if n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN) {
                            // The client is gone (or done, after the answer): nothing more to do.
                            clients[p.fd] = nil
                            Glibc.close(p.fd)
                            continue
                        }
                        if n > 0, client.phase == .reading {
                            client.head += chunk[..<n]
                            let result = HTTPRequestParser.parse(client.head, maxHead: HTTPResponder.maxRequestHead)
                            if result != .incomplete {
                                client.answer = HTTPResponder.answer(result, handler: handler).bytes
                                client.head = []
                                client.phase = .writing
                                client.deadline = Deadline.now() + requestTimeout
                            }
                        }
                    }
                    if client.phase == .writing, p.revents & Int16(POLLOUT) != 0 {
                        let n = client.answer[client.sent...].withUnsafeBytes { send(p.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                        if n > 0 { client.sent += n }
                        if client.sent == client.answer.count {
                            shutdown(p.fd, Int32(SHUT_WR))
                            client.phase = .draining
                            client.deadline = min(client.deadline, Deadline.now() + 1)
                        } else if n < 0, errno != EINTR, errno != EAGAIN {
                            clients[p.fd] = nil
                            Glibc.close(p.fd)
                            continue
                        }
                    }
                    clients[p.fd] = client
                }
                if fds[0].revents & Int16(POLLIN) != 0, !acceptAll(&clients, &accepted) { acceptRestsUntil = Deadline.now() + 0.1 }
            }
        }

        /// Accepts every client waiting; past ``maxClients`` the one accepted first is closed.
        /// False when accepting failed (EMFILE and the like: those waiting stay in the backlog
        /// until a descriptor is free; the responder itself goes on).
        private func acceptAll(_ clients: inout [Int32: Client], _ accepted: inout UInt64) -> Bool {
            while true {
                let next: (Int32, String)?
                do { next = try Socket.acceptNow(fd) } catch { return false }
                guard let (c, _) = next else { return true } // non-blocking already (acceptNow)
                if clients.count >= maxClients, let oldest = clients.min(by: { $0.value.order < $1.value.order })?.key {
                    clients[oldest] = nil
                    Glibc.close(oldest)
                }
                accepted += 1
                clients[c] = Client(deadline: Deadline.now() + requestTimeout, order: accepted)
            }
        }
    }
}
