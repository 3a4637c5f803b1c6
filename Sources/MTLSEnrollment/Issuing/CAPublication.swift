import FoundationEssentials

/// Where a CA publishes its revocation information: the URL of its CRL and, optionally, of its
/// OCSP responder. Every certificate the CA issues carries them (the CRL distribution points
/// extension and the authorityInfoAccess OCSP entry), so that verifiers can find them.
///
/// Only `http:` URLs are accepted: CRLs and OCSP responses are signed, and the checker
/// (`RevocationChecker`) fetches over plain HTTP only, as RFC 5280 and the web do.
public struct CAPublication: Hashable, Sendable {
    /// The URL the CA's CRL is served at (DER), e.g. `http://pki.example.com/customer-a.crl`.
    public var crlURL: String?
    /// The URL of the CA's OCSP responder.
    public var ocspURL: String?

    /// Nothing published: issued certificates carry neither extension.
    public static let none = CAPublication()

    /// Checks both URLs (``validate()``) on the way in.
    public init(crlURL: String? = nil, ocspURL: String? = nil) {
        self.crlURL = crlURL
        self.ocspURL = ocspURL
    }

    /// Whether anything is published.
    public var isEmpty: Bool { crlURL == nil && ocspURL == nil }

    /// Throws ``MTLSError/Code/invalidArgument`` unless each URL is an `http://host[:port]/path`
    /// of printable ASCII without spaces or commas (a comma would end the URL inside OpenSSL's
    /// extension text), and the CRL URL ends in a file name (the name `mtls pki crl --out`
    /// writes the CRL under).
    public func validate() throws {
        if let crlURL {
            try Self.check(crlURL, "CRL")
            _ = try Self.fileName(ofCRLURL: crlURL)
        }
        if let ocspURL { try Self.check(ocspURL, "OCSP") }
    }

    /// The last path segment of a CRL URL: the file name a web server serves it from.
    public static func fileName(ofCRLURL url: String) throws -> String {
        let path = url.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        let name = path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? ""
        guard let parsed = HTTPURL(url), parsed.path != "/", !name.isEmpty, name != ".", name != "..",
              !name.contains("%") else {
            throw MTLSError(.invalidArgument, "the CRL URL \"\(url)\" must end in a file name (http://host/ca.crl)")
        }
        return name
    }

    private static func check(_ url: String, _ what: String) throws {
        guard url.utf8.count <= 1024, url.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: ",") }),
              HTTPURL(url) != nil else {
            throw MTLSError(.invalidArgument, "the \(what) URL \"\(url)\" must be an http://host[:port]/path URL (printable ASCII, no commas)")
        }
    }
}
