/* A listener under load: one thread calls mtls_listener_accept while 64 client threads connect
 * (mutual TLS, echo, close) for a bounded number of rounds: no failed handshake, and the
 * process's memory is flat between the second and the last round. Before that, a client that
 * connects and then stalls must not hold up the next client (handshakes run concurrently). At
 * the end, mtls_listener_free cuts the stalled handshake short and returns with every listener
 * thread ended (a host may exit right after it: no listener thread is left inside OpenSSL while
 * its atexit clean-up runs, which corrupted the heap when the threads were detached). */
#define _GNU_SOURCE
#include "pki_support.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENTS 64
#define ROUNDS 6

static mtls_identity *client_id;
static mtls_policy *server_policy;
static uint16_t port;
static atomic_int failures, accepted, stop_server;

/* One accepting thread: every accepted client is echoed once and closed. */
static void *serve(void *arg) {
    mtls_listener *l = arg;
    while (!atomic_load(&stop_server)) {
        mtls_conn *c = NULL;
        int rc = mtls_listener_accept(l, 200, &c);
        if (rc == MTLS_E_TIMEOUT) continue;
        if (rc != MTLS_OK) {
            fprintf(stderr, "accept: %s: %s\n", mtls_error_name(rc), mtls_last_error());
            atomic_fetch_add(&failures, 1);
            continue;
        }
        atomic_fetch_add(&accepted, 1);
        uint8_t buf[64]; size_t got = 0, put = 0;
        if (mtls_conn_read(c, buf, sizeof buf, &got) == MTLS_OK && got > 0) mtls_conn_write(c, buf, got, &put);
        mtls_conn_free(c);
    }
    return NULL;
}

static int one_client(int handshake_ms) {
    mtls_conn_options o;
    mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION);
    o.verify_as = "server.test";
    o.identity = client_id;
    o.policy = server_policy;
    o.handshake_timeout_ms = handshake_ms;
    o.io_timeout_ms = 30000;
    o.no_session_resumption = 1;
    mtls_conn *c = NULL;
    int rc = mtls_conn_connect("127.0.0.1", port, &o, &c);
    if (rc != MTLS_OK) {
        fprintf(stderr, "client: %s: %s\n", mtls_error_name(rc), mtls_last_error());
        return rc;
    }
    size_t n = 0;
    uint8_t buf[8];
    rc = mtls_conn_write(c, (const uint8_t *)"ping", 4, &n);
    if (rc == MTLS_OK) rc = mtls_conn_read(c, buf, sizeof buf, &n);
    if (rc == MTLS_OK && (n != 4 || memcmp(buf, "ping", 4) != 0)) rc = MTLS_E_IO;
    mtls_conn_free(c);
    return rc;
}

static void *client_thread(void *arg) {
    (void)arg;
    if (one_client(60000) != MTLS_OK) atomic_fetch_add(&failures, 1);
    return NULL;
}

/* The listener's threads, by the name it gives them (a sanitizer's runtime has threads of its own). */
static int listener_threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(name, sizeof name, f) && (strncmp(name, "mtls-listener", 13) == 0 || strncmp(name, "mtls-handshakes", 15) == 0)) n++;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* What the tests share, made once in main: the identities and policies, the listener and its
 * serving thread, and the stalled client of the first test, which the last one checks. */
static mtls_identity *server_id;
static mtls_policy *client_policy;
static mtls_listener *l = NULL;
static pthread_t srv;
static int staller = -1;

TEST(stalled_client_does_not_hold_up_the_next) {
    /* ---- a stalled client does not hold up the next one */
    staller = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(staller, (struct sockaddr *)&sa, sizeof sa) == 0);
    t_wait_accepted(port); /* the listener has picked it up and is waiting for its ClientHello */
    CHECK_OK(one_client(5000));
}

TEST(concurrent_clients_memory_flat) {
    /* ---- 64 concurrent clients, ROUNDS rounds */
    long rss_after_warmup = 0;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_t th[CLIENTS];
        for (int i = 0; i < CLIENTS; i++) CHECK(pthread_create(&th[i], NULL, client_thread, NULL) == 0);
        for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
        if (round == 1) rss_after_warmup = rss_kb();
    }
    long rss_end = rss_kb();
    printf("load: %d clients x %d rounds, %d accepted, %d failures, RSS %ld kB after round 2, %ld kB at the end\n",
           CLIENTS, ROUNDS, atomic_load(&accepted), atomic_load(&failures), rss_after_warmup, rss_end);
    CHECK(atomic_load(&failures) == 0);
    CHECK(atomic_load(&accepted) == CLIENTS * ROUNDS + 1);
    /* flat: four more rounds of 64 handshakes may not grow the process by more than 16 MB
     * (not under a sanitizer: its allocator keeps freed memory and shadow state) */
    if (!getenv("MTLS_TEST_SANITIZER")) CHECK(rss_end - rss_after_warmup < 16 * 1024);
}

TEST(free_cuts_stalled_handshake_short) {
    atomic_store(&stop_server, 1);
    pthread_join(srv, NULL);
    /* the staller is still in its handshake (30 s timeout): free cuts it short and joins */
    CHECK(listener_threads() > 0);
    mtls_listener_free(l);
    CHECK(listener_threads() == 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(staller, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char byte;
    ssize_t got = read(staller, &byte, 1);
    CHECK(got == 0 || (got < 0 && errno == ECONNRESET)); /* closed by the listener, not timed out */
    close(staller);
}

int main(void) {
    make_pki("load-pki");
    server_id = identity("server", "int-a.pem");
    client_id = identity("client-a", "int-a.pem");
    server_policy = anchored("root.pem");
    client_policy = anchored("int-a.pem");

    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    lo.handshake_timeout_ms = 30000; /* far longer than the next client waits */
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    CHECK_OK(mtls_listener_port(l, &port));
    pthread_create(&srv, NULL, serve, l);

    RUN(stalled_client_does_not_hold_up_the_next);
    RUN(concurrent_clients_memory_flat);
    RUN(free_cuts_stalled_handshake_short);
    mtls_identity_free(server_id);
    mtls_identity_free(client_id);
    mtls_policy_free(server_policy);
    mtls_policy_free(client_policy);
    DONE();
}
