import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

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
        guard text.utf8.count <= 2048, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw MTLSError(.invalidArgument, "not a usable http:// URL (at most 2048 printable ASCII characters): \(text)")
        }
        (host, port, path) = try URLAuthority.parse(text, scheme: "http", defaultPort: 80)
        description = text
    }
}

/// A small, bounded HTTP/1.1 GET (and POST, for OCSP) client over a plain socket, for CRLs and
/// OCSP responses: `http:` only, a limit on the body size and one deadline for the whole
/// exchange (connect, request, headers, body, redirects), so a slow or huge answer ends in a
/// clear error within the limits. Redirects (301, 302, 303, 307, 308) are followed up to 3
/// times, and only to another `http:` URL. No proxy, no TLS, no cookies, no compression.
public enum HTTPFetcher {
    /// The limits of one fetch.
    public struct Limits: Hashable, Sendable {
        /// Largest body accepted, in bytes.
        public var maxBytes: Int
        /// Seconds for the whole exchange, redirects included.
        public var timeout: Double

        public init(maxBytes: Int = 10 << 20, timeout: Double = 10) {
            self.maxBytes = maxBytes
            self.timeout = timeout
        }
    }

    /// The largest header block accepted.
    static let maxHeaderBytes = 32 << 10

    /// Fetches `url` and returns the body of a 200 answer. Errors: ``MTLSError/Code/invalidArgument``
    /// (not an http: URL), ``MTLSError/Code/timeout``, ``MTLSError/Code/connect``,
    /// ``MTLSError/Code/io`` (a status other than 200, a body over the limit, a malformed answer,
    /// a redirect elsewhere than http:).
    public static func get(_ url: String, limits: Limits) throws -> [UInt8] {
        try request(url, method: "GET", body: nil, contentType: nil, limits: limits)
    }

    /// POSTs `body` with `contentType` (an OCSP request) and returns the body of a 200 answer.
    public static func post(_ url: String, body: [UInt8], contentType: String, limits: Limits) throws -> [UInt8] {
        try request(url, method: "POST", body: body, contentType: contentType, limits: limits)
    }

    static func request(_ url: String, method: String, body: [UInt8]?, contentType: String?, limits: Limits) throws -> [UInt8] {
        let deadline = Deadline(seconds: limits.timeout)
        var current = url
        for _ in 0...3 {
            guard current.lowercased().hasPrefix("http://") else {
                throw MTLSError(.invalidArgument, current == url
                    ? "\(current) is not an http: URL (libmtls fetches revocation data over http: only)"
                    : "\(url) redirects to \(current), which is not an http: URL: refused")
            }
            let target: HTTPURL
            do { target = try HTTPURL(parsing: current) } catch let e as MTLSError {
                throw MTLSError(.invalidArgument, current == url ? e.message : "\(url) redirects to an unusable URL: \(e.message)")
            }
            switch try exchange(target, method: method, body: body, contentType: contentType, limits: limits, deadline: deadline) {
            case .body(let b): return b
            case .redirect(let location): current = resolve(location, against: target)
            }
        }
        throw MTLSError(.io, "\(url): more than 3 redirects")
    }

    private enum Answer { case body([UInt8]), redirect(String) }

    /// A Location relative to `base` made absolute (absolute-path references only; anything with
    /// a scheme is returned as is, to be checked by the caller).
    private static func resolve(_ location: String, against base: HTTPURL) -> String {
        if location.hasPrefix("/") && !location.hasPrefix("//") {
            return "http://\(URLAuthority.uriHost(base.host)):\(base.port)\(location)"
        }
        return location
    }

