/* Two token benchmarks, each printing one JSON line with both median times and their ratio.
 *
 * Opening a token identity: mtls_identity_from_pkcs11 against the same work done with raw p11-kit
 * and PKCS#11 calls (load and initialise the module, find the token, open a session, log in, find
 * the certificate by CKA_ID and parse it, find the private key with the same CKA_ID, finalise),
 * in the same process, interleaved.
 *   usage: bench_tokens MODULE TOKEN_LABEL ID_HEX PIN [ROUNDS]
 *
 * Token signatures within handshakes: a TLS 1.3 client (an SSL_CTX configured with the token
 * identity by mtls_ssl_ctx_configure) handshakes with a libmtls listener in this process; the
 * time from writing its Certificate to writing its CertificateVerify (OpenSSL building the
 * signed content, hashing, libmtls's provider, C_SignInit + C_Sign on the token, encoding) is
 * compared with raw C_SignInit + C_Sign of the same mechanism on the same key object, through
 * its own p11-kit session, interleaved round by round.
 *   usage: bench_tokens sign MODULE TOKEN_LABEL ID_HEX PIN DIR [ROUNDS]
 *   (DIR: made by scripts/softhsm-token.sh, for ca.pem, server.pem and server.key) */
#define _POSIX_C_SOURCE 200809L
#include <mtls.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_support.h"

static void die(const char *what, unsigned long rv) {
    fprintf(stderr, "%s failed: 0x%lx\n", what, rv);
    exit(1);
}

static void run_mtls(const char *uri) {
    mtls_identity *id = NULL;
    if (mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &id) != MTLS_OK) {
        fprintf(stderr, "mtls_identity_from_pkcs11: %s\n", mtls_last_error());
        exit(1);
    }
    mtls_identity_free(id);
}

/* A CKA_ID given in hex ("01", or a TPM key's longer random id), and its URI form (%01...). */
struct key_id {
    unsigned char bytes[64];
    size_t len;
    char uri[64 * 3 + 1];
};

static struct key_id parse_id(const char *hex) {
    struct key_id id = {{0}, 0, {0}};
    size_t n = strlen(hex);
    if (n == 0 || n % 2 || n / 2 > sizeof id.bytes) die("the key id (hex bytes)", 0);
    for (size_t i = 0; i < n / 2; i++) {
        char byte[3] = {hex[2 * i], hex[2 * i + 1], 0};
        id.bytes[i] = (unsigned char)strtoul(byte, NULL, 16);
        snprintf(id.uri + 3 * i, 4, "%%%02x", id.bytes[i]);
    }
    id.len = n / 2;
    return id;
}

static CK_OBJECT_HANDLE find_one(CK_FUNCTION_LIST *f, CK_SESSION_HANDLE s, CK_OBJECT_CLASS cls, const struct key_id *id) {
    CK_ATTRIBUTE t[2] = {{CKA_CLASS, &cls, sizeof cls}, {CKA_ID, (void *)id->bytes, id->len}};
    CK_OBJECT_HANDLE h = 0;
    CK_ULONG n = 0;
    CK_RV rv = f->C_FindObjectsInit(s, t, 2);
    if (rv != CKR_OK) die("C_FindObjectsInit", rv);
    rv = f->C_FindObjects(s, &h, 1, &n);
    if (rv != CKR_OK || n != 1) die("C_FindObjects", rv);
    f->C_FindObjectsFinal(s);
    return h;
}

