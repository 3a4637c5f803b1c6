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
    /// certificates above it) and a key file, read as a secret file
    /// (``FileIO/readSecret(_:kind:)``: refused when others can write it or everyone can read it).
    public convenience init(certificatePath: String, keyPath: String, password: SecretBytes? = nil) throws {
        var keyPEM = try FileIO.readSecret(keyPath, kind: .privateKey).withBytes { Array($0) }
        defer { SecretBytes.wipe(&keyPEM) }
        try self.init(certificatePEM: try FileIO.read(certificatePath), keyPEM: keyPEM, password: password)
    }
}
