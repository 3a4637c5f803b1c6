import Foundation
import XCTest
@testable import MTLS
@testable import MTLSTrust

/// Trust evaluation: every policy feature and failure reason, on chains made at run time by
/// `scripts/test-pki.sh --trust` (valid from now for 30 days), evaluated at fixed times.
final class TrustTests: XCTestCase {
    /// The fixtures, made once (on first use) for every test of the class.
    static let dir: String = {
        let dir = try! TestPKI.tempDir()
        try! TestPKI.make("--trust", dir)
        return dir
    }()
    /// One day after the certificates were made: inside every validity period.
    static let now = Date().addingTimeInterval(86_400)

    override class func setUp() {
        super.setUp()
        _ = dir
    }

    func certs(_ name: String) throws -> [Certificate] { try Certificate.load(path: "\(Self.dir)/\(name)") }
    func cert(_ name: String) throws -> Certificate { try certs(name)[0] }

    func policy(anchors: [String] = ["root.pem"], anchorsOnly: Bool = true) throws -> TrustPolicy {
        TrustPolicy(anchors: try anchors.map { try cert($0) }, anchorsOnly: anchorsOnly, time: Self.now)
    }

    func assertTrusted(_ r: TrustResult, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(r.trusted, "reasons: \(r.reasons)", file: file, line: line)
        XCTAssertEqual(r.kind, .proceed, file: file, line: line)
    }

    func assertFails(_ r: TrustResult, _ code: String, kind: TrustResultKind? = nil, index: Int?? = nil,
                     file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(r.trusted, file: file, line: line)
        XCTAssertTrue(r.reasonCodes.contains(code), "wanted \(code), got \(r.reasons)", file: file, line: line)
        if let kind { XCTAssertEqual(r.kind, kind, file: file, line: line) }
        if let index {
            XCTAssertTrue(r.reasons.contains { $0.code == code && $0.certIndex == index }, "\(code) at \(String(describing: index)): \(r.reasons)",
                          file: file, line: line)
        }
    }

    // MARK: Chains and anchors

    func testPinnedRootTrustsChainAndBuildsItToTheRoot() throws {
        let r = try policy().evaluate(chain: certs("chain.pem"), host: "server.test")
        assertTrusted(r)
        XCTAssertEqual(r.chain.map(\.subjectSummary), ["server.test", "Test Intermediate", "Test Root"])
        XCTAssertNil(r.matchedRule)
    }

    func testRSAChainIsTrusted() throws {
        assertTrusted(try policy(anchors: ["rsa-root.pem"]).evaluate(chain: certs("rsa-chain.pem"), host: "server.test"))
    }

    func testUnorderedPaddedChainIsTolerated() throws {
        let padded = try [cert("server.pem"), cert("other-root.pem"), cert("client.pem"), cert("inter.pem")]
        assertTrusted(try policy().evaluate(chain: padded, host: "server.test"))
    }

    func testIncompleteChainIsUnknownIssuer() throws {
        assertFails(try policy().evaluate(chain: [cert("server.pem")], host: "server.test"),
                    TrustReason.Code.unknownIssuer, kind: .recoverableFailure, index: 0)
    }

    func testUntrustedRootFails() throws {
        let r = try policy(anchors: ["other-root.pem"]).evaluate(chain: certs("chain.pem"), host: "server.test")
        XCTAssertFalse(r.trusted)
        XCTAssertEqual(r.kind, .recoverableFailure)
    }

    func testPinnedIntermediateAcceptsChainWithoutRoot() throws {
        let r = try policy(anchors: ["inter.pem"]).evaluate(chain: certs("chain.pem"), host: "server.test")
        assertTrusted(r)
        XCTAssertEqual(r.chain.count, 2)
    }

    func testPinnedSelfSignedLeafIsTrusted() throws {
        let r = try policy(anchors: ["selfsigned.pem"]).evaluate(chain: certs("selfsigned.pem"), host: "server.test")
        assertTrusted(r)
        XCTAssertEqual(r.chain.count, 1)
    }

    func testSelfSignedLeafWithoutAnchorIsUntrustedRoot() throws {
        assertFails(try policy().evaluate(chain: certs("selfsigned.pem"), host: "server.test"), TrustReason.Code.untrustedRoot)
    }