static void run_raw(const char *module, const char *label, const struct key_id *id, const char *pin) {
    CK_FUNCTION_LIST *f = p11_kit_module_load(module, 0);
    if (!f) die("p11_kit_module_load", 0);
    CK_RV rv = p11_kit_module_initialize(f);
    if (rv != CKR_OK) die("p11_kit_module_initialize", rv);
    CK_SLOT_ID slots[16];
    CK_ULONG count = 16;
    rv = f->C_GetSlotList(CK_TRUE, slots, &count);
    if (rv != CKR_OK) die("C_GetSlotList", rv);
    CK_SLOT_ID slot = (CK_SLOT_ID)-1;
    for (CK_ULONG i = 0; i < count; i++) {
        CK_TOKEN_INFO info;
        char l[33];
        if (f->C_GetTokenInfo(slots[i], &info) != CKR_OK) continue;
        memcpy(l, info.label, 32);
        l[32] = 0;
        for (int j = 31; j >= 0 && l[j] == ' '; j--) l[j] = 0;
        if (strcmp(l, label) == 0) { slot = slots[i]; break; }
    }
    if (slot == (CK_SLOT_ID)-1) die("token lookup", 0);
    CK_SESSION_HANDLE s;
    rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &s);
    if (rv != CKR_OK) die("C_OpenSession", rv);
    rv = f->C_Login(s, CKU_USER, (unsigned char *)pin, strlen(pin));
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) die("C_Login", rv);
    CK_OBJECT_HANDLE cert = find_one(f, s, CKO_CERTIFICATE, id);
    unsigned char der[8192];
    CK_ATTRIBUTE v = {CKA_VALUE, der, sizeof der};
    rv = f->C_GetAttributeValue(s, cert, &v, 1);
    if (rv != CKR_OK) die("C_GetAttributeValue", rv);
    const unsigned char *p = der;
    X509 *x = d2i_X509(NULL, &p, (long)v.ulValueLen);
    if (!x) die("d2i_X509", 0);
    (void)find_one(f, s, CKO_PRIVATE_KEY, id);
    X509_free(x);
    f->C_CloseSession(s);
    p11_kit_module_finalize(f);
    p11_kit_module_release(f);
}

/* ---- token signatures within handshakes ---- */

static double cert_written, verify_time;

/* OpenSSL's message callback: the client's Certificate, then its CertificateVerify, written. */
static void on_message(int write_p, int version, int content_type, const void *buf, size_t len, SSL *ssl, void *arg) {
    (void)version; (void)ssl; (void)arg;
    if (!write_p || content_type != SSL3_RT_HANDSHAKE || len < 1) return;
    int type = ((const unsigned char *)buf)[0];
    if (type == SSL3_MT_CERTIFICATE) cert_written = bench_now();
    else if (type == SSL3_MT_CERTIFICATE_VERIFY) verify_time = bench_now() - cert_written;
}

struct server { mtls_listener *listener; int count; };

static void *serve(void *arg) {
    struct server *s = arg;
    for (int i = 0; i < s->count; i++) {
        mtls_conn *c = NULL;
        if (mtls_listener_accept(s->listener, 20000, &c) == MTLS_OK) mtls_conn_free(c);
    }
    return NULL;
}

static char *read_text(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) die(path, 0);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static mtls_policy *anchored_policy(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    mtls_cert **ca = NULL;
    size_t n = 0;
    mtls_policy *p = NULL;
    if (mtls_cert_list_load(path, &ca, &n) != MTLS_OK || mtls_policy_new(&p) != MTLS_OK
        || mtls_policy_add_anchor(p, ca[0]) != MTLS_OK || mtls_policy_set_anchors_only(p, 1) != MTLS_OK)
        die(mtls_last_error(), 0);
    mtls_cert_list_free(ca, n);
    return p;
}

