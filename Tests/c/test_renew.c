/* mtls_renew's C contract: argument checks and the errors of a label with no enrollment record.
 * A real renewal through the C ABI is in Tests/e2e/test_enroll.py (Python's mtls.renew). */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <unistd.h>
#include <stdint.h>

static const uint8_t PASS[] = "renew passphrase";

/* What the tests share, made once in main: a store holding "plain", a self-signed identity
 * imported from a .p12, not enrolled. */
static char dir[512];
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
    char p12path[600];
    store = t_temp_store("renew-c", PASS, sizeof PASS - 1, dir, sizeof dir);
    t_self_signed(dir, "plain");
    snprintf(p12path, sizeof p12path, "%s/c.p12", dir);
    size_t p12len;
    p12 = t_read_file(p12path, &p12len);
    CHECK_OK(mtls_store_import_p12(store, "plain", p12, p12len, "pw", 0, &id));

    RUN(renew_arguments);
    RUN(imported_identity_not_renewed);
    RUN(renewal_error_strings);

    mtls_identity_free(again);
    mtls_identity_free(id);
    t_close_temp_store(store, dir);
    free(p12);
    DONE();
}
