import XCTest
import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS

/// The tunnel's library pieces (issue 39): the PROXY protocol v2 header byte for byte, the
/// plaintext-address rule, and the forwarding loop's half-close.
final class TunnelTests: XCTestCase {
    /// TCP over IPv4, 127.0.0.1:56324 → 127.0.0.1:443, TLS 1.3 with a client certificate for
    /// "alice" on this connection; every byte written out by hand from proxy-protocol.txt 2.2.
    func testProxyHeaderTCP4MatchesTheHandComputedVector() throws {
        let header = try ProxyProtocolV2.header(
            .tcp4(source: [127, 0, 0, 1], sourcePort: 56324, destination: [127, 0, 0, 1], destinationPort: 443),
            tls: .init(version: "TLSv1.3", commonName: "alice", certificateOnConnection: true, certificateInSession: true))
        let expected: [UInt8] = [
            0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,  // signature
            0x21,  // version 2, PROXY
            0x11,  // TCP over IPv4
            0x00, 0x26,  // 38 bytes follow: 12 of addresses, 26 of TLV
            0x7F, 0x00, 0x00, 0x01, 0x7F, 0x00, 0x00, 0x01,  // source, destination
            0xDC, 0x04, 0x01, 0xBB,  // ports 56324, 443
            0x20, 0x00, 0x17,  // PP2_TYPE_SSL, 23 bytes
            0x07,  // PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS
            0x00, 0x00, 0x00, 0x00,  // verify: 0, verified
            0x21, 0x00, 0x07, 0x54, 0x4C, 0x53, 0x76, 0x31, 0x2E, 0x33,  // PP2_SUBTYPE_SSL_VERSION "TLSv1.3"
            0x22, 0x00, 0x05, 0x61, 0x6C, 0x69, 0x63, 0x65,  // PP2_SUBTYPE_SSL_CN "alice"
        ]
        XCTAssertEqual(header, expected)
    }

    func testProxyHeaderOtherFamiliesAndLimits() throws {
        let v6 = try ProxyProtocolV2.header(.tcp6(source: [UInt8](repeating: 0, count: 15) + [1], sourcePort: 1,
                                                  destination: [UInt8](repeating: 0, count: 15) + [1], destinationPort: 2))
        XCTAssertEqual(Array(v6[12..<16]), [0x21, 0x21, 0x00, 36])
        XCTAssertEqual(v6.count, 16 + 36)
        let unix = try ProxyProtocolV2.header(.unix(source: "/a", destination: "/run/b.sock"))
        XCTAssertEqual(Array(unix[12..<16]), [0x21, 0x31, 0x00, 0xD8])  // 216 bytes: two 108-byte paths
        XCTAssertEqual(Array(unix[16..<19]), [0x2F, 0x61, 0x00])
        XCTAssertEqual(try ProxyProtocolV2.header(.unspecified), ProxyProtocolV2.signature + [0x21, 0x00, 0x00, 0x00])
        // The whole certificate in libmtls's TLV 0xE0, after the SSL TLV.
        let withCert = try ProxyProtocolV2.header(.unspecified, tls: .init(version: "TLSv1.2", certificateDER: [1, 2, 3]))
        XCTAssertEqual(Array(withCert.suffix(6)), [0xE0, 0x00, 0x03, 1, 2, 3])
        XCTAssertThrowsError(try ProxyProtocolV2.header(.tcp4(source: [1], sourcePort: 0, destination: [1, 2, 3, 4], destinationPort: 0)))
        XCTAssertThrowsError(try ProxyProtocolV2.header(.unix(source: String(repeating: "x", count: 108), destination: "/")))
        XCTAssertThrowsError(try ProxyProtocolV2.header(.unspecified, tls: .init(version: "TLSv1.3", certificateDER: [UInt8](repeating: 0, count: 70_000)))) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
        }
    }

    func testPlaintextRuleAndAddressSpellings() throws {
        let local = ["127.0.0.1:80", "127.9.9.9:1", "[::1]:80", "localhost:5432", "LOCALHOST:1", "[::ffff:127.0.0.1]:8",
                     "unix:/run/app.sock", "/tmp/x.sock"]
        for a in local { XCTAssertTrue(try TunnelAddress(a).isLocal, a) }
        let remote = ["10.0.0.5:80", "0.0.0.0:80", "[::]:80", "db.internal:5432", "[2001:db8::1]:443", "128.0.0.1:1"]
        for a in remote {
            let address = try TunnelAddress(a)
            XCTAssertFalse(address.isLocal, a)
            XCTAssertThrowsError(try address.requirePlaintextSafe(option: "--target", allowed: false, unsafeFlag: "--unsafe-target")) { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
                XCTAssertTrue((e as? MTLSError)?.message.contains("--unsafe-target") ?? false, "\(e)")
            }
            XCTAssertNoThrow(try address.requirePlaintextSafe(option: "--target", allowed: true, unsafeFlag: "--unsafe-target"))
        }
        XCTAssertEqual(try TunnelAddress("[::1]:443"), .tcp(host: "::1", port: 443))
        XCTAssertEqual(try TunnelAddress("unix:/x").description, "unix:/x")
        for bad in ["", "host", "host:", "host:99999", "::1:80", ":80", "unix:", "/" + String(repeating: "p", count: 200)] {
            XCTAssertThrowsError(try TunnelAddress(bad), bad) { e in XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument) }
        }
    }

    /// What socket activation passes is judged by where it is bound: loopback and UNIX sockets
    /// are local, the wildcard is not; a socket that does not listen, or is no stream, is refused.
    func testBoundAddressOfAnActivatedSocket() throws {
        let (loopback, port) = try TunnelAddress("127.0.0.1:0").listen()
        defer { close(loopback) }
        XCTAssertEqual(try TunnelAddress.bound(listeningSocket: loopback), .tcp(host: "127.0.0.1", port: port))
        let (any, anyPort) = try TunnelAddress("0.0.0.0:0").listen()
        defer { close(any) }
        let wildcard = try TunnelAddress.bound(listeningSocket: any)
        XCTAssertEqual(wildcard, .tcp(host: "0.0.0.0", port: anyPort))
        XCTAssertFalse(wildcard.isLocal)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mtls-bound-\(getpid()).sock").path
        let (unixFD, _) = try TunnelAddress("unix:" + path).listen()
        defer { close(unixFD); unlink(path) }
        XCTAssertEqual(try TunnelAddress.bound(listeningSocket: unixFD), .unix(path: path))
        let udp = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        let idle = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(udp); close(idle) }
        for fd in [udp, idle, -1] {
            XCTAssertThrowsError(try TunnelAddress.bound(listeningSocket: fd), "\(fd)") { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidArgument)
                XCTAssertTrue((e as? MTLSError)?.message.contains("not a listening stream socket") ?? false, "\(e)")
            }
        }
    }
}

