/* PKCS#11 tokens through the C ABI: every function, NULL arguments, the token errors, and TLS
 * 1.2 and 1.3 handshakes against openssl s_server whose client key (RSA, P-256, Ed25519, a
 * CKA_ALWAYS_AUTHENTICATE key) exists only on a SoftHSM2 token (made by scripts/softhsm-token.sh
 * in a temporary folder), also from an application's own SSL_CTX. */
#define _DEFAULT_SOURCE
#include "s_server_support.h"
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int pin_calls = 0;
static int destroyed = 0;

/* The destroy function of give_pin's userdata: counts the releases. */
static void count_destroy(void *userdata) {
    (void)userdata;
    destroyed++;
}

/* A PIN callback that answers with the string in userdata (NULL: gives up). */
static int give_pin(const char *label, const char *uri, unsigned int flags, char *pin, size_t size, void *userdata) {
    (void)flags;
    pin_calls++;
    CHECK(label != NULL && strncmp(label, "mtls-", 5) == 0);
    CHECK(uri != NULL && strncmp(uri, "pkcs11:", 7) == 0);
    CHECK(size >= 256);
    if (userdata == NULL) return 1;
    snprintf(pin, size, "%s", (const char *)userdata);
    return 0;
}

static void handshake(const char *dir, mtls_identity *identity, int tls, const char *tls_flag) {
    int port = 0;
    pid_t server = start_server(dir, tls_flag, &port);
    mtls_policy *policy = NULL;
    mtls_cert **ca = NULL;
    size_t n = 0;
    char path[2048];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    CHECK_OK(mtls_cert_list_load(path, &ca, &n));
    CHECK_OK(mtls_policy_new(&policy));
    CHECK_OK(mtls_policy_add_anchor(policy, ca[0]));
    CHECK_OK(mtls_policy_set_anchors_only(policy, 1));
    mtls_conn_options opts;
    CHECK_OK(mtls_conn_options_init(&opts, MTLS_CONN_OPTIONS_VERSION));
    opts.identity = identity;
    opts.policy = policy;
    opts.min_tls = opts.max_tls = tls;
    opts.io_timeout_ms = 1000; /* s_server does not answer: the read below times out */
    mtls_conn *conn = NULL;
    CHECK_OK(mtls_conn_connect("127.0.0.1", (uint16_t)port, &opts, &conn));
    char *version = NULL;
    CHECK_OK(mtls_conn_tls_version(conn, &version));
    CHECK(strcmp(version, tls == MTLS_TLS_1_3 ? "TLSv1.3" : "TLSv1.2") == 0);
    mtls_string_free(version);
    /* A round trip: with TLS 1.3 the server judges our certificate after its Finished. */
    size_t wrote = 0, got = 0;
    CHECK_OK(mtls_conn_write(conn, (const uint8_t *)"ping\n", 5, &wrote));
    uint8_t buf[64];
    int rc = mtls_conn_read(conn, buf, sizeof buf, &got);
    CHECK(rc == MTLS_OK || rc == MTLS_E_TIMEOUT || rc == MTLS_E_CLOSED);
    mtls_conn_free(conn);
    snprintf(path, sizeof path, "%s/sserver.out", dir);
    t_wait_file_contains(path, "ping", 20); /* the server has read it */
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    snprintf(path, sizeof path, "grep -q 'subject=CN = token' %s/sserver.out && grep -q ping %s/sserver.out", dir, dir);
    t_sh(path);
    mtls_policy_free(policy);
    mtls_cert_list_free(ca, n);
}

/* OpenSSL, reached through dlopen (these tests link only libmtls). */
static void *ossl(const char *name) {
    static void *ssl = NULL, *crypto = NULL;
    if (!ssl) ssl = dlopen("libssl.so.3", RTLD_NOW);
    if (!crypto) crypto = dlopen("libcrypto.so.3", RTLD_NOW);
    CHECK(ssl != NULL && crypto != NULL);
    void *f = dlsym(ssl, name);
    if (!f) f = dlsym(crypto, name);
    CHECK(f != NULL);
    return f;
}

