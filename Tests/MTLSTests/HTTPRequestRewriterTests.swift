import XCTest
@testable import MTLS

/// The tunnel's `--http-client-header` (issue 39): the request-head rewriter on its own, fed whole
/// streams, pipelined requests in one piece and the same bytes one at a time.
final class HTTPRequestRewriterTests: XCTestCase {
    private func rewriter() throws -> HTTPRequestRewriter {
        try HTTPRequestRewriter(name: "X-Client-Cert-Subject", value: "CN=alice,O=Example")
    }

    /// Feeds `input` in pieces of `piece` bytes (nil: all at once).
    private func run(_ input: String, piece: Int? = nil) throws -> (String, Int) {
        var r = try rewriter()
        var out: [UInt8] = []
        let bytes = Array(input.utf8)
        let step = piece ?? max(bytes.count, 1)
        var i = 0
        while i < bytes.count {
            let end = min(i + step, bytes.count)
            let chunk = Array(bytes[i..<end])
            try chunk.withUnsafeBytes { p in try r.feed(p, into: &out) }
            i = end
        }
        return (String(decoding: out, as: UTF8.self), r.requests)
    }

    /// The same output whole and byte by byte.
    private func rewritten(_ input: String) throws -> (String, Int) {
        let whole = try run(input)
        let byByte = try run(input, piece: 1)
        XCTAssertEqual(whole.0, byByte.0)
        XCTAssertEqual(whole.1, byByte.1)
        return whole
    }

    private func refusal(_ input: String, file: StaticString = #filePath, line: UInt = #line) -> HTTPRequestRewriter.Refusal? {
        var refusals: [HTTPRequestRewriter.Refusal] = []
        for piece in [nil, 1] as [Int?] {
            do {
                _ = try run(input, piece: piece)
                XCTFail("accepted: \(input.debugDescription)", file: file, line: line)
            } catch let e as HTTPRequestRewriter.Refusal {
                refusals.append(e)
            } catch {
                XCTFail("\(error)", file: file, line: line)
            }
        }
        XCTAssertEqual(refusals.map(\.status), refusals.reversed().map(\.status), file: file, line: line)
        return refusals.first
    }

