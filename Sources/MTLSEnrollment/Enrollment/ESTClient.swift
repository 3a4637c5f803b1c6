import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// An EST client (RFC 7030) over libmtls's own TLS: `/cacerts`, `/simpleenroll` (HTTP basic
/// authentication, or a bootstrap certificate through the TLS options) and `/simplereenroll`
/// (mutual TLS with the current identity). Responses are base64 PKCS#7 certs-only, parsed by
/// OpenSSL; a 202 with `Retry-After` is retried within ``pollTimeout``.
package struct ESTClient {
    /// The EST base URL, up to and including `/.well-known/est` (or an arbitrary label path).
    let baseURL: String
    let http: HTTPClient
    var pollTimeout: Double = 120

    private var base: String { baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL }

    /// The CA certificates the server distributes.
    func caCertificates() throws -> [Certificate] {
        let r = try http.send("GET", base + "/cacerts")
        guard r.status == 200 else { throw ESTClient.failure(r, "reading the EST CA certificates") }
        return try ESTClient.certificates(r.body, "the EST /cacerts answer")
    }

    /// Sends `csr` to `/simpleenroll` (or `/simplereenroll`), with basic authentication when
    /// `user` is given; returns the issued certificate.
    func enroll(_ csr: CertificateSigningRequest, reenroll: Bool, user: String?, password: SecretBytes?) throws -> Certificate {
        var headers = [("Content-Type", "application/pkcs10"), ("Content-Transfer-Encoding", "base64")]
        if let user {
            guard !user.contains(":") else { throw MTLSError(.invalidArgument, "an EST user name may not contain ':'") }
            var credentials = Array((user + ":").utf8) + (password?.withBytes { Array($0) } ?? [])
            defer { SecretBytes.wipe(&credentials) }
            headers.append(("Authorization", "Basic " + Data(credentials).base64EncodedString()))
        }
        let body = Array(Data(csr.der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed]).utf8)
        let what = reenroll ? "EST re-enrollment" : "EST enrollment"
        let deadline = Deadline.now() + pollTimeout
        while true {
            let r = try http.send("POST", base + (reenroll ? "/simplereenroll" : "/simpleenroll"), headers: headers, body: body)
            if r.status == 202 {
                guard Deadline.now() < deadline else { throw MTLSError(.timeout, "\(what) is still pending after \(Int(pollTimeout)) s") }
                usleep(UInt32((r.retryAfter(max: 60) ?? 5) * 1_000_000))
                continue
            }
            if r.status == 401 && reenroll && user == nil {
                throw MTLSError(.caRejected, "\(what): the EST server asks for HTTP authentication as well as the client certificate (HTTP 401), "
                                + "and no password was kept for it: enroll again keeping the password (mtls enroll est --keep-password; "
                                + "C: opts->keep_password = 1; Python: keep_password=True) so that renewals can send it")
            }
            guard r.status == 200 else { throw ESTClient.failure(r, what) }
            let certs = try ESTClient.certificates(r.body, "the \(what) answer")
            guard let leaf = certs.first(where: { $0.basicConstraints?.isCA != true }) ?? certs.first else {
                throw MTLSError(.parse, "the \(what) answer holds no certificate")
            }
            return leaf
        }
    }

    /// Certificates from a base64 (RFC 7030 §4.1.3) or binary PKCS#7 certs-only body.
    package static func certificates(_ body: [UInt8], _ what: String) throws -> [Certificate] {
        // Base64 is what RFC 7030 sends; some servers send the DER itself.
        if let decoded = Data(base64Encoded: Data(body), options: .ignoreUnknownCharacters),
           let certs = try? Certificate.parseAll(Array(decoded)), !certs.isEmpty {
            return certs
        }
        guard let certs = try? Certificate.parseAll(body), !certs.isEmpty else {
            throw MTLSError(.parse, "\(what) is not a PKCS#7 certs-only message")
        }
        return certs
    }

    package static func failure(_ r: HTTPResponse, _ what: String) -> MTLSError {
        // The server's words, one clean line: no control, separator or bidirectional character
        // of a body reaches a terminal or a log.
        let text = OneLine.text(utf8: r.body.prefix(512))
        switch r.status {
        case 401, 403:
            return MTLSError(.caRejected, "\(what): the EST server refused the credentials (HTTP \(r.status))\(text.isEmpty ? "" : ": " + text)")
        default:
            return MTLSError(.caRejected, "\(what): the EST server answered HTTP \(r.status)\(text.isEmpty ? "" : ": " + text)")
        }
    }
}
