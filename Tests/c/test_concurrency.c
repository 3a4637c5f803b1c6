/* Concurrency through the C ABI (run under ThreadSanitizer by `make test-tsan`, and plainly by
 * `make test-c`): 8 client threads share one policy, one store and identities; each evaluates
 * the server's chain, loads its identity from the shared store and connects (mTLS, echo) to a
 * local mtls_listener served by 2 accepting threads, while another thread keeps swapping the
 * shared policy's settings (mtls_policy_replace) between two equivalent policies — a pinned and
 * an unpinned one, both trusting only the test root — so every evaluation and every connection
 * must succeed throughout. */
#define _GNU_SOURCE
#include "test_support.h"
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define WORKERS 8
#define ROUNDS 4

static char pki[512];
static mtls_policy *shared_policy;     /* used by every client thread, swapped while in use */
static mtls_store *shared_store;
static mtls_identity *shared_identity; /* presented by even threads; odd ones load theirs */
static mtls_cert **server_chain;
static size_t server_chain_len;
static mtls_listener *listener;
static uint16_t port;
static atomic_int stop, evaluated, connected, served, swaps, failures;

static void fail(const char *what, int rc) {
    fprintf(stderr, "test_concurrency: %s: %d %s (%s)\n", what, rc, mtls_error_name(rc), mtls_last_error());
    atomic_fetch_add(&failures, 1);
}

static mtls_policy *anchored_root(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/root.pem", pki);
    mtls_cert **certs = NULL; size_t n = 0;
    CHECK_OK(mtls_cert_list_load(path, &certs, &n));
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_new(&p));
    CHECK_OK(mtls_policy_add_anchor(p, certs[0]));
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));
    mtls_cert_list_free(certs, n);
    return p;
}

static void *accept_loop(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        mtls_conn *c = NULL;
        int rc = mtls_listener_accept(listener, 100, &c);
        if (rc == MTLS_E_TIMEOUT) continue;
        if (rc != MTLS_OK) { fail("accept", rc); continue; }
        uint8_t buf[64]; size_t got = 0, put = 0;
        if ((rc = mtls_conn_read(c, buf, sizeof buf, &got)) != MTLS_OK) fail("server read", rc);
        else if ((rc = mtls_conn_write(c, buf, got, &put)) != MTLS_OK) fail("server write", rc);
        else atomic_fetch_add(&served, 1);
        mtls_conn_free(c);
    }
    return NULL;
}

static void *swapper(void *arg) {
    mtls_policy **alts = arg;
    for (int i = 0; !atomic_load(&stop); i++) {
        int rc = mtls_policy_replace(shared_policy, alts[i & 1]);
        if (rc != MTLS_OK) fail("replace", rc);
        atomic_fetch_add(&swaps, 1);
        usleep(2000); /* the swap rate against the workers: time passing is the point */
    }
    return NULL;
}

static void *worker(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        mtls_trust_result *res = NULL; int trusted = 0;
        int rc = mtls_evaluate(shared_policy, server_chain, server_chain_len, "server.test", MTLS_PURPOSE_SERVER, 0, &res);
        if (rc != MTLS_OK) fail("evaluate", rc);
        else if (mtls_trust_result_trusted(res, &trusted) != MTLS_OK || !trusted) fail("evaluate: untrusted", -1);
        else atomic_fetch_add(&evaluated, 1);
        mtls_trust_result_free(res);

        mtls_identity *mine = NULL;
        if (id & 1) {
            if ((rc = mtls_store_get_identity(shared_store, "client-a", &mine)) != MTLS_OK) { fail("store get", rc); continue; }
        } else mine = mtls_identity_ref(shared_identity);
        mtls_store_item **items = NULL; size_t n = 0;
        if ((rc = mtls_store_list(shared_store, MTLS_STORE_ANY, &items, &n)) != MTLS_OK || n != 1) fail("store list", rc);
        mtls_store_item_list_free(items, n);

        mtls_conn_options o;
        mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION);
        o.verify_as = "server.test";
        o.identity = mine;
        o.policy = shared_policy;
        o.handshake_timeout_ms = 60000; o.io_timeout_ms = 60000;
        o.no_session_resumption = (r & 1); /* half full handshakes, half possibly resumed */
        mtls_conn *c = NULL;
        rc = mtls_conn_connect("127.0.0.1", port, &o, &c);
        if (rc != MTLS_OK) fail("connect", rc);
        else {
            char msg[32]; size_t put = 0, got = 0; uint8_t buf[32];
            int len = snprintf(msg, sizeof msg, "t%ld-r%d", id, r);
            if ((rc = mtls_conn_write(c, (const uint8_t *)msg, (size_t)len, &put)) != MTLS_OK) fail("client write", rc);
            else if ((rc = mtls_conn_read(c, buf, sizeof buf, &got)) != MTLS_OK) fail("client read", rc);
            else if (got != (size_t)len || memcmp(buf, msg, got) != 0) fail("echo differs", -1);
            else atomic_fetch_add(&connected, 1);
        }
        mtls_conn_free(c);
        mtls_identity_free(mine);
    }
    return NULL;
}

