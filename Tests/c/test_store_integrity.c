/* The store as a whole (issue 24), through the C ABI, as an attacker who can write the store file
 * (with the sqlite3 tool) but does not know its secret: downgrade laundering, a row written back
 * from before a replace, a row deleted or resurrected, the old header rows after a secret change,
 * a PIN among a token URI's path attributes; then the explicit upgrade of stores written by an
 * older libmtls (Tests/fixtures/store) and the write counter. Each attack succeeded on 1a1cbe4. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <unistd.h>
#include <stdint.h>

static char dir[512], cmd[8192];
static mtls_store_options opts;

static void sh(const char *fmt, const char *a, const char *b) {
    snprintf(cmd, sizeof cmd, fmt, a, b);
    t_sh(cmd);
}

static mtls_store *open_key(const char *path, const uint8_t *key) {
    mtls_store *s = NULL;
    CHECK_OK(mtls_store_open(path, key, 32, MTLS_STORE_SECRET_KEY, &opts, &s));
    return s;
}

static int file_contains(const char *path, const char *needle) {
    size_t len = 0;
    uint8_t *data = t_read_file(path, &len);
    size_t n = strlen(needle);
    int found = 0;
    for (size_t i = 0; !found && len >= n && i <= len - n; i++) found = memcmp(data + i, needle, n) == 0;
    free(data);
    return found;
}

static void check_corrupt_naming(int rc, const char *label) {
    CHECK_RC(rc, MTLS_E_CORRUPT);
    CHECK(strstr(mtls_last_error(), label) != NULL);
}

/* What the tests share, made once in main: the folder with two roots and a client, its
 * identity, and two store keys. */
static uint8_t key[32], key2[32];
static mtls_cert **certs = NULL, **ccerts = NULL;
static size_t ncerts = 0, nc = 0;
static mtls_cert *ca, *client;
static char *keypem = NULL, *certpem = NULL;
static mtls_identity *id = NULL;

TEST(downgrade_laundering_refused) {
    char path[700];
    /* Defect 1: downgrade laundering. Drop the tags, claim schema 2, swap the pinned anchor for
     * the attacker's root: the next open must refuse the store, not migrate it. */
    snprintf(path, sizeof path, "%s/d1.db", dir);
    mtls_store *s = open_key(path, key);
    CHECK_OK(mtls_store_put_cert(s, "acme-root", ca, 0));
    mtls_store_close(s);
    snprintf(cmd, sizeof cmd,
             "cd %s && sqlite3 d1.db \"ALTER TABLE items DROP COLUMN mac; PRAGMA user_version=2; "
             "UPDATE items SET leaf = readfile('evil.der'), subject = 'CN=Evil Root', issuer = 'CN=Evil Root', "
             "subject_cn = 'Evil Root', leaf_sha256 = '$(openssl dgst -sha256 -r evil.der | cut -c1-64)' "
             "WHERE label = 'acme-root'\"", dir);
    t_sh(cmd);
    s = NULL;
    CHECK_RC(mtls_store_open(path, key, 32, MTLS_STORE_SECRET_KEY, &opts, &s), MTLS_E_CORRUPT);
    CHECK(strstr(mtls_last_error(), "tampered or damaged") != NULL);
    CHECK(s == NULL);
    /* nothing was written: the file still says schema 2 */
    snprintf(cmd, sizeof cmd, "test \"$(sqlite3 %s 'PRAGMA user_version')\" = 2", path);
    t_sh(cmd);
    /* the upgrade path refuses it too: a current store's key is never vouched for again */
    mtls_store_item **items = NULL; size_t n = 0; char *confirmation = NULL;
    CHECK_RC(mtls_store_upgrade_preview(path, key, 32, MTLS_STORE_SECRET_KEY, &opts, &items, &n, &confirmation), MTLS_E_CORRUPT);
}

