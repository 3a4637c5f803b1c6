/* libmtls's OpenSSL 3 provider for PKCS#11 token keys: see include/mtls_provider.h.
 *
 * Only signing runs here; hashing, DigestInfo and AlgorithmIdentifier encoding, and the DER
 * ECDSA-Sig-Value are OpenSSL's own functions. The token signs through the Swift core's
 * callback (PKCS11Session.sign, which serialises use of the PKCS#11 session). */
#include "mtls_provider.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core.h>
#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/params.h>
#include <openssl/provider.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* The parameter mtlsp_make_key passes to the key import (never set by anyone else: OpenSSL
   only imports into this provider what another provider exported, which has no such name). */
#define PARAM_HANDOFF "mtls-token-handoff"
/* The parameter that reads a key's token reference back (mtlsp_key_ref). */
#define PARAM_REF "mtls-token-ref"
#define HANDOFF_MAGIC 0x6d746c73u

enum key_type { KT_RSA = 1, KT_EC = 2, KT_ED25519 = 3 };

static mtlsp_callbacks callbacks;
/* Where public keys and digests come from (libmtls's main context, with the default provider). */
static OSSL_LIB_CTX *public_libctx;

typedef struct {
    OSSL_LIB_CTX *libctx;
} prov_ctx;

typedef struct {
    prov_ctx *prov;
    enum key_type type;
    EVP_PKEY *pub;  /* the public half, a key of the default provider */
    void *ref;      /* the token key (NULL: a public key imported for a comparison) */
} token_key;

struct handoff {
    uint32_t magic;
    const EVP_PKEY *pub;
    void *ref;
};

static void fail(const char *message) {
    ERR_raise_data(ERR_LIB_USER, ERR_R_OPERATION_FAIL, "libmtls token provider: %s", message);
}

static const char *type_name(enum key_type t) {
    switch (t) {
    case KT_RSA: return "RSA";
    case KT_EC: return "EC";
    case KT_ED25519: return "ED25519";
    }
    return NULL;
}

/* ---- key management ---- */

static token_key *key_new(void *provctx, enum key_type type) {
    token_key *k = OPENSSL_zalloc(sizeof *k);
    if (k == NULL) return NULL;
    k->prov = provctx;
    k->type = type;
    return k;
}
static void *rsa_new(void *provctx) { return key_new(provctx, KT_RSA); }
static void *ec_new(void *provctx) { return key_new(provctx, KT_EC); }
static void *ed25519_new(void *provctx) { return key_new(provctx, KT_ED25519); }

static void key_free(void *keydata) {
    token_key *k = keydata;
    if (k == NULL) return;
    if (k->ref != NULL && callbacks.release != NULL) callbacks.release(k->ref);
    EVP_PKEY_free(k->pub);
    OPENSSL_free(k);
}

static int key_has(const void *keydata, int selection) {
    const token_key *k = keydata;
    if (k == NULL) return 0;
    if ((selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY) != 0 && k->ref == NULL) return 0;
    if ((selection & (OSSL_KEYMGMT_SELECT_PUBLIC_KEY | OSSL_KEYMGMT_SELECT_ALL_PARAMETERS)) != 0 && k->pub == NULL)
        return 0;
    return 1;
}

/* Two keys match when their public halves do (a private half never leaves the token to be
   compared). */
static int key_match(const void *a, const void *b, int selection) {
    const token_key *k1 = a, *k2 = b;
    (void)selection;
    if (k1 == NULL || k2 == NULL || k1->pub == NULL || k2->pub == NULL || k1->type != k2->type) return 0;
    return EVP_PKEY_eq(k1->pub, k2->pub) == 1;
}

/* Either the hand-off from mtlsp_make_key, or the public half of another provider's key (what
   OpenSSL imports to compare a certificate's key with this one). Private components, if any
   were offered, are never taken. */
