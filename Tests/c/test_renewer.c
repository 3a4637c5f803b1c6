/* The renewer's C contract (issue 27): options init and version checks, argument checks, and its
 * events through the mtls_event callback — a label with no enrollment record fails with
 * MTLS_EVENT_RENEWAL_FAILED (MTLS_E_NOT_FOUND, next_attempt = the backoff), is not retried
 * before then, and the identity is left as it was; the callback's destroy runs once. Renewals
 * against real CAs through the same renewer are in Tests/e2e/test_renewal.py (Python). */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <unistd.h>
#include <stdint.h>
#include <time.h>

static const uint8_t PASS[] = "renewer passphrase";

struct seen {
    int count, kind, error_code, destroyed;
    int64_t next_attempt;
    char label[64];
};

static void on_event(const mtls_event *e, void *userdata) {
    struct seen *s = userdata;
    s->count++;
    s->kind = e->kind;
    s->error_code = e->error_code;
    s->next_attempt = e->next_attempt;
    snprintf(s->label, sizeof s->label, "%s", e->label ? e->label : "");
}

static void on_destroy(void *userdata) { ((struct seen *)userdata)->destroyed++; }

/* What the tests share, made once in main: a store holding "plain" (a self-signed identity no CA
 * renews), its leaf's hash, and the renewer of the second test, which the third frees. */
static char dir[512];
static uint8_t *p12;
static mtls_store *store = NULL;
static mtls_identity *id = NULL, *again = NULL;
static char *before = NULL, *after = NULL;
static mtls_renewer *r = NULL;
static struct seen s = {0};

TEST(renewer_options_and_arguments) {
    /* Options: the defaults, and versions this library does not know. */
    mtls_renewer_options ro;
    memset(&ro, 0x5a, sizeof ro);
    CHECK_OK(mtls_renewer_options_init(&ro, MTLS_RENEWER_OPTIONS_VERSION));
    CHECK(ro.version == MTLS_RENEWER_OPTIONS_VERSION && ro.policy == NULL && ro.token_pin == NULL);
    CHECK(ro.ca_key_password == NULL && ro.delete_previous_keys_after == -1);
    CHECK_RC(mtls_renewer_options_init(&ro, 99), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_renewer_options_init(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    mtls_renewer *bad_r = NULL;
    mtls_renewer_options bad = ro;
    bad.version = 99;
    CHECK_RC(mtls_renewer_new(store, "plain", &bad, &bad_r), MTLS_E_INVALID_ARGUMENT);
    CHECK(bad_r == NULL);
    CHECK_RC(mtls_renewer_new(NULL, "plain", NULL, &bad_r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_renewer_new(store, "plain", NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_renewer_run_once(NULL, 0, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
}

TEST(failed_renewal_is_an_event) {
    mtls_renewer_options ro;
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_renewer_options_init(&ro, MTLS_RENEWER_OPTIONS_VERSION));
    CHECK_OK(mtls_renewer_new(store, "plain", &ro, &r));
    CHECK_OK(mtls_renewer_set_event_callback(r, on_event, &s, on_destroy));
    size_t renewed = 7;
    int64_t wake = 0;
    int64_t now = (int64_t)time(NULL);
    /* A failed renewal is an event, not an error. */
    CHECK_OK(mtls_renewer_run_once(r, 1, &renewed, &wake));
    CHECK(renewed == 0);
    CHECK(s.count == 1 && s.kind == MTLS_EVENT_RENEWAL_FAILED && s.error_code == MTLS_E_NOT_FOUND);
    CHECK(strcmp(s.label, "plain") == 0);
    /* The first retry: 30 s +- 20 %. */
    CHECK(s.next_attempt >= now + 23 && s.next_attempt <= now + 37);
    CHECK(wake == s.next_attempt);
    /* Not due again: nothing tried, no event. */
    CHECK_OK(mtls_renewer_run_once(r, 0, &renewed, NULL));
    CHECK(s.count == 1 && renewed == 0);
    /* The identity is as it was. */
    CHECK_OK(mtls_store_get_identity(store, "plain", &again));
    CHECK_OK(mtls_identity_leaf(again, &leaf));
    CHECK_OK(mtls_cert_sha256_hex(leaf, &after));
    mtls_cert_free(leaf);
    CHECK(strcmp(before, after) == 0);
}

TEST(every_enrolled_identity_and_destroy) {
    size_t renewed = 7;
    int64_t wake = 0;
    /* Every enrolled identity (none here): no event. */
    mtls_renewer *all = NULL;
    CHECK_OK(mtls_renewer_new(store, NULL, NULL, &all));
    struct seen s2 = {0};
    CHECK_OK(mtls_renewer_set_event_callback(all, on_event, &s2, on_destroy));
    CHECK_OK(mtls_renewer_run_once(all, 1, &renewed, &wake));
    CHECK(renewed == 0 && s2.count == 0 && wake == 0);
    /* Clearing the callback runs destroy once; freeing then does not run it again. */
    CHECK_OK(mtls_renewer_set_event_callback(all, NULL, NULL, NULL));
    CHECK(s2.destroyed == 1);
    mtls_renewer_free(all);
    CHECK(s2.destroyed == 1);
    mtls_renewer_free(r);
    CHECK(s.destroyed == 1);
    mtls_renewer_free(NULL);
}

int main(void) {
    char p12path[600];
    store = t_temp_store("renewer-c", PASS, sizeof PASS - 1, dir, sizeof dir);
    t_self_signed(dir, "plain");
    snprintf(p12path, sizeof p12path, "%s/c.p12", dir);
    size_t p12len;
    p12 = t_read_file(p12path, &p12len);
    CHECK_OK(mtls_store_import_p12(store, "plain", p12, p12len, "pw", 0, &id));
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    CHECK_OK(mtls_cert_sha256_hex(leaf, &before));
    mtls_cert_free(leaf);

    RUN(renewer_options_and_arguments);
    RUN(failed_renewal_is_an_event);
    RUN(every_enrolled_identity_and_destroy);

    mtls_string_free(before);
    mtls_string_free(after);
    mtls_identity_free(again);
    mtls_identity_free(id);
    t_close_temp_store(store, dir);
    free(p12);
    DONE();
}
