#ifndef MTLS_COPENSSL_SHIM_H
#define MTLS_COPENSSL_SHIM_H
/* The OpenSSL 3 headers libmtls uses, plus static inline wrappers for what the Swift importer
   cannot see: function-like macros (stacks, SSL_CTX_set_*), and casts. Add wrappers here, named
   mtls_ossl_*, rather than re-implementing a macro in Swift. */
#include <string.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/objects.h>
#include <openssl/ocsp.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/pkcs7.h>
#include <openssl/provider.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

/* ---- stacks ---- */
static inline int mtls_ossl_sk_X509_num(const STACK_OF(X509) *sk) { return sk_X509_num(sk); }
static inline X509 *mtls_ossl_sk_X509_value(const STACK_OF(X509) *sk, int i) { return sk_X509_value(sk, i); }
static inline STACK_OF(X509) *mtls_ossl_sk_X509_new_null(void) { return sk_X509_new_null(); }
static inline int mtls_ossl_sk_X509_push(STACK_OF(X509) *sk, X509 *x) { return sk_X509_push(sk, x); }
static inline void mtls_ossl_sk_X509_free(STACK_OF(X509) *sk) { sk_X509_free(sk); }
static inline void mtls_ossl_sk_X509_pop_free(STACK_OF(X509) *sk) { sk_X509_pop_free(sk, X509_free); }
static inline X509 *mtls_ossl_sk_X509_shift(STACK_OF(X509) *sk) { return sk_X509_shift(sk); }

static inline int mtls_ossl_sk_X509_CRL_num(const STACK_OF(X509_CRL) *sk) { return sk_X509_CRL_num(sk); }
static inline X509_CRL *mtls_ossl_sk_X509_CRL_value(const STACK_OF(X509_CRL) *sk, int i) { return sk_X509_CRL_value(sk, i); }
static inline STACK_OF(X509_CRL) *mtls_ossl_sk_X509_CRL_new_null(void) { return sk_X509_CRL_new_null(); }
static inline int mtls_ossl_sk_X509_CRL_push(STACK_OF(X509_CRL) *sk, X509_CRL *x) { return sk_X509_CRL_push(sk, x); }
static inline void mtls_ossl_sk_X509_CRL_pop_free(STACK_OF(X509_CRL) *sk) { sk_X509_CRL_pop_free(sk, X509_CRL_free); }

static inline int mtls_ossl_sk_GENERAL_NAME_num(const GENERAL_NAMES *sk) { return sk_GENERAL_NAME_num(sk); }
static inline GENERAL_NAME *mtls_ossl_sk_GENERAL_NAME_value(const GENERAL_NAMES *sk, int i) { return sk_GENERAL_NAME_value(sk, i); }
static inline void mtls_ossl_GENERAL_NAMES_free(GENERAL_NAMES *gens) { GENERAL_NAMES_free(gens); }
static inline GENERAL_NAMES *mtls_ossl_GENERAL_NAMES_new(void) { return GENERAL_NAMES_new(); }
static inline int mtls_ossl_sk_GENERAL_NAME_push(GENERAL_NAMES *sk, GENERAL_NAME *g) { return sk_GENERAL_NAME_push(sk, g); }

static inline int mtls_ossl_sk_ASN1_OBJECT_num(const STACK_OF(ASN1_OBJECT) *sk) { return sk_ASN1_OBJECT_num(sk); }
static inline ASN1_OBJECT *mtls_ossl_sk_ASN1_OBJECT_value(const STACK_OF(ASN1_OBJECT) *sk, int i) { return sk_ASN1_OBJECT_value(sk, i); }
static inline void mtls_ossl_EXTENDED_KEY_USAGE_free(EXTENDED_KEY_USAGE *e) { EXTENDED_KEY_USAGE_free(e); }

static inline int mtls_ossl_sk_X509_NAME_num(const STACK_OF(X509_NAME) *sk) { return sk_X509_NAME_num(sk); }
static inline X509_NAME *mtls_ossl_sk_X509_NAME_value(const STACK_OF(X509_NAME) *sk, int i) { return sk_X509_NAME_value(sk, i); }

