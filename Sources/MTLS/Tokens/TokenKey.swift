internal import COpenSSL
internal import CP11Kit
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a token key's private operations need: the session they sign on (which keeps the
/// module loaded and the user logged in) and the private key object's handle.
///
/// Owned by the OpenSSL key object (its ex_data holds one reference, dropped when OpenSSL frees
/// the key), so a TLS context that still holds the `EVP_PKEY` keeps the session open after every
/// Swift object is gone. Thread-safe: signatures are serialised on the session.
final class TokenKeyContext: @unchecked Sendable {
    let session: PKCS11Session
    let key: CK_OBJECT_HANDLE
    /// The key's URI, for messages.
    let uri: String
    /// Signatures made on the token so far (what tests use to prove the token signed).
    let signatureCount = Atomic<Int>(0)

    init(session: PKCS11Session, key: CK_OBJECT_HANDLE, uri: String) {
        self.session = session
        self.key = key
        self.uri = uri
    }

    /// Signs on the token. Errors name the key and carry the token codes (removed, PIN...).
    func sign(mechanism: CK_MECHANISM_TYPE, input: UnsafeBufferPointer<UInt8>, maxLength: Int) throws -> [UInt8] {
        do {
            let signature = try session.sign(key: key, mechanism: mechanism, input: input, maxLength: maxLength)
            signatureCount.add(1, ordering: .relaxed)
            return signature
        } catch let e as MTLSError {
            throw MTLSError(e.code, "token key \(uri): \(e.message)")
        }
    }
}

/// Makes `EVP_PKEY`s whose private operations run on a PKCS#11 token.
///
/// OpenSSL 3.0 treats an RSA or EC_KEY object with a method other than its own as a "foreign"
/// key and sends every operation on it through the legacy EVP_PKEY methods, which call the
/// key's method: `RSA_METHOD.rsa_priv_enc` (PKCS#1 v1.5 input arrives as a DigestInfo,
/// RSA-PSS input arrives already padded, with RSA_NO_PADDING) and `EC_KEY_METHOD.sign_sig`.
/// That is also the path OpenSSL's TLS stack takes, so TLS 1.2 and 1.3 handshakes sign on the
/// token without the TLS code knowing. Public operations stay OpenSSL's own.
enum TokenKey {
    /// A new `EVP_PKEY` (one reference, owned by the caller) with `publicKey`'s public half
    /// and private operations signed on the token through `context`.
    static func make(publicKey: OpaquePointer, context: TokenKeyContext) throws -> OpaquePointer {
        guard let pkey = EVP_PKEY_new() else { throw MTLSError(.noMemory, "EVP_PKEY_new failed") }
        let ctx = Unmanaged.passRetained(context).toOpaque()
        switch EVP_PKEY_get_base_id(publicKey) {
        case EVP_PKEY_RSA:
            guard let rsa = legacyRSA(publicKey) else { break }
            guard RSA_set_method(rsa, tokenRSAMethod) == 1, RSA_set_ex_data(rsa, rsaContextIndex, ctx) == 1 else {
                RSA_free(rsa)
                break
            }
            // From here the RSA object owns the context reference (released by its ex_data free).
            guard mtls_ossl_EVP_PKEY_assign_RSA(pkey, rsa) == 1 else { RSA_free(rsa); EVP_PKEY_free(pkey); throw MTLSError.openSSL(.internal, "EVP_PKEY_assign_RSA failed") }
            OpenSSLErrorQueue.clear()
            return pkey
        case EVP_PKEY_EC:
            guard let ec = legacyEC(publicKey) else { break }
            guard EC_KEY_set_method(ec, tokenECMethod) == 1, EC_KEY_set_ex_data(ec, ecContextIndex, ctx) == 1 else {
                EC_KEY_free(ec)
                break
            }
            guard mtls_ossl_EVP_PKEY_assign_EC_KEY(pkey, ec) == 1 else { EC_KEY_free(ec); EVP_PKEY_free(pkey); throw MTLSError.openSSL(.internal, "EVP_PKEY_assign_EC_KEY failed") }
            OpenSSLErrorQueue.clear()
            return pkey
        default:
            Unmanaged<TokenKeyContext>.fromOpaque(ctx).release()
            EVP_PKEY_free(pkey)
            throw MTLSError(.unsupported, "token keys of type \(KeyType(pkey: publicKey).shortName) are not supported (RSA and EC are)")
        }
        // The key object could not take the context: drop the reference it would have held.
        // (An RSA/EC_KEY freed above after a failed set_ex_data never held it.)
        Unmanaged<TokenKeyContext>.fromOpaque(ctx).release()
        EVP_PKEY_free(pkey)
        throw MTLSError.openSSL(.internal, "cannot make the OpenSSL key object for the token key")
    }

