/* mtls_enroll_acme, _est, _pki and _revoke (issue 27): what `mtls enroll acme|est|pki` does, from C.
 *
 * Standalone (make test-c): the options' init and version checks, every NULL argument, options
 * that do not go together or do not apply to the source, an ACME directory and an EST server that
 * nobody listens on (MTLS_E_CONNECT), a local CA directory that is not there; nothing is written
 * to the store by any of them.
 *
 * With arguments (Tests/e2e/test_enroll_api.py runs it against a real pebble that requires
 * external account binding, and an `mtls pki` directory):
 *   test_enroll_ca DIRECTORY_URL HTTPS_ROOT CHAIN_ANCHOR HTTP_PORT EAB_KID EAB_KEY PKI_DIR PKI_CA
 * no binding and a wrong MAC key → MTLS_E_CA_REJECTED with pebble's detail, the right one → an
 * identity in the store whose leaf is *out, then mtls_renew gives a new one; the same from the
 * pki directory. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static const uint8_t PASS[] = "enroll passphrase";

/* A 127.0.0.1 port nobody listens on: bound, read, closed. */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t n = sizeof a;
    CHECK(getsockname(fd, (struct sockaddr *)&a, &n) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static mtls_cert *load_cert(const char *path) {
    size_t len;
    uint8_t *pem = t_read_file(path, &len);
    mtls_cert *c = NULL;
    CHECK_OK(mtls_cert_parse(pem, len, &c));
    free(pem);
    return c;
}

static char *sha256(const mtls_cert *c) {
    char *s = NULL;
    CHECK_OK(mtls_cert_sha256_hex(c, &s));
    return s;
}

/* The leaf of the identity `label` in the store, a new reference. */
static mtls_cert *stored_leaf(mtls_store *store, const char *label) {
    mtls_identity *id = NULL;
    CHECK_OK(mtls_store_get_identity(store, label, &id));
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    mtls_identity_free(id);
    return leaf;
}

/* The stored leaf of `label` is `leaf`. */
static void stored_is(mtls_store *store, const char *label, const mtls_cert *leaf) {
    mtls_cert *stored = stored_leaf(store, label);
    char *a = sha256(stored), *b = sha256(leaf);
    CHECK(strcmp(a, b) == 0);
    mtls_string_free(a);
    mtls_string_free(b);
    mtls_cert_free(stored);
}

static void nothing_stored(mtls_store *store, const char *label) {
    mtls_identity *id = NULL;
    CHECK_RC(mtls_store_get_identity(store, label, &id), MTLS_E_NOT_FOUND);
    CHECK(id == NULL);
}

/* What the standalone tests share, made once in main: the store, its folder, and ACME options
 * (HTTP-01 on port 5002) pointed at a directory URL nobody listens on. */
static mtls_store *store;
static char dir[512];
static mtls_enroll_options o;
static char url[128];
static const char *names[] = {"svc.test"};

/* The standard options of the ACME tests; `o` as enroll_options_init leaves it, then these. */
static void acme_options(void) {
    CHECK_OK(mtls_enroll_options_init(&o, MTLS_ENROLL_OPTIONS_VERSION));
    snprintf(url, sizeof url, "https://127.0.0.1:%d/dir", closed_port());
    o.challenge = MTLS_ACME_HTTP01;
    o.port = 5002;
}

TEST(enroll_options_init) {
    CHECK_RC(mtls_enroll_options_init(NULL, MTLS_ENROLL_OPTIONS_VERSION), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_options_init(&o, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_options_init(&o, MTLS_ENROLL_OPTIONS_VERSION + 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_enroll_options_init(&o, MTLS_ENROLL_OPTIONS_VERSION));
    CHECK(o.version == MTLS_ENROLL_OPTIONS_VERSION && o.key_type == NULL && o.challenge == 0 && o.port == 0);
}

TEST(acme_null_arguments) {
    acme_options();
    mtls_cert *out = (mtls_cert *)&o;  /* not NULL: a failure must leave it NULL */
    /* NULL arguments */
    CHECK_RC(mtls_enroll_acme(NULL, "a", url, names, 1, &o, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(out == NULL);
    CHECK_RC(mtls_enroll_acme(store, NULL, url, names, 1, &o, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_acme(store, "a", NULL, names, 1, &o, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_acme(store, "a", url, NULL, 1, &o, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 0, &o, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "at least one") != NULL);
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, (size_t)-1, &o, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "challenge") != NULL);
    const char *bad_name[] = {"not a name!"};
    CHECK_RC(mtls_enroll_acme(store, "a", url, bad_name, 1, &o, &out), MTLS_E_INVALID_ARGUMENT);
}

TEST(acme_options_that_do_not_go_together) {
    acme_options();
    mtls_cert *out = NULL;
    /* options that do not go together, or not with ACME */
    mtls_enroll_options b = o;
    b.challenge = 0;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.port = 0;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "port") != NULL);
    b = o; b.webroot = "/tmp";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.challenge = MTLS_ACME_DNS01;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.eab_kid = "kid-1";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "go together") != NULL);
    b.eab_hmac_key = "not base64url!";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.profile = MTLS_PROFILE_CLIENT;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.key_type = "ec-p384"; b.token_uri = "pkcs11:token=x;object=y";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.key_type = "dsa-1024";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.user = "u";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "EST") != NULL);
    b = o; b.ca_key_password = "pw";
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    /* keep_password (version 2) is EST's, 0 or 1, and needs a password */
    b = o; b.keep_password = 1;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "keep_password") != NULL);
    mtls_enroll_options e2;
    CHECK_OK(mtls_enroll_options_init(&e2, MTLS_ENROLL_OPTIONS_VERSION));
    e2.keep_password = 2;
    CHECK_RC(mtls_enroll_est(store, "e", url, "CN=e", &e2, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "0 or 1") != NULL);
    e2.keep_password = 1;
    CHECK_RC(mtls_enroll_est(store, "e", url, "CN=e", &e2, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "opts->keep_password needs opts->user and opts->password") != NULL);
    /* a version 1 struct (before keep_password) is still read */
    CHECK_OK(mtls_enroll_options_init(&e2, 1));
    CHECK(e2.version == 1);
    b = o; b.timeout_seconds = -1;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.anchor_count = 1;  /* anchors NULL */
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = o; b.version = 7;
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &b, &out), MTLS_E_INVALID_ARGUMENT);
}