/* The policies the swapper alternates: the root alone, and the root plus the server's pin. */
static mtls_policy *alts[2];

/* Workers evaluate, connect and read the shared store while a thread swaps the shared policy;
 * two threads accept. */
TEST(workers_while_policy_swaps) {
    pthread_t acceptors[2], swap, workers[WORKERS];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&acceptors[i], NULL, accept_loop, NULL) == 0);
    CHECK(pthread_create(&swap, NULL, swapper, alts) == 0);
    for (long i = 0; i < WORKERS; i++) CHECK(pthread_create(&workers[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < WORKERS; i++) pthread_join(workers[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(swap, NULL);
    for (int i = 0; i < 2; i++) pthread_join(acceptors[i], NULL);

    printf("concurrency: %d evaluations, %d connections, %d served, %d policy swaps, %d failures\n",
           atomic_load(&evaluated), atomic_load(&connected), atomic_load(&served), atomic_load(&swaps),
           atomic_load(&failures));
    CHECK(atomic_load(&failures) == 0);
    CHECK(atomic_load(&evaluated) == WORKERS * ROUNDS);
    CHECK(atomic_load(&connected) == WORKERS * ROUNDS);
    CHECK(atomic_load(&served) == WORKERS * ROUNDS);
    CHECK(atomic_load(&swaps) > 0);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[2048], path[1024];
    snprintf(pki, sizeof pki, "%s/concurrency-pki", tmp);
    snprintf(cmd, sizeof cmd, "scripts/test-pki.sh %s >/dev/null", pki);
    t_sh(cmd);

    snprintf(path, sizeof path, "%s/server-chain.pem", pki);
    CHECK_OK(mtls_cert_list_load(path, &server_chain, &server_chain_len));
    CHECK(server_chain_len == 2);

    /* Identities from PEM (server, client A). */
    char *pems[4]; const char *names[4] = { "server-chain.pem", "server.key", "client-a-chain.pem", "client-a.key" };
    for (int i = 0; i < 4; i++) {
        size_t len; snprintf(path, sizeof path, "%s/%s", pki, names[i]);
        pems[i] = (char *)t_read_file(path, &len); pems[i][len] = 0;
    }
    mtls_identity *server_id = NULL;
    CHECK_OK(mtls_identity_from_pem(pems[0], pems[1], NULL, &server_id));
    CHECK_OK(mtls_identity_from_pem(pems[2], pems[3], NULL, &shared_identity));
    for (int i = 0; i < 4; i++) free(pems[i]);

    /* The shared store holds client A's identity. */
    uint8_t key[32]; memset(key, 7, sizeof key);
    snprintf(path, sizeof path, "%s/concurrency.db", tmp);
    unlink(path);
    CHECK_OK(mtls_store_open(path, key, sizeof key, MTLS_STORE_SECRET_KEY, NULL, &shared_store));
    CHECK_OK(mtls_store_put_identity(shared_store, "client-a", shared_identity, 1));

    /* Two equivalent policies: the root alone, and the root plus the server's pin. */
    shared_policy = anchored_root();
    alts[0] = anchored_root();
    alts[1] = anchored_root();
    char *pin = NULL;
    CHECK_OK(mtls_cert_spki_pin(server_chain[0], &pin));
    CHECK_OK(mtls_policy_add_pin(alts[1], "server.test", pin));
    mtls_string_free(pin);

    /* The listener judges clients by the root too. */
    mtls_policy *client_policy = anchored_root();
    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id; lo.client_policy = client_policy;
    lo.handshake_timeout_ms = 60000; lo.io_timeout_ms = 60000;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    CHECK_OK(mtls_listener_port(listener, &port));

    RUN(workers_while_policy_swaps);

    mtls_listener_free(listener);
    mtls_store_close(shared_store);
    mtls_policy_free(shared_policy); mtls_policy_free(alts[0]); mtls_policy_free(alts[1]); mtls_policy_free(client_policy);
    mtls_identity_free(server_id); mtls_identity_free(shared_identity);
    mtls_cert_list_free(server_chain, server_chain_len);
    unlink(path);
    DONE();
}
