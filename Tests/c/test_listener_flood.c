/* The listener does not run out of handshake slots (issue 23, defect 7): with 1,000 TCP
 * connections from 127.0.0.1 open that never send a ClientHello, a real mutual-TLS client is
 * served within 1 s; a silent socket is closed when its first-byte time is over, without an
 * error at mtls_listener_accept; one address has at most max_handshakes_per_address clients in
 * a handshake while others are served; version 1 options still work. Bounded: every wait has a
 * timeout, and the program ends by itself. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SILENT 1000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A TCP connection to 127.0.0.1:port from `source`, non-blocking. With `wait_connected`, waits
 * (at most 5 s) until it is established, and returns -1 if it is not. */
static int tcp_from(const char *source, uint16_t port, int wait_connected) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in from = { .sin_family = AF_INET };
    inet_pton(AF_INET, source, &from.sin_addr);
    CHECK(bind(fd, (struct sockaddr *)&from, sizeof from) == 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == 0 || errno == EINPROGRESS);
    if (wait_connected && r != 0) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int err = 0; socklen_t len = sizeof err;
        if (poll(&p, 1, 5000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* The server side: accepts until told to stop, recording each result in order. */
struct server {
    mtls_listener *listener;
    int stop;
    int count;
    int codes[64];
    char cn[64][64];
    double at[64];
};

static void *serve(void *arg) {
    struct server *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) && s->count < 64) {
        mtls_conn *c = NULL;
        int rc = mtls_listener_accept(s->listener, 200, &c);
        /* No client within 200 ms (a client's own handshake timeout names the client). */
        if (rc == MTLS_E_TIMEOUT && strncmp(mtls_last_error(), "client ", 7) != 0) continue;
        int i = s->count;
        s->codes[i] = rc;
        s->cn[i][0] = 0;
        s->at[i] = now_s();
        if (rc == MTLS_OK) {
            mtls_cert **chain = NULL; size_t n = 0;
            if (mtls_conn_peer_chain(c, &chain, &n) == MTLS_OK && n > 0) {
                char *cn = NULL;
                mtls_cert_subject_summary(chain[0], &cn);
                snprintf(s->cn[i], sizeof s->cn[i], "%s", cn ? cn : "");
                mtls_string_free(cn);
            }
            mtls_cert_list_free(chain, n);
            uint8_t buf[16]; size_t got = 0, put = 0;
            if (mtls_conn_read(c, buf, sizeof buf, &got) == MTLS_OK && got > 0) mtls_conn_write(c, buf, got, &put);
            mtls_conn_shutdown(c);
        }
        mtls_conn_free(c);
        __atomic_store_n(&s->count, i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* One real client from `source`: connect, handshake, echo. Returns its code. */
static int real_client(uint16_t port, const char *source, mtls_identity *id, mtls_policy *policy, int timeout_ms) {
    mtls_conn_options o;
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.identity = id; o.policy = policy; o.verify_as = "server.test";
    o.handshake_timeout_ms = timeout_ms;
    o.io_timeout_ms = timeout_ms;
    int fd = tcp_from(source, port, 1);
    if (fd < 0) return MTLS_E_TIMEOUT;
    mtls_conn *c = NULL;
    int rc = mtls_conn_wrap_fd(fd, "127.0.0.1", port, &o, &c);
    if (rc == MTLS_OK) {
        size_t n = 0; uint8_t buf[8];
        rc = mtls_conn_write(c, (const uint8_t *)"ping", 4, &n);
        if (rc == MTLS_OK) rc = mtls_conn_read(c, buf, sizeof buf, &n);
        if (rc == MTLS_OK && !(n == 4 && memcmp(buf, "ping", 4) == 0)) rc = MTLS_E_IO;
    }
    mtls_conn_free(c);
    close(fd);
    return rc;
}

static void wait_count(struct server *s, int n, double seconds) {
    double end = now_s() + seconds;
    while (__atomic_load_n(&s->count, __ATOMIC_ACQUIRE) < n && now_s() < end) usleep(10 * 1000);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[2048];
    snprintf(pki, sizeof pki, "%s/tls-pki", tmp);
    snprintf(cmd, sizeof cmd, "scripts/test-pki.sh %s", pki);
    t_sh(cmd);

    /* Both ends of 1,000 connections live in this process. */
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < 4096) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    CHECK(rl.rlim_cur >= 2 * SILENT + 100);

    mtls_identity *server_id = identity("server", "int-a.pem");
    mtls_identity *client_a = identity("client-a", "int-a.pem");
    mtls_policy *server_policy = anchored("root.pem");
    mtls_policy *client_policy = anchored("int-a.pem");

    /* ---- options: version 2's fields' defaults, version 1 still accepted */
    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    CHECK(lo.version == MTLS_LISTENER_OPTIONS_VERSION && lo.first_byte_timeout_ms == 5000 && lo.max_handshakes_per_address == 32);
    CHECK_RC(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION + 1), MTLS_E_INVALID_ARGUMENT);
    /* A version 1 caller's struct is shorter: init writes only its part. */
    struct { mtls_listener_options v1; int guard; } old;
    old.guard = 0x5a5a5a5a;
    memset(&old.v1, 0, sizeof old.v1);
    CHECK_OK(mtls_listener_options_init(&old.v1, 1));
    CHECK(old.v1.version == 1 && old.v1.min_tls == MTLS_TLS_1_2);
    old.v1.identity = server_id;
    old.v1.client_policy = client_policy;
    mtls_listener *l1 = NULL;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &old.v1, &l1));
    mtls_listener_free(l1);

    /* ---- 1,000 silent connections, then a real client */
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    mtls_listener *listener = NULL;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    uint16_t port = 0;
    CHECK_OK(mtls_listener_port(listener, &port));
    struct server s = { .listener = listener };
    pthread_t t;
    CHECK(pthread_create(&t, NULL, serve, &s) == 0);

    static int silent[SILENT];
    for (int i = 0; i < SILENT; i++) silent[i] = tcp_from("127.0.0.1", port, 0);
    /* Every silent connection is established (the listener took them off its backlog) before
     * the real client comes: wait (bounded) until each one is writable. */
    double until = now_s() + 10;
    for (int i = 0; i < SILENT; i++) {
        struct pollfd p = { .fd = silent[i], .events = POLLOUT };
        while (poll(&p, 1, 100) == 0 && now_s() < until) {}
    }
    usleep(300 * 1000); /* let the listener accept what the kernel queued */

    double start = now_s();
    CHECK_OK(real_client(port, "127.0.0.1", client_a, server_policy, 5000));
    double served = now_s() - start;
    wait_count(&s, 1, 5);
    fprintf(stderr, "real client served in %.3f s with %d silent connections open\n", served, SILENT);
    CHECK(served < 1.0);
    CHECK(s.count >= 1 && s.codes[0] == MTLS_OK && strstr(s.cn[0], "client-a") != NULL);
    /* The silent ones are no clients: nothing was reported for them. */
    CHECK(s.count == 1);
    for (int i = 0; i < SILENT; i++) close(silent[i]);
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    mtls_listener_free(listener);

    /* ---- a silent socket is closed when its first-byte time is over, without an error */
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    lo.first_byte_timeout_ms = 300;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    CHECK_OK(mtls_listener_port(listener, &port));
    memset(&s, 0, sizeof s);
    s.listener = listener;
    CHECK(pthread_create(&t, NULL, serve, &s) == 0);
    int quiet = tcp_from("127.0.0.1", port, 1);
    CHECK(quiet >= 0);
    struct pollfd p = { .fd = quiet, .events = POLLIN };
    CHECK(poll(&p, 1, 5000) == 1); /* the server hung up */
    char b;
    CHECK(read(quiet, &b, 1) <= 0);
    close(quiet);
    CHECK_OK(real_client(port, "127.0.0.1", client_a, server_policy, 5000));
    wait_count(&s, 1, 5);
    CHECK(s.count == 1 && s.codes[0] == MTLS_OK);
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    mtls_listener_free(listener);

    /* ---- per-address cap: two clients of 127.0.0.1 that stall in their handshake hold its two
     * slots; a client of 127.0.0.2 is served meanwhile; another client of 127.0.0.1 is served
     * only after a stalled handshake ended (its timeout, 1 s). */
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    lo.max_handshakes_per_address = 2;
    lo.handshake_timeout_ms = 1000;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    CHECK_OK(mtls_listener_port(listener, &port));
    memset(&s, 0, sizeof s);
    s.listener = listener;
    CHECK(pthread_create(&t, NULL, serve, &s) == 0);
    int stalled[2];
    double stalled_at = now_s();
    for (int i = 0; i < 2; i++) {
        stalled[i] = tcp_from("127.0.0.1", port, 1);
        CHECK(stalled[i] >= 0);
        CHECK(write(stalled[i], "\x16\x03\x01", 3) == 3); /* the start of a ClientHello, no more */
    }
    usleep(200 * 1000);
    CHECK_OK(real_client(port, "127.0.0.2", client_a, server_policy, 5000));
    wait_count(&s, 1, 5);
    CHECK(s.count == 1 && s.codes[0] == MTLS_OK);
    /* ...while both stalled handshakes were still under way (their server side is open). */
    for (int i = 0; i < 2; i++) {
        struct pollfd q = { .fd = stalled[i], .events = POLLIN };
        CHECK(poll(&q, 1, 0) == 0);
    }
    /* 127.0.0.1's two slots are taken: its next client waits for one to end, which is not
     * before the stalled handshake's timeout (1 s after the stalled bytes were sent). */
    CHECK_OK(real_client(port, "127.0.0.1", client_a, server_policy, 5000));
    CHECK(now_s() - stalled_at >= 1.0);
    wait_count(&s, 4, 5);
    CHECK(s.count == 4);
    int ok = 0;
    for (int i = 1; i < 4; i++) ok += s.codes[i] == MTLS_OK;
    CHECK(ok == 1); /* the real client; the stalled two timed out */
    for (int i = 0; i < 2; i++) close(stalled[i]);
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    mtls_listener_free(listener);

    mtls_policy_free(server_policy);
    mtls_policy_free(client_policy);
    mtls_identity_free(client_a);
    mtls_identity_free(server_id);
    DONE();
}
