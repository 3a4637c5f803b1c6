internal import COpenSSL
import FoundationEssentials
import Synchronization

/// A certificate revocation list read from a file, parsed once.
/// Sendable: the `X509_CRL` is only read after parsing.
public final class RevocationList: @unchecked Sendable {
    package let crl: OpaquePointer
    /// The DER encoding.
    public let der: [UInt8]
    /// The issuing distribution point's flags (``CRLCheck/covers(_:_:)``), decoded once.
    let idpFlags: Int32
    /// The issuers (DER) this CRL was verified against (``CRLCheck/verifyOnce(_:issuer:time:)``):
    /// a CRL given to a policy is verified once per issuer, not at every evaluation.
    let verifiedIssuers = Locked<[[UInt8]]>([])
    /// The file this CRL was read from (``load(path:)``), nil when parsed from memory: what a
    /// stale-CRL event names.
    public let path: String?
    /// The nextUpdate of this CRL last reported stale (``RevocationEvents/staleFile``): a CRL file
    /// past its nextUpdate is reported once per staleness, not at every evaluation.
    let staleReported = Locked<Date?>(nil)
    /// The CRL's thisUpdate and nextUpdate, read once: whether it is current is asked at every
    /// evaluation (``RevocationFreshness``).
    let thisUpdate: Date
    let nextUpdate: Date?
    /// The CRL number (big-endian, no leading zeros), nil when the CRL carries none: which of two
    /// CRLs of one issuer is newer (``CRLCheck/isNewer(_:than:)``).
    package let number: [UInt8]?

    init(takingOwnership crl: OpaquePointer, path: String? = nil) throws {
        self.crl = crl
        self.path = path
        thisUpdate = Certificate.date(X509_CRL_get0_lastUpdate(crl))
        nextUpdate = X509_CRL_get0_nextUpdate(crl).map { Certificate.date($0) }
        number = Self.crlNumber(crl)
        idpFlags = mtls_ossl_X509_CRL_idp_flags(crl)
        guard let der = derEncode({ i2d_X509_CRL(crl, $0) }) else {
            X509_CRL_free(crl)
            throw MTLSError.openSSL(.parse, "cannot encode CRL")
        }
        self.der = der
    }

    deinit { X509_CRL_free(crl) }

    /// Until when it is current under the maximum age `maxAge` (``RevocationFreshness``).
    func validUntil(maxAge: TimeInterval) -> Date {
        RevocationFreshness.validUntil(thisUpdate: thisUpdate, nextUpdate: nextUpdate, maxAge: maxAge)
    }

    private static func crlNumber(_ crl: OpaquePointer) -> [UInt8]? {
        defer { OpenSSLErrorQueue.clear() }
        guard let raw = X509_CRL_get_ext_d2i(crl, NID_crl_number, nil, nil) else { return nil }
        let n = raw.assumingMemoryBound(to: ASN1_INTEGER.self)
        defer { ASN1_INTEGER_free(n) }
        guard let bn = ASN1_INTEGER_to_BN(n, nil) else { return nil }
        defer { BN_free(bn) }
        var out = [UInt8](repeating: 0, count: Int((BN_num_bits(bn) + 7) / 8))
        let written = out.withUnsafeMutableBufferPointer { BN_bn2bin(bn, $0.baseAddress) }
        return Array(out.prefix(Int(max(0, written))))
    }

    /// Parses every CRL in `data` (PEM `X509 CRL` blocks, or one DER CRL).
    public static func parseAll(_ data: [UInt8]) throws -> [RevocationList] { try parseAll(data, path: nil) }

    /// ``parseAll(_:)``, each CRL remembering the file `path` it came from.
    static func parseAll(_ data: [UInt8], path: String?) throws -> [RevocationList] {
        guard !data.isEmpty else { throw MTLSError(.parse, "empty CRL data") }
        if Certificate.looksLikePEM(data) {
            let bio = try MemoryBIO(copying: data)
            var out: [RevocationList] = []
            while let c = PEM_read_bio_X509_CRL(bio.bio, nil, nil, nil) {
                out.append(try RevocationList(takingOwnership: c, path: path))
            }
            OpenSSLErrorQueue.clear()
            guard !out.isEmpty else { throw MTLSError(.parse, "PEM input holds no X509 CRL block") }
            return out
        }
        let crl = data.withUnsafeBufferPointer { buf -> OpaquePointer? in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_X509_CRL(nil, &p, buf.count)
        }
        guard let crl else { throw MTLSError.openSSL(.parse, "not a CRL (neither PEM nor DER)") }
        return [try RevocationList(takingOwnership: crl, path: path)]
    }

    /// Reads a file of CRLs.
    public static func load(path: String) throws -> [RevocationList] { try parseAll(FileIO.read(path), path: path) }
}
