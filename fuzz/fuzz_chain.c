/* Evaluation of a fuzzed chain against a fixed policy (trusts fuzz/data/ca.pem only): the input
 * is records of [u16 big-endian length][DER], leaf first, evaluated as DER off the wire for
 * "localhost", once as a server and once as a client. */
#include "fuzz.h"

#define MAX_CERTS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mtls_policy *policy;
    if (!policy) policy = fz_fixed_policy();
    const uint8_t *ders[MAX_CERTS];
    size_t lens[MAX_CERTS], count = 0, at = 0;
    while (count < MAX_CERTS && at + 2 <= size) {
        size_t len = (size_t)data[at] << 8 | data[at + 1];
        at += 2;
        if (len > size - at) len = size - at;
        ders[count] = data + at;
        lens[count++] = len;
        at += len;
    }
    if (count == 0) return 0;
    for (int purpose = MTLS_PURPOSE_SERVER; purpose <= MTLS_PURPOSE_CLIENT; purpose++) {
        mtls_trust_result *r = NULL;
        if (mtls_evaluate_der(policy, ders, lens, count, "localhost", purpose, 0, &r) == MTLS_OK) {
            int trusted = 0;
            (void)mtls_trust_result_trusted(r, &trusted);
            mtls_cert **chain = NULL;
            size_t n = 0;
            if (mtls_trust_result_chain(r, &chain, &n) == MTLS_OK) mtls_cert_list_free(chain, n);
            mtls_trust_result_free(r);
        }
    }
    return 0;
}
