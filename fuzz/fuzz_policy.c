/* Policy JSON: load, read the warnings, swap it into a live policy (mtls_policy_replace). */
#include "fuzz.h"

static mtls_policy *live;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!live && mtls_policy_new(&live) != MTLS_OK) abort();
    char *json = fz_cstr(data, size);
    mtls_policy *p = NULL;
    if (mtls_policy_from_json(json, &p) == MTLS_OK) {
        size_t n = 0;
        char **w = NULL;
        if (mtls_policy_warnings(p, &w, &n) == MTLS_OK) mtls_string_list_free(w, n);
        (void)mtls_policy_replace(live, p);
        mtls_policy_free(p);
    }
    free(json);
    return 0;
}
