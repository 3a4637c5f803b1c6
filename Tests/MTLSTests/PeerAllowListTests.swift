import Foundation
import XCTest
@testable import MTLS
@testable import MTLSTrust

/// Who may connect (issue 39): the allow-list patterns, and the allow-lists inside the one trust
/// decision, on the leaves of `scripts/test-pki.sh --allow`.
final class PeerAllowListTests: XCTestCase {
    static let dir: String = {
        let dir = try! TestPKI.tempDir()
        try! TestPKI.make("--allow", dir)
        return dir
    }()

    func cert(_ name: String) throws -> Certificate { try Certificate.load(path: "\(Self.dir)/\(name).pem")[0] }
    func chain(_ name: String) throws -> [Certificate] { try Certificate.load(path: "\(Self.dir)/\(name)-chain.pem") }

    // MARK: patterns

    /// An offer with only the given names.
    func offer(cn: String? = nil, ous: [String] = [], dns: [String] = [], uris: [String] = []) -> PeerAllowList.Offer {
        PeerAllowList.Offer(cn: cn, ous: ous, dns: dns, uris: uris, spki: [], cas: [], caNames: [])
    }

    func allows(_ kind: PeerAllowList.Kind, _ pattern: String, _ o: PeerAllowList.Offer,
                file: StaticString = #filePath, line: UInt = #line) -> Bool {
        do {
            let l = try PeerAllowList([(kind, pattern)])
            return PeerAllowList.matches(l.entries[0], o)
        } catch {
            XCTFail("\(pattern): \(error)", file: file, line: line)
            return false
        }
    }