static inline int mtls_ossl_sk_X509_EXTENSION_num(const STACK_OF(X509_EXTENSION) *sk) { return sk_X509_EXTENSION_num(sk); }
static inline X509_EXTENSION *mtls_ossl_sk_X509_EXTENSION_value(const STACK_OF(X509_EXTENSION) *sk, int i) { return sk_X509_EXTENSION_value(sk, i); }
/* Enrollment: a CSR's extension request (X509V3_add1_i2d makes the stack). */
static inline void mtls_ossl_sk_X509_EXTENSION_pop_free(STACK_OF(X509_EXTENSION) *sk) { sk_X509_EXTENSION_pop_free(sk, X509_EXTENSION_free); }

static inline int mtls_ossl_sk_PKCS12_SAFEBAG_num(const STACK_OF(PKCS12_SAFEBAG) *sk) { return sk_PKCS12_SAFEBAG_num(sk); }
static inline PKCS12_SAFEBAG *mtls_ossl_sk_PKCS12_SAFEBAG_value(const STACK_OF(PKCS12_SAFEBAG) *sk, int i) { return sk_PKCS12_SAFEBAG_value(sk, i); }
static inline void mtls_ossl_sk_PKCS12_SAFEBAG_pop_free(STACK_OF(PKCS12_SAFEBAG) *sk) { sk_PKCS12_SAFEBAG_pop_free(sk, PKCS12_SAFEBAG_free); }
static inline STACK_OF(PKCS12_SAFEBAG) *mtls_ossl_sk_PKCS12_SAFEBAG_new_null(void) { return sk_PKCS12_SAFEBAG_new_null(); }
static inline int mtls_ossl_sk_PKCS12_SAFEBAG_push(STACK_OF(PKCS12_SAFEBAG) *sk, PKCS12_SAFEBAG *b) { return sk_PKCS12_SAFEBAG_push(sk, b); }

static inline int mtls_ossl_sk_PKCS7_num(const STACK_OF(PKCS7) *sk) { return sk_PKCS7_num(sk); }
static inline PKCS7 *mtls_ossl_sk_PKCS7_value(const STACK_OF(PKCS7) *sk, int i) { return sk_PKCS7_value(sk, i); }
static inline void mtls_ossl_sk_PKCS7_pop_free(STACK_OF(PKCS7) *sk) { sk_PKCS7_pop_free(sk, PKCS7_free); }
static inline STACK_OF(PKCS7) *mtls_ossl_sk_PKCS7_new_null(void) { return sk_PKCS7_new_null(); }
static inline int mtls_ossl_sk_PKCS7_push(STACK_OF(PKCS7) *sk, PKCS7 *p) { return sk_PKCS7_push(sk, p); }

static inline int mtls_ossl_sk_X509_OBJECT_num(const STACK_OF(X509_OBJECT) *sk) { return sk_X509_OBJECT_num(sk); }
static inline X509_OBJECT *mtls_ossl_sk_X509_OBJECT_value(const STACK_OF(X509_OBJECT) *sk, int i) { return sk_X509_OBJECT_value(sk, i); }

/* PKCS#7 bundle accessors (macros in pkcs7.h). */
static inline int mtls_ossl_PKCS7_type_is_signed(const PKCS7 *p7) { return PKCS7_type_is_signed(p7); }
static inline STACK_OF(X509) *mtls_ossl_PKCS7_signed_certs(const PKCS7 *p7) {
    return (p7 && p7->d.sign) ? p7->d.sign->cert : NULL;
}