static int key_import(void *keydata, int selection, const OSSL_PARAM params[]) {
    token_key *k = keydata;
    if (k == NULL || k->pub != NULL) return 0;
    const OSSL_PARAM *p = OSSL_PARAM_locate_const(params, PARAM_HANDOFF);
    if (p != NULL) {
        const void *v = NULL;
        size_t len = 0;
        struct handoff h;
        if (!OSSL_PARAM_get_octet_string_ptr(p, &v, &len) || len != sizeof h) return 0;
        memcpy(&h, v, sizeof h);
        if (h.magic != HANDOFF_MAGIC || h.pub == NULL || h.ref == NULL) return 0;
        if (!EVP_PKEY_up_ref((EVP_PKEY *)h.pub)) return 0;
        k->pub = (EVP_PKEY *)h.pub;
        k->ref = h.ref;
        callbacks.retain(k->ref);
        return 1;
    }
    if ((selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY) == 0) return 0;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(public_libctx, type_name(k->type), NULL);
    EVP_PKEY *pub = NULL;
    int ok = ctx != NULL && EVP_PKEY_fromdata_init(ctx) == 1
             && EVP_PKEY_fromdata(ctx, &pub, EVP_PKEY_PUBLIC_KEY, (OSSL_PARAM *)params) == 1;
    EVP_PKEY_CTX_free(ctx);
    if (!ok) { EVP_PKEY_free(pub); return 0; }
    k->pub = pub;
    return 1;
}

static const OSSL_PARAM *rsa_import_types(int selection) {
    static const OSSL_PARAM types[] = {
        OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_N, NULL, 0),
        OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_E, NULL, 0),
        OSSL_PARAM_END,
    };
    return (selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY) != 0 ? types : NULL;
}
static const OSSL_PARAM *ec_import_types(int selection) {
    static const OSSL_PARAM types[] = {
        OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
        OSSL_PARAM_END,
    };
    return (selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY) != 0 ? types : NULL;
}
static const OSSL_PARAM *ed25519_import_types(int selection) {
    static const OSSL_PARAM types[] = {
        OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
        OSSL_PARAM_END,
    };
    return (selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY) != 0 ? types : NULL;
}

/* Only the public half, for encoders (a certificate request's SubjectPublicKeyInfo): a selection
   with the private key is refused, which is also what keeps OpenSSL from moving the key to another
   provider for a signature (it exports with every part selected). */
static int key_export(void *keydata, int selection, OSSL_CALLBACK *cb, void *cbarg) {
    token_key *k = keydata;
    if (k == NULL || k->pub == NULL || cb == NULL) return 0;
    if ((selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY) != 0) return 0;
    OSSL_PARAM *params = NULL;
    if (EVP_PKEY_todata(k->pub, EVP_PKEY_PUBLIC_KEY, &params) != 1) return 0;
    int ok = cb(params, cbarg);
    OSSL_PARAM_free(params);
    return ok;
}

/* bits, security-bits, max-size, default/mandatory digest, group, public key...: the public
   half answers; the token reference is ours. */
static int key_get_params(void *keydata, OSSL_PARAM params[]) {
    token_key *k = keydata;
    if (k == NULL) return 0;
    OSSL_PARAM *p = OSSL_PARAM_locate(params, PARAM_REF);
    if (p != NULL) {
        void *ref = k->ref;
        if (!OSSL_PARAM_set_octet_string(p, &ref, sizeof ref)) return 0;
    }
    if (k->pub == NULL) return 1;
    return EVP_PKEY_get_params(k->pub, params);
}

static const OSSL_PARAM *key_gettable_params(void *provctx) {
    static const OSSL_PARAM gettable[] = {
        OSSL_PARAM_int(OSSL_PKEY_PARAM_BITS, NULL),
        OSSL_PARAM_int(OSSL_PKEY_PARAM_SECURITY_BITS, NULL),
        OSSL_PARAM_int(OSSL_PKEY_PARAM_MAX_SIZE, NULL),
        OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_DEFAULT_DIGEST, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_MANDATORY_DIGEST, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
        OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_N, NULL, 0),
        OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_E, NULL, 0),
        OSSL_PARAM_octet_string(PARAM_REF, NULL, 0),
        OSSL_PARAM_END,
    };
    (void)provctx;
    return gettable;
}

static const char *rsa_operation_name(int id) { return id == OSSL_OP_SIGNATURE ? "RSA" : NULL; }
static const char *ec_operation_name(int id) { return id == OSSL_OP_SIGNATURE ? "ECDSA" : NULL; }
static const char *ed25519_operation_name(int id) { return id == OSSL_OP_SIGNATURE ? "ED25519" : NULL; }

