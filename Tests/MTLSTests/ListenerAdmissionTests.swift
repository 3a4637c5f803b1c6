import XCTest
@testable import MTLS
@testable import MTLSNet
@testable import MTLSTLS
import MTLSTrust

/// What a listener decides before a client's handshake starts (issue 35 item 8): when a
/// ClientHello is whole (only its TLS framing is read), and which source a client counts under
/// for the per-source cap.
final class ListenerAdmissionTests: XCTestCase {
    private func needed(_ bytes: [UInt8], limit: Int = TLSListener.clientHelloWaitLimit) -> Int? {
        bytes.withUnsafeBytes { ClientHelloArrival.bytesNeeded($0, limit: limit) }
    }

    /// A record header (type 0x16, TLS 1.0 framing, `length`) followed by `body`.
    private func record(_ length: Int, _ body: [UInt8]) -> [UInt8] {
        [0x16, 0x03, 0x01, UInt8(length >> 8), UInt8(length & 0xff)] + body
    }

    func testOneByteOrAPartOfAClientHelloIsWaitedFor() {
        XCTAssertEqual(needed([0x16]), 5)                                   // the record header first
        XCTAssertEqual(needed(record(512, [0x01])), 5 + 512)                // the whole record
        let hello = [0x01, 0x00, 0x00, 0x04] + [UInt8](repeating: 0, count: 4)
        XCTAssertNil(needed(record(8, hello)))                              // whole
        XCTAssertNil(needed(record(8, hello) + [0x17, 0x03]))               // whole, more after it
    }

    func testAClientHelloOverTwoRecordsIsWholeWithItsSecondRecord() {
        // A message with a 10-byte body: its header and 2 bytes in the first record, 8 in the second.
        let first = record(6, [0x01, 0x00, 0x00, 0x0a, 0, 0])
        XCTAssertEqual(needed(first), first.count + 5)
        XCTAssertEqual(needed(first + record(8, [0])), first.count + 5 + 8)
        XCTAssertEqual(needed(first + record(6, [UInt8](repeating: 0, count: 6))), first.count + 11 + 5)  // still 2 bytes short
        XCTAssertNil(needed(first + record(8, [UInt8](repeating: 0, count: 8))))
        // The handshake header itself split across records.
        let split = record(2, [0x01, 0x00]) + record(6, [0x00, 0x02, 0xaa, 0xbb, 0, 0])
        XCTAssertNil(needed(split))
    }

    func testBytesThatAreNoClientHelloGoToTheHandshakeAtOnce() {
        XCTAssertNil(needed(Array("GET / HTTP/1.1\r\n".utf8)))
        XCTAssertNil(needed(record(0, [])))                                 // an empty record
        XCTAssertNil(needed(record(0x7fff, [0x01])))                        // longer than a record may be
        XCTAssertNil(needed(record(8, [0x02, 0, 0, 4, 0, 0, 0, 0])))        // not a ClientHello
        XCTAssertNil(needed(record(8, [0x01, 0xff, 0xff, 0xff, 0, 0, 0, 0]))) // longer than OpenSSL takes
    }

    func testNoMoreThanTheLimitIsWaitedFor() {
        XCTAssertEqual(needed(record(16384, [0x01, 0x01, 0x00, 0x00]), limit: 100), 100)
        XCTAssertNil(needed(record(16384, [0x01, 0x01, 0x00, 0x00]) + [UInt8](repeating: 0, count: 100), limit: 100))
    }

    func testSourcesCountIPv6ByPrefixAndIPv4ByAddress() {
        XCTAssertEqual(ListenerSource.key(peer: "127.0.0.2:40000", ipv6PrefixLength: 64), "127.0.0.2")
        XCTAssertEqual(ListenerSource.key(peer: "[::ffff:10.0.0.5]:40000", ipv6PrefixLength: 64), "10.0.0.5")
        XCTAssertEqual(ListenerSource.key(peer: "[2001:db8:1:2:aaaa::1]:443", ipv6PrefixLength: 64), "2001:db8:1:2::/64")
        XCTAssertEqual(ListenerSource.key(peer: "[2001:db8:1:2:bbbb::9]:443", ipv6PrefixLength: 64), "2001:db8:1:2::/64")
        XCTAssertEqual(ListenerSource.key(peer: "[2001:db8:1:2ff::1]:443", ipv6PrefixLength: 56), "2001:db8:1:200::/56")
        XCTAssertEqual(ListenerSource.key(peer: "[2001:db8::1]:443", ipv6PrefixLength: 128), "2001:db8::1")
    }

    /// Issue 40: a listener reads an accepted client's address once, from its numeric host (no
    /// `host:port` text written and read back per connection); the per-source key and the rule's
    /// peer are the ones its text gave.
    func testAnAcceptedClientsAddressReadOnceKeysAndRulesAsItsTextDid() throws {
        for (host, text) in [("127.0.0.2", "127.0.0.2:40000"), ("::ffff:10.0.0.5", "[::ffff:10.0.0.5]:40000"),
                             ("2001:db8:1:2:aaaa::1", "[2001:db8:1:2:aaaa::1]:443"), ("fe80::1%1", "[fe80::1%1]:443"),
                             ("2001:DB8::1", "[2001:DB8::1]:443")] {
            let once = TrustPeer.client(numericHost: host)
            XCTAssertEqual(once, TrustPeer.client(address: text), host)
            for bits in [56, 64, 128] {
                XCTAssertEqual(ListenerSource.key(client: once, peer: text, ipv6PrefixLength: bits),
                               ListenerSource.key(peer: text, ipv6PrefixLength: bits), "\(host)/\(bits)")
            }
        }
        // A real accept: the peer's text as getnameinfo wrote it (now inet_ntop), the host apart.
        let (listener, port) = try Socket.listen(address: "127.0.0.1", port: 0)
        defer { close(listener) }
        let client = try Socket.connect(host: "127.0.0.1", port: port, deadline: Deadline(seconds: 5))
        defer { close(client) }
        try Socket.wait(listener, forWriting: false, deadline: Deadline(seconds: 5), what: "accept")
        let accepted = try XCTUnwrap(Socket.acceptClient(listener))
        defer { close(accepted.fd) }
        let clientPort = try XCTUnwrap(Socket.boundPort(client))
        XCTAssertEqual(accepted.peer, "127.0.0.1:\(clientPort)")
        XCTAssertEqual(accepted.host, "127.0.0.1")
    }

    func testIPv6PrefixFollowsTheLimitsConventionAndIsChecked() throws {
        var o = TLSServerOptions(identity: try CertificateAuthority.newRoot(commonName: "Server"))
        XCTAssertEqual(o.ipv6SourcePrefixLength, 64)
        XCTAssertEqual(o.clientHelloSeconds, 10)
        o.ipv6SourcePrefixLength = 0
        XCTAssertEqual(o.ipv6SourcePrefixLength, 64)
        o.ipv6SourcePrefixLength = 129
        XCTAssertThrowsError(try TLSListener(address: "127.0.0.1", port: 0, options: o)) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
        }
    }
}