/* ---- SSL_CTX / SSL macros ---- */
static inline int mtls_ossl_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int v) { return (int)SSL_CTX_set_min_proto_version(ctx, v); }
static inline int mtls_ossl_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int v) { return (int)SSL_CTX_set_max_proto_version(ctx, v); }
static inline int mtls_ossl_SSL_set_tlsext_host_name(SSL *s, const char *name) { return (int)SSL_set_tlsext_host_name(s, name); }
static inline int mtls_ossl_SSL_CTX_set0_chain(SSL_CTX *ctx, STACK_OF(X509) *sk) { return (int)SSL_CTX_set0_chain(ctx, sk); }
static inline int mtls_ossl_SSL_CTX_set1_chain(SSL_CTX *ctx, STACK_OF(X509) *sk) { return (int)SSL_CTX_set1_chain(ctx, sk); }
static inline int mtls_ossl_SSL_set1_chain(SSL *s, STACK_OF(X509) *sk) { return (int)SSL_set1_chain(s, sk); }
static inline long mtls_ossl_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long m) { return SSL_CTX_set_session_cache_mode(ctx, m); }
static inline long mtls_ossl_SSL_CTX_set_options(SSL_CTX *ctx, uint64_t o) { return (long)SSL_CTX_set_options(ctx, o); }
static inline long mtls_ossl_SSL_set_mode(SSL *s, long m) { return SSL_set_mode(s, m); }
static inline long mtls_ossl_SSL_CTX_set_mode(SSL_CTX *ctx, long m) { return SSL_CTX_set_mode(ctx, m); }
static inline int mtls_ossl_SSL_CTX_set_ecdh_auto(SSL_CTX *ctx) { (void)ctx; return 1; }
static inline int mtls_ossl_SSL_get_peer_signature_type_nid(SSL *s, int *nid) { return SSL_get_peer_signature_type_nid(s, nid); }
static inline long mtls_ossl_SSL_get_extms_support(SSL *s) { return SSL_get_extms_support(s); }
static inline int mtls_ossl_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *ctx, int (*cb)(SSL *, int *, void *)) {
    return (int)SSL_CTX_set_tlsext_servername_callback(ctx, cb);
}
static inline int mtls_ossl_SSL_CTX_set_tlsext_servername_arg(SSL_CTX *ctx, void *arg) { return (int)SSL_CTX_set_tlsext_servername_arg(ctx, arg); }

/* ---- connections (TLS) ---- */
static inline int mtls_ossl_SSL_get_ex_new_index(CRYPTO_EX_free *free_func) { return SSL_get_ex_new_index(0, NULL, NULL, NULL, free_func); }
static inline int mtls_ossl_SSL_CTX_get_ex_new_index(CRYPTO_EX_free *free_func) { return SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, free_func); }
/* An SSL slot whose new_func runs for every SSL made in the process (resumption checks on the
 * SSLs of an application's configured SSL_CTX), and an SSL_SESSION slot whose value is copied,
 * with a new reference (dup_func), into the sessions OpenSSL makes from a session. */
static inline int mtls_ossl_SSL_get_ex_new_index_new(CRYPTO_EX_new *new_func) { return SSL_get_ex_new_index(0, NULL, new_func, NULL, NULL); }
static inline int mtls_ossl_SSL_SESSION_get_ex_new_index(CRYPTO_EX_dup *dup_func, CRYPTO_EX_free *free_func) { return SSL_SESSION_get_ex_new_index(0, NULL, NULL, dup_func, free_func); }
static inline int mtls_ossl_sk_X509_NAME_push_dup(STACK_OF(X509_NAME) *sk, const X509_NAME *n) {
    X509_NAME *d = X509_NAME_dup(n);
    if (d == NULL) return 0;
    if (!sk_X509_NAME_push(sk, d)) { X509_NAME_free(d); return 0; }
    return 1;
}
static inline uint64_t mtls_ossl_SSL_OP_NO_TICKET(void) { return SSL_OP_NO_TICKET; }
static inline uint64_t mtls_ossl_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t mtls_ossl_SSL_OP_CIPHER_SERVER_PREFERENCE(void) { return SSL_OP_CIPHER_SERVER_PREFERENCE; }
static inline uint64_t mtls_ossl_SSL_OP_PRIORITIZE_CHACHA(void) { return SSL_OP_PRIORITIZE_CHACHA; }

/* ThreadSanitizer annotations: in a TSan build the runtime defines these and a hand-off made
 * through a lock TSan cannot see (Swift's Synchronization.Mutex uses futexes directly) is made
 * visible; elsewhere the weak symbols are absent and the calls do nothing. */
void __tsan_acquire(void *addr) __attribute__((weak));
void __tsan_release(void *addr) __attribute__((weak));
static inline void mtls_tsan_acquire(void *addr) { if (__tsan_acquire) __tsan_acquire(addr); }
static inline void mtls_tsan_release(void *addr) { if (__tsan_release) __tsan_release(addr); }
/* Names the calling thread (glibc's pthread_setname_np, which <pthread.h> declares only under
 * _GNU_SOURCE; at most 15 characters). */
