import FoundationEssentials

extension Identity {
    /// Makes an identity from PEM text: `certificatePEM` holds the leaf and, in any order, the
    /// certificates above it; `keyPEM` the private key (see ``PrivateKey/init(pem:password:)``).
    /// The leaf is the certificate whose public key matches the key.
    ///
    /// Throws ``MTLSError/Code/keyMismatch`` when no certificate matches the key.
    public convenience init(certificatePEM: [UInt8], keyPEM: [UInt8], password: SecretBytes? = nil) throws {
        let certificates = try Certificate.parseAll(certificatePEM)
        let key = try PrivateKey(pem: keyPEM, password: password)
        guard let leaf = certificates.first(where: { key.matches($0) }) else {
            throw MTLSError(.keyMismatch, "the private key matches none of the \(certificates.count) certificate(s) given")
        }
        try self.init(privateKey: key, leaf: leaf, certificates: certificates)
    }

    /// Makes an identity from PEM files: a certificate file (leaf and, in any order, the
    /// certificates above it) and a key file (keys are small: anything over 1 MiB is refused).
    public convenience init(certificatePath: String, keyPath: String, password: SecretBytes? = nil) throws {
        try self.init(certificatePEM: try FileIO.read(certificatePath),
                      keyPEM: try FileIO.read(keyPath, limit: 1 << 20), password: password)
    }
}
