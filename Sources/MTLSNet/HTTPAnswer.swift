/// The one way libmtls writes an HTTP/1.1 answer: the responder's (MTLSTLS) and the tunnel's
/// refusals of a request it cannot rewrite (``HTTPRequestRewriter``).
///
/// An answer (always `Connection: close`).
package struct HTTPAnswer: Sendable {
    package var status: Int
    /// The status's reason phrase (``reason(_:)``).
    package var reason: String { HTTPAnswer.reason(status) }
    package var contentType: String
    package var extraHeaders: [(String, String)]
    package var body: [UInt8]
    /// A HEAD: the headers of the answer, no body.
    package var headOnly = false

    package init(status: Int, contentType: String = "text/plain", extraHeaders: [(String, String)] = [], body: [UInt8]) {
        self.status = status
        self.contentType = contentType
        self.extraHeaders = extraHeaders
        self.body = body
    }

    /// A short text answer: the status and its reason (``reason(_:)``) as the body.
    package static func status(_ code: Int, extraHeaders: [(String, String)] = []) -> HTTPAnswer {
        HTTPAnswer(status: code, extraHeaders: extraHeaders, body: Array("\(code) \(reason(code))\n".utf8))
    }

    /// The reason phrase libmtls writes for a status (RFC 9110's), the one table of them.
    package static func reason(_ code: Int) -> String {
        switch code {
        case 200: return "OK"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 413: return "Content Too Large"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        default: return "Status \(code)"
        }
    }

    package var bytes: [UInt8] {
        var head = "HTTP/1.1 \(status) \(reason)\r\n"
        for (name, value) in extraHeaders { head += "\(name): \(value)\r\n" }
        head += "Content-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + (headOnly ? [] : body)
    }
}
