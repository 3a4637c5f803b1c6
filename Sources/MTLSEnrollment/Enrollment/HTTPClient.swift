import FoundationEssentials

/// An `https://` URL split into what a connection needs.
package struct HTTPSURL: Sendable, CustomStringConvertible {
    package var host: String
    package var port: UInt16
    /// The path and query, starting with "/".
    package var target: String

    /// Parses `https://host[:port][/path]` with the one URL parser of libmtls
    /// (``URLAuthority``): an IPv6 host in brackets, its RFC 6874 zone (`[fe80::1%25eth0]`)
    /// decoded. Anything else is ``MTLSError/Code/invalidArgument``: enrollment speaks only HTTPS.
    package init(_ text: String) throws {
        (host, port, target) = try URLAuthority.parse(text, scheme: "https", defaultPort: 443)
        guard !target.contains(" ") else { throw MTLSError(.invalidArgument, "not a usable https:// URL: \(text)") }
    }

    package var description: String {
        "https://\(URLAuthority.uriHost(host))\(port == 443 ? "" : ":\(port)")\(target)"
    }
}

/// One HTTP response: status, headers (names lowercased) and body.
struct HTTPResponse: Sendable {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    /// The first header with this (case-insensitive) name.
    func header(_ name: String) -> String? {
        let n = name.lowercased()
        return headers.first { $0.name == n }?.value
    }

    /// Every header with this name (`Link` may repeat).
    func headers(_ name: String) -> [String] {
        let n = name.lowercased()
        return headers.filter { $0.name == n }.map(\.value)
    }

    /// Seconds from a `Retry-After` header (delta-seconds only; an HTTP date is ignored), capped.
    func retryAfter(max cap: Double) -> Double? {
        guard let v = header("retry-after")?.trimmedSpaces, let s = Double(v), s >= 0 else { return nil }
        return min(s, cap)
    }
}

/// A small HTTP/1.1 client over libmtls's own ``TLSConnection``: one request per connection
/// (`Connection: close`), so the server's certificate is judged under the caller's policy each
/// time, exactly as any other libmtls connection. Bodies are capped (``maxBody``), so a hostile
/// server cannot make the client allocate without bound.
struct HTTPSClient: Sendable {
    /// TLS options for every request (policy, overrides, client identity, timeouts).
    var options: TLSClientOptions
    /// The largest response body accepted.
    var maxBody = 4 << 20
    /// The largest response head accepted.
    static let maxHead = 64 << 10

    init(options: TLSClientOptions) { self.options = options }

