internal import COpenSSL
package import CP11Kit
internal import CMTLSProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a token key's private operations need: the session they sign on (which keeps the
/// module loaded and the user logged in), the private key object's handle, the signature
/// mechanisms the token has, and (for a `CKA_ALWAYS_AUTHENTICATE` key) where the PIN of the
/// context-specific login before each signature comes from.
///
/// Owned by the OpenSSL key object (libmtls's provider holds one reference, dropped when OpenSSL
/// frees the key), so a TLS context that still holds the `EVP_PKEY` keeps the session open after
/// every Swift object is gone. Thread-safe: signatures are serialised on the session.
package final class TokenKeyContext: @unchecked Sendable {
    package let session: PKCS11Session
    let key: CK_OBJECT_HANDLE
    /// The key's URI, for messages.
    let uri: String
    /// The token's mechanisms (C_GetMechanismList, asked when a TLS context is set up, not when
    /// the identity is opened): they decide the TLS signature schemes offered.
    var mechanisms: Set<CK_MECHANISM_TYPE> { Self.mechanisms(session) }
    /// Set for a `CKA_ALWAYS_AUTHENTICATE` key: the PIN for the login before each signature
    /// (asked each time, so a PIN callback is asked per signature).
    package let contextPIN: (@Sendable () throws -> SecretBytes?)?
    /// Signatures made on the token so far (what tests use to prove the token signed).
    package let signatureCount = Atomic<Int>(0)
    /// Context-specific logins made so far.
    package let contextLoginCount = Atomic<Int>(0)

    init(session: PKCS11Session, key: CK_OBJECT_HANDLE, uri: String, contextPIN: (@Sendable () throws -> SecretBytes?)? = nil) {
        self.session = session
        self.key = key
        self.uri = uri
        self.contextPIN = contextPIN
    }

    private static func mechanisms(_ session: PKCS11Session) -> Set<CK_MECHANISM_TYPE> {
        let f = session.f
        var count: CK_ULONG = 0
        guard f.C_GetMechanismList(session.slot, nil, &count) == CKR_OK, count > 0 else { return [] }
        var list = [CK_MECHANISM_TYPE](repeating: 0, count: Int(count))
        guard f.C_GetMechanismList(session.slot, &list, &count) == CKR_OK else { return [] }
        return Set(list.prefix(Int(count)))
    }

    /// Signs on the token: `C_SignInit`, the context-specific login when the key needs one,
    /// `C_Sign`. Errors name the key and carry the token codes (removed, PIN...).
    package func sign(mechanism: CK_MECHANISM_TYPE, parameter: UnsafeMutableRawBufferPointer? = nil,
              input: UnsafeBufferPointer<UInt8>, maxLength: Int) throws -> [UInt8] {
        // The PIN is read before the session is locked (a PIN callback may take its time).
        var pin: SecretBytes? = nil
        if let contextPIN {
            pin = try contextPIN()
            if pin == nil { throw MTLSError(.pinRequired, "token key \(uri) needs its PIN for each signature (CKA_ALWAYS_AUTHENTICATE), and none was given") }
        }
        do {
            // The session reopens itself when the token went away and is back (or in a fork()ed
            // child): see PKCS11Session.sign.
            let signature = try session.sign(key: key, mechanism: mechanism, parameter: parameter, contextPIN: pin,
                                             input: input, maxLength: maxLength)
            if pin != nil { contextLoginCount.add(1, ordering: .relaxed) }
            signatureCount.add(1, ordering: .relaxed)
            return signature
        } catch let e as MTLSError {
            throw MTLSError(e.code, "token key \(uri): \(e.message)")
        }
    }

    /// The TLS signature schemes (OpenSSL's names) this key can make with the token's
    /// mechanisms, for a key of OpenSSL type `keyType`.
    package func signatureSchemes(keyType: Int32) -> [String] {
        let mechanisms = self.mechanisms
        var out: [String] = []
        switch keyType {
        case EVP_PKEY_RSA:
            if mechanisms.contains(CK_MECHANISM_TYPE(CKM_RSA_PKCS_PSS)) {
                out += ["rsa_pss_rsae_sha256", "rsa_pss_rsae_sha384", "rsa_pss_rsae_sha512"]
            }
            if mechanisms.contains(CK_MECHANISM_TYPE(CKM_RSA_PKCS)) {
                out += ["rsa_pkcs1_sha256", "rsa_pkcs1_sha384", "rsa_pkcs1_sha512"]
            }
        case EVP_PKEY_EC:
            if mechanisms.contains(CK_MECHANISM_TYPE(CKM_ECDSA)) {
                out += ["ecdsa_secp256r1_sha256", "ecdsa_secp384r1_sha384", "ecdsa_secp521r1_sha512"]
            }
        case EVP_PKEY_ED25519:
            if mechanisms.contains(CK_MECHANISM_TYPE(CKM_EDDSA)) { out.append("ed25519") }
        default:
            break
        }
        return out
    }
}

