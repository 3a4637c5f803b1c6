/// The one way libmtls writes an HTTP/1.1 answer: the responder's (MTLSTLS) and the tunnel's
/// refusals of a request it cannot rewrite (``HTTPRequestRewriter``).
///
/// An answer (always `Connection: close`).
package struct HTTPAnswer: Sendable {
    package var status: Int
    package var reason: String
    package var contentType: String
    package var extraHeaders: [(String, String)]
    package var body: [UInt8]
    /// A HEAD: the headers of the answer, no body.
    package var headOnly = false

    package init(status: Int, reason: String, contentType: String = "text/plain", extraHeaders: [(String, String)] = [], body: [UInt8]) {
        self.status = status
        self.reason = reason
        self.contentType = contentType
        self.extraHeaders = extraHeaders
        self.body = body
    }

    /// A short text answer: the status and its reason as the body.
    package static func status(_ code: Int, _ reason: String, extraHeaders: [(String, String)] = []) -> HTTPAnswer {
        HTTPAnswer(status: code, reason: reason, extraHeaders: extraHeaders, body: Array("\(code) \(reason)\n".utf8))
    }

    package var bytes: [UInt8] {
        var head = "HTTP/1.1 \(status) \(reason)\r\n"
        for (name, value) in extraHeaders { head += "\(name): \(value)\r\n" }
        head += "Content-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + (headOnly ? [] : body)
    }
}