#define KEYMGMT_TABLE(prefix)                                                                      \
    static const OSSL_DISPATCH prefix##_keymgmt[] = {                                              \
        {OSSL_FUNC_KEYMGMT_NEW, (void (*)(void))prefix##_new},                                     \
        {OSSL_FUNC_KEYMGMT_FREE, (void (*)(void))key_free},                                        \
        {OSSL_FUNC_KEYMGMT_HAS, (void (*)(void))key_has},                                          \
        {OSSL_FUNC_KEYMGMT_MATCH, (void (*)(void))key_match},                                      \
        {OSSL_FUNC_KEYMGMT_IMPORT, (void (*)(void))key_import},                                    \
        {OSSL_FUNC_KEYMGMT_IMPORT_TYPES, (void (*)(void))prefix##_import_types},                   \
        {OSSL_FUNC_KEYMGMT_EXPORT, (void (*)(void))key_export},                                    \
        {OSSL_FUNC_KEYMGMT_EXPORT_TYPES, (void (*)(void))prefix##_import_types},                   \
        {OSSL_FUNC_KEYMGMT_GET_PARAMS, (void (*)(void))key_get_params},                            \
        {OSSL_FUNC_KEYMGMT_GETTABLE_PARAMS, (void (*)(void))key_gettable_params},                  \
        {OSSL_FUNC_KEYMGMT_QUERY_OPERATION_NAME, (void (*)(void))prefix##_operation_name},         \
        {0, NULL}};
KEYMGMT_TABLE(rsa)
KEYMGMT_TABLE(ec)
KEYMGMT_TABLE(ed25519)

/* ---- signatures ---- */

typedef struct {
    prov_ctx *prov;
    token_key *key;
    int pad;          /* RSA: RSA_PKCS1_PADDING or RSA_PKCS1_PSS_PADDING */
    int saltlen;      /* RSA-PSS: RSA_PSS_SALTLEN_DIGEST/_AUTO/_MAX or a length */
    EVP_MD *md;       /* NULL: none set (RSA PKCS#1 then signs the input as given) */
    EVP_MD *mgf1;     /* NULL: the same as md */
    EVP_MD_CTX *mdctx;
} sig_ctx;

static void *sig_newctx(void *provctx, const char *propq) {
    (void)propq;
    sig_ctx *c = OPENSSL_zalloc(sizeof *c);
    if (c == NULL) return NULL;
    c->prov = provctx;
    c->pad = RSA_PKCS1_PADDING;
    c->saltlen = RSA_PSS_SALTLEN_AUTO;
    return c;
}

static void sig_freectx(void *vctx) {
    sig_ctx *c = vctx;
    if (c == NULL) return;
    EVP_MD_CTX_free(c->mdctx);
    EVP_MD_free(c->md);
    EVP_MD_free(c->mgf1);
    OPENSSL_free(c);
}

static void *sig_dupctx(void *vctx) {
    sig_ctx *c = vctx, *d = OPENSSL_memdup(c, sizeof *c);
    if (d == NULL) return NULL;
    d->mdctx = NULL;
    if ((d->md != NULL && !EVP_MD_up_ref(d->md))) d->md = NULL;
    if ((d->mgf1 != NULL && !EVP_MD_up_ref(d->mgf1))) d->mgf1 = NULL;
    if ((c->md != NULL && d->md == NULL) || (c->mgf1 != NULL && d->mgf1 == NULL)) { sig_freectx(d); return NULL; }
    if (c->mdctx != NULL) {
        d->mdctx = EVP_MD_CTX_new();
        if (d->mdctx == NULL || !EVP_MD_CTX_copy_ex(d->mdctx, c->mdctx)) { sig_freectx(d); return NULL; }
    }
    return d;
}

static int set_md(sig_ctx *c, EVP_MD **slot, const char *name) {
    if (c->key != NULL && c->key->type == KT_ED25519) {
        if (name == NULL || name[0] == 0) return 1;
        fail("Ed25519 signs the message itself: no digest can be set");
        return 0;
    }
    EVP_MD *md = EVP_MD_fetch(public_libctx, name, NULL);
    if (md == NULL) return 0;
    EVP_MD_free(*slot);
    *slot = md;
    return 1;
}

static int set_pad(sig_ctx *c, const OSSL_PARAM *p) {
    int pad = 0;
    if (p->data_type == OSSL_PARAM_INTEGER) {
        if (!OSSL_PARAM_get_int(p, &pad)) return 0;
    } else if (p->data_type == OSSL_PARAM_UTF8_STRING && p->data != NULL) {
        const char *s = p->data;
        if (strcmp(s, OSSL_PKEY_RSA_PAD_MODE_PKCSV15) == 0) pad = RSA_PKCS1_PADDING;
        else if (strcmp(s, OSSL_PKEY_RSA_PAD_MODE_PSS) == 0) pad = RSA_PKCS1_PSS_PADDING;
    }
    if (c->key == NULL || c->key->type != KT_RSA || (pad != RSA_PKCS1_PADDING && pad != RSA_PKCS1_PSS_PADDING)) {
        fail("token keys sign with RSA PKCS#1 v1.5 or PSS padding only");
        return 0;
    }
    c->pad = pad;
    return 1;
}

static int set_saltlen(sig_ctx *c, const OSSL_PARAM *p) {
    int len = 0;
    if (p->data_type == OSSL_PARAM_INTEGER) {
        if (!OSSL_PARAM_get_int(p, &len)) return 0;
    } else if (p->data_type == OSSL_PARAM_UTF8_STRING && p->data != NULL) {
        const char *s = p->data;
        if (strcmp(s, OSSL_PKEY_RSA_PSS_SALT_LEN_DIGEST) == 0) len = RSA_PSS_SALTLEN_DIGEST;
        else if (strcmp(s, OSSL_PKEY_RSA_PSS_SALT_LEN_MAX) == 0) len = RSA_PSS_SALTLEN_MAX;
        else if (strcmp(s, OSSL_PKEY_RSA_PSS_SALT_LEN_AUTO) == 0) len = RSA_PSS_SALTLEN_AUTO;
        else {
            char *end = NULL;
            long v = strtol(s, &end, 10);
            if (end == s || *end != 0 || v < 0 || v > INT_MAX) return 0;
            len = (int)v;
        }
    } else {
        return 0;
    }
    if (len < RSA_PSS_SALTLEN_MAX) return 0;
    c->saltlen = len;
    return 1;
}

static int sig_set_ctx_params(void *vctx, const OSSL_PARAM params[]) {
    sig_ctx *c = vctx;
    const OSSL_PARAM *p;
    if (c == NULL) return 0;
    if (params == NULL) return 1;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_DIGEST)) != NULL) {
        const char *name = NULL;
        if (!OSSL_PARAM_get_utf8_string_ptr(p, &name) || !set_md(c, &c->md, name)) return 0;
    }
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_PAD_MODE)) != NULL && !set_pad(c, p)) return 0;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_PSS_SALTLEN)) != NULL && !set_saltlen(c, p)) return 0;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_MGF1_DIGEST)) != NULL) {
        const char *name = NULL;
        if (!OSSL_PARAM_get_utf8_string_ptr(p, &name) || !set_md(c, &c->mgf1, name)) return 0;
    }
    return 1;
}

