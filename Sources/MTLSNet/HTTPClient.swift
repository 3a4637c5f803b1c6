import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// The one HTTP/1.1 client of libmtls: everything it fetches (ACME and EST over TLS, CRLs and
// OCSP over plain http:) goes through ``HTTPClient/send(_:_:headers:body:)``. One request per
// connection (`Connection: close`), one deadline for the whole exchange (connect, handshake,
// request, head, body and redirects), a bounded head and body, redirects followed only as the
// limits allow and only to the same scheme. The response is read by ``HTTPResponseParser``.
// No error quotes the server: a status is a number, a Location or a header value is never
// repeated, a URL is quoted only once the one URL parser has accepted it (printable ASCII).

/// An `http:` URL split for a GET: what CRL distribution points and OCSP responders name.
public struct HTTPURL: Hashable, Sendable, CustomStringConvertible {
    /// The host: a DNS name or an IP literal (IPv6 without its brackets).
    public let host: String
    /// The port (80 when the URL names none).
    public let port: UInt16
    /// The path and query, starting with `/`.
    public let path: String
    /// The URL as given.
    public let description: String

    /// Parses `http://host[:port][/path]` with the one URL parser of libmtls (``URLAuthority``:
    /// an IPv6 host in brackets, its RFC 6874 zone `[fe80::1%25eth0]` decoded); nil for any other
    /// scheme, user information, an empty host, a bad port or zone, or text that is not printable
    /// ASCII. The scheme is case-insensitive.
    public init?(_ text: String) {
        guard let parsed = try? HTTPURL(parsing: text) else { return nil }
        self = parsed
    }

    /// ``init(_:)``, throwing ``MTLSError/Code/invalidArgument`` with what is wrong.
    public init(parsing text: String) throws {
        (host, port, path) = try URLAuthority.parse(text, scheme: "http", defaultPort: 80)
        description = text
    }
}

