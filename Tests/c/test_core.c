/* The library-wide and certificate functions of the C ABI, NULL arguments included. */
#include "test_support.h"

/* What the tests share, made once in main: a certificate made at run time (its PEM, file and
 * parsed handle, which cert_references frees). */
static const char *tmp;
static char cmd[4096], path[512];
static uint8_t *pem;
static size_t len;
static mtls_cert *cert = NULL;

TEST(version_and_errors) {
    /* version */
    CHECK(strcmp(mtls_version(), MTLS_VERSION_STRING) == 0);
    CHECK(mtls_version_number() == MTLS_VERSION_NUMBER);
    /* errors */
    CHECK(strcmp(mtls_strerror(MTLS_OK), "ok") == 0);
    CHECK(strcmp(mtls_strerror(MTLS_E_BAD_PASSWORD), "wrong password") == 0);
    CHECK(strcmp(mtls_error_name(MTLS_E_BAD_PASSWORD), "bad_password") == 0);
    /* added later, last in the enum: a read cut off without close_notify */
    CHECK(strcmp(mtls_error_name(MTLS_E_TRUNCATED), "truncated") == 0 && MTLS_E_TRUNCATED == -48);
    CHECK(strstr(mtls_strerror(MTLS_E_TRUNCATED), "close_notify") != NULL);
    CHECK(strcmp(mtls_strerror(-9999), "unknown error code") == 0);
    mtls_string_free(NULL);
    mtls_bytes_free(NULL);
}

