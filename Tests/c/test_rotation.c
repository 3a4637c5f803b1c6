/* Identities that change (issue 26) through the C ABI: a listener following a store label
 * replaced through another store handle, mtls_listener_set_identity, a client identity source
 * (mtls_conn_options version 2), events with user data and destroy, counters, store expiry. */
#define _DEFAULT_SOURCE /* usleep */
#include "pki_support.h"

#include <pthread.h>
#include <unistd.h>

static int rotated = 0, destroyed = 0;

static void on_event(const mtls_event *e, void *userdata) {
    CHECK(userdata == (void *)&rotated);
    CHECK(e->message != NULL && e->message[0] != 0);
    if (e->kind == MTLS_EVENT_IDENTITY_ROTATED) { CHECK(e->sha256 != NULL); __atomic_fetch_add(&rotated, 1, __ATOMIC_RELAXED); }
}
static void on_destroy(void *userdata) { CHECK(userdata == (void *)&rotated); __atomic_fetch_add(&destroyed, 1, __ATOMIC_RELAXED); }

struct accepted { mtls_listener *l; char sha[65]; };

static void *accept_one(void *arg) {
    struct accepted *a = arg;
    mtls_conn *c = NULL;
    CHECK_OK(mtls_listener_accept(a->l, 10000, &c));
    mtls_cert **chain = NULL; size_t n = 0;
    CHECK_OK(mtls_conn_peer_chain(c, &chain, &n));
    a->sha[0] = 0;
    if (n > 0) { char *hex = NULL; CHECK_OK(mtls_cert_sha256_hex(chain[0], &hex)); snprintf(a->sha, sizeof a->sha, "%s", hex); mtls_string_free(hex); }
    mtls_cert_list_free(chain, n);
    mtls_conn_free(c);
    return NULL;
}

/* One client against `l`: the server leaf's SHA-256 in `server_sha`, the client leaf the
 * listener saw in `client_sha`. */
static void round_trip(mtls_listener *l, mtls_conn_options *o, char *server_sha, char *client_sha) {
    struct accepted a = { l, "" };
    pthread_t t;
    CHECK(pthread_create(&t, NULL, accept_one, &a) == 0);
    uint16_t port = 0;
    CHECK_OK(mtls_listener_port(l, &port));
    mtls_conn *c = NULL;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, o, &c));
    mtls_cert **chain = NULL; size_t n = 0;
    CHECK_OK(mtls_conn_peer_chain(c, &chain, &n));
    char *hex = NULL;
    CHECK_OK(mtls_cert_sha256_hex(chain[0], &hex));
    snprintf(server_sha, 65, "%s", hex);
    mtls_string_free(hex);
    mtls_cert_list_free(chain, n);
    mtls_conn_free(c);
    pthread_join(t, NULL);
    snprintf(client_sha, 65, "%s", a.sha);
}

static void leaf_sha(mtls_identity *id, char *out) {
    mtls_cert *leaf = NULL; char *hex = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    CHECK_OK(mtls_cert_sha256_hex(leaf, &hex));
    snprintf(out, 65, "%s", hex);
    mtls_string_free(hex);
    mtls_cert_free(leaf);
}

/* What the tests share, made once in main or by listener_follows_store_row (they run in order):
 * the identities and their leaf hashes, two handles on one store, the listener presenting the
 * followed row, and the client options. */
static mtls_identity *server, *server_rsa, *client_a, *client_rsa;
static char path[1024], want_server[65], want_rsa[65], want_client[65], want_client_rsa[65], got[65], seen[65];
static mtls_store *ours = NULL, *other = NULL;
static mtls_policy *clients, *servers;
static mtls_listener *l = NULL;
static mtls_conn_options o;

TEST(listener_follows_store_row) {
    mtls_watch_options wo;
    CHECK_OK(mtls_watch_options_init(&wo, MTLS_WATCH_OPTIONS_VERSION));
    CHECK(wo.warning_days == 14);
    mtls_identity_source *src = NULL;
    CHECK_RC(mtls_identity_source_follow_store(ours, "missing", &wo, &src), MTLS_E_NOT_FOUND);
    CHECK_OK(mtls_identity_source_follow_store(ours, "srv", &wo, &src));
    CHECK_OK(mtls_identity_source_set_event_callback(src, on_event, &rotated, on_destroy));

    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    clients = anchored("int-a.pem");
    servers = anchored("root.pem");
    lo.client_policy = clients;
    CHECK_OK(mtls_listener_new_with_source("127.0.0.1", 0, &lo, src, &l));
    mtls_identity_source_free(src); /* the listener keeps its own reference */

    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.verify_as = "server.test";
    o.policy = servers;
    o.identity = client_a;
    o.no_session_resumption = 1;

    round_trip(l, &o, got, seen);
    CHECK(strcmp(got, want_server) == 0);
    /* Another handle on the file replaces the row, as another process would. */
    CHECK_OK(mtls_store_put_identity(other, "srv", server_rsa, 1));
    for (int i = 0; i < 2000 && __atomic_load_n(&rotated, __ATOMIC_RELAXED) == 0; i++) usleep(10000);
    round_trip(l, &o, got, seen);
    CHECK(strcmp(got, want_rsa) == 0);
    CHECK(__atomic_load_n(&rotated, __ATOMIC_RELAXED) == 1);
    CHECK_OK(mtls_listener_set_identity(l, server));
    round_trip(l, &o, got, seen);
    CHECK(strcmp(got, want_server) == 0);
    CHECK(__atomic_load_n(&rotated, __ATOMIC_RELAXED) == 2);
}