/// The one HTTP/1.1 client (see the top of this file). `tls` nil: plain `http:` URLs only (CRLs,
/// OCSP); else `https:` URLs only, over libmtls's own ``TLSConnection`` with these options, so
/// the server's certificate is judged under the caller's policy like any other connection.
package struct HTTPClient: Sendable {
    /// The limits of one exchange.
    package struct Limits: Hashable, Sendable {
        /// The largest response body accepted, in bytes.
        package var maxBody: Int
        /// Seconds for the whole exchange, redirects included (nil or not positive: none).
        package var timeout: Double?
        /// Redirects followed (0: a redirect is returned as the response).
        package var maxRedirects: Int

        package init(maxBody: Int = 4 << 20, timeout: Double? = HTTPClient.defaultTimeout, maxRedirects: Int = 0) {
            self.maxBody = maxBody
            self.timeout = timeout
            self.maxRedirects = maxRedirects
        }
    }

    /// Seconds a whole exchange may take unless the caller says otherwise.
    package static let defaultTimeout: Double = 30

    /// TLS options (nil: plain http:).
    package var tls: (any HTTPSConnector)?
    package var limits: Limits

    package init(tls: (any HTTPSConnector)?, limits: Limits = Limits()) {
        self.tls = tls
        self.limits = limits
    }

    private var scheme: String { tls == nil ? "http" : "https" }
    private var defaultPort: UInt16 { tls == nil ? 80 : 443 }

    /// Sends one request and reads the whole response (following redirects as ``Limits/maxRedirects``
    /// allows). Errors: ``MTLSError/Code/invalidArgument`` (an unusable URL or header),
    /// ``MTLSError/Code/timeout`` (the whole exchange took longer than ``Limits/timeout``),
    /// ``MTLSError/Code/connect``, the TLS errors, ``MTLSError/Code/parse`` (malformed framing),
    /// ``MTLSError/Code/limitExceeded`` (a head or body over the limits),
    /// ``MTLSError/Code/truncated`` (the answer was cut short), ``MTLSError/Code/io``.
    package func send(_ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws -> HTTPResponse {
        let deadline = Deadline(seconds: limits.timeout)
        for (name, value) in headers {
            guard !name.isEmpty, name.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != UInt8(ascii: ":") }),
                  value.unicodeScalars.allSatisfy({ $0 == "\t" || ($0.value >= 32 && $0.value != 127) }) else {
                throw MTLSError(.invalidArgument, "an HTTP header may not contain a line break or control character")
            }
        }
        var target = try URLAuthority.parse(url, scheme: scheme, defaultPort: defaultPort)
        var redirects = 0
        while true {
            let response = try exchange(method, target, url: url, headers: headers, body: body, deadline: deadline)
            guard response.isRedirect, limits.maxRedirects > 0 else { return response }
            redirects += 1
            guard redirects <= limits.maxRedirects else {
                throw MTLSError(.io, "\(HTTPClient.quoted(url)): more than \(limits.maxRedirects) redirects")
            }
            guard let location = response.header("location") else {
                throw MTLSError(.io, "\(HTTPClient.quoted(url)): a redirect without a Location")
            }
            // An absolute path stays on the same server; anything else must be a whole URL of
            // the same scheme, read by the one URL parser (the Location itself is never quoted).
            let next = location.hasPrefix("/") && !location.hasPrefix("//")
                ? "\(scheme)://\(URLAuthority.uriHost(target.host)):\(target.port)\(location)" : location
            guard next.lowercased().hasPrefix(scheme + "://") else {
                throw MTLSError(.invalidArgument, "\(HTTPClient.quoted(url)) redirects to a URL that is not \(scheme):, refused")
            }
            do { target = try URLAuthority.parse(next, scheme: scheme, defaultPort: defaultPort) } catch {
                throw MTLSError(.invalidArgument, "\(HTTPClient.quoted(url)) redirects to an unusable URL")
            }
        }
    }

    /// `url` as an error message may quote it: one line, bounded (URLs reaching here have passed
    /// the one URL parser, which refuses control characters; this keeps the rule in one place).
    static func quoted(_ url: String) -> String {
        let line = OneLine.text(url)
        return line.count > 200 ? String(line.prefix(200)) + "..." : line
    }

    private func exchange(_ method: String, _ target: (host: String, port: UInt16, target: String), url: String,
                          headers: [(String, String)], body: [UInt8]?, deadline: Deadline) throws -> HTTPResponse {
        let what = "\(method) \(HTTPClient.quoted(url))"
        var head = "\(method) \(target.target) HTTP/1.1\r\nHost: \(URLAuthority.hostHeader(target.host, port: target.port, defaultPort: defaultPort))\r\n"
            + "User-Agent: libmtls/\(MTLSVersion.string)\r\nConnection: close\r\n"
        if !headers.contains(where: { $0.0.lowercased() == "accept" }) { head += "Accept: */*\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        let request = Array(head.utf8) + (body ?? [])
        var parser = HTTPResponseParser(maxBody: limits.maxBody, headOnly: method == "HEAD")
        let timedOut = { MTLSError(.timeout, "\(what): timed out (no complete answer within \(HTTPClient.seconds(self.limits.timeout)) s)") }
        do {
            let connection = try Connection.open(target.host, target.port, tls: tls, deadline: deadline)
            defer { connection.close() }
            try connection.write(request, deadline: deadline)
            var chunk = [UInt8](repeating: 0, count: 16384)
            while true {
                let n: Int
                do { n = try connection.read(into: &chunk, deadline: deadline) } catch let e as MTLSError where e.code == .truncated {
                    return try parser.finish(cleanEnd: false)
                }
                if n == 0 { return try parser.finish(cleanEnd: true) }
                if let done = try parser.feed(chunk[..<n]) { return done }
                // A redirect's body is not needed to follow it.
                if let h = parser.head, h.isRedirect, limits.maxRedirects > 0 { return h }
            }
        } catch let e as MTLSError where e.code == .timeout {
            throw timedOut()
        }
    }

    private static func seconds(_ t: Double?) -> String {
        guard let t else { return "unlimited" }
        return t == t.rounded() ? String(Int(t)) : String(t)
    }

    /// A plain socket or a TLS connection (opened by the TLS layer, ``HTTPSConnector``) under one deadline.
    private enum Connection {
        case plain(Int32)
        case tls(any HTTPStream)

        static func open(_ host: String, _ port: UInt16, tls: (any HTTPSConnector)?, deadline: Deadline) throws -> Connection {
            guard let tls else { return .plain(try Socket.connect(host: host, port: port, deadline: deadline)) }
            return .tls(try tls.openHTTPStream(host: host, port: port, deadline: deadline))
        }

        func close() {
            switch self {
            case .plain(let fd): Glibc.close(fd)
            case .tls(let c): c.close()
            }
        }

        func write(_ bytes: [UInt8], deadline: Deadline) throws {
            switch self {
            case .tls(let c):
                var sent = 0
                while sent < bytes.count { sent += try bytes[sent...].withUnsafeBytes { try c.write($0, deadline: deadline) } }
            case .plain(let fd):
                var sent = 0
                while sent < bytes.count {
                    let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if n > 0 { sent += n; continue }
                    if n < 0 && (errno == EAGAIN || errno == EINTR) {
                        try Socket.wait(fd, forWriting: true, deadline: deadline, what: "sending an HTTP request")
                        continue
                    }
                    throw MTLSError(.io, "sending an HTTP request: \(String(cString: strerror(errno)))")
                }
            }
        }

        /// Bytes read (0 at a clean end).
        func read(into buffer: inout [UInt8], deadline: Deadline) throws -> Int {
            switch self {
            case .tls(let c):
                return try buffer.withUnsafeMutableBytes { try c.read(into: $0, deadline: deadline) }
            case .plain(let fd):
                while true {
                    try Socket.wait(fd, forWriting: false, deadline: deadline, what: "reading an HTTP answer")
                    let n = recv(fd, &buffer, buffer.count, 0)
                    if n >= 0 { return n }
                    if errno == EINTR || errno == EAGAIN { continue }
                    throw MTLSError(.io, "reading an HTTP answer: \(String(cString: strerror(errno)))")
                }
            }
        }
    }
}

