import FoundationEssentials

/// What a certificate is for. The profile decides the extensions a new certificate carries and
/// how long it lives by default.
///
/// | profile        | basicConstraints         | keyUsage                                   | EKU        | default |
/// |----------------|--------------------------|--------------------------------------------|------------|---------|
/// | `root`         | critical, CA:TRUE        | critical keyCertSign, cRLSign              | —          | 20 y    |
/// | `intermediate` | critical, CA:TRUE, pathlen:0 | critical keyCertSign, cRLSign          | —          | 10 y    |
/// | `server`       | critical, CA:FALSE       | critical digitalSignature (+keyEncipherment for RSA) | serverAuth | 3 y |
/// | `client`       | critical, CA:FALSE       | critical digitalSignature                  | clientAuth | 3 y     |
///
/// Every certificate carries a subject key identifier; all but the root carry an authority key
/// identifier.
public enum CertificateProfile: String, Sendable, CaseIterable {
    /// A self-signed root CA.
    case root
    /// An intermediate CA under the root (pathlen 0: it issues only end entities).
    case intermediate
    /// A TLS server certificate (serverAuth, DNS/IP SANs).
    case server
    /// A TLS client certificate (clientAuth).
    case client

    /// How long a certificate of this profile lives when the request does not say.
    public var defaultValidityDays: Int {
        switch self {
        case .root: return 20 * 365 + 5
        case .intermediate: return 10 * 365 + 2
        case .server, .client: return 3 * 365 + 1
        }
    }

    /// Whether certificates of this profile are certificate authorities.
    public var isCA: Bool { self == .root || self == .intermediate }
}

/// Everything a new certificate needs besides its public key and its issuer.
public struct CertificateRequest: Sendable {
    /// Decides the extensions and the default lifetime.
    public var profile: CertificateProfile
    /// The subject's common name (`CN=`), 1 to 64 characters.
    public var commonName: String
    /// DNS names for the subjectAltName extension (`*.example.com` wildcards allowed).
    public var dnsNames: [String]
    /// IPv4 or IPv6 literals for the subjectAltName extension.
    public var ipAddresses: [String]
    /// Lifetime in days; nil for the profile's default. Never extends past the issuer's own
    /// expiry: a longer request is shortened to it.
    public var validityDays: Int?

    /// A request for a `profile` certificate named `commonName`; each parameter sets the
    /// property of the same name. Checked when the certificate is issued.
    public init(profile: CertificateProfile, commonName: String, dnsNames: [String] = [],
                ipAddresses: [String] = [], validityDays: Int? = nil) {
        self.profile = profile
        self.commonName = commonName
        self.dnsNames = dnsNames
        self.ipAddresses = ipAddresses
        self.validityDays = validityDays
    }

    /// The common name a certificate gets when the caller names none: the CSR's CN, else the
    /// first DNS name, else the first IP address. The one fallback of `mtls pki` and the C ABI.
    /// Throws ``MTLSError/Code/invalidArgument`` when there is nothing to take it from.
    public static func commonName(given: String?, csr: CertificateSigningRequest? = nil, dnsNames: [String] = [],
                                  ipAddresses: [String] = []) throws -> String {
        if let cn = given ?? csr?.commonName ?? dnsNames.first ?? ipAddresses.first { return cn }
        throw MTLSError(.invalidArgument, csr == nil ? "give a name (CN), a DNS name or an IP address"
                                                     : "the CSR has no CN, and there is no DNS name or IP address: give a name")
    }

    /// Checks the request on its own, before any key or issuer is involved.
    func validate() throws {
        let cn = commonName
        guard !cn.isEmpty, cn.unicodeScalars.count <= 64 else {
            throw MTLSError(.invalidArgument, "the name must be 1 to 64 characters long (got \(cn.unicodeScalars.count))")
        }
        guard !cn.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw MTLSError(.invalidArgument, "the name must not contain control characters")
        }
        if let days = validityDays, !(1...(100 * 366)).contains(days) {
            throw MTLSError(.invalidArgument, "validity must be between 1 and 36600 days (got \(days))")
        }
        for name in dnsNames where !Self.isValidDNSName(name) {
            throw MTLSError(.invalidArgument, "not a valid DNS name: \"\(name)\"")
        }
        for ip in ipAddresses where IPAddress.bytes(ip) == nil {
            throw MTLSError(.invalidArgument, "not an IP address: \"\(ip)\"")
        }
        if profile.isCA, !(dnsNames.isEmpty && ipAddresses.isEmpty) {
            throw MTLSError(.invalidArgument, "a CA certificate does not take DNS or IP names")
        }
        if profile == .server, dnsNames.isEmpty, ipAddresses.isEmpty {
            throw MTLSError(.invalidArgument, "a server certificate needs at least one DNS name or IP address")
        }
    }

    /// A DNS name as RFC 1035 letters-digits-hyphens labels, lowercase or not, with an optional
    /// leading `*.` wildcard label; at most 253 characters, labels at most 63.
    static func isValidDNSName(_ name: String) -> Bool {
        var labels = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard name.utf8.count <= 253, !labels.isEmpty else { return false }
        if labels.count > 1, labels[0] == "*" { labels.removeFirst() }
        return labels.allSatisfy { label in
            guard (1...63).contains(label.utf8.count), !label.hasPrefix("-"), !label.hasSuffix("-") else { return false }
            return label.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c == 0x2d || c == 0x5f
            }
        }
    }
}
