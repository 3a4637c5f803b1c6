import Foundation
import XCTest
@testable import MTLS

/// The committed seeds of the network fuzz targets (fuzz/corpus/<target>, made by
/// fuzz/make-net-data.sh) reach what they are there for: a seed the parser refuses at its first
/// byte, or an OCSP response or CRL no longer valid at the targets' fixed time, would leave the
/// fuzzer mutating errors only. Run through the same functions as Sources/MTLS/FuzzEntry.swift.
final class FuzzSeedTests: XCTestCase {
    static let fuzzDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("fuzz").path

    private func seed(_ target: String, _ name: String) throws -> [UInt8] {
        try FileIO.read("\(Self.fuzzDir)/corpus/\(target)/\(name)")
    }

    private func pair() throws -> (leaf: Certificate, issuer: Certificate) {
        let leaf = try XCTUnwrap(try Certificate.parseAll(FileIO.read(Self.fuzzDir + "/data/rev-leaf.pem")).first)
        let issuer = try XCTUnwrap(try Certificate.parseAll(FileIO.read(Self.fuzzDir + "/data/rev-ca.pem")).first)
        return (leaf, issuer)
    }

    func testHTTPResponseSeedsParse() throws {
        let chunked = try HTTPResponseParser.parse(seed("http_response", "chunked"))
        XCTAssertEqual(chunked.body, Array("helloabcdefghijklmnopqrstuvwxyz".utf8))
        let redirect = try HTTPResponseParser.parse(seed("http_response", "redirect"))
        XCTAssertTrue(redirect.isRedirect)
        XCTAssertEqual(redirect.header("location"), "http://crl.example.com/ca.crl")
        XCTAssertEqual(try HTTPResponseParser.parse(seed("http_response", "ok-length")).body, Array(#"{"status":"ok"}"#.utf8))
        XCTAssertEqual(try HTTPResponseParser.parse(seed("http_response", "problem")).status, 400)
    }

    func testHTTPRequestSeedsParse() throws {
        guard case .complete(let r) = HTTPRequestParser.parse(try seed("http_request", "challenge")) else { return XCTFail("challenge") }
        XCTAssertEqual(r.path, "/.well-known/acme-challenge/LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0")
        guard case .complete(let m) = HTTPRequestParser.parse(try seed("http_request", "metrics")) else { return XCTFail("metrics") }
        XCTAssertEqual(m.header("authorization"), "Bearer c2VjcmV0")
    }

    func testACMESeedsReadAsTheClientReadsThem() throws {
        let directory = try JSONValue.parse(seed("acme", "directory.json"), "directory")
        XCTAssertNotNil(directory["renewalInfo"]?.stringValue)
        let authz = try JSONValue.parse(seed("acme", "authorization.json"), "authorization")
        XCTAssertEqual(ACMEClient.orderedIdentifier(of: authz, among: ["*.example.org"]), "example.org")
        XCTAssertEqual(try ACMEClient.challenge(in: authz, method: .http01(address: nil, port: 80), identifier: "x").token, "DGyRejmCefe7v4NfDGDKfA")
        let failed = try JSONValue.parse(seed("acme", "authorization-invalid.json"), "authorization")
        XCTAssertEqual(ACMEClient.failureDetail(failed), "connection: Connection refused")
        let problem = ACMEClient.problem(HTTPResponse(status: 400, headers: [], body: try seed("acme", "problem.json")), "ordering")
        XCTAssertTrue(problem.message.contains("rejectedIdentifier"), problem.message)
        XCTAssertTrue(problem.message.contains("example.net"), problem.message)
    }

    func testRenewalInfoSeedsHaveWindows() throws {
        for name in ["window.json", "fractional.json"] {
            let info = try ACMEClient.renewalInfo(HTTPResponse(status: 200, headers: [], body: seed("renewal_info", name)), identifier: "x")
            XCTAssertLessThan(info.windowStart, info.windowEnd, name)
        }
    }

    func testESTSeedsHoldCertificates() throws {
        XCTAssertEqual(try ESTClient.certificates(seed("est", "leaf.p7.b64"), "est").count, 1)
        XCTAssertEqual(try ESTClient.certificates(seed("est", "leaf.p7.der"), "est").count, 1)
        XCTAssertEqual(try ESTClient.certificates(seed("est", "cacerts.p7.b64"), "est").count, 2)
    }

    func testOCSPSeedsGiveVerdictsAtTheFuzzTime() throws {
        let (leaf, issuer) = try pair()
        for (name, status) in [("good-by-ca.der", RevocationCheck.Status.good), ("good-delegated.der", .good),
                               ("revoked-by-ca.der", .revoked), ("revoked-no-certs.der", .revoked)] {
            let a = try OCSPCheck.check(response: seed("ocsp", name), cert: leaf, issuer: issuer, nonceRequest: nil,
                                        time: FuzzFixtures.time, maxAge: RevocationFetchOptions.defaultMaxAge)
            XCTAssertEqual(a.status, status, name)
        }
    }

    func testCRLSeedsAreAcceptedAtTheFuzzTime() throws {
        let (leaf, issuer) = try pair()
        let good = try CRLStore.accept(seed("crl", "good.der"), url: "http://x/c.crl", issuer: issuer, time: FuzzFixtures.time)
        XCTAssertNil(CRLCheck.lookup(good.list.crl, leaf))
        for name in ["revoked.der", "revoked.pem"] {
            let crl = try CRLStore.accept(seed("crl", name), url: "http://x/c.crl", issuer: issuer, time: FuzzFixtures.time)
            XCTAssertTrue(CRLCheck.covers(crl.list, leaf))
            XCTAssertEqual(CRLCheck.lookup(crl.list.crl, leaf)?.reason, "keyCompromise", name)
        }
    }
}
