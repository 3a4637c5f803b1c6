/// Renewal settings beyond the policy and the secrets.
public struct RenewalOptions: Sendable {
    /// First retry delay after a failure, in seconds (doubling up to ``backoffCap``, ±20 % jitter).
    public var backoffBase: Double = 30
    /// Longest retry delay, in seconds.
    public var backoffCap: Double = 3600
    /// Token identities: seconds after which a key replaced by a renewal is deleted from the
    /// token (with its certificate objects). nil (the default): previous keys are kept.
    public var deletePreviousTokenKeysAfter: Double? = nil

    /// The defaults: backoff from 30 s to 1 h, previous token keys kept.
    public init() {}
}
