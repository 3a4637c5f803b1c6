import XCTest
import MTLS
@testable import MTLSEnrollment
import Foundation

/// `import MTLS` is the whole API after the split into layer targets (issue 36): types are found
/// through the umbrella's re-exports, also when qualified with the module name as the
/// swift-nio-ssl plugin writes them (`MTLS.PrivateKey`).
final class UmbrellaTests: XCTestCase {
    func testQualifiedNamesResolveThroughTheUmbrella() throws {
        let key: MTLS.PrivateKey = try MTLS.PrivateKey.generate(.ecP256)
        if case MTLS.KeyType.ec = key.keyType {} else { XCTFail("\(key.keyType)") }
        let policy = MTLS.TrustPolicy(anchors: [], anchorsOnly: true)
        let result: MTLS.TrustResult = policy.evaluate(chain: [], host: "example.test")
        XCTAssertFalse(result.trusted)
        XCTAssertEqual(result.reasons.first?.code, MTLS.TrustReason.Code.emptyChain)
        let _: MTLS.MTLSError.Code = .parse
    }
}

/// The library's threads come from one starter and are named by their job (issue 36): the
/// ACME http-01 responder's thread was named `mtls-listener`, as every joinable thread was.
final class ThreadNameTests: XCTestCase {
    private func threadNames() -> [String] {
        let dir = "/proc/self/task"
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return [] }
        return tasks.compactMap { try? String(contentsOfFile: "\(dir)/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    func testTheHTTP01ResponderThreadIsNamedForItsJob() throws {
        let responder = try ChallengeResponder.start(.http01(address: "127.0.0.1", port: 0), identifier: "example.test",
                                                     token: "t", keyAuthorization: "t.k")
        defer { responder.stop() }
        // The thread names itself as it starts: wait for it, never a fixed sleep.
        let deadline = Date().addingTimeInterval(10)
        while !threadNames().contains("mtls-http-01") && Date() < deadline { usleep(1000) }
        XCTAssertTrue(threadNames().contains("mtls-http-01"), "\(threadNames())")
        XCTAssertFalse(threadNames().contains("mtls-listener"), "\(threadNames())")
    }
}