static const OSSL_PARAM *sig_settable_ctx_params(void *vctx, void *provctx) {
    static const OSSL_PARAM settable[] = {
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_PAD_MODE, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_PSS_SALTLEN, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_MGF1_DIGEST, NULL, 0),
        OSSL_PARAM_END,
    };
    (void)vctx; (void)provctx;
    return settable;
}

/* The DER AlgorithmIdentifier of the signature (what X509_sign/X509_REQ_sign write). */
static int algorithm_id(const sig_ctx *c, unsigned char **der) {
    int nid = NID_undef;
    int ptype = V_ASN1_UNDEF;
    switch (c->key->type) {
    case KT_RSA:
        if (c->md == NULL || c->pad != RSA_PKCS1_PADDING
            || !OBJ_find_sigid_by_algs(&nid, EVP_MD_get_type(c->md), NID_rsaEncryption)) return -1;
        ptype = V_ASN1_NULL;
        break;
    case KT_EC:
        if (c->md == NULL || !OBJ_find_sigid_by_algs(&nid, EVP_MD_get_type(c->md), NID_X9_62_id_ecPublicKey)) return -1;
        break;
    case KT_ED25519:
        nid = NID_ED25519;
        break;
    }
    X509_ALGOR *alg = X509_ALGOR_new();
    if (alg == NULL || !X509_ALGOR_set0(alg, OBJ_nid2obj(nid), ptype, NULL)) { X509_ALGOR_free(alg); return -1; }
    int len = i2d_X509_ALGOR(alg, der);
    X509_ALGOR_free(alg);
    return len;
}

static int sig_get_ctx_params(void *vctx, OSSL_PARAM params[]) {
    sig_ctx *c = vctx;
    OSSL_PARAM *p;
    if (c == NULL || c->key == NULL) return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_SIGNATURE_PARAM_ALGORITHM_ID)) != NULL) {
        unsigned char *der = NULL;
        int len = algorithm_id(c, &der);
        int ok = len > 0 && OSSL_PARAM_set_octet_string(p, der, (size_t)len);
        OPENSSL_free(der);
        if (!ok) return 0;
    }
    if ((p = OSSL_PARAM_locate(params, OSSL_SIGNATURE_PARAM_DIGEST)) != NULL
        && !OSSL_PARAM_set_utf8_string(p, c->md != NULL ? EVP_MD_get0_name(c->md) : "")) return 0;
    return 1;
}

