/* Event callbacks that call back into the library (issue 26): a callback may read the listener's
 * counters and metrics, the source's identity, the followed store, and replace or clear its own
 * registration, on the thread the header names (the caller's for mtls_listener_set_identity,
 * "mtls-watch" for what the watcher finds), without deadlock; the destroy function of each
 * registration runs exactly once, after its last call (on replace, on clear, on free). A watchdog
 * (alarm) fails the program instead of letting a deadlock hang it. */
#define _GNU_SOURCE /* pthread_getname_np, usleep */
#include "pki_support.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

/* One registration's user data: its calls, its destroys, and whether a call saw it destroyed. */
struct reg {
    int calls, destroyed, called_after_destroy;
    char thread[32];
};

static pthread_t main_thread;
static mtls_listener *listener;
static mtls_identity_source *source;
static mtls_store *store;
static mtls_policy_watch *watch;
static struct reg first, second, watcher, clearing, policy_first, policy_second;

static int count(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void wait_for(int *p, int want) {
    for (int i = 0; i < 500 && count(p) < want; i++) usleep(10000);
}

static void on_destroy(void *userdata) { __atomic_fetch_add(&((struct reg *)userdata)->destroyed, 1, __ATOMIC_SEQ_CST); }

static void enter(struct reg *r) {
    if (count(&r->destroyed) != 0) __atomic_store_n(&r->called_after_destroy, 1, __ATOMIC_SEQ_CST);
    pthread_getname_np(pthread_self(), r->thread, sizeof r->thread);
}

/* On the caller's thread (mtls_listener_set_identity): reads the listener; the first
 * registration hands over to `second` from inside its call. */
static void on_listener_first(const mtls_event *e, void *userdata) {
    struct reg *r = userdata;
    enter(r);
    CHECK(e->kind == MTLS_EVENT_IDENTITY_ROTATED);
    CHECK(pthread_equal(pthread_self(), main_thread));
    mtls_listener_counters c = { .version = MTLS_LISTENER_COUNTERS_VERSION };
    CHECK_OK(mtls_listener_get_counters(listener, &c));
    CHECK(c.current_connections == 0);
    char *text = NULL;
    CHECK_OK(mtls_listener_metrics(listener, &text));
    CHECK(strstr(text, "mtls_listener_handshakes_accepted_total 0") != NULL);
    mtls_string_free(text);
    if (r == &first) {
        CHECK_OK(mtls_listener_set_event_callback(listener, on_listener_first, &second, on_destroy));
        /* Replaced, but still running: its user data must not be destroyed under it. */
        CHECK(count(&r->destroyed) == 0);
    }
    __atomic_fetch_add(&r->calls, 1, __ATOMIC_SEQ_CST);
}

/* On "mtls-watch" (a replacement found in the store): reads the source and the store it follows,
 * then clears its own registration. */
static void on_watcher(const mtls_event *e, void *userdata) {
    struct reg *r = userdata;
    enter(r);
    CHECK(e->kind == MTLS_EVENT_IDENTITY_ROTATED);
    CHECK(!pthread_equal(pthread_self(), main_thread));
    mtls_identity *cur = NULL;
    CHECK_OK(mtls_identity_source_current(source, &cur));
    mtls_identity_free(cur);
    mtls_expiry_item *items = NULL; size_t n = 0;
    CHECK_OK(mtls_store_expiry(store, &items, &n));
    CHECK(n >= 1);
    mtls_expiry_items_free(items, n);
    uint64_t counter = 0;
    CHECK_OK(mtls_store_write_counter(store, &counter));
    CHECK_OK(mtls_identity_source_set_event_callback(source, NULL, NULL, NULL));
    CHECK(count(&r->destroyed) == 0);
    __atomic_fetch_add(&r->calls, 1, __ATOMIC_SEQ_CST);
}

/* A followed policy file's event: reads the policy, and replaces the registration. */
static void on_policy(const mtls_event *e, void *userdata) {
    struct reg *r = userdata;
    enter(r);
    CHECK(e->kind == MTLS_EVENT_POLICY_RELOADED);
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_watch_policy(watch, &p));
    mtls_policy_free(p);
    if (r == &policy_first) CHECK_OK(mtls_policy_watch_set_event_callback(watch, on_policy, &policy_second, on_destroy));
    __atomic_fetch_add(&r->calls, 1, __ATOMIC_SEQ_CST);
}

static void write_file(const char *path, const char *text) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
    CHECK(rename(tmp, path) == 0);
}

/* What the tests share, made once in main: two server identities; the second store handle and
 * the files, removed at the end. */
static const char *tmp;
static mtls_identity *server, *server_rsa;
static mtls_store *other = NULL;
static char path[1024], policy_path[1024];

