internal import CMTLSHeader

/// libmtls's version: the `MTLS_VERSION_*` macros of include/mtls.h, the one place it is written.
public enum MTLSVersion {
    /// `MTLS_VERSION_MAJOR`.
    public static let major = Int(MTLS_VERSION_MAJOR)
    /// `MTLS_VERSION_MINOR`.
    public static let minor = Int(MTLS_VERSION_MINOR)
    /// `MTLS_VERSION_PATCH`.
    public static let patch = Int(MTLS_VERSION_PATCH)
    /// `major.minor.patch`, as `mtls_version()` returns it.
    public static var string: String { "\(major).\(minor).\(patch)" }
    /// `major * 10000 + minor * 100 + patch`, like `MTLS_VERSION_NUMBER`.
    public static var number: Int { major * 10000 + minor * 100 + patch }
}