/// The revocation fetches (CRLs and OCSP over `http:`) through the one `HTTPClient`: a 200's
/// body or an error, redirects (301, 302, 303, 307, 308) followed up to 3 times and only to
/// another `http:` URL, one deadline for the whole exchange. No proxy, no TLS, no cookies, no
/// compression.
public enum HTTPFetcher {
    /// The limits of one fetch.
    public struct Limits: Hashable, Sendable {
        /// Largest body accepted, in bytes.
        public var maxBytes: Int
        /// Seconds for the whole exchange, redirects included.
        public var timeout: Double

        /// Limits of `maxBytes` bytes and `timeout` seconds.
        public init(maxBytes: Int = 10 << 20, timeout: Double = 10) {
            self.maxBytes = maxBytes
            self.timeout = timeout
        }
    }

    /// Redirects followed.
    static let maxRedirects = 3

    /// Fetches `url` and returns the body of a 200 answer. Errors: ``MTLSError/Code/invalidArgument``
    /// (not an http: URL), ``MTLSError/Code/timeout``, ``MTLSError/Code/connect``,
    /// ``MTLSError/Code/io`` (a status other than 200, a body over the limit, a malformed answer,
    /// a redirect elsewhere than http:).
    public static func get(_ url: String, limits: Limits) throws -> [UInt8] {
        try request("GET", url, headers: [], body: nil, limits: limits)
    }

    /// POSTs `body` with `contentType` (an OCSP request) and returns the body of a 200 answer.
    public static func post(_ url: String, body: [UInt8], contentType: String, limits: Limits) throws -> [UInt8] {
        try request("POST", url, headers: [("Content-Type", contentType)], body: body, limits: limits)
    }

    private static func request(_ method: String, _ url: String, headers: [(String, String)], body: [UInt8]?, limits: Limits) throws -> [UInt8] {
        let client = HTTPClient(tls: nil, limits: .init(maxBody: limits.maxBytes, timeout: limits.timeout, maxRedirects: maxRedirects))
        let response: HTTPResponse
        do { response = try client.send(method, url, headers: headers, body: body) } catch let e as MTLSError {
            // The revocation fetcher's documented codes: framing and size problems are I/O errors.
            guard [.parse, .limitExceeded, .truncated].contains(e.code) else { throw e }
            throw MTLSError(.io, "\(HTTPClient.quoted(url)): \(e.message)")
        }
        guard response.status == 200 else { throw MTLSError(.io, "\(HTTPClient.quoted(url)) answered HTTP \(response.status)") }
        return response.body
    }
}

/// A connection an `https:` exchange runs over: the TLS layer's `TLSConnection`, which this
/// layer cannot name (net is below TLS). Reads and writes are bounded by the exchange's deadline.
package protocol HTTPStream: AnyObject {
    func write(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws -> Int
    /// Bytes read (0 at a clean end).
    func read(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int
    func close()
}

/// What opens `https:` connections for `HTTPClient`: the TLS layer's `TLSClientOptions`
/// (connect and handshake within `deadline`, the host as the server name).
package protocol HTTPSConnector: Sendable {
    func openHTTPStream(host: String, port: UInt16, deadline: Deadline) throws -> any HTTPStream
}
