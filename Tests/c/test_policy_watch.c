/* Trust that changes under a running program (issue 26) through the C ABI: a policy that follows
 * its JSON file (mtls_policy_watch_*) and anchors that follow store labels
 * (mtls_policy_follow_store_anchors). Each is checked by evaluating customer A's and customer B's
 * client chains before and after the change: the reload is in force, a broken replacement keeps
 * the last good trust, and the events (with user data, on the watcher thread, and destroy) come. */
#define _DEFAULT_SOURCE /* usleep */
#include "pki_support.h"

#include <unistd.h>

/* What the event callbacks saw; written on the "mtls-watch" thread (or the caller's, for an
 * explicit reload), read here. */
struct seen {
    int reloaded, failed, destroyed;
    int last_error;
    char label[1024];
};

static void on_event(const mtls_event *e, void *userdata) {
    struct seen *s = userdata;
    CHECK(e->message != NULL && e->message[0] != 0);
    if (e->label) snprintf(s->label, sizeof s->label, "%s", e->label);
    if (e->kind == MTLS_EVENT_POLICY_RELOADED) __atomic_fetch_add(&s->reloaded, 1, __ATOMIC_SEQ_CST);
    if (e->kind == MTLS_EVENT_RELOAD_FAILED) {
        CHECK(e->error_code != MTLS_OK);
        __atomic_store_n(&s->last_error, e->error_code, __ATOMIC_SEQ_CST);
        __atomic_fetch_add(&s->failed, 1, __ATOMIC_SEQ_CST);
    }
}
static void on_destroy(void *userdata) { __atomic_fetch_add(&((struct seen *)userdata)->destroyed, 1, __ATOMIC_SEQ_CST); }

static int count(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }

/* Waits (up to 5 s: the watcher looks every 250 ms) until *p reaches `want`. */
static void wait_for(int *p, int want) {
    for (int i = 0; i < 500 && count(p) < want; i++) usleep(10000);
}

/* Is client `name` (its leaf and its issuer `inter`) trusted by `policy` as a client? */
static int trusts(mtls_policy *policy, const char *name, const char *inter) {
    char path[1024];
    mtls_cert **leaf = NULL, **ca = NULL; size_t nl = 0, nc = 0;
    snprintf(path, sizeof path, "%s/%s.pem", pki, name);
    CHECK_OK(mtls_cert_list_load(path, &leaf, &nl));
    snprintf(path, sizeof path, "%s/%s", pki, inter);
    CHECK_OK(mtls_cert_list_load(path, &ca, &nc));
    mtls_cert *chain[2] = { leaf[0], ca[0] };
    mtls_trust_result *r = NULL;
    int trusted = -1;
    CHECK_OK(mtls_evaluate(policy, chain, 2, NULL, MTLS_PURPOSE_CLIENT, 0, &r));
    CHECK_OK(mtls_trust_result_trusted(r, &trusted));
    mtls_trust_result_free(r);
    mtls_cert_list_free(leaf, nl); mtls_cert_list_free(ca, nc);
    return trusted;
}

/* Replaces `path` as an editor or a deployment would: a new file renamed over it. */
static void write_policy(const char *path, const char *json) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    CHECK(f != NULL);
    fputs(json, f);
    fclose(f);
    CHECK(rename(tmp, path) == 0);
}

static void anchors_json(char *out, size_t len, const char *inter) {
    snprintf(out, len, "{\"anchors\": [\"%s/%s\"], \"anchors_only\": true}", pki, inter);
}

static mtls_cert *load_cert(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", pki, name);
    mtls_cert **certs = NULL; size_t n = 0;
    CHECK_OK(mtls_cert_list_load(path, &certs, &n));
    mtls_cert *c = certs[0];
    certs[0] = NULL;
    mtls_cert_list_free(certs, n);
    return c;
}

