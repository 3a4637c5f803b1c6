internal import CP11Kit
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// This file owns how a token URI is made safe to store: rebuilt by p11-kit without its PIN.

extension PKCS11URI {
    /// `text` without the PIN p11-kit reads from it, and whether it had one. The URI is parsed by
    /// p11-kit and, when the parse holds a `pin-value` (given in the query or among the path
    /// attributes, in any spelling p11-kit accepts), formatted again by p11-kit from its parsed
    /// form with the PIN cleared — no string matching. A URI without a PIN is returned as given.
    /// Throws ``MTLSError/Code/badURI`` for what p11-kit does not parse.
    static func withoutPINValue(_ text: String) throws -> (uri: String, stripped: Bool) {
        let parsed = try P11KitURI(text)
        guard p11_kit_uri_get_pin_value(parsed.uri) != nil else { return (text, false) }
        p11_kit_uri_set_pin_value(parsed.uri, nil)
        var out: UnsafeMutablePointer<CChar>? = nil
        guard p11_kit_uri_format(parsed.uri, P11_KIT_URI_FOR_ANY, &out) == P11_KIT_URI_OK.rawValue, let out else {
            throw MTLSError(.internal, "p11_kit_uri_format failed")
        }
        defer { free(out) }
        let rebuilt = String(cString: out)
        // The rebuilt URI must parse to the same thing minus the PIN (p11-kit's own round trip).
        let check = try P11KitURI(rebuilt)
        guard p11_kit_uri_get_pin_value(check.uri) == nil else {
            throw MTLSError(.internal, "p11-kit kept a PIN in a URI formatted without one")
        }
        return (rebuilt, true)
    }
}
