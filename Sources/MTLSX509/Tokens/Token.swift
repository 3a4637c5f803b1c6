internal import COpenSSL
internal import CP11Kit
import FoundationEssentials

/// Identities whose private key stays on a PKCS#11 token (see ``Token/identity(uri:modulePath:pin:pinCallback:allowFinalTry:)``);
/// ``PKCS11Modules`` lists tokens and their objects.
public enum Token {}

/// Called when a token needs the user PIN. Returns the PIN, or nil to give up
/// (``MTLSError/Code/pinRequired``). May throw to abort with its own error.
public typealias TokenPINCallback = @Sendable (_ request: TokenPINRequest) throws -> SecretBytes?

/// What a PIN callback is told.
public struct TokenPINRequest: Sendable {
    /// The token's label and URI.
    public let tokenLabel: String
    /// The token's RFC 7512 URI.
    public let tokenURI: String
    /// The token says some wrong PINs were entered, or that the next wrong one locks it.
    public let countLow: Bool
    /// The next wrong PIN locks the token's PIN.
    public let finalTry: Bool
    /// The token as it is at the time of asking, with all its flags (locked, login required,
    /// PIN pad, PIN initialised...).
    public let token: TokenInfo
}