static void policy_file(const char *tmp) {
    char path[1024], json[2048];
    snprintf(path, sizeof path, "%s/policy-watch-%d.json", tmp, (int)getpid());
    write_policy(path, "{ broken");
    mtls_policy_watch *w = NULL;
    CHECK_RC(mtls_policy_watch_new(path, NULL, &w), MTLS_E_INVALID_POLICY); /* the first load's failure is returned */
    CHECK(w == NULL);

    anchors_json(json, sizeof json, "int-a.pem");
    write_policy(path, json);
    CHECK_OK(mtls_policy_watch_new(path, NULL, &w));
    struct seen s = { 0 };
    CHECK_OK(mtls_policy_watch_set_event_callback(w, on_event, &s, on_destroy));
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_watch_policy(w, &p));
    CHECK(trusts(p, "client-a", "int-a.pem") == 1);
    CHECK(trusts(p, "client-b", "int-b.pem") == 0);

    /* The file changes: customer B's CA replaces A's, in force within a second. */
    anchors_json(json, sizeof json, "int-b.pem");
    write_policy(path, json);
    wait_for(&s.reloaded, 1);
    CHECK(count(&s.reloaded) == 1 && count(&s.failed) == 0);
    CHECK(strcmp(s.label, path) == 0);
    CHECK(trusts(p, "client-b", "int-b.pem") == 1);
    CHECK(trusts(p, "client-a", "int-a.pem") == 0);

    /* A broken file keeps the last good policy and is reported once. */
    write_policy(path, "{\"anchors\": [");
    wait_for(&s.failed, 1);
    CHECK(count(&s.failed) == 1 && count(&s.reloaded) == 1);
    CHECK(count(&s.last_error) == MTLS_E_INVALID_POLICY);
    CHECK(trusts(p, "client-b", "int-b.pem") == 1);
    CHECK(trusts(p, "client-a", "int-a.pem") == 0);
    t_wait_watcher_looks(); /* more looks: an unchanged broken file is not reported again */
    CHECK(count(&s.failed) == 1);
    /* An anchor file that is gone is a failed reload too, not an empty policy. */
    snprintf(json, sizeof json, "{\"anchors\": [\"%s/no-such.pem\"], \"anchors_only\": true}", pki);
    write_policy(path, json);
    wait_for(&s.failed, 2);
    CHECK(count(&s.failed) == 2);
    CHECK(trusts(p, "client-b", "int-b.pem") == 1);

    /* mtls_policy_watch_reload: now, on this thread, whatever the file's stamp says. */
    anchors_json(json, sizeof json, "int-a.pem");
    write_policy(path, json);
    CHECK_OK(mtls_policy_watch_reload(w));
    CHECK(count(&s.reloaded) >= 2);
    CHECK(trusts(p, "client-a", "int-a.pem") == 1);
    CHECK(trusts(p, "client-b", "int-b.pem") == 0);

    /* Replacing the callback runs destroy for the old user data. */
    struct seen s2 = { 0 };
    CHECK_OK(mtls_policy_watch_set_event_callback(w, on_event, &s2, on_destroy));
    CHECK(count(&s.destroyed) == 1);
    mtls_policy_watch_free(w);
    for (int i = 0; i < 100 && count(&s2.destroyed) == 0; i++) usleep(10000);
    CHECK(count(&s2.destroyed) == 1);
    /* The policy outlives the watch, with the last settings in force. */
    CHECK(trusts(p, "client-a", "int-a.pem") == 1);
    mtls_policy_free(p);
    mtls_policy_watch_free(NULL);
    unlink(path);
}

