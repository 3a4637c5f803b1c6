import XCTest
import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS

/// RFC 6874: an IPv6 zone in a URL is "%25" then the zone (percent-encoded); a bare "%" is taken
/// as Python's URL parsers take it; an empty or broken zone is refused.
final class URLAuthorityTests: XCTestCase {
    func testZonesAreDecoded() throws {
        let cases: [(String, String, UInt16)] = [
            ("https://[fe80::1%25eth0]:8443/", "fe80::1%eth0", 8443),
            ("https://[fe80::1%25eth0]/path?q", "fe80::1%eth0", 443),
            ("HTTPS://[::1%251]:1/", "::1%1", 1),
            ("https://[fe80::1%25en%30]:9/", "fe80::1%en0", 9),  // the zone itself percent-decoded
            ("https://[fe80::1%eth0]:8443/", "fe80::1%eth0", 8443),  // bare "%", as urllib3, httpx and urllib
            ("https://[fe80::1%25]:8443/", "fe80::1%25", 8443),  // "%25" alone: the zone "25", as urllib3
            ("https://[::1]:8443", "::1", 8443),
            ("https://server.test:8443/x", "server.test", 8443),
            ("https://server.test", "server.test", 443),
            ("https://server.test:/", "server.test", 443),  // an empty port is the default (RFC 3986)
            ("https://10.0.0.1:99#f", "10.0.0.1", 99),
        ]
        for (url, host, port) in cases {
            let got = try URLAuthority.hostAndPort(https: url)
            XCTAssertEqual(got.host, host, url)
            XCTAssertEqual(got.port, port, url)
        }
    }

    func testMalformedURLsAreRefused() {
        for url in ["https://[fe80::1%]:8443/", "https://[fe80::1%25%zz]:1/", "https://[::1:8443/", "https://[::1]x/",
                    "https://server.test:0/", "https://server.test:70000/", "https://server.test:x/", "http://server.test/",
                    "https://", "https://user@server.test/", "https://:443/"] {
            XCTAssertThrowsError(try URLAuthority.hostAndPort(https: url), url) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument, url)
            }
        }
    }

    /// Every parser entry reads a zone as `mtls connect` does (issue 23): the ACME and EST
    /// clients' ``HTTPSURL``, the revocation fetcher's ``HTTPURL`` (CRL distribution points,
    /// OCSP responders) and ``URLAuthority/hostAndPort(http:)``. Before, the first two kept
    /// "%25eth0" as the zone "25eth0".
    func testEveryEntryDecodesZonesTheSameWay() throws {
        let https = try httpsParts("https://[fe80::1%25eth0]:8443/acme/directory?x#frag")
        XCTAssertEqual(https.host, "fe80::1%eth0")
        XCTAssertEqual(https.port, 8443)
        XCTAssertEqual(https.target, "/acme/directory?x")
        // What the client writes back (a URL in a message) reads back the same.
        let written = "https://\(URLAuthority.uriHost(https.host)):\(https.port)\(https.target)"
        XCTAssertEqual(written, "https://[fe80::1%25eth0]:8443/acme/directory?x")
        XCTAssertEqual(try URLAuthority.parse(written, scheme: "https", defaultPort: 443).host, "fe80::1%eth0")
        XCTAssertEqual(try httpsParts("https://[fe80::1%25en%30]/.well-known/est").host, "fe80::1%en0")
        XCTAssertEqual(try httpsParts("https://[fe80::1%25eth0]").target, "/")

        let http = try HTTPURL(parsing: "http://[::1%25lo]:8080/ca.crl")
        XCTAssertEqual(http.host, "::1%lo")
        XCTAssertEqual(http.port, 8080)
        XCTAssertEqual(http.path, "/ca.crl")
        XCTAssertEqual(HTTPURL("http://[fe80::1%eth0]/ocsp")?.host, "fe80::1%eth0")
        XCTAssertEqual(HTTPURL("HTTP://[fe80::1%25eth0]")?.port, 80)
        XCTAssertEqual(try URLAuthority.hostAndPort(http: "http://[::1%251]/x").host, "::1%1")

        // A Host header names the address without the zone (it means nothing to the server).
        XCTAssertEqual(URLAuthority.hostHeader("fe80::1%eth0", port: 8443, defaultPort: 443), "[fe80::1]:8443")
        XCTAssertEqual(URLAuthority.hostHeader("ca.test", port: 80, defaultPort: 80), "ca.test")
        XCTAssertEqual(URLAuthority.uriHost("fe80::1%en 0"), "[fe80::1%25en%200]")
        XCTAssertEqual(try URLAuthority.hostAndPort(https: "https://\(URLAuthority.uriHost("fe80::1%en 0"))/").host, "fe80::1%en 0")
    }

    /// A malformed zone, port or authority is refused by every entry with the same message.
    func testEveryEntryRefusesTheSameWay() {
        for authority in ["[fe80::1%]", "[fe80::1%25%zz]", "[::1", "[::1]x", "::1", "h:0", "h:70000", "h:+80", "u@h", ":80"] {
            let results: [(String, Result<Void, Error>)] = [
                ("core", Result { _ = try URLAuthority.hostAndPort(https: "https://\(authority)/") }),
                ("https", Result { _ = try httpsParts("https://\(authority)/") }),
                ("HTTPURL", Result { _ = try HTTPURL(parsing: "http://\(authority)/") }),
            ]
            for (name, result) in results {
                guard case .failure(let e) = result, let m = e as? MTLSError else { XCTFail("\(name) took \(authority)"); continue }
                XCTAssertEqual(m.code, .invalidArgument, "\(name) \(authority)")
                // The same reason (the message less the URL it ends with) as the core's.
                XCTAssertEqual(results[0].1.failureMessage, result.failureMessage, "\(name) \(authority)")
            }
            XCTAssertNil(HTTPURL("http://\(authority)/"), authority)
        }
    }

    /// The revocation fetcher reaches a zoned address (the loopback on the index of "lo", written
    /// as RFC 6874 writes it) and refuses a broken zone with the parser's reason, never a lookup of "25lo".
    func testFetcherConnectsToAZonedLoopback() throws {
        let server = try OneShotHTTPServer(body: Array("crl-bytes".utf8))
        // The zone by number: glibc resolves an interface name for link-local addresses only.
        let lo = if_nametoindex("lo")
        XCTAssertGreaterThan(lo, 0)
        let body = try HTTPFetcher.get("http://[::1%25\(lo)]:\(server.port)/z.crl", limits: .init(maxBytes: 1024, timeout: 5))
        XCTAssertEqual(body, Array("crl-bytes".utf8))
        XCTAssertTrue(server.request().hasPrefix("GET /z.crl HTTP/1.1\r\nHost: [::1]:\(server.port)\r\n"), server.request())
        XCTAssertThrowsError(try HTTPFetcher.get("http://[::1%25%zz]:\(server.port)/z.crl", limits: .init())) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument)
            XCTAssertTrue(($0 as? MTLSError)?.message.contains("percent-encoding in the IPv6 zone") == true, "\($0)")
        }
    }
}