/// Makes `EVP_PKEY`s whose private operations run on a PKCS#11 token.
///
/// The keys belong to libmtls's OpenSSL 3 provider (`Sources/CMTLSProvider`, loaded only into a
/// library context of libmtls's own, ``LibraryContext/tokenKeys``): its key management holds the token reference and the public half, and its
/// signature operations (RSA PKCS#1 v1.5 and PSS, ECDSA, Ed25519) call ``TokenKeyContext/sign``
/// through the callbacks below. OpenSSL's TLS stack signs with such a key like any other, TLS 1.2
/// and 1.3. The private half cannot be exported: the provider exports only the public half.
package enum TokenKey {
    /// A new `EVP_PKEY` (one reference, owned by the caller) with `publicKey`'s public half
    /// and private operations signed on the token through `context`.
    static func make(publicKey: OpaquePointer, context: TokenKeyContext) throws -> OpaquePointer {
        guard let keys = LibraryContext.shared.tokenKeys else {
            throw MTLSError(.internal, "libmtls's token key provider could not be loaded")
        }
        let type = EVP_PKEY_get_base_id(publicKey)
        guard type == EVP_PKEY_RSA || type == EVP_PKEY_EC || type == EVP_PKEY_ED25519 else {
            throw MTLSError(.unsupported, "token keys of type \(KeyType(pkey: publicKey).shortName) are not supported (RSA, EC and Ed25519 are)")
        }
        let ref = Unmanaged.passRetained(context).toOpaque()
        // The key retains its own reference; ours is dropped either way.
        defer { Unmanaged<TokenKeyContext>.fromOpaque(ref).release() }
        guard let pkey = mtlsp_make_key(keys, publicKey, ref) else {
            throw MTLSError.openSSL(.internal, "cannot make the OpenSSL key object for the token key")
        }
        OpenSSLErrorQueue.clear()
        return pkey
    }

    /// The token context of a key made by ``make(publicKey:context:)``, nil for other keys.
    package static func context(of key: PrivateKey) -> TokenKeyContext? {
        context(pkey: key.pkey)
    }

    static func context(pkey: OpaquePointer) -> TokenKeyContext? {
        guard let p = mtlsp_key_ref(pkey) else { return nil }
        return Unmanaged<TokenKeyContext>.fromOpaque(p).takeUnretainedValue()
    }

    /// The signature schemes (OpenSSL's sigalgs list) `key` can make, or nil when it is not a
    /// token key (any scheme of its type then).
    package static func signatureAlgorithms(_ key: PrivateKey) throws -> String? {
        guard let context = context(of: key) else { return nil }
        let schemes = context.signatureSchemes(keyType: EVP_PKEY_get_base_id(key.pkey))
        guard !schemes.isEmpty else {
            throw MTLSError(.unsupported, "the token of key \(context.uri) has no signature mechanism for its \(key.keyType.shortName) key (C_GetMechanismList)")
        }
        return schemes.joined(separator: ":")
    }

    /// Every TLS signature scheme libmtls accepts from a peer, in OpenSSL's names (what a server
    /// with a token key still offers for client signatures).
    package static let allSignatureSchemes = "ecdsa_secp256r1_sha256:ecdsa_secp384r1_sha384:ecdsa_secp521r1_sha512:ed25519:ed448:rsa_pss_pss_sha256:rsa_pss_pss_sha384:rsa_pss_pss_sha512:rsa_pss_rsae_sha256:rsa_pss_rsae_sha384:rsa_pss_rsae_sha512:rsa_pkcs1_sha256:rsa_pkcs1_sha384:rsa_pkcs1_sha512"

    /// The TLS SignatureScheme code points (RFC 8446 4.2.3) of OpenSSL's scheme names.
    package static let schemeCodes: [String: UInt16] = [
        "rsa_pkcs1_sha256": 0x0401, "rsa_pkcs1_sha384": 0x0501, "rsa_pkcs1_sha512": 0x0601,
        "ecdsa_secp256r1_sha256": 0x0403, "ecdsa_secp384r1_sha384": 0x0503, "ecdsa_secp521r1_sha512": 0x0603,
        "rsa_pss_rsae_sha256": 0x0804, "rsa_pss_rsae_sha384": 0x0805, "rsa_pss_rsae_sha512": 0x0806,
        "ed25519": 0x0807,
    ]

    /// Reports a failed token operation to OpenSSL (it becomes part of the TLS error) and keeps
    /// it for ``takeFailure()`` on this thread.
    fileprivate static func report(_ error: Error) {
        let failure = (error as? MTLSError) ?? MTLSError(.token, "\(error)")
        mtls_ossl_raise_message("\(failure.message) [\(failure.code.name)]")
        FailureSlot.set(failure)
    }

    /// The token failure behind the OpenSSL error now at the front of this thread's queue, if
    /// there is one (a TLS handshake uses it so a removed token is ``MTLSError/Code/tokenRemoved``,
    /// a lost login ``MTLSError/Code/pinRequired``..., not a generic handshake error). Clears it.
    package static func takeFailure() -> MTLSError? {
        guard let failure = FailureSlot.take() else { return nil }
        return ERR_GET_LIB(ERR_peek_error()) == ERR_LIB_USER ? failure : nil
    }

    /// The provider's callbacks (process-wide; the per-key state is the reference they get).
    static let callbacks = mtlsp_callbacks(
        sign: { ref, scheme, mdNID, mgf1NID, saltLength, input, inputLength, out, outLength in
            guard let ref, let out, let outLength else { return 0 }
            let context = Unmanaged<TokenKeyContext>.fromOpaque(ref).takeUnretainedValue()
            do {
                let capacity = outLength.pointee
                let data = UnsafeBufferPointer(start: input, count: input == nil ? 0 : inputLength)
                let sig: [UInt8]
                switch scheme {
                case Int32(MTLSP_RSA_PKCS):
                    sig = try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_RSA_PKCS), input: data, maxLength: capacity)
                case Int32(MTLSP_RSA_PSS):
                    guard let hash = digestMechanism(mdNID), let mgf = mgf1(mgf1NID), saltLength >= 0 else {
                        throw MTLSError(.unsupported, "RSA-PSS with this digest is not supported with token keys")
                    }
                    var params = CK_RSA_PKCS_PSS_PARAMS(hashAlg: hash, mgf: mgf, sLen: CK_ULONG(saltLength))
                    sig = try withUnsafeMutableBytes(of: &params) { p in
                        try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_RSA_PKCS_PSS), parameter: p, input: data, maxLength: capacity)
                    }
                case Int32(MTLSP_ECDSA):
                    sig = try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_ECDSA), input: data, maxLength: capacity)
                case Int32(MTLSP_EDDSA):
                    sig = try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_EDDSA), input: data, maxLength: capacity)
                default:
                    throw MTLSError(.internal, "unknown token signature scheme \(scheme)")
                }
                guard sig.count <= capacity else { throw MTLSError(.token, "the token returned a \(sig.count)-byte signature (at most \(capacity) expected)") }
                sig.withUnsafeBufferPointer { if let b = $0.baseAddress { out.update(from: b, count: sig.count) } }
                outLength.pointee = sig.count
                return 1
            } catch {
                TokenKey.report(error)
                return 0
            }
        },
        retain: { ref in if let ref { _ = Unmanaged<TokenKeyContext>.fromOpaque(ref).retain() } },
        release: { ref in if let ref { Unmanaged<TokenKeyContext>.fromOpaque(ref).release() } }
    )

    private static func digestMechanism(_ nid: Int32) -> CK_MECHANISM_TYPE? {
        switch nid {
        case NID_sha1: return CK_MECHANISM_TYPE(CKM_SHA_1)
        case NID_sha224: return CK_MECHANISM_TYPE(CKM_SHA224)
        case NID_sha256: return CK_MECHANISM_TYPE(CKM_SHA256)
        case NID_sha384: return CK_MECHANISM_TYPE(CKM_SHA384)
        case NID_sha512: return CK_MECHANISM_TYPE(CKM_SHA512)
        default: return nil
        }
    }

    private static func mgf1(_ nid: Int32) -> CK_RSA_PKCS_MGF_TYPE? {
        switch nid {
        case NID_sha1: return CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA1)
        case NID_sha224: return CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA224)
        case NID_sha256: return CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA256)
        case NID_sha384: return CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA384)
        case NID_sha512: return CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA512)
        default: return nil
        }
    }
}

/// The last token failure on each thread (signature callbacks cannot throw through OpenSSL).
private enum FailureSlot {
    final class Box { let error: MTLSError; init(_ e: MTLSError) { error = e } }
    static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { p in
            if let p { Unmanaged<Box>.fromOpaque(p).release() }
        }
        return key
    }()

    static func set(_ error: MTLSError) {
        _ = take()
        pthread_setspecific(key, Unmanaged.passRetained(Box(error)).toOpaque())
    }

    static func take() -> MTLSError? {
        guard let p = pthread_getspecific(key) else { return nil }
        pthread_setspecific(key, nil)
        return Unmanaged<Box>.fromOpaque(p).takeRetainedValue().error
    }
}
