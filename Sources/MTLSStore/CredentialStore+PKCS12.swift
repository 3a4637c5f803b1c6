import FoundationEssentials

extension CredentialStore {
    /// Imports a PKCS#12 file's identity under `label` in one call and returns it.
    ///
    /// The file must hold exactly one identity, or `friendlyName` must pick one of several (a
    /// Java keystore with two entries). `password: nil` is "no password", not the empty one.
    /// PKCS#12 errors (wrong password, corrupt...) are thrown as ``PKCS12/parse(_:password:)``
    /// throws them; the store is unchanged on any error.
    @discardableResult
    public func importPKCS12(_ data: [UInt8], password: SecretBytes?, label: String, replace: Bool = false,
                             friendlyName: String? = nil) throws -> Identity {
        let contents = try PKCS12.parse(data, password: password)
        let identity: Identity
        if let friendlyName {
            guard let match = contents.identities.first(where: { $0.friendlyName == friendlyName }) else {
                throw MTLSError(.noIdentity, "the PKCS#12 file has no identity named \"\(friendlyName)\"")
            }
            identity = match
        } else {
            identity = try contents.requireIdentity()
            guard contents.identities.count == 1 else {
                let names = contents.identities.map { $0.friendlyName ?? $0.leaf.subjectSummary }
                throw MTLSError(.invalidArgument, "the PKCS#12 file holds \(contents.identities.count) identities (\(names.joined(separator: ", "))); choose one by its friendly name")
            }
        }
        try putIdentity(identity, label: label, replace: replace)
        return identity
    }

    /// Exports the identity stored under `label` as a PKCS#12 file protected by `password`
    /// (modern AES-256/SHA-256 by default, or ``PKCS12ExportOptions/legacy`` for 3DES/SHA-1
    /// consumers). The label becomes the friendly name unless `options` names one.
    public func exportPKCS12(label: String, password: SecretBytes, options: PKCS12ExportOptions = .modern) throws -> [UInt8] {
        var options = options
        if options.friendlyName == nil { options.friendlyName = label }
        return try PKCS12.export(try identity(label: label), password: password, options: options)
    }
}
