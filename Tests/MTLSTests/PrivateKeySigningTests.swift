import COpenSSL
import XCTest
@testable import MTLS

/// `PrivateKey.sign(_:tlsSignatureScheme:)`, the signatures another TLS stack (MTLSNIOSSL) asks
/// libmtls for: each scheme a key offers verifies with OpenSSL as that scheme says (hash, and
/// PSS with a digest-long salt for `rsa_pss_rsae_*`), and a scheme of another key type is refused.
final class PrivateKeySigningTests: XCTestCase {
    /// Verifies `signature` over `message` with `key`'s public half, as `scheme` says.
    func verifies(_ key: PrivateKey, _ scheme: UInt16, _ message: [UInt8], _ signature: [UInt8]) -> Bool {
        verifies(key.pkey, scheme, message, signature)
    }

    /// Verifies with a public key (`EVP_PKEY`), as `scheme` says.
    func verifies(_ publicKey: OpaquePointer, _ scheme: UInt16, _ message: [UInt8], _ signature: [UInt8]) -> Bool {
        let digest: OpaquePointer?
        switch scheme & 0xff00 {
        case 0x0400: digest = EVP_sha256()
        case 0x0500: digest = EVP_sha384()
        case 0x0600: digest = EVP_sha512()
        default:
            switch scheme {
            case 0x0804: digest = EVP_sha256()
            case 0x0805: digest = EVP_sha384()
            case 0x0806: digest = EVP_sha512()
            default: digest = nil
            }
        }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer? = nil
        guard EVP_DigestVerifyInit(context, &keyContext, digest, nil, publicKey) == 1 else { return false }
        if (0x0804...0x0806).contains(scheme) {
            guard EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PSS_PADDING) == 1,
                  EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, RSA_PSS_SALTLEN_DIGEST) == 1 else { return false }
        }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    func testEverySchemeAKeyOffersVerifies() throws {
        let message = Array("TLS 1.3, server CertificateVerify".utf8)
        let expected: [(KeySpec, [UInt16])] = [
            (.ecP256, [0x0403]), (.ecP384, [0x0503]), (.ed25519, [0x0807]),
            (.rsa(bits: 2048), [0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0601]),
        ]
        for (spec, schemes) in expected {
            let key = try PrivateKey.generate(spec)
            XCTAssertEqual(try key.tlsSignatureSchemes(), schemes, "\(spec)")
            for scheme in schemes {
                let signature = try key.sign(message, tlsSignatureScheme: scheme)
                XCTAssertTrue(verifies(key, scheme, message, signature), "\(spec) 0x\(String(scheme, radix: 16))")
                XCTAssertFalse(verifies(key, scheme, message + [0], signature), "\(spec): a signature over another message verified")
            }
        }
    }

    func testSchemeOfAnotherKeyTypeIsUnsupported() throws {
        let ec = try PrivateKey.generate(.ecP256)
        expectCode(.unsupported) { _ = try ec.sign([1, 2, 3], tlsSignatureScheme: 0x0804) }
        let rsa = try PrivateKey.generate(.rsa(bits: 2048))
        expectCode(.unsupported) { _ = try rsa.sign([1, 2, 3], tlsSignatureScheme: 0x0807) }
        expectCode(.unsupported) { _ = try rsa.sign([1, 2, 3], tlsSignatureScheme: 0x0201) }
    }

    /// A key generated on the SoftHSM token signs there: the signature verifies with the
    /// certificate's key, and the token offers the schemes its mechanisms allow.
    func testTokenKeySignsOnTheToken() throws {
        setenv("SOFTHSM2_CONF", SoftHSMFixture.dir + "/softhsm2.conf", 1)
        for object in ["ec-client", "rsa-client"] {
            let identity = try Token.identity(uri: "pkcs11:token=mtls-test;object=\(object)", modulePath: SoftHSMFixture.module,
                                              pin: SoftHSMFixture.pin)
            let schemes = try identity.privateKey.tlsSignatureSchemes()
            XCTAssertFalse(schemes.isEmpty, object)
            let message = Array("signed on the token".utf8)
            for scheme in schemes {
                let signature = try identity.privateKey.sign(message, tlsSignatureScheme: scheme)
                // Verified with the certificate's key (OpenSSL's own code, not the token's).
                let publicKey = try XCTUnwrap(X509_get0_pubkey(identity.leaf.x509))
                XCTAssertTrue(verifies(publicKey, scheme, message, signature), "\(object) 0x\(String(scheme, radix: 16))")
            }
        }
    }
}
