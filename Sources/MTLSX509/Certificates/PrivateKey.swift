internal import COpenSSL

/// A private key held by OpenSSL (in memory, or a handle whose operations run on a PKCS#11
/// token). Never serialised in the clear by libmtls. Safe to share across threads.
public final class PrivateKey: @unchecked Sendable {
    /// The OpenSSL key. Owned by this instance.
    package let pkey: OpaquePointer
    /// Where the key lives, when it is not in memory (a `pkcs11:` URI).
    public let tokenURI: String?

    /// Takes ownership of one reference to `pkey`.
    init(takingOwnership pkey: OpaquePointer, tokenURI: String? = nil) {
        self.pkey = pkey
        self.tokenURI = tokenURI
    }

    /// A new reference to the `EVP_PKEY` for APIs that take ownership. The caller frees it.
    func retainedPKey() -> OpaquePointer {
        EVP_PKEY_up_ref(pkey)
        return pkey
    }

    deinit { EVP_PKEY_free(pkey) }

    /// The key's type and size.
    public var keyType: KeyType { KeyType(pkey: pkey) }

    /// Whether this key is the private half of `certificate`'s public key.
    public func matches(_ certificate: Certificate) -> Bool {
        guard let pub = X509_get0_pubkey(certificate.x509) else { return false }
        let r = EVP_PKEY_eq(pkey, pub) == 1
        OpenSSLErrorQueue.clear()
        return r
    }
}