static void store_anchors(const char *tmp) {
    char path[1024];
    snprintf(path, sizeof path, "%s/anchor-watch-%d.db", tmp, (int)getpid());
    unlink(path);
    mtls_store_options so;
    CHECK_OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION));
    so.kdf_log_n = 10;
    mtls_store *ours = NULL, *other = NULL;
    CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &other));
    mtls_cert *int_a = load_cert("int-a.pem"), *int_b = load_cert("int-b.pem");
    CHECK_OK(mtls_store_put_cert(other, "customer", int_a, 0));
    CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &ours));

    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_new(&p));
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));
    mtls_anchor_watch *w = NULL;
    const char *missing[] = { "customer", "nobody" };
    CHECK_RC(mtls_policy_follow_store_anchors(p, ours, missing, 2, &w), MTLS_E_NOT_FOUND);
    CHECK(w == NULL);
    CHECK(trusts(p, "client-a", "int-a.pem") == 0); /* a failed follow adds nothing */
    CHECK_RC(mtls_policy_follow_store_anchors(p, ours, missing, 0, &w), MTLS_E_INVALID_ARGUMENT);
    const char *labels[] = { "customer" };
    CHECK_OK(mtls_policy_follow_store_anchors(p, ours, labels, 1, &w));
    struct seen s = { 0 };
    CHECK_OK(mtls_anchor_watch_set_event_callback(w, on_event, &s, on_destroy));
    CHECK(trusts(p, "client-a", "int-a.pem") == 1);
    CHECK(trusts(p, "client-b", "int-b.pem") == 0);

    /* Another handle replaces the stored anchor, as `mtls store add-cert --replace` in another
     * process would: the policy's anchors follow within a second. */
    CHECK_OK(mtls_store_put_cert(other, "customer", int_b, 1));
    wait_for(&s.reloaded, 1);
    CHECK(count(&s.reloaded) == 1 && count(&s.failed) == 0);
    CHECK(strcmp(s.label, "customer") == 0);
    CHECK(trusts(p, "client-b", "int-b.pem") == 1);
    CHECK(trusts(p, "client-a", "int-a.pem") == 0);

    /* The label deleted: the anchors in force stay, reported once. */
    size_t deleted = 0;
    CHECK_OK(mtls_store_delete(other, "customer", MTLS_STORE_CERTIFICATE, &deleted));
    CHECK(deleted == 1);
    wait_for(&s.failed, 1);
    CHECK(count(&s.failed) == 1 && count(&s.last_error) == MTLS_E_NOT_FOUND);
    CHECK(trusts(p, "client-b", "int-b.pem") == 1);
    CHECK_OK(mtls_store_put_cert(other, "unrelated", int_a, 0)); /* the store moves again, the label still gone */
    t_wait_watcher_looks();
    CHECK(count(&s.failed) == 1);
    CHECK(trusts(p, "client-a", "int-a.pem") == 0);
    /* Put back: followed again. */
    CHECK_OK(mtls_store_put_cert(other, "customer", int_a, 0));
    wait_for(&s.reloaded, 2);
    CHECK(count(&s.reloaded) == 2);
    CHECK(trusts(p, "client-a", "int-a.pem") == 1);
    CHECK(trusts(p, "client-b", "int-b.pem") == 0);

    mtls_anchor_watch_free(w);
    for (int i = 0; i < 100 && count(&s.destroyed) == 0; i++) usleep(10000);
    CHECK(count(&s.destroyed) == 1);
    CHECK(trusts(p, "client-a", "int-a.pem") == 1); /* the anchors in force stay in the policy */
    mtls_anchor_watch_free(NULL);
    mtls_policy_free(p);
    mtls_cert_free(int_a); mtls_cert_free(int_b);
    mtls_store_close(ours); mtls_store_close(other);
    unlink(path);
}

static const char *test_tmp;
TEST(a_followed_policy_file) { policy_file(test_tmp); }
TEST(anchors_followed_in_a_store) { store_anchors(test_tmp); }

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[2048];
    snprintf(pki, sizeof pki, "%s/policy-watch-pki", tmp);
    snprintf(cmd, sizeof cmd, "scripts/test-pki.sh %s", pki);
    t_sh(cmd);
    test_tmp = tmp;
    RUN(a_followed_policy_file);
    RUN(anchors_followed_in_a_store);
    DONE();
}