static const OSSL_PARAM *sig_gettable_ctx_params(void *vctx, void *provctx) {
    static const OSSL_PARAM gettable[] = {
        OSSL_PARAM_octet_string(OSSL_SIGNATURE_PARAM_ALGORITHM_ID, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST, NULL, 0),
        OSSL_PARAM_END,
    };
    (void)vctx; (void)provctx;
    return gettable;
}

static int sig_init(void *vctx, void *keydata, const OSSL_PARAM params[]) {
    sig_ctx *c = vctx;
    token_key *k = keydata;
    if (c == NULL) return 0;
    if (k != NULL) {
        if (k->ref == NULL || k->pub == NULL) { fail("the key has no private half on a token"); return 0; }
        c->key = k;
    }
    if (c->key == NULL) return 0;
    c->pad = RSA_PKCS1_PADDING;
    c->saltlen = RSA_PSS_SALTLEN_AUTO;
    EVP_MD_free(c->mgf1);
    c->mgf1 = NULL;
    return sig_set_ctx_params(c, params);
}

/* The signature's largest size (RSA: the modulus; ECDSA: the DER SEQUENCE; Ed25519: 64). */
static size_t max_size(const sig_ctx *c) {
    int n = EVP_PKEY_get_size(c->key->pub);
    return n > 0 ? (size_t)n : 0;
}

