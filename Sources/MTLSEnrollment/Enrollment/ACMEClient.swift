import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// How an ACME server's challenge is answered.
public enum ACMEChallengeMethod: Sendable, Equatable {
    /// http-01 answered by a built-in HTTP responder listening on `address` (nil: every IPv4
    /// address) and `port` (the CA connects to port 80 of the name; give the port it reaches).
    case http01(address: String?, port: UInt16)
    /// http-01 answered by files written under `directory/.well-known/acme-challenge/` (a web
    /// server serves them); the files are removed afterwards.
    case webroot(directory: String)
    /// tls-alpn-01 (RFC 8737) answered by a built-in TLS responder on `address` and `port`
    /// (the CA connects to port 443 of the name).
    case tlsALPN01(address: String?, port: UInt16)
    /// dns-01: `command` is run to publish, then to remove, the TXT record: a path to an
    /// executable directly, anything else with `/bin/sh -c`. It gets the action (`present` or
    /// `cleanup`), the record name and its value as arguments (`$1 $2 $3` in a command line)
    /// and as `MTLS_ACME_ACTION`, `MTLS_ACME_TXT_NAME`, `MTLS_ACME_TXT_VALUE` (plus
    /// `MTLS_ACME_IDENTIFIER`), and must return 0 once the record is served.
    case dns01(command: String)

    /// The ACME challenge type ("http-01", "tls-alpn-01", "dns-01").
    public var type: String {
        switch self {
        case .http01, .webroot: return "http-01"
        case .tlsALPN01: return "tls-alpn-01"
        case .dns01: return "dns-01"
        }
    }

    /// A one-line description kept in the enrollment record (`http-01:ADDR:PORT`,
    /// `webroot:DIR`, `tls-alpn-01:ADDR:PORT`, `dns-01:COMMAND`), read back by ``init(recorded:)``.
    public var recorded: String {
        switch self {
        case .http01(let a, let p): return "http-01:\(a ?? ""):\(p)"
        case .webroot(let d): return "webroot:\(d)"
        case .tlsALPN01(let a, let p): return "tls-alpn-01:\(a ?? ""):\(p)"
        case .dns01(let c): return "dns-01:\(c)"
        }
    }

    /// The method a record's ``recorded`` text describes.
    public init(recorded text: String) throws {
        func addressPort(_ rest: Substring) throws -> (String?, UInt16) {
            guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]) else {
                throw MTLSError(.corrupt, "the recorded challenge \"\(text)\" is unreadable")
            }
            let a = String(rest[..<colon])
            return (a.isEmpty ? nil : a, port)
        }
        if text.hasPrefix("http-01:") {
            let (a, p) = try addressPort(text.dropFirst(8)); self = .http01(address: a, port: p)
        } else if text.hasPrefix("tls-alpn-01:") {
            let (a, p) = try addressPort(text.dropFirst(12)); self = .tlsALPN01(address: a, port: p)
        } else if text.hasPrefix("webroot:") {
            self = .webroot(directory: String(text.dropFirst(8)))
        } else if text.hasPrefix("dns-01:") {
            self = .dns01(command: String(text.dropFirst(7)))
        } else {
            throw MTLSError(.corrupt, "the recorded challenge \"\(text)\" is unknown")
        }
    }
}

/// An external account binding (RFC 8555 §7.3.4): the key identifier and MAC key the CA gave.
public struct ACMEExternalAccount: Sendable {
    /// The key identifier.
    public var keyID: String
    /// The HMAC key (raw bytes, decoded from the base64url the CA hands out).
    public var hmacKey: SecretBytes

    /// `hmacKey` is the raw key.
    public init(keyID: String, hmacKey: SecretBytes) {
        self.keyID = keyID
        self.hmacKey = hmacKey
    }

    /// Reads the base64url MAC key the CA gave from the first line of a file (refused when
    /// others may read it, like every secret file).
    public static func load(keyID: String, hmacFile: String) throws -> ACMEExternalAccount {
        try decode(keyID: keyID, base64URLKey: try FileIO.readSecret(hmacFile, kind: .password), source: hmacFile)
    }

