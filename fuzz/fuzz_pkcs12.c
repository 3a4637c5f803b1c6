/* PKCS#12 import with the password "fuzz" (the seeds' password), then every identity and
 * certificate taken out and freed. The first input byte picks the password: "fuzz", the empty
 * password, or no password at all, so the wrong-password and MAC paths are fuzzed too. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *passwords[] = {"fuzz", "", NULL};
    const char *password = passwords[size ? data[size - 1] % 3 : 0];
    mtls_pkcs12 *p12 = NULL;
    if (mtls_pkcs12_import(data, size, password, &p12) != MTLS_OK) return 0;
    size_t n = 0;
    mtls_identity **ids = NULL;
    if (mtls_pkcs12_identities(p12, &ids, &n) == MTLS_OK) mtls_identity_list_free(ids, n);
    mtls_cert **certs = NULL;
    if (mtls_pkcs12_certs(p12, &certs, &n) == MTLS_OK) mtls_cert_list_free(certs, n);
    char *enc = NULL;
    if (mtls_pkcs12_password_encoding(p12, &enc) == MTLS_OK) mtls_string_free(enc);
    mtls_pkcs12_free(p12);
    return 0;
}
