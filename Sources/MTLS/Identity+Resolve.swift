import FoundationEssentials

extension Identity {
    /// The identity a user names, the way every front end takes it (the `--identity` of the
    /// command line, `mtls_identity_resolve`, Python's `Identity.resolve`):
    /// - with `keyPath`: `name` is a PEM file with the certificate (leaf first, then its chain)
    ///   and `keyPath` the PEM private key (`password` for an encrypted one);
    /// - a `pkcs11:` URI: the token identity it names (PIN: `pin`, else the URI's);
    /// - a file (a name ending in `.p12`/`.pfx`, or any file that exists): a PKCS#12 file
    ///   opened with `password` (none: both encodings of "no password" are tried);
    /// - otherwise a label in `store`: a stored identity, else a stored token identity (opened
    ///   with `pin`).
    ///
    /// `allowFinalTry`: send `pin` even to a token at its final PIN try (see
    /// ``Token/identity(uri:modulePath:pin:pinCallback:allowFinalTry:)``).
    ///
    /// Errors: those of each source; ``MTLSError/Code/invalidArgument`` for a label with no
    /// store; ``MTLSError/Code/notFound`` for a label the store does not hold.
    public static func resolve(_ name: String, keyPath: String? = nil, password: SecretBytes? = nil,
                               pin: SecretBytes? = nil, allowFinalTry: Bool = false,
                               store: CredentialStore? = nil) throws -> Identity {
        try resolve(name, keyPath: keyPath, password: password, pin: pin, allowFinalTry: allowFinalTry, openStore: { store })
    }

    /// Same as ``resolve(_:keyPath:password:pin:allowFinalTry:store:)``, with a store that is opened (by
    /// `openStore`, which may return nil for "no store") only when `name` is a label.
    public static func resolve(_ name: String, keyPath: String? = nil, password: SecretBytes? = nil,
                               pin: SecretBytes? = nil, allowFinalTry: Bool = false,
                               openStore: () throws -> CredentialStore?) throws -> Identity {
        if let keyPath {
            return try Identity(certificatePath: name, keyPath: keyPath, password: password)
        }
        if PKCS11URI.isPKCS11URI(name) {
            return try Token.identity(uri: name, pin: pin, allowFinalTry: allowFinalTry)
        }
        let lower = name.lowercased()
        if lower.hasSuffix(".p12") || lower.hasSuffix(".pfx") || FileManager.default.fileExists(atPath: name) {
            return try PKCS12.load(path: name, password: password).requireIdentity()
        }
        // A value written as a path (./alice, ../x, /etc/x, ~/x) is a file that is missing, never a label.
        if name.hasPrefix("/") || name.hasPrefix("./") || name.hasPrefix("../") || name.hasPrefix("~") {
            throw MTLSError(.notFound, "no such file: \(name) (a path, not a store label: check the path)")
        }
        guard let store = try openStore() else {
            throw MTLSError(.invalidArgument, "\"\(name)\" is not a file, and a store label needs a store")
        }
        do {
            return try store.identity(label: name)
        } catch let e as MTLSError where e.code == .notFound {
            // A token identity stored under the label (`mtls store add-token`).
            guard let reference = try? store.tokenIdentity(label: name) else { throw e }
            return try Token.identity(reference: reference, pin: pin, allowFinalTry: allowFinalTry)
        }
    }
}
