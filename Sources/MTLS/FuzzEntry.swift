// The fuzz build's one extra entry (make fuzz-build compiles with -DMTLS_FUZZ and lets
// fuzz/fuzz.map export `mtlsfuzz_input`): the network parsers have no C ABI of their own, so the
// libFuzzer targets fuzz/fuzz_<name>.c hand their input to this function, which feeds it to the
// Swift code that reads what a peer sent. The shipped libmtls.so has none of this (see
// fuzz/fuzz.h). Only a crash, a sanitizer report, a leak or a hang is a finding; errors thrown
// by the parsers are the expected answer to most inputs. A few checks below are oracles: a
// disagreement between two ways of reading the same bytes traps, so the fuzzer reports it.
import FoundationEssentials

/// What the fuzz targets and the test of their seeds (Tests/MTLSTests/FuzzSeedTests.swift) share.
enum FuzzFixtures {
    /// A fixed time inside the validity of the committed OCSP and CRL seeds (fuzz/make-net-data.sh).
    static let time = Date(timeIntervalSince1970: 1_800_000_000)  // 2027-01-15
}

#if MTLS_FUZZ
/// The certificates the revocation targets check against (fuzz/data/rev-*.pem), read once.
private nonisolated(unsafe) var fuzzRevocationPair: (leaf: Certificate, issuer: Certificate)?

private func revocationPair(_ dataDir: String) -> (leaf: Certificate, issuer: Certificate) {
    if let p = fuzzRevocationPair { return p }
    guard let leaf = try? Certificate.parseAll(FileIO.read(dataDir + "/rev-leaf.pem")).first,
          let issuer = try? Certificate.parseAll(FileIO.read(dataDir + "/rev-ca.pem")).first else {
        fatalError("fuzz: cannot read \(dataDir)/rev-leaf.pem and rev-ca.pem")
    }
    fuzzRevocationPair = (leaf, issuer)
    return (leaf, issuer)
}

/// Runs one input through the parser named `target`; 0, or -1 for an unknown target.
@_cdecl("mtlsfuzz_input")
func mtlsfuzz_input(_ target: UnsafePointer<CChar>, _ dataDir: UnsafePointer<CChar>, _ data: UnsafePointer<UInt8>?, _ len: Int) -> Int32 {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: len)) } ?? []
    switch String(cString: target) {
    case "http_response": FuzzTargets.httpResponse(bytes)
    case "http_request": FuzzTargets.httpRequest(bytes)
    case "acme": FuzzTargets.acme(bytes)
    case "renewal_info": FuzzTargets.renewalInfo(bytes, revocationPair(String(cString: dataDir)).leaf)
    case "est": FuzzTargets.est(bytes)
    case "ocsp": FuzzTargets.ocsp(bytes, revocationPair(String(cString: dataDir)))
    case "crl": FuzzTargets.crl(bytes, revocationPair(String(cString: dataDir)))
    default: return -1
    }
    return 0
}

enum FuzzTargets {
    /// An oracle: a message made from what a peer sent holds no character ``OneLine`` cleans
    /// (issue 41: nothing a server sends reaches a terminal raw).
    static func clean(_ text: String, _ what: String) {
        if text.unicodeScalars.contains(where: OneLine.isUnsafe) { fatalError("fuzz: \(what) holds a control or bidirectional character") }
    }

    /// ``clean(_:_:)`` for a thrown error's message.
    static func clean(_ error: Error, _ what: String) {
        clean((error as? MTLSError)?.message ?? (error as? RevocationProblem)?.description ?? "\(error)", what)
    }

    /// Runs `body`, checking the message of what it throws; nil then.
    static func attempt<T>(_ what: String, _ body: () throws -> T) -> T? {
        do { return try body() } catch { clean(error, what); return nil }
    }
    /// A response as ``HTTPClient`` receives it: read whole, and fed in three pieces (the head
    /// or a chunk cut anywhere), which must give the same response or the same kind of error.
    static func httpResponse(_ bytes: [UInt8]) {
        for method in ["GET", "HEAD"] {
            let whole = Result { try HTTPResponseParser.parse(bytes, method: method, maxBody: 1 << 20) }
            var parser = HTTPResponseParser(maxBody: 1 << 20, headOnly: method == "HEAD")
            let a = bytes.count / 3, b = 2 * bytes.count / 3
            let pieces = Result { () throws -> HTTPResponse in
                for piece in [bytes[..<a], bytes[a..<b], bytes[b...]] {
                    if let done = try parser.feed(piece) { return done }
                }
                return try parser.finish(cleanEnd: true)
            }
            switch (whole, pieces) {
            case (.success(let x), .success(let y)):
                guard x.status == y.status, x.body == y.body, x.headers.map(\.name) == y.headers.map(\.name),
                      x.headers.map(\.value) == y.headers.map(\.value) else { fatalError("fuzz: the response read whole and in pieces differ") }
                _ = x.header("location")
                _ = x.headers("link")
                _ = x.retryAfter(max: 10)
                _ = x.isRedirect
            case (.failure(let x), .failure(let y)):
                clean(x, "an HTTP response error")
                guard (x as? MTLSError)?.code == (y as? MTLSError)?.code else { fatalError("fuzz: the response read whole and in pieces fail differently") }
            default:
                fatalError("fuzz: the response read whole and in pieces disagree")
            }
        }
    }