/* Signs what is already hashed (RSA, ECDSA) or the message (Ed25519) on the token. */
static int token_sign(sig_ctx *c, unsigned char *sig, size_t *siglen, size_t sigsize,
                      const unsigned char *tbs, size_t tbslen) {
    size_t size = max_size(c);
    if (size == 0) return 0;
    if (sig == NULL) { *siglen = size; return 1; }
    if (c->key->type != KT_EC && sigsize < size) { fail("signature buffer too small"); return 0; }
    int mdlen = c->md != NULL ? EVP_MD_get_size(c->md) : 0;
    switch (c->key->type) {
    case KT_RSA: {
        unsigned char buf[1024];
        size_t len = sizeof buf;
        if (size > sizeof buf) { fail("RSA key too large"); return 0; }
        int ok;
        if (c->pad == RSA_PKCS1_PSS_PADDING) {
            if (c->md == NULL || (size_t)mdlen != tbslen) { fail("RSA-PSS needs the hash of its digest"); return 0; }
            const EVP_MD *mgf1 = c->mgf1 != NULL ? c->mgf1 : c->md;
            int bits = EVP_PKEY_get_bits(c->key->pub);
            int emlen = (bits - 1 + 7) / 8;
            int salt = c->saltlen;
            if (salt == RSA_PSS_SALTLEN_DIGEST) salt = mdlen;
            else if (salt == RSA_PSS_SALTLEN_MAX || salt == RSA_PSS_SALTLEN_AUTO) salt = emlen - mdlen - 2;
            if (salt < 0 || salt > emlen - mdlen - 2) { fail("RSA-PSS salt too long for the key"); return 0; }
            ok = callbacks.sign(c->key->ref, MTLSP_RSA_PSS, EVP_MD_get_type(c->md), EVP_MD_get_type(mgf1), salt,
                                tbs, tbslen, buf, &len);
        } else if (c->md != NULL) {
            /* CKM_RSA_PKCS pads what it is given: the DigestInfo, encoded by OpenSSL (X509_SIG is
               DigestInfo's ASN.1 type). */
            if ((size_t)mdlen != tbslen) { fail("the input is not a hash of the signature's digest"); return 0; }
            X509_SIG *di = X509_SIG_new();
            X509_ALGOR *alg = NULL;
            ASN1_OCTET_STRING *digest = NULL;
            unsigned char *der = NULL;
            int derlen = -1;
            if (di != NULL) {
                X509_SIG_getm(di, &alg, &digest);
                if (X509_ALGOR_set0(alg, OBJ_nid2obj(EVP_MD_get_type(c->md)), V_ASN1_NULL, NULL)
                    && ASN1_OCTET_STRING_set(digest, tbs, (int)tbslen))
                    derlen = i2d_X509_SIG(di, &der);
            }
            X509_SIG_free(di);
            if (derlen <= 0) { OPENSSL_free(der); return 0; }
            ok = callbacks.sign(c->key->ref, MTLSP_RSA_PKCS, EVP_MD_get_type(c->md), NID_undef, 0,
                                der, (size_t)derlen, buf, &len);
            OPENSSL_free(der);
        } else {
            ok = callbacks.sign(c->key->ref, MTLSP_RSA_PKCS, NID_undef, NID_undef, 0, tbs, tbslen, buf, &len);
        }
        if (!ok) return 0;
        if (len > size) { fail("the token returned an RSA signature longer than the modulus"); return 0; }
        /* Left-pad to the modulus size (a token may drop leading zero bytes). */
        memset(sig, 0, size - len);
        memcpy(sig + (size - len), buf, len);
        *siglen = size;
        OPENSSL_cleanse(buf, sizeof buf);
        return 1;
    }
    case KT_EC: {
        unsigned char raw[2 * 66 + 16];
        size_t len = sizeof raw;
        if (c->md != NULL && (size_t)mdlen != tbslen) { fail("the input is not a hash of the signature's digest"); return 0; }
        if (!callbacks.sign(c->key->ref, MTLSP_ECDSA, c->md != NULL ? EVP_MD_get_type(c->md) : NID_undef, NID_undef, 0,
                            tbs, tbslen, raw, &len)) return 0;
        if (len == 0 || len % 2 != 0) { fail("the token returned a malformed ECDSA signature"); return 0; }
        ECDSA_SIG *es = ECDSA_SIG_new();
        BIGNUM *r = BN_bin2bn(raw, (int)(len / 2), NULL), *s = BN_bin2bn(raw + len / 2, (int)(len / 2), NULL);
        if (es == NULL || r == NULL || s == NULL || !ECDSA_SIG_set0(es, r, s)) {
            BN_free(r); BN_free(s); ECDSA_SIG_free(es);
            return 0;
        }
        /* r and s no longer than the group order encode within the key's maximum size: into a
           buffer of that size (what OpenSSL gives) the encoding is written at once. Anything
           else (a smaller buffer, a token's overlong values) is measured first. */
        int order_bytes = (EVP_PKEY_get_bits(c->key->pub) + 7) / 8;
        int derlen = sigsize >= size && order_bytes > 0 && len / 2 <= (size_t)order_bytes ? 1 : i2d_ECDSA_SIG(es, NULL);
        if (derlen <= 0 || (size_t)derlen > sigsize) { ECDSA_SIG_free(es); fail("signature buffer too small"); return 0; }
        unsigned char *out = sig;
        derlen = i2d_ECDSA_SIG(es, &out);
        ECDSA_SIG_free(es);
        if (derlen <= 0) return 0;
        *siglen = (size_t)derlen;
        return 1;
    }
    case KT_ED25519: {
        size_t len = sigsize;
        if (!callbacks.sign(c->key->ref, MTLSP_EDDSA, NID_undef, NID_undef, 0, tbs, tbslen, sig, &len)) return 0;
        if (len != 64) { fail("the token returned a malformed Ed25519 signature"); return 0; }
        *siglen = len;
        return 1;
    }
    }
    return 0;
}

static int sig_sign(void *vctx, unsigned char *sig, size_t *siglen, size_t sigsize, const unsigned char *tbs, size_t tbslen) {
    sig_ctx *c = vctx;
    if (c == NULL || c->key == NULL) return 0;
    if (c->key->type == KT_ED25519) { fail("Ed25519 signs only whole messages (EVP_DigestSign)"); return 0; }
    return token_sign(c, sig, siglen, sigsize, tbs, tbslen);
}

static int sig_digest_sign_init(void *vctx, const char *mdname, void *keydata, const OSSL_PARAM params[]) {
    sig_ctx *c = vctx;
    if (!sig_init(vctx, keydata, NULL)) return 0;
    EVP_MD_CTX_free(c->mdctx);
    c->mdctx = NULL;
    if (c->key->type == KT_ED25519) {
        if (mdname != NULL && mdname[0] != 0) { fail("Ed25519 signs the message itself: no digest can be set"); return 0; }
        EVP_MD_free(c->md);
        c->md = NULL;
    } else {
        if (!set_md(c, &c->md, mdname != NULL && mdname[0] != 0 ? mdname : "SHA256")) return 0;
        c->mdctx = EVP_MD_CTX_new();
        if (c->mdctx == NULL || !EVP_DigestInit_ex2(c->mdctx, c->md, NULL)) return 0;
    }
    return sig_set_ctx_params(c, params);
}

