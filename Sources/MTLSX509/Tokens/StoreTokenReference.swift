import FoundationEssentials

/// A stored reference to an identity whose private key stays on a PKCS#11 token.
public struct StoreTokenReference: Sendable {
    /// The item's label.
    public let label: String
    /// The RFC 7512 `pkcs11:` URI of the private key (or of the token object pair).
    public let uri: String
    /// The identity's leaf certificate.
    public let certificate: Certificate
    /// Issuers above the leaf, leaf's issuer first.
    public let chain: [Certificate]

    package init(label: String, uri: String, certificate: Certificate, chain: [Certificate]) {
        self.label = label
        self.uri = uri
        self.certificate = certificate
        self.chain = chain
    }
}