TEST(acme_nobody_listens) {
    acme_options();
    mtls_cert *out = (mtls_cert *)&o;  /* not NULL: a failure must leave it NULL */
    /* nobody listens at the directory */
    CHECK_RC(mtls_enroll_acme(store, "a", url, names, 1, &o, &out), MTLS_E_CONNECT);
    CHECK(out == NULL);
    nothing_stored(store, "a");
}

TEST(est_arguments_and_nobody_listens) {
    acme_options();
    mtls_cert *out = NULL;
    mtls_enroll_options b;
    /* EST */
    mtls_enroll_options e;
    CHECK_OK(mtls_enroll_options_init(&e, MTLS_ENROLL_OPTIONS_VERSION));
    char est[128];
    snprintf(est, sizeof est, "https://127.0.0.1:%d/.well-known/est", closed_port());
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", NULL, &out), MTLS_E_INVALID_ARGUMENT);  /* no authentication */
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &e, &out), MTLS_E_INVALID_ARGUMENT);
    e.user = "device";
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &e, &out), MTLS_E_INVALID_ARGUMENT);  /* no password */
    e.password = "secret";
    CHECK_RC(mtls_enroll_est(NULL, "e", est, "CN=device-1", &e, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_est(store, NULL, est, "CN=device-1", &e, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_est(store, "e", NULL, "CN=device-1", &e, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_est(store, "e", est, NULL, &e, &out), MTLS_E_INVALID_ARGUMENT);
    b = e; b.challenge = MTLS_ACME_HTTP01;
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "ACME") != NULL);
    /* EST checks the chain against opts->anchors: chain anchors are refused, not ignored */
    mtls_issued *root = NULL;
    mtls_cert *root_cert = NULL;
    CHECK_OK(mtls_pki_root("Unused Root", NULL, &root));
    CHECK_OK(mtls_issued_cert(root, &root_cert));
    b = e; b.chain_anchors = &root_cert; b.chain_anchor_count = 1;
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "chain_anchors") != NULL);
    mtls_cert_free(root_cert);
    mtls_issued_free(root);
    b = e; b.profile = 99;
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &b, &out), MTLS_E_INVALID_ARGUMENT);
    b = e; b.bootstrap = (const mtls_identity *)store;  /* a handle of another type */
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_est(store, "e", est, "CN=device-1", &e, &out), MTLS_E_CONNECT);
    nothing_stored(store, "e");
}

