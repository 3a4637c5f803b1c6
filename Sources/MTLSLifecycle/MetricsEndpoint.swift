import Synchronization
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// This file owns the Prometheus scrape endpoint (`mtls serve --metrics-port`, issue 26): a plain
// HTTP/1.x responder on the loopback address that answers GET and HEAD of / and /metrics with
// the exposition text, and keeps answering whatever the clients that connect to it do.

/// A Prometheus scrape endpoint on 127.0.0.1: `GET /metrics` (or `/`) answers the text `body`
/// makes, as `text/plain; version=0.0.4`; HEAD the same headers; another method 405, another
/// path 404, a request that is not HTTP/1.x 400, a request head over ``maxRequestHead`` bytes 431.
///
/// One thread of its own (`mtls-metrics`) serves every client with `poll`, so a client cannot
/// hold it up: each has ``requestTimeout`` seconds for its request head and as long again to take
/// the answer; at most ``maxClients`` are open at once, and when another comes the one accepted
/// first is closed (a scraper sends its request at once, so only idle ones are old); running out
/// of file descriptors leaves clients in the backlog, not the endpoint ended. It never touches
/// the TLS listener it reports on.
public final class MetricsEndpoint: Sendable {
    /// The port listened on (the one the system picked when 0 was asked for).
    public let port: UInt16
    private let core: Core

    /// The most clients open at once.
    public static let maxClients = 64
    /// The largest request head (request line and headers) read.
    public static let maxRequestHead = 8192
    /// Seconds a client has to send its whole request head (and, again, to take the answer).
    public static let requestTimeout = 5.0

    /// Listens on 127.0.0.1:`port` (0: an ephemeral port) and answers scrapes with `body()`,
    /// called once per scrape on the endpoint's thread.
    public init(port: UInt16, body: @escaping @Sendable () -> String) throws {
        let fd: Int32, bound: UInt16
        do {
            (fd, bound) = try Socket.listen(address: "127.0.0.1", port: port, backlog: 64)
        } catch let e as MTLSError {
            throw MTLSError(e.code, "metrics endpoint: \(e.message)") // which of a server's ports failed
        }
        Socket.setNonBlocking(fd, true)
        let core = Core(fd: fd, body: body)
        guard BackgroundThread.start(name: "mtls-metrics", { core.run() }) else {
            Glibc.close(fd)
            throw MTLSError(.io, "metrics: cannot start a thread")
        }
        self.core = core
        self.port = bound
    }

    deinit { close() }

    /// Stops listening; the endpoint's thread closes every client and ends within 250 ms.
    public func close() { core.close() }

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

    /// The state the endpoint's thread owns (the endpoint holds this, and so does the thread).
    private final class Core: Sendable {
        let fd: Int32
        let body: @Sendable () -> String
        private let closed = Atomic<Bool>(false)

        init(fd: Int32, body: @escaping @Sendable () -> String) {
            self.fd = fd
            self.body = body
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
            }
            while !closed.load(ordering: .relaxed) {
                let now = Deadline.now()
                for (c, client) in clients where client.deadline <= now {
                    // Out of time: a silent or slow client gets 400 once, a slow reader nothing more.
                    if client.phase == .reading {
                        clients[c]?.answer = Array(MetricsEndpoint.answer(to: .incomplete, body: body).utf8)
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
                            let request: RequestHead? = MetricsEndpoint.headEnd(client.head).map { .complete(Array(client.head[..<$0])) }
                                ?? (client.head.count > MetricsEndpoint.maxRequestHead ? .tooLarge : nil)
                            if let request {
                                client.answer = Array(MetricsEndpoint.answer(to: request, body: body).utf8)
                                client.head = []
                                client.phase = .writing
                                client.deadline = Deadline.now() + MetricsEndpoint.requestTimeout
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
        /// until a descriptor is free; the endpoint itself goes on).
        private func acceptAll(_ clients: inout [Int32: Client], _ accepted: inout UInt64) -> Bool {
            while true {
                let next: (Int32, String)?
                do { next = try Socket.acceptNow(fd) } catch { return false }
                guard let (c, _) = next else { return true }
                Socket.setNonBlocking(c, true)
                if clients.count >= MetricsEndpoint.maxClients, let oldest = clients.min(by: { $0.value.order < $1.value.order })?.key {
                    clients[oldest] = nil
                    Glibc.close(oldest)
                }
                accepted += 1
                clients[c] = Client(deadline: Deadline.now() + MetricsEndpoint.requestTimeout, order: accepted)
            }
        }
    }

    /// What a client sent.
    enum RequestHead: Equatable {
        /// The request line and headers, without the blank line.
        case complete([UInt8])
        /// More than ``maxRequestHead`` bytes without the end of the head.
        case tooLarge
        /// The connection ended or the time ran out first.
        case incomplete
    }

    /// Where the head ends (the index of its blank line), if it does.
    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }

    /// The whole HTTP answer to a request head (`body` is called only for a scrape).
    static func answer(to request: RequestHead, body: () -> String) -> String {
        let head: [UInt8]
        switch request {
        case .complete(let h): head = h
        case .tooLarge: return status(431, "Request Header Fields Too Large")
        case .incomplete: return status(400, "Bad Request")
        }
        let line = head.split(separator: 13, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        let parts = String(decoding: line, as: UTF8.self).split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1."), parts[1].hasPrefix("/"), !parts[0].isEmpty else {
            return status(400, "Bad Request")
        }
        let method = parts[0], path = parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        guard method == "GET" || method == "HEAD" else { return status(405, "Method Not Allowed", extra: "Allow: GET, HEAD\r\n") }
        guard path == "/metrics" || path == "/" else { return status(404, "Not Found") }
        let text = body()
        let headers = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: \(text.utf8.count)\r\nConnection: close\r\n\r\n"
        return method == "HEAD" ? headers : headers + text
    }

    private static func status(_ code: Int, _ reason: String, extra: String = "") -> String {
        let text = "\(code) \(reason)\n"
        return "HTTP/1.1 \(code) \(reason)\r\n\(extra)Content-Type: text/plain\r\nContent-Length: \(text.utf8.count)\r\nConnection: close\r\n\r\n\(text)"
    }
}
