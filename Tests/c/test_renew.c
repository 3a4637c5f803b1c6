/* mtls_renew's C contract: argument checks and the errors of a label with no enrollment record.
 * A real renewal through the C ABI is in Tests/e2e/test_enroll.py (Python's mtls.renew). */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <unistd.h>
#include <stdint.h>

static const uint8_t PASS[] = "renew passphrase";

/* What the tests share, made once in main: a store holding "plain", a self-signed identity
 * imported from a .p12, not enrolled. */
static char dir[512], cmd[4096];
static uint8_t *p12;
static mtls_store *store = NULL;
static mtls_identity *id = NULL, *again = NULL;

TEST(renew_arguments) {
    int renewed = 7;
    CHECK_RC(mtls_renew(NULL, "plain", 1, NULL, NULL, &renewed), MTLS_E_INVALID_ARGUMENT);
    CHECK(renewed == 0);
    CHECK_RC(mtls_renew(store, NULL, 1, NULL, NULL, &renewed), MTLS_E_INVALID_ARGUMENT);
}

TEST(imported_identity_not_renewed) {
    int renewed;
    /* An identity imported, not enrolled: nothing to renew from, and it is left as it was. */
    renewed = 7;
    CHECK_RC(mtls_renew(store, "plain", 1, NULL, NULL, &renewed), MTLS_E_NOT_FOUND);
    CHECK(renewed == 0);
    CHECK(strstr(mtls_last_error(), "enrollment record") != NULL);
    CHECK_RC(mtls_renew(store, "missing", 0, NULL, NULL, NULL), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_store_get_identity(store, "plain", &again));
}

TEST(renewal_error_strings) {
    CHECK(strcmp(mtls_strerror(MTLS_E_CA_REJECTED), "the certificate authority refused the request") == 0);
    CHECK(strcmp(mtls_strerror(MTLS_E_CHALLENGE_FAILED), "unknown error code") != 0);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char path[600], p12path[600];
    snprintf(dir, sizeof dir, "%s/renew-c-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd,
             "rm -rf %1$s && mkdir -p %1$s && cd %1$s && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout c.key -out c.pem "
             "-subj '/CN=plain' -days 5 2>/dev/null && "
             "openssl pkcs12 -export -inkey c.key -in c.pem -passout pass:pw -out c.p12",
             dir);
    t_sh(cmd);
    snprintf(path, sizeof path, "%s/store.db", dir);
    snprintf(p12path, sizeof p12path, "%s/c.p12", dir);
    size_t p12len;
    p12 = t_read_file(p12path, &p12len);

    mtls_store_options o;
    CHECK_OK(mtls_store_options_init(&o, MTLS_STORE_OPTIONS_VERSION));
    o.kdf_log_n = 10;
    CHECK_OK(mtls_store_open(path, PASS, sizeof PASS - 1, MTLS_STORE_SECRET_PASSPHRASE, &o, &store));
    CHECK_OK(mtls_store_import_p12(store, "plain", p12, p12len, "pw", 0, &id));

    RUN(renew_arguments);
    RUN(imported_identity_not_renewed);
    RUN(renewal_error_strings);

    mtls_identity_free(again);
    mtls_identity_free(id);
    mtls_store_close(store);
    free(p12);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
    DONE();
}