TEST(local_ca_not_there) {
    acme_options();
    mtls_cert *out = NULL;
    mtls_enroll_options b, e;
    CHECK_OK(mtls_enroll_options_init(&e, MTLS_ENROLL_OPTIONS_VERSION));
    e.user = "device";
    e.password = "secret";
    /* the local CA */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-pki", dir);
    CHECK_RC(mtls_enroll_pki(NULL, "p", missing, "CA", "p.local", NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_pki(store, NULL, missing, "CA", "p.local", NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_pki(store, "p", NULL, "CA", "p.local", NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_pki(store, "p", missing, NULL, "p.local", NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_pki(store, "p", missing, "CA", NULL, NULL, &out), MTLS_E_INVALID_ARGUMENT);
    b = e;  /* EST's user and password do not apply */
    CHECK_RC(mtls_enroll_pki(store, "p", missing, "CA", "p.local", &b, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_pki(store, "p", missing, "CA", "p.local", NULL, &out), MTLS_E_NOT_FOUND);
    nothing_stored(store, "p");
}

/* Against pebble (external account binding required) and an `mtls pki` directory. */
/* Against pebble (external account binding required) and an `mtls pki` directory: what the
 * tests share, set up once from the arguments. The tests run in order: the ACME identity the
 * first enrolls is the one the last revokes. */
static const char *directory, *kid, *key, *pki, *ca;
static mtls_cert *https_root, *chain_anchor;
static mtls_enroll_options ro;
static const char *real_names[] = {"c-abi.test", "127.0.0.1"};

static void real_cas_setup(char **argv) {
    directory = argv[1]; kid = argv[5]; key = argv[6]; pki = argv[7]; ca = argv[8];
    https_root = load_cert(argv[2]);
    chain_anchor = load_cert(argv[3]);
    CHECK_OK(mtls_enroll_options_init(&ro, MTLS_ENROLL_OPTIONS_VERSION));
    ro.challenge = MTLS_ACME_HTTP01;
    ro.port = (uint16_t)atoi(argv[4]);
    ro.listen_address = "127.0.0.1";
    ro.anchors = &https_root;
    ro.anchor_count = 1;
    ro.chain_anchors = &chain_anchor;
    ro.chain_anchor_count = 1;
}

TEST(acme_with_external_account_binding) {
    const char **names = real_names;
    mtls_cert *out = NULL;
    /* pebble requires the binding: a CA rejection with its detail, nothing stored */
    CHECK_RC(mtls_enroll_acme(store, "acme", directory, names, 2, &ro, &out), MTLS_E_CA_REJECTED);
    CHECK(strstr(mtls_last_error(), "externalAccountRequired") != NULL);
    CHECK(out == NULL);
    nothing_stored(store, "acme");
    ro.eab_kid = kid;
    ro.eab_hmac_key = "b10lLJs8l1GPIzsLP0s6pMt8O0XVGnfTaCeROxQM0BIt2XrJMDHJZBM5NuQmQJQH";  /* another key */
    CHECK_RC(mtls_enroll_acme(store, "acme", directory, names, 2, &ro, &out), MTLS_E_CA_REJECTED);
    nothing_stored(store, "acme");
    /* the CA's TLS certificate under anchors that are not its own */
    ro.eab_hmac_key = key;
    ro.anchors = &chain_anchor;
    CHECK_RC(mtls_enroll_acme(store, "acme", directory, names, 2, &ro, &out), MTLS_E_UNTRUSTED);
    ro.anchors = &https_root;

    CHECK_OK(mtls_enroll_acme(store, "acme", directory, names, 2, &ro, &out));
    CHECK(out != NULL);
    stored_is(store, "acme", out);
    char *first = sha256(out);
    mtls_cert_free(out);
    int renewed = 0;
    CHECK_OK(mtls_renew(store, "acme", 1, NULL, NULL, &renewed));
    CHECK(renewed == 1);
    mtls_cert *now = stored_leaf(store, "acme");
    char *second = sha256(now);
    CHECK(strcmp(first, second) != 0);
    mtls_string_free(first);
    mtls_string_free(second);
    mtls_cert_free(now);
}

TEST(local_ca_enrollment) {
    mtls_cert *out = NULL;
    int renewed = 0;
    /* the local CA, a client certificate; out may be NULL */
    mtls_enroll_options p;
    CHECK_OK(mtls_enroll_options_init(&p, MTLS_ENROLL_OPTIONS_VERSION));
    p.profile = MTLS_PROFILE_CLIENT;
    p.key_type = MTLS_KEY_TYPE_EC_P384;
    CHECK_RC(mtls_enroll_pki(store, "local", pki, "No Such CA", "alice", &p, NULL), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_enroll_pki(store, "local", pki, ca, "alice", &p, NULL));
    CHECK_OK(mtls_enroll_pki(store, "local2", pki, ca, "bob", NULL, &out));
    stored_is(store, "local2", out);
    char *summary = NULL;
    CHECK_OK(mtls_cert_subject_summary(out, &summary));
    CHECK(strcmp(summary, "bob") == 0);
    mtls_string_free(summary);
    mtls_cert_free(out);
    renewed = 0;
    CHECK_OK(mtls_renew(store, "local", 1, NULL, NULL, &renewed));
    CHECK(renewed == 1);
}

TEST(revoke_at_the_ca) {
    mtls_cert *out = NULL;
    /* mtls_enroll_revoke: the argument checks, then the renewed ACME certificate revoked at
     * pebble (a second revocation is pebble's refusal: it knows the certificate revoked) */
    out = NULL;
    CHECK_RC(mtls_enroll_revoke(NULL, "acme", 4, NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(out == NULL);
    CHECK_RC(mtls_enroll_revoke(store, NULL, 4, NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_revoke(store, "acme", 7, NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "CRLReason") != NULL);
    CHECK_RC(mtls_enroll_revoke(store, "acme", 11, NULL, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_enroll_revoke(store, "no-such-label", 4, NULL, &out), MTLS_E_NOT_FOUND);
    CHECK_RC(mtls_enroll_revoke(store, "local", MTLS_REVOKE_NO_REASON, NULL, &out), MTLS_E_UNSUPPORTED);
    CHECK(out == NULL);
    CHECK_OK(mtls_enroll_revoke(store, "acme", 4, NULL, &out));
    CHECK(out != NULL);
    stored_is(store, "acme", out); /* the identity stays in the store */
    mtls_cert_free(out);
    out = NULL;
    CHECK_RC(mtls_enroll_revoke(store, "acme", MTLS_REVOKE_NO_REASON, NULL, &out), MTLS_E_CA_REJECTED);
    CHECK(strstr(mtls_last_error(), "alreadyRevoked") != NULL || strstr(mtls_last_error(), "revoked") != NULL);
    CHECK(out == NULL);
}

int main(int argc, char **argv) {
    store = t_temp_store("enroll-ca-c", PASS, sizeof PASS - 1, dir, sizeof dir);

    if (argc == 1) {
        RUN(enroll_options_init);
        RUN(acme_null_arguments);
        RUN(acme_options_that_do_not_go_together);
        RUN(acme_nobody_listens);
        RUN(est_arguments_and_nobody_listens);
        RUN(local_ca_not_there);
    } else if (argc == 9) {
        real_cas_setup(argv);
        RUN(acme_with_external_account_binding);
        RUN(local_ca_enrollment);
        RUN(revoke_at_the_ca);
        mtls_cert_free(https_root);
        mtls_cert_free(chain_anchor);
    } else {
        fprintf(stderr, "usage: %s [DIRECTORY_URL HTTPS_ROOT CHAIN_ANCHOR HTTP_PORT EAB_KID EAB_KEY PKI_DIR PKI_CA]\n", argv[0]);
        return 2;
    }
    t_close_temp_store(store, dir);
    DONE();
}
