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
    if (mtls_pkcs12_identity_count(p12, &n) == MTLS_OK)
        for (size_t i = 0; i < n; i++) {
            mtls_identity *id = NULL;
            if (mtls_pkcs12_identity(p12, i, &id) == MTLS_OK) mtls_identity_free(id);
        }
    if (mtls_pkcs12_cert_count(p12, &n) == MTLS_OK)
        for (size_t i = 0; i < n; i++) {
            mtls_cert *c = NULL;
            if (mtls_pkcs12_cert(p12, i, &c) == MTLS_OK) mtls_cert_free(c);
        }
    mtls_pkcs12_free(p12);
    return 0;
}
