// The TLS side of the one HTTP client (Sources/MTLSNet/HTTPClient.swift): net cannot name TLS,
// so `https:` exchanges reach it through these conformances.

extension TLSConnection: HTTPStream {}

extension TLSClientOptions: HTTPSConnector {
    /// A blocking TLS connection to `host:port`, the host as the server name unless one is set;
    /// the connect and the handshake share the exchange's deadline.
    package func openHTTPStream(host: String, port: UInt16, deadline: Deadline) throws -> any HTTPStream {
        var options = self
        if options.serverName == nil && !Socket.isIPLiteral(host) { options.serverName = host }
        options.nonBlocking = false
        // A tiny positive value once the deadline is spent: 0 would mean the default.
        if let left = deadline.remaining {
            options.connectSeconds = max(left, 0.001)
            options.handshakeSeconds = max(left, 0.001)
        }
        return try TLSConnection.connect(host: host, port: port, options: options)
    }
}
