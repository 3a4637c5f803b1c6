internal import COpenSSL
import FoundationEssentials

// This file owns the Prometheus scrape endpoint (`mtls serve --metrics-port`, issue 26): what it
// answers and who may ask. The serving itself (concurrent clients, deadlines, the cap) is the one
// small responder of libmtls, `HTTPResponder`.

/// A Prometheus scrape endpoint, on the loopback address unless told otherwise: `GET /metrics`
/// (or `/`) answers the text `body` makes, as `text/plain; version=0.0.4`; HEAD the same headers;
/// another method 405, another path 404, a request that is not HTTP/1.x 400, a request head over
/// ``maxRequestHead`` bytes 431. With a bearer token, a request without
/// `Authorization: Bearer <token>` is answered 401 and sees nothing.
///
/// Served by `HTTPResponder` on a thread of its own (`mtls-metrics`): each client has
/// ``requestTimeout`` seconds for its request head and as long again to take the answer; at
/// most ``maxClients`` are open at once (the oldest is closed for a newcomer). It never touches
/// the TLS listener it reports on.
public final class MetricsEndpoint: Sendable {
    /// The port listened on (the one the system picked when 0 was asked for).
    public let port: UInt16
    private let responder: HTTPResponder

    /// The most clients open at once.
    public static let maxClients = HTTPResponder.maxClients
    /// The largest request head (request line and headers) read.
    public static let maxRequestHead = HTTPResponder.maxRequestHead
    /// Seconds a client has to send its whole request head (and, again, to take the answer).
    public static let requestTimeout = HTTPResponder.requestTimeout
    /// The address listened on unless another is given: the loopback address.
    public static let defaultAddress = "127.0.0.1"

    /// Listens on 127.0.0.1:`port` (0: an ephemeral port) and answers scrapes with `body()`,
    /// called once per scrape on the endpoint's thread.
    public convenience init(port: UInt16, body: @escaping @Sendable () -> String) throws {
        try self.init(address: MetricsEndpoint.defaultAddress, port: port, bearerToken: nil, body: body)
    }

    /// Listens on `address` (an IP literal or host name; ``defaultAddress`` unless told
    /// otherwise) and `port`. With `bearerToken` (read with ``FileIO/readSecret(_:kind:)`` and
    /// ``FileIO/SecretKind/bearerToken`` from a token file), only requests carrying
    /// `Authorization: Bearer <token>` are answered with the metrics; the others get 401.
    ///
    /// With `tls`, the endpoint speaks HTTPS through a ``TLSListener`` with these options: its
    /// identity, and, to let only some scrapers in, a client certificate required
    /// (``TLSServerOptions/clientAuthentication``) and judged by its client policy or overrides
    /// (Prometheus scrapes with TLS client certificates). Both may be asked: a token and a certificate.
    public init(address: String, port: UInt16, bearerToken: SecretBytes?, tls: TLSServerOptions? = nil,
                body: @escaping @Sendable () -> String) throws {
        if let bearerToken, bearerToken.count == 0 { throw MTLSError(.invalidArgument, "metrics endpoint: the bearer token is empty") }
        let expected = bearerToken.map { t in t.withBytes { Array($0) } }
        let handler: @Sendable (HTTPRequest) -> HTTPAnswer = { request in MetricsEndpoint.answer(to: request, token: expected, body: body) }
        do {
            if let tls {
                responder = try HTTPResponder(listener: TLSListener(address: address, port: port, options: tls), threadName: "mtls-metrics",
                                              handler: handler)
            } else {
                responder = try HTTPResponder(address: address, port: port, threadName: "mtls-metrics", handler: handler)
            }
        } catch let e as MTLSError {
            throw MTLSError(e.code, "metrics endpoint: \(e.message)") // which of a server's ports failed
        }
        self.port = responder.port
    }

    deinit { close() }

    /// Stops listening; the endpoint's thread closes every client and ends within 250 ms.
    public func close() { responder.close() }

    /// The answer to one request (`body` is called only for a scrape that may see it).
    package static func answer(to request: HTTPRequest, token: [UInt8]?, body: () -> String) -> HTTPAnswer {
        guard request.method == "GET" || request.method == "HEAD" else {
            return .status(405, extraHeaders: [("Allow", "GET, HEAD")])
        }
        guard request.path == "/metrics" || request.path == "/" else { return .status(404) }
        if let token, !MetricsEndpoint.authorized(request.header("authorization"), token: token) {
            return .status(401, extraHeaders: [("WWW-Authenticate", "Bearer realm=\"mtls-metrics\"")])
        }
        return HTTPAnswer(status: 200, contentType: "text/plain; version=0.0.4", body: Array(body().utf8))
    }

    /// Whether `authorization` is `Bearer <token>` (the scheme case-insensitive), compared in constant time.
    static func authorized(_ authorization: String?, token: [UInt8]) -> Bool {
        guard let authorization, authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else { return false }
        let given = Array(authorization.dropFirst(7).trimmedSpaces.utf8)
        guard given.count == token.count else { return false }
        return CRYPTO_memcmp(given, token, token.count) == 0
    }
}