#include <pthread.h>
int pthread_setname_np(pthread_t thread, const char *name);
static inline void mtls_set_thread_name(const char *name) { (void)pthread_setname_np(pthread_self(), name); }
/* Accepts a client on LISTENER with its socket non-blocking and close-on-exec from the start
 * (Linux accept4, which <sys/socket.h> declares only under _GNU_SOURCE): no fcntl per connection. */
#include <sys/socket.h>
int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
static inline int mtls_accept_nonblocking(int listener, struct sockaddr *addr, socklen_t *len) {
    return accept4(listener, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
/* epoll and eventfd for the forwarder's loops (TLSForwarder). struct epoll_event is packed on
 * x86-64, which the Swift importer does not lay out reliably: these take and give its two fields. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
static inline int mtls_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
/* op: 0 add, 1 modify, 2 delete. events: poll(2)-style POLLIN/POLLOUT bits (the same values as EPOLLIN/EPOLLOUT). */
static inline int mtls_epoll_ctl(int ep, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event ev; memset(&ev, 0, sizeof ev);
    ev.events = events; ev.data.u64 = data;
    return epoll_ctl(ep, op == 0 ? EPOLL_CTL_ADD : op == 1 ? EPOLL_CTL_MOD : EPOLL_CTL_DEL, fd, &ev);
}
/* Waits up to timeout_ms (-1: for ever) and fills events[i]/data[i] for up to max events. */
static inline int mtls_epoll_wait(int ep, uint32_t *events, uint64_t *data, int max, int timeout_ms) {
    struct epoll_event evs[64];
    if (max > 64) max = 64;
    int n = epoll_wait(ep, evs, max, timeout_ms);
    for (int i = 0; i < n; i++) { events[i] = evs[i].events; data[i] = evs[i].data.u64; }
    return n;
}
static inline int mtls_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
/* Landlock (Linux 5.13+): the three system calls, which glibc does not wrap. Each returns what
 * the kernel returns (-1 with errno on failure, ENOSYS / EOPNOTSUPP where there is no Landlock). */
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdint.h>
#ifdef O_PATH
#define MTLS_O_PATH O_PATH
#else
#define MTLS_O_PATH 010000000 /* Linux's O_PATH, which <fcntl.h> declares only under _GNU_SOURCE */
#endif
struct mtls_landlock_ruleset_attr { uint64_t handled_access_fs; };
struct mtls_landlock_path_beneath_attr { uint64_t allowed_access; int32_t parent_fd; } __attribute__((packed));
/* The Landlock ABI version the kernel has, or -1. */
static inline int mtls_landlock_abi(void) {
#ifdef SYS_landlock_create_ruleset
    return (int)syscall(SYS_landlock_create_ruleset, NULL, 0, 1u /* LANDLOCK_CREATE_RULESET_VERSION */);
#else
    return -1;
#endif
}
/* A new ruleset handling `handled` (a file descriptor), or -1. */
static inline int mtls_landlock_create(uint64_t handled) {
#ifdef SYS_landlock_create_ruleset
    struct mtls_landlock_ruleset_attr a = { handled };
    return (int)syscall(SYS_landlock_create_ruleset, &a, sizeof a, 0u);
#else
    (void)handled; return -1;
#endif
}
/* Allows `access` beneath `path` (0, or -1 with errno). */
static inline int mtls_landlock_allow(int ruleset, const char *path, uint64_t access) {
#ifdef SYS_landlock_add_rule
    int fd = open(path, MTLS_O_PATH | O_CLOEXEC);
    if (fd < 0) return -1;
    struct mtls_landlock_path_beneath_attr b = { access, fd };
    int r = (int)syscall(SYS_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &b, 0u);
    close(fd);
    return r;
#else
    (void)ruleset; (void)path; (void)access; return -1;
#endif
}
/* no_new_privs, then the ruleset in force for this process's threads from now on (0, or -1). */
static inline int mtls_landlock_enforce(int ruleset) {
#ifdef SYS_landlock_restrict_self
    int r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (r == 0) r = (int)syscall(SYS_landlock_restrict_self, ruleset, 0u);
    close(ruleset);
    return r;
#else
    (void)ruleset; return -1;
#endif
}
/* Gives the pages the allocator holds free back to the system (glibc's malloc_trim); does
 * nothing with another C library. */
#if defined(__GLIBC__)
#include <malloc.h>
static inline void mtls_release_free_memory(void) { (void)malloc_trim(0); }
#else
static inline void mtls_release_free_memory(void) { }
#endif
static inline STACK_OF(X509_NAME) *mtls_ossl_sk_X509_NAME_new_null(void) { return sk_X509_NAME_new_null(); }
static inline void mtls_ossl_sk_X509_NAME_pop_free(STACK_OF(X509_NAME) *sk) { sk_X509_NAME_pop_free(sk, X509_NAME_free); }

/* ---- BIO macros ---- */
static inline long mtls_ossl_BIO_get_mem_data(BIO *b, char **pp) { return BIO_get_mem_data(b, pp); }
static inline int mtls_ossl_BIO_set_close(BIO *b, long c) { return (int)BIO_set_close(b, c); }

/* ---- misc ---- */
/* RFC 2253/4514 name printing, without escaping UTF-8 bytes. */
static inline unsigned long mtls_ossl_XN_FLAG_RFC2253_UTF8(void) { return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB; }
static inline void mtls_ossl_OPENSSL_free(void *p) { OPENSSL_free(p); }
static inline void *mtls_ossl_OPENSSL_malloc(size_t n) { return OPENSSL_malloc(n); }
static inline void mtls_ossl_OPENSSL_cleanse(void *p, size_t n) { OPENSSL_cleanse(p, n); }
static inline int mtls_ossl_EVP_PKEY_CTX_set_rsa_keygen_bits(EVP_PKEY_CTX *ctx, int bits) { return EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, bits); }
static inline int mtls_ossl_EVP_PKEY_CTX_set_ec_paramgen_curve_nid(EVP_PKEY_CTX *ctx, int nid) { return EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, nid); }
static inline const unsigned char *mtls_ossl_ASN1_STRING_get0_data(const ASN1_STRING *s) { return ASN1_STRING_get0_data(s); }
static inline int mtls_ossl_X509_get_version(const X509 *x) { return (int)X509_get_version(x); }

