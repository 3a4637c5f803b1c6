/* Enrolling a token key through the C ABI, on a blank SoftHSM2 token made here: keygen on the
 * token, a CSR signed on the token, the CSR signed by a CA made with mtls_pki_*, the certificate
 * written back, then the token identity found by its URI; every new function with NULL
 * arguments, a CSR whose signature is broken, a certificate for another key. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <unistd.h>

static int asked = 0;
static unsigned int seen_flags = 0;

static int give_pin(const char *label, const char *uri, unsigned int flags, char *pin, size_t size, void *userdata) {
    (void)uri;
    asked++;
    seen_flags = flags;
    CHECK(label != NULL && strcmp(label, "enroll-c") == 0);
    snprintf(pin, size, "%s", (const char *)userdata);
    return 0;
}

/* What the tests share, made once in main or by the test before (they run in order): a SoftHSM2
 * token, the key's URI, its CSR, the CA and the certificate it signed. */
static char dir[256], cmd[4096], uri[1024], keyuri[1024], conf[300];
static const char *module = "/usr/lib/softhsm/libsofthsm2.so";
static char *pin = "1234";
static char *csr = NULL;
static mtls_issued *root = NULL, *inter = NULL;
static mtls_cert *cert = NULL;

TEST(keygen_on_token) {
    /* ---- keygen */
    snprintf(uri, sizeof uri, "pkcs11:token=enroll-c;object=alice;id=%%a1?module-path=%s", module);
    char *out = NULL;
    CHECK_RC(mtls_token_keygen(NULL, "ec-p256", give_pin, pin, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_keygen(uri, NULL, give_pin, pin, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_keygen(uri, "ec-p256", give_pin, pin, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_keygen(uri, "dsa1024", give_pin, pin, &out), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_token_keygen(uri, "ec-p256", give_pin, pin, &out));
    CHECK(out != NULL && strstr(out, "object=alice") != NULL && strstr(out, "type=private") != NULL);
    CHECK(asked >= 1 && (seen_flags & MTLS_TOKEN_LOGIN_REQUIRED) && (seen_flags & MTLS_TOKEN_USER_PIN_INITIALIZED));
    snprintf(keyuri, sizeof keyuri, "%s", out);
    mtls_string_free(out);
    CHECK(strlen(keyuri) > 0);
    CHECK_RC(mtls_token_keygen(uri, "ec-p256", give_pin, pin, &out), MTLS_E_DUPLICATE);
    /* the private key is sensitive and never extractable */
    snprintf(cmd, sizeof cmd, "SOFTHSM2_CONF=%s pkcs11-tool --module %s --token-label enroll-c --login --pin 1234 "
             "--list-objects --type privkey --label alice | grep -q 'sensitive.*never extractable'", conf, module);
    t_sh(cmd);
}

TEST(csr_signed_on_token) {
    /* ---- CSR signed on the token */
    snprintf(uri, sizeof uri, "pkcs11:token=enroll-c;object=alice?module-path=%s", module);
    CHECK_RC(mtls_token_csr(NULL, "CN=alice", give_pin, pin, &csr), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_csr(uri, NULL, give_pin, pin, &csr), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_csr(uri, "CN=alice", give_pin, pin, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_csr(uri, "not a subject", give_pin, pin, &csr), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_token_csr(uri, "CN=alice", give_pin, pin, &csr));
    CHECK(strncmp(csr, "-----BEGIN CERTIFICATE REQUEST-----", 35) == 0);
}

TEST(csr_signed_by_ca) {
    /* ---- signed by a CA */
    CHECK_OK(mtls_pki_root("Enroll Root", NULL, &root));
    CHECK_OK(mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "Enroll Customer", NULL, &inter));
    size_t csr_len = strlen(csr);
    CHECK_RC(mtls_pki_sign_csr(NULL, MTLS_PROFILE_CLIENT, (const uint8_t *)csr, csr_len, NULL, NULL, &cert), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_sign_csr(inter, MTLS_PROFILE_CLIENT, NULL, csr_len, NULL, NULL, &cert), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_sign_csr(inter, MTLS_PROFILE_CLIENT, (const uint8_t *)csr, csr_len, NULL, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_sign_csr(inter, MTLS_PROFILE_ROOT, (const uint8_t *)csr, csr_len, NULL, NULL, &cert), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_sign_csr(inter, MTLS_PROFILE_CLIENT, (const uint8_t *)"garbage", 7, NULL, NULL, &cert), MTLS_E_PARSE);
    CHECK_OK(mtls_pki_sign_csr(inter, MTLS_PROFILE_CLIENT, (const uint8_t *)csr, csr_len, NULL, NULL, &cert));
    char *s = NULL;
    CHECK_OK(mtls_cert_subject_summary(cert, &s)); CHECK(strcmp(s, "alice") == 0); mtls_string_free(s);
    mtls_string_free(csr);
}

TEST(cert_written_back_to_token) {
    /* ---- written back to the token */
    CHECK_RC(mtls_token_import_cert(NULL, cert, give_pin, pin, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_token_import_cert(uri, NULL, give_pin, pin, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_cert *other = NULL;
    CHECK_OK(mtls_issued_cert(inter, &other));
    CHECK_RC(mtls_token_import_cert(uri, other, give_pin, pin, NULL), MTLS_E_KEY_MISMATCH);
    mtls_cert_free(other);
    char *certuri = NULL;
    CHECK_OK(mtls_token_import_cert(uri, cert, give_pin, pin, &certuri));
    CHECK(certuri != NULL && strstr(certuri, "type=cert") != NULL);
    mtls_string_free(certuri);
    CHECK_RC(mtls_token_import_cert(uri, cert, give_pin, pin, NULL), MTLS_E_DUPLICATE);
}

TEST(token_identity) {
    char *s = NULL;
    /* ---- the token identity */
    mtls_identity *id = NULL;
    CHECK_OK(mtls_identity_from_pkcs11(uri, give_pin, pin, NULL, &id));
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    CHECK_OK(mtls_cert_subject_summary(leaf, &s)); CHECK(strcmp(s, "alice") == 0); mtls_string_free(s);
    mtls_cert_free(leaf);
    mtls_identity_free(id);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    snprintf(dir, sizeof dir, "%s/enroll-c", tmp);
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s/tokens && printf 'directories.tokendir = %s/tokens\\nobjectstore.backend = file\\n"
             "log.level = ERROR\\n' > %s/softhsm2.conf && SOFTHSM2_CONF=%s/softhsm2.conf softhsm2-util --init-token --free "
             "--label enroll-c --pin 1234 --so-pin 5678 >/dev/null",
             dir, dir, dir, dir, dir);
    t_sh(cmd);
    snprintf(conf, sizeof conf, "%s/softhsm2.conf", dir);
    setenv("SOFTHSM2_CONF", conf, 1);

    RUN(keygen_on_token);
    RUN(csr_signed_on_token);
    RUN(csr_signed_by_ca);
    RUN(cert_written_back_to_token);
    RUN(token_identity);

    mtls_cert_free(cert);
    mtls_issued_free(inter);
    mtls_issued_free(root);
    (void)t_read_file;
    DONE();
}
