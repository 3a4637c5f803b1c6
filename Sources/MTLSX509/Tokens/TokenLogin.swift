internal import COpenSSL
internal import CP11Kit
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where a PIN came from. A static PIN (given by the caller, the URI's `pin-value`, the file a
/// `pin-source` names) is the same on every try, so libmtls guards the token against it; a PIN
/// from a callback is typed (or chosen) afresh, and the callback is told the token's flags.
enum PINOrigin {
    case callback
    case given
    case uriValue
    case uriSource(String)

    var isStatic: Bool { if case .callback = self { return false } else { return true } }

    var description: String {
        switch self {
        case .callback: return "the PIN callback"
        case .given: return "the PIN given"
        case .uriValue: return "the URI's pin-value"
        case .uriSource(let s): return "the PIN file \(s)"
        }
    }
}

/// Logging in with the rules that keep an unattended client from locking a token:
/// - a static PIN the token refused is not sent to that token again while it is the same PIN
///   (changing the file, the URI or the PIN given is what "the source changed" means); the
///   refusal is remembered for the life of the process, as a salted digest, never the PIN;
/// - a static PIN is not sent to a token whose flags say the next wrong PIN locks it
///   (CKF_USER_PIN_FINAL_TRY), unless the caller allows it;
/// - a locked PIN is reported without trying.
package enum TokenLogin {
    /// Digests of (token, PIN) pairs the token refused.
    private static let refused = Locked<Set<[UInt8]>>([])
    /// A per-process salt so that the digests say nothing about the PIN outside this process.
    private static let salt: [UInt8] = {
        var s = [UInt8](repeating: 0, count: 32)
        if RAND_bytes(&s, 32) != 1 {
            // Without randomness the digests are still one-way; only the salt is weaker.
            var t = timespec()
            clock_gettime(CLOCK_MONOTONIC, &t)
            s = Encoding.sha256(Array("\(t.tv_sec).\(t.tv_nsec).\(getpid())".utf8))
        }
        return s
    }()

    private static func digest(token: TokenInfo, pin: SecretBytes) -> [UInt8] {
        var input = salt + Array(token.uri.utf8) + [0]
        pin.withBytes { input += $0 }
        defer { SecretBytes.wipe(&input) }
        return Encoding.sha256(input)
    }

    /// The token's information as it is now (flags change with every wrong PIN).
    static func freshInfo(_ session: PKCS11Session, fallback: TokenInfo) -> TokenInfo {
        (try? TokenInfo(module: session.module, slot: session.slot)).flatMap { $0 } ?? fallback
    }

    /// Logs the user in on `session`. `pin` nil uses the token's PIN pad. `known`: the token's
    /// information as the caller read it just before choosing the PIN (``freshInfo(_:fallback:)``).
    /// It is read again only after a PIN callback, which may have waited for a person while the
    /// flags changed; a static PIN follows that read at once (one `C_GetTokenInfo` less per
    /// login: SoftHSM2 reads the token's file for each, about 50 µs, issue 40).
    static func logIn(session: PKCS11Session, token known: TokenInfo, pin: SecretBytes?, origin: PINOrigin,
                      allowFinalTry: Bool) throws {
        let token = origin.isStatic ? known : freshInfo(session, fallback: known)
        if token.userPINLocked {
            throw MTLSError(.pinLocked, "the user PIN of token \"\(token.label)\" is locked")
        }
        var key: [UInt8]?
        if let pin, origin.isStatic {
            let d = digest(token: token, pin: pin)
            key = d
            if refused.withLock({ $0.contains(d) }) {
                throw MTLSError(.pinIncorrect, "token \"\(token.label)\" already refused \(origin.description); it is not sent again until it changes (each wrong PIN spends one of the token's tries)")
            }
            if token.userPINFinalTry && !allowFinalTry {
                throw MTLSError(.pinLocked, "token \"\(token.label)\" is at its final PIN try (one more wrong PIN locks it): \(origin.description) is not sent; give the PIN interactively, or allow the final try explicitly")
            }
        }
        do {
            try session.login(pin: pin)
            if let key { _ = refused.withLock { $0.remove(key) } }
        } catch let e as MTLSError {
            switch e.code {
            case .pinIncorrect:
                if let key { _ = refused.withLock { $0.insert(key) } }
                throw MTLSError(.pinIncorrect, "wrong PIN for token \"\(token.label)\" (\(origin.description)): \(e.message)"
                                + triesNotReported(freshInfo(session, fallback: token)))
            case .pinLocked:
                throw MTLSError(.pinLocked, "the user PIN of token \"\(token.label)\" is locked: \(e.message)")
            default:
                throw e
            }
        }
    }

    /// What a wrong-PIN error adds when the token, just after refusing a PIN, reports neither
    /// CKF_USER_PIN_COUNT_LOW nor CKF_USER_PIN_FINAL_TRY (PKCS#11 sets the first after any wrong
    /// PIN on a token that counts its tries; tpm2-pkcs11 never reports either, a TPM's lockout
    /// being its own): the final-try protection cannot work there.
    static func triesNotReported(_ token: TokenInfo) -> String {
        guard !token.userPINCountLow, !token.userPINFinalTry, !token.userPINLocked else { return "" }
        return "; this token does not report its PIN tries (no CKF_USER_PIN_COUNT_LOW or _FINAL_TRY, as with tpm2-pkcs11), "
            + "so libmtls cannot hold a PIN back at a final try: check the PIN before trying again"
    }

    /// Forgets every refused PIN (tests; a program that knows its PIN files changed).
    package static func forgetRefusedPINs() { refused.withLock { $0.removeAll() } }
}
