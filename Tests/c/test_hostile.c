/* Hostile peers through the C ABI: a client against raw servers on 127.0.0.1 that stall, reset,
 * send garbage, close mid-handshake or stream a 100 MB certificate chain, and a listener against
 * raw clients that do the same. Each must end with its own error within its timeout (never a
 * hang, a crash or MTLS_OK), and the listener must still serve a good client afterwards. */
#define _GNU_SOURCE
#include "test_support.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char pki[512];

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int listen_any(uint16_t *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t l = sizeof a;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 8) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &l) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_to(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

/* Reads what is there (the peer's hello) for up to ms milliseconds. */
static void drain(int fd, int ms) {
    uint8_t buf[4096]; struct pollfd p = { fd, POLLIN, 0 };
    while (poll(&p, 1, ms) > 0) { if (recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) break; ms = 50; }
}

enum behaviour { STALL, RESET, GARBAGE, CLOSE_MID, HUGE_CHAIN };
static const char *names[] = { "stall", "reset", "garbage", "close mid-handshake", "100 MB chain (a client: hello)" };
struct raw { int lfd; enum behaviour b; long long sent; int from_client; uint16_t port; };

static void send_all(int fd, const void *p, size_t n, long long *sent) {
    const uint8_t *b = p;
    while (n) { ssize_t w = send(fd, b, n, MSG_NOSIGNAL); if (w <= 0) return; b += w; n -= (size_t)w; *sent += w; }
}

static void behave(int fd, struct raw *r) {
    if (!r->from_client) drain(fd, 300);  /* a server reads the ClientHello first */
    switch (r->b) {
    case STALL: sleep(4); break;          /* longer than the 1.5 s timeouts: time passing is what is tested */
    case RESET: { struct linger lg = { 1, 0 }; setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg); break; }
    case GARBAGE: { uint8_t g[4096]; for (size_t i = 0; i < sizeof g; i++) g[i] = (uint8_t)(i * 131 + 7);
        send_all(fd, g, sizeof g, &r->sent); drain(fd, 500); break; }
    case CLOSE_MID: {
        /* A TLS 1.2 ServerHello / ClientHello record header promising 512 bytes, then 100 of them. */
        uint8_t h[105] = { 0x16, 0x03, 0x03, 0x02, 0x00, r->from_client ? 0x01 : 0x02, 0x00, 0x01, 0xfc, 0x03, 0x03 };
        send_all(fd, h, sizeof h, &r->sent); break; }
    case HUGE_CHAIN: {
        /* A ServerHello (TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256) then a Certificate message of
         * 0xFFFFFF bytes whose certificates add up to 100 MB of records, sent until the peer goes.
         * A client streams a ClientHello of 0xFFFFFF bytes the same way. */
        static const uint8_t sh[] = { 0x16, 0x03, 0x03, 0x00, 0x31, 0x02, 0x00, 0x00, 0x2d, 0x03, 0x03,
            1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,
            0x00, 0xc0, 0x2b, 0x00, 0x00, 0x05, 0xff, 0x01, 0x00, 0x01, 0x00 /* renegotiation_info */ };
        if (!r->from_client) send_all(fd, sh, sizeof sh, &r->sent);
        uint8_t rec[5 + 16384]; memset(rec, 0x41, sizeof rec);
        rec[0] = 0x16; rec[1] = 0x03; rec[2] = 0x03; rec[3] = 0x40; rec[4] = 0x00;
        uint8_t *m = rec + 5; m[0] = r->from_client ? 0x01 : 0x0b; m[1] = m[2] = m[3] = 0xff; m[4] = m[5] = m[6] = 0xff;
        m[7] = 0x0f; m[8] = 0xff; m[9] = 0xfa; /* first certificate: ~1 MB */
        long long before = r->sent;
        send_all(fd, rec, sizeof rec, &r->sent);
        memset(m, 0x41, 10);
        while (r->sent < 100LL * 1024 * 1024 && r->sent > before) {
            long long s = r->sent; send_all(fd, rec, sizeof rec, &r->sent);
            if (r->sent == s) break; /* the peer closed */
        }
        break; }
    }
    close(fd);
}

static void *raw_server(void *arg) {
    struct raw *r = arg;
    int fd = accept(r->lfd, NULL, NULL);
    if (fd >= 0) behave(fd, r);
    return NULL;
}

static void *raw_client(void *arg) {
    struct raw *r = arg;
    behave(connect_to(r->port), r);
    return NULL;
}

struct good { uint16_t port; mtls_identity *id; mtls_policy *policy; int rc; };
static void *good_client(void *arg) {
    struct good *g = arg;
    mtls_conn_options o; mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION);
    o.verify_as = "server.test"; o.identity = g->id; o.policy = g->policy; o.handshake_timeout_ms = 10000;
    mtls_conn *c = NULL;
    g->rc = mtls_conn_connect("127.0.0.1", g->port, &o, &c);
    mtls_conn_free(c);
    return NULL;
}

static mtls_identity *identity(const char *chain, const char *key) {
    char p1[1024], p2[1024]; size_t n1, n2;
    snprintf(p1, sizeof p1, "%s/%s", pki, chain); snprintf(p2, sizeof p2, "%s/%s", pki, key);
    char *c = (char *)t_read_file(p1, &n1), *k = (char *)t_read_file(p2, &n2);
    c[n1] = 0; k[n2] = 0;
    mtls_identity *id = NULL;
    CHECK_OK(mtls_identity_from_pem(c, k, NULL, &id));
    free(c); free(k);
    return id;
}

