// The one reader of HTTP/1.x responses in libmtls (ACME, EST, CRL and OCSP fetches all go
// through ``HTTPClient``, which feeds it). It is a pure function of the bytes received: no
// socket, no clock, so it can be fuzzed (``HTTPResponseParser/parse(_:method:)``). Its errors
// never quote the server: a status line, a header value or a chunk size may hold anything.

/// One HTTP response: status, headers (names lowercased, values with their spaces trimmed) and body.
package struct HTTPResponse: Sendable {
    package var status: Int
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]

    package init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first header with this (case-insensitive) name.
    package func header(_ name: String) -> String? {
        let n = name.lowercased()
        return headers.first { $0.name == n }?.value
    }

    /// Every header with this name (`Link` may repeat).
    package func headers(_ name: String) -> [String] {
        let n = name.lowercased()
        return headers.filter { $0.name == n }.map(\.value)
    }

    /// Seconds from a `Retry-After` header (delta-seconds only; an HTTP date is ignored), capped.
    package func retryAfter(max cap: Double) -> Double? {
        guard let v = header("retry-after")?.trimmedSpaces, let s = Double(v), s >= 0 else { return nil }
        return min(s, cap)
    }

    /// Whether the status is a redirect this client may follow (301, 302, 303, 307, 308).
    package var isRedirect: Bool { [301, 302, 303, 307, 308].contains(status) }
}

