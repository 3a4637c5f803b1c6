import Foundation
import XCTest
import COpenSSL
@testable import MTLS
@testable import MTLSTLS
@testable import MTLSTrust

/// What a TLS session is bound to (``ResumptionBinding``) and how a kept session is admitted
/// again (``ResumptionRecord``): the end-to-end proofs through every place sessions live are in
/// Tests/c/test_resumption.c.
extension TLSConnectionTests {
    func testResumptionBindingDigestChangesWithEveryField() throws {
        let policy = try self.policy(["root"])
        let peer = TrustPeer(host: "127.0.0.1", port: 8443, sni: "server.test", verifyAs: "server.test")
        let base = ResumptionBinding(policy: policy, peer: peer, identities: [[1, 2, 3]], context: "c")
        XCTAssertEqual(base.digest.count, 32, "fits a session id context")
        XCTAssertEqual(base.digest, ResumptionBinding(policy: policy, peer: peer, identities: [[1, 2, 3]], context: "c").digest)
        var others: [ResumptionBinding] = []
        others.append(ResumptionBinding(policy: try self.policy(["root"]), peer: peer, identities: [[1, 2, 3]], context: "c"))
        for change in [{ (p: inout TrustPeer) in p.host = "127.0.0.2" }, { $0.port = 8444 }, { $0.sni = nil }, { $0.verifyAs = "other.test" }] {
            var p = peer
            change(&p)
            others.append(ResumptionBinding(policy: policy, peer: p, identities: [[1, 2, 3]], context: "c"))
        }
        others.append(ResumptionBinding(policy: policy, peer: peer, identities: [], context: "c"))
        others.append(ResumptionBinding(policy: policy, peer: peer, identities: [[1, 2, 3]], context: "d"))
        policy.anchorsOnly = true // a new version
        others.append(ResumptionBinding(policy: policy, peer: peer, identities: [[1, 2, 3]], context: "c"))
        for other in others {
            XCTAssertNotEqual(other, base)
            XCTAssertNotEqual(other.digest, base.digest)
        }
    }

    /// The client session cache finds the entry it holds for a key, by its last-used entry or
    /// by its table, and never one it replaced or dropped (issue 40's fast path for the key last
    /// stored or found).
    func testTheSessionCacheFindsWhatItHoldsAndNothingItDropped() throws {
        let chain = [try cert("server"), try cert("int-a")]
        let policy = try self.policy(["root"])
        let peer = TrustPeer(host: "127.0.0.1", port: 8443, verifyAs: "server.test")
        let bound = ResumptionBinding(policy: policy, peer: peer, identities: [])
        let record = ResumptionRecord(binding: bound, presentedChain: chain, evaluation: policy.evaluate(chain: chain, peer: peer, purpose: .serverAuth))
        let cache = SessionCache()
        let k1 = SessionKey(host: "127.0.0.1", port: 8443, sni: nil, verifyAs: "server.test", overrides: nil)
        let k2 = SessionKey(host: "127.0.0.1", port: 9443, sni: nil, verifyAs: "server.test", overrides: nil)
        func newSession() throws -> OpaquePointer { try XCTUnwrap(SSL_SESSION_new()) }
        // The session found for `key` (its reference given back), nil for none.
        func found(_ key: SessionKey, under binding: ResumptionBinding? = nil) -> OpaquePointer? {
            guard let (s, _) = cache.lookup(key, binding: binding ?? bound, policy: policy, peer: peer) else { return nil }
            SSL_SESSION_free(s)
            return s
        }
        let s1 = try newSession(), s2 = try newSession()
        cache.store(k1, s1, record)
        XCTAssertEqual(found(k1), s1)
        XCTAssertEqual(found(k1), s1)  // again: the last entry
        cache.store(k2, s2, record)
        XCTAssertEqual(found(k1), s1)  // from the table, now the last
        XCTAssertEqual(found(k2), s2)
        XCTAssertEqual(found(k1), s1)
        cache.remove(k1)  // the last entry's key
        XCTAssertNil(found(k1))
        XCTAssertEqual(found(k2), s2)
        let s3 = try newSession(), s4 = try newSession()
        cache.store(k1, s3, record)
        XCTAssertEqual(found(k1), s3)
        XCTAssertEqual(found(k2), s2)  // k2 last: k1 is replaced behind it
        cache.store(k1, s4, record)
        XCTAssertEqual(found(k1), s4)
        // Not admitted under another binding: dropped, by the table and by the last entry.
        var elsewhere = peer
        elsewhere.port = 9443
        XCTAssertNil(found(k1, under: ResumptionBinding(policy: policy, peer: elsewhere, identities: [])))
        XCTAssertNil(found(k1))
        XCTAssertEqual(found(k2), s2)
        // A full table is emptied before the next entry (1,024 entries).
        for port in 10_000..<11_024 {
            cache.store(SessionKey(host: "127.0.0.1", port: UInt16(port), sni: nil, verifyAs: "server.test", overrides: nil),
                        try newSession(), record)
        }
        XCTAssertNil(found(k2))
        XCTAssertNotNil(found(SessionKey(host: "127.0.0.1", port: 11_023, sni: nil, verifyAs: "server.test", overrides: nil)))
    }