static mtls_policy *anchored_root(void) {
    char path[1024]; mtls_cert **certs = NULL; size_t n = 0; mtls_policy *p = NULL;
    snprintf(path, sizeof path, "%s/root.pem", pki);
    CHECK_OK(mtls_cert_list_load(path, &certs, &n));
    CHECK_OK(mtls_policy_new(&p));
    CHECK_OK(mtls_policy_add_anchor(p, certs[0]));
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));
    mtls_cert_list_free(certs, n);
    return p;
}

/* What the tests share, made once in main: the client and server identities and the policy; the
 * listener made by listener_against_hostile_clients, which still_serving_a_good_client uses. */
static mtls_identity *client, *server;
static mtls_policy *policy;
static mtls_listener *l = NULL;
static uint16_t port;

TEST(client_against_hostile_servers) {
    /* ---- a client against hostile servers */
    for (int b = STALL; b <= HUGE_CHAIN; b++) {
        struct raw r = { .b = (enum behaviour)b };
        r.lfd = listen_any(&r.port);
        pthread_t t; CHECK(pthread_create(&t, NULL, raw_server, &r) == 0);
        mtls_conn_options o; mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION);
        o.verify_as = "server.test"; o.identity = client; o.policy = policy;
        o.handshake_timeout_ms = 1500; o.io_timeout_ms = 1500; o.no_session_resumption = 1;
        mtls_conn *c = NULL;
        double t0 = now();
        int rc = mtls_conn_connect("127.0.0.1", r.port, &o, &c);
        double took = now() - t0;
        printf("client vs server that %s: %s (%s) in %.2f s\n", names[b], mtls_error_name(rc), mtls_last_error(), took);
        CHECK(rc != MTLS_OK && c == NULL);
        CHECK(took < 1.5 + 2.0);
        if (b == STALL) CHECK_RC(rc, MTLS_E_TIMEOUT);
        else CHECK(rc == MTLS_E_HANDSHAKE || rc == MTLS_E_CLOSED || rc == MTLS_E_PEER_ALERT || rc == MTLS_E_CONNECT);
        CHECK(strlen(mtls_last_error()) > 0);
        pthread_join(t, NULL);
        if (b == HUGE_CHAIN) { printf("  the server got %lld bytes out before the client hung up\n", r.sent); CHECK(r.sent < 100LL * 1024 * 1024); }
        close(r.lfd);
    }
}

TEST(listener_against_hostile_clients) {
    /* ---- a listener against hostile clients, then a good client */
    mtls_listener_options lo; mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION);
    lo.identity = server; lo.client_policy = policy; lo.handshake_timeout_ms = 1500; lo.io_timeout_ms = 1500;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    CHECK_OK(mtls_listener_port(l, &port));
    for (int b = STALL; b <= HUGE_CHAIN; b++) {
        struct raw r = { .b = (enum behaviour)b, .from_client = 1, .port = port };
        pthread_t t; CHECK(pthread_create(&t, NULL, raw_client, &r) == 0);
        mtls_conn *c = NULL;
        double t0 = now();
        /* A client that sends nothing takes no handshake slot: it is closed when its first-byte
         * time (here the 1.5 s handshake timeout, the shorter) is over, or as soon as it resets,
         * and reported to no one, so accept only times out. */
        int silent = b == STALL || b == RESET;
        int rc = mtls_listener_accept(l, b == STALL ? 2500 : b == RESET ? 1000 : 5000, &c);
        double took = now() - t0;
        printf("listener vs client that %s: %s (%s) in %.2f s\n", names[b], mtls_error_name(rc), mtls_last_error(), took);
        CHECK(rc != MTLS_OK && c == NULL);
        CHECK(took < 1.5 + 2.0);
        if (silent) { CHECK_RC(rc, MTLS_E_TIMEOUT); CHECK(strstr(mtls_last_error(), "accept timed out") != NULL); }
        else CHECK(rc == MTLS_E_HANDSHAKE || rc == MTLS_E_CLOSED || rc == MTLS_E_PEER_ALERT);
        pthread_join(t, NULL);
        /* The listener drains a rejected client for up to 0.5 s (so its alert is read, not reset
         * away): on loopback that may swallow the whole 100 MB; the bound is the time above. */
        if (b == HUGE_CHAIN) printf("  the client got %lld bytes out before the listener hung up\n", r.sent);
    }
}

TEST(still_serving_a_good_client) {
    /* Still serving: a good client (from another thread: the listener handshakes inside accept). */
    struct good g = { port, client, policy, -1 };
    pthread_t t; CHECK(pthread_create(&t, NULL, good_client, &g) == 0);
    mtls_conn *sc = NULL;
    CHECK_OK(mtls_listener_accept(l, 10000, &sc));
    mtls_conn_free(sc);
    pthread_join(t, NULL);
    CHECK_OK(g.rc);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[2048];
    snprintf(pki, sizeof pki, "%s/hostile-pki", tmp);
    snprintf(cmd, sizeof cmd, "scripts/test-pki.sh %s >/dev/null", pki);
    t_sh(cmd);
    client = identity("client-a-chain.pem", "client-a.key");
    server = identity("server-chain.pem", "server.key");
    policy = anchored_root();

    RUN(client_against_hostile_servers);
    RUN(listener_against_hostile_clients);
    RUN(still_serving_a_good_client);
    mtls_listener_free(l);
    mtls_policy_free(policy); mtls_identity_free(client); mtls_identity_free(server);
    DONE();
}
