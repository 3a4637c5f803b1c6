/// Rewrites the client→target byte stream of an HTTP/1.x connection so that every request head
/// carries one header set by the tunnel (`NAME: value`, e.g. `X-Client-Cert-Subject`) and none of
/// that name sent by the client (in any case, and with `_` for `-`: CGI-style backends read both
/// as the same variable). Bodies pass through untouched; only their framing is parsed, to
/// find where the next request head starts.
///
/// Fed in pieces of any size (``feed(_:into:)``): a request head split across reads byte by byte
/// or several pipelined requests in one read give the same output. What it refuses (thrown as
/// ``MTLSError``; the caller closes the connection, nothing more is forwarded):
/// - a stream that does not start with an HTTP/1.0 or HTTP/1.1 request line (`parse`);
/// - a head over ``maxHeadSize`` bytes, a chunk-size line or trailer section over its cap
///   (`limitExceeded`, HTTP status 431);
/// - obs-fold continuation lines, bare CR or LF, a space before a header's colon, control
///   characters in a header (`parse`, 400), as RFC 9112 allows;
/// - Transfer-Encoding together with Content-Length, Content-Length values that differ or are not
///   decimal, a Transfer-Encoding other than `chunked` (`parse` / `unsupported`): the request
///   smuggling shapes;
/// - `CONNECT` and requests with an `Upgrade` header (`unsupported`, 501): after them the stream
///   would no longer be HTTP/1.x and the header could not be set on what follows.
///
/// Chunked bodies: chunk sizes (hex, with extensions) and the trailer section are read to find the
/// end; a trailer field of the set name is dropped too.
public struct HTTPRequestRewriter: Sendable {
    /// The largest request head (request line and header fields) accepted: 64 KiB.
    public static let maxHeadSize = 64 * 1024
    /// The largest chunk-size line (with its extensions) accepted.
    public static let maxChunkLineSize = 4 * 1024

    /// Why a stream was refused: the error, and the HTTP status a server would answer with.
    public struct Refusal: Error, Sendable {
        /// The error (code and message) for the log.
        public let error: MTLSError
        /// 400, 431 or 501.
        public let status: Int
        /// A minimal HTTP/1.1 response for the client, with `Connection: close`.
        public var response: [UInt8] {
            HTTPAnswer.status(status).bytes
        }
    }

    private enum State: Sendable {
        case head
        case body(remaining: UInt64)
        case chunkLine
        case chunkData(remaining: UInt64)
        case chunkEnd  // the CRLF after a chunk's data
        case trailers
    }

    private let name: [UInt8]  // lower case, '_' as '-' (see isSetName)
    private let headerLine: [UInt8]
    private var state = State.head
    private var pending: [UInt8] = []  // the head, chunk-size line or trailer line being collected
    private var trailerBytes = 0
    /// Requests whose head has been rewritten so far.
    public private(set) var requests = 0

    /// `name` must be an HTTP token; `value` is set as given, except that bytes outside printable
    /// ASCII and `%` are percent-encoded (a certificate's subject comes from the peer).
    public init(name: String, value: String) throws {
        let n = Array(name.utf8)
        guard !n.isEmpty, n.allSatisfy(HTTPRequestLine.isTokenByte) else {
            throw MTLSError(.invalidArgument, "\"\(name)\" is not an HTTP header name")
        }
        self.name = n.map(Self.folded)
        headerLine = n + Array(": ".utf8) + Self.headerValue(value) + [13, 10]
    }