static int sig_digest_sign_update(void *vctx, const unsigned char *data, size_t len) {
    sig_ctx *c = vctx;
    if (c == NULL || c->mdctx == NULL) { fail("Ed25519 signs only whole messages (EVP_DigestSign)"); return 0; }
    return EVP_DigestUpdate(c->mdctx, data, len);
}

static int sig_digest_sign_final(void *vctx, unsigned char *sig, size_t *siglen, size_t sigsize) {
    sig_ctx *c = vctx;
    unsigned char hash[EVP_MAX_MD_SIZE];
    unsigned int hlen = 0;
    if (c == NULL || c->key == NULL || c->mdctx == NULL) return 0;
    if (sig == NULL) return token_sign(c, NULL, siglen, 0, NULL, 0);
    if (!EVP_DigestFinal_ex(c->mdctx, hash, &hlen)) return 0;
    return token_sign(c, sig, siglen, sigsize, hash, hlen);
}

static int sig_digest_sign(void *vctx, unsigned char *sig, size_t *siglen, size_t sigsize,
                           const unsigned char *tbs, size_t tbslen) {
    sig_ctx *c = vctx;
    if (c == NULL || c->key == NULL) return 0;
    if (c->key->type == KT_ED25519 || sig == NULL) return token_sign(c, sig, siglen, sigsize, tbs, tbslen);
    unsigned char hash[EVP_MAX_MD_SIZE];
    unsigned int hlen = 0;
    if (c->mdctx == NULL || !EVP_DigestInit_ex2(c->mdctx, c->md, NULL) || !EVP_DigestUpdate(c->mdctx, tbs, tbslen)
        || !EVP_DigestFinal_ex(c->mdctx, hash, &hlen)) return 0;
    return token_sign(c, sig, siglen, sigsize, hash, hlen);
}

static const OSSL_DISPATCH token_signature[] = {
    {OSSL_FUNC_SIGNATURE_NEWCTX, (void (*)(void))sig_newctx},
    {OSSL_FUNC_SIGNATURE_FREECTX, (void (*)(void))sig_freectx},
    {OSSL_FUNC_SIGNATURE_DUPCTX, (void (*)(void))sig_dupctx},
    {OSSL_FUNC_SIGNATURE_SIGN_INIT, (void (*)(void))sig_init},
    {OSSL_FUNC_SIGNATURE_SIGN, (void (*)(void))sig_sign},
    {OSSL_FUNC_SIGNATURE_DIGEST_SIGN_INIT, (void (*)(void))sig_digest_sign_init},
    {OSSL_FUNC_SIGNATURE_DIGEST_SIGN_UPDATE, (void (*)(void))sig_digest_sign_update},
    {OSSL_FUNC_SIGNATURE_DIGEST_SIGN_FINAL, (void (*)(void))sig_digest_sign_final},
    {OSSL_FUNC_SIGNATURE_DIGEST_SIGN, (void (*)(void))sig_digest_sign},
    {OSSL_FUNC_SIGNATURE_GET_CTX_PARAMS, (void (*)(void))sig_get_ctx_params},
    {OSSL_FUNC_SIGNATURE_GETTABLE_CTX_PARAMS, (void (*)(void))sig_gettable_ctx_params},
    {OSSL_FUNC_SIGNATURE_SET_CTX_PARAMS, (void (*)(void))sig_set_ctx_params},
    {OSSL_FUNC_SIGNATURE_SETTABLE_CTX_PARAMS, (void (*)(void))sig_settable_ctx_params},
    {0, NULL}};

/* ---- the provider ---- */

/* The same names as the default provider's, so OpenSSL (and its TLS code) knows the key types.
   The provider is the only one in its library context, so nothing else ever fetches them. */
#define PROPS "provider=" MTLSP_NAME
static const OSSL_ALGORITHM keymgmt_algorithms[] = {
    {"RSA:rsaEncryption:1.2.840.113549.1.1.1", PROPS, rsa_keymgmt, "libmtls PKCS#11 token RSA key"},
    {"EC:id-ecPublicKey:1.2.840.10045.2.1", PROPS, ec_keymgmt, "libmtls PKCS#11 token EC key"},
    {"ED25519:1.3.101.112", PROPS, ed25519_keymgmt, "libmtls PKCS#11 token Ed25519 key"},
    {NULL, NULL, NULL, NULL}};
