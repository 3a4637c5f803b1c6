/// What a connection had learnt when its handshake, read or write failed: read from the error
/// (``MTLSError/connectionFailure``), so a caller of ``TLSConnection/connect(host:port:options:)-877mc``,
/// which gets no connection back, sees as much as one that called
/// ``TLSConnection/open(host:port:options:)`` and ``TLSConnection/handshake()-2mgoe`` and kept it.
public struct TLSConnectionFailure: Sendable {
    /// The side that failed or refused (also ``MTLSError/side``).
    public let side: TLSSide?
    /// The host connected to (client) or the client's address (server).
    public let peerAddress: String
    /// The chain the peer presented, leaf first, as sent (empty when it sent none).
    public let peerChain: [Certificate]
    /// Our evaluation of the peer's chain, when one was made.
    public let evaluation: TrustResult?
    /// The alert the peer sent, if any ("certificate required").
    public let receivedAlert: String?
    /// What the server asked of our certificate (client connections), if it asked.
    public let clientCertificateRequest: ClientCertificateRequest?
    /// The TLS version the hello messages agreed on, if they got that far.
    public let tlsVersion: TLSVersion?

    init(_ connection: TLSConnection) {
        side = connection.failureSide
        peerAddress = connection.peerAddress
        peerChain = connection.peerChain
        evaluation = connection.evaluation
        receivedAlert = connection.receivedAlert
        clientCertificateRequest = connection.clientCertificateRequest
        tlsVersion = connection.tlsVersion
    }
}

extension MTLSError {
    /// The details of the connection whose handshake, read or write failed with this error
    /// (its peer's chain, our evaluation, the peer's alert); nil for errors made before there was
    /// a TLS connection (a refused TCP connect, a name that does not resolve).
    public var connectionFailure: TLSConnectionFailure? { attachment as? TLSConnectionFailure }
}