    private static func exchange(_ url: HTTPURL, method: String, body: [UInt8]?, contentType: String?, limits: Limits,
                                 deadline: Deadline) throws -> Answer {
        let fd = try Socket.connect(host: url.host, port: url.port, deadline: deadline)
        defer { close(fd) }
        let hostHeader = URLAuthority.hostHeader(url.host, port: url.port, defaultPort: 80)
        var head = "\(method) \(url.path) HTTP/1.1\r\nHost: \(hostHeader)\r\nUser-Agent: libmtls/\(MTLSVersion.string)\r\n"
            + "Accept: */*\r\nConnection: close\r\n"
        if let body {
            head += "Content-Type: \(contentType ?? "application/octet-stream")\r\nContent-Length: \(body.count)\r\n"
        }
        head += "\r\n"
        try sendAll(fd, Array(head.utf8) + (body ?? []), url: url, deadline: deadline)

        // Everything up to the end of the headers, then the body, never more than the limits.
        var buf: [UInt8] = []
        var headerEnd: Int? = nil
        var chunk = [UInt8](repeating: 0, count: 16384)
        var status = 0
        var headers: [String: String] = [:]
        var contentLength: Int? = nil
        var chunked = false
        while true {
            if headerEnd == nil, let end = find(buf, [13, 10, 13, 10]) {
                headerEnd = end + 4
                (status, headers) = try parseHead(Array(buf[..<end]), url: url)
                if [301, 302, 303, 307, 308].contains(status) {
                    guard let location = headers["location"] else { throw MTLSError(.io, "\(url): redirect without a Location") }
                    return .redirect(location)
                }
                guard status == 200 else { throw MTLSError(.io, "\(url) answered HTTP \(status)") }
                chunked = headers["transfer-encoding"]?.lowercased().contains("chunked") == true
                if !chunked, let cl = headers["content-length"] {
                    guard let n = Int(cl), n >= 0 else { throw MTLSError(.io, "\(url): bad Content-Length \"\(cl)\"") }
                    guard n <= limits.maxBytes else {
                        throw MTLSError(.io, "\(url): the body is \(n) bytes, over the limit of \(limits.maxBytes)")
                    }
                    contentLength = n
                }
            }
            if let h = headerEnd {
                let bodyBytes = buf.count - h
                if let n = contentLength, bodyBytes >= n { return .body(Array(buf[h..<(h + n)])) }
                // A chunked body carries a little framing beside the data.
                if bodyBytes > limits.maxBytes + (chunked ? 64 << 10 : 0) {
                    throw MTLSError(.io, "\(url): the body is over the limit of \(limits.maxBytes) bytes")
                }
            } else if buf.count > maxHeaderBytes {
                throw MTLSError(.io, "\(url): the answer's headers are over \(maxHeaderBytes) bytes")
            }
            try Socket.wait(fd, forWriting: false, deadline: deadline, what: "fetching \(url) (limit \(limits.timeout) s)")
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw MTLSError(.io, "\(url): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            buf += chunk[0..<n]
        }
        guard let h = headerEnd else { throw MTLSError(.io, "\(url): the connection closed before a complete answer") }
        if contentLength != nil { throw MTLSError(.io, "\(url): the connection closed before the whole body") }
        let raw = Array(buf[h...])
        let out = chunked ? try dechunk(raw, url: url) : raw
        guard out.count <= limits.maxBytes else { throw MTLSError(.io, "\(url): the body is over the limit of \(limits.maxBytes) bytes") }
        return .body(out)
    }

    private static func sendAll(_ fd: Int32, _ bytes: [UInt8], url: HTTPURL, deadline: Deadline) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 { sent += n; continue }
            if n < 0 && (errno == EAGAIN || errno == EINTR) {
                try Socket.wait(fd, forWriting: true, deadline: deadline, what: "sending to \(url)")
                continue
            }
            throw MTLSError(.io, "\(url): \(String(cString: strerror(errno)))")
        }
    }

    private static func parseHead(_ bytes: [UInt8], url: HTTPURL) throws -> (Int, [String: String]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusParts = (lines.first ?? "").split(separator: " ", maxSplits: 2)
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw MTLSError(.io, "\(url) did not answer HTTP/1.x")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = trim(line[line.index(after: colon)...])
        }
        return (status, headers)
    }

    private static func trim(_ s: Substring) -> String {
        String(s.drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed())
    }

    private static func dechunk(_ raw: [UInt8], url: HTTPURL) throws -> [UInt8] {
        var out: [UInt8] = []
        var i = 0
        while true {
            guard let lineEnd = find(raw, [13, 10], from: i) else {
                throw MTLSError(.io, "\(url): a truncated chunked body")
            }
            let sizeText = String(decoding: raw[i..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(trim(sizeText), radix: 16), size >= 0 else {
                throw MTLSError(.io, "\(url): a bad chunk size")
            }
            i = lineEnd + 2
            if size == 0 { return out }
            guard size <= raw.count - i else { throw MTLSError(.io, "\(url): a truncated chunked body") }
            out += raw[i..<(i + size)]
            i += size + 2
            guard i <= raw.count else { throw MTLSError(.io, "\(url): a truncated chunked body") }
        }
    }

    private static func find(_ haystack: [UInt8], _ needle: [UInt8], from start: Int = 0) -> Int? {
        guard haystack.count >= needle.count + start else { return nil }
        for i in start...(haystack.count - needle.count) where haystack[i] == needle[0] {
            if haystack[i..<(i + needle.count)].elementsEqual(needle) { return i }
        }
        return nil
    }
}