    /// `value` as it is sent: printable ASCII except `%` as is, every other byte as `%XX`.
    public static func headerValue(_ value: String) -> [UInt8] {
        var out: [UInt8] = []
        let hex = Array("0123456789ABCDEF".utf8)
        for b in value.utf8 {
            if b >= 0x20 && b < 0x7F && b != UInt8(ascii: "%") {
                out.append(b)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        // No leading or trailing whitespace in a field value.
        while out.last == 0x20 { out.removeLast(); out += Array("%20".utf8) }
        if out.first == 0x20 { out.removeFirst(); out.insert(contentsOf: Array("%20".utf8), at: 0) }
        return out
    }

    /// Takes the next bytes from the client and appends what goes to the target to `out`.
    /// After a throw the stream is refused for good: feed nothing more.
    public mutating func feed(_ input: UnsafeRawBufferPointer, into out: inout [UInt8]) throws(Refusal) {
        var i = 0
        let count = input.count
        while i < count {
            switch state {
            case .body(let remaining):
                let take = Int(min(UInt64(count - i), remaining))
                out.append(contentsOf: input[i..<(i + take)])
                i += take
                state = remaining == UInt64(take) ? .head : .body(remaining: remaining - UInt64(take))
            case .chunkData(let remaining):
                let take = Int(min(UInt64(count - i), remaining))
                out.append(contentsOf: input[i..<(i + take)])
                i += take
                state = remaining == UInt64(take) ? .chunkEnd : .chunkData(remaining: remaining - UInt64(take))
            case .head, .chunkLine, .chunkEnd, .trailers:
                // Line-based: collect up to the next LF.
                var j = i
                while j < count && input[j] != 10 { j += 1 }
                let found = j < count
                let end = found ? j + 1 : count
                if case .head = state, !requestLineSeen,
                   input[i..<end].contains(where: { ($0 < 0x20 && $0 != 13 && $0 != 10) || $0 >= 0x7F }) {
                    throw Self.bad("not an HTTP/1.x request (a control or non-ASCII byte before the end of the request line)")
                }
                pending.append(contentsOf: input[i..<end])
                i = end
                try checkSize()
                if found { try lineEnded(&out) }
            }
        }
    }

    private func checkSize() throws(Refusal) {
        switch state {
        case .head:
            if pending.count > Self.maxHeadSize {
                throw Refusal(error: MTLSError(.limitExceeded, "HTTP request head over \(Self.maxHeadSize) bytes"), status: 431)
            }
        case .chunkLine, .chunkEnd:
            if pending.count > Self.maxChunkLineSize {
                throw Refusal(error: MTLSError(.limitExceeded, "HTTP chunk-size line over \(Self.maxChunkLineSize) bytes"), status: 400)
            }
        case .trailers:
            if trailerBytes + pending.count > Self.maxHeadSize {
                throw Refusal(error: MTLSError(.limitExceeded, "HTTP trailer section over \(Self.maxHeadSize) bytes"), status: 431)
            }
        default: break
        }
    }

    private static func bad(_ message: String, _ status: Int = 400, _ code: MTLSError.Code = .parse) -> Refusal {
        Refusal(error: MTLSError(code, message), status: status)
    }

    /// `pending` ends with LF: one line (head: the whole head once it ends with an empty line).
    private mutating func lineEnded(_ out: inout [UInt8]) throws(Refusal) {
        let n = pending.count
        guard n >= 2 && pending[n - 2] == 13 else { throw Self.bad("bare LF in an HTTP request (lines end with CRLF)") }
        switch state {
        case .head:
            if !requestLineSeen {
                // An empty line before the request line is ignored (RFC 9112 2.2).
                if n == 2 { pending.removeAll(); return }
                try Self.checkRequestLine(pending[0..<(n - 2)])
                requestLineSeen = true
                return
            }
            if n >= 4 && pending[n - 4] == 13 && pending[n - 3] == 10 {
                try headEnded(&out)
            }
        case .chunkLine:
            let line = pending[0..<(n - 2)]
            pending.removeAll(keepingCapacity: true)
            let sizeEnd = line.firstIndex(where: { $0 == UInt8(ascii: ";") || $0 == 0x20 || $0 == 0x09 }) ?? line.endIndex
            let digits = line[line.startIndex..<sizeEnd]
            guard !digits.isEmpty, digits.count <= 15 else { throw Self.bad("HTTP chunk size missing or too long") }
            var size: UInt64 = 0
            for d in digits {
                guard let v = Self.hexValue(d) else { throw Self.bad("HTTP chunk size is not hexadecimal") }
                size = size << 4 | UInt64(v)
            }
            guard line[sizeEnd...].allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                throw Self.bad("control character in an HTTP chunk extension")
            }
            out.append(contentsOf: line)
            out += [13, 10]
            if size == 0 {
                state = .trailers
                trailerBytes = 0
            } else {
                state = .chunkData(remaining: size)
            }
        case .chunkEnd:
            guard n == 2 else { throw Self.bad("HTTP chunk data longer than its size") }
            pending.removeAll(keepingCapacity: true)
            out += [13, 10]
            state = .chunkLine
        case .trailers:
            let line = pending
            pending.removeAll(keepingCapacity: true)
            trailerBytes += n
            if n == 2 {
                out += [13, 10]
                finishRequest()
                return
            }
            let field = try Self.field(line[0..<(n - 2)])
            if !isSetName(field.name) { out += line }
        default: break
        }
    }

    private var requestLineSeen = false

    private mutating func finishRequest() {
        state = .head
        requestLineSeen = false
        requests += 1
    }

    /// A header field line (without CRLF) split into its lower-cased name and trimmed value.
    /// METHOD SP request-target SP HTTP/1.x (RFC 9112 3); CONNECT is refused.
    private static func checkRequestLine(_ requestLine: ArraySlice<UInt8>) throws(Refusal) {
        guard let line = HTTPRequestLine.parse(requestLine) else { throw bad("not an HTTP/1.x request line") }
        if line.method.elementsEqual("CONNECT".utf8) { throw bad("CONNECT is not forwarded with a client header set", 501, .unsupported) }
    }

    private static func trimmed(_ v: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var v = v
        while let f = v.first, f == 0x20 || f == 0x09 { v = v.dropFirst() }
        while let l = v.last, l == 0x20 || l == 0x09 { v = v.dropLast() }
        return v
    }

    private static func field(_ line: ArraySlice<UInt8>) throws(Refusal) -> (name: [UInt8], value: ArraySlice<UInt8>) {
        guard let first = line.first else { throw bad("empty HTTP header line") }
        if first == 0x20 || first == 0x09 { throw bad("obs-fold (a header line continued on the next) is refused") }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { throw bad("HTTP header line without a colon") }
        let name = line[line.startIndex..<colon]
        guard !name.isEmpty, name.allSatisfy(HTTPRequestLine.isTokenByte) else { throw bad("invalid HTTP header name") }
        let value = line[(colon + 1)...]
        guard value.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
            throw bad("control character in an HTTP header value")
        }
        return (name.map(lower), trimmed(value))
    }

