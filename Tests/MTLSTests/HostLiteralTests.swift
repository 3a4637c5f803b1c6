import XCTest
@testable import MTLS

/// The one `host[:port]` splitter (``HostLiteral/split(_:emptyPort:)``) and each reader that used
/// to carry its own copy: URLs (``URLAuthority``), host patterns, `mtls verify --host`
/// (``TrustPeer/init(hostText:)``) and `mtls connect HOST:PORT` (``TrustPeer/splitTarget(_:)``).
final class HostLiteralTests: XCTestCase {
    private func split(_ s: String, emptyPort: Bool = false) throws -> HostLiteral.Authority {
        try HostLiteral.split(Substring(s), emptyPort: emptyPort)
    }

    func testSplitsEveryForm() throws {
        let cases: [(String, String, UInt16?, Bool)] = [
            ("[::1]:443", "::1", 443, true),
            ("[::1]", "::1", nil, true),
            ("[fe80::1%eth0]:8443", "fe80::1%eth0", 8443, true),  // a zone kept as written
            ("[fe80::1%25eth0]", "fe80::1%25eth0", nil, true),  // URL decoding is URLAuthority's
            ("::1", "::1", nil, false),  // a bare IPv6 literal: all host
            ("fe80::1%eth0", "fe80::1%eth0", nil, false),
            ("::1:8443", "::1:8443", nil, false),  // two colons or more without brackets: no port
            ("host.test:8443", "host.test", 8443, false),
            ("host.test", "host.test", nil, false),
            ("10.0.0.1:1", "10.0.0.1", 1, false),
            ("h:65535", "h", 65535, false),
            (":443", "", 443, false),  // an empty host is the caller's to refuse
            ("[]", "", nil, true),
            ("", "", nil, false),
        ]
        for (text, host, port, bracketed) in cases {
            let a = try split(text)
            XCTAssertEqual(a, HostLiteral.Authority(host: host, port: port, bracketed: bracketed), text)
        }
    }

    func testRefusesMalformedText() {
        let cases: [(String, HostLiteral.Malformed)] = [
            ("[::1", .unclosedBracket), ("[::1]x", .textAfterBracket), ("[::1]443", .textAfterBracket),
            ("h:0", .badPort), ("h:65536", .badPort), ("h:99999999999999999999", .badPort), ("h:-1", .badPort),
            ("h:+443", .badPort), ("h: 443", .badPort), ("h:44a", .badPort), ("[::1]:0", .badPort),
            ("h:", .badPort), ("[::1]:", .badPort),  // a trailing colon: no port where one is wanted
            ("h:٤٤٣", .badPort),  // digits, but not ASCII ones
        ]
        for (text, why) in cases {
            XCTAssertThrowsError(try split(text), text) { XCTAssertEqual($0 as? HostLiteral.Malformed, why, text) }
        }
        // A URL's empty port is its default.
        XCTAssertEqual(try split("h:", emptyPort: true), HostLiteral.Authority(host: "h", port: nil, bracketed: false))
        XCTAssertEqual(try split("[::1]:", emptyPort: true), HostLiteral.Authority(host: "::1", port: nil, bracketed: true))
    }