static int run_sign(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench_tokens sign MODULE TOKEN_LABEL ID_HEX PIN DIR [ROUNDS]\n");
        return 2;
    }
    const char *module = argv[2], *label = argv[3], *pin = argv[5], *dir = argv[6];
    struct key_id kid = parse_id(argv[4]), *id = &kid;
    int rounds = argc > 7 ? atoi(argv[7]) : 101;
    char uri[4096];
    snprintf(uri, sizeof uri, "pkcs11:token=%s;id=%s?module-path=%s&pin-value=%s", label, id->uri, module, pin);
    mtls_identity *identity = NULL, *server_identity = NULL;
    if (mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &identity) != MTLS_OK) die(mtls_last_error(), 0);
    char *cert = read_text(dir, "server.pem"), *server_key = read_text(dir, "server.key");
    if (mtls_identity_from_pem(cert, server_key, NULL, &server_identity) != MTLS_OK) die(mtls_last_error(), 0);
    free(cert);
    free(server_key);
    mtls_policy *policy = anchored_policy(dir);

    mtls_listener_options lo;
    mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION);
    lo.client_auth = MTLS_CLIENT_AUTH_REQUIRE;
    lo.identity = server_identity;
    lo.client_policy = policy;
    lo.min_tls = lo.max_tls = MTLS_TLS_1_3;
    struct server server = {NULL, 2 * (rounds + 1)};
    if (mtls_listener_new("127.0.0.1", 0, &lo, &server.listener) != MTLS_OK) die(mtls_last_error(), 0);
    uint16_t port = 0;
    mtls_listener_port(server.listener, &port);
    pthread_t thread;
    pthread_create(&thread, NULL, serve, &server);

    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    if (mtls_ssl_ctx_configure(ctx, identity, policy, 0) != MTLS_OK) die(mtls_last_error(), 0);
    SSL_CTX_set_msg_callback(ctx, on_message);

    /* The raw side: its own p11-kit session on the same token and key object. */
    CK_FUNCTION_LIST *f = p11_kit_module_load(module, 0);
    if (!f) die("p11_kit_module_load", 0);
    CK_RV rv = p11_kit_module_initialize(f);
    if (rv != CKR_OK) die("p11_kit_module_initialize", rv);
    CK_SLOT_ID slots[16];
    CK_ULONG count = 16;
    if ((rv = f->C_GetSlotList(CK_TRUE, slots, &count)) != CKR_OK) die("C_GetSlotList", rv);
    CK_SLOT_ID slot = (CK_SLOT_ID)-1;
    for (CK_ULONG i = 0; i < count; i++) {
        CK_TOKEN_INFO info;
        char l[33];
        if (f->C_GetTokenInfo(slots[i], &info) != CKR_OK) continue;
        memcpy(l, info.label, 32);
        l[32] = 0;
        for (int j = 31; j >= 0 && l[j] == ' '; j--) l[j] = 0;
        if (strcmp(l, label) == 0) { slot = slots[i]; break; }
    }
    if (slot == (CK_SLOT_ID)-1) die("token lookup", 0);
    CK_SESSION_HANDLE session;
    if ((rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &session)) != CKR_OK) die("C_OpenSession", rv);
    rv = f->C_Login(session, CKU_USER, (unsigned char *)pin, strlen(pin));
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) die("C_Login", rv);
    CK_OBJECT_HANDLE key = find_one(f, session, CKO_PRIVATE_KEY, id);
    CK_KEY_TYPE kt = 0;
    CK_ATTRIBUTE kta = {CKA_KEY_TYPE, &kt, sizeof kt};
    if ((rv = f->C_GetAttributeValue(session, key, &kta, 1)) != CKR_OK) die("C_GetAttributeValue", rv);
    /* What the handshake signs with each key type in TLS 1.3: rsa_pss_rsae_sha256 (the hash),
       ecdsa_secp256r1_sha256 (the hash), ed25519 (the 130-byte signed content itself). */
    CK_RSA_PKCS_PSS_PARAMS pss = {CKM_SHA256, CKG_MGF1_SHA256, 32};
    CK_MECHANISM mech = {CKM_ECDSA, NULL, 0};
    unsigned char input[130];
    CK_ULONG input_len = 32;
    memset(input, 0x5a, sizeof input);
    if (kt == CKK_RSA) { mech.mechanism = CKM_RSA_PKCS_PSS; mech.pParameter = &pss; mech.ulParameterLen = sizeof pss; }
    else if (kt == CKK_EC_EDWARDS) { mech.mechanism = CKM_EDDSA; input_len = sizeof input; }
    else {
        /* ecdsa_secp384r1_sha384 signs a SHA-384 hash (P-384's CKA_EC_PARAMS is the 7-byte OID). */
        unsigned char params[64];
        CK_ATTRIBUTE pa = {CKA_EC_PARAMS, params, sizeof params};
        if (f->C_GetAttributeValue(session, key, &pa, 1) == CKR_OK && pa.ulValueLen == 7) input_len = 48;
    }

    /* For the record: the same window with a key in memory (the server's own identity presented
       as a client: OpenSSL's part of the window plus a software signature), and EVP_DigestSign
       with the token key alone (the provider path without the handshake around it). */
    SSL_CTX *soft = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(soft, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(soft, TLS1_3_VERSION);
    if (mtls_ssl_ctx_configure(soft, server_identity, policy, 0) != MTLS_OK) die(mtls_last_error(), 0);
    SSL_CTX_set_msg_callback(soft, on_message);
    EVP_PKEY *token_key = SSL_CTX_get0_privatekey(ctx);
    if (!token_key) die("SSL_CTX_get0_privatekey", 0);

    double *th = calloc((size_t)rounds, sizeof *th), *tr = calloc((size_t)rounds, sizeof *tr);
    double *ts = calloc((size_t)rounds, sizeof *ts), *te = calloc((size_t)rounds, sizeof *te);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%u", (unsigned)port);
    for (int r = -1; r < rounds; r++) { /* round -1 warms both paths up */
        double soft_time = 0;
        for (int k = 0; k < 2; k++) {
            SSL *ssl = SSL_new(k == 0 ? ctx : soft);
            BIO *bio = BIO_new_connect(target);
            SSL_set_bio(ssl, bio, bio);
            SSL_set1_host(ssl, "localhost");
            verify_time = -1;
            if (SSL_connect(ssl) != 1 || verify_time < 0) die("handshake", 0);
            SSL_shutdown(ssl);
            SSL_free(ssl);
            if (k == 0) soft_time = verify_time; else { double t = verify_time; verify_time = soft_time; soft_time = t; }
        }
        /* Raw C_SignInit + C_Sign, right after a handshake as the handshake's own signature is
           (the same caches lost; a signature made right after another one is faster). */
        unsigned char sig[1024];
        CK_ULONG sig_len = sizeof sig;
        double t0 = bench_now();
        if ((rv = f->C_SignInit(session, &mech, key)) != CKR_OK) die("C_SignInit", rv);
        if ((rv = f->C_Sign(session, input, input_len, sig, &sig_len)) != CKR_OK) die("C_Sign", rv);
        double t1 = bench_now();
        {
            EVP_MD_CTX *md = EVP_MD_CTX_new();
            unsigned char out[1024];
            size_t out_len = sizeof out;
            double e0 = bench_now();
            if (EVP_DigestSignInit_ex(md, NULL, kt == CKK_EC_EDWARDS ? NULL : "SHA256", NULL, NULL, token_key, NULL) != 1
                || EVP_DigestSign(md, out, &out_len, input, sizeof input) != 1) die("EVP_DigestSign", 0);
            if (r >= 0) te[r] = bench_now() - e0;
            EVP_MD_CTX_free(md);
        }
        if (r >= 0) ts[r] = soft_time;
        if (r >= 0) { th[r] = verify_time; tr[r] = t1 - t0; }
    }
    pthread_join(thread, NULL);
    qsort(th, (size_t)rounds, sizeof *th, bench_cmp_double);
    qsort(tr, (size_t)rounds, sizeof *tr, bench_cmp_double);
    qsort(ts, (size_t)rounds, sizeof *ts, bench_cmp_double);
    qsort(te, (size_t)rounds, sizeof *te, bench_cmp_double);
    double h = th[rounds / 2] * 1e3, raw = tr[rounds / 2] * 1e3;
    printf("{\"handshake_sign_ms\": %.4f, \"raw_ms\": %.4f, \"ratio\": %.4f, \"software_key_window_ms\": %.4f, "
           "\"evp_sign_ms\": %.4f}\n", h, raw, h / raw, ts[rounds / 2] * 1e3, te[rounds / 2] * 1e3);
    SSL_CTX_free(soft);
    free(ts);
    free(te);
    SSL_CTX_free(ctx);
    mtls_listener_free(server.listener);
    f->C_CloseSession(session);
    p11_kit_module_finalize(f);
    p11_kit_module_release(f);
    mtls_policy_free(policy);
    mtls_identity_free(identity);
    mtls_identity_free(server_identity);
    free(th);
    free(tr);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "sign") == 0) return run_sign(argc, argv);
    if (argc < 5) {
        fprintf(stderr, "usage: bench_tokens MODULE TOKEN_LABEL ID_HEX PIN [ROUNDS]\n");
        return 2;
    }
    const char *module = argv[1], *label = argv[2], *pin = argv[4];
    struct key_id kid = parse_id(argv[3]), *id = &kid;
    int rounds = argc > 5 ? atoi(argv[5]) : 41;
    char uri[2048];
    snprintf(uri, sizeof uri, "pkcs11:token=%s;id=%s?module-path=%s&pin-value=%s", label, id->uri, module, pin);
    double *tm = calloc((size_t)rounds, sizeof *tm), *to = calloc((size_t)rounds, sizeof *to);
    run_mtls(uri); /* warm up both paths (dlopen, provider loading) */
    run_raw(module, label, id, pin);
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now();
        run_mtls(uri);
        double t1 = bench_now();
        run_raw(module, label, id, pin);
        double t2 = bench_now();
        tm[r] = t1 - t0;
        to[r] = t2 - t1;
    }
    qsort(tm, (size_t)rounds, sizeof *tm, bench_cmp_double);
    qsort(to, (size_t)rounds, sizeof *to, bench_cmp_double);
    double m = tm[rounds / 2] * 1e3, o = to[rounds / 2] * 1e3;
    printf("{\"mtls_ms\": %.4f, \"raw_ms\": %.4f, \"ratio\": %.4f}\n", m, o, m / o);
    free(tm);
    free(to);
    return 0;
}