/* ---- trust evaluation (Sources/MTLSTrust/Trust) ---- */
static inline int mtls_ossl_sk_GENERAL_SUBTREE_num(const STACK_OF(GENERAL_SUBTREE) *sk) { return sk_GENERAL_SUBTREE_num(sk); }
static inline GENERAL_SUBTREE *mtls_ossl_sk_GENERAL_SUBTREE_value(const STACK_OF(GENERAL_SUBTREE) *sk, int i) { return sk_GENERAL_SUBTREE_value(sk, i); }
/* ---- PKCS#12 inspection (libmtls reads KDF parameters before running any KDF) ---- */
static inline int mtls_ossl_PKCS7_type_nid(const PKCS7 *p7) { return p7 ? OBJ_obj2nid(p7->type) : NID_undef; }
/* The content-encryption algorithm of an encryptedData PKCS#7, or NULL. */
static inline const X509_ALGOR *mtls_ossl_PKCS7_encrypted_algor(const PKCS7 *p7) {
    if (!p7 || OBJ_obj2nid(p7->type) != NID_pkcs7_encrypted || !p7->d.encrypted || !p7->d.encrypted->enc_data) return NULL;
    return p7->d.encrypted->enc_data->algorithm;
}
static inline PBEPARAM *mtls_ossl_PBEPARAM_unpack(const ASN1_TYPE *t) { return t ? ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBEPARAM), t) : NULL; }
static inline PBE2PARAM *mtls_ossl_PBE2PARAM_unpack(const ASN1_TYPE *t) { return t ? ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBE2PARAM), t) : NULL; }
static inline PBKDF2PARAM *mtls_ossl_PBKDF2PARAM_unpack(const ASN1_TYPE *t) { return t ? ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBKDF2PARAM), t) : NULL; }
static inline SCRYPT_PARAMS *mtls_ossl_SCRYPT_PARAMS_unpack(const ASN1_TYPE *t) { return t ? ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(SCRYPT_PARAMS), t) : NULL; }
/* The OCTET STRING inside an ASN1_TYPE (a bag's localKeyID attribute), or NULL. */
static inline const ASN1_OCTET_STRING *mtls_ossl_ASN1_TYPE_octet_string(const ASN1_TYPE *t) {
    return (t && t->type == V_ASN1_OCTET_STRING) ? t->value.octet_string : NULL;
}
static inline const ASN1_BMPSTRING *mtls_ossl_ASN1_TYPE_bmpstring(const ASN1_TYPE *t) {
    return (t && t->type == V_ASN1_BMPSTRING) ? t->value.bmpstring : NULL;
}


