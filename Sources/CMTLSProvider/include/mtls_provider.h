#ifndef MTLS_PROVIDER_H
#define MTLS_PROVIDER_H
/* libmtls's OpenSSL 3 provider for PKCS#11 token keys (internal: no symbol leaves libmtls.so).
 *
 * The provider ("mtls-token") has key management for RSA, EC (P-256, P-384...) and Ed25519 keys
 * whose private half stays on a token, and the signature operations on them: RSA PKCS#1 v1.5
 * and RSA-PSS, ECDSA, Ed25519. Each signature is made by the Swift core's sign callback (C_Sign
 * on the token's session). It is loaded only into an OSSL_LIB_CTX of libmtls's own that has no
 * other provider; the host program's default context never sees it. A key object holds the token reference (retained through the
 * callbacks) and the key's public half as an OpenSSL public key; it exports the public half only
 * (never a selection with the private key), so OpenSSL can never move the key to another
 * provider for a signature (which could not sign with it). */
#include <stddef.h>
#include <openssl/evp.h>

#define MTLSP_NAME "mtls-token"

/* What a token signature is asked to do. */
enum {
    MTLSP_RSA_PKCS = 1,  /* CKM_RSA_PKCS: `in` is the DER DigestInfo (or raw data when no digest is set) */
    MTLSP_RSA_PSS = 2,   /* CKM_RSA_PKCS_PSS: `in` is the hash; md_nid/mgf1_nid/salt_len are its parameters */
    MTLSP_ECDSA = 3,     /* CKM_ECDSA: `in` is the hash; the token returns r || s */
    MTLSP_EDDSA = 4,     /* CKM_EDDSA (pure Ed25519): `in` is the message */
};

typedef struct {
    /* Signs on the token. Writes at most *out_len bytes to `out` and sets *out_len; returns 1,
       or 0 after putting the failure on OpenSSL's error queue. */
    int (*sign)(void *ref, int scheme, int md_nid, int mgf1_nid, int salt_len,
                const unsigned char *in, size_t in_len, unsigned char *out, size_t *out_len);
    void (*retain)(void *ref);
    void (*release)(void *ref);
} mtlsp_callbacks;

/* Registers the provider with `key_libctx` (OSSL_PROVIDER_add_builtin) and loads it there:
   a library context of libmtls's own that holds this provider and OpenSSL's "base" provider
   (encoders only) alone, so no fetch but those for
   the token keys themselves ever finds its algorithms (OpenSSL fetches a key's signature from the
   key's own provider when no other provider can take the key). Public keys and digests come from
   `main_libctx`. The callbacks are process-wide and set once. Returns 1 on success. */
__attribute__((visibility("hidden"))) int mtlsp_load(OSSL_LIB_CTX *key_libctx, OSSL_LIB_CTX *main_libctx,
                                                     const mtlsp_callbacks *callbacks);

/* A new EVP_PKEY (one reference, the caller's) of the provider in `libctx`, whose public half is
   `public_key`'s (an RSA, EC or Ed25519 key) and whose signatures go to the sign callback with
   `ref` (retained by the key, released when OpenSSL frees it). NULL when the key type is not
   supported or OpenSSL fails (its error queue says why). */
__attribute__((visibility("hidden"))) EVP_PKEY *mtlsp_make_key(OSSL_LIB_CTX *libctx, const EVP_PKEY *public_key, void *ref);

/* The reference of a key made by mtlsp_make_key (not retained), or NULL for any other key. */
__attribute__((visibility("hidden"))) void *mtlsp_key_ref(const EVP_PKEY *pkey);

/* Whether `libctx` (NULL: the default context) has the provider loaded. */
__attribute__((visibility("hidden"))) int mtlsp_available(OSSL_LIB_CTX *libctx);

#endif