TEST(listener_callback_replaced_from_inside) {
    /* 1. The caller's thread; replaced from inside the call; freed with the listener. */
    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server;
    lo.client_auth = MTLS_CLIENT_AUTH_NONE;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    CHECK_OK(mtls_listener_set_event_callback(listener, on_listener_first, &first, on_destroy));
    CHECK_OK(mtls_listener_set_identity(listener, server_rsa));
    CHECK(count(&first.calls) == 1 && count(&first.called_after_destroy) == 0);
    CHECK(count(&first.destroyed) == 1); /* replaced: destroyed once its call returned */
    CHECK(count(&second.calls) == 0 && count(&second.destroyed) == 0);
    CHECK_OK(mtls_listener_set_identity(listener, server));
    CHECK(count(&second.calls) == 1 && count(&second.destroyed) == 0);
    mtls_listener_free(listener);
    wait_for(&second.destroyed, 1);
    CHECK(count(&second.destroyed) == 1 && count(&first.destroyed) == 1);
}

TEST(watcher_callback_clears_itself) {
    /* 2. "mtls-watch": a replacement made through another store handle; the callback clears itself. */
    mtls_store_options so;
    CHECK_OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION));
    so.kdf_log_n = 10;
    snprintf(path, sizeof path, "%s/reentry-%d.db", tmp, (int)getpid());
    unlink(path);
    CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &other));
    CHECK_OK(mtls_store_put_identity(other, "srv", server, 0));
    CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &store));
    CHECK_OK(mtls_identity_source_follow_store(store, "srv", NULL, &source));
    CHECK_OK(mtls_identity_source_set_event_callback(source, on_watcher, &watcher, on_destroy));
    CHECK_OK(mtls_store_put_identity(other, "srv", server_rsa, 1));
    wait_for(&watcher.destroyed, 1);
    CHECK(count(&watcher.calls) == 1 && count(&watcher.destroyed) == 1 && count(&watcher.called_after_destroy) == 0);
    CHECK(strcmp(watcher.thread, "mtls-watch") == 0);
    /* Cleared: the next replacement calls nothing. A new registration is destroyed with the source. */
    CHECK_OK(mtls_store_put_identity(other, "srv", server, 1));
    t_wait_watcher_looks(); /* the replacement has been seen: nothing was called */
    CHECK(count(&watcher.calls) == 1 && count(&watcher.destroyed) == 1);
    CHECK_OK(mtls_identity_source_set_event_callback(source, on_watcher, &clearing, on_destroy));
    mtls_identity_source_free(source);
    wait_for(&clearing.destroyed, 1);
    CHECK(count(&clearing.destroyed) == 1 && count(&clearing.calls) == 0);
}

TEST(policy_watch_callback_replaces_itself) {
    /* 3. A followed policy file: the callback replaces itself from inside. */
    snprintf(policy_path, sizeof policy_path, "%s/reentry-%d.json", tmp, (int)getpid());
    write_file(policy_path, "{\"anchors_only\": true}");
    CHECK_OK(mtls_policy_watch_new(policy_path, NULL, &watch));
    CHECK_OK(mtls_policy_watch_set_event_callback(watch, on_policy, &policy_first, on_destroy));
    write_file(policy_path, "{\"anchors_only\": false}");
    wait_for(&policy_first.destroyed, 1);
    CHECK(count(&policy_first.calls) == 1 && count(&policy_first.destroyed) == 1);
    CHECK(strcmp(policy_first.thread, "mtls-watch") == 0);
    write_file(policy_path, "{\"anchors_only\": true} ");
    wait_for(&policy_second.calls, 1);
    CHECK(count(&policy_second.calls) == 1 && count(&policy_second.destroyed) == 0);
    mtls_policy_watch_free(watch);
    wait_for(&policy_second.destroyed, 1);
    CHECK(count(&policy_second.destroyed) == 1 && count(&policy_first.destroyed) == 1);
    CHECK(count(&policy_first.called_after_destroy) == 0 && count(&policy_second.called_after_destroy) == 0);
}

int main(void) {
    alarm(120); /* a deadlock fails the test (SIGALRM ends the program) rather than hanging it */
    main_thread = pthread_self();
    tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    make_pki("reentry-pki");
    server = identity("server", "int-a.pem");
    server_rsa = identity("server-rsa", "int-a.pem");

    RUN(listener_callback_replaced_from_inside);
    RUN(watcher_callback_clears_itself);
    RUN(policy_watch_callback_replaces_itself);

    mtls_store_close(store);
    mtls_store_close(other);
    mtls_identity_free(server);
    mtls_identity_free(server_rsa);
    unlink(path);
    unlink(policy_path);
    DONE();
}