static const OSSL_ALGORITHM signature_algorithms[] = {
    {"RSA:rsaEncryption:1.2.840.113549.1.1.1", PROPS, token_signature, "RSA on a PKCS#11 token"},
    {"ECDSA", PROPS, token_signature, "ECDSA on a PKCS#11 token"},
    {"ED25519:1.3.101.112", PROPS, token_signature, "Ed25519 on a PKCS#11 token"},
    {NULL, NULL, NULL, NULL}};

static const OSSL_ALGORITHM *query_operation(void *provctx, int operation_id, int *no_cache) {
    (void)provctx;
    *no_cache = 0;
    switch (operation_id) {
    case OSSL_OP_KEYMGMT: return keymgmt_algorithms;
    case OSSL_OP_SIGNATURE: return signature_algorithms;
    }
    return NULL;
}

static void teardown(void *provctx) { OPENSSL_free(provctx); }

static const OSSL_DISPATCH provider_functions[] = {
    {OSSL_FUNC_PROVIDER_TEARDOWN, (void (*)(void))teardown},
    {OSSL_FUNC_PROVIDER_QUERY_OPERATION, (void (*)(void))query_operation},
    {0, NULL}};

static int provider_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in, const OSSL_DISPATCH **out,
                         void **provctx) {
    OSSL_FUNC_core_get_libctx_fn *get_libctx = NULL;
    for (; in != NULL && in->function_id != 0; in++) {
        if (in->function_id == OSSL_FUNC_CORE_GET_LIBCTX) get_libctx = OSSL_FUNC_core_get_libctx(in);
    }
    if (get_libctx == NULL) return 0;
    prov_ctx *p = OPENSSL_zalloc(sizeof *p);
    if (p == NULL) return 0;
    /* A built-in provider shares libcrypto with the core: its library context is the one the
       provider was loaded into. */
    p->libctx = (OSSL_LIB_CTX *)get_libctx(handle);
    *provctx = p;
    *out = provider_functions;
    return 1;
}

HIDDEN int mtlsp_load(OSSL_LIB_CTX *key_libctx, OSSL_LIB_CTX *main_libctx, const mtlsp_callbacks *cb) {
    if (key_libctx == NULL || main_libctx == NULL || cb == NULL || cb->sign == NULL || cb->retain == NULL
        || cb->release == NULL) return 0;
    callbacks = *cb;
    public_libctx = main_libctx;
    if (!OSSL_PROVIDER_add_builtin(key_libctx, MTLSP_NAME, provider_init)) return 0;
    /* OpenSSL's "base" provider (encoders and decoders only: no key management, no signature)
       writes the keys' public halves (SubjectPublicKeyInfo of a certificate request). */
    if (OSSL_PROVIDER_load(key_libctx, "base") == NULL) return 0;
    return OSSL_PROVIDER_load(key_libctx, MTLSP_NAME) != NULL;
}

HIDDEN EVP_PKEY *mtlsp_make_key(OSSL_LIB_CTX *libctx, const EVP_PKEY *public_key, void *ref) {
    if (libctx == NULL || public_key == NULL || ref == NULL) return NULL;
    const char *name = NULL;
    if (EVP_PKEY_is_a(public_key, "RSA")) name = "RSA";
    else if (EVP_PKEY_is_a(public_key, "EC")) name = "EC";
    else if (EVP_PKEY_is_a(public_key, "ED25519")) name = "ED25519";
    else return NULL;
    struct handoff h = {HANDOFF_MAGIC, public_key, ref};
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(PARAM_HANDOFF, &h, sizeof h),
        OSSL_PARAM_construct_end(),
    };
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(libctx, name, "provider=" MTLSP_NAME);
    EVP_PKEY *pkey = NULL;
    if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 || EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_KEYPAIR, params) != 1) {
        EVP_PKEY_free(pkey);
        pkey = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    return pkey;
}

HIDDEN void *mtlsp_key_ref(const EVP_PKEY *pkey) {
    const OSSL_PROVIDER *prov = pkey != NULL ? EVP_PKEY_get0_provider(pkey) : NULL;
    if (prov == NULL || strcmp(OSSL_PROVIDER_get0_name(prov), MTLSP_NAME) != 0) return NULL;
    void *ref = NULL;
    size_t len = 0;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(PARAM_REF, &ref, sizeof ref),
        OSSL_PARAM_construct_end(),
    };
    if (!EVP_PKEY_get_params(pkey, params)) return NULL;
    len = params[0].return_size;
    return len == sizeof ref ? ref : NULL;
}

HIDDEN int mtlsp_available(OSSL_LIB_CTX *libctx) { return OSSL_PROVIDER_available(libctx, MTLSP_NAME); }