    func testResumptionRecordIsAdmittedOnlyUnderItsBindingWhileItsChainIsTrusted() throws {
        let chain = [try cert("server"), try cert("int-a")]
        let policy = try self.policy(["root"])
        let peer = TrustPeer(host: "127.0.0.1", port: 8443, verifyAs: "server.test")
        let bound = ResumptionBinding(policy: policy, peer: peer, identities: [])
        let made = policy.evaluate(chain: chain, peer: peer, purpose: .serverAuth)
        XCTAssertTrue(made.trusted, "\(made.reasons)")
        let record = ResumptionRecord(binding: bound, presentedChain: chain, evaluation: made)
        XCTAssertEqual(record.admit(under: bound, policy: policy, peer: peer, purpose: .serverAuth)?.evaluation?.trusted, true)
        // Another peer, or the same policy changed: no resumption.
        var elsewhere = peer
        elsewhere.port = 9443
        XCTAssertNil(record.admit(under: ResumptionBinding(policy: policy, peer: elsewhere, identities: []), policy: policy,
                                  peer: elsewhere, purpose: .serverAuth))
        // The clock: at a time past the server certificate's validity (the policy's fixed time,
        // set on a copy so that the binding alone does not decide) the chain is re-evaluated and
        // the session refused.
        let later = policy.copy()
        later.time = chain[0].notAfter.addingTimeInterval(60)
        let laterBinding = ResumptionBinding(policy: later, peer: peer, identities: [])
        let moved = ResumptionRecord(binding: laterBinding, presentedChain: chain, evaluation: made)
        XCTAssertNil(moved.admit(under: laterBinding, policy: later, peer: peer, purpose: .serverAuth))
        // A fail_closed rule whose pins expired refuses it too, though the pin matches.
        let pinned = policy.copy()
        try pinned.updateHostRule("127.0.0.1:8443") { rule in
            rule.pins = [SPKIPin(certificate: chain[1]), try SPKIPin("sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")]
            rule.pinsExpire = Date().addingTimeInterval(-1)
            rule.afterExpiry = .failClosed
        }
        let pinnedBinding = ResumptionBinding(policy: pinned, peer: peer, identities: [])
        let expired = ResumptionRecord(binding: pinnedBinding, presentedChain: chain, evaluation: made)
        XCTAssertNil(expired.admit(under: pinnedBinding, policy: pinned, peer: peer, purpose: .serverAuth))
    }

    /// The re-check before a resumption is comparisons: inside the window of the evaluation kept
    /// with the session (no certificate involved expires or starts, no pin expiry falls in it),
    /// under the same binding, the kept evaluation is the answer; outside it the presented chain
    /// is evaluated again. A policy with a fixed time does not move with the clock.
    func testAKeptEvaluationStandsInsideItsWindowAndIsMadeAgainOutside() throws {
        let chain = [try cert("server"), try cert("int-a")]
        let policy = try self.policy(["root"])
        let peer = TrustPeer(host: "127.0.0.1", port: 8443, verifyAs: "server.test")
        let bound = ResumptionBinding(policy: policy, peer: peer, identities: [])
        let (made, standing) = policy.verifyPeer(chain: chain, peer: peer, purpose: .serverAuth, overrides: nil)
        XCTAssertTrue(made.trusted, "\(made.reasons)")
        let window = try XCTUnwrap(standing)
        XCTAssertFalse(window.fixedTime)
        XCTAssertTrue(window.holds(at: Date()))
        XCTAssertFalse(window.holds(at: chain.map(\.notAfter).min()!.addingTimeInterval(1)), "ends when a certificate expires")
        XCTAssertFalse(window.holds(at: chain.map(\.notBefore).max()!.addingTimeInterval(-1)), "starts when they all are valid")
        // A chain that the policy refuses (a client certificate where a server's is expected),
        // kept with the evaluation above: inside the window the kept evaluation answers, with no
        // new evaluation; with a window that is over, the chain is evaluated again and refused.
        let refused = [try cert("client-a"), try cert("int-a")]
        XCTAssertFalse(policy.evaluate(chain: refused, peer: peer, purpose: .serverAuth).trusted)
        let inside = ResumptionRecord(binding: bound, presentedChain: refused, evaluation: made, standing: window)
        let admitted = try XCTUnwrap(inside.admit(under: bound, policy: policy, peer: peer, purpose: .serverAuth))
        XCTAssertTrue(admitted.record === inside)
        XCTAssertEqual(admitted.evaluation?.trusted, true)
        let over = EvaluationStanding(window: Date.distantPast...Date().addingTimeInterval(-10), fixedTime: false)
        let outside = ResumptionRecord(binding: bound, presentedChain: refused, evaluation: made, standing: over)
        XCTAssertNil(outside.admit(under: bound, policy: policy, peer: peer, purpose: .serverAuth))
        // Outside its window a chain still trusted is admitted with a fresh evaluation and window,
        // carried by a new record (for the tickets of the resumed connection).
        let renewed = ResumptionRecord(binding: bound, presentedChain: chain, evaluation: made, standing: over, withDigest: true)
        let again = try XCTUnwrap(renewed.admit(under: bound, policy: policy, peer: peer, purpose: .serverAuth))
        XCTAssertFalse(again.record === renewed)
        XCTAssertEqual(again.record.digest, bound.digest)
        XCTAssertEqual(again.record.standing?.holds(at: Date()), true)
        // Another binding is refused before any window is looked at.
        policy.anchorsOnly = true
        XCTAssertNil(inside.admit(under: ResumptionBinding(policy: policy, peer: peer, identities: []), policy: policy,
                                  peer: peer, purpose: .serverAuth))
        // A fixed time: the answer holds whatever the clock says.
        let fixed = try self.policy(["root"])
        fixed.time = Date()
        let (_, fixedStanding) = fixed.verifyPeer(chain: chain, peer: peer, purpose: .serverAuth, overrides: nil)
        XCTAssertEqual(fixedStanding?.holds(at: Date.distantFuture), true)
    }
}
