import Foundation
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS
@testable import MTLSTLS
@testable import MTLSX509
@testable import MTLSTrust

/// Issue 40: what an idle accepted connection keeps on the heap, counted (not timed): the
/// allocation sizes glibc reports (`malloc_usable_size`), independent of the machine's load.
/// RSS per 1,000 idle connections against nginx: Tests/e2e/test_listener_idle_memory.py.
final class IdleConnectionMemoryTests: XCTestCase {
    /// glibc's `malloc_usable_size` (in <malloc.h>, which the Glibc module does not import).
    private static let usableSize: (@convention(c) (UnsafeMutableRawPointer?) -> Int)? = {
        guard let f = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_usable_size") else { return nil }
        return unsafeBitCast(f, to: (@convention(c) (UnsafeMutableRawPointer?) -> Int).self)
    }()

    /// The bytes malloc gave the Swift object `o` (Swift allocates objects with malloc).
    private func heapBytes(of o: AnyObject) throws -> Int {
        let size = try XCTUnwrap(Self.usableSize, "glibc's malloc_usable_size")
        return size(Unmanaged.passUnretained(o).toOpaque())
    }

    /// An accepted connection's handshake state carries none of what only a client connection
    /// records (selection failures, its session cache and key, the resumed evaluation,
    /// overrides; the resumption binding kept apart, let go after the handshake), and its
    /// evaluation by reference (shared with its session's record): 840 bytes on fc4235c, 344 on
    /// 29a644d (the evaluation's 160 bytes inline), 200 now.
    func testAServerConnectionsHandshakeStateCarriesNoClientSideFields() throws {
        let s = TLSHandshakeState()
        XCTAssertLessThanOrEqual(try heapBytes(of: s), 232)

        // The client side's fields read nil/false until written, and back what was written.
        XCTAssertNil(s.sessionKey)
        XCTAssertNil(s.overrides)
        XCTAssertNil(s.resumedEvaluation)
        XCTAssertFalse(s.revocationAwaitingStaple)
        let key = SessionKey(host: "server.test", port: 443, sni: "server.test", verifyAs: nil, overrides: nil)
        s.sessionKey = key
        s.unmatchedSchemes = "ecdsa_secp256r1_sha256"
        s.unmatchedCANames = ["CN=a"]
        s.revocationAwaitingStaple = true
        XCTAssertEqual(s.sessionKey, key)
        XCTAssertEqual(s.unmatchedSchemes, "ecdsa_secp256r1_sha256")
        XCTAssertEqual(s.unmatchedCANames, ["CN=a"])
        XCTAssertTrue(s.revocationAwaitingStaple)
        s.sessionKey = nil
        s.revocationAwaitingStaple = false
        XCTAssertNil(s.sessionKey)
        XCTAssertFalse(s.revocationAwaitingStaple)
    }

    /// A certificate's DER is kept once (``Certificate/der``); the C ABI's stable copy
    /// (`derPointer`, for `mtls_cert_der`) is made when first asked for: the same bytes, and the
    /// same pointer every time, from any thread.
    func testTheCABIsDERPointerIsMadeOnceWithTheSameBytes() throws {
        let dir = try TestPKI.tempDir()
        _ = try TestPKI.sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(dir)/k.pem -out \(dir)/c.pem -subj '/CN=idle.example' -days 3")
        let cert = try XCTUnwrap(Certificate.load(path: "\(dir)/c.pem").first)
        let wrapped = try Certificate(borrowing: cert.x509)
        let pointers = Locked<Set<UInt>>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let p = UInt(bitPattern: wrapped.derPointer)
            pointers.withLock { _ = $0.insert(p) }
        }
        XCTAssertEqual(pointers.withLock { $0.count }, 1)
        XCTAssertEqual(Array(UnsafeBufferPointer(start: wrapped.derPointer, count: cert.der.count)), cert.der)
    }
}


