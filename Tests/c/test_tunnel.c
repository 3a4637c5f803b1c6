/* The C entry points of the tunnel (issue 39): mtls_conn_forward between an accepted connection
 * and a plain socket (half-close passed through both ways, byte counts), mtls_conn_proxy_header
 * (PROXY v2 with the client's CN), mtls_address_is_local (the plaintext rule), the forwarder
 * (mtls_forwarder_*: many pairs on one thread, done callbacks, free with pairs running) and their
 * bad arguments. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct side { mtls_listener *listener; int fd; int rc; uint64_t from_tls, to_tls; uint8_t *header; size_t header_len; };

static void *serve(void *arg) {
    struct side *s = arg;
    mtls_conn *c = NULL;
    s->rc = mtls_listener_accept(s->listener, 10000, &c);
    if (s->rc != MTLS_OK) return NULL;
    s->rc = mtls_conn_proxy_header(c, 0, &s->header, &s->header_len);
    if (s->rc == MTLS_OK) s->rc = mtls_conn_forward(c, s->fd, 10000, &s->from_tls, &s->to_tls);
    mtls_conn_free(c);
    return NULL;
}

/* The plaintext program: reads to the end of its input, then answers. */
static void *program(void *arg) {
    int fd = *(int *)arg;
    char got[64] = "answer:";
    size_t n = strlen(got);
    ssize_t r;
    while ((r = read(fd, got + n, sizeof got - n - 1)) > 0) n += (size_t)r;
    if (write(fd, got, n) != (ssize_t)n) t_fail();
    close(fd);
    return NULL;
}

/* A listener (server, clients of int-a) and the options of a client (client-a) for it. */
struct ends {
    mtls_identity *server_id, *client_a;
    mtls_policy *server_policy, *client_policy;
    mtls_listener *listener;
    uint16_t port;
    mtls_conn_options client_options;
};

static void open_ends(struct ends *e) {
    memset(e, 0, sizeof *e);
    e->server_id = identity("server", "int-a.pem");
    e->client_a = identity("client-a", "int-a.pem");
    e->server_policy = anchored("root.pem");
    e->client_policy = anchored("int-a.pem");
    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = e->server_id;
    lo.client_policy = e->client_policy;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &e->listener));
    CHECK_OK(mtls_listener_port(e->listener, &e->port));
    CHECK_OK(mtls_conn_options_init(&e->client_options, MTLS_CONN_OPTIONS_VERSION));
    e->client_options.verify_as = "server.test";
    e->client_options.identity = e->client_a;
    e->client_options.policy = e->server_policy;
    e->client_options.io_timeout_ms = 10000;
}

static void close_ends(struct ends *e) {
    mtls_listener_free(e->listener);
    mtls_identity_free(e->server_id);
    mtls_identity_free(e->client_a);
    mtls_policy_free(e->server_policy);
    mtls_policy_free(e->client_policy);
}

TEST(forward_and_proxy_header) {
    struct ends e;
    open_ends(&e);
    mtls_listener *l = e.listener;
    uint16_t port = e.port;
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    struct side s = { .listener = l, .fd = pair[0] };
    pthread_t st, pt;
    pthread_create(&st, NULL, serve, &s);
    pthread_create(&pt, NULL, program, &pair[1]);

    mtls_conn_options o = e.client_options;
    mtls_conn *c = NULL;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    size_t n = 0;
    CHECK_OK(mtls_conn_write(c, (const uint8_t *)"hello", 5, &n));
    CHECK_OK(mtls_conn_shutdown(c));
    char reply[64] = {0};
    size_t have = 0;
    do {
        CHECK_OK(mtls_conn_read(c, (uint8_t *)reply + have, sizeof reply - have - 1, &n));
        have += n;
    } while (n > 0);
    CHECK(strcmp(reply, "answer:hello") == 0);
    pthread_join(st, NULL);
    pthread_join(pt, NULL);
    CHECK_OK(s.rc);
    CHECK(s.from_tls == 5 && s.to_tls == 12);
    static const uint8_t sig[] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x21, 0x11 };
    CHECK(s.header_len > 28 && memcmp(s.header, sig, sizeof sig) == 0);
    CHECK(((size_t)s.header[14] << 8 | s.header[15]) == s.header_len - 16);
    CHECK(memmem(s.header, s.header_len, "\x22\x00\x08" "client-a", 11) != NULL);
    mtls_bytes_free(s.header);
    close(pair[0]);
    mtls_conn_free(c);
    close_ends(&e);
}

/* The forwarder's done callbacks, counted. */
#define PAIRS 16
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int done_count, done_status[PAIRS + 1];
static uint64_t done_from[PAIRS + 1], done_to[PAIRS + 1];

static void pair_done(void *user, int status, uint64_t from_tls, uint64_t to_tls) {
    int i = (int)(intptr_t)user;
    pthread_mutex_lock(&done_lock);
    done_status[i] = status;
    done_from[i] = from_tls;
    done_to[i] = to_tls;
    done_count++;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&done_lock);
}

/* Waits (up to 120 s: a bound for a loaded machine, not a pace) until n done callbacks were called. */
static int wait_done(int n) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120;
    pthread_mutex_lock(&done_lock);
    while (done_count < n && pthread_cond_timedwait(&done_cond, &done_lock, &until) == 0) {}
    int ok = done_count >= n;
    pthread_mutex_unlock(&done_lock);
    return ok;
}

struct adder { mtls_listener *listener; mtls_forwarder *fw; int n, first; int far[PAIRS + 1]; int rc; };

