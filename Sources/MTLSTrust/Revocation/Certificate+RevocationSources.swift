internal import COpenSSL
import FoundationEssentials

extension Certificate {
    /// The URIs of the certificate's CRL distribution points (full names; distribution points
    /// naming a cRLIssuer — indirect CRLs — or only some reasons are left out, see
    /// ``unsupportedCRLDistributionPoints``).
    public var crlDistributionPoints: [String] { Self.lines { buf, cap in
        var unsupported: Int32 = 0
        return mtls_ossl_X509_crl_uris(x509, buf, cap, &unsupported)
    } }

    /// How many CRL distribution points name a cRLIssuer (indirect CRLs), only a relative name,
    /// or only some reasons: forms libmtls does not fetch from.
    public var unsupportedCRLDistributionPoints: Int {
        var unsupported: Int32 = 0
        _ = mtls_ossl_X509_crl_uris(x509, nil, 0, &unsupported)
        return Int(unsupported)
    }

    /// The URIs of the certificate's OCSP responders (authorityInfoAccess, id-ad-ocsp).
    public var ocspResponders: [String] { Self.lines { buf, cap in mtls_ossl_X509_ocsp_uris(x509, buf, cap) } }

    /// Calls a shim that writes '\n'-terminated lines and returns the length it needs.
    private static func lines(_ fill: (UnsafeMutablePointer<CChar>?, Int) -> Int) -> [String] {
        let needed = fill(nil, 0)
        guard needed > 0 else { return [] }
        var buf = [CChar](repeating: 0, count: needed + 1)
        _ = buf.withUnsafeMutableBufferPointer { fill($0.baseAddress, $0.count) }
        let text = String(decoding: buf.prefix(needed).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.split(separator: "\n").map(String.init)
    }
}