    func testURIStarIsOneWholeSegmentAndNeverCrossesASlash() {
        let p = "spiffe://example.org/ns/*/sa/alice"
        XCTAssertTrue(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/prod/sa/alice"])))
        XCTAssertFalse(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/a/b/sa/alice"])))
        XCTAssertFalse(allows(.uri, p, offer(uris: ["spiffe://example.org/ns//sa/alice"])), "* matches no empty segment")
        XCTAssertFalse(allows(.uri, "spiffe://example.org/*", offer(uris: ["spiffe://example.org"])))
        XCTAssertFalse(allows(.uri, "spiffe://example.org/*", offer(uris: ["spiffe://example.org/"])))
    }

    func testURIDoubleStarMatchesZeroOrMoreSegments() {
        let p = "spiffe://example.org/ns/*/sa/**"
        XCTAssertTrue(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/prod/sa"])), "** matches zero segments")
        XCTAssertTrue(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/prod/sa/x"])))
        XCTAssertTrue(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/prod/sa/x/y/z"])))
        XCTAssertTrue(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/prod/sa//x"])), "** takes empty segments too")
        XCTAssertFalse(allows(.uri, p, offer(uris: ["spiffe://example.org/ns/prod/other/x"])))
        XCTAssertTrue(allows(.uri, "spiffe://example.org/**/end", offer(uris: ["spiffe://example.org/end"])))
        XCTAssertTrue(allows(.uri, "spiffe://example.org/**/end", offer(uris: ["spiffe://example.org/a/b/end"])))
        XCTAssertFalse(allows(.uri, "spiffe://example.org/**/end", offer(uris: ["spiffe://example.org/a/b/end/x"])))
    }

    func testURICaseAndPercentEncoding() {
        // Scheme and authority case-insensitive, path case-sensitive; %2F is not a slash.
        XCTAssertTrue(allows(.uri, "spiffe://Example.ORG/ns/prod", offer(uris: ["SPIFFE://example.org/ns/prod"])))
        XCTAssertFalse(allows(.uri, "spiffe://example.org/ns/prod", offer(uris: ["spiffe://example.org/NS/prod"])))
        XCTAssertTrue(allows(.uri, "spiffe://example.org/a%2Fb", offer(uris: ["spiffe://example.org/a%2Fb"])))
        XCTAssertFalse(allows(.uri, "spiffe://example.org/a%2Fb", offer(uris: ["spiffe://example.org/a/b"])))
        XCTAssertFalse(allows(.uri, "spiffe://example.org/a%2Fb", offer(uris: ["spiffe://example.org/a%2fb"])))
        XCTAssertTrue(allows(.uri, "spiffe://example.org/*", offer(uris: ["spiffe://example.org/a%2Fb"])))
        // Another trust domain, a longer authority, a query: no match.
        XCTAssertFalse(allows(.uri, "spiffe://example.org/**", offer(uris: ["spiffe://example.org.evil/x"])))
        XCTAssertFalse(allows(.uri, "spiffe://example.org/**", offer(uris: ["spiffe://example.org/x?y=1"])))
    }

    func testDNSLabels() {
        XCTAssertTrue(allows(.dns, "*.svc.example", offer(dns: ["Alice.SVC.example"])))
        XCTAssertFalse(allows(.dns, "*.svc.example", offer(dns: ["a.b.svc.example"])), "* never crosses a dot")
        XCTAssertFalse(allows(.dns, "*.svc.example", offer(dns: ["svc.example"])))
        XCTAssertTrue(allows(.dns, "**.svc.example", offer(dns: ["svc.example"])), "** matches zero labels")
        XCTAssertTrue(allows(.dns, "**.svc.example", offer(dns: ["a.b.svc.example"])))
        XCTAssertFalse(allows(.dns, "**.svc.example", offer(dns: ["svc.example.evil"])))
        XCTAssertTrue(allows(.dns, "alice.svc.example.", offer(dns: ["alice.svc.example"])))
    }

    func testCNAndOUAreExact() {
        XCTAssertTrue(allows(.cn, "alice", offer(cn: "alice")))
        XCTAssertFalse(allows(.cn, "alice", offer(cn: "Alice")))
        XCTAssertFalse(allows(.cn, "alice", offer(cn: "alice ")))
        XCTAssertFalse(allows(.cn, "alice", offer()))
        XCTAssertTrue(allows(.cn, "*.team", offer(cn: "alice.team")))
        XCTAssertFalse(allows(.cn, "*.team", offer(cn: "a.b.team")))
        XCTAssertTrue(allows(.ou, "eng", offer(ous: ["ops", "eng"])))
        XCTAssertFalse(allows(.ou, "eng", offer(ous: ["ENG"])))
    }

    func testMalformedPatternsAreRefusedAtLoadWithInvalidPolicy() {
        let bad: [(PeerAllowList.Kind, String, String)] = [
            (.cn, "", "empty"),
            (.dns, "a*.example", "whole segment"),
            (.dns, "bad_label!.example", "not allowed here"),
            (.uri, "spiffe://*.example.org/x", "trust domain"),
            (.uri, "spiffe://**/x", "trust domain"),
            (.uri, "spiffe://example.org/ns/a*", "whole segment"),
            (.uri, "spiffe:/example.org", "scheme://authority"),
            (.uri, "spiffe://", "no authority"),
            (.uri, "sp*ffe://example.org", "scheme"),
            (.uri, "spiffe://example.org/x?y", "query"),
            (.spki, "sha256/short", "pin"),
            (.issuer, "abcd", "fingerprint"),
            (.cn, "a\nb", "control"),
        ]
        for (kind, pattern, says) in bad {
            var l = PeerAllowList()
            XCTAssertThrowsError(try l.add(kind, pattern), "\(kind) \(pattern)") { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidPolicy)
                XCTAssertTrue((e as? MTLSError)?.message.contains(says) == true, "\((e as? MTLSError)?.message ?? "")")
                XCTAssertTrue((e as? MTLSError)?.message.contains("allow \(kind.rawValue)") == true)
            }
        }
    }

    func testLongPathsDoNotBacktrack() {
        // Many ** against a long path: answered without exponential backtracking.
        let p = "spiffe://example.org/" + Array(repeating: "**/a", count: 12).joined(separator: "/") + "/b"
        let uri = "spiffe://example.org/" + Array(repeating: "a", count: 2000).joined(separator: "/")
        XCTAssertFalse(allows(.uri, p, offer(uris: [uri])))
    }

    // MARK: in the trust decision

    /// A client policy trusting both roots, no name check, at a fixed time inside the validity.
    func clientPolicy() throws -> TrustPolicy {
        let p = TrustPolicy(anchors: [try cert("root"), try cert("root-2")], anchorsOnly: true, purpose: .clientAuth, nameCheck: .none)
        p.time = Date().addingTimeInterval(3600)
        return p
    }

    func evaluate(_ p: TrustPolicy, _ who: String, overrides: TrustOverrides? = nil, host: String? = nil) throws -> TrustResult {
        p.evaluate(chain: try chain(who), host: host, overrides: overrides)
    }

    func assertNotAllowed(_ r: TrustResult, saying: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(r.trusted, file: file, line: line)
        XCTAssertEqual(r.kind, .fatalFailure, file: file, line: line)
        XCTAssertEqual(r.reasonCodes, [TrustReason.Code.notAllowed], "\(r.reasons)", file: file, line: line)
        let m = r.reasons.first?.message ?? ""
        for s in saying { XCTAssertTrue(m.contains(s), "\(s) not in: \(m)", file: file, line: line) }
    }

    func testEachKindAcceptsOneClientAndRefusesAnotherNamingTheRule() throws {
        let alice = try cert("alice")
        let cases: [(PeerAllowList.Kind, String, [String])] = [
            (.cn, "alice", ["CN \"bob\" matches no --allow-cn"]),
            (.ou, "eng", ["OU [\"ops\"] match no --allow-ou"]),
            (.dns, "*.svc.example", ["DNS SANs [bob.other.example] match no --allow-dns"]),
            (.uri, "spiffe://example.org/ns/*/sa/**", ["URI SANs [spiffe://other.org/ns/prod/sa/bob] match no --allow-uri"]),
            (.spki, alice.spkiPin, ["matches no --allow-spki"]),
            (.issuer, try cert("root").sha256Hex, ["anchor \"Second Allow Root\" (sha256 ", "matches no --allow-issuer"]),
        ]
        for (kind, pattern, message) in cases {
            let p = try clientPolicy()
            try p.addAllow(kind, pattern)
            let ok = try evaluate(p, "alice")
            XCTAssertTrue(ok.trusted, "\(kind): \(ok.reasons)")
            let who = kind == .issuer ? "carol" : "bob"
            assertNotAllowed(try evaluate(p, who), saying: ["the client certificate is not allowed by the policy's allow-list"] + message)
        }
    }

    func testIssuerAllowsOnlyChainsEndingAtThatAnchor() throws {
        let p = try clientPolicy()
        p.addAllow(issuer: try cert("root-2"))
        XCTAssertTrue(try evaluate(p, "carol").trusted)
        assertNotAllowed(try evaluate(p, "alice"), saying: ["anchor \"Allow Root\""])
    }

    func testIssuerMatchesAnIntermediateOfTheBuiltChainToo() throws {
        // TrustTests's PKI: root -> inter -> client (client-chain.pem = client + inter).
        let dir = TrustTests.dir
        let root = try Certificate.load(path: "\(dir)/root.pem")[0], inter = try Certificate.load(path: "\(dir)/inter.pem")[0]
        let chain = try Certificate.load(path: "\(dir)/client-chain.pem")
        let p = TrustPolicy(anchors: [root], anchorsOnly: true, purpose: .clientAuth, nameCheck: .none, time: TrustTests.now)
        p.addAllow(issuer: inter)
        XCTAssertTrue(p.evaluate(chain: chain, host: nil).trusted)
        let q = TrustPolicy(anchors: [root], anchorsOnly: true, purpose: .clientAuth, nameCheck: .none, time: TrustTests.now)
        q.addAllow(issuer: try cert("root"))
        assertNotAllowed(q.evaluate(chain: chain, host: nil),
                         saying: ["anchor \"\(root.subjectSummary)\"", "and intermediates [\"\(inter.subjectSummary)\"] match no --allow-issuer"])
    }

    func testEntriesOfDifferentKindsAreOred() throws {
        let p = try clientPolicy()
        try p.addAllow(.cn, "bob")
        try p.addAllow(.uri, "spiffe://example.org/ns/prod/sa/alice")
        XCTAssertTrue(try evaluate(p, "alice").trusted)
        XCTAssertTrue(try evaluate(p, "bob").trusted)
        assertNotAllowed(try evaluate(p, "carol"), saying: ["CN \"carol\" matches no --allow-cn", "URI SANs [spiffe://example.org/ns/dev/sa/carol/x] match no --allow-uri"])
    }

    func testAnUntrustedChainIsRefusedForItsChainNotTheList() throws {
        let p = TrustPolicy(anchors: [try cert("root")], anchorsOnly: true, purpose: .clientAuth, nameCheck: .none)
        try p.addAllow(.cn, "alice")
        let r = try evaluate(p, "carol")
        XCTAssertFalse(r.trusted)
        XCTAssertFalse(r.reasonCodes.contains(TrustReason.Code.notAllowed), "\(r.reasons)")
    }

    func testPolicyRuleAndOverrideListsAreEachRequired() throws {
        // Server side: the rule for server.test allows its URI; the policy-wide list names a CN.
        let p = TrustPolicy(anchors: [try cert("root")], anchorsOnly: true)
        p.time = Date().addingTimeInterval(3600)
        try p.updateHostRule("server.test") { r in try r.allow.add(.uri, "spiffe://example.org/ns/prod/sa/server") }
        XCTAssertTrue(try evaluate(p, "server", host: "server.test").trusted)
        try p.addAllow(.cn, "someone-else")
        assertNotAllowed(try evaluate(p, "server", host: "server.test"),
                         saying: ["the server certificate is not allowed by the policy's allow-list", "CN \"server.test\""])
        p.allow = PeerAllowList()
        var o = TrustOverrides()
        try o.allow.add(.dns, "other.example")
        assertNotAllowed(try evaluate(p, "server", overrides: o, host: "server.test"),
                         saying: ["allow-list given for this connection", "DNS SANs [server.test, localhost]"])
        try o.allow.add(.dns, "*.test")
        XCTAssertTrue(try evaluate(p, "server", overrides: o, host: "server.test").trusted)
        // The rule's list is checked for its peers only.
        try p.updateHostRule("other.test") { r in try r.allow.add(.cn, "nobody") }
        XCTAssertTrue(try evaluate(p, "server", host: "server.test").trusted)
    }

    func testPolicyFileAllowKeys() throws {
        let json = """
        {"anchors": ["\(Self.dir)/root.pem"], "purpose": "client", "name_check": "none",
         "allow": {"cn": ["nobody"], "uri": "spiffe://example.org/ns/*/sa/**", "issuer": ["\(Self.dir)/root-2.pem"]},
         "hosts": [{"host": "x.test", "allow": {"dns": ["*.svc.example"]}}]}
        """
        let p = try TrustPolicy(json: Array(json.utf8))
        XCTAssertEqual(p.allow.patterns(.uri), ["spiffe://example.org/ns/*/sa/**"])
        XCTAssertEqual(p.allow.patterns(.issuer), [try cert("root-2").sha256Hex])
        XCTAssertEqual(p.hostRules.first?.allow.patterns(.dns), ["*.svc.example"])
        p.time = Date().addingTimeInterval(3600)
        XCTAssertTrue(try evaluate(p, "alice").trusted)
        assertNotAllowed(try evaluate(p, "bob"), saying: ["CN \"bob\""])

        for (bad, says) in [("{\"allow\": {\"email\": [\"x\"]}}", "unknown key \"email\" in allow"),
                            ("{\"allow\": {\"uri\": [\"spiffe://*/x\"]}}", "allow.uri: allow uri pattern \"spiffe://*/x\""),
                            ("{\"allow\": {\"dns\": 3}}", "allow.dns must be a list of strings"),
                            ("{\"hosts\": [{\"host\": \"a\", \"allow\": {\"cn\": [\"\"]}}]}", "hosts[0].allow.cn")] {
            XCTAssertThrowsError(try TrustPolicy(json: Array(bad.utf8)), bad) { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidPolicy)
                XCTAssertTrue((e as? MTLSError)?.message.contains(says) == true, "\((e as? MTLSError)?.message ?? "") lacks \(says)")
            }
        }
    }

    func testListsThatReadAlikeHaveDifferentCacheKeys() throws {
        // One CN holding a comma is not the two CNs it would read as.
        XCTAssertNotEqual(try PeerAllowList([(.cn, "a,cn=b")]).cacheKey, try PeerAllowList([(.cn, "a"), (.cn, "b")]).cacheKey)
        var one = TrustOverrides(), two = TrustOverrides()
        try one.allow.add(.cn, "alice,cn=bob")
        try two.allow.add(.cn, "alice")
        try two.allow.add(.cn, "bob")
        XCTAssertNotEqual(one.cacheKey, two.cacheKey)
        let p = try clientPolicy()
        XCTAssertTrue(try evaluate(p, "bob", overrides: two).trusted)
        assertNotAllowed(try evaluate(p, "bob", overrides: one), saying: ["CN \"bob\" matches no --allow-cn"])
    }

    func testAChangedListIsNotAnsweredFromTheCache() throws {
        let p = try clientPolicy()
        XCTAssertTrue(try evaluate(p, "bob").trusted)
        try p.addAllow(.cn, "alice")
        assertNotAllowed(try evaluate(p, "bob"), saying: ["CN \"bob\""])
        var o = TrustOverrides()
        try o.allow.add(.cn, "alice")
        let q = try clientPolicy()
        XCTAssertTrue(try evaluate(q, "bob").trusted)
        assertNotAllowed(try evaluate(q, "bob", overrides: o), saying: ["CN \"bob\""])
    }
}
