import FoundationEssentials

extension ClientIdentity {
    /// The identity in a PKCS#12 file (its first private key).
    public static func pkcs12(path: String, password: SecretBytes?) throws -> ClientIdentity {
        .identity(try PKCS12.load(path: path, password: password).requireIdentity())
    }

    /// The identity stored under `label`.
    public static func stored(label: String, in store: CredentialStore) throws -> ClientIdentity {
        .identity(try store.identity(label: label))
    }

    /// Automatic choice among every identity in `store` and every token identity it refers to
    /// (see ``candidates(_:)``): stored identities first, then token identities, each in label
    /// order. A token identity's PIN is `tokenPIN`, else `pinCallback`, else its URI's
    /// pin-value/pin-source. Enrollment records (``EnrollmentRecord``: the ACME account key and
    /// its self-signed carrier) are never candidates.
    public static func automatic(from store: CredentialStore, tokenPIN: SecretBytes? = nil,
                                 pinCallback: TokenPINCallback? = nil) throws -> ClientIdentity {
        // identities() leaves enrollment records out (the one rule, in the store).
        let stored = try store.identities().map { IdentityCandidate($0) }
        let tokens = try store.tokenIdentities().map { IdentityCandidate(token: $0, pin: tokenPIN, pinCallback: pinCallback) }
        return .candidates(stored + tokens)
    }
}