    /// A request head as the metrics endpoint and the http-01 responder read it, answered; the
    /// answer must be an HTTP response the client's own parser reads.
    static func httpRequest(_ bytes: [UInt8]) {
        let result = HTTPRequestParser.parse(bytes, maxHead: 8192)
        if case .complete(let request) = result {
            _ = request.header("host")
            _ = request.header("authorization")
        }
        let answer = HTTPResponder.answer(result) { request in
            HTTPAnswer(status: 200, body: Array(request.path.utf8))
        }
        let method: String
        if case .complete(let request) = result { method = request.method } else { method = "GET" }
        guard let read = try? HTTPResponseParser.parse(answer.bytes, method: method, maxBody: 1 << 20), read.status == answer.status else {
            fatalError("fuzz: the responder's answer does not read back")
        }
    }

    /// A JSON object from an ACME server, read as each step reads it: the directory, an order,
    /// an authorization (for the names ordered), a challenge, a failed object, a problem document.
    static func acme(_ bytes: [UInt8]) {
        clean(ACMEClient.problem(HTTPResponse(status: 403, headers: [("content-type", "application/problem+json")], body: bytes), "fuzzing"),
              "an ACME problem")
        guard let doc = attempt("an ACME JSON error", { try JSONValue.parse(bytes, "the fuzz input") }) else { return }
        for name in ["newNonce", "newAccount", "newOrder", "revokeCert", "renewalInfo"] { _ = doc[name]?.stringValue }
        _ = doc["authorizations"]?.arrayValue.compactMap(\.stringValue)
        _ = doc["finalize"]?.stringValue
        _ = doc["certificate"]?.stringValue
        _ = ACMEClient.orderedIdentifier(of: doc, among: ["example.com", "*.example.org", "192.0.2.7", "2001:db8::7"])
        for method in [ACMEChallengeMethod.http01(address: nil, port: 80), .tlsALPN01(address: nil, port: 443), .dns01(command: "true")] {
            _ = attempt("an ACME challenge error") { try ACMEClient.challenge(in: doc, method: method, identifier: "example.com") }
        }
        clean(ACMEClient.failureDetail(doc), "an ACME failure detail")
        clean(ACMEClient.describe(doc), "an ACME problem description")
    }

    /// A renewalInfo answer (RFC 9773) for the fixed leaf, its window and chosen time.
    static func renewalInfo(_ bytes: [UInt8], _ leaf: Certificate) {
        let r = HTTPResponse(status: 200, headers: [("retry-after", "21600")], body: bytes)
        if let info = attempt("a renewal information error", { try ACMEClient.renewalInfo(r, identifier: "fuzz") }) {
            _ = info.chosenTime(for: leaf)
        }
    }

    /// An EST answer body (RFC 7030: base64 or DER PKCS#7 certs-only), and the same bytes as an error body.
    static func est(_ bytes: [UInt8]) {
        if let certs = attempt("an EST error", { try ESTClient.certificates(bytes, "the fuzz input") }) {
            for c in certs { _ = c.subject; _ = c.subjectSummary }
        }
        clean(ESTClient.failure(HTTPResponse(status: 401, headers: [], body: bytes), "fuzzing"), "an EST error body")
    }

    /// An OCSP response for the fixed leaf and issuer, checked as a fetched or stapled one is.
    static func ocsp(_ bytes: [UInt8], _ pair: (leaf: Certificate, issuer: Certificate)) {
        _ = attempt("an OCSP error") {
            try OCSPCheck.check(response: bytes, cert: pair.leaf, issuer: pair.issuer, nonceRequest: nil, time: FuzzFixtures.time, maxAge: RevocationFetchOptions.defaultMaxAge)
        }
    }

    /// What a CRL distribution point served, accepted for the fixed issuer, and the leaf looked up in it.
    static func crl(_ bytes: [UInt8], _ pair: (leaf: Certificate, issuer: Certificate)) {
        guard let fetched = attempt("a CRL error", {
            try CRLStore.accept(bytes, url: "http://crl.fuzz.invalid/ca.crl", issuer: pair.issuer, time: FuzzFixtures.time)
        }) else { return }
        if CRLCheck.covers(fetched.list, pair.leaf) { _ = CRLCheck.lookup(fetched.list.crl, pair.leaf) }
    }
}
#endif