    // A fresh legacy key object with the certificate key's public half, built from its parameters
    // (the certificate's own EVP_PKEY caches a legacy copy that must not get our method, and
    // re-decoding the DER would go through OpenSSL 3's slow decoder lookup).

    private static func legacyRSA(_ publicKey: OpaquePointer) -> OpaquePointer? {
        var n: OpaquePointer? = nil, e: OpaquePointer? = nil
        guard EVP_PKEY_get_bn_param(publicKey, "n", &n) == 1, EVP_PKEY_get_bn_param(publicKey, "e", &e) == 1,
              let rsa = RSA_new() else {
            BN_free(n); BN_free(e)
            return nil
        }
        guard RSA_set0_key(rsa, n, e, nil) == 1 else {
            BN_free(n); BN_free(e); RSA_free(rsa)
            return nil
        }
        return rsa
    }

    private static func legacyEC(_ publicKey: OpaquePointer) -> OpaquePointer? {
        var name = [CChar](repeating: 0, count: 80)
        var nameLength = 0
        guard EVP_PKEY_get_utf8_string_param(publicKey, "group", &name, name.count, &nameLength) == 1 else { return nil }
        var nid = OBJ_sn2nid(name)
        if nid == NID_undef { nid = EC_curve_nist2nid(name) }
        var length = 0
        guard nid != NID_undef, EVP_PKEY_get_octet_string_param(publicKey, "encoded-pub-key", nil, 0, &length) == 1,
              let ec = EC_KEY_new_by_curve_name(nid) else { return nil }
        var point = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_get_octet_string_param(publicKey, "encoded-pub-key", &point, point.count, &length) == 1,
              EC_KEY_oct2key(ec, point, length, nil) == 1 else {
            EC_KEY_free(ec)
            return nil
        }
        return ec
    }

    /// The token context of a key made by ``make(publicKey:context:)``, nil for other keys.
    static func context(of key: PrivateKey) -> TokenKeyContext? {
        switch EVP_PKEY_get_base_id(key.pkey) {
        case EVP_PKEY_RSA:
            guard let rsa = EVP_PKEY_get0_RSA(key.pkey), RSA_get_method(rsa) == tokenRSAMethod else { return nil }
            return context(rsa: rsa)
        case EVP_PKEY_EC:
            guard let ec = EVP_PKEY_get0_EC_KEY(key.pkey), EC_KEY_get_method(ec) == tokenECMethod else { return nil }
            return context(ec: ec)
        default:
            return nil
        }
    }

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
    static func takeFailure() -> MTLSError? {
        guard let failure = FailureSlot.take() else { return nil }
        return ERR_GET_LIB(ERR_peek_error()) == ERR_LIB_USER ? failure : nil
    }

    fileprivate static func context(rsa: OpaquePointer?) -> TokenKeyContext? {
        guard let rsa, let p = RSA_get_ex_data(rsa, rsaContextIndex) else { return nil }
        return Unmanaged<TokenKeyContext>.fromOpaque(p).takeUnretainedValue()
    }

    fileprivate static func context(ec: OpaquePointer?) -> TokenKeyContext? {
        guard let ec, let p = EC_KEY_get_ex_data(ec, ecContextIndex) else { return nil }
        return Unmanaged<TokenKeyContext>.fromOpaque(p).takeUnretainedValue()
    }
}

/// The last token failure on each thread (signature hooks cannot throw through OpenSSL).
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

// MARK: OpenSSL hooks (process-wide, created once; the per-key state is in ex_data)

/// ex_data slots holding one retained ``TokenKeyContext``, released when OpenSSL frees the key.
private let rsaContextIndex: Int32 = mtls_ossl_RSA_get_ex_new_index { _, ptr, _, _, _, _ in
    if let ptr { Unmanaged<TokenKeyContext>.fromOpaque(ptr).release() }
}
private let ecContextIndex: Int32 = mtls_ossl_EC_KEY_get_ex_new_index { _, ptr, _, _, _, _ in
    if let ptr { Unmanaged<TokenKeyContext>.fromOpaque(ptr).release() }
}