/* Whether the host's default OpenSSL context has libmtls's token key provider (it must not). */
static int default_context_has_provider(void) {
    int (*available)(void *, const char *) = (int (*)(void *, const char *))ossl("OSSL_PROVIDER_available");
    return available(NULL, "mtls-token");
}

/* Bring your own SSL_CTX with a token identity: an application SSL_CTX in OpenSSL's default
 * context, configured by mtls_ssl_ctx_configure, handshakes with s_server, the key signing on
 * the token through libmtls's provider (in libmtls's own library context). */
static void byo_handshake(const char *dir, mtls_identity *identity, const char *tls_flag) {
    void *(*client_method)(void) = (void *(*)(void))ossl("TLS_client_method");
    void *(*ctx_new)(const void *) = (void *(*)(const void *))ossl("SSL_CTX_new");
    void (*ctx_free)(void *) = (void (*)(void *))ossl("SSL_CTX_free");
    void *(*ssl_new)(void *) = (void *(*)(void *))ossl("SSL_new");
    void (*ssl_free)(void *) = (void (*)(void *))ossl("SSL_free");
    void *(*bio_connect)(const char *) = (void *(*)(const char *))ossl("BIO_new_connect");
    void (*set_bio)(void *, void *, void *) = (void (*)(void *, void *, void *))ossl("SSL_set_bio");
    int (*set1_host)(void *, const char *) = (int (*)(void *, const char *))ossl("SSL_set1_host");
    int (*ssl_connect)(void *) = (int (*)(void *))ossl("SSL_connect");
    int (*ssl_write)(void *, const void *, int) = (int (*)(void *, const void *, int))ossl("SSL_write");
    int (*ssl_shutdown)(void *) = (int (*)(void *))ossl("SSL_shutdown");
    int port = 0;
    pid_t server = start_server(dir, tls_flag, &port);
    mtls_policy *policy = NULL;
    mtls_cert **ca = NULL;
    size_t n = 0;
    char path[2048];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    CHECK_OK(mtls_cert_list_load(path, &ca, &n));
    CHECK_OK(mtls_policy_new(&policy));
    CHECK_OK(mtls_policy_add_anchor(policy, ca[0]));
    CHECK_OK(mtls_policy_set_anchors_only(policy, 1));
    void *ctx = ctx_new(client_method());
    CHECK(ctx != NULL);
    CHECK_OK(mtls_ssl_ctx_configure(ctx, identity, policy, 0));
    void *ssl = ssl_new(ctx);
    CHECK(ssl != NULL);
    snprintf(path, sizeof path, "127.0.0.1:%d", port);
    void *bio = bio_connect(path);
    CHECK(bio != NULL);
    set_bio(ssl, bio, bio);
    CHECK(set1_host(ssl, "localhost") == 1);
    CHECK(ssl_connect(ssl) == 1);
    CHECK(ssl_write(ssl, "ping\n", 5) == 5);
    snprintf(path, sizeof path, "%s/sserver.out", dir);
    t_wait_file_contains(path, "ping", 20); /* the server has read it */
    ssl_shutdown(ssl);
    ssl_free(ssl);
    ctx_free(ctx);
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    snprintf(path, sizeof path, "grep -q 'subject=CN = token' %s/sserver.out && grep -q ping %s/sserver.out", dir, dir);
    t_sh(path);
    CHECK(default_context_has_provider() == 0);
    mtls_policy_free(policy);
    mtls_cert_list_free(ca, n);
}

/* What the tests share, made once in main: the SoftHSM2 tokens (scripts/softhsm-token.sh) in
 * `dir`, the module and a URI buffer. */
static char dir[512], cmd[4096], conf[600], module[600], uri[4096];