/// Issue 40, continued: what an idle accepted connection keeps beyond OpenSSL's own objects after
/// 29a644d — its peer chain's wrappers, its evaluation and its session's record — counted as
/// above (malloc_usable_size, layouts), not timed.
final class IdleConnectionSharingTests: XCTestCase {
    private func heapBytes(of o: AnyObject) throws -> Int {
        let f = try XCTUnwrap(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_usable_size"), "glibc's malloc_usable_size")
        let size = unsafeBitCast(f, to: (@convention(c) (UnsafeMutableRawPointer?) -> Int).self)
        return size(Unmanaged.passUnretained(o).toOpaque())
    }

    private func chain() throws -> [Certificate] {
        let dir = try TestPKI.tempDir()
        _ = try TestPKI.sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(dir)/ca.key -out \(dir)/ca.pem -subj '/CN=sharing CA' -days 3 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign")
        _ = try TestPKI.sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(dir)/leaf.key -out \(dir)/leaf.csr -subj '/CN=client.example'")
        _ = try TestPKI.sh("openssl x509 -req -in \(dir)/leaf.csr -CA \(dir)/ca.pem -CAkey \(dir)/ca.key -CAcreateserial -days 2 -out \(dir)/leaf.pem")
        return [try XCTUnwrap(Certificate.load(path: "\(dir)/leaf.pem").first), try XCTUnwrap(Certificate.load(path: "\(dir)/ca.pem").first)]
    }

    /// A peer certificate wrapped for a connection keeps no DER of its own (29a644d kept each
    /// one's DER, about 0.5 KiB, for the connection's life): the same DER when asked, the same
    /// equality and hash as a parsed copy, and the C ABI's copy made once when asked.
    func testAPeerCertificateSharesOpenSSLsCopy() throws {
        let parsed = try chain()
        let shared = try parsed.map { try Certificate(sharing: $0.x509) }
        for (p, s) in zip(parsed, shared) {
            XCTAssertLessThanOrEqual(try heapBytes(of: s), 56)
            XCTAssertEqual(s.der, p.der)
            XCTAssertEqual(s, p)
            XCTAssertEqual(s.hashValue, p.hashValue)
            XCTAssertEqual(Set([s, p]).count, 1)
            XCTAssertEqual(s.sha256, p.sha256)
            let copy = s.derBuffer
            XCTAssertEqual(Array(copy), p.der)
            XCTAssertEqual(s.derPointer, copy.baseAddress)
            XCTAssertEqual(s.derBuffer.baseAddress, copy.baseAddress)
        }
        XCTAssertNotEqual(shared[0], shared[1])
        XCTAssertNotEqual(shared[0], parsed[1])
        // A second wrapper of the same X509 and one of another parse of the same bytes: equal.
        XCTAssertEqual(try Certificate(sharing: parsed[0].x509), shared[0])
        XCTAssertEqual(try Certificate(der: parsed[0].der), shared[0])
    }

    /// A trust result is 32 bytes inline (its rarely read fields kept apart, shared by its
    /// copies; 160 on 29a644d), and reads back every field it was made with.
    func testATrustResultIsSmallInlineAndKeepsEveryField() throws {
        XCTAssertLessThanOrEqual(MemoryLayout<TrustResult>.size, 40)
        let reasons = [TrustReason(code: "expired", certIndex: 0, message: "m")]
        let reported = [TrustReason(code: "pin_mismatch", certIndex: nil, message: "r")]
        let r = TrustResult(trusted: false, kind: .recoverableFailure, reasons: reasons, chain: try chain(),
                            matchedRule: "*.example", matchedPin: "sha256/AAAA", reportedReasons: reported, warnings: ["w"])
        XCTAssertFalse(r.trusted)
        XCTAssertEqual(r.kind, .recoverableFailure)
        XCTAssertEqual(r.reasonCodes, ["expired"])
        XCTAssertEqual(r.chain.count, 2)
        XCTAssertEqual(r.matchedRule, "*.example")
        XCTAssertEqual(r.matchedPin, "sha256/AAAA")
        XCTAssertEqual(r.reportedReasons.map(\.code), ["pin_mismatch"])
        XCTAssertNil(r.provenance)
        XCTAssertNil(r.revocation)
        XCTAssertEqual(r.warnings, ["w"])
    }

    /// The record a server keeps per ticket issued (until 4,096 are kept): its binding's overrides
    /// apart, its evaluation shared with the connection, its digest inline — 376 bytes on
    /// 29a644d, about 210 now — and the same digest and admission as before.
    func testAServersTicketRecordIsSmallAndSharesTheConnectionsEvaluation() throws {
        let policy = TrustPolicy()
        let binding = ResumptionBinding(policy: policy, peer: TrustPeer(host: "127.0.0.1", port: 40000), identities: [[1, 2, 3]])
        let evaluated = SharedEvaluation(TrustResult(trusted: true, kind: .proceed, reasons: [], chain: [], matchedRule: nil, matchedPin: nil))
        let record = ResumptionRecord(binding: binding, presentedChain: [], evaluated: evaluated, withDigest: true)
        XCTAssertLessThanOrEqual(try heapBytes(of: record), 232)
        XCTAssertTrue(record.evaluated === evaluated)
        XCTAssertEqual(record.digest, binding.digest)
        XCTAssertTrue(record.hasDigest)
        XCTAssertNil(ResumptionRecord(binding: binding, presentedChain: [], evaluated: evaluated).digest)
        // Overrides kept apart still separate bindings, by value.
        let pinned = TrustOverrides(verifyAs: "a.example")
        let a = ResumptionBinding(policy: policy, peer: TrustPeer(host: "127.0.0.1"), identities: [], overrides: pinned)
        let b = ResumptionBinding(policy: policy, peer: TrustPeer(host: "127.0.0.1"), identities: [], overrides: TrustOverrides(verifyAs: "a.example"))
        let c = ResumptionBinding(policy: policy, peer: TrustPeer(host: "127.0.0.1"), identities: [], overrides: TrustOverrides(verifyAs: "b.example"))
        XCTAssertEqual(a, b)
        XCTAssertEqual(a.hashValue, b.hashValue)
        XCTAssertNotEqual(a, c)
        XCTAssertEqual(a.overrides?.verifyAs, "a.example")
    }
}
