/// The two ends of a TLS connection.
public enum TLSSide: String, Sendable {
    /// The end that connected.
    case client
    /// The end that accepted.
    case server
}