/* ---- PKCS#11 token keys (Sources/MTLSX509/Tokens; the keys belong to Sources/CMTLSProvider) ---- */
/* Puts `message` on the calling thread's OpenSSL error queue (what a failed token signature
   reports to the TLS stack). */
static inline void mtls_ossl_raise_message(const char *message) {
    ERR_raise_data(ERR_LIB_USER, ERR_R_OPERATION_FAIL, "%s", message);
}

/* ---- revocation sources (Sources/MTLSTrust/Revocation, issue 28) ---- */
/* Appends `s` (n bytes) and a '\n' to buf (capacity cap, kept NUL-terminated) at `at`; returns
   the new length, counting what did not fit, so the caller can retry with a larger buffer. A URI
   with a byte outside printable ASCII is left out (it could not be a usable http: URL, and a
   '\n' or NUL inside would split it). */
static inline size_t mtls_ossl_append_line(char *buf, size_t cap, size_t at, const unsigned char *s, int n) {
    if (!s || n <= 0) return at;
    for (int i = 0; i < n; i++) if (s[i] < 0x21 || s[i] > 0x7e) return at;
    for (int i = 0; i < n; i++) { if (at + 1 < cap) buf[at] = (char)s[i]; at++; }
    if (at + 1 < cap) buf[at] = '\n';
    at++;
    if (cap) buf[at < cap ? at : cap - 1] = 0;
    return at;
}
/* The URIs of a certificate's CRL distribution points, one per line. Only distribution points
   with a full name and no cRLIssuer count; *unsupported is set to the number left out because
   they name a cRLIssuer (indirect CRLs), only a relative name, or only some reasons. */
static inline size_t mtls_ossl_X509_crl_uris(X509 *x, char *buf, size_t cap, int *unsupported) {
    size_t at = 0;
    if (cap) buf[0] = 0;
    *unsupported = 0;
    STACK_OF(DIST_POINT) *dps = X509_get_ext_d2i(x, NID_crl_distribution_points, NULL, NULL);
    if (!dps) return 0;
    for (int i = 0; i < sk_DIST_POINT_num(dps); i++) {
        DIST_POINT *dp = sk_DIST_POINT_value(dps, i);
        if (!dp->distpoint || dp->distpoint->type != 0 || dp->CRLissuer || dp->reasons) { (*unsupported)++; continue; }
        GENERAL_NAMES *names = dp->distpoint->name.fullname;
        for (int j = 0; j < sk_GENERAL_NAME_num(names); j++) {
            GENERAL_NAME *g = sk_GENERAL_NAME_value(names, j);
            if (g->type != GEN_URI) continue;
            ASN1_IA5STRING *u = g->d.uniformResourceIdentifier;
            at = mtls_ossl_append_line(buf, cap, at, ASN1_STRING_get0_data(u), ASN1_STRING_length(u));
        }
    }
    CRL_DIST_POINTS_free(dps);
    return at;
}
/* The URIs of a certificate's AIA OCSP responders, one per line. */
static inline size_t mtls_ossl_X509_ocsp_uris(X509 *x, char *buf, size_t cap) {
    size_t at = 0;
    if (cap) buf[0] = 0;
    STACK_OF(OPENSSL_STRING) *uris = X509_get1_ocsp(x);
    if (!uris) return 0;
    for (int i = 0; i < sk_OPENSSL_STRING_num(uris); i++) {
        const char *u = sk_OPENSSL_STRING_value(uris, i);
        at = mtls_ossl_append_line(buf, cap, at, (const unsigned char *)u, (int)strlen(u));
    }
    X509_email_free(uris);
    return at;
}
/* A CRL's extensions in its own list or in its entries' lists. */
static inline int mtls_ossl_sk_X509_REVOKED_num(const STACK_OF(X509_REVOKED) *sk) { return sk_X509_REVOKED_num(sk); }
static inline X509_REVOKED *mtls_ossl_sk_X509_REVOKED_value(const STACK_OF(X509_REVOKED) *sk, int i) { return sk_X509_REVOKED_value(sk, i); }

