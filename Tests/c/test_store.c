/* The credential store's C ABI: every function, its errors, and NULL arguments. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <sys/stat.h>
#include <unistd.h>
#include <limits.h>
#include <stdint.h>

static const uint8_t PASS[] = "store passphrase";
#define PASS_LEN (sizeof PASS - 1)

static mtls_store_options test_options(void) {
    mtls_store_options o;
    if (mtls_store_options_init(&o, MTLS_STORE_OPTIONS_VERSION) != MTLS_OK) exit(1);
    o.kdf_log_n = 10; /* cheap scrypt for tests; the default is 17 */
    return o;
}

/* What the tests share, made once in main: the folder with a CA, a client .p12 and a key file,
 * and the store. The tests are the phases of one store's life and run in order: each goes on
 * from the store (and its handle) the one before left. */
static char dir[512], cmd[8192], path[600], p12path[600], certpath[600], keyfile[600], sha[65];
static size_t p12len, calen, klen;
static uint8_t *p12, *capem, *key;
static mtls_cert *ca = NULL, *c2 = NULL;
static mtls_store_options o;
static mtls_store *store = NULL;
static mtls_identity *id = NULL, *got = NULL;

TEST(options_defaults) {
    /* options */
    CHECK_RC(mtls_store_options_init(NULL, MTLS_STORE_OPTIONS_VERSION), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_options_init(&o, 99), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_options_init(&o, MTLS_STORE_OPTIONS_VERSION));
    CHECK(o.kdf_log_n == 17 && o.kdf_r == 8 && o.kdf_p == 1 && o.create == 1 && o.busy_timeout_ms > 0);
    o = test_options();
}