    /// Sends one request and reads the whole response.
    func send(_ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws -> HTTPResponse {
        let u = try HTTPSURL(url)
        var opts = options
        if opts.serverName == nil && !Socket.isIPLiteral(u.host) { opts.serverName = u.host }
        let conn = try TLSConnection.connect(host: u.host, port: u.port, options: opts)
        defer { conn.close() }
        let hostHeader = URLAuthority.hostHeader(u.host, port: u.port, defaultPort: 443)
        var head = "\(method) \(u.target) HTTP/1.1\r\nHost: \(hostHeader)\r\nConnection: close\r\nUser-Agent: libmtls/\(MTLSVersion.string)\r\n"
        for (name, value) in headers {
            guard !name.contains(where: { $0 == "\r" || $0 == "\n" || $0 == ":" }), !value.contains(where: { $0 == "\r" || $0 == "\n" }) else {
                throw MTLSError(.invalidArgument, "an HTTP header may not contain a line break")
            }
            head += "\(name): \(value)\r\n"
        }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        var request = Array(head.utf8)
        if let body { request += body }
        var sent = 0
        while sent < request.count {
            sent += try request[sent...].withUnsafeBytes { try conn.write($0) }
        }
        return try readResponse(conn, method: method)
    }

    private func readResponse(_ conn: TLSConnection, method: String) throws -> HTTPResponse {
        var buffer: [UInt8] = []
        var eof = false, cutShort = false
        func fill() throws {
            do {
                let chunk = try conn.read(maxLength: 16384)
                if chunk.isEmpty { eof = true } else { buffer += chunk }
            } catch let e as MTLSError where e.code == .closed || e.code == .truncated {
                // Harmless where the body has a length; fatal where the end is the delimiter.
                eof = true
                cutShort = e.code == .truncated
            }
        }
        // Head.
        var headEnd: Int? = nil
        while headEnd == nil {
            if let i = HTTPSClient.find([13, 10, 13, 10], in: buffer) { headEnd = i; break }
            guard buffer.count <= HTTPSClient.maxHead else { throw MTLSError(.limitExceeded, "the HTTP response head is over \(HTTPSClient.maxHead) bytes") }
            guard !eof else { throw MTLSError(.parse, "the server closed the connection before a complete HTTP response") }
            try fill()
        }
        guard let end = headEnd else { throw MTLSError(.parse, "no HTTP response") }
        let lines = String(decoding: buffer[..<end], as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let statusParts = lines.first?.split(separator: " ", maxSplits: 2) ?? []
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]), (100...599).contains(status) else {
            throw MTLSError(.parse, "not an HTTP/1.x status line: \(lines.first ?? "")")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw MTLSError(.parse, "bad HTTP header line") }
            headers.append((line[..<colon].trimmedSpaces.lowercased(),
                            line[line.index(after: colon)...].trimmedSpaces))
        }
        var response = HTTPResponse(status: status, headers: headers, body: [])
        buffer.removeFirst(end + 4)
        if method == "HEAD" || status == 204 || status == 304 { return response }
        if response.header("transfer-encoding")?.lowercased().contains("chunked") == true {
            var body: [UInt8] = []
            while true {
                while HTTPSClient.find([13, 10], in: buffer) == nil {
                    guard !eof else { throw MTLSError(.parse, "the chunked HTTP body ends early") }
                    guard buffer.count < 1024 else { throw MTLSError(.parse, "bad chunk size line") }
                    try fill()
                }
                guard let lineEnd = HTTPSClient.find([13, 10], in: buffer) else { throw MTLSError(.parse, "bad chunk") }
                let sizeText = String(decoding: buffer[..<lineEnd], as: UTF8.self).split(separator: ";").first.map(String.init) ?? ""
                guard let size = Int(sizeText.trimmedSpaces, radix: 16), size >= 0 else {
                    throw MTLSError(.parse, "bad chunk size \"\(sizeText)\"")
                }
                buffer.removeFirst(lineEnd + 2)
                if size == 0 { break }
                guard size <= maxBody - body.count else { throw MTLSError(.limitExceeded, "the HTTP body is over \(maxBody) bytes") }
                while buffer.count < size + 2 {
                    guard !eof else { throw MTLSError(.parse, "the chunked HTTP body ends early") }
                    try fill()
                }
                body += buffer[..<size]
                buffer.removeFirst(size + 2)
            }
            response.body = body
        } else if let lengthText = response.header("content-length") {
            guard let length = Int(lengthText), length >= 0 else { throw MTLSError(.parse, "bad Content-Length \(lengthText)") }
            guard length <= maxBody else { throw MTLSError(.limitExceeded, "the HTTP body is over \(maxBody) bytes") }
            while buffer.count < length {
                guard !eof else { throw MTLSError(.parse, "the HTTP body ends after \(buffer.count) of \(length) bytes") }
                try fill()
            }
            response.body = Array(buffer[..<length])
        } else {
            while !eof {
                guard buffer.count <= maxBody else { throw MTLSError(.limitExceeded, "the HTTP body is over \(maxBody) bytes") }
                try fill()
            }
            guard !cutShort else { throw MTLSError(.truncated, "the server closed without close_notify: the HTTP body may be cut short") }
            response.body = buffer
        }
        return response
    }

    static func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i] == needle[0] {
            var match = true
            for j in 1..<needle.count where hay[i + j] != needle[j] { match = false; break }
            if match { return i }
        }
        return nil
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs (HTTP's optional whitespace).
    var trimmedSpaces: String {
        var sub = Substring(self)
        while let f = sub.first, f == " " || f == "\t" { sub.removeFirst() }
        while let l = sub.last, l == " " || l == "\t" { sub.removeLast() }
        return String(sub)
    }
}