private extension Result where Failure == Error {
    /// The message of an ``MTLSError`` failure without the URL it ends with.
    var failureMessage: String? {
        guard case .failure(let e) = self, let m = e as? MTLSError else { return nil }
        return m.message.components(separatedBy: ": ").first
    }
}

/// An HTTP server on ::1 that answers one request with 200 and `body`, and keeps the request.
private final class OneShotHTTPServer: @unchecked Sendable {
    let port: UInt16
    private let fd: Int32
    private let done = DispatchSemaphore(value: 0)
    private var received = ""

    init(body: [UInt8]) throws {
        let listener = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in6()
        addr.sin6_family = sa_family_t(AF_INET6)
        addr.sin6_addr = in6addr_loopback
        var len = socklen_t(MemoryLayout<sockaddr_in6>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, len) == 0 && listen(listener, 4) == 0 && getsockname(listener, $0, &len) == 0
            }
        }
        guard listener >= 0, ok else { close(listener); throw MTLSError(.io, "cannot listen on ::1") }
        fd = listener
        port = UInt16(bigEndian: addr.sin6_port)
        Thread.detachNewThread { [self] in
            let c = accept(listener, nil, nil)
            defer { if c >= 0 { close(c) }; done.signal() }
            guard c >= 0 else { return }
            var buf = [UInt8](repeating: 0, count: 4096), got: [UInt8] = []
            while !got.suffix(4).elementsEqual([13, 10, 13, 10]) {
                let n = recv(c, &buf, buf.count, 0)
                if n <= 0 { break }
                got += buf[0..<n]
            }
            received = String(decoding: got, as: UTF8.self)
            let reply = Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body
            _ = reply.withUnsafeBytes { send(c, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// The request's head, once it was answered.
    func request() -> String {
        done.wait()
        done.signal()
        return received
    }

    deinit { close(fd) }
}

/// An `https://` URL as the one HTTP client splits it (host, port, request target).
func httpsParts(_ url: String) throws -> (host: String, port: UInt16, target: String) {
    try URLAuthority.parse(url, scheme: "https", defaultPort: 443)
}