/// OpenSSL's RSA method with the private operations replaced.
nonisolated(unsafe) private let tokenRSAMethod: OpaquePointer = {
    guard let m = RSA_meth_dup(RSA_PKCS1_OpenSSL()) else { fatalError("libmtls: RSA_meth_dup failed") }
    _ = RSA_meth_set1_name(m, "libmtls PKCS#11 token key")
    _ = RSA_meth_set_flags(m, RSA_meth_get_flags(m) | RSA_METHOD_FLAG_NO_CHECK)
    _ = RSA_meth_set_priv_enc(m) { flen, from, to, rsa, padding -> Int32 in
        guard let from, let to, flen >= 0, let context = TokenKey.context(rsa: rsa) else {
            TokenKey.report(MTLSError(.internal, "token RSA key without its token context"))
            return -1
        }
        let mechanism: CK_MECHANISM_TYPE
        switch padding {
        case RSA_PKCS1_PADDING: mechanism = CK_MECHANISM_TYPE(CKM_RSA_PKCS)   // DigestInfo in, PKCS#1 v1.5 on the token
        case RSA_NO_PADDING: mechanism = CK_MECHANISM_TYPE(CKM_RSA_X_509)     // PSS-encoded block in, raw RSA on the token
        default:
            TokenKey.report(MTLSError(.unsupported, "RSA padding \(padding) is not supported with token keys"))
            return -1
        }
        let size = Int(RSA_size(rsa))
        do {
            let sig = try context.sign(mechanism: mechanism, input: UnsafeBufferPointer(start: from, count: Int(flen)),
                                       maxLength: size)
            guard sig.count <= size else { throw MTLSError(.token, "the token returned a \(sig.count)-byte RSA signature for a \(size)-byte key") }
            // Left-pad to the modulus size (a token may drop leading zero bytes).
            memset(to, 0, size - sig.count)
            sig.withUnsafeBufferPointer { (to + (size - sig.count)).update(from: $0.baseAddress!, count: sig.count) }
            return Int32(size)
        } catch {
            TokenKey.report(error)
            return -1
        }
    }
    _ = RSA_meth_set_priv_dec(m) { _, _, _, _, _ -> Int32 in
        TokenKey.report(MTLSError(.unsupported, "decryption with a token key is not supported (only signing)"))
        return -1
    }
    return m
}()

/// OpenSSL's EC_KEY method with ECDSA signing replaced (`sign` stays OpenSSL's, which calls
/// `sign_sig` and DER-encodes the result).
nonisolated(unsafe) private let tokenECMethod: OpaquePointer = {
    guard let m = EC_KEY_METHOD_new(EC_KEY_OpenSSL()) else { fatalError("libmtls: EC_KEY_METHOD_new failed") }
    typealias Sign = @convention(c) (Int32, UnsafePointer<UInt8>?, Int32, UnsafeMutablePointer<UInt8>?,
                                     UnsafeMutablePointer<UInt32>?, OpaquePointer?, OpaquePointer?, OpaquePointer?) -> Int32
    var sign: Sign? = nil
    var setup: (@convention(c) (OpaquePointer?, OpaquePointer?, UnsafeMutablePointer<OpaquePointer?>?,
                                UnsafeMutablePointer<OpaquePointer?>?) -> Int32)? = nil
    EC_KEY_METHOD_get_sign(m, &sign, &setup, nil)
    EC_KEY_METHOD_set_sign(m, sign, setup) { dgst, dlen, _, _, ec -> OpaquePointer? in
        guard let dgst, dlen >= 0, let context = TokenKey.context(ec: ec), let group = EC_KEY_get0_group(ec) else {
            TokenKey.report(MTLSError(.internal, "token EC key without its token context"))
            return nil
        }
        let fieldBytes = (Int(EC_GROUP_order_bits(group)) + 7) / 8
        do {
            // CKM_ECDSA signs the digest as given and returns r || s, each as long as the order.
            let raw = try context.sign(mechanism: CK_MECHANISM_TYPE(CKM_ECDSA),
                                       input: UnsafeBufferPointer(start: dgst, count: Int(dlen)),
                                       maxLength: 2 * fieldBytes + 16)
            guard !raw.isEmpty, raw.count % 2 == 0 else {
                throw MTLSError(.token, "the token returned a malformed \(raw.count)-byte ECDSA signature")
            }
            let half = raw.count / 2
            guard let sig = ECDSA_SIG_new() else { throw MTLSError(.noMemory, "ECDSA_SIG_new failed") }
            let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(half), nil) }
            let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + half, Int32(half), nil) }
            guard let r, let s, ECDSA_SIG_set0(sig, r, s) == 1 else {
                BN_free(r); BN_free(s); ECDSA_SIG_free(sig)
                throw MTLSError(.noMemory, "cannot build the ECDSA signature")
            }
            return sig
        } catch {
            TokenKey.report(error)
            return nil
        }
    }
    return m
}()
