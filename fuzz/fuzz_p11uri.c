/* PKCS#11 URI parsing (RFC 7512) through the C ABI's one parse-only path: storing a token
 * identity reference checks the URI (MTLS_E_BAD_URI) before anything is written, and reading it
 * back returns the normalised URI. The store is opened once, with a fixed key. */
#include "fuzz.h"

static mtls_store *store;
static mtls_cert *cert;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!store) {
        char path[600];
        snprintf(path, sizeof path, "%s/uri.db", fz_tmpdir());
        static const uint8_t key[32] = "fuzz-store-key-0123456789abcdef";
        size_t n;
        uint8_t *pem = fz_file("server.pem", &n);
        if (mtls_store_open(path, key, sizeof key, MTLS_STORE_SECRET_KEY, NULL, &store) != MTLS_OK ||
            mtls_cert_parse(pem, n, &cert) != MTLS_OK) abort();
        free(pem);
    }
    char *uri = fz_cstr(data, size);
    if (mtls_store_put_token_identity(store, "t", uri, cert, NULL, 0, 1) == MTLS_OK) {
        char *back = NULL;
        mtls_cert *c = NULL;
        if (mtls_store_get_token_identity(store, "t", &back, &c) == MTLS_OK) {
            mtls_string_free(back);
            mtls_cert_free(c);
        }
    }
    free(uri);
    return 0;
}
