/* Store opening of a fuzzed file: the input is written as the store file and opened with a
 * fixed 32-byte key (no scrypt per input), create off; a store that opens is listed. The seed
 * corpus comes from fuzz_store itself: `fuzz_store -seed_store=DIR` writes a real store there. */
#include "fuzz.h"

static const uint8_t key[32] = "fuzz-store-key-0123456789abcdef";

static void list(mtls_store *s) {
    mtls_store_item **items = NULL;
    size_t n = 0;
    if (mtls_store_list(s, MTLS_STORE_ANY, &items, &n) == MTLS_OK) mtls_store_item_list_free(items, n);
    mtls_identity *id = NULL;
    if (mtls_store_get_identity(s, "server", &id) == MTLS_OK) mtls_identity_free(id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600];
    snprintf(path, sizeof path, "%s/store.db", fz_tmpdir());
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    mtls_store_options o;
    mtls_store_options_init(&o, MTLS_STORE_OPTIONS_VERSION);
    o.create = 0;
    o.busy_timeout_ms = 0;
    mtls_store *s = NULL;
    if (mtls_store_open(path, key, sizeof key, MTLS_STORE_SECRET_KEY, &o, &s) == MTLS_OK) {
        list(s);
        mtls_store_close(s);
    }
    return 0;
}

/* Writes a seed: a store holding the fuzz/data server identity and the CA. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 1; i < *argc; i++) {
        if (strncmp((*argv)[i], "-seed_store=", 12) != 0) continue;
        const char *path = (*argv)[i] + 12;
        unlink(path);
        mtls_store_options o;
        mtls_store_options_init(&o, MTLS_STORE_OPTIONS_VERSION);
        mtls_store *s = NULL;
        mtls_identity *id = NULL;
        mtls_cert *ca = NULL;
        size_t n;
        uint8_t *pem = fz_file("ca.pem", &n);
        char *chain = (char *)fz_file("server.pem", NULL), *keyp = (char *)fz_file("server.key", NULL);
        if (mtls_store_open(path, key, sizeof key, MTLS_STORE_SECRET_KEY, &o, &s) != MTLS_OK ||
            mtls_identity_from_pem(chain, keyp, NULL, &id) != MTLS_OK ||
            mtls_store_put_identity(s, "server", id, 1) != MTLS_OK || mtls_cert_parse(pem, n, &ca) != MTLS_OK ||
            mtls_store_put_cert(s, "ca", ca, 1) != MTLS_OK) {
            fprintf(stderr, "seed_store: %s\n", mtls_last_error());
            exit(1);
        }
        mtls_store_close(s);
        mtls_identity_free(id);
        mtls_cert_free(ca);
        free(pem);
        free(chain);
        free(keyp);
        exit(0);
    }
    return 0;
}