TEST(rolled_back_row_refused) {
    char path[700];
    mtls_store *s;
    mtls_store_item **items = NULL; size_t n = 0;
    /* Defect 2: rollback. The anchor before it was replaced, with its old valid tag, written back. */
    snprintf(path, sizeof path, "%s/d2.db", dir);
    s = open_key(path, key);
    CHECK_OK(mtls_store_put_cert(s, "anchor", ca, 0));
    CHECK_OK(mtls_store_put_cert(s, "pinned", ca, 0));
    sh("sqlite3 %s \"CREATE TABLE saved AS SELECT * FROM items WHERE label = 'anchor'\"%s", path, "");
    uint64_t c0 = 0, c1 = 0;
    CHECK_OK(mtls_store_write_counter(s, &c0));
    CHECK_OK(mtls_store_put_cert(s, "anchor", client, 1));
    CHECK_OK(mtls_store_write_counter(s, &c1));
    CHECK(c1 == c0 + 1);
    CHECK_RC(mtls_store_write_counter(s, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_write_counter(NULL, &c1), MTLS_E_INVALID_ARGUMENT);
    mtls_store_close(s);
    sh("sqlite3 %s \"DELETE FROM items WHERE label = 'anchor'; INSERT INTO items SELECT * FROM saved\"%s", path, "");
    s = open_key(path, key);
    mtls_cert *got = NULL;
    check_corrupt_naming(mtls_store_get_cert(s, "anchor", &got), "\"anchor\"");
    CHECK(got == NULL);
    mtls_store_item *item = NULL;
    check_corrupt_naming(mtls_store_item_info(s, "anchor", MTLS_STORE_CERTIFICATE, &item), "\"anchor\"");
    CHECK_RC(mtls_store_list(s, MTLS_STORE_ANY, &items, &n), MTLS_E_CORRUPT);
    /* the other row still reads */
    CHECK_OK(mtls_store_get_cert(s, "pinned", &got));
    mtls_cert_free(got);
    mtls_store_close(s);
}

TEST(deleted_and_restored_rows_refused) {
    /* Goes on from the d2.db rolled_back_row_refused left. */
    char path[700];
    snprintf(path, sizeof path, "%s/d2.db", dir);
    mtls_store *s;
    mtls_cert *got = NULL;
    mtls_store_item *item = NULL;
    mtls_store_item **items = NULL; size_t n = 0;
    /* Defect 2: deletion behind the library's back, and a deleted row put back. */
    sh("sqlite3 %s \"DELETE FROM items WHERE label = 'pinned'\"%s", path, "");
    s = open_key(path, key);
    check_corrupt_naming(mtls_store_get_cert(s, "pinned", &got), "\"pinned\"");
    check_corrupt_naming(mtls_store_item_info(s, "pinned", MTLS_STORE_ANY, &item), "\"pinned\"");
    CHECK_RC(mtls_store_get_cert(s, "never-stored", &got), MTLS_E_NOT_FOUND);
    mtls_store_close(s);
    snprintf(path, sizeof path, "%s/d2b.db", dir);
    s = open_key(path, key);
    CHECK_OK(mtls_store_put_cert(s, "revoked", client, 0));
    sh("sqlite3 %s \"CREATE TABLE saved AS SELECT * FROM items\"%s", path, "");
    size_t deleted = 0;
    CHECK_OK(mtls_store_delete(s, "revoked", MTLS_STORE_ANY, &deleted));
    CHECK(deleted == 1);
    mtls_store_close(s);
    sh("sqlite3 %s \"INSERT INTO items SELECT * FROM saved\"%s", path, "");
    s = open_key(path, key);
    check_corrupt_naming(mtls_store_get_cert(s, "revoked", &got), "\"revoked\"");
    CHECK_RC(mtls_store_list(s, MTLS_STORE_CERTIFICATE, &items, &n), MTLS_E_CORRUPT);
    mtls_store_close(s);
}

TEST(change_secret_rotates_data_key) {
    char path[700], file[700];
    mtls_store *s;
    /* Defect 3: change-secret rotates the data key. The pre-rotation header rows copied back let
     * the old key open nothing written after the change, and no key written before it. */
    snprintf(path, sizeof path, "%s/d3.db", dir);
    s = open_key(path, key);
    CHECK_OK(mtls_store_put_identity(s, "before", id, 0));
    sh("sqlite3 %s \"CREATE TABLE old_meta AS SELECT * FROM meta\"%s", path, "");
    CHECK_OK(mtls_store_change_secret(s, key2, 32, MTLS_STORE_SECRET_KEY));
    mtls_identity *back = NULL;
    CHECK_OK(mtls_store_get_identity(s, "before", &back));
    mtls_identity_free(back);
    mtls_store_close(s);
    snprintf(file, sizeof file, "%s/d3-norewrite.db", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", path, file);
    t_sh(cmd);
    s = open_key(path, key2);
    CHECK_OK(mtls_store_put_identity(s, "after", id, 0));
    mtls_store_close(s);
    sh("sqlite3 %s \"DELETE FROM meta; INSERT INTO meta SELECT * FROM old_meta\"%s", path, "");
    s = NULL;
    int rc = mtls_store_open(path, key, 32, MTLS_STORE_SECRET_KEY, &opts, &s);
    CHECK_RC(rc, MTLS_E_CORRUPT);
    /* with no write after the change the old header matches the manifest, yet nothing reads */
    sh("sqlite3 %s \"DELETE FROM meta; INSERT INTO meta SELECT * FROM old_meta\"%s", file, "");
    s = open_key(file, key);
    back = NULL;
    CHECK_RC(mtls_store_get_identity(s, "before", &back), MTLS_E_CORRUPT);
    CHECK(back == NULL);
    mtls_store_close(s);
}

TEST(pin_in_token_uri_never_stored) {
    char path[700];
    mtls_store *s;
    mtls_cert *got = NULL;
    /* Defect 4: a PIN among the path attributes is not stored, nor given back. */
    snprintf(path, sizeof path, "%s/d4.db", dir);
    s = open_key(path, key);
    CHECK_OK(mtls_store_put_token_identity(s, "tok", "pkcs11:token=T;object=O;pin-value=271828", client, NULL, 0, 0));
    char *uri = NULL;
    got = NULL;
    CHECK_OK(mtls_store_get_token_identity(s, "tok", &uri, &got));
    CHECK(strstr(uri, "271828") == NULL && strstr(uri, "pin-value") == NULL);
    CHECK(strstr(uri, "token=T") != NULL && strstr(uri, "object=O") != NULL);
    mtls_string_free(uri);
    mtls_cert_free(got);
    mtls_store_close(s);
    CHECK(!file_contains(path, "271828"));
}

TEST(schema_2_store_upgraded_with_confirmation) {
    char path[700];
    mtls_store *s;
    mtls_store_item **items = NULL; size_t n = 0; char *confirmation = NULL;
    mtls_cert *got = NULL;
    mtls_identity *back = NULL;
    char *uri = NULL;
    /* A store written by libmtls 2 (no row tags): the open names the command, the preview lists
     * what would be vouched for, the upgrade happens only with the preview's confirmation. */
    snprintf(path, sizeof path, "%s/v2.db", dir);
    sh("cp Tests/fixtures/store/v2.db %s%s", path, "");
    uint8_t fixture_key[32];
    memcpy(fixture_key, "libmtls-store-fixture-key-32byte", 32);
    s = NULL;
    CHECK_RC(mtls_store_open(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &s), MTLS_E_UPGRADE_REQUIRED);
    CHECK(strstr(mtls_last_error(), "mtls store upgrade") != NULL);
    CHECK(strcmp(mtls_error_name(MTLS_E_UPGRADE_REQUIRED), "upgrade_required") == 0);
    CHECK_OK(mtls_store_upgrade_preview(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &items, &n, &confirmation));
    CHECK(n == 3 && confirmation != NULL);
    int seen_tok = 0;
    for (size_t i = 0; i < n; i++) {
        char *label = NULL, *turi = NULL;
        CHECK_OK(mtls_store_item_label(items[i], &label));
        CHECK_OK(mtls_store_item_token_uri(items[i], &turi));
        if (strcmp(label, "tok") == 0) {
            seen_tok = 1;
            CHECK(turi != NULL && strstr(turi, "1234") == NULL);
        }
        mtls_string_free(label);
        mtls_string_free(turi);
    }
    CHECK(seen_tok);
    mtls_store_item_list_free(items, n);
    size_t vouched = 99;
    CHECK_RC(mtls_store_upgrade(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, "not-the-confirmation", &vouched),
             MTLS_E_INVALID_ARGUMENT);
    CHECK(vouched == 0);
    CHECK_RC(mtls_store_upgrade(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, NULL, &vouched), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_store_open(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &s), MTLS_E_UPGRADE_REQUIRED);
    CHECK_OK(mtls_store_upgrade(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, confirmation, &vouched));
    CHECK(vouched == 3);
    mtls_string_free(confirmation);
    s = open_key(path, fixture_key);
    CHECK_OK(mtls_store_get_cert(s, "acme-root", &got));
    mtls_cert_free(got);
    CHECK_OK(mtls_store_get_identity(s, "client", &back));
    mtls_identity_free(back);
    CHECK_OK(mtls_store_get_token_identity(s, "tok", &uri, &got));
    CHECK(strstr(uri, "1234") == NULL);
    mtls_string_free(uri);
    mtls_cert_free(got);
    mtls_store_close(s);
    CHECK(!file_contains(path, "pin-value=1234"));
    /* now current: nothing to vouch for */
    CHECK_OK(mtls_store_upgrade_preview(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &items, &n, &confirmation));
    CHECK(n == 0 && items == NULL && confirmation == NULL);
}

TEST(schema_3_store_upgraded_on_open) {
    uint8_t fixture_key[32];
    memcpy(fixture_key, "libmtls-store-fixture-key-32byte", 32);
    char path[700];
    mtls_store *s;
    mtls_cert *got = NULL;
    char *uri = NULL;
    uint64_t c0 = 0;
    /* A schema-3 store (rows authenticated) is upgraded by any open, after every row checks. */
    snprintf(path, sizeof path, "%s/v3.db", dir);
    sh("cp Tests/fixtures/store/v3.db %s%s", path, "");
    s = open_key(path, fixture_key);
    CHECK_OK(mtls_store_write_counter(s, &c0));
    CHECK(c0 == 1);
    CHECK_OK(mtls_store_get_token_identity(s, "tok", &uri, &got));
    CHECK(strstr(uri, "1234") == NULL);
    mtls_string_free(uri);
    mtls_cert_free(got);
    mtls_store_close(s);
    /* ...but not one whose rows were edited: the laundering of defect 1 on an old store is
     * refused by the tags it had, and with the tags dropped it needs the explicit upgrade. */
    sh("cp Tests/fixtures/store/v3.db %s%s", path, "");
    sh("sqlite3 %s \"UPDATE items SET subject = 'CN=Evil Root' WHERE label = 'acme-root'\"%s", path, "");
    CHECK_RC(mtls_store_open(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &s), MTLS_E_CORRUPT);
    CHECK(strstr(mtls_last_error(), "acme-root") != NULL);
    sh("sqlite3 %s \"ALTER TABLE items DROP COLUMN mac; PRAGMA user_version=2\"%s", path, "");
    CHECK_RC(mtls_store_open(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &s), MTLS_E_UPGRADE_REQUIRED);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    snprintf(dir, sizeof dir, "%s/store-integrity-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd,
             "rm -rf %1$s && mkdir -p %1$s && cd %1$s && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
             "-subj '/CN=Acme Root' -days 5 -addext 'basicConstraints=critical,CA:TRUE' 2>/dev/null && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout evil.key -out evil.pem "
             "-subj '/CN=Evil Root' -days 5 -addext 'basicConstraints=critical,CA:TRUE' 2>/dev/null && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout c.key -out c.csr -subj '/CN=c-client' 2>/dev/null && "
             "openssl x509 -req -in c.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out c.pem -days 5 2>/dev/null && "
             "openssl x509 -in evil.pem -outform DER -out evil.der",
             dir);
    t_sh(cmd);
    mtls_store_options_init(&opts, MTLS_STORE_OPTIONS_VERSION);
    opts.kdf_log_n = 10;
    memset(key, 0x5a, sizeof key);
    memset(key2, 0xa5, sizeof key2);
    char file[700];
    snprintf(file, sizeof file, "%s/ca.pem", dir);
    CHECK_OK(mtls_cert_list_load(file, &certs, &ncerts));
    ca = certs[0];
    snprintf(file, sizeof file, "%s/c.pem", dir);
    CHECK_OK(mtls_cert_list_load(file, &ccerts, &nc));
    client = ccerts[0];
    { size_t l; snprintf(file, sizeof file, "%s/c.key", dir); keypem = (char *)t_read_file(file, &l); keypem[l] = 0; }
    { size_t l; snprintf(file, sizeof file, "%s/c.pem", dir); certpem = (char *)t_read_file(file, &l); certpem[l] = 0; }
    CHECK_OK(mtls_identity_from_pem(certpem, keypem, NULL, &id));

    RUN(downgrade_laundering_refused);
    RUN(rolled_back_row_refused);
    RUN(deleted_and_restored_rows_refused);
    RUN(change_secret_rotates_data_key);
    RUN(pin_in_token_uri_never_stored);
    RUN(schema_2_store_upgraded_with_confirmation);
    RUN(schema_3_store_upgraded_on_open);

    mtls_identity_free(id);
    mtls_cert_list_free(certs, ncerts);
    mtls_cert_list_free(ccerts, nc);
    free(keypem); free(certpem);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
    DONE();
}