/// An incremental HTTP/1.x response reader: ``feed(_:)`` the bytes as they arrive, it says when
/// the response is complete (a `Content-Length` body read, the last chunk of a chunked body);
/// ``finish(cleanEnd:)`` at the end of the connection for a body delimited by it. The head and
/// the body are bounded (``maxHead``, ``maxBody``): past them, ``MTLSError/Code/limitExceeded``.
/// Malformed framing is ``MTLSError/Code/parse``; an answer cut short ``MTLSError/Code/truncated``.
package struct HTTPResponseParser: Sendable {
    /// The largest response head (status line and headers) accepted.
    package static let defaultMaxHead = 64 << 10
    /// The largest chunk-size line or trailer line accepted.
    static let maxLine = 1024

    package let maxHead: Int
    package let maxBody: Int
    /// A response to HEAD: a head and never a body.
    package let headOnly: Bool

    private enum State: Sendable {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkEnd
        case trailers
        case untilEnd
        case done
    }
    private var state = State.head
    private var buffer: [UInt8] = []
    private var position = 0
    private var status = 0
    private var headers: [(name: String, value: String)] = []
    private var body: [UInt8] = []
    /// Where the search for the end of the head goes on from (a head trickled in is not searched again from its start).
    private var scanned = 0

    package init(maxHead: Int = HTTPResponseParser.defaultMaxHead, maxBody: Int, headOnly: Bool = false) {
        self.maxHead = maxHead
        self.maxBody = maxBody
        self.headOnly = headOnly
    }

    /// The status and headers once the head has been read (a redirect can be acted on without its body).
    package var head: HTTPResponse? {
        if case .head = state { return nil }
        return HTTPResponse(status: status, headers: headers, body: [])
    }

    /// Parses a whole response as received up to the end of the connection (a clean end): the
    /// entry point of the fuzz target. `method` "HEAD" reads a head only.
    package static func parse(_ bytes: [UInt8], method: String = "GET", maxBody: Int = 4 << 20) throws -> HTTPResponse {
        var parser = HTTPResponseParser(maxBody: maxBody, headOnly: method == "HEAD")
        if let done = try parser.feed(bytes) { return done }
        return try parser.finish(cleanEnd: true)
    }

    /// Takes the next bytes received; returns the response once it is complete (bytes after it are ignored).
    package mutating func feed(_ bytes: some Collection<UInt8>) throws -> HTTPResponse? {
        if case .done = state { return response }
        buffer += bytes
        defer {
            // Consumed bytes are dropped now and then, not on every step.
            if position > 65536 || position == buffer.count {
                buffer.removeFirst(position)
                scanned = max(0, scanned - position)
                position = 0
            }
        }
        while true {
            switch state {
            case .head:
                guard let end = find([13, 10, 13, 10], from: max(position, scanned - 3)) else {
                    scanned = buffer.count
                    guard buffer.count - position <= maxHead else {
                        throw MTLSError(.limitExceeded, "the HTTP response head is over \(maxHead) bytes")
                    }
                    return nil
                }
                guard end - position <= maxHead else { throw MTLSError(.limitExceeded, "the HTTP response head is over \(maxHead) bytes") }
                try readHead(buffer[position..<end])
                position = end + 4
            case .fixed(let remaining):
                let left = takeBody(remaining)
                guard left == 0 else { state = .fixed(remaining: left); return nil }
                state = .done
            case .chunkSize:
                guard let line = try nextLine() else { return nil }
                // chunk-size [ ; extensions ]: hexadecimal digits only, then optional spaces.
                let sizeText = (line.split(separator: UInt8(ascii: ";"), maxSplits: 1, omittingEmptySubsequences: false).first ?? [])
                    .drop { $0 == 32 || $0 == 9 }
                let digits = Array(sizeText.prefix { Self.hex($0) != nil })
                guard !digits.isEmpty, digits.count <= 15, sizeText.dropFirst(digits.count).allSatisfy({ $0 == 32 || $0 == 9 }) else {
                    throw MTLSError(.parse, "a malformed chunk size in the HTTP body")
                }
                let size = digits.reduce(0) { $0 << 4 | Int(Self.hex($1) ?? 0) }
                if size == 0 { state = .trailers; continue }
                guard size <= maxBody - body.count else { throw MTLSError(.limitExceeded, "the HTTP body is over the limit of \(maxBody) bytes") }
                state = .chunkData(remaining: size)
            case .chunkData(let remaining):
                let left = takeBody(remaining)
                guard left == 0 else { state = .chunkData(remaining: left); return nil }
                state = .chunkEnd
            case .chunkEnd:
                guard buffer.count - position >= 2 else { return nil }
                guard buffer[position] == 13, buffer[position + 1] == 10 else {
                    throw MTLSError(.parse, "a chunk of the HTTP body is longer than its size")
                }
                position += 2
                state = .chunkSize
            case .trailers:
                guard let line = try nextLine() else { return nil }
                if line.isEmpty { state = .done }
            case .untilEnd:
                let n = buffer.count - position
                guard n <= maxBody - body.count else { throw MTLSError(.limitExceeded, "the HTTP body is over the limit of \(maxBody) bytes") }
                body += buffer[position...]
                position = buffer.count
                return nil
            case .done:
                return response
            }
        }
    }

    /// The connection ended (`cleanEnd` false: a TLS peer hung up without close_notify). A body
    /// delimited by the end is complete only at a clean end; anything else unfinished is cut short.
    package mutating func finish(cleanEnd: Bool) throws -> HTTPResponse {
        switch state {
        case .done: return response
        case .untilEnd:
            guard cleanEnd else { throw MTLSError(.truncated, "the server closed without close_notify: the HTTP body may be cut short") }
            state = .done
            return response
        case .head: throw MTLSError(.parse, "the server closed the connection before a complete HTTP response head")
        default: throw MTLSError(.truncated, "the server closed the connection before the end of the HTTP body")
        }
    }

    private var response: HTTPResponse { HTTPResponse(status: status, headers: headers, body: body) }

    private mutating func readHead(_ bytes: ArraySlice<UInt8>) throws {
        let lines = bytes.split(separator: 13, omittingEmptySubsequences: false).enumerated().map { i, line in
            i == 0 ? line : line.dropFirst()  // each line after the first starts with the LF of CR LF
        }
        guard let statusLine = lines.first else { throw MTLSError(.parse, "an empty HTTP response head") }
        // HTTP/1.x SP 3DIGIT [SP reason]: the reason phrase is never read (nor quoted).
        let s = Array(statusLine)
        guard s.count >= 12, s[0..<7].elementsEqual("HTTP/1.".utf8), (48...57).contains(s[7]), s[8] == 32,
              s[9...11].allSatisfy({ (48...57).contains($0) }), s.count == 12 || s[12] == 32,
              let code = Int(String(decoding: s[9...11], as: UTF8.self)), (100...599).contains(code) else {
            throw MTLSError(.parse, "the server did not answer with an HTTP/1.x status line")
        }
        status = code
        headers = []
        for line in lines.dropFirst() {
            guard !line.contains(10) else { throw MTLSError(.parse, "a bare line feed in the HTTP response head") }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                  line[..<colon].allSatisfy({ $0 > 32 && $0 < 127 }) else {
                throw MTLSError(.parse, "a malformed HTTP header line")
            }
            headers.append((String(decoding: line[..<colon], as: UTF8.self).lowercased(),
                            String(decoding: line[(colon + 1)...], as: UTF8.self).trimmedSpaces))
        }
        if headOnly || status == 204 || status == 304 || (100...199).contains(status) {
            state = .done
            return
        }
        let transfer = headers.filter { $0.name == "transfer-encoding" }.map { $0.value.lowercased() }
        if !transfer.isEmpty {
            guard transfer.joined(separator: ",").split(separator: ",").last?.trimmedSpaces == "chunked" else {
                throw MTLSError(.parse, "an HTTP body in a transfer coding other than chunked")
            }
            state = .chunkSize
            return
        }
        let lengths = headers.filter { $0.name == "content-length" }.map(\.value)
        if let first = lengths.first {
            guard lengths.allSatisfy({ $0 == first }), !first.isEmpty, first.count <= 18,
                  first.utf8.allSatisfy({ (48...57).contains($0) }), let n = Int(first) else {
                throw MTLSError(.parse, "a malformed Content-Length in the HTTP response")
            }
            guard n <= maxBody else { throw MTLSError(.limitExceeded, "the HTTP body is \(n) bytes, over the limit of \(maxBody)") }
            state = n == 0 ? .done : .fixed(remaining: n)
            return
        }
        state = .untilEnd
    }

    /// Moves up to `remaining` body bytes from the buffer to the body; returns how many are still to come.
    private mutating func takeBody(_ remaining: Int) -> Int {
        let n = min(remaining, buffer.count - position)
        body += buffer[position..<(position + n)]
        position += n
        return remaining - n
    }

    /// The next CR LF-terminated line (without it), nil when it has not all arrived.
    private mutating func nextLine() throws -> ArraySlice<UInt8>? {
        guard let end = find([13, 10]) else {
            guard buffer.count - position <= Self.maxLine else { throw MTLSError(.parse, "a malformed chunked HTTP body") }
            return nil
        }
        guard end - position <= Self.maxLine else { throw MTLSError(.parse, "a malformed chunked HTTP body") }
        let line = buffer[position..<end]
        position = end + 2
        return line
    }

    private func find(_ needle: [UInt8], from start: Int? = nil) -> Int? {
        guard buffer.count - position >= needle.count else { return nil }
        var i = start ?? position
        let last = buffer.count - needle.count
        while i <= last {
            if buffer[i] == needle[0] {
                var j = 1
                while j < needle.count && buffer[i + j] == needle[j] { j += 1 }
                if j == needle.count { return i }
            }
            i += 1
        }
        return nil
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs (HTTP's optional whitespace).
    package var trimmedSpaces: String {
        var sub = Substring(self)
        while let f = sub.first, f == " " || f == "\t" { sub.removeFirst() }
        while let l = sub.last, l == " " || l == "\t" { sub.removeLast() }
        return String(sub)
    }
}