    func testAnchorsOnlyOffAddsAnchorsToTheSystemStore() throws {
        let p = try policy(anchorsOnly: false)
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        // Without anchors, only the system store counts, and it does not know the test root...
        let none = TrustPolicy(time: Self.now)
        XCTAssertFalse(none.evaluate(chain: try certs("chain.pem"), host: "server.test").trusted)
        // ...unless the system store is a CA file that holds it.
        none.systemCAFile = "\(Self.dir)/root.pem"
        assertTrusted(none.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        none.anchorsOnly = true
        XCTAssertFalse(none.evaluate(chain: try certs("chain.pem"), host: "server.test").trusted)
    }

    func testEmptyChainIsFatal() throws {
        assertFails(try policy().evaluate(chain: [], host: "server.test"), TrustReason.Code.emptyChain, kind: .fatalFailure)
    }

    // MARK: Time

    func testExpiredIsRecoverable() throws {
        let r = try policy().evaluate(chain: certs("chain.pem"), host: "server.test", at: Date().addingTimeInterval(60 * 86_400))
        assertFails(r, TrustReason.Code.expired, kind: .recoverableFailure, index: 0)
    }

    func testNotYetValidIsRecoverable() throws {
        let r = try policy().evaluate(chain: certs("chain.pem"), host: "server.test", at: Date().addingTimeInterval(-2 * 86_400))
        assertFails(r, TrustReason.Code.notYetValid, kind: .recoverableFailure)
    }

    // MARK: Names

    func testWrongHostIsNameMismatch() throws {
        assertFails(try policy().evaluate(chain: certs("chain.pem"), host: "other.test"), TrustReason.Code.nameMismatch,
                    kind: .recoverableFailure, index: 0)
    }

    /// Issue 38: the message says what to do next (the names the certificate has, verify-as).
    func testNameMismatchListsTheCertificatesNamesAndVerifyAs() throws {
        let r = try policy().evaluate(chain: certs("chain.pem"), host: "other.test")
        let m = try XCTUnwrap(r.reasons.first { $0.code == TrustReason.Code.nameMismatch }).message
        XCTAssertTrue(m.contains("the certificate's names: server.test"), m)
        XCTAssertTrue(m.contains("verify-as"), m)
        XCTAssertTrue(m.contains("--verify-as NAME") && m.contains("verify_as= in Python"), m)
    }

    /// Issue 38: an unknown issuer names the anchor option.
    func testUnknownIssuerNamesTheAnchorOption() throws {
        let r = try policy().evaluate(chain: [cert("server.pem")], host: "server.test")
        let m = try XCTUnwrap(r.reasons.first { $0.code == TrustReason.Code.unknownIssuer }).message
        XCTAssertTrue(m.contains("add the CA that issued it as an anchor"), m)
        // The option by its name in each front end.
        XCTAssertTrue(m.contains("--anchor FILE") && m.contains("anchors= in Python") && m.contains("mtls_policy_add_anchor"), m)
    }

    /// Issue 38: curl's `sha256//BASE64` is the same pin; anything else names both forms.
    func testCurlPinFormIsAcceptedAndBadPinsNameTheForms() throws {
        let pin = try cert("root.pem").spkiPin
        XCTAssertEqual(try SPKIPin("sha256//" + pin.dropFirst("sha256/".count)), try SPKIPin(pin))
        // A digest whose base64 begins with "/" is libmtls's form, not curl's (the README's
        // example failed on such a key once curl's form was accepted), and curl's form of it too.
        let slash = [UInt8](repeating: 0xFC, count: 32)  // base64 "/////...": begins with "/"
        let slashPin = "sha256/" + Data(slash).base64EncodedString()
        XCTAssertEqual(try SPKIPin(slashPin).sha256, slash)
        XCTAssertEqual(try SPKIPin("sha256/" + slashPin.dropFirst(6)).sha256, slash)
        for bad in ["pin-sha256=\"abc\"", "sha256//AAAA", "sha1/" + pin.dropFirst(7)] {
            XCTAssertThrowsError(try SPKIPin(bad)) { e in
                let m = (e as? MTLSError)?.message ?? ""
                XCTAssertTrue(m.contains("sha256/BASE64") && m.contains("sha256//BASE64"), m)
            }
        }
    }

    func testWildcardMatchesExactlyOneLabel() throws {
        let p = try policy()
        let chain = try certs("chain.pem")
        assertTrusted(p.evaluate(chain: chain, host: "a.wild.test"))
        XCTAssertFalse(p.evaluate(chain: chain, host: "b.a.wild.test").trusted)
        XCTAssertFalse(p.evaluate(chain: chain, host: "wild.test").trusted)
    }

    func testIPAddressMatchesIPSANOnly() throws {
        let p = try policy()
        let chain = try certs("chain.pem")
        assertTrusted(p.evaluate(chain: chain, host: "127.0.0.1"))
        assertTrusted(p.evaluate(chain: chain, host: "127.0.0.1:8443"))
        assertFails(p.evaluate(chain: chain, host: "127.0.0.2"), TrustReason.Code.nameMismatch)
    }

    func testInvalidHostNameIsRejected() throws {
        assertFails(try policy().evaluate(chain: certs("chain.pem"), host: "server_x.test"), TrustReason.Code.invalidHost)
    }

    func testNoHostUnderSSLNameCheckFailsClosedAsNoPeerName() throws {
        let r = try policy().evaluate(chain: certs("chain.pem"), host: nil)
        assertFails(r, TrustReason.Code.noPeerName, kind: .fatalFailure, index: .some(nil))
        XCTAssertEqual(r.reasonCodes, [TrustReason.Code.noPeerName], "the chain itself is fine")
        XCTAssertTrue(r.reasons[0].message.contains("name check none"), r.reasons[0].message)
        // A client is never name-checked: no name is needed.
        assertTrusted(try policy().evaluate(chain: certs("client-chain.pem"), host: nil, purpose: .clientAuth))
    }

    func testNoHostWithNameCheckNoneIsAnExplicitNoNameCheck() throws {
        let p = try policy()
        p.nameCheck = .none
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: nil))
    }

    // MARK: Host rules

    func testVerifyAsValidatesTheCertificateNameWhenConnectingByIP() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("10.0.0.9"), verifyAs: "server.test"))
        let r = p.evaluate(chain: try certs("chain.pem"), host: "10.0.0.9")
        assertTrusted(r)
        XCTAssertEqual(r.matchedRule, "10.0.0.9")
        XCTAssertFalse(p.evaluate(chain: try certs("chain.pem"), host: "10.0.0.8").trusted)
    }

    func testSkipNameCheckStillChecksChainAndEKU() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("*.internal"), skipNameCheck: true))
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "db.internal"))
        assertFails(p.evaluate(chain: try certs("client-chain.pem"), host: "db.internal"), TrustReason.Code.wrongPurpose)
        let other = try policy(anchors: ["other-root.pem"])
        other.addHostRule(HostRule(pattern: try HostPattern("*.internal"), skipNameCheck: true))
        XCTAssertFalse(other.evaluate(chain: try certs("chain.pem"), host: "db.internal").trusted)
    }

    func testRuleWithOwnAnchorsOverridesDefault() throws {
        let p = try policy(anchors: ["other-root.pem"])
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), anchors: [try cert("root.pem")], anchorsOnly: true))
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        XCTAssertFalse(p.evaluate(chain: try certs("chain.pem"), host: "a.wild.test").trusted)
    }

    func testMostSpecificRuleWins() throws {
        let p = try policy()
        let wrong = try SPKIPin(certificate: cert("other-root.pem"))
        p.hostRules = [
            HostRule(pattern: try HostPattern("**.test"), pins: [wrong]),
            HostRule(pattern: try HostPattern("*.wild.test"), pins: [wrong]),
            HostRule(pattern: try HostPattern("a.wild.test"), skipNameCheck: false),
            HostRule(pattern: try HostPattern("a.wild.test:443"), pins: [wrong]),
        ]
        XCTAssertEqual(p.evaluate(chain: try certs("chain.pem"), host: "a.wild.test").matchedRule, "a.wild.test")
        XCTAssertEqual(p.evaluate(chain: try certs("chain.pem"), host: "a.wild.test:443").matchedRule, "a.wild.test:443")
        XCTAssertEqual(p.evaluate(chain: try certs("chain.pem"), host: "b.wild.test").matchedRule, "*.wild.test")
        XCTAssertEqual(p.evaluate(chain: try certs("chain.pem"), host: "server.test").matchedRule, "**.test")
        XCTAssertTrue(p.evaluate(chain: try certs("chain.pem"), host: "a.wild.test").trusted)
    }

    func testHostPatternSyntax() throws {
        XCTAssertThrowsError(try HostPattern("bad host"))
        XCTAssertThrowsError(try HostPattern("x.test:99999"))
        XCTAssertNoThrow(try HostPattern("[2001:db8::1]:443"))
        XCTAssertNoThrow(try HostPattern("2001:db8::1"))
        XCTAssertTrue(try HostPattern("**.example.com").matches(name: "a.b.example.com", ip: nil, port: nil))
        XCTAssertFalse(try HostPattern("*.example.com").matches(name: "a.b.example.com", ip: nil, port: nil))
        XCTAssertFalse(try HostPattern("*.example.com").matches(name: "example.com", ip: nil, port: nil))
    }

    // MARK: Pins

    func testPinAtAnyDepthMatches() throws {
        for name in ["server.pem", "inter.pem", "root.pem"] {
            let p = try policy()
            let pin = try SPKIPin(cert(name).spkiPin)
            p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [try SPKIPin(certificate: cert("other-root.pem")), pin]))
            let r = p.evaluate(chain: try certs("chain.pem"), host: "server.test")
            assertTrusted(r)
            XCTAssertEqual(r.matchedPin, pin.description)
            XCTAssertEqual(r.matchedRule, "server.test")
        }
    }

    func testPinMismatchIsFatal() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [try SPKIPin(certificate: cert("other-root.pem"))]))
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test"), TrustReason.Code.pinMismatch, kind: .fatalFailure)
        XCTAssertEqual(p.warnings.count, 1, "a single pin has no backup")
    }

    func testRepeatedPinIsNoBackupPin() throws {
        let pin = try SPKIPin(certificate: cert("other-root.pem"))
        var rule = HostRule(pattern: try HostPattern("server.test"), pins: [pin, pin])
        XCTAssertEqual(rule.warnings.count, 1, "the same pin twice is still a single pin")
        rule.addPin(pin)
        XCTAssertEqual(rule.pins, [pin, pin], "addPin does not add a pin the rule already has")
        rule.addPin(try SPKIPin(certificate: cert("root.pem")))
        XCTAssertTrue(rule.warnings.isEmpty)
    }

    func testExpiredPinsStopEnforcingOrFailClosed() throws {
        let expired = Self.now.addingTimeInterval(-3600)
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [try SPKIPin(certificate: cert("other-root.pem"))],
                               pinsExpire: expired, afterExpiry: .stopEnforcing))
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        try p.updateHostRule("server.test") { $0.afterExpiry = .failClosed }
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test"), TrustReason.Code.pinExpired, kind: .fatalFailure)
        // Before the expiry the pins are enforced.
        try p.updateHostRule("server.test") { $0.pinsExpire = Self.now.addingTimeInterval(3600) }
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test"), TrustReason.Code.pinMismatch)
    }

    func testReportOnlyPinCallsHandlerAndProceeds() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [try SPKIPin(certificate: cert("other-root.pem"))],
                               enforcement: .reportOnly))
        let reports = LockedBox<[TrustReport]>([])
        p.reportHandler = { r in reports.mutate { $0.append(r) } }
        let r = p.evaluate(chain: try certs("chain.pem"), host: "server.test")
        XCTAssertTrue(r.trusted)
        XCTAssertEqual(r.kind, .proceed)
        XCTAssertEqual(reports.value.count, 1)
        XCTAssertEqual(reports.value.first?.rule, "server.test")
        XCTAssertEqual(reports.value.first?.reasons.map(\.code), [TrustReason.Code.pinMismatch])
    }

    func testMalformedPinIsRejected() {
        XCTAssertThrowsError(try SPKIPin("sha1/abc")) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidPolicy) }
        XCTAssertThrowsError(try SPKIPin("sha256/bm90IDMyIGJ5dGVz"))
    }

    // MARK: Purpose, constraints, strength, revocation

    func testMissingServerAuthEKU() throws {
        assertFails(try policy().evaluate(chain: certs("client-chain.pem"), host: "client.test", purpose: .serverAuth),
                    TrustReason.Code.wrongPurpose, kind: .fatalFailure, index: 0)
        // A leaf without the EKU extension is good for every purpose (RFC 5280, OpenSSL, webpki).
        assertTrusted(try policy().evaluate(chain: certs("noeku-chain.pem"), host: "server.test"))
        assertTrusted(try policy().evaluate(chain: certs("noeku-chain.pem"), host: nil, purpose: .clientAuth))
    }

    // MARK: The peer reached (issue 9)

    func testRuleForTheAddressAndPortReachedHoldsWithVerifyAs() throws {
        let p = try policy()
        let wrong = [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]
        p.addHostRule(HostRule(pattern: try HostPattern("10.0.0.5:8443"), pins: wrong))
        let r = p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "10.0.0.5", port: 8443, verifyAs: "server.test"))
        XCTAssertEqual(r.reasonCodes, [TrustReason.Code.pinMismatch])
        XCTAssertEqual(r.matchedRule, "10.0.0.5:8443")
        // The port selects: another port, or none, does not reach the rule.
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "10.0.0.5", port: 9443, verifyAs: "server.test")))
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "10.0.0.5", verifyAs: "server.test")))
        // A rule for the host without a port, beside a more specific one: the most specific wins.
        p.addHostRule(HostRule(pattern: try HostPattern("10.0.0.5"), verifyAs: "server.test"))
        XCTAssertEqual(p.hostRule(for: TrustPeer(host: "10.0.0.5", port: 8443))?.pattern.text, "10.0.0.5:8443")
        XCTAssertEqual(p.hostRule(for: TrustPeer(host: "10.0.0.5", port: 1))?.pattern.text, "10.0.0.5")
        // The verify-as name never selects a rule.
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: wrong))
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "10.0.0.5", port: 1)))
    }

    func testIPv6PeerSelectsItsRuleAsAValue() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("[2001:db8::7]:8443"), verifyAs: "server.test",
                               pins: [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]))
        let r = p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "2001:db8::7", port: 8443))
        XCTAssertEqual(r.reasonCodes, [TrustReason.Code.pinMismatch])
        XCTAssertEqual(TrustPeer(hostText: "[2001:db8::7]:8443"), TrustPeer(host: "2001:db8::7", port: 8443))
    }

    // MARK: IPv6 zones (issue 23, defect 5)

    func testAZoneIsKeptApartSoTheRuleForTheAddressHolds() throws {
        let p = try policy()
        let wrong = [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]
        p.addHostRule(HostRule(pattern: try HostPattern("::1"), verifyAs: "server.test", pins: wrong))
        p.addHostRule(HostRule(pattern: try HostPattern("fe80::1"), verifyAs: "server.test", pins: wrong))
        for host in ["::1%1", "[::1%lo]", "0:0::1%1", "fe80::1%lo", "[fe80::1%2]", "fe80::1%eth0"] {
            let peer = TrustPeer(host: host, port: 443)
            XCTAssertNotNil(peer.zone, host)
            let r = p.evaluate(chain: try certs("chain.pem"), peer: peer)
            XCTAssertEqual(r.reasonCodes, [TrustReason.Code.pinMismatch], host)
        }
        XCTAssertEqual(TrustPeer(hostText: "[fe80::1%eth0]:8443"), TrustPeer(host: "fe80::1%eth0", port: 8443))
        XCTAssertEqual(TrustPeer(host: "fe80::1%eth0").host, "fe80::1")
        XCTAssertEqual(TrustPeer(host: "fe80::1%eth0", port: 8443).description, "[fe80::1%eth0]:8443")
        // A server's client from getnameinfo, link-local with its interface.
        XCTAssertEqual(p.hostRule(for: TrustPeer.client(address: "[fe80::1%lo]:50000"))?.pattern.text, "fe80::1")
        // The name checked ignores the zone: verify-as fe80::1%lo is the address fe80::1.
        XCTAssertNoThrow(try HostRule(pattern: try HostPattern("10.0.0.9"), verifyAs: "fe80::1%lo").validate())
    }

    func testARuleWithAZoneAppliesToThatLinkOnly() throws {
        let p = try policy()
        let wrong = [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]
        p.addHostRule(HostRule(pattern: try HostPattern("[fe80::1%lo]:443"), verifyAs: "server.test", pins: wrong))
        p.addHostRule(HostRule(pattern: try HostPattern("fe80::1"), verifyAs: "server.test"))
        // lo by name or by its index; the zoned rule beats the rule for the address alone.
        let index = if_nametoindex("lo")
        XCTAssertGreaterThan(index, 0)
        for host in ["fe80::1%lo", "fe80::1%\(index)"] {
            XCTAssertEqual(p.hostRule(for: TrustPeer(host: host, port: 443))?.pattern.text, "[fe80::1%lo]:443", host)
        }
        XCTAssertEqual(p.hostRule(for: TrustPeer(host: "fe80::1%no-such-if", port: 443))?.pattern.text, "fe80::1")
        XCTAssertEqual(p.hostRule(for: TrustPeer(host: "fe80::1", port: 443))?.pattern.text, "fe80::1")
    }

    func testAPercentThatIsNoZoneIsInvalidHostUnderRules() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("**.test"), verifyAs: nil,
                               pins: [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]))
        for host in ["server.test%lo", "x%y.test", "10.0.0.5%1", "::1%", "fe80::1%a/b"] {
            let r = p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: host, port: 443, verifyAs: "server.test"))
            XCTAssertEqual(r.reasonCodes, [TrustReason.Code.invalidHost], host)
            XCTAssertNil(p.hostRule(for: TrustPeer(host: host)), host)
        }
        for pattern in ["server.test%lo", "10.0.0.5%1", "::1%", "fe80::1%a/b"] {
            XCTAssertThrowsError(try HostPattern(pattern), pattern) { XCTAssertEqual(($0 as? MTLSError)?.code, .invalidPolicy) }
        }
    }

    func testAnIPv6PatternWhoseLastGroupReadsAsAPortIsRefused() throws {
        for pattern in ["::1:8443", "2001:db8::1:443", "::1:1", "fe80::1%lo:443"] {
            XCTAssertThrowsError(try HostPattern(pattern), pattern) { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidPolicy, pattern)
                XCTAssertTrue((e as? MTLSError)?.message.contains("ambiguous") == true, "\(e)")
            }
        }
        XCTAssertThrowsError(try HostPattern("::1:8443")) { XCTAssertTrue("\($0)".contains("[::1]:8443"), "\($0)") }
        // One reading only: no port can follow (fe80: is no address, a full address has 8 groups),
        // the last group is no port (hex, 0, dotted IPv4), or brackets say which.
        for pattern in ["::1", "fe80::1", "2001:db8::7", "2001:db8:0:0:0:0:0:8443", "::1:0", "::1:abcd",
                        "::ffff:10.0.0.5", "[::1]:8443", "[::1:8443]", "[fe80::1%lo]:443", "fe80::1%lo", "2001:db8::"] {
            XCTAssertNoThrow(try HostPattern(pattern), pattern)
        }
        XCTAssertEqual(try HostPattern("[::1]:8443").port, 8443)
        XCTAssertNil(try HostPattern("[::1:8443]").port)
        XCTAssertThrowsError(try TrustPolicy(json: Array(#"{"hosts": [{"host": "::1:8443", "verify_as": "server.test"}]}"#.utf8))) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .invalidPolicy)
        }
    }

    func testAnAddressIsTheAddressReachedHoweverItIsSpelt() throws {
        for spelling in ["127.1", "0177.0.0.1", "0x7f.0.0.1", "2130706433", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "127.0.0.1"] {
            XCTAssertEqual(TrustPeer(host: spelling, port: 8443).host, "127.0.0.1", spelling)
        }
        XCTAssertEqual(TrustPeer(hostText: "[0:0::1]:8443"), TrustPeer(host: "::1", port: 8443))
        XCTAssertEqual(TrustPeer.client(address: "::ffff:10.0.0.5").host, "10.0.0.5")
        // The canonical text of an IPv4 address is written by libmtls (issue 40), and is
        // inet_ntop's: every byte value in every position.
        for v in 0...255 {
            for at in 0..<4 {
                var bytes: [UInt8] = [10, 200, 7, 99]
                bytes[at] = UInt8(v)
                var buf = [CChar](repeating: 0, count: 16)
                let ntop = String(cString: inet_ntop(AF_INET, bytes, &buf, 16)!)
                XCTAssertEqual(IPAddress.text(bytes), ntop)
                XCTAssertEqual(TrustPeer(host: ntop).host, ntop)
            }
        }
        XCTAssertEqual(TrustPeer.kept("[::1]").isAddress, true)
        XCTAssertEqual(TrustPeer.kept("server.test").isAddress, false)
        XCTAssertEqual(TrustPeer.kept("fe80::1%eth0").zone, "eth0")
        // Names stay names, even ones made of hex digits; what the resolver would look up is not an address.
        for name in ["cafe.beef", "server.test", "127.0.0.1.", "1.2.3.4 5", "0x", "a:b"] {
            XCTAssertEqual(TrustPeer(host: name).host, name)
        }
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("127.0.0.1"), verifyAs: "server.test",
                               pins: [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]))
        let r = p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "127.1", port: 443))
        XCTAssertEqual(r.reasonCodes, [TrustReason.Code.pinMismatch])
        // A rule written with another spelling is the rule for the address too.
        p.addHostRule(HostRule(pattern: try HostPattern("[::ffff:7f00:1]:8443"), verifyAs: "server.test"))
        XCTAssertEqual(p.hostRule(for: TrustPeer(host: "127.0.0.1", port: 8443))?.pattern.text, "[::ffff:7f00:1]:8443")
        // A host in Unicode cannot choose its rule (written in A-labels): refused, not judged by a wider rule.
        p.addHostRule(HostRule(pattern: try HostPattern("*.example"), verifyAs: "server.test"))
        p.addHostRule(HostRule(pattern: try HostPattern("xn--bcher-kva.example"), verifyAs: "server.test",
                               pins: [try SPKIPin(certificate: cert("other-root.pem")), try SPKIPin(certificate: cert("client.pem"))]))
        XCTAssertEqual(p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "bücher.example")).reasonCodes,
                       [TrustReason.Code.invalidHost])
        XCTAssertEqual(p.evaluate(chain: try certs("chain.pem"), peer: TrustPeer(host: "xn--bcher-kva.example")).reasonCodes,
                       [TrustReason.Code.pinMismatch])
        // verify-as spelt as a mapped address is checked as the IPv4 address.
        assertTrusted(try policy().evaluate(chain: certs("chain.pem"), peer: TrustPeer(host: "server.test", verifyAs: "::ffff:127.0.0.1")))
        assertTrusted(try policy().evaluate(chain: certs("chain.pem"), host: "127.1"))
    }

    func testEmptyVerifyAsIsAnInvalidPolicyNamingTheRule() throws {
        let p = try policy()
        XCTAssertThrowsError(try p.updateHostRule("10.0.0.5") { $0.verifyAs = "" }) { e in
            XCTAssertEqual((e as? MTLSError)?.code, .invalidPolicy)
            XCTAssertTrue((e as? MTLSError)?.message.contains("10.0.0.5") == true)
        }
        // Added without validation, it fails every evaluation closed instead of skipping the name.
        p.addHostRule(HostRule(pattern: try HostPattern("10.0.0.5"), verifyAs: " "))
        let r = p.evaluate(chain: try certs("chain.pem"), host: "10.0.0.5")
        XCTAssertFalse(r.trusted)
        XCTAssertEqual(r.reasonCodes, [TrustReason.Code.invalidPolicy])
        XCTAssertThrowsError(try TrustPolicy(json: Array(#"{"hosts": [{"host": "a.test", "verify_as": ""}]}"#.utf8)))
        XCTAssertThrowsError(try SPKIPin("sha256/" + String(repeating: "A", count: 43) + "=="))
    }

    func testCommonNameIsNotANameButObeysNameConstraints() throws {
        assertTrusted(try policy().evaluate(chain: certs("cnparent-chain.pem"), host: "server.test"))
        assertTrusted(try policy().evaluate(chain: certs("ncok-chain.pem"), host: "api.allowed.test"))
        // With SANs the CN is not a name: a CN outside the constraints is no reason to refuse
        // (BetterTLS counts refusing it a failure; webpki, Go and pyca accept).
        assertTrusted(try policy().evaluate(chain: certs("nccn-chain.pem"), host: "api.allowed.test"))
        // An address in the CN is not a DNS name: DNS constraints leave it (and the IP SAN) alone.
        assertTrusted(try policy().evaluate(chain: certs("ncipcn-chain.pem"), host: "127.0.0.1"))
        // Without SANs, a DNS-like CN is judged by the constraints as a dNSName would be.
        assertFails(try policy().evaluate(chain: certs("nccnonly-chain.pem"), host: nil, purpose: .clientAuth),
                    TrustReason.Code.nameConstraintViolation)
        assertTrusted(try policy().evaluate(chain: certs("nccnonlyok-chain.pem"), host: nil, purpose: .clientAuth))
    }

    func testPathBuildingFindsTheGoodIssuerAmongBadCandidates() throws {
        let later = Self.now.addingTimeInterval(86_400) // the one-day candidate has expired
        for name in ["pb-bag.pem", "pb-expired-chain.pem", "pb-wrongeku-chain.pem", "pb-notca-chain.pem",
                     "pb-sha1-chain.pem", "pb-nonanchor-chain.pem"] {
            let r = try policy().evaluate(chain: certs(name), host: "server.test", at: later)
            XCTAssertTrue(r.trusted, "\(name): \(r.reasons)")
            XCTAssertEqual(r.chain.map(\.sha256Hex), try ["pb-server.pem", "pb-good.pem", "root.pem"].map { try cert($0).sha256Hex }, name)
        }
        // 50 useless candidates (same name and key identifier, another key): refused, with reasons.
        let r = try policy().evaluate(chain: certs("pb-noise.pem"), host: "server.test", at: later)
        XCTAssertFalse(r.trusted)
        XCTAssertFalse(r.reasons.isEmpty)
    }

    func testRootRolloverWithTheOldRootExpiredAndTheNewOnePinned() throws {
        let later = Self.now.addingTimeInterval(86_400) // the old root has expired
        let p = TrustPolicy(anchors: [try cert("old-root.pem"), try cert("new-root.pem")], anchorsOnly: true)
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"),
                               pins: [try SPKIPin(certificate: cert("new-root.pem")), try SPKIPin(certificate: cert("other-root.pem"))]))
        let r = p.evaluate(chain: try certs("ro-chain.pem"), host: "server.test", at: later)
        XCTAssertTrue(r.trusted, "\(r.reasons)")
        XCTAssertEqual(r.chain.last?.sha256Hex, try cert("new-root.pem").sha256Hex)
        // Only the old root: expired, refused.
        let old = TrustPolicy(anchors: [try cert("old-root.pem")], anchorsOnly: true)
        XCTAssertFalse(old.evaluate(chain: try certs("ro-chain.pem"), host: "server.test", at: later).trusted)
    }

    /// Issue 35 item 1: a policy that names anchors trusts those anchors only, whatever the
    /// system store holds (here a CA file playing it that signs the server), in the policy, a
    /// host rule, a JSON file and the overrides; `system_anchors` true is the one opt-in; a
    /// policy without anchors uses the system store.
    func testAnchorsMeanThoseAnchorsOnlyUnlessSystemAnchors() throws {
        let system = "\(Self.dir)/root.pem" // plays the system trust store; it signs chain.pem
        let chain = try certs("chain.pem")
        func judged(_ p: TrustPolicy, overrides: TrustOverrides? = nil) -> TrustResult {
            p.systemCAFile = system
            p.time = Self.now
            return p.evaluate(chain: chain, peer: TrustPeer(host: "server.test"), purpose: .serverAuth,
                              overrides: overrides)
        }
        let other = try cert("other-root.pem")
        // No anchors: the system store.
        assertTrusted(judged(TrustPolicy()))
        // Anchors: those only (refused), unless system_anchors.
        let only = judged(TrustPolicy(anchors: [other]))
        XCTAssertFalse(only.trusted)
        XCTAssertEqual(only.provenance?.anchorsOnly, true)
        assertTrusted(judged(TrustPolicy(anchors: [other], systemAnchors: true)))
        // The older spelling keeps its meaning: anchors_only false is the system store too.
        assertTrusted(judged(TrustPolicy(anchors: [other], anchorsOnly: false)))
        let p = TrustPolicy(anchors: [other])
        XCTAssertTrue(p.anchorsOnly)
        XCTAssertNil(p.systemAnchors)
        // Overrides: anchors given for one evaluation over a policy without any are the only ones.
        XCTAssertFalse(judged(TrustPolicy(), overrides: TrustOverrides(anchors: [other])).trusted)
        assertTrusted(judged(TrustPolicy(), overrides: TrustOverrides(anchors: [other], systemAnchors: true)))
        // A host rule's own anchors: the same rule.
        let ruled = TrustPolicy()
        ruled.addHostRule(HostRule(pattern: try HostPattern("server.test"), anchors: [other]))
        XCTAssertFalse(judged(ruled).trusted)
        let ruledToo = TrustPolicy()
        ruledToo.addHostRule(HostRule(pattern: try HostPattern("server.test"), anchors: [other], systemAnchors: true))
        assertTrusted(judged(ruledToo))
        // JSON: anchors only by default; "system_anchors": true, or the old "anchors_only": false.
        let pem = other.pem.replacingOccurrences(of: "\n", with: "\\n")
        XCTAssertFalse(judged(try TrustPolicy(json: Array(#"{"anchors": ["\#(pem)"]}"#.utf8))).trusted)
        assertTrusted(judged(try TrustPolicy(json: Array(#"{"anchors": ["\#(pem)"], "system_anchors": true}"#.utf8))))
        assertTrusted(judged(try TrustPolicy(json: Array(#"{"anchors": ["\#(pem)"], "anchors_only": false}"#.utf8))))
        XCTAssertFalse(judged(try TrustPolicy(json: Array(#"{"hosts": [{"host": "server.test", "anchors": ["\#(pem)"]}]}"#.utf8))).trusted)
        assertTrusted(judged(try TrustPolicy(json: Array(#"{"hosts": [{"host": "server.test", "anchors": ["\#(pem)"], "system_anchors": true}]}"#.utf8))))
        XCTAssertThrowsError(try TrustPolicy(json: Array(#"{"system_anchors": true, "anchors_only": true}"#.utf8)))
    }

    func testClientsAreNeverJudgedByTheSystemStoreUnlessAsked() throws {
        let p = TrustPolicy(anchors: [try cert("other-root.pem")], systemAnchors: true, time: Self.now)
        p.systemCAFile = "\(Self.dir)/root.pem" // plays the system trust store
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        let r = p.evaluate(chain: try certs("client-chain.pem"), host: nil, purpose: .clientAuth)
        XCTAssertFalse(r.trusted)
        XCTAssertTrue(r.reasons.contains { $0.message.hasPrefix("not issued under the client anchor \"Other Root\"") }, "\(r.reasons)")
        p.systemAnchorsForClients = true
        assertTrusted(p.evaluate(chain: try certs("client-chain.pem"), host: nil, purpose: .clientAuth))
    }

    func testIdentityChainEvaluationExpiresAtTheNextValidityBoundary() throws {
        let key = try PrivateKey(pem: Array(try String(contentsOfFile: "\(Self.dir)/server.key", encoding: .utf8).utf8))
        let id = try Identity(privateKey: key, leaf: cert("server.pem"), certificates: [cert("inter.pem"), cert("root.pem")])
        let first = id.chainEvaluation
        XCTAssertTrue(first.verified)
        // All three were made just now for 30 days: the first to expire ends the window.
        let ends = try ["server.pem", "inter.pem", "root.pem"].map { try cert($0).notAfter.addingTimeInterval(1) }
        XCTAssertEqual(id.nextValidityBoundary(after: first.evaluatedAt), ends.min())
        XCTAssertEqual(id.nextValidityBoundary(after: ends.max()!), Date.distantFuture)
        XCTAssertEqual(id.chainEvaluation.evaluatedAt, first.evaluatedAt) // cached inside the window
    }

    func testClientPurposeNeedsClientAuthEKU() throws {
        assertTrusted(try policy().evaluate(chain: certs("client-chain.pem"), host: nil, purpose: .clientAuth))
        assertFails(try policy().evaluate(chain: certs("chain.pem"), host: nil, purpose: .clientAuth), TrustReason.Code.wrongPurpose)
    }

    func testOneFailureIsOneReasonWithTheMoreInformativeMessage() throws {
        // OpenSSL (error 26) and libmtls's EKU check both see the missing clientAuth on the leaf.
        let r = try policy().evaluate(chain: certs("chain.pem"), host: nil, purpose: .clientAuth)
        let wrong = r.reasons.filter { $0.code == TrustReason.Code.wrongPurpose && $0.certIndex == 0 }
        XCTAssertEqual(wrong.count, 1, "\(r.reasons)")
        XCTAssertTrue(wrong.first?.message.contains("clientAuth") == true, "\(wrong)")
        let pairs = r.reasons.map { "\($0.code)@\(String(describing: $0.certIndex))" }
        XCTAssertEqual(pairs.count, Set(pairs).count, "\(r.reasons)")
    }

    func testDeduplicationKeepsFirstPositionAndPolicyMessage() {
        let openSSL = [TrustReason(code: "wrong_purpose", certIndex: 0, message: "unsuitable certificate purpose (OpenSSL error 26)"),
                       TrustReason(code: "expired", certIndex: 1, message: "certificate has expired (OpenSSL error 10)"),
                       TrustReason(code: "expired", certIndex: 1, message: "again")]
        let policy = [TrustReason(code: "wrong_purpose", certIndex: 0, message: "the leaf's EKU lacks clientAuth"),
                      TrustReason(code: "wrong_purpose", certIndex: 1, message: "another certificate")]
        let merged = Evaluation.deduplicated(openSSL: openSSL, policy: policy)
        XCTAssertEqual(merged.map(\.message), ["the leaf's EKU lacks clientAuth", "certificate has expired (OpenSSL error 10)",
                                               "another certificate"])
    }

    func testPathLengthViolation() throws {
        assertFails(try policy().evaluate(chain: certs("deep-chain.pem"), host: "server.test"),
                    TrustReason.Code.pathLengthExceeded, kind: .fatalFailure)
    }

    func testWeakKeyIsRejected() throws {
        assertFails(try policy().evaluate(chain: certs("weak-chain.pem"), host: "server.test"), TrustReason.Code.weakKey, index: 0)
        let lenient = try policy()
        lenient.minimumRSABits = 1024
        assertTrusted(lenient.evaluate(chain: try certs("weak-chain.pem"), host: "server.test"))
    }

    func testSHA1SignatureIsRejected() throws {
        assertFails(try policy().evaluate(chain: certs("sha1-chain.pem"), host: "server.test"), TrustReason.Code.weakSignature, index: 0)
    }

    func testRevokedByCRL() throws {
        let p = try policy()
        p.crls = try RevocationList.load(path: "\(Self.dir)/revoked.crl")
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test"), TrustReason.Code.revoked, kind: .fatalFailure, index: 0)
        p.crls = try RevocationList.load(path: "\(Self.dir)/empty.crl")
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
    }

    func testPolicyLayerChecksHaveTheirOwnCodes() throws {
        let p = try policy()
        assertFails(p.evaluate(chain: try certs("cn-chain.pem"), host: "server.test"), TrustReason.Code.commonNameMismatch, index: 0)
        assertFails(p.evaluate(chain: try certs("caleaf-chain.pem"), host: "server.test"), TrustReason.Code.caAsLeaf, index: 0)
        assertFails(p.evaluate(chain: try certs("nosan-chain.pem"), host: "server.test"), TrustReason.Code.sanMissing, index: 0)
        // A client certificate's common name is a person or device, not a host: not checked.
        assertTrusted(p.evaluate(chain: try certs("client-chain.pem"), host: nil, purpose: .clientAuth))
        XCTAssertEqual(Set(ChainCheck.all.map(\.name)).count, ChainCheck.all.count)
    }

    /// A CN is not a name of the peer: one from another namespace, another address, a short or
    /// display name is fine; a SAN spelled another way (case, IP text) is refused.
    func testCommonNameBesideTheSANs() throws {
        let p = try policy()
        for fine in ["bad_example_com", "10_9_9_9", "server", "Server_Test"] {
            assertTrusted(p.evaluate(chain: try certs("cn-\(fine)-chain.pem"), host: "server.test"))
            assertTrusted(p.evaluate(chain: try certs("cn-\(fine)-chain.pem"), host: "127.0.0.1"))
        }
        for refused in ["SERVER_TEST", "127_000_000_001"] {
            assertFails(p.evaluate(chain: try certs("cn-\(refused)-chain.pem"), host: "server.test"),
                        TrustReason.Code.commonNameMismatch, index: 0)
        }
        XCTAssertNil(CommonNameRule.conflict("api.other.internal", dnsNames: ["server.test"]))
        XCTAssertNil(CommonNameRule.conflict("example.com", dnsNames: ["foo.bar.example.com"]))
        XCTAssertNil(CommonNameRule.conflict("a.example.com", dnsNames: ["*.example.com"]))
        XCTAssertNotNil(CommonNameRule.conflict("notinsan.example.com", dnsNames: ["valid.example.com"]))
        XCTAssertNotNil(CommonNameRule.conflict("Example.COM", dnsNames: ["example.com"]))
    }

    // MARK: Policy files

    func testPolicyFileWithRulesPinsAndRelativeAnchors() throws {
        let pin = try cert("inter.pem").spkiPin, backup = try cert("other-root.pem").spkiPin
        let json = """
        {"version": 1, "anchors": ["root.pem"], "anchors_only": true, "time": "\(ISO8601DateFormatter().string(from: Self.now))",
         "hosts": [{"host": "10.1.2.3:8443", "verify_as": "server.test", "pins": ["\(pin)", "\(backup)"],
                    "pins_expire": "2099-01-01T00:00:00Z", "after_expiry": "fail_closed", "enforcement": "enforce"},
                   {"host": "*.corp.test", "skip_name_check": true}]}
        """
        let path = "\(Self.dir)/policy.json"
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        let p = try TrustPolicy.load(path: path)
        XCTAssertTrue(p.warnings.isEmpty)
        let r = p.evaluate(chain: try certs("chain.pem"), host: "10.1.2.3:8443")
        assertTrusted(r)
        XCTAssertEqual(r.matchedPin, pin)
        XCTAssertEqual(r.matchedRule, "10.1.2.3:8443")
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "x.corp.test"))
    }

    func testPolicyFileErrorsNameTheKey() {
        for (json, word) in [("{\"anchor\": []}", "anchor"), ("{\"hosts\": [{\"host\": \"a\", \"pins\": [\"md5/x\"]}]}", "sha256"),
                             ("not json", "JSON"), ("{\"purpose\": \"both\"}", "purpose"), ("{\"version\": 2}", "version")] {
            XCTAssertThrowsError(try TrustPolicy(json: Array(json.utf8))) { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidPolicy)
                XCTAssertTrue("\(e)".contains(word), "\(e)")
            }
        }
    }

    /// fuzz_policy: deep nesting exhausted the decoder's stack (a crash of the host, not an error).
    func testDeeplyNestedOrNonUTF8PolicyIsAnErrorNotACrash() {
        let deep = Array(String(repeating: "[", count: 200_000).utf8) + Array(String(repeating: "]", count: 200_000).utf8)
        let hidden = Array(#"{"hosts": "#.utf8) + Array(String(repeating: "[", count: 33).utf8)
        var utf16 = [UInt8](); for u in #"{"version": 1}"#.utf16 { utf16 += [UInt8(u & 0xff), UInt8(u >> 8)] }
        for (bytes, word) in [(deep, "nested"), (hidden, "nested"), (utf16, "UTF-8"), ([0xff, 0x7b, 0x7d], "UTF-8")] {
            XCTAssertThrowsError(try TrustPolicy(json: bytes)) { e in
                XCTAssertEqual((e as? MTLSError)?.code, .invalidPolicy)
                XCTAssertTrue("\(e)".contains(word), "\(e)")
            }
        }
        // Brackets inside strings do not count; a realistic file is far below the limit.
        let inString = #"{"system_ca_dir": "/x/"# + String(repeating: "[{", count: 100) + #"\"q"}"#
        XCTAssertNoThrow(try TrustPolicy(json: Array(inString.utf8)))
    }

    // MARK: Cache and replacement

    func testCacheNeverChangesAnAnswer() throws {
        let p = try policy()
        p.time = nil
        let chain = try certs("chain.pem")
        let first = p.evaluate(chain: chain, host: "server.test", at: Self.now)
        let second = p.evaluate(chain: chain, host: "server.test", at: Self.now)
        XCTAssertEqual(first.trusted, second.trusted)
        // Same chain, later time past notAfter: the cached answer is not reused.
        XCTAssertFalse(p.evaluate(chain: chain, host: "server.test", at: Date().addingTimeInterval(40 * 86_400)).trusted)
        // A policy change invalidates cached answers.
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [try SPKIPin(certificate: cert("other-root.pem"))]))
        XCTAssertFalse(p.evaluate(chain: chain, host: "server.test", at: Self.now).trusted)
    }

    func testDERChainEvaluationMatchesParsedEvaluation() throws {
        let p = try policy()
        let ders = try certs("chain.pem").map(\.der)
        for cache in [false, true] {
            p.evaluationCacheEnabled = cache
            for _ in 0..<2 {
                assertTrusted(try p.evaluate(derChain: ders, host: "server.test"))
                assertFails(try p.evaluate(derChain: ders, host: "x.test"), TrustReason.Code.nameMismatch)
            }
        }
        XCTAssertThrowsError(try p.evaluate(derChain: [[1, 2, 3]], host: "server.test")) {
            XCTAssertEqual(($0 as? MTLSError)?.code, .parse)
        }
    }

    func testPolicyReplacesItsSettingsAtomicallyWhileEvaluating() throws {
        let good = try policy()
        let bad = try policy(anchors: ["other-root.pem"])
        let handle = good.copy()
        let chain = try certs("chain.pem")
        DispatchQueue.concurrentPerform(iterations: 200) { i in
            if i % 10 == 0 { handle.replaceSettings(from: i % 20 == 0 ? bad : good) }
            _ = handle.evaluate(chain: chain, host: "server.test")
        }
        handle.replaceSettings(from: good)
        assertTrusted(handle.evaluate(chain: chain, host: "server.test"))
        handle.replaceSettings(from: bad)
        XCTAssertFalse(handle.evaluate(chain: chain, host: "server.test").trusted)
    }

    // MARK: One effective policy (issue 23): policy-wide settings and overrides, composed per evaluation

    func pin(_ name: String) throws -> SPKIPin { SPKIPin(certificate: try cert(name)) }

    func testPolicyWidePinsApplyWithAndWithoutAHostAndToClients() throws {
        let p = try policy()
        p.pins = [try pin("other-root.pem")]
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test"), TrustReason.Code.pinMismatch, kind: .fatalFailure)
        // No host (name check off): the policy-wide pins still hold.
        p.nameCheck = .none
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: nil), TrustReason.Code.pinMismatch)
        // A client, as a listener judges it (by its address, no name).
        assertFails(p.evaluate(chain: try certs("client-chain.pem"), peer: .client(address: "10.0.0.7"), purpose: .clientAuth),
                    TrustReason.Code.pinMismatch)
        p.pins = [try pin("inter.pem")]
        let r = p.evaluate(chain: try certs("client-chain.pem"), peer: .client(address: "10.0.0.7"), purpose: .clientAuth)
        assertTrusted(r)
        XCTAssertEqual(r.provenance?.pins, [TrustProvenance.PinSet(source: .policy, enforced: true, matched: try pin("inter.pem").description)])
    }

    func testPolicyWidePinsHoldBesideTheSelectedRulesOwnPins() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [try pin("root.pem")]))
        p.pins = [try pin("other-root.pem")]
        // The rule's pin matches; the policy-wide one does not: both sets must be matched.
        let r = p.evaluate(chain: try certs("chain.pem"), host: "server.test")
        assertFails(r, TrustReason.Code.pinMismatch)
        XCTAssertEqual(r.provenance?.pins.map(\.source), [.rule, .policy])
        XCTAssertEqual(r.provenance?.rule, "server.test")
    }

    func testPolicyWideVerifyAsDoesNotShadowAWildcardRulesAnchors() throws {
        // Default anchors: the RSA root; the **.test rule: the test root, and only it.
        let p = TrustPolicy(anchors: [try cert("rsa-root.pem")], anchorsOnly: true, time: Self.now)
        p.addHostRule(HostRule(pattern: try HostPattern("**.test"), anchors: [try cert("root.pem")], anchorsOnly: true))
        p.verifyAs = "server.test"
        // A chain from the RSA root (named server.test) reached as x.test: the rule's anchors decide.
        assertFails(p.evaluate(chain: try certs("rsa-chain.pem"), host: "x.test"), TrustReason.Code.unknownIssuer)
        let r = p.evaluate(chain: try certs("chain.pem"), host: "x.test")
        assertTrusted(r)
        XCTAssertEqual(r.provenance?.rule, "**.test")
        XCTAssertEqual(r.provenance?.anchors, [.rule])
        XCTAssertEqual(r.provenance?.name, "server.test")
        XCTAssertEqual(r.provenance?.nameSource, .policy)
        XCTAssertEqual(p.hostRules.map(\.pattern.text), ["**.test"], "no rule was added")
    }

    func testOverridePinsAreEnforcedUnderAReportOnlyRuleAndExpiredPins() throws {
        let wrong = try pin("other-root.pem")
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("server.test"), pins: [wrong], enforcement: .reportOnly))
        let reports = LockedBox<Int>(0)
        p.reportHandler = { _ in reports.mutate { $0 += 1 } }
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        let r = p.evaluate(chain: try certs("chain.pem"), host: "server.test", overrides: TrustOverrides(pins: [wrong]))
        assertFails(r, TrustReason.Code.pinMismatch, kind: .fatalFailure)
        XCTAssertEqual(r.provenance?.pins.map(\.source), [.rule, .override])
        XCTAssertEqual(r.provenance?.pins.map(\.enforced), [false, true])
        XCTAssertEqual(reports.value, 2, "the report-only rule's own failure is still reported, once per evaluation")
        // Expired rule pins that stopped being enforced do not stop the override's.
        try p.updateHostRule("server.test") {
            $0.enforcement = .enforce
            $0.pinsExpire = Self.now.addingTimeInterval(-60)
            $0.afterExpiry = .stopEnforcing
        }
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test"))
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test", overrides: TrustOverrides(pins: [wrong])),
                    TrustReason.Code.pinMismatch)
        assertTrusted(p.evaluate(chain: try certs("chain.pem"), host: "server.test", overrides: TrustOverrides(pins: [try pin("inter.pem")])))
    }

    func testOverridesNeverChangeThePolicyAndAreInTheCacheKey() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("127.0.0.1"), verifyAs: "server.test"))
        let version = p.version
        let chain = try certs("chain.pem")
        // Trusted first (cached), then the same chain, peer and second with overrides: not the cached answer.
        assertTrusted(p.evaluate(chain: chain, host: "127.0.0.1"))
        assertFails(p.evaluate(chain: chain, host: "127.0.0.1", overrides: TrustOverrides(pins: [try pin("other-root.pem")])),
                    TrustReason.Code.pinMismatch)
        assertFails(p.evaluate(chain: chain, host: "127.0.0.1", overrides: TrustOverrides(verifyAs: "other.test")),
                    TrustReason.Code.nameMismatch)
        let added = p.evaluate(chain: chain, host: "127.0.0.1", overrides: TrustOverrides(anchors: [try cert("other-root.pem")]))
        assertTrusted(added)
        XCTAssertEqual(added.provenance?.anchors, [.policy, .override])
        assertTrusted(p.evaluate(chain: chain, host: "127.0.0.1"))
        XCTAssertEqual(p.version, version)
        XCTAssertEqual(p.hostRules.count, 1)
        XCTAssertEqual(p.hostRules.first?.verifyAs, "server.test")
        XCTAssertTrue(p.hostRules.first?.pins.isEmpty ?? false)
        XCTAssertNil(p.verifyAs)
        XCTAssertTrue(p.pins.isEmpty)
    }

    func testOverrideVerifyAsWinsAndEachCallGetsItsOwn() throws {
        let p = try policy()
        p.addHostRule(HostRule(pattern: try HostPattern("127.0.0.1"), verifyAs: "other.test"))
        p.verifyAs = "also-other.test"
        let chain = try certs("chain.pem")
        assertFails(p.evaluate(chain: chain, host: "127.0.0.1"), TrustReason.Code.nameMismatch)
        let a = p.evaluate(chain: chain, host: "127.0.0.1", overrides: TrustOverrides(verifyAs: "server.test"))
        assertTrusted(a)
        XCTAssertEqual(a.provenance?.nameSource, .override)
        XCTAssertEqual(a.provenance?.rule, "127.0.0.1")
        assertFails(p.evaluate(chain: chain, host: "127.0.0.1", overrides: TrustOverrides(verifyAs: "wrong.test")), TrustReason.Code.nameMismatch)
        assertTrusted(p.evaluate(chain: chain, host: "127.0.0.1", overrides: TrustOverrides(verifyAs: "x.wild.test")))
    }

    func testOverrideAnchorsAreAddedToTheAnchorsInForce() throws {
        let p = TrustPolicy(anchors: [try cert("rsa-root.pem")], anchorsOnly: true, time: Self.now)
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test"), TrustReason.Code.unknownIssuer)
        let r = p.evaluate(chain: try certs("chain.pem"), host: "server.test", overrides: TrustOverrides(anchors: [try cert("inter.pem")]))
        assertTrusted(r)
        XCTAssertEqual(r.provenance?.anchors, [.policy, .override])
        XCTAssertEqual(r.provenance?.anchorsOnlySource, .policy)
        assertTrusted(p.evaluate(chain: try certs("rsa-chain.pem"), host: "server.test", overrides: TrustOverrides(anchors: [try cert("inter.pem")])))
        // anchors-only off from the overrides: the system store joins (the test root is not in it).
        let s = p.evaluate(chain: try certs("chain.pem"), host: "server.test", overrides: TrustOverrides(anchorsOnly: false))
        XCTAssertFalse(s.trusted)
        XCTAssertEqual(s.provenance?.anchorsOnlySource, .override)
        XCTAssertEqual(s.provenance?.anchorsOnly, false)
        XCTAssertThrowsError(try TrustOverrides(verifyAs: " ").validate())
        assertFails(p.evaluate(chain: try certs("chain.pem"), host: "server.test", overrides: TrustOverrides(verifyAs: "")),
                    TrustReason.Code.invalidPolicy)
    }

    func testPolicyFileReadsPolicyWidePinsAndVerifyAs() throws {
        let pinText = try pin("inter.pem").description
        let json = #"{"anchors": ["root.pem"], "anchors_only": true, "verify_as": "server.test", "pins": ["\#(pinText)"]}"#
        let p = try TrustPolicy(json: Array(json.utf8), baseDirectory: Self.dir)
        XCTAssertEqual(p.verifyAs, "server.test")
        XCTAssertEqual(p.pins.map(\.description), [pinText])
        p.time = Self.now
        let r = p.evaluate(chain: try certs("chain.pem"), host: "10.1.2.3")
        assertTrusted(r)
        XCTAssertEqual(r.provenance?.jsonText,
                       #"{"rule":null,"anchors":["policy"],"anchors_only":true,"anchors_only_from":"policy","name":"server.test","name_from":"policy","pins":[{"from":"policy","enforced":true,"matched":"\#(pinText)"}]}"#)
        for bad in [#"{"verify_as": ""}"#, #"{"verify_as": "a b"}"#, #"{"pins": ["sha256/abc"]}"#] {
            XCTAssertThrowsError(try TrustPolicy(json: Array(bad.utf8))) {
                XCTAssertEqual(($0 as? MTLSError)?.code, .invalidPolicy, bad)
            }
        }
    }
}

/// A value shared with a @Sendable closure in a test.
final class LockedBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ v: T) { stored = v }
    var value: T { lock.lock(); defer { lock.unlock() }; return stored }
    func mutate(_ f: (inout T) -> Void) { lock.lock(); f(&stored); lock.unlock() }
}