/* Accepts n connections and hands each, with one end of a socket pair, to the forwarder. */
static void *add_pairs(void *arg) {
    struct adder *a = arg;
    for (int i = 0; i < a->n; i++) {
        mtls_conn *c = NULL;
        int sp[2];
        if ((a->rc = mtls_listener_accept(a->listener, 10000, &c)) != MTLS_OK) return NULL;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) { a->rc = -1; return NULL; }
        a->far[a->first + i] = sp[1];
        if ((a->rc = mtls_forwarder_add(a->fw, c, sp[0], 120000, pair_done, (void *)(intptr_t)(a->first + i))) != MTLS_OK) return NULL;
    }
    return NULL;
}

static void read_to_end(int fd, char *buf, size_t size) {
    size_t n = 0;
    ssize_t r;
    while (n < size - 1 && (r = read(fd, buf + n, size - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
}

TEST(forwarder_many_pairs_on_one_thread) {
    struct ends e;
    open_ends(&e);
    mtls_listener *l = e.listener;
    uint16_t port = e.port;
    mtls_forwarder *fw = NULL;
    CHECK_RC(mtls_forwarder_new(65, &fw), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_forwarder_new(1, &fw));
    struct adder a = { .listener = l, .fw = fw, .n = PAIRS, .first = 0 };
    pthread_t at;
    pthread_create(&at, NULL, add_pairs, &a);
    mtls_conn_options o = e.client_options;
    mtls_conn *clients[PAIRS + 1] = {0};
    for (int i = 0; i < PAIRS; i++) CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &clients[i]));
    pthread_join(at, NULL);
    CHECK_OK(a.rc);
    int active = -1;
    CHECK_OK(mtls_forwarder_active(fw, &active));
    CHECK(active == PAIRS);
    for (int i = 0; i < PAIRS; i++) {
        size_t n = 0;
        char got[64], want[32];
        CHECK_OK(mtls_conn_write(clients[i], (const uint8_t *)"hello", 5, &n));
        CHECK_OK(mtls_conn_shutdown(clients[i]));
        read_to_end(a.far[i], got, sizeof got);  /* the close_notify became shutdown(SHUT_WR) */
        CHECK(strcmp(got, "hello") == 0);
        snprintf(want, sizeof want, "answer %d", i);
        CHECK(write(a.far[i], want, strlen(want)) == (ssize_t)strlen(want));
        shutdown(a.far[i], SHUT_WR);
        size_t have = 0;
        memset(got, 0, sizeof got);
        do {
            CHECK_OK(mtls_conn_read(clients[i], (uint8_t *)got + have, sizeof got - have - 1, &n));
            have += n;
        } while (n > 0);
        CHECK(strcmp(got, want) == 0);
    }
    CHECK(wait_done(PAIRS));
    for (int i = 0; i < PAIRS; i++) {
        CHECK_OK(done_status[i]);
        CHECK(done_from[i] == 5 && done_to[i] == (i < 10 ? 8u : 9u));
        close(a.far[i]);
        mtls_conn_free(clients[i]);
    }
    CHECK_OK(mtls_forwarder_active(fw, &active));
    CHECK(active == 0);

    /* One more pair left running: mtls_forwarder_free ends it with MTLS_E_CLOSED. */
    struct adder last = { .listener = l, .fw = fw, .n = 1, .first = PAIRS };
    pthread_create(&at, NULL, add_pairs, &last);
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &clients[PAIRS]));
    pthread_join(at, NULL);
    CHECK_OK(last.rc);
    mtls_forwarder_free(fw);
    CHECK(wait_done(PAIRS + 1));
    CHECK_RC(done_status[PAIRS], MTLS_E_CLOSED);
    char rest[8];
    read_to_end(last.far[PAIRS], rest, sizeof rest);  /* the forwarder closed its end */
    CHECK(rest[0] == 0);
    close(last.far[PAIRS]);
    mtls_conn_free(clients[PAIRS]);

    CHECK_RC(mtls_forwarder_add(NULL, NULL, 0, -1, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_forwarder_active(NULL, &active), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_forwarder_new(1, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_forwarder_free(NULL);
    close_ends(&e);
}

TEST(address_rule) {
    int local = -1;
    const char *yes[] = { "127.0.0.1:80", "[::1]:443", "localhost:5432", "unix:/run/a.sock", "/run/a.sock" };
    const char *no[] = { "10.0.0.1:80", "0.0.0.0:80", "db.internal:5432", "[2001:db8::1]:443" };
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) { CHECK_OK(mtls_address_is_local(yes[i], &local)); CHECK(local == 1); }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) { CHECK_OK(mtls_address_is_local(no[i], &local)); CHECK(local == 0); }
    CHECK_RC(mtls_address_is_local("no-port", &local), MTLS_E_INVALID_ARGUMENT);
    CHECK(local == 0);
    CHECK_RC(mtls_address_is_local(NULL, &local), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_address_is_local("127.0.0.1:1", NULL), MTLS_E_INVALID_ARGUMENT);
    uint64_t a = 7, b = 7;
    CHECK_RC(mtls_conn_forward(NULL, 0, -1, &a, &b), MTLS_E_INVALID_ARGUMENT);
    CHECK(a == 0 && b == 0);
    uint8_t *out = (uint8_t *)1;
    size_t len = 9;
    CHECK_RC(mtls_conn_proxy_header(NULL, 0, &out, &len), MTLS_E_INVALID_ARGUMENT);
    CHECK(out == NULL && len == 0);
}

int main(void) {
    make_pki("tunnel-pki");
    RUN(forward_and_proxy_header);
    RUN(address_rule);
    RUN(forwarder_many_pairs_on_one_thread);
    DONE();
}