    /// The whole head is in `pending` (request line, fields, empty line).
    private mutating func headEnded(_ out: inout [UInt8]) throws(Refusal) {
        let head = pending
        pending.removeAll(keepingCapacity: true)
        // Split into lines; every LF was checked to follow a CR when its line ended.
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        for k in 0..<head.count where head[k] == 10 {
            lines.append(head[start..<(k - 1)])
            start = k + 1
        }
        guard lines.count >= 2 else { throw Self.bad("not an HTTP/1.x request") }
        out.append(contentsOf: lines[0])
        out += [13, 10]
        var lengths: [ArraySlice<UInt8>] = []
        var codings: [UInt8] = []
        var hasTE = false
        for line in lines[1..<(lines.count - 1)] {
            guard !line.contains(13) else { throw Self.bad("bare CR in an HTTP request") }
            let f = try Self.field(line)
            if isSetName(f.name) { continue }
            switch f.name {
            case Array("content-length".utf8):
                for v in f.value.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                    lengths.append(Self.trimmed(v))
                }
            case Array("transfer-encoding".utf8):
                hasTE = true
                if !codings.isEmpty { codings.append(UInt8(ascii: ",")) }
                codings += f.value.map(Self.lower)
            case Array("upgrade".utf8):
                throw Self.bad("Upgrade is not forwarded with a client header set", 501, .unsupported)
            default: break
            }
            out.append(contentsOf: line)
            out += [13, 10]
        }
        out += headerLine
        out += [13, 10]
        if hasTE {
            guard lengths.isEmpty else { throw Self.bad("HTTP request with both Transfer-Encoding and Content-Length") }
            let list = codings.split(separator: UInt8(ascii: ","))
                .map { $0.filter { $0 != 0x20 && $0 != 0x09 } }.filter { !$0.isEmpty }
            guard list == [Array("chunked".utf8)] else {
                throw Self.bad("Transfer-Encoding other than chunked", 501, .unsupported)
            }
            state = .chunkLine
            return
        }
        if let first = lengths.first {
            guard lengths.allSatisfy({ Array($0) == Array(first) }) else { throw Self.bad("HTTP Content-Length values differ") }
            guard !first.isEmpty, first.count <= 18, first.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                throw Self.bad("HTTP Content-Length is not a decimal number")
            }
            let length = first.reduce(UInt64(0)) { $0 * 10 + UInt64($1 - 0x30) }
            if length > 0 {
                state = .body(remaining: length)
                requestLineSeen = false
                requests += 1
                return
            }
        }
        finishRequest()
    }

    private static func lower(_ b: UInt8) -> UInt8 { b >= 0x41 && b <= 0x5A ? b + 32 : b }

    /// Lower case, and `_` as `-`: CGI, WSGI, PHP and Rack turn both into `_` (`HTTP_X_CLIENT_…`),
    /// so a client's `X_Client_Cert_Subject` would pass for the set header there.
    private static func folded(_ b: UInt8) -> UInt8 { b == UInt8(ascii: "_") ? UInt8(ascii: "-") : lower(b) }

    /// Whether the (lower-cased) field name is the set header's, `_` and `-` alike.
    private func isSetName(_ lowerName: [UInt8]) -> Bool {
        lowerName.count == name.count && zip(lowerName, name).allSatisfy { Self.folded($0) == $1 }
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case 0x30...0x39: return b - 0x30
        case 0x41...0x46: return b - 0x41 + 10
        case 0x61...0x66: return b - 0x61 + 10
        default: return nil
        }
    }
}
