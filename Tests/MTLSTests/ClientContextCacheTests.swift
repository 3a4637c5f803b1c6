import XCTest
@testable import MTLS

/// The shared client contexts (`TLSContext.sharedClient`): mtls.h promises that the contexts of
/// the 16 most recent combinations are kept, so the 17th evicts only the least recently used one.
extension TLSConnectionTests {
    func testSharedClientContextsEvictTheLeastRecentlyUsedCombinationOnly() throws {
        TLSContext.clearSharedClients()
        defer { TLSContext.clearSharedClients() }
        let limit = TLSContext.maxSharedContexts
        // One combination per policy object; all hold the same anchors.
        let options = try (0...limit).map { _ in try clientOptions(identity: nil) }
        var first: [TLSContext] = []
        for o in options.prefix(limit) { first.append(try TLSContext.sharedClient(o)) }
        // Combination 0 is used again: it is now the most recent, and 1 the least recent.
        XCTAssertTrue(try TLSContext.sharedClient(options[0]) === first[0], "a cached context is shared")
        _ = try TLSContext.sharedClient(options[limit])  // one over the limit
        XCTAssertTrue(TLSContext.hasSharedClient(options[0]), "the most recently used combination stays")
        XCTAssertFalse(TLSContext.hasSharedClient(options[1]), "the least recently used combination goes")
        for i in 2...limit {
            XCTAssertTrue(TLSContext.hasSharedClient(options[i]), "combination \(i) stays")
        }
        XCTAssertTrue(try TLSContext.sharedClient(options[0]) === first[0], "its sessions with it")
    }

    func testTheLatestSharedClientContextIsFoundAgainAndForgottenWithTheCache() throws {
        TLSContext.clearSharedClients()
        defer { TLSContext.clearSharedClients() }
        var a = try clientOptions(identity: nil)
        let first = try TLSContext.sharedClient(a)
        XCTAssertTrue(try TLSContext.sharedClient(a) === first, "the same settings again: the same context")
        let versions = (a.minVersion, a.maxVersion)
        a.minVersion = .tls12
        a.maxVersion = .tls12
        let other = try TLSContext.sharedClient(a)
        XCTAssertFalse(other === first, "other versions: another context, though the policy is the same")
        (a.minVersion, a.maxVersion) = versions
        XCTAssertTrue(try TLSContext.sharedClient(a) === first, "back to the first settings: the first context")
        TLSContext.clearSharedClients()
        XCTAssertFalse(TLSContext.hasSharedClient(a))
        XCTAssertFalse(try TLSContext.sharedClient(a) === first, "a cleared cache makes a new context")
    }
}