TEST(open_new_store) {
    /* open: NULL arguments, bad kinds, then a new store (0600 in a 0700 directory) */
    CHECK_RC(mtls_store_open(NULL, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open(path, NULL, 5, MTLS_STORE_SECRET_PASSPHRASE, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open(path, PASS, PASS_LEN, 7, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open(path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &o, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_store_options bad = o; bad.version = 0;
    CHECK_RC(mtls_store_open(path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &bad, &store), MTLS_E_INVALID_ARGUMENT);
    bad = o; bad.kdf_log_n = 60;
    CHECK_RC(mtls_store_open(path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &bad, &store), MTLS_E_LIMIT);
    bad = o; bad.create = 0;
    CHECK_RC(mtls_store_open(path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &bad, &store), MTLS_E_NOT_FOUND);
    CHECK(store == NULL);
    CHECK_OK(mtls_store_open(path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &o, &store));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    snprintf(cmd, sizeof cmd, "%s/sub", dir);
    CHECK(stat(cmd, &st) == 0 && (st.st_mode & 0777) == 0700);
}

TEST(import_p12_under_a_label) {
    /* import a .p12 under a label */
    CHECK_RC(mtls_store_import_p12(NULL, "client", p12, p12len, "pw", 0, &id), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_import_p12(store, NULL, p12, p12len, "pw", 0, &id), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_import_p12(store, "client", NULL, 10, "pw", 0, &id), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_import_p12(store, "client", p12, p12len, "wrong", 0, &id), MTLS_E_BAD_PASSWORD);
    CHECK_OK(mtls_store_import_p12(store, "client", p12, p12len, "pw", 0, NULL));
    CHECK_RC(mtls_store_import_p12(store, "client", p12, p12len, "pw", 0, &id), MTLS_E_DUPLICATE);
    CHECK(id == NULL);
    CHECK_OK(mtls_store_import_p12(store, "client", p12, p12len, "pw", 1, &id));
    CHECK(id != NULL);
}

TEST(put_identity_cert_and_token_reference) {
    /* put identity / certificate / token reference */
    CHECK_RC(mtls_store_put_identity(NULL, "copy", id, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_identity(store, NULL, id, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_identity(store, "copy", NULL, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_identity(store, "", id, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_put_identity(store, "copy", id, 0));
    CHECK_RC(mtls_store_put_identity(store, "copy", id, 0), MTLS_E_DUPLICATE);
    const char *labels[2] = { "batch1", "batch2" };
    mtls_identity *batch[2] = { id, id };
    CHECK_RC(mtls_store_put_identities(NULL, labels, batch, 2, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_identities(store, NULL, batch, 2, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_identities(store, labels, NULL, 2, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_put_identities(store, NULL, NULL, 0, 0));
    CHECK_OK(mtls_store_put_identities(store, labels, batch, 2, 0));
    CHECK_RC(mtls_store_put_identities(store, labels, batch, 2, 0), MTLS_E_DUPLICATE);
    CHECK_OK(mtls_store_put_identities(store, labels, batch, 2, 1));
    CHECK_OK(mtls_store_delete(store, "batch1", MTLS_STORE_IDENTITY, NULL));
    CHECK_OK(mtls_store_delete(store, "batch2", MTLS_STORE_IDENTITY, NULL));
    CHECK_RC(mtls_store_put_cert(NULL, "ca", ca, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_cert(store, NULL, ca, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_cert(store, "ca", NULL, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_put_cert(store, "ca", ca, 0));
    CHECK_RC(mtls_store_put_cert(store, "ca", ca, 0), MTLS_E_DUPLICATE);
    CHECK_OK(mtls_store_put_cert(store, "ca", ca, 1));
    mtls_cert *chain[1] = { ca };
    CHECK_RC(mtls_store_put_token_identity(NULL, "tok", "pkcs11:token=t", ca, chain, 1, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_token_identity(store, NULL, "pkcs11:token=t", ca, chain, 1, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_token_identity(store, "tok", NULL, ca, chain, 1, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_token_identity(store, "tok", "pkcs11:token=t", NULL, chain, 1, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_token_identity(store, "tok", "pkcs11:token=t", ca, NULL, 1, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_token_identity(store, "tok", "http://x", ca, NULL, 0, 0), MTLS_E_BAD_URI);
    CHECK_OK(mtls_store_put_token_identity(store, "tok", "pkcs11:token=t;object=k", ca, NULL, 0, 0));
    CHECK_OK(mtls_store_put_token_identity(store, "tok", "pkcs11:token=t;object=k2", ca, chain, 1, 1));
}

TEST(get_items) {
    mtls_cert *c;
    /* get */
    CHECK_RC(mtls_store_get_identity(NULL, "client", &got), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_identity(store, NULL, &got), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_identity(store, "client", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_identity(store, "nobody", &got), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_store_get_identity(store, "client", &got));
    CHECK(got != NULL);
    c = NULL;
    CHECK_RC(mtls_store_get_cert(NULL, "ca", &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_cert(store, NULL, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_cert(store, "ca", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_cert(store, "client", &c), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_store_get_cert(store, "ca", &c));
    char *s = NULL, *s2 = NULL;
    CHECK_OK(mtls_cert_sha256_hex(c, &s)); CHECK_OK(mtls_cert_sha256_hex(ca, &s2));
    CHECK(strcmp(s, s2) == 0); mtls_string_free(s); mtls_string_free(s2);
    mtls_cert_free(c);
    char *uri = NULL;
    CHECK_RC(mtls_store_get_token_identity(NULL, "tok", &uri, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_token_identity(store, NULL, &uri, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_token_identity(store, "tok", NULL, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_token_identity(store, "tok", &uri, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_get_token_identity(store, "ca", &uri, &c), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_store_get_token_identity(store, "tok", &uri, &c));
    CHECK(strcmp(uri, "pkcs11:token=t;object=k2") == 0);
    mtls_string_free(uri); mtls_cert_free(c);
    /* a PIN is never stored; a module-path p11-kit has not registered is refused unless allowed */
    CHECK_OK(mtls_store_put_token_identity(store, "tokpin", "pkcs11:token=t;object=k?pin-value=987654&module-path=/nonexistent/evil.so",
                                           ca, NULL, 0, 0));
    CHECK_RC(mtls_store_get_token_identity(store, "tokpin", &uri, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "module-path") != NULL);
    CHECK_RC(mtls_store_allow_module_paths(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_allow_module_paths(store, 1));
    CHECK_OK(mtls_store_get_token_identity(store, "tokpin", &uri, &c));
    CHECK(strstr(uri, "pin-value") == NULL && strstr(uri, "987654") == NULL);
    mtls_string_free(uri); mtls_cert_free(c);
    CHECK_OK(mtls_store_allow_module_paths(store, 0));
    { size_t deleted_pin = 0; CHECK_OK(mtls_store_delete(store, "tokpin", MTLS_STORE_TOKEN_IDENTITY, &deleted_pin)); }
    mtls_identity **ids = NULL; size_t nids = 0;
    CHECK_RC(mtls_store_identities(NULL, &ids, &nids), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_identities(store, NULL, &nids), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_identities(store, &ids, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_identities(store, &ids, &nids));
    CHECK(nids == 2);
    mtls_identity_list_free(ids, nids);
}

TEST(metadata_info_list_find) {
    /* metadata: info, list, find, accessors */
    mtls_store_item *item = NULL;
    CHECK_RC(mtls_store_item_info(NULL, "client", MTLS_STORE_ANY, &item), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_item_info(store, NULL, MTLS_STORE_ANY, &item), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_item_info(store, "client", MTLS_STORE_ANY, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_item_info(store, "client", 42, &item), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_item_info(store, "client", MTLS_STORE_CERTIFICATE, &item), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_store_item_info(store, "client", MTLS_STORE_ANY, &item));
    {
        char *v = NULL; int cls = 0; int64_t nafter = 0, created = 0, modified = 0;
        CHECK_OK(mtls_store_item_label(item, &v)); CHECK(strcmp(v, "client") == 0); mtls_string_free(v);
        CHECK_OK(mtls_store_item_class(item, &cls)); CHECK(cls == MTLS_STORE_IDENTITY);
        CHECK_OK(mtls_store_item_subject(item, &v)); CHECK(strcmp(v, "CN=c-client") == 0); mtls_string_free(v);
        CHECK_OK(mtls_store_item_issuer(item, &v)); CHECK(strcmp(v, "CN=C Store CA") == 0); mtls_string_free(v);
        CHECK_OK(mtls_store_item_leaf_sha256(item, &v)); CHECK(strlen(v) == 64);
        snprintf(sha, sizeof sha, "%s", v); mtls_string_free(v);
        v = (char *)1;
        CHECK_OK(mtls_store_item_token_uri(item, &v)); CHECK(v == NULL);
        CHECK_OK(mtls_store_item_not_after(item, &nafter));
        CHECK_OK(mtls_store_item_created(item, &created));
        CHECK_OK(mtls_store_item_modified(item, &modified));
        CHECK(nafter > created && modified >= created && created > 1700000000);
        char **shas = NULL; size_t nshas = 0;
        CHECK_OK(mtls_store_item_chain_sha256s(item, &shas, &nshas)); CHECK(nshas == 1 && strlen(shas[0]) == 64);
        mtls_string_list_free(shas, nshas);
        /* NULL items and out-parameters: an error, never a crash */
        CHECK_RC(mtls_store_item_label(NULL, &v), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_label(item, NULL), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_subject(NULL, &v), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_issuer(NULL, &v), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_leaf_sha256(NULL, &v), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_token_uri(NULL, &v), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_class(NULL, &cls), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_class(item, NULL), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_not_after(NULL, &nafter), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_created(NULL, &created), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_modified(item, NULL), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_store_item_chain_sha256s(NULL, &shas, &nshas), MTLS_E_INVALID_ARGUMENT);
        CHECK(shas == NULL && nshas == 0);
        mtls_store_item_free(item);
        mtls_store_item_free(NULL);
        CHECK_OK(mtls_store_item_info(store, "tok", MTLS_STORE_TOKEN_IDENTITY, &item));
        CHECK_OK(mtls_store_item_token_uri(item, &v)); CHECK(strcmp(v, "pkcs11:token=t;object=k2") == 0);
        mtls_string_free(v);
        mtls_store_item_free(item);
    }

    mtls_store_item **items = NULL; size_t n = 0;
    CHECK_RC(mtls_store_list(NULL, MTLS_STORE_ANY, &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_list(store, MTLS_STORE_ANY, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_list(store, MTLS_STORE_ANY, &items, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_list(store, 9, &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_list(store, MTLS_STORE_ANY, &items, &n));
    CHECK(n == 4);
    { char *l = NULL; CHECK_OK(mtls_store_item_label(items[0], &l)); CHECK(strcmp(l, "ca") == 0); mtls_string_free(l); }
    mtls_store_item_list_free(items, n);
    mtls_store_item_list_free(NULL, 0);
    CHECK_OK(mtls_store_list(store, MTLS_STORE_IDENTITY, &items, &n));
    CHECK(n == 2);
    mtls_store_item_list_free(items, n);

    CHECK_RC(mtls_store_find_sha256(NULL, sha, &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_sha256(store, NULL, &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_sha256(store, sha, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_sha256(store, sha, &items, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_sha256(store, "not hex", &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_find_sha256(store, sha, &items, &n));
    CHECK(n == 2); /* "client" and "copy" hold the same leaf */
    mtls_store_item_list_free(items, n);
    CHECK_RC(mtls_store_find_subject(NULL, "c-client", &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_subject(store, NULL, &items, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_subject(store, "c-client", NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_find_subject(store, "c-client", &items, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_find_subject(store, "CN=C Store CA", &items, &n));
    CHECK(n == 2); /* the certificate and the token reference's leaf */
    mtls_store_item_list_free(items, n);
}

TEST(export_p12) {
    /* export */
    uint8_t *out = NULL; size_t outlen = 0;
    CHECK_RC(mtls_store_export_p12(NULL, "client", "pw2", 0, &out, &outlen), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_export_p12(store, NULL, "pw2", 0, &out, &outlen), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_export_p12(store, "client", NULL, 0, &out, &outlen), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_export_p12(store, "client", "pw2", 0, NULL, &outlen), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_export_p12(store, "client", "pw2", 0, &out, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_export_p12(store, "nobody", "pw2", 0, &out, &outlen), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_store_export_p12(store, "client", "pw2", 1, &out, &outlen));
    CHECK(outlen > 100);
    mtls_bytes_free(out);
    CHECK_OK(mtls_store_export_p12(store, "client", "pw2", 0, &out, &outlen));
    snprintf(cmd, sizeof cmd, "%s/out.p12", dir);
    FILE *f = fopen(cmd, "wb"); fwrite(out, 1, outlen, f); fclose(f);
    mtls_bytes_free(out);
    snprintf(cmd, sizeof cmd, "openssl pkcs12 -in %s/out.p12 -passin pass:pw2 -nokeys -info 2>&1 | grep -q 'friendlyName: client'", dir);
    t_sh(cmd);
}

TEST(delete_items) {
    /* delete */
    size_t deleted = 99;
    CHECK_RC(mtls_store_delete(NULL, "copy", MTLS_STORE_ANY, &deleted), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_delete(store, NULL, MTLS_STORE_ANY, &deleted), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_delete(store, "copy", 5, &deleted), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_delete(store, "copy", MTLS_STORE_IDENTITY, &deleted));
    CHECK(deleted == 1);
    CHECK_RC(mtls_store_delete(store, "copy", MTLS_STORE_ANY, NULL), MTLS_E_NOT_FOUND);
    CHECK_RC(mtls_store_delete_class(NULL, MTLS_STORE_TOKEN_IDENTITY, &deleted), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_delete_class(store, MTLS_STORE_ANY, &deleted), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_delete_class(store, MTLS_STORE_TOKEN_IDENTITY, &deleted));
    CHECK(deleted == 1);
    CHECK_OK(mtls_store_delete_class(store, MTLS_STORE_TOKEN_IDENTITY, NULL));
}

TEST(change_secret_to_key_file) {
    /* change the secret to a 32-byte key file; the old passphrase is then a bad secret */
    key = t_read_file(keyfile, &klen);
    CHECK(klen == 32);
    CHECK_RC(mtls_store_change_secret(NULL, key, klen, MTLS_STORE_SECRET_KEY), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_change_secret(store, NULL, 32, MTLS_STORE_SECRET_KEY), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_change_secret(store, key, 31, MTLS_STORE_SECRET_KEY), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_store_change_secret(store, key, klen, MTLS_STORE_SECRET_KEY));
    mtls_store_close(store);
    mtls_store_close(NULL);
    CHECK_RC(mtls_store_open(path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &o, &store), MTLS_E_BAD_SECRET);
    CHECK_RC(mtls_store_open_key_file(NULL, keyfile, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open_key_file(path, NULL, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open_key_file(path, keyfile, &o, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open_key_file(path, "/nonexistent/key", &o, &store), MTLS_E_NOT_FOUND);
    CHECK(chmod(certpath, 0600) == 0); /* (a key file is a secret file: its mode is checked first) */
    CHECK_RC(mtls_store_open_key_file(path, certpath, &o, &store), MTLS_E_INVALID_ARGUMENT); /* not 32 bytes */
    CHECK(strstr(mtls_last_error(), "32") != NULL);
    CHECK(chmod(certpath, 0644) == 0);
}

TEST(secret_file_modes_checked) {
    mtls_cert *c = NULL;
    /* Secret files: a key or passphrase file that everyone can read, or others can write, is
     * refused before it is read, naming the file and the chmod that fixes it; a group-readable
     * one opens the store, with a warning for mtls_take_warnings (the library prints nothing). */
    char secretfile[700], **warnings = NULL;
    size_t nwarnings = 0;
    snprintf(secretfile, sizeof secretfile, "%s/passphrase.txt", dir);
    FILE *sf = fopen(secretfile, "w");
    CHECK(sf != NULL);
    fputs("a passphrase\n", sf);
    fclose(sf);
    CHECK(chmod(secretfile, 0644) == 0);
    CHECK_RC(mtls_store_open_secret_file(path, secretfile, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), secretfile) != NULL && strstr(mtls_last_error(), "chmod 600") != NULL);
    CHECK(chmod(secretfile, 0600) == 0); /* readable only by its owner: read, and the wrong secret */
    CHECK_RC(mtls_store_open_secret_file(path, secretfile, &o, &store), MTLS_E_BAD_SECRET);
    CHECK(chmod(keyfile, 0644) == 0);
    CHECK_RC(mtls_store_open_key_file(path, keyfile, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), keyfile) != NULL && strstr(mtls_last_error(), "readable by everyone") != NULL);
    CHECK(chmod(keyfile, 0620) == 0);
    CHECK_RC(mtls_store_open_key_file(path, keyfile, &o, &store), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "written by others") != NULL && strstr(mtls_last_error(), "chmod 600") != NULL);
    CHECK_OK(mtls_take_warnings(&warnings, &nwarnings));
    CHECK(nwarnings == 0 && warnings == NULL);
    CHECK(chmod(keyfile, 0640) == 0);
    CHECK_OK(mtls_store_open_key_file(path, keyfile, &o, &store));
    mtls_store_close(store);
    CHECK_OK(mtls_take_warnings(&warnings, &nwarnings));
    CHECK(nwarnings == 1 && strstr(warnings[0], keyfile) != NULL && strstr(warnings[0], "group") != NULL);
    mtls_string_list_free(warnings, nwarnings);
    CHECK_OK(mtls_take_warnings(&warnings, &nwarnings)); /* taken: cleared */
    CHECK(nwarnings == 0);
    CHECK_RC(mtls_take_warnings(NULL, &nwarnings), MTLS_E_INVALID_ARGUMENT);
    CHECK(chmod(keyfile, 0600) == 0);
    /* the same 32 bytes as a secret file are a passphrase (stretched), so not this store's key */
    CHECK_RC(mtls_store_open_secret_file(path, keyfile, &o, &store), MTLS_E_BAD_SECRET);
    CHECK(strstr(mtls_last_error(), "key") != NULL);
    CHECK_OK(mtls_store_open_key_file(path, keyfile, NULL, &store));
    CHECK_OK(mtls_store_get_cert(store, "ca", &c));
    mtls_cert_free(c);
    mtls_store_close(store);
}

TEST(locked_beyond_busy_timeout) {
    /* locked beyond the busy timeout: another process holds the write lock (for 3 s: time
     * passing is what is tested, a busy timeout shorter and one longer than that) */
    char flag[700];
    snprintf(flag, sizeof flag, "%s/locked.flag", dir);
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3, time; c = sqlite3.connect('%s', isolation_level=None); "
             "c.execute('BEGIN IMMEDIATE'); open('%s', 'w').close(); time.sleep(3); c.execute('ROLLBACK')\" &",
             path, flag);
    t_sh(cmd);
    for (int i = 0; i < 100 && access(flag, F_OK) != 0; i++) usleep(50000);
    mtls_store_options quick = o; quick.busy_timeout_ms = 100;
    CHECK_OK(mtls_store_open_key_file(path, keyfile, &quick, &store));
    CHECK_RC(mtls_store_put_cert(store, "ca2", ca, 0), MTLS_E_LOCKED);
    mtls_store_close(store);
    /* a wait long enough for the holder to finish succeeds */
    quick.busy_timeout_ms = 10000;
    CHECK_OK(mtls_store_open_key_file(path, keyfile, &quick, &store));
    CHECK_OK(mtls_store_put_cert(store, "ca2", ca, 0));
    mtls_store_close(store);
}

TEST(tampered_row_and_abi_edges) {
    mtls_cert *c = NULL;
    /* an attacker's root written into the "ca" row with sqlite3: refused, naming the label */
    snprintf(cmd, sizeof cmd, "cd %1$s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout evil.key -out evil.pem -subj '/CN=C Store CA' -days 5 2>/dev/null && "
             "openssl x509 -in evil.pem -outform DER -out evil.der && "
             "sqlite3 %2$s \"UPDATE items SET leaf = readfile('evil.der') WHERE label = 'ca'\"", dir, path);
    t_sh(cmd);
    CHECK_OK(mtls_store_open_key_file(path, keyfile, &o, &store));
    CHECK_RC(mtls_store_get_cert(store, "ca", &c), MTLS_E_CORRUPT);
    CHECK(strstr(mtls_last_error(), "\"ca\" is tampered or damaged") != NULL);
    CHECK(c == NULL);
    CHECK_OK(mtls_store_get_cert(store, "ca2", &c));

    /* C ABI edges: a size above SSIZE_MAX, a handle of the wrong type, a freed handle */
    CHECK_RC(mtls_store_import_p12(store, "big", p12, (size_t)SSIZE_MAX + 1, "pw", 0, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "SSIZE_MAX") != NULL);
    CHECK_RC(mtls_cert_parse(capem, SIZE_MAX, &c2), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_put_cert(store, "x", (const mtls_cert *)store, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "wrong type") != NULL);
    CHECK_RC(mtls_store_get_cert((mtls_store *)c, "ca2", &c2), MTLS_E_INVALID_ARGUMENT);
    mtls_cert *freed = NULL;
    CHECK_OK(mtls_cert_parse(capem, calen, &freed));
    mtls_cert_free(freed);
    CHECK_RC(mtls_store_put_cert(store, "x", freed, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "not a live libmtls handle") != NULL);
    mtls_cert_free(c);
    mtls_store_close(store);
}

TEST(damaged_newer_and_foreign_stores) {
    /* a damaged schema version (negative) is corrupt, not a crash */
    snprintf(cmd, sizeof cmd, "sqlite3 %s 'PRAGMA user_version=-1'", path);
    t_sh(cmd);
    CHECK_RC(mtls_store_open_key_file(path, keyfile, &o, &store), MTLS_E_CORRUPT);

    /* a store written by a newer libmtls */
    snprintf(cmd, sizeof cmd, "sqlite3 %s 'PRAGMA user_version=99'", path);
    t_sh(cmd);
    CHECK_RC(mtls_store_open_key_file(path, keyfile, &o, &store), MTLS_E_SCHEMA_TOO_NEW);

    /* not a store */
    CHECK_RC(mtls_store_open(p12path, PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &o, &store), MTLS_E_NOT_A_STORE);
    /* read-only location */
    CHECK_RC(mtls_store_open("/sys/mtls-c-test.db", PASS, PASS_LEN, MTLS_STORE_SECRET_PASSPHRASE, &o, &store), MTLS_E_READ_ONLY);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    snprintf(dir, sizeof dir, "%s/store-c-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd,
             "rm -rf %1$s && mkdir -p %1$s && cd %1$s && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
             "-subj '/CN=C Store CA' -days 5 -addext 'basicConstraints=critical,CA:TRUE' 2>/dev/null && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout c.key -out c.csr -subj '/CN=c-client' 2>/dev/null && "
             "openssl x509 -req -in c.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out c.pem -days 5 2>/dev/null && "
             "openssl pkcs12 -export -inkey c.key -in c.pem -certfile ca.pem -passout pass:pw -out c.p12 && "
             "head -c 32 /dev/urandom > store.key && chmod 600 store.key",
             dir);
    t_sh(cmd);
    snprintf(path, sizeof path, "%s/sub/store.db", dir);
    snprintf(p12path, sizeof p12path, "%s/c.p12", dir);
    snprintf(certpath, sizeof certpath, "%s/ca.pem", dir);
    snprintf(keyfile, sizeof keyfile, "%s/store.key", dir);
    p12 = t_read_file(p12path, &p12len);
    capem = t_read_file(certpath, &calen);
    CHECK_OK(mtls_cert_parse(capem, calen, &ca));

    RUN(options_defaults);
    RUN(open_new_store);
    RUN(import_p12_under_a_label);
    RUN(put_identity_cert_and_token_reference);
    RUN(get_items);
    RUN(metadata_info_list_find);
    RUN(export_p12);
    RUN(delete_items);
    RUN(change_secret_to_key_file);
    RUN(secret_file_modes_checked);
    RUN(locked_beyond_busy_timeout);
    RUN(tampered_row_and_abi_edges);
    RUN(damaged_newer_and_foreign_stores);

    /* Identity handles come from the identity section of the ABI. */
    mtls_identity_free(id);
    mtls_identity_free(got);
    mtls_cert_free(ca);
    free(p12); free(capem); free(key);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
    DONE();
}
