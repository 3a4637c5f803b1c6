internal import COpenSSL
import FoundationEssentials

/// An ACME server's renewal information for one certificate (RFC 9773).
public struct ACMERenewalInfo: Sendable, Equatable {
    /// The certificate's ARI identifier (also sent as `replaces` in the renewing order).
    public var identifier: String
    /// The suggested window.
    public var windowStart: Date
    /// The end of the suggested window.
    public var windowEnd: Date
    /// Seconds after which to ask again (the response's `Retry-After`), if given.
    public var retryAfter: Double?
    /// A page explaining the window (a mass revocation...), if given.
    public var explanationURL: String?

    /// A point in the window, the same for the same certificate and window (so checks made
    /// every few minutes do not each draw a new time), spread across a fleet by the
    /// certificate's own hash — the jitter RFC 9773 §4.2 asks for.
    public func chosenTime(for certificate: Certificate) -> Date {
        windowStart.addingTimeInterval(windowEnd.timeIntervalSince(windowStart) * Enrollment.hashFraction(certificate))
    }

    /// The certificate's ARI identifier (RFC 9773 §4.1): base64url of its authority key
    /// identifier's keyIdentifier, ".", base64url of its serial number's DER content octets.
    /// ``MTLSError/Code/unsupported`` for a certificate without an authority key identifier.
    public static func identifier(of certificate: Certificate) throws -> String {
        guard let aki = X509_get0_authority_key_id(certificate.x509), ASN1_STRING_length(aki) > 0,
              let akiData = ASN1_STRING_get0_data(aki) else {
            throw MTLSError(.unsupported, "the certificate has no authority key identifier: no ACME renewal information for it")
        }
        let keyID = Array(UnsafeBufferPointer(start: akiData, count: Int(ASN1_STRING_length(aki))))
        // The INTEGER's content octets: the serial's magnitude, with a leading zero when its top
        // bit is set (a positive INTEGER in DER). Serials are positive (RFC 5280 §4.1.2.2).
        guard let asn1 = X509_get0_serialNumber(certificate.x509), let bn = ASN1_INTEGER_to_BN(asn1, nil) else {
            throw MTLSError.openSSL(.parse, "the certificate's serial number is unreadable")
        }
        defer { BN_free(bn) }
        var serial = [UInt8](repeating: 0, count: Int((BN_num_bits(bn) + 7) / 8))
        guard BN_bn2bin(bn, &serial) == Int32(serial.count), let first = serial.first else {
            throw MTLSError(.parse, "the certificate's serial number is unreadable")
        }
        return Base64URL.encode(keyID) + "." + Base64URL.encode(first >= 0x80 ? [0] + serial : serial)
    }

}
