/* The rules about which enrollment options go together, through the C ABI: each one is the
 * core's (Sources/MTLSEnrollment/Enrollment/EnrollmentRules.swift), and mtls_enroll_acme, _est and _pki
 * refuse a broken rule with MTLS_E_INVALID_ARGUMENT and a message naming the mtls_enroll_options
 * fields, before the CA or the store is touched (the URLs point at a closed port, the pki
 * directory does not exist: a rule that were not checked would give MTLS_E_CONNECT or
 * MTLS_E_NOT_FOUND instead). Nothing is stored by any of them. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <unistd.h>

static const uint8_t PASS[] = "rules passphrase";
static const char *ACME_URL = "https://127.0.0.1:1/dir";
static const char *EST_URL = "https://127.0.0.1:1/.well-known/est";
static const char *NAMES[] = {"svc.test"};

/* The call returns MTLS_E_INVALID_ARGUMENT with `message` in mtls_last_error(), and *out NULL. */
#define REFUSED(call, message) do { \
    out = (mtls_cert *)&out; \
    CHECK_RC(call, MTLS_E_INVALID_ARGUMENT); \
    CHECK(out == NULL); \
    if (strstr(mtls_last_error(), message) == NULL) { \
        fprintf(stderr, "%s:%d: wanted \"%s\" in \"%s\"\n", __FILE__, __LINE__, message, mtls_last_error()); t_fail(); } \
    T_PASS(); } while (0)

static mtls_enroll_options acme_options(void) {
    mtls_enroll_options o;
    CHECK_OK(mtls_enroll_options_init(&o, MTLS_ENROLL_OPTIONS_VERSION));
    o.challenge = MTLS_ACME_HTTP01;
    o.port = 5002;
    return o;
}

static mtls_enroll_options est_options(void) {
    mtls_enroll_options o;
    CHECK_OK(mtls_enroll_options_init(&o, MTLS_ENROLL_OPTIONS_VERSION));
    o.user = "device";
    o.password = "secret";
    return o;
}

static void acme_rules(mtls_store *store) {
    mtls_cert *out = NULL;
    mtls_enroll_options o = acme_options(), b;

    /* at least one name */
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 0, &o, &out), "give at least one name in names");
    /* exactly one challenge method */
    b = o; b.challenge = 0; b.port = 0;
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out),
            "give exactly one of opts->challenge = MTLS_ACME_HTTP01, opts->challenge = MTLS_ACME_WEBROOT");
    /* a method needs its parameter */
    b = o; b.port = 0;
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out),
            "opts->challenge = MTLS_ACME_HTTP01 needs opts->port from 1 to 65535");
    b = o; b.challenge = MTLS_ACME_WEBROOT; b.port = 0;
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out),
            "opts->challenge = MTLS_ACME_WEBROOT needs opts->webroot");
    b = o; b.challenge = MTLS_ACME_DNS01; b.port = 0;
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), "opts->challenge = MTLS_ACME_DNS01 needs opts->dns_hook");
    /* a parameter of another method is refused, not ignored */
    b = o; b.webroot = "/srv/www";
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out),
            "opts->webroot does not go with opts->challenge = MTLS_ACME_HTTP01");
    b = o; b.challenge = MTLS_ACME_DNS01; b.dns_hook = "/bin/true";
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out),
            "opts->port does not go with opts->challenge = MTLS_ACME_DNS01");
    b = o; b.challenge = MTLS_ACME_WEBROOT; b.port = 0; b.webroot = "/srv/www"; b.timeout_seconds = 1;
    b.listen_address = "127.0.0.1";  /* no responder to listen: unused, as `mtls enroll acme --listen-address` */
    CHECK_RC(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), MTLS_E_CONNECT);
    /* the external account binding's two parts go together */
    b = o; b.eab_kid = "kid-1";
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), "opts->eab_kid and opts->eab_hmac_key go together");
    b = o; b.eab_hmac_key = "a2V5";
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), "opts->eab_kid and opts->eab_hmac_key go together");
    /* a key type makes a new key: not with a token key */
    b = o; b.key_type = MTLS_KEY_TYPE_EC_P384; b.token_uri = "pkcs11:token=t;object=k";
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out),
            "opts->key_type makes a new key; it does not go with opts->token_uri");
    /* the poll timeout: 0 is the default, otherwise 1 to 86400 seconds */
    b = o; b.timeout_seconds = -1;
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), "opts->timeout_seconds must be 1 to 86400 seconds");
    b = o; b.timeout_seconds = 86401;
    REFUSED(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), "opts->timeout_seconds must be 1 to 86400 seconds");

    /* Every rule kept: the request goes out (and finds nobody at the directory). */
    b = o; b.timeout_seconds = 86400;
    CHECK_RC(mtls_enroll_acme(store, "a", ACME_URL, NAMES, 1, &b, &out), MTLS_E_CONNECT);
}