/// The forwarding loop, with the connection tests' PKI.
extension TLSConnectionTests {
    /// One connection accepted and forwarded to a socket pair whose far end (the plaintext
    /// program) reads to the end of its input, then answers `answerPrefix` + what it read. `client`
    /// writes on the connecting side; then everything the TLS side gets back is read.
    private func forwardedExchange(answerPrefix: String, counters: ForwardCounters? = nil,
                                   rewriter: @escaping @Sendable (TLSConnection) -> HTTPRequestRewriter? = { _ in nil },
                                   client: (TLSConnection) throws -> Void) throws -> (reply: String, result: ForwardResult) {
        let pki = self
        var so = TLSServerOptions(identity: try pki.identity("server"))
        so.clientPolicy = try pki.policy(["root"])
        so.handshakeTimeLimit = .after(.seconds(10))
        let listener = try TLSListener(address: "127.0.0.1", port: 0, options: so)
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair), 0)
        let (near, far) = (pair[0], pair[1])
        defer { close(near) }
        let outcome = LockedBox<ForwardResult?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            if let c = try? listener.accept(timeout: 10) {
                let r = c.forward(to: near, idleTimeout: 10, counters: counters, requestRewriter: rewriter(c))
                outcome.mutate { $0 = r }
                c.close()
            }
            done.signal()
        }
        Thread.detachNewThread {
            var got: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 1024)
            while true {
                let n = read(far, &buf, buf.count)
                if n <= 0 { break }
                got += buf[0..<n]
            }
            let answer = Array(answerPrefix.utf8) + got
            // When the loop ended early, `near` may be closed first: no SIGPIPE.
            _ = answer.withUnsafeBytes { send(far, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            close(far)
        }
        let c = try TLSConnection.connect(host: "127.0.0.1", port: listener.port, options: try pki.clientOptions(identity: pki.identity("client-a")))
        defer { c.close() }
        try client(c)
        var reply: [UInt8] = []
        while true {
            guard let chunk = try? c.read(timeout: 10), !chunk.isEmpty else { break }
            reply += chunk
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        return (String(decoding: reply, as: UTF8.self), try XCTUnwrap(outcome.value))
    }

    /// The client sends "hello" and its close_notify, then reads: the loop passes the
    /// close_notify on as shutdown(SHUT_WR), the plaintext program answers after its input ended,
    /// and the answer comes back before the loop ends both ways.
    func testForwardPassesHalfCloseBothWays() throws {
        let counters = ForwardCounters()
        let (reply, r) = try forwardedExchange(answerPrefix: "answer:", counters: counters) { c in
            try c.write(Array("hello".utf8))
            try c.shutdown()
        }
        XCTAssertEqual(reply, "answer:hello")
        XCTAssertNil(r.error)
        XCTAssertFalse(r.idleTimedOut)
        XCTAssertFalse(r.truncated)
        XCTAssertEqual(r.bytesFromTLS, 5)
        XCTAssertEqual(r.bytesToTLS, 12)
        XCTAssertEqual(counters.bytesFromTLS, 5)
        XCTAssertEqual(counters.bytesToTLS, 12)
    }

    /// `forward(to:requestRewriter:)` (issue 39, --http-client-header): what reaches the plaintext
    /// side is the rewritten request; a stream that is not HTTP gets the 400 answer and ends the
    /// loop with the refusal.
    func testForwardWithARequestRewriter() throws {
        let rewriter: @Sendable (TLSConnection) -> HTTPRequestRewriter? = { c in
            try? HTTPRequestRewriter(name: "X-Who", value: c.peerCertificate?.commonName ?? "?")
        }
        let (reply, r) = try forwardedExchange(answerPrefix: "got:", rewriter: rewriter) { c in
            try c.write(Array("GET / HTTP/1.1\r\nX-Who: forged\r\n\r\n".utf8))
            try c.shutdown()
        }
        let cn = try identity("client-a").leaf.commonName ?? ""
        XCTAssertEqual(reply, "got:GET / HTTP/1.1\r\nX-Who: \(cn)\r\n\r\n")
        XCTAssertNil(r.error)

        let (refusal, refused) = try forwardedExchange(answerPrefix: "got:", rewriter: rewriter) { c in
            try c.write(Array("\u{16}\u{03}\u{01}hello".utf8))
        }
        XCTAssertTrue(refusal.hasPrefix("HTTP/1.1 400 "), refusal)
        XCTAssertEqual(refused.error?.code, .parse)
        XCTAssertEqual(refused.bytesFromTLS, 0)
    }
}