/* The CRL's issuingDistributionPoint as flags: 1 present, 2 indirectCRL, 4 onlyContainsUserCerts,
   8 onlyContainsCACerts, 16 onlySomeReasons, 32 onlyContainsAttributeCerts; -1 when it does not
   decode. */
static inline int mtls_ossl_X509_CRL_idp_flags(X509_CRL *crl) {
    int crit = 0;
    ISSUING_DIST_POINT *idp = X509_CRL_get_ext_d2i(crl, NID_issuing_distribution_point, &crit, NULL);
    if (!idp) return crit == -1 ? 0 : -1;
    int f = 1;
    if (idp->indirectCRL) f |= 2;
    if (idp->onlyuser) f |= 4;
    if (idp->onlyCA) f |= 8;
    if (idp->onlysomereasons) f |= 16;
    if (idp->onlyattr) f |= 32;
    ISSUING_DIST_POINT_free(idp);
    return f;
}
/* Whether the CRL's authorityKeyIdentifier names the issuer's key: 1 it does, 0 the CRL has no
   keyIdentifier (or the issuer no SKI) to compare, -1 they differ or the extension is malformed. */
static inline int mtls_ossl_X509_CRL_aki_matches(X509_CRL *crl, X509 *issuer) {
    int crit = 0;
    AUTHORITY_KEYID *aki = X509_CRL_get_ext_d2i(crl, NID_authority_key_identifier, &crit, NULL);
    if (!aki) return crit == -1 ? 0 : -1;
    int rc = 0;
    const ASN1_OCTET_STRING *ski = X509_get0_subject_key_id(issuer);
    if (aki->keyid && ski) rc = ASN1_OCTET_STRING_cmp(aki->keyid, ski) == 0 ? 1 : -1;
    AUTHORITY_KEYID_free(aki);
    return rc;
}
/* OCSP stapling, client side: ask for a staple; read the one the server sent (-1: none). */
static inline long mtls_ossl_SSL_CTX_request_ocsp_staple(SSL_CTX *ctx) { return SSL_CTX_set_tlsext_status_type(ctx, TLSEXT_STATUSTYPE_ocsp); }
static inline long mtls_ossl_SSL_get_ocsp_staple(SSL *s, const unsigned char **resp) {
    unsigned char *p = NULL;
    long n = SSL_get_tlsext_status_ocsp_resp(s, &p);
    *resp = p;
    return p ? n : -1;
}
/* OCSP stapling, server side: the status callback and the response it hands over (OpenSSL frees
   `resp`, which must come from OPENSSL_malloc). */
static inline long mtls_ossl_SSL_CTX_set_status_cb(SSL_CTX *ctx, int (*cb)(SSL *, void *), void *arg) {
    SSL_CTX_set_tlsext_status_arg(ctx, arg);
    return SSL_CTX_set_tlsext_status_cb(ctx, cb);
}
static inline long mtls_ossl_SSL_set_ocsp_staple(SSL *s, unsigned char *resp, long len) {
    return SSL_set_tlsext_status_ocsp_resp(s, resp, len);
}
/* A revoked entry's reason code (CRLReason), or -1 without one. */
static inline int mtls_ossl_X509_REVOKED_reason(const X509_REVOKED *r) {
    int crit = 0;
    ASN1_ENUMERATED *e = X509_REVOKED_get_ext_d2i(r, NID_crl_reason, &crit, NULL);
    if (!e) return -1;
    long v = ASN1_ENUMERATED_get(e);
    ASN1_ENUMERATED_free(e);
    return (int)v;
}

#endif