static void est_rules(mtls_store *store) {
    mtls_cert *out = NULL;
    mtls_enroll_options o = est_options(), b;

    /* a user and a password go together */
    b = o; b.password = NULL;
    REFUSED(mtls_enroll_est(store, "e", EST_URL, "CN=device-1", &b, &out), "opts->user and opts->password go together");
    b = o; b.user = NULL;
    REFUSED(mtls_enroll_est(store, "e", EST_URL, "CN=device-1", &b, &out), "opts->user and opts->password go together");
    /* basic authentication or a bootstrap identity */
    REFUSED(mtls_enroll_est(store, "e", EST_URL, "CN=device-1", NULL, &out),
            "give opts->user and opts->password, or opts->bootstrap");
    /* a key type makes a new key: not with a token key */
    b = o; b.key_type = MTLS_KEY_TYPE_EC_P256; b.token_uri = "pkcs11:token=t;object=k";
    REFUSED(mtls_enroll_est(store, "e", EST_URL, "CN=device-1", &b, &out),
            "opts->key_type makes a new key; it does not go with opts->token_uri");
    /* EST issues server or client certificates */
    b = o; b.profile = MTLS_PROFILE_INTERMEDIATE;
    REFUSED(mtls_enroll_est(store, "e", EST_URL, "CN=device-1", &b, &out), "opts->profile is server or client");

    CHECK_RC(mtls_enroll_est(store, "e", EST_URL, "CN=device-1", &o, &out), MTLS_E_CONNECT);
}

static void pki_rules(mtls_store *store, const char *dir) {
    mtls_cert *out = NULL;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-pki", dir);
    mtls_enroll_options o;
    CHECK_OK(mtls_enroll_options_init(&o, MTLS_ENROLL_OPTIONS_VERSION));

    /* a key type makes a new key: not with a token key */
    mtls_enroll_options b = o;
    b.key_type = MTLS_KEY_TYPE_RSA_2048; b.token_uri = "pkcs11:token=t;object=k";
    REFUSED(mtls_enroll_pki(store, "p", missing, "CA", "p.local", &b, &out),
            "opts->key_type makes a new key; it does not go with opts->token_uri");
    /* the local CA issues server or client certificates */
    b = o; b.profile = MTLS_PROFILE_ROOT;
    REFUSED(mtls_enroll_pki(store, "p", missing, "CA", "p.local", &b, &out), "opts->profile is server or client");

    CHECK_RC(mtls_enroll_pki(store, "p", missing, "CA", "p.local", &o, &out), MTLS_E_NOT_FOUND);
}

static mtls_store *test_store;
static const char *test_dir;
TEST(acme_rules_refuse_before_any_request) { acme_rules(test_store); }
TEST(est_rules_refuse_before_any_request) { est_rules(test_store); }
TEST(pki_rules_refuse_before_issuing) { pki_rules(test_store, test_dir); }

int main(void) {
    char dir[512];
    mtls_store *store = t_temp_store("enroll-rules-c", PASS, sizeof PASS - 1, dir, sizeof dir);

    test_store = store;
    test_dir = dir;
    RUN(acme_rules_refuse_before_any_request);
    RUN(est_rules_refuse_before_any_request);
    RUN(pki_rules_refuse_before_issuing);

    /* nothing was stored by any of them */
    const char *labels[] = {"a", "e", "p"};
    for (size_t i = 0; i < 3; i++) {
        mtls_identity *id = NULL;
        CHECK_RC(mtls_store_get_identity(store, labels[i], &id), MTLS_E_NOT_FOUND);
    }
    t_close_temp_store(store, dir);
    DONE();
}
