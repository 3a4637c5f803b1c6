import XCTest
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
}