TEST(token_list_and_accessors) {
    /* ---- tokens ---- */
    mtls_token **tokens = NULL;
    size_t count = 0;
    CHECK_RC(mtls_token_list(module, NULL, &count), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_list(module, &tokens, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_list("/nonexistent/module.so", &tokens, &count), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_token_list(module, &tokens, &count));
    CHECK(count == 4);
    mtls_token *test = NULL;
    for (size_t i = 0; i < count; i++) {
        char *label = NULL;
        CHECK_OK(mtls_token_label(tokens[i], &label));
        if (strcmp(label, "mtls-test") == 0) test = mtls_token_ref(tokens[i]);
        mtls_string_free(label);
    }
    mtls_token_list_free(tokens, count);
    CHECK(test != NULL);
    char *s = NULL;
    CHECK_OK(mtls_token_uri(test, &s));
    CHECK(strncmp(s, "pkcs11:", 7) == 0 && strstr(s, "token=mtls-test") != NULL);
    mtls_string_free(s);
    CHECK_OK(mtls_token_manufacturer(test, &s)); CHECK(strcmp(s, "SoftHSM project") == 0); mtls_string_free(s);
    CHECK_OK(mtls_token_model(test, &s)); CHECK(strcmp(s, "SoftHSM v2") == 0); mtls_string_free(s);
    CHECK_OK(mtls_token_serial(test, &s)); CHECK(strlen(s) > 0); mtls_string_free(s);
    CHECK_OK(mtls_token_module_name(test, &s)); CHECK(strlen(s) > 0); mtls_string_free(s);
    CHECK_OK(mtls_token_module_path(test, &s)); CHECK(s == NULL || strstr(s, "softhsm") != NULL); mtls_string_free(s);
    unsigned long slot = 0;
    CHECK_OK(mtls_token_slot(test, &slot));
    unsigned int flags = 0;
    CHECK_OK(mtls_token_flags(test, &flags));
    CHECK((flags & MTLS_TOKEN_LOGIN_REQUIRED) && (flags & MTLS_TOKEN_USER_PIN_INITIALIZED) && !(flags & MTLS_TOKEN_PIN_LOCKED));
    CHECK_RC(mtls_token_label(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_label(test, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_uri(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_manufacturer(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_model(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_serial(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_module_name(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_module_path(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_slot(NULL, &slot), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_slot(test, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_flags(NULL, &flags), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_flags(test, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_token_free(test);
    mtls_token_free(NULL);
    mtls_token_list_free(NULL, 0);
    CHECK(mtls_token_ref(NULL) == NULL);
}

TEST(token_objects) {
    size_t count = 0;
    mtls_token *test = NULL;
    char *s = NULL;
    /* ---- objects ---- */
    mtls_token_object **objs = NULL;
    CHECK_RC(mtls_token_objects(module, "pkcs11:token=mtls-test", NULL, NULL, &count), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_objects(module, "pkcs11:token=mtls-test", NULL, &objs, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_objects(module, "pkcs11:token=absent", NULL, &objs, &count), MTLS_E_TOKEN_NOT_PRESENT);
    CHECK_RC(mtls_token_objects(module, "pkcs11:token=%zz", NULL, &objs, &count), MTLS_E_BAD_URI);
    CHECK_RC(mtls_token_objects(module, "pkcs11:token=mtls-spare", "0000", &objs, &count), MTLS_E_PIN_INCORRECT);
    /* A PIN goes to one token the URI names, never to every token. */
    CHECK_RC(mtls_token_objects(module, NULL, "1234", &objs, &count), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "token=") != NULL);
    CHECK_RC(mtls_token_objects(module, "pkcs11:model=SoftHSM%20v2", "1234", &objs, &count), MTLS_E_BAD_URI);
    CHECK_OK(mtls_token_objects(module, "pkcs11:token=mtls-test", "1234", &objs, &count));
    int certs = 0, keys = 0;
    mtls_token_object *ec_cert = NULL;
    for (size_t i = 0; i < count; i++) {
        int kind = 0;
        char *label = NULL;
        CHECK_OK(mtls_token_object_kind(objs[i], &kind));
        CHECK_OK(mtls_token_object_label(objs[i], &label));
        if (kind == MTLS_TOKEN_OBJECT_CERT) certs++;
        if (kind == MTLS_TOKEN_OBJECT_PRIVATE_KEY) keys++;
        if (kind == MTLS_TOKEN_OBJECT_CERT && label && strcmp(label, "ec-client") == 0) ec_cert = mtls_token_object_ref(objs[i]);
        if (kind == MTLS_TOKEN_OBJECT_PRIVATE_KEY && label && strcmp(label, "rsa-client") == 0) {
            char *kt = NULL;
            CHECK_OK(mtls_token_object_key_type(objs[i], &kt));
            CHECK(kt && strcmp(kt, "rsa2048") == 0);
            mtls_string_free(kt);
            mtls_cert *none = NULL;
            CHECK_RC(mtls_token_object_cert(objs[i], &none), MTLS_E_NOT_FOUND);
        }
        mtls_string_free(label);
    }
    CHECK(certs == 4 && keys == 3 && ec_cert != NULL);
    mtls_token_object_list_free(objs, count);
    uint8_t *id = NULL;
    size_t id_len = 0;
    CHECK_OK(mtls_token_object_id(ec_cert, &id, &id_len));
    CHECK(id_len == 1 && id[0] == 2);
    mtls_bytes_free(id);
    CHECK_OK(mtls_token_object_uri(ec_cert, &s));
    CHECK(strstr(s, "id=%02") && strstr(s, "type=cert") && strstr(s, "object=ec-client"));
    mtls_string_free(s);
    mtls_cert *cert = NULL;
    CHECK_OK(mtls_token_object_cert(ec_cert, &cert));
    CHECK_OK(mtls_cert_subject_summary(cert, &s));
    CHECK(strcmp(s, "token ec-client") == 0);
    mtls_string_free(s);
    mtls_cert_free(cert);
    CHECK_OK(mtls_token_object_token(ec_cert, &test));
    CHECK_OK(mtls_token_label(test, &s)); CHECK(strcmp(s, "mtls-test") == 0); mtls_string_free(s);
    mtls_token_free(test);
    int kind = 0;
    CHECK_RC(mtls_token_object_kind(NULL, &kind), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_kind(ec_cert, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_label(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_uri(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_key_type(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_id(NULL, &id, &id_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_id(ec_cert, NULL, &id_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_cert(NULL, &cert), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_cert(ec_cert, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_token(NULL, &test), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_object_token(ec_cert, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_token_object_free(ec_cert);
    mtls_token_object_free(NULL);
    mtls_token_object_list_free(NULL, 0);
    CHECK(mtls_token_object_ref(NULL) == NULL);
}

TEST(identity_errors) {
    /* ---- identities ---- */
    mtls_identity *identity = NULL;
    CHECK_RC(mtls_identity_from_pkcs11(NULL, NULL, NULL, NULL, &identity), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_from_pkcs11("pkcs11:token=mtls-test;id=%01", NULL, NULL, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_from_pkcs11("https://example.com/", NULL, NULL, NULL, &identity), MTLS_E_BAD_URI);
    snprintf(uri, sizeof uri, "pkcs11:token=no-such-token;id=%%01?module-path=%s", module);
    CHECK_RC(mtls_identity_from_pkcs11(uri, give_pin, "1234", count_destroy, &identity), MTLS_E_TOKEN_NOT_PRESENT);
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-spare;object=spare?module-path=%s", module);
    CHECK_RC(mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &identity), MTLS_E_PIN_REQUIRED);
    CHECK_RC(mtls_identity_from_pkcs11(uri, give_pin, NULL, count_destroy, &identity), MTLS_E_PIN_REQUIRED);
    destroyed = 0;
    CHECK_RC(mtls_identity_from_pkcs11(uri, give_pin, "0000", count_destroy, &identity), MTLS_E_PIN_INCORRECT);
    CHECK(destroyed == 1); /* released on failure too */
    CHECK(strstr(mtls_last_error(), "mtls-spare") != NULL);
    CHECK_RC(mtls_identity_from_pkcs11(NULL, give_pin, "1234", count_destroy, &identity), MTLS_E_INVALID_ARGUMENT);
    CHECK(destroyed == 2);
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-locked;object=locked?module-path=%s", module);
    CHECK_RC(mtls_identity_from_pkcs11(uri, give_pin, "1234", count_destroy, &identity), MTLS_E_PIN_LOCKED);
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-test;id=%%99?module-path=%s", module);
    CHECK_RC(mtls_identity_from_pkcs11(uri, give_pin, "1234", count_destroy, &identity), MTLS_E_NOT_FOUND);
    CHECK(identity == NULL);
}

TEST(rsa_identity_pin_from_callback) {
    mtls_identity *identity = NULL;
    char *s = NULL;
    /* RSA, PIN from the callback; registered modules (Debian registers SoftHSM2 with p11-kit)
       or the module path in the URI. */
    pin_calls = 0;
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-test;object=rsa-client?module-path=%s", module);
    destroyed = 0;
    CHECK_OK(mtls_identity_from_pkcs11(uri, give_pin, "1234", count_destroy, &identity));
    CHECK(pin_calls == 1);
    CHECK(destroyed == 1); /* the PIN callback's userdata is released once, before the call returns */
    CHECK_OK(mtls_identity_token_uri(identity, &s));
    CHECK(s && strstr(s, "type=private") && strstr(s, "id=%01"));
    mtls_string_free(s);
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(identity, &leaf));
    CHECK_OK(mtls_cert_subject_summary(leaf, &s));
    CHECK(strcmp(s, "token rsa-client") == 0);
    mtls_string_free(s);
    mtls_cert_free(leaf);
    CHECK_RC(mtls_identity_token_uri(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_token_uri(identity, NULL), MTLS_E_INVALID_ARGUMENT);
    handshake(dir, identity, MTLS_TLS_1_2, "-tls1_2");
    handshake(dir, identity, MTLS_TLS_1_3, "-tls1_3");
    mtls_identity_free(identity);
}

TEST(open_pin_source_file_refused) {
    mtls_identity *identity = NULL;
    /* A pin-source file everyone can read is a secret file left open: refused, naming it and the
     * chmod that fixes it, before the token sees the PIN. */
    snprintf(cmd, sizeof cmd, "cp %s/pin %s/open-pin && chmod 644 %s/open-pin", dir, dir, dir);
    t_sh(cmd);
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-test;id=%%02?module-path=%s&pin-source=file:%s/open-pin", module, dir);
    CHECK_RC(mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &identity), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "open-pin") != NULL && strstr(mtls_last_error(), "chmod 600") != NULL);
}

TEST(ec_identity_pin_from_pin_source) {
    mtls_identity *identity = NULL;
    /* EC P-256, PIN from the URI's pin-source. */
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-test;id=%%02?module-path=%s&pin-source=file:%s/pin", module, dir);
    CHECK_OK(mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &identity));
    handshake(dir, identity, MTLS_TLS_1_2, "-tls1_2");
    handshake(dir, identity, MTLS_TLS_1_3, "-tls1_3");
    mtls_identity_free(identity);
}

TEST(ed25519_and_application_ssl_ctx) {
    mtls_identity *identity = NULL;
    /* Ed25519 (CKM_EDDSA through libmtls's OpenSSL provider). */
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-spare;object=ed-client?module-path=%s&pin-value=1234", module);
    CHECK_OK(mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &identity));
    handshake(dir, identity, MTLS_TLS_1_2, "-tls1_2");
    handshake(dir, identity, MTLS_TLS_1_3, "-tls1_3");
    /* The application's own SSL_CTX (OpenSSL's default context) signs with the token key too. */
    byo_handshake(dir, identity, "-tls1_3");
    mtls_identity_free(identity);
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-test;id=%%01?module-path=%s&pin-value=1234", module);
    CHECK_OK(mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &identity));
    byo_handshake(dir, identity, "-tls1_2");
    mtls_identity_free(identity);
}

TEST(always_authenticate_key) {
    mtls_identity *identity = NULL;
    /* CKA_ALWAYS_AUTHENTICATE: a context-specific login with the callback's PIN before each
       signature (the callback is asked once to open the identity, then once per handshake). */
    pin_calls = 0;
    destroyed = 0;
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-spare;object=always-auth?module-path=%s", module);
    CHECK_OK(mtls_identity_from_pkcs11(uri, give_pin, "1234", count_destroy, &identity));
    CHECK(pin_calls == 1);
    CHECK(destroyed == 0); /* the identity keeps the callback, and so its userdata */
    handshake(dir, identity, MTLS_TLS_1_3, "-tls1_3");
    handshake(dir, identity, MTLS_TLS_1_2, "-tls1_2");
    CHECK(pin_calls == 3);
    mtls_identity_free(identity);
    mtls_conn_cache_clear(); /* cached contexts may hold the identity too */
    CHECK(destroyed == 1);
}

TEST(provider_not_in_default_context) {
    /* libmtls never loads its provider into the host program's default OpenSSL context. */
    CHECK(default_context_has_provider() == 0);
}

TEST(key_in_memory_has_no_token_uri) {
    mtls_identity *identity = NULL;
    char *s = NULL;
    /* A key in memory has no token URI. */
    snprintf(cmd, sizeof cmd, "%s/server.pem", dir);
    size_t cert_len = 0, key_len = 0;
    uint8_t *cert_pem = t_read_file(cmd, &cert_len);
    snprintf(cmd, sizeof cmd, "%s/server.key", dir);
    uint8_t *key_pem = t_read_file(cmd, &key_len);
    cert_pem[cert_len] = 0;
    key_pem[key_len] = 0;
    CHECK_OK(mtls_identity_from_pem((const char *)cert_pem, (const char *)key_pem, NULL, &identity));
    CHECK_OK(mtls_identity_token_uri(identity, &s));
    CHECK(s == NULL);
    mtls_identity_free(identity);
    free(cert_pem);
    free(key_pem);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    /* SoftHSM2 is installed by scripts/install-deps.sh: without it this program fails, never skips. */
    if (access("/usr/lib/softhsm/libsofthsm2.so", F_OK) != 0) {
        fprintf(stderr, "SoftHSM2 is not installed (/usr/lib/softhsm/libsofthsm2.so): run scripts/install-deps.sh\n");
        return 1; /* before any test: nothing runs */
    }
    snprintf(dir, sizeof dir, "%s/tokens-c-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && scripts/softhsm-token.sh %s", dir, dir);
    t_sh(cmd);
    snprintf(conf, sizeof conf, "%s/softhsm2.conf", dir);
    setenv("SOFTHSM2_CONF", conf, 1);
    snprintf(module, sizeof module, "/usr/lib/softhsm/libsofthsm2.so");

    RUN(token_list_and_accessors);
    RUN(token_objects);
    RUN(identity_errors);
    RUN(rsa_identity_pin_from_callback);
    RUN(open_pin_source_file_refused);
    RUN(ec_identity_pin_from_pin_source);
    RUN(ed25519_and_application_ssl_ctx);
    RUN(always_authenticate_key);
    RUN(provider_not_in_default_context);
    RUN(key_in_memory_has_no_token_uri);
    DONE();
}
