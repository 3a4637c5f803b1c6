import Foundation
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import MTLS
@testable import MTLSTLS
@testable import MTLSX509

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
    /// overrides; the resumption binding kept apart, let go after the handshake): 840 bytes on
    /// fc4235c, 344 now.
    func testAServerConnectionsHandshakeStateCarriesNoClientSideFields() throws {
        let s = TLSHandshakeState()
        XCTAssertLessThanOrEqual(try heapBytes(of: s), 420)

        // The client side's fields read nil/false until written, and back what was written.
        XCTAssertNil(s.sessionKey)
        XCTAssertNil(s.overrides)
        XCTAssertNil(s.resumedEvaluation)
        XCTAssertFalse(s.revocationAwaitingStaple)
        s.sessionKey = "k"
        s.unmatchedSchemes = "ecdsa_secp256r1_sha256"
        s.unmatchedCANames = ["CN=a"]
        s.revocationAwaitingStaple = true
        XCTAssertEqual(s.sessionKey, "k")
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