    func testHeaderIsAddedToARequestWithoutBody() throws {
        let (out, n) = try rewritten("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(out, "GET /a HTTP/1.1\r\nHost: x\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n")
        XCTAssertEqual(n, 1)
    }

    func testClientCopiesAreStrippedWhateverTheirCase() throws {
        let (out, _) = try rewritten("GET / HTTP/1.1\r\nx-client-cert-subject: CN=root\r\nHost: x\r\nX-CLIENT-CERT-SUBJECT:CN=admin\r\n\r\n")
        XCTAssertEqual(out, "GET / HTTP/1.1\r\nHost: x\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n")
        XCTAssertFalse(out.contains("root"))
        XCTAssertFalse(out.contains("admin"))
    }

    /// CGI, WSGI and PHP read `X_Client_Cert_Subject` as the same variable as the set header.
    func testUnderscoreSpellingIsStrippedButOtherNamesStay() throws {
        let (out, _) = try rewritten("GET / HTTP/1.1\r\nX_Client_Cert_Subject: CN=root\r\nX-Client-Cert-Subject-2: kept\r\n\r\n")
        XCTAssertEqual(out, "GET / HTTP/1.1\r\nX-Client-Cert-Subject-2: kept\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n")
    }

    /// `Content_Length` is not Content-Length: no body is read for it.
    func testUnderscoreContentLengthIsNotAFramingHeader() throws {
        let (out, n) = try rewritten("GET /1 HTTP/1.1\r\nContent_Length: 5\r\n\r\nGET /2 HTTP/1.1\r\n\r\n")
        XCTAssertEqual(n, 2)
        XCTAssertTrue(out.hasSuffix("GET /2 HTTP/1.1\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n"))
    }

    func testPipelinedRequestsWithContentLengthEachGetTheHeader() throws {
        let input = "POST /1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nX-Client-Cert-Subject: forged\r\n\r\n"
        let (out, n) = try rewritten(input)
        XCTAssertEqual(out, "POST /1 HTTP/1.1\r\nContent-Length: 5\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\nhello"
                       + "GET /2 HTTP/1.1\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n")
        XCTAssertEqual(n, 2)
    }

    /// A body that looks like a request head is passed through as body.
    func testBodyBytesAreNotParsed() throws {
        let body = "GET /x HTTP/1.1\r\nX-Client-Cert-Subject: forged\r\n\r\n"
        let (out, n) = try rewritten("POST / HTTP/1.1\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
        XCTAssertTrue(out.hasSuffix("\r\n\r\n" + body))
        XCTAssertEqual(n, 1)
    }

    func testChunkedBodyWithExtensionsAndTrailersPassesAndNextRequestIsRewritten() throws {
        let input = "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "5;name=\"v\"\r\nhello\r\nA\r\n0123456789\r\n0;last\r\nChecksum: 1\r\nx-client-cert-subject: forged\r\n\r\n"
            + "GET /next HTTP/1.1\r\n\r\n"
        let (out, n) = try rewritten(input)
        XCTAssertEqual(out, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n"
                       + "5;name=\"v\"\r\nhello\r\nA\r\n0123456789\r\n0;last\r\nChecksum: 1\r\n\r\n"
                       + "GET /next HTTP/1.1\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n")
        XCTAssertEqual(n, 2)
    }

    func testLeadingEmptyLineIsIgnored() throws {
        let (out, _) = try rewritten("\r\nGET / HTTP/1.0\r\n\r\n")
        XCTAssertEqual(out, "GET / HTTP/1.0\r\nX-Client-Cert-Subject: CN=alice,O=Example\r\n\r\n")
    }

    func testValueFromThePeerIsPercentEncoded() throws {
        var r = try HTTPRequestRewriter(name: "X-S", value: "CN=a\r\nX-Admin: 1,O=é%")
        var out: [UInt8] = []
        try Array("GET / HTTP/1.1\r\n\r\n".utf8).withUnsafeBytes { p in try r.feed(p, into: &out) }
        XCTAssertEqual(String(decoding: out, as: UTF8.self), "GET / HTTP/1.1\r\nX-S: CN=a%0D%0AX-Admin: 1,O=%C3%A9%25\r\n\r\n")
        XCTAssertThrowsError(try HTTPRequestRewriter(name: "X S", value: ""))
        XCTAssertThrowsError(try HTTPRequestRewriter(name: "", value: ""))
    }

    func testContentLengthWithTransferEncodingIsRefused() {
        let r = refusal("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        XCTAssertEqual(r?.status, 400)
        XCTAssertEqual(r?.error.message.contains("both Transfer-Encoding and Content-Length"), true)
    }

    func testDifferingOrInvalidContentLengthsAreRefused() throws {
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"))
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\nabcd"))
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc"))
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"))
        // The same value twice is one length.
        let (out, n) = try rewritten("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
        XCTAssertTrue(out.hasSuffix("\r\n\r\nabc"))
        XCTAssertEqual(n, 1)
    }

    func testOtherTransferEncodingsAreRefused() {
        XCTAssertEqual(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")?.status, 501)
        XCTAssertEqual(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")?.status, 501)
    }

    func testOversizeHeadIsRefusedWith431() {
        let big = "GET / HTTP/1.1\r\nX-Big: " + String(repeating: "a", count: HTTPRequestRewriter.maxHeadSize) + "\r\n\r\n"
        let r = refusal(big)
        XCTAssertEqual(r?.status, 431)
        XCTAssertEqual(r?.error.code, .limitExceeded)
        XCTAssertEqual(r.map { String(decoding: $0.response, as: UTF8.self).hasPrefix("HTTP/1.1 431 ") }, true)
    }

    func testNonHTTPIsRefused() {
        XCTAssertEqual(refusal("\u{16}\u{03}\u{01}\u{00}")?.error.message.contains("not an HTTP/1.x request"), true)
        XCTAssertNotNil(refusal("SSH-2.0-OpenSSH_9.6\r\n"))
        XCTAssertNotNil(refusal("GET / HTTP/2.0\r\n\r\n"))
        XCTAssertNotNil(refusal("GET  / HTTP/1.1\r\n\r\n"))
    }

    func testMalformedHeadsAreRefused() {
        XCTAssertNotNil(refusal("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n"), "obs-fold")
        XCTAssertNotNil(refusal("GET / HTTP/1.1\nA: b\n\n"), "bare LF")
        XCTAssertNotNil(refusal("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"), "bare CR")
        XCTAssertNotNil(refusal("GET / HTTP/1.1\r\nX-Client-Cert-Subject : forged\r\n\r\n"), "space before colon")
        XCTAssertNotNil(refusal("GET / HTTP/1.1\r\nNoColon\r\n\r\n"))
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n"), "chunk size")
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n"), "chunk longer than its size")
        XCTAssertNotNil(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1234567890ABCDEF0\r\n"), "chunk size overflow")
    }

    func testConnectAndUpgradeAreRefused() {
        XCTAssertEqual(refusal("CONNECT example.com:443 HTTP/1.1\r\n\r\n")?.status, 501)
        XCTAssertEqual(refusal("GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")?.status, 501)
    }
}
