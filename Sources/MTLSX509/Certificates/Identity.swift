internal import COpenSSL
import Synchronization

/// A private key with its leaf certificate and the chain above it, ordered leaf → root.
/// Immutable; safe to share across threads.
public final class Identity: Sendable {
    /// The private key (in memory or on a token).
    public let privateKey: PrivateKey
    /// The certificate whose public key matches ``privateKey``.
    public let leaf: Certificate
    /// Issuers above the leaf, built by issuer/subject and signature links: `chain[0]` issued
    /// the leaf, `chain[1]` issued `chain[0]`, and so on. Does not contain the leaf.
    public let chain: [Certificate]
    /// Certificates that came with the identity but are not on its path (kept, not lost).
    public let extraCertificates: [Certificate]
    /// The PKCS#12 friendly name (the label a keychain shows), if any.
    public let friendlyName: String?
    /// The PKCS#12 local key id, if any.
    public let localKeyID: [UInt8]?
    /// ``chainEvaluation`` once computed.
    let evaluationCache = Locked<BasicChainEvaluation?>(nil)

    /// Makes an identity; `certificates` may be in any order and may include unrelated ones.
    /// Throws ``MTLSError/Code/keyMismatch`` when the key does not belong to `leaf`.
    public init(privateKey: PrivateKey, leaf: Certificate, certificates: [Certificate] = [],
                friendlyName: String? = nil, localKeyID: [UInt8]? = nil) throws {
        guard privateKey.matches(leaf) else {
            throw MTLSError(.keyMismatch, "the private key does not match the certificate \"\(leaf.subjectSummary)\"")
        }
        self.privateKey = privateKey
        self.leaf = leaf
        let (path, rest) = Identity.buildChain(from: leaf, using: certificates.filter { $0 != leaf })
        self.chain = path
        self.extraCertificates = rest
        self.friendlyName = friendlyName
        self.localKeyID = localKeyID
    }

    /// Rebuilds an identity that libmtls itself checked and stored: the key matched `leaf` and
    /// `orderedChain` was built leaf → root when it was put, and the store's AEAD authenticates
    /// that neither changed since. Skips the key match and the chain building (the costly part
    /// of loading). Not for anything read from outside.
    package init(verifiedStoredKey privateKey: PrivateKey, leaf: Certificate, orderedChain: [Certificate], friendlyName: String?) {
        self.privateKey = privateKey
        self.leaf = leaf
        self.chain = orderedChain
        self.extraCertificates = []
        self.friendlyName = friendlyName
        self.localKeyID = nil
    }

    /// Orders `pool` into the issuer path above `leaf` (OpenSSL's `X509_check_issued` decides
    /// each link: names, AKI/SKI and key usage), stopping at a self-issued certificate or when
    /// no issuer is found. Returns the path and what was left over.
    package static func buildChain(from leaf: Certificate, using pool: [Certificate]) -> ([Certificate], [Certificate]) {
        var remaining = pool
        var path: [Certificate] = []
        var current = leaf
        while X509_check_issued(current.x509, current.x509) != X509_V_OK,
              let i = remaining.firstIndex(where: { X509_check_issued($0.x509, current.x509) == X509_V_OK }) {
            let issuer = remaining.remove(at: i)
            path.append(issuer)
            current = issuer
        }
        OpenSSLErrorQueue.clear()
        return (path, remaining)
    }

    /// Leaf first, then the chain.
    public var allCertificates: [Certificate] { [leaf] + chain }
}
