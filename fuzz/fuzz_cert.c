/* Certificate parsing (DER, PEM, PKCS#7): every certificate of the input, then each accessor
 * that decodes fields (names, SANs, validity, key, usages, digests, PEM and DER out). */
#include "fuzz.h"

static void touch(mtls_cert *c) {
    char *s = NULL;
    if (mtls_cert_subject(c, &s) == MTLS_OK) mtls_string_free(s);
    s = NULL;
    if (mtls_cert_issuer(c, &s) == MTLS_OK) mtls_string_free(s);
    s = NULL;
    if (mtls_cert_serial_hex(c, &s) == MTLS_OK) mtls_string_free(s);
    s = NULL;
    if (mtls_cert_spki_pin(c, &s) == MTLS_OK) mtls_string_free(s);
    s = NULL;
    if (mtls_cert_pem(c, &s) == MTLS_OK) mtls_string_free(s);
    size_t n = 0;
    mtls_san *sans = NULL;
    if (mtls_cert_sans(c, &sans, &n) == MTLS_OK) mtls_san_list_free(sans, n);
    char **ekus = NULL;
    if (mtls_cert_ekus(c, &ekus, &n) == MTLS_OK) mtls_string_list_free(ekus, n);
    int64_t nb, na;
    (void)mtls_cert_validity(c, &nb, &na);
    int bits = 0, present = 0, ca = 0, plen = 0;
    unsigned int ku = 0;
    s = NULL;
    if (mtls_cert_key_type(c, &s, &bits) == MTLS_OK) mtls_string_free(s);
    (void)mtls_cert_basic_constraints(c, &present, &ca, &plen);
    (void)mtls_cert_key_usage(c, &present, &ku);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mtls_cert **list = NULL;
    size_t count = 0;
    if (mtls_cert_list_parse(data, size, &list, &count) == MTLS_OK) {
        for (size_t i = 0; i < count; i++) touch(list[i]);
        mtls_cert_list_free(list, count);
    }
    mtls_cert *one = NULL;
    if (mtls_cert_parse(data, size, &one) == MTLS_OK) mtls_cert_free(one);
    return 0;
}
