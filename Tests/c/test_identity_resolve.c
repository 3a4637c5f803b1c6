/* mtls_identity_resolve: one name, every source a user can give (PEM pair, .p12, store label),
 * and the errors for what is missing. */
#include "test_support.h"
#include <unistd.h>

static void expect_cn(mtls_identity *id, const char *cn) {
    mtls_cert *leaf = NULL;
    char *subject = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    CHECK_OK(mtls_cert_subject(leaf, &subject));
    CHECK(strstr(subject, cn) != NULL);
    mtls_string_free(subject);
    mtls_cert_free(leaf);
}

/* What the tests share, made once in main or by the test before (they run in order): the files,
 * the identity the .p12 test resolved, and the store the label test made. */
static char dir[512], cmd[4096], pem[600], key[600], p12[600], missing[600], storepath[600];
static mtls_identity *id = NULL;
static mtls_store *store = NULL;

TEST(arguments) {
    /* arguments; a name that is not UTF-8 is refused, never repaired into another name */
    CHECK_RC(mtls_identity_resolve(NULL, NULL, NULL, NULL, NULL, &id), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_resolve("al\xffice", NULL, NULL, NULL, NULL, &id), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "UTF-8") != NULL);
    CHECK_RC(mtls_identity_resolve(p12, NULL, "pw", NULL, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
}

TEST(certificate_and_key_pair) {
    /* a certificate and key pair */
    CHECK_OK(mtls_identity_resolve(pem, key, NULL, NULL, NULL, &id));
    expect_cn(id, "resolve-client");
    mtls_identity_free(id);
    id = NULL;
}

TEST(p12_file) {
    /* a .p12 file, its password right and wrong; a .p12 name that is not there */
    CHECK_OK(mtls_identity_resolve(p12, NULL, "pw", NULL, NULL, &id));
    expect_cn(id, "resolve-client");
    mtls_identity *none = NULL;
    CHECK_RC(mtls_identity_resolve(p12, NULL, "wrong", NULL, NULL, &none), MTLS_E_BAD_PASSWORD);
    CHECK_RC(mtls_identity_resolve(missing, NULL, "pw", NULL, NULL, &none), MTLS_E_NOT_FOUND);
    CHECK(none == NULL);
}

TEST(label_in_a_store) {
    /* a label: needs a store; found in it; unknown */
    mtls_identity *found = NULL;
    CHECK_RC(mtls_identity_resolve("alice", NULL, NULL, NULL, NULL, &found), MTLS_E_INVALID_ARGUMENT);
    mtls_store_options o;
    CHECK_OK(mtls_store_options_init(&o, MTLS_STORE_OPTIONS_VERSION));
    o.kdf_log_n = 10;
    const uint8_t secret[] = "resolve secret";
    CHECK_OK(mtls_store_open(storepath, secret, sizeof secret - 1, MTLS_STORE_SECRET_PASSPHRASE, &o, &store));
    CHECK_OK(mtls_store_put_identity(store, "alice", id, 0));
    CHECK_OK(mtls_identity_resolve("alice", NULL, NULL, NULL, store, &found));
    expect_cn(found, "resolve-client");
    mtls_identity_free(found);
    found = NULL;
    CHECK_RC(mtls_identity_resolve("bob", NULL, NULL, NULL, store, &found), MTLS_E_NOT_FOUND);
    CHECK(found == NULL);
}

TEST(token_uri_not_utf8_refused) {
    /* a token URI that is not UTF-8 is refused, not stored altered (found by fuzzing) */
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    CHECK_RC(mtls_store_put_token_identity(store, "tok", "pkcs11:token=t;object=k\xff\xfe", leaf, NULL, 0, 0),
             MTLS_E_INVALID_ARGUMENT);
    mtls_cert_free(leaf);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    snprintf(dir, sizeof dir, "%s/resolve-c-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %1$s && mkdir -p %1$s", dir);
    t_sh(cmd);
    t_self_signed(dir, "resolve-client");
    snprintf(pem, sizeof pem, "%s/c.pem", dir);
    snprintf(key, sizeof key, "%s/c.key", dir);
    snprintf(p12, sizeof p12, "%s/c.p12", dir);
    snprintf(missing, sizeof missing, "%s/nothing.p12", dir);
    snprintf(storepath, sizeof storepath, "%s/store.db", dir);

    RUN(arguments);
    RUN(certificate_and_key_pair);
    RUN(p12_file);
    RUN(label_in_a_store);
    RUN(token_uri_not_utf8_refused);

    mtls_store_close(store);
    mtls_identity_free(id);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
    DONE();
}