    /// URLs read as before the splitter was shared.
    func testURLsReadAsBefore() throws {
        let good: [(String, String, UInt16)] = [
            ("https://[::1]:8443/x", "::1", 8443), ("https://[::1]/", "::1", 443), ("https://[::1]:/", "::1", 443),
            ("https://h.test:/", "h.test", 443), ("https://h.test:9", "h.test", 9),
            ("https://[fe80::1%25eth0]:1/", "fe80::1%eth0", 1),
        ]
        for (url, host, port) in good {
            let r = try URLAuthority.hostAndPort(https: url)
            XCTAssertEqual(r.host, host, url)
            XCTAssertEqual(r.port, port, url)
        }
        let bad: [(String, String)] = [
            ("https://[::1/", "without its closing bracket"), ("https://[::1]x/", "unexpected text after"),
            ("https://::1:80/", "must be written in brackets"), ("https://::1/", "must be written in brackets"),
            ("https://h.test:0/", "malformed port"), ("https://h.test:65536/", "malformed port"),
            ("https://h.test:x/", "malformed port"), ("https://:443/", "without a host"), ("https://:x/", "without a host"),
            ("https://[]:443/", "without a host"), ("https://[fe80::1%]/", "empty IPv6 zone"),
        ]
        for (url, words) in bad {
            XCTAssertThrowsError(try URLAuthority.hostAndPort(https: url), url) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument, url)
                XCTAssertTrue(($0 as? MTLSError)?.message.contains(words) == true, "\(url): \($0)")
            }
        }
    }

    /// Host patterns, `--host` and `mtls connect` targets read as before, through the splitter.
    func testHostPatternsAndTargetsReadAsBefore() throws {
        XCTAssertEqual(try HostPattern("[::1]:8443").port, 8443)
        XCTAssertEqual(try HostPattern("fe80::1%eth0").port, nil)
        XCTAssertEqual(try HostPattern("*.test:443").port, 443)
        for (text, words) in [("[::1", "unterminated ["), ("[::1]x", "bad port"), ("h.test:0", "bad port"), ("h.test:", "bad port"),
                              ("h.test:+443", "bad port"), (":443", "empty host pattern"), ("::1:8443", "ambiguous")] {
            XCTAssertThrowsError(try HostPattern(text), text) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .invalidPolicy, text)
                XCTAssertTrue(($0 as? MTLSError)?.message.contains(words) == true, "\(text): \($0)")
            }
        }
        let peer = TrustPeer(hostText: "[fe80::1%eth0]:8443")
        XCTAssertEqual(peer.host, "fe80::1")
        XCTAssertEqual(peer.zone, "eth0")
        XCTAssertEqual(peer.port, 8443)
        XCTAssertEqual(TrustPeer(hostText: "::1").host, "::1")
        XCTAssertNil(TrustPeer(hostText: "::1").port)
        XCTAssertEqual(TrustPeer(hostText: "h.test:9").port, 9)
        XCTAssertEqual(TrustPeer(hostText: "h.test:bad").host, "h.test:bad")  // unreadable: all host, as before

        XCTAssertTrue(try TrustPeer.splitTarget("[::1]:443") == ("::1", 443))
        XCTAssertTrue(try TrustPeer.splitTarget("[fe80::1%eth0]:443") == ("fe80::1%eth0", 443))
        XCTAssertTrue(try TrustPeer.splitTarget("h.test:8443") == ("h.test", 8443))
        for bad in ["::1", "h.test", "h.test:0", "h.test:", "h.test:+443", ":443", "[::1]", "[::1"] {
            XCTAssertThrowsError(try TrustPeer.splitTarget(bad), bad) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument, bad) }
        }
    }

    /// A host given apart from its port carries none: `TLSConnection.connect`/`open`/`wrap` refuse
    /// "h:443" with invalidArgument before any lookup or connect (it used to reach getaddrinfo as
    /// the name "h:443" and fail as a connect error).
    func testAHostGivenApartFromItsPortCarriesNone() throws {
        XCTAssertEqual(try HostLiteral.hostOnly("[::1]"), "::1")
        XCTAssertEqual(try HostLiteral.hostOnly("fe80::1%eth0"), "fe80::1%eth0")
        XCTAssertEqual(try HostLiteral.hostOnly("server.test"), "server.test")
        for bad in ["server.test:443", "[::1]:443", "127.0.0.1:1", "[::1", "[]", ""] {
            XCTAssertThrowsError(try HostLiteral.hostOnly(bad), bad) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument, bad) }
        }
        for host in ["127.0.0.1:443", "[::1]:443"] {
            XCTAssertThrowsError(try TLSConnection.connect(host: host, port: 443)) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument, host)
                XCTAssertTrue(($0 as? MTLSError)?.message.contains("without a port") ?? false, "\($0)")
            }
        }
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        defer { close(fds[0]); close(fds[1]) }
        XCTAssertThrowsError(try TLSConnection.wrap(fileDescriptor: fds[0], host: "server.test:443", port: 443)) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .invalidArgument)
        }
    }
}
