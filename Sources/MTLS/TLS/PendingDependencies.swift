// TEMPORARY: the PKCS#12 engineer's `PrivateKey(pem:password:)`, needed by the connection tests
// before Sources/MTLS/PKCS12/ lands. Deleted when it does.
internal import COpenSSL

extension PrivateKey {
    public convenience init(pem: [UInt8], password: SecretBytes?) throws {
        let bio = try MemoryBIO(copying: pem)
        var pw = Array((password.map { s in s.withBytes { Array($0) } } ?? []) + [0])
        defer { SecretBytes.wipe(&pw) }
        let key = pw.withUnsafeMutableBytes { p in
            PEM_read_bio_PrivateKey_ex(bio.bio, nil, nil, password == nil ? nil : p.baseAddress, LibraryContext.shared.ctx, nil)
        }
        guard let key else { throw MTLSError.openSSL(.parse, "cannot read the PEM private key") }
        self.init(takingOwnership: key)
    }
}