TEST(cert_parse) {
    CHECK_RC(mtls_cert_parse(NULL, 10, &cert), MTLS_E_INVALID_ARGUMENT);
    CHECK(strlen(mtls_last_error()) > 0);
    CHECK_RC(mtls_cert_parse(pem, len, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_cert_parse((const uint8_t *)"garbage", 7, &cert), MTLS_E_PARSE);
    CHECK(cert == NULL);
    CHECK_OK(mtls_cert_parse(pem, len, &cert));
}

TEST(cert_names_hashes_and_pem) {
    char *s = NULL;
    CHECK_OK(mtls_cert_subject(cert, &s)); CHECK(strcmp(s, "O=libmtls tests,CN=core.example") == 0); mtls_string_free(s);
    CHECK_OK(mtls_cert_issuer(cert, &s)); CHECK(strstr(s, "CN=core.example") != NULL); mtls_string_free(s);
    CHECK_OK(mtls_cert_subject_summary(cert, &s)); CHECK(strcmp(s, "core.example") == 0); mtls_string_free(s);
    CHECK_OK(mtls_cert_serial_hex(cert, &s)); CHECK(strlen(s) > 0); mtls_string_free(s);
    CHECK_OK(mtls_cert_sha256_hex(cert, &s)); CHECK(strlen(s) == 64); mtls_string_free(s);
    CHECK_OK(mtls_cert_spki_sha256_hex(cert, &s)); CHECK(strlen(s) == 64); mtls_string_free(s);
    CHECK_OK(mtls_cert_spki_pin(cert, &s)); CHECK(strncmp(s, "sha256/", 7) == 0 && strlen(s) == 51); mtls_string_free(s);
    CHECK_OK(mtls_cert_pem(cert, &s)); CHECK(strstr(s, "BEGIN CERTIFICATE") != NULL); mtls_string_free(s);
    CHECK_RC(mtls_cert_subject(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_cert_subject(cert, NULL), MTLS_E_INVALID_ARGUMENT);
}

TEST(cert_digest_and_der) {
    uint8_t digest[32], small[16];
    CHECK_OK(mtls_cert_sha256(cert, digest, sizeof digest));
    CHECK_RC(mtls_cert_sha256(cert, small, sizeof small), MTLS_E_BUFFER_TOO_SMALL);
    CHECK_RC(mtls_cert_sha256(cert, NULL, 32), MTLS_E_INVALID_ARGUMENT);

    const uint8_t *der = NULL; size_t der_len = 0;
    CHECK_OK(mtls_cert_der(cert, &der, &der_len));
    CHECK(der_len > 100 && der[0] == 0x30);
    mtls_cert *again = NULL;
    CHECK_OK(mtls_cert_parse(der, der_len, &again));
    mtls_cert_free(again);
}

TEST(cert_validity_and_sans) {
    int64_t nb = 0, na = 0;
    CHECK_OK(mtls_cert_validity(cert, &nb, &na));
    CHECK(na - nb == 2 * 86400);
    CHECK_RC(mtls_cert_validity(cert, NULL, &na), MTLS_E_INVALID_ARGUMENT);

    size_t n = 0;
    mtls_san *sans = NULL;
    CHECK_OK(mtls_cert_sans(cert, &sans, &n)); CHECK(n == 4 && sans != NULL);
    CHECK(sans[0].kind == MTLS_SAN_DNS && strcmp(sans[0].value, "core.example") == 0);
    CHECK(sans[1].kind == MTLS_SAN_IP && strcmp(sans[1].value, "127.0.0.1") == 0);
    CHECK(sans[2].kind == MTLS_SAN_EMAIL && sans[3].kind == MTLS_SAN_URI);
    mtls_san_list_free(sans, n);
    mtls_san_list_free(NULL, 0);
    sans = (mtls_san *)1; n = 9;
    CHECK_RC(mtls_cert_sans(NULL, &sans, &n), MTLS_E_INVALID_ARGUMENT); CHECK(sans == NULL && n == 0);
    CHECK_RC(mtls_cert_sans(cert, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_cert_sans(cert, &sans, NULL), MTLS_E_INVALID_ARGUMENT);
}

TEST(cert_key_constraints_and_usages) {
    char *s = NULL;
    size_t n = 0;
    int bits = 0;
    CHECK_OK(mtls_cert_key_type(cert, &s, &bits)); CHECK(strcmp(s, "p256") == 0 && bits == 256); mtls_string_free(s);
    int present = 0, is_ca = 0, pathlen = 0;
    CHECK_OK(mtls_cert_basic_constraints(cert, &present, &is_ca, &pathlen));
    CHECK(present == 1 && is_ca == 1 && pathlen == -1); /* openssl req -x509 marks CA:TRUE */
    unsigned int ku = 0;
    CHECK_OK(mtls_cert_key_usage(cert, &present, &ku)); CHECK(present == 1 && ku == 0x80);
    char **ekus = NULL;
    CHECK_OK(mtls_cert_ekus(cert, &ekus, &n)); CHECK(n == 2);
    CHECK(strcmp(ekus[1], "1.3.6.1.5.5.7.3.2") == 0);
    mtls_string_list_free(ekus, n);
    mtls_string_list_free(NULL, 0);
    CHECK_RC(mtls_cert_ekus(NULL, &ekus, &n), MTLS_E_INVALID_ARGUMENT); CHECK(ekus == NULL && n == 0);
    CHECK_RC(mtls_cert_ekus(cert, NULL, &n), MTLS_E_INVALID_ARGUMENT);
}

TEST(cert_references) {
    mtls_cert *ref = mtls_cert_ref(cert);
    CHECK(ref == cert);
    CHECK(mtls_cert_ref(NULL) == NULL);
    mtls_cert_free(ref);
    mtls_cert_free(cert);
    mtls_cert_free(NULL);
}

TEST(cert_lists) {
    /* many PEM blocks, and a file */
    mtls_cert **list = NULL; size_t count = 0;
    snprintf(cmd, sizeof cmd, "cat %s %s > %s/core-two.pem", path, path, tmp); t_sh(cmd);
    snprintf(path, sizeof path, "%s/core-two.pem", tmp);
    CHECK_OK(mtls_cert_list_load(path, &list, &count)); CHECK(count == 2);
    mtls_cert_list_free(list, count);
    CHECK_RC(mtls_cert_list_load("/nonexistent/x.pem", &list, &count), MTLS_E_NOT_FOUND);
    CHECK_RC(mtls_cert_list_parse(pem, len, NULL, &count), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_cert_list_parse(pem, len, &list, &count)); CHECK(count == 1);
    mtls_cert_list_free(list, count);
    mtls_cert_list_free(NULL, 0);
}

int main(void) {
    tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    /* a certificate made at run time */
    snprintf(path, sizeof path, "%s/core-cert.pem", tmp);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout %s/core-key.pem "
             "-out %s -subj '/CN=core.example/O=libmtls tests' -days 2 "
             "-addext 'subjectAltName=DNS:core.example,IP:127.0.0.1,email:a@example.com,URI:https://x.example/' "
             "-addext 'keyUsage=critical,digitalSignature' -addext 'extendedKeyUsage=serverAuth,clientAuth' 2>/dev/null",
             tmp, path);
    t_sh(cmd);
    pem = t_read_file(path, &len);

    RUN(version_and_errors);
    RUN(cert_parse);
    RUN(cert_names_hashes_and_pem);
    RUN(cert_digest_and_der);
    RUN(cert_validity_and_sans);
    RUN(cert_key_constraints_and_usages);
    RUN(cert_references);
    RUN(cert_lists);
    free(pem);
    DONE();
}