TEST(client_identity_source_swapped) {
    /* A client identity source (mtls_conn_options version 2): the listener sees the swap. */
    mtls_identity_source *csrc = NULL;
    CHECK_OK(mtls_identity_source_new(client_a, &csrc));
    o.identity = NULL;
    o.identity_source = csrc;
    round_trip(l, &o, got, seen);
    CHECK(strcmp(seen, want_client) == 0);
    CHECK_OK(mtls_identity_source_set(csrc, client_rsa));
    round_trip(l, &o, got, seen);
    CHECK(strcmp(seen, want_client_rsa) == 0);
    mtls_identity *cur = NULL;
    CHECK_OK(mtls_identity_source_current(csrc, &cur));
    mtls_identity_free(cur);
    mtls_identity_source_free(csrc);
}

TEST(listener_counters_and_metrics) {
    mtls_listener_counters counters = { .version = MTLS_LISTENER_COUNTERS_VERSION };
    CHECK_OK(mtls_listener_get_counters(l, &counters));
    CHECK(counters.accepted == 5 && counters.refused == 0 && counters.resumed == 0);
    uint64_t untrusted = 99;
    CHECK_OK(mtls_listener_refused_count(l, MTLS_E_UNTRUSTED, &untrusted));
    CHECK(untrusted == 0);
    char *text = NULL;
    CHECK_OK(mtls_listener_metrics(l, &text));
    CHECK(strstr(text, "mtls_listener_handshakes_accepted_total 5") != NULL);
    mtls_string_free(text);
    counters.version = 99;
    CHECK_RC(mtls_listener_get_counters(l, &counters), MTLS_E_INVALID_ARGUMENT);
    mtls_listener_free(l);
    /* The last holder of the source let go: the listener, or the watcher thread if it was
     * looking at the source just then (a moment). */
    for (int i = 0; i < 100 && __atomic_load_n(&destroyed, __ATOMIC_RELAXED) == 0; i++) usleep(10000);
    CHECK(__atomic_load_n(&destroyed, __ATOMIC_RELAXED) == 1);
}

TEST(expiry_as_data) {
    char *text = NULL;
    /* Expiry as data. */
    mtls_expiry_item *items = NULL; size_t n = 0;
    CHECK_OK(mtls_store_expiry(ours, &items, &n));
    CHECK(n == 2); /* the leaf and its intermediate */
    CHECK(items[0].not_after <= items[1].not_after && strcmp(items[0].label, "srv") == 0);
    CHECK(items[0].item_class == MTLS_STORE_IDENTITY);
    int64_t earliest = 0; char *label = NULL;
    CHECK_OK(mtls_store_earliest_expiry(ours, &earliest, &label));
    CHECK(earliest == items[0].not_after && strcmp(label, "srv") == 0);
    mtls_string_free(label);
    mtls_expiry_items_free(items, n);
    CHECK_OK(mtls_store_metrics(ours, &text));
    CHECK(strstr(text, "mtls_certificate_not_after_seconds{label=\"srv\",class=\"identity\"") != NULL);
    mtls_string_free(text);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    make_pki("rotation-pki");
    snprintf(path, sizeof path, "%s/rotation-%d.db", tmp, (int)getpid());
    unlink(path);

    server = identity("server", "int-a.pem");
    server_rsa = identity("server-rsa", "int-a.pem");
    client_a = identity("client-a", "int-a.pem");
    client_rsa = identity("client-a-rsa", "int-a.pem");
    leaf_sha(server, want_server); leaf_sha(server_rsa, want_rsa);
    leaf_sha(client_a, want_client); leaf_sha(client_rsa, want_client_rsa);

    mtls_store_options so;
    CHECK_OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION));
    so.kdf_log_n = 10;
    CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &other));
    CHECK_OK(mtls_store_put_identity(other, "srv", server, 0));
    CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &ours));

    RUN(listener_follows_store_row);
    RUN(client_identity_source_swapped);
    RUN(listener_counters_and_metrics);
    RUN(expiry_as_data);

    mtls_store_close(ours); mtls_store_close(other);
    mtls_identity_free(server); mtls_identity_free(server_rsa); mtls_identity_free(client_a); mtls_identity_free(client_rsa);
    mtls_policy_free(clients); mtls_policy_free(servers);
    unlink(path);
    DONE();
}
