import XCTest
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS
@testable import MTLSTLS

/// The one HTTP client, its response parser, the one responder and its request parser
/// (issues 35, 36, 41): pure parsers that never quote the server, one deadline for a whole
/// exchange, URLs without control characters.
final class HTTPTests: XCTestCase {
    private static let controls = CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(0x1f))
        .union(CharacterSet(charactersIn: Unicode.Scalar(0x7f)...Unicode.Scalar(0x9f)))

    private func assertClean(_ e: Error, file: StaticString = #filePath, line: UInt = #line) {
        let message = (e as? MTLSError)?.message ?? "\(e)"
        XCTAssertNil(message.rangeOfCharacter(from: Self.controls), message, file: file, line: line)
        XCTAssertFalse(message.contains("EVIL"), message, file: file, line: line)
    }

    func testResponseParserReadsLengthChunkedAndEndDelimitedBodies() throws {
        let fixed = try HTTPResponseParser.parse(Array("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A:  b \r\n\r\nabcdef".utf8))
        XCTAssertEqual(fixed.status, 200)
        XCTAssertEqual(fixed.body, Array("abc".utf8))
        XCTAssertEqual(fixed.header("x-a"), "b")
        let chunked = try HTTPResponseParser.parse(Array("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n".utf8))
        XCTAssertEqual(chunked.status, 201)
        XCTAssertEqual(String(decoding: chunked.body, as: UTF8.self), "abc0123456789")
        let open = try HTTPResponseParser.parse(Array("HTTP/1.0 404 Not Found\r\n\r\nrest".utf8))
        XCTAssertEqual(open.status, 404)
        XCTAssertEqual(open.body, Array("rest".utf8))
        let head = try HTTPResponseParser.parse(Array("HTTP/1.1 200 OK\r\nContent-Length: 99\r\nReplay-Nonce: n\r\n\r\n".utf8), method: "HEAD")
        XCTAssertEqual(head.header("replay-nonce"), "n")
        XCTAssertEqual(head.body, [])
    }

    func testResponseParserErrorsNeverQuoteTheServer() {
        let hostile: [String] = [
            "HTTP/1.1 5\u{1b}[31m00 EVIL\r\n\r\n",
            "EVIL\u{1b}]0;x\u{07} 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 12\u{1b}[31mEVIL\r\n\r\nabc",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\u{1b}[2JEVIL\r\nabc\r\n0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad\u{85}EVIL header\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            "HTTP/1.1 200 OK\r\n",
            "",
        ]
        for text in hostile {
            XCTAssertThrowsError(try HTTPResponseParser.parse(Array(text.utf8)), text) { assertClean($0) }
        }
        // Over the limits: a code of its own.
        XCTAssertThrowsError(try HTTPResponseParser.parse(Array("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n".utf8), maxBody: 10)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .limitExceeded)
        }
        XCTAssertThrowsError(try HTTPResponseParser.parse(Array("HTTP/1.1 200 OK\r\nX: ".utf8) + [UInt8](repeating: 65, count: 70000))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .limitExceeded)
        }
    }

    /// Fed one byte at a time, the parser gives the same answer as all at once.
    func testResponseParserIsIncremental() throws {
        let bytes = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".utf8)
        var parser = HTTPResponseParser(maxBody: 100)
        var result: HTTPResponse?
        for b in bytes where result == nil { result = try parser.feed([b]) }
        XCTAssertEqual(result?.body, Array("hello".utf8))
    }

    func testRequestParser() {
        guard case .complete(let r) = HTTPRequestParser.parse(Array("GET /metrics?x=1 HTTP/1.1\r\nAuthorization:  Bearer t \r\n\r\n".utf8)) else {
            return XCTFail("not parsed")
        }
        XCTAssertEqual(r.method, "GET")
        XCTAssertEqual(r.path, "/metrics")
        XCTAssertEqual(r.query, "x=1")
        XCTAssertEqual(r.header("authorization"), "Bearer t")
        XCTAssertEqual(HTTPRequestParser.parse(Array("GET / HTTP/1.1\r\n".utf8)), .incomplete)
        XCTAssertEqual(HTTPRequestParser.parse([UInt8](repeating: 65, count: 9000)), .tooLarge)
        for bad in ["GET / HTTP/2\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n", "G\u{1b}T / HTTP/1.1\r\n\r\n", "GET x HTTP/1.1\r\n\r\n",
                    "GET / HTTP/1.1\r\nX: a\u{1b}b\r\n\r\n", "GET / HTTP/1.1\r\nnocolon\r\n\r\n", "GET / HTTP/1.1\rX\r\n\r\n", "\r\n\r\n"] {
            XCTAssertEqual(HTTPRequestParser.parse(Array(bad.utf8)), .malformed, bad)
        }
    }

    /// Issue 41 item 3: a CR LF (or any control character, or a space) anywhere in a URL refuses
    /// it, and the message shows it on one line.
    func testURLsWithControlCharactersOrSpacesAreRefusedAndNotQuotedRaw() {
        for bad in ["https://ca.test/nonce\r\nX-Injected:yes", "https://ca.test/a b", "https://ca.test/\u{1b}[31m", "https://ca.test/\u{85}",
                    "https://ca.test/\u{202e}x", "https://ca\r\n.test/", "http://ca.test/\t", "https://ca.test/" + String(repeating: "a", count: 3000)] {
            for scheme in ["https", "http"] {
                let url = scheme == "https" ? bad : "http" + bad.dropFirst(5)
                XCTAssertThrowsError(try URLAuthority.parse(url, scheme: scheme, defaultPort: 443), url) { e in
                    XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
                    let message = (e as? MTLSError)?.message ?? ""
                    XCTAssertNil(message.rangeOfCharacter(from: Self.controls), message)
                    XCTAssertLessThan(message.count, 400)
                }
            }
        }
    }

    /// One deadline for the whole exchange (issue 41 item 5): a server that sends one byte every
    /// 200 ms never lets a single read time out, yet the request ends at the deadline.
    func testOneDeadlineBoundsATricklingServer() throws {
        let (listener, port) = try Socket.listen(address: "127.0.0.1", port: 0)
        let stop = Locked(false)
        let server = Thread {
            let c = accept(listener, nil, nil)
            guard c >= 0 else { return }
            for b in Array("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".utf8) + [UInt8](repeating: 120, count: 1000) {
                if stop.withLock({ $0 }) { break }
                var byte = b
                _ = send(c, &byte, 1, Int32(MSG_NOSIGNAL))
                usleep(200_000)  // a server trickling one byte every 0.2 s: time passing is what is tested
            }
            close(c)
        }
        server.start()
        defer {
            stop.withLock { $0 = true }
            close(listener)
        }
        let client = HTTPClient(tls: nil, limits: .init(maxBody: 4096, timeout: 1.5))
        let start = Date()
        XCTAssertThrowsError(try client.send("GET", "http://127.0.0.1:\(port)/x")) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .timeout)
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 4)
    }

    /// The one responder serves clients concurrently: silent clients do not hold up a real one.
    func testResponderServesARealClientBesideSilentOnes() throws {
        let responder = try HTTPResponder(address: "127.0.0.1", port: 0, threadName: "mtls-test-http") { r in
            HTTPAnswer(status: 200, body: Array(r.path.utf8))
        }
        defer { responder.stop() }
        var silent: [Int32] = []
        defer { for fd in silent { close(fd) } }
        for _ in 0..<12 { silent.append(try Socket.connect(host: "127.0.0.1", port: responder.port, deadline: Deadline(seconds: 5))) }
        let start = Date()
        let r = try HTTPClient(tls: nil, limits: .init(timeout: 3)).send("GET", "http://127.0.0.1:\(responder.port)/hello")
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(r.body, Array("/hello".utf8))
        XCTAssertLessThan(Date().timeIntervalSince(start), 2)
    }

    func testMetricsBearerToken() {
        let token = Array("t0ken".utf8)
        let request = { (auth: String?) in
            HTTPRequest(method: "GET", path: "/metrics", headers: auth.map { [HTTPHeader(name: "authorization", value: $0)] } ?? [])
        }
        XCTAssertEqual(MetricsEndpoint.answer(to: request(nil), token: token) { "m 1\n" }.status, 401)
        XCTAssertEqual(MetricsEndpoint.answer(to: request("Bearer t0kem"), token: token) { "m 1\n" }.status, 401)
        XCTAssertEqual(MetricsEndpoint.answer(to: request("Basic t0ken"), token: token) { "m 1\n" }.status, 401)
        XCTAssertEqual(MetricsEndpoint.answer(to: request("bearer t0ken"), token: token) { "m 1\n" }.status, 200)
        XCTAssertEqual(MetricsEndpoint.answer(to: request(nil), token: nil) { "m 1\n" }.status, 200)
    }
}