    /// The account from the base64url MAC key as the CA hands it out (surrounding spaces and
    /// line ends ignored); `source` names where it came from in the error.
    public static func decode(keyID: String, base64URLKey text: SecretBytes,
                              source: String = "the external account MAC key") throws -> ACMEExternalAccount {
        guard !keyID.isEmpty else { throw MTLSError(.invalidArgument, "the external account key identifier is empty") }
        let decoded = text.withBytes { Base64URL.decode(String(decoding: $0, as: UTF8.self).trimmedSpaces) }
        guard var key = decoded, !key.isEmpty else { throw MTLSError(.invalidArgument, "\(source) does not hold a base64url MAC key") }
        defer { SecretBytes.wipe(&key) }
        return ACMEExternalAccount(keyID: keyID, hmacKey: SecretBytes(key))
    }
}

/// An ACME client (RFC 8555): account, order, challenges, finalisation and download, over
/// libmtls's own TLS under the caller's policy. One instance serves one enrollment, from one
/// thread.
///
/// - Every POST carries a fresh nonce; a `badNonce` problem is retried (up to
///   ``maxNonceRetries`` times in a row) with the nonce that came with it.
/// - Polling honours `Retry-After` (capped) and gives up after ``pollTimeout`` seconds.
/// - A problem document becomes ``MTLSError/Code/caRejected`` (or
///   ``MTLSError/Code/challengeFailed`` for a failed validation) carrying its type and detail.
package final class ACMEClient {
    let directoryURL: String
    let accountKey: PrivateKey
    let http: HTTPClient
    /// Seconds an order or authorization may stay pending.
    var pollTimeout: Double = ACMEEnrollment.defaultPollTimeout
    static let maxNonceRetries = 16
    static let maxRetryAfter = 10.0
    /// The first pause between polls when the server sends no `Retry-After`: short, because
    /// pebble and most CAs validate within a fraction of a second, so a flat 1 s wait made every
    /// renewal about a second slower than it needs to be.
    static let firstPollDelay = 0.25
    /// The longest pause between polls without `Retry-After`; the pause doubles up to it so a
    /// slow validation is not hammered.
    package static let maxPollDelay = 4.0

    /// The pause before poll number `attempt` (0-based) when the server sent no `Retry-After`:
    /// ``firstPollDelay`` doubled per attempt, capped at ``maxPollDelay``.
    package static func pollDelay(attempt: Int) -> Double {
        min(maxPollDelay, firstPollDelay * pow(2, Double(min(max(attempt, 0), 16))))
    }

    private var directory: JSONValue = .null
    private var nonces: [String] = []
    private(set) var accountURL: String?
    /// The `replaces` value the last order was created with (nil: none was sent).
    private(set) var lastOrderReplaced: String?

    init(directoryURL: String, accountKey: PrivateKey, http: HTTPClient) {
        self.directoryURL = directoryURL
        self.accountKey = accountKey
        self.http = http
    }

    // MARK: protocol steps

    private func endpoint(_ name: String) throws -> String {
        if case .null = directory {
            let r = try http.send("GET", directoryURL)
            guard r.status == 200 else { throw ACMEClient.problem(r, "reading the ACME directory \(directoryURL)") }
            directory = try JSONValue.parse(r.body, "the ACME directory")
        }
        guard let url = directory[name]?.stringValue else {
            throw MTLSError(.unsupported, "the ACME directory \(directoryURL) has no \(name)")
        }
        return url
    }

    private func nonce() throws -> String {
        if let n = nonces.popLast() { return n }
        let r = try http.send("HEAD", try endpoint("newNonce"))
        guard let n = r.header("replay-nonce") else { throw MTLSError(.parse, "the ACME server gave no Replay-Nonce") }
        return n
    }

    /// POSTs a JWS to `url` (kid once the account exists, else the JWK); `payload` nil is
    /// POST-as-GET. Retries on `badNonce`.
    private func post(_ url: String, _ payload: JSONOut?, useJWK: Bool = false, accept: String? = nil, what: String) throws -> HTTPResponse {
        var attempt = 0
        while true {
            attempt += 1
            var protected: [(String, JSONOut)] = [("nonce", .string(try nonce())), ("url", .string(url))]
            if useJWK || accountURL == nil {
                protected.insert(("jwk", try JWS.jwk(accountKey)), at: 0)
            } else if let kid = accountURL {
                protected.insert(("kid", .string(kid)), at: 0)
            }
            let body = try JWS.sign(protected: protected, payload: payload, key: accountKey)
            var headers = [("Content-Type", "application/jose+json")]
            if let accept { headers.append(("Accept", accept)) }
            let r = try http.send("POST", url, headers: headers, body: body)
            if let n = r.header("replay-nonce") { nonces = [n] }
            if r.status >= 400 {
                let type = (try? JSONValue.parse(r.body, "problem"))?["type"]?.stringValue ?? ""
                if type == "urn:ietf:params:acme:error:badNonce" && attempt <= ACMEClient.maxNonceRetries { continue }
                throw ACMEClient.problem(r, what)
            }
            return r
        }
    }

    /// Registers (or finds) the account for the key; returns its URL.
    @discardableResult
    func account(contact: [String] = [], externalAccount: ACMEExternalAccount? = nil) throws -> String {
        if let accountURL { return accountURL }
        let url = try endpoint("newAccount")
        var payload: [(String, JSONOut)] = [("termsOfServiceAgreed", .bool(true))]
        if !contact.isEmpty { payload.append(("contact", .array(contact.map { .string($0) }))) }
        if let eab = externalAccount {
            let header = Base64URL.encode(JSONOut.object([("alg", .string("HS256")), ("kid", .string(eab.keyID)), ("url", .string(url))]).text)
            let jwk = Base64URL.encode(try JWS.jwk(accountKey).text)
            let mac = try JWS.hs256(Array("\(header).\(jwk)".utf8), key: eab.hmacKey)
            payload.append(("externalAccountBinding", .object([("protected", .string(header)), ("payload", .string(jwk)),
                                                               ("signature", .string(Base64URL.encode(mac)))])))
        }
        let r = try post(url, .object(payload), useJWK: true, what: "creating the ACME account")
        guard let location = r.header("location") else { throw MTLSError(.parse, "the ACME server gave no account URL") }
        accountURL = location
        return location
    }

    /// Uses the account recorded at enrollment: later requests are signed with the key and its
    /// URL as `kid` (RFC 8555 §6.2), and no `newAccount` is sent (a server that wants a contact or
    /// an external account binding there refuses a bare one).
    func useAccount(_ url: String) {
        accountURL = url
    }

    /// Finds the key's existing account without making one (RFC 8555 §7.3.1,
    /// `onlyReturnExisting`); returns its URL. ``MTLSError/Code/caRejected`` when the server knows
    /// no account for the key (`accountDoesNotExist`).
    @discardableResult
    func existingAccount() throws -> String {
        if let accountURL { return accountURL }
        let r = try post(try endpoint("newAccount"), .object([("onlyReturnExisting", .bool(true))]), useJWK: true,
                         what: "looking up the ACME account of the recorded key")
        guard let location = r.header("location") else { throw MTLSError(.parse, "the ACME server gave no account URL") }
        accountURL = location
        return location
    }

    /// Orders a certificate for `identifiers` (DNS names or IP literals), answers each pending
    /// authorization with `method`, finalises with `csr` and returns the chain (leaf first).
    /// `replaces` (RFC 9773 §5): the ARI identifier of the certificate this order renews; sent
    /// only when the server offers renewal information, and dropped (the order retried once
    /// without it) when the server refuses it as already replaced.
    func issue(identifiers: [String], csr: CertificateSigningRequest, method: ACMEChallengeMethod,
               replaces: String? = nil) throws -> [Certificate] {
        guard accountURL != nil else { throw MTLSError(.internal, "no ACME account") }
        let ids: [JSONOut] = identifiers.map {
            .object([("type", .string(Socket.isIPLiteral($0) ? "ip" : "dns")), ("value", .string($0))])
        }
        var payload: [(String, JSONOut)] = [("identifiers", .array(ids))]
        if let replaces, try renewalInfoURL() != nil { payload.append(("replaces", .string(replaces))) }
        let sendsReplaces = payload.count > 1
        let created: HTTPResponse
        do {
            created = try post(try endpoint("newOrder"), .object(payload), what: "creating the ACME order")
        } catch let e as MTLSError where sendsReplaces && e.message.contains("alreadyReplaced") {
            // Another order already replaced this certificate (an earlier attempt that failed
            // later): a plain order still renews it.
            created = try post(try endpoint("newOrder"), .object([("identifiers", .array(ids))]), what: "creating the ACME order")
        }
        lastOrderReplaced = sendsReplaces ? replaces : nil
        guard let orderURL = created.header("location") else { throw MTLSError(.parse, "the ACME server gave no order URL") }
        var order = try JSONValue.parse(created.body, "the ACME order")
        // Every authorization is read and checked against what was ordered before any challenge
        // is answered: a CA's word alone never makes the dns-01 hook publish a record, or the
        // webroot or a responder answer, for a name the order did not ask for.
        let urls = order["authorizations"]?.arrayValue.compactMap(\.stringValue) ?? []
        guard urls.count <= identifiers.count else {
            throw MTLSError(.challengeFailed, "the ACME order lists \(urls.count) authorizations for \(identifiers.count) identifiers: refused, no challenge was answered")
        }
        var pending: [(url: String, authorization: JSONValue, identifier: String)] = []
        for url in urls {
            let authz = try JSONValue.parse(try post(url, nil, what: "reading an ACME authorization").body, "the ACME authorization")
            guard let identifier = ACMEClient.orderedIdentifier(of: authz, among: identifiers) else {
                let id = authz["identifier"]
                throw MTLSError(.challengeFailed, "the ACME server asks to authorize \(id?["type"]?.stringValue ?? "?") \"\(id?["value"]?.stringValue ?? "")\"\((authz["wildcard"]?.boolValue ?? false) ? " (wildcard)" : ""), which the order did not request: refused, no challenge was answered")
            }
            if authz["status"]?.stringValue != "valid" { pending.append((url, authz, identifier)) }
        }
        for p in pending {
            try authorize(p.url, p.authorization, identifier: p.identifier, method: method)
        }
        guard let finalizeURL = order["finalize"]?.stringValue else { throw MTLSError(.parse, "the ACME order has no finalize URL") }
        order = try poll(orderURL, what: "the ACME order", until: ["ready"], failing: ["invalid"])
        let finalized = try post(finalizeURL, .object([("csr", .string(Base64URL.encode(csr.der)))]), what: "finalizing the ACME order")
        order = try JSONValue.parse(finalized.body, "the ACME order")
        if order["status"]?.stringValue != "valid" {
            order = try poll(orderURL, what: "the ACME order", until: ["valid"], failing: ["invalid"])
        }
        guard let certURL = order["certificate"]?.stringValue else { throw MTLSError(.parse, "the valid ACME order has no certificate URL") }
        let r = try post(certURL, nil, accept: "application/pem-certificate-chain", what: "downloading the certificate")
        let chain = try Certificate.parseAll(r.body)
        guard !chain.isEmpty else { throw MTLSError(.parse, "the ACME server's certificate download holds no certificate") }
        return chain
    }

    /// The identifier an authorization is for, as it names it (without the `*.` of a
    /// wildcard), when the order asked for it (`identifiers`, as given to ``issue``): DNS names
    /// compared without regard to case, a wildcard authorization (RFC 8555 §7.1.3) only for a
    /// `*.` name ordered, IP addresses (RFC 8738) compared as addresses. nil for anything else.
    package static func orderedIdentifier(of authz: JSONValue, among identifiers: [String]) -> String? {
        guard let type = authz["identifier"]?["type"]?.stringValue, let value = authz["identifier"]?["value"]?.stringValue,
              !value.isEmpty else { return nil }
        let wildcard = authz["wildcard"]?.boolValue ?? false
        let matched = identifiers.contains { ordered in
            let orderedIsIP = Socket.isIPLiteral(ordered)
            switch type {
            case "dns":
                guard !orderedIsIP else { return false }
                return ordered.lowercased() == (wildcard ? "*." : "") + value.lowercased()
            case "ip":
                guard orderedIsIP, !wildcard, let a = IPAddress.bytes(ordered), let b = IPAddress.bytes(value) else { return false }
                return a == b
            default:
                return false
            }
        }
        return matched ? value : nil
    }

    /// Answers the pending authorization `authz` (read from `url`) for `identifier`, one the
    /// order asked for (``orderedIdentifier(of:among:)``), and waits until it is valid.
    private func authorize(_ url: String, _ authz: JSONValue, identifier: String, method: ACMEChallengeMethod) throws {
        let (token, challengeURL) = try ACMEClient.challenge(in: authz, method: method, identifier: identifier)
        let keyAuthorization = token + "." + (try JWS.thumbprint(accountKey))
        let responder = try ChallengeResponder.start(method, identifier: identifier, token: token, keyAuthorization: keyAuthorization)
        defer { responder.stop() }
        _ = try post(challengeURL, .object([]), what: "answering the \(method.type) challenge for \(identifier)")
        _ = try poll(url, what: "the authorization of \(identifier)", until: ["valid"], failing: ["invalid", "revoked", "deactivated", "expired"])
    }

    /// The token and URL of the `method` challenge an authorization offers; the token must be
    /// base64url (RFC 8555 §8.1): anything else could escape a path or a header.
    package static func challenge(in authz: JSONValue, method: ACMEChallengeMethod, identifier: String) throws -> (token: String, url: String) {
        guard let challenge = authz["challenges"]?.arrayValue.first(where: { $0["type"]?.stringValue == method.type }),
              let token = challenge["token"]?.stringValue, let challengeURL = challenge["url"]?.stringValue else {
            throw MTLSError(.unsupported, "the ACME server offers no \(method.type) challenge for \(identifier)")
        }
        guard !token.isEmpty, token.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            throw MTLSError(.parse, "the ACME challenge token is not base64url")
        }
        return (token, challengeURL)
    }

    /// What a failed order or authorization says went wrong: its first challenge error, else its own error.
    package static func failureDetail(_ object: JSONValue) -> String {
        let errors = (object["challenges"]?.arrayValue.compactMap { $0["error"] } ?? []) + [object["error"]].compactMap { $0 }
        return errors.first.map { ACMEClient.describe($0) } ?? "no detail"
    }

    /// POST-as-GETs `url` until its status is one of `until`; a status in `failing` throws with
    /// the first challenge error the object shows.
    private func poll(_ url: String, what: String, until: Set<String>, failing: Set<String>) throws -> JSONValue {
        let deadline = Deadline.now() + pollTimeout
        var attempt = 0
        while true {
            let r = try post(url, nil, what: "reading \(what)")
            let object = try JSONValue.parse(r.body, what)
            let status = object["status"]?.stringValue ?? ""
            if until.contains(status) { return object }
            if failing.contains(status) {
                throw MTLSError(.challengeFailed, "\(what) is \(status): \(ACMEClient.failureDetail(object))")
            }
            guard Deadline.now() < deadline else { throw MTLSError(.timeout, "\(what) is still \(status) after \(Int(pollTimeout)) s") }
            // Retry-After wins when the server sends it; otherwise back off exponentially.
            let wait = r.retryAfter(max: ACMEClient.maxRetryAfter) ?? ACMEClient.pollDelay(attempt: attempt)
            attempt += 1
            usleep(UInt32(max(0.05, min(wait, deadline - Deadline.now())) * 1_000_000))
        }
    }

    // MARK: renewal information (RFC 9773) and revocation

    /// The directory's `renewalInfo` URL, nil when the server offers no renewal information.
    func renewalInfoURL() throws -> String? {
        _ = try endpoint("newNonce")  // reads the directory once
        return directory["renewalInfo"]?.stringValue
    }

    /// The server's suggested renewal window for `certificate` (RFC 9773 §4.2), or nil when the
    /// directory offers no `renewalInfo`. The answer is an unauthenticated GET; its
    /// `Retry-After` says when to ask again.
    func renewalInfo(for certificate: Certificate) throws -> ACMERenewalInfo? {
        guard let base = try renewalInfoURL() else { return nil }
        let id = try ACMERenewalInfo.identifier(of: certificate)
        return try ACMEClient.renewalInfo(try http.send("GET", (base.hasSuffix("/") ? base : base + "/") + id), identifier: id)
    }

    /// The renewal information in the answer `r` to the renewalInfo GET for the certificate with ARI identifier `id`.
    package static func renewalInfo(_ r: HTTPResponse, identifier id: String) throws -> ACMERenewalInfo {
        guard r.status == 200 else { throw ACMEClient.problem(r, "reading the ACME renewal information") }
        let doc = try JSONValue.parse(r.body, "the ACME renewal information")
        guard let start = doc["suggestedWindow"]?["start"]?.stringValue.flatMap(ACMEClient.parseTime),
              let end = doc["suggestedWindow"]?["end"]?.stringValue.flatMap(ACMEClient.parseTime), end > start else {
            throw MTLSError(.parse, "the ACME renewal information has no usable suggestedWindow")
        }
        return ACMERenewalInfo(identifier: id, windowStart: start, windowEnd: end,
                               retryAfter: r.retryAfter(max: 86400 * 7), explanationURL: doc["explanationURL"]?.stringValue)
    }

    package static func parseTime(_ s: String) -> Date? {
        (try? Date.ISO8601FormatStyle().parse(s)) ?? (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(s))
    }

    /// Revokes `certificate` (RFC 8555 §7.6), signed with the account key (kid). `reason` is an
    /// RFC 5280 CRLReason code (nil: none given).
    func revoke(_ certificate: Certificate, reason: Int?) throws {
        guard accountURL != nil else { throw MTLSError(.internal, "no ACME account") }
        var payload: [(String, JSONOut)] = [("certificate", .string(Base64URL.encode(certificate.der)))]
        if let reason { payload.append(("reason", .int(reason))) }
        _ = try post(try endpoint("revokeCert"), .object(payload), what: "revoking the certificate")
    }

    /// `type: detail` of a problem document (RFC 7807), subproblems appended.
    package static func describe(_ problem: JSONValue) -> String {
        let type = (problem["type"]?.stringValue ?? "").replacing("urn:ietf:params:acme:error:", with: "")
        var text = type.isEmpty ? "" : type + ": "
        text += problem["detail"]?.stringValue ?? "no detail"
        let subs = problem["subproblems"]?.arrayValue.map { sub in
            (sub["identifier"]?["value"]?.stringValue.map { $0 + ": " } ?? "") + (sub["detail"]?.stringValue ?? "")
        } ?? []
        if !subs.isEmpty { text += " (" + subs.joined(separator: "; ") + ")" }
        // The CA's words, one clean line (they reach terminals and `renew --loop` logs).
        return OneLine.text(String(text.prefix(2048)))
    }

    /// The error for a failed response: its problem document when it has one.
    package static func problem(_ r: HTTPResponse, _ what: String) -> MTLSError {
        if let doc = try? JSONValue.parse(r.body, "problem"), doc["type"] != nil || doc["detail"] != nil {
            return MTLSError(.caRejected, "\(what): the ACME server answered \(r.status) \(describe(doc))")
        }
        return MTLSError(.caRejected, "\(what): the ACME server answered HTTP \(r.status)")
    }
}

