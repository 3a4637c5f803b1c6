/// libmtls's version. Keep in step with `MTLS_VERSION_*` in include/mtls.h.
public enum MTLSVersion {
    public static let major = 0
    public static let minor = 1
    public static let patch = 0
    public static var string: String { "\(major).\(minor).\(patch)" }
    /// `major * 10000 + minor * 100 + patch`, like `MTLS_VERSION_NUMBER`.
    public static var number: Int { major * 10000 + minor * 100 + patch }
}
