/* A peer that hangs up never kills the program: with SIGPIPE left at its default action (which
 * ends the process), writes to a peer that has gone — a TLS 1.3 server that refused our
 * certificate after our handshake ended, a client that hung up on a server — come back as
 * MTLS_E_PEER_ALERT or MTLS_E_CLOSED, for blocking, non-blocking and wrapped sockets and for
 * close_notify. The library leaves the program's SIGPIPE disposition as it found it. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

/* A server that refuses every client (they are another customer's): records the codes. */
struct refuser { mtls_listener *listener; int count; int codes[8]; };

static void *refuse(void *arg) {
    struct refuser *r = arg;
    for (int i = 0; i < r->count; i++) {
        mtls_conn *c = NULL;
        r->codes[i] = mtls_listener_accept(r->listener, 10000, &c);
        mtls_conn_free(c);
    }
    return NULL;
}

static int fd_of(mtls_conn *c) { int fd = -1; CHECK_OK(mtls_conn_fd(c, &fd)); return fd; }

/* Waits until the server has refused us and closed its socket (its alert arrives, then its
 * close: POLLRDHUP, the peer's FIN, or a reset), so that the writes below meet a socket the peer
 * has gone from. The server drains for up to 0.5 s before it closes. */
static void wait_refused(int fd) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    CHECK(poll(&p, 1, 10000) == 1);
    struct pollfd h = { .fd = fd, .events = POLLRDHUP };
    CHECK(poll(&h, 1, 10000) == 1 && (h.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
}

/* Writes until the connection fails; the failure is the server's alert or "closed". */
static void write_until_refused(mtls_conn *c, int non_blocking) {
    static uint8_t chunk[16384];
    int rc = MTLS_OK;
    for (int i = 0; i < 200 && rc == MTLS_OK; i++) {
        size_t n = 0;
        rc = mtls_conn_write(c, chunk, sizeof chunk, &n);
        if (non_blocking && (rc == MTLS_E_WANT_WRITE || rc == MTLS_E_WANT_READ)) {
            struct pollfd p = { .fd = fd_of(c), .events = POLLOUT };
            poll(&p, 1, 1000);
            rc = MTLS_OK;
        }
        if (rc == MTLS_OK) usleep(20 * 1000); /* paced writes, until one fails (at most 200) */
    }
    if (rc != MTLS_E_PEER_ALERT && rc != MTLS_E_CLOSED)
        fprintf(stderr, "write ended with %d (%s): %s\n", rc, mtls_error_name(rc), mtls_last_error());
    CHECK(rc == MTLS_E_PEER_ALERT || rc == MTLS_E_CLOSED);
    /* close_notify to a peer that is gone: no signal either */
    int s = mtls_conn_shutdown(c);
    CHECK(s == MTLS_OK || s == MTLS_E_CLOSED || s == MTLS_E_IO || s == MTLS_E_PEER_ALERT);
}

/* A server that writes to a client until the client's hang-up stops it. */
struct writer { mtls_listener *listener; int accept_code; int write_code; int shutdown_code; };

static void *write_to_client(void *arg) {
    struct writer *w = arg;
    mtls_conn *c = NULL;
    w->accept_code = mtls_listener_accept(w->listener, 10000, &c);
    if (w->accept_code != MTLS_OK) return NULL;
    static uint8_t chunk[16384];
    int rc = MTLS_OK;
    for (int i = 0; i < 500 && rc == MTLS_OK; i++) {
        size_t n = 0;
        rc = mtls_conn_write(c, chunk, sizeof chunk, &n);
        if (rc == MTLS_OK) usleep(10 * 1000); /* paced writes, until the client's hang-up stops them */
    }
    w->write_code = rc;
    w->shutdown_code = mtls_conn_shutdown(c);
    mtls_conn_free(c);
    return NULL;
}

/* What the tests share, made once in main: the identities and policies, the client options, and
 * a listener that refuses the three clients of the first three tests (they run in order; the
 * third joins it), then the listener of the fourth. */
static mtls_identity *server_id, *client_a, *client_b;
static mtls_policy *server_policy, *client_policy;
static mtls_conn_options o;
static mtls_listener_options lo;
static mtls_listener *l = NULL;
static uint16_t port = 0;
static struct refuser ref;
static pthread_t th;

TEST(blocking_client_writes_to_refusing_server) {
    mtls_conn *c = NULL;
    /* ---- blocking client writing to a server that refused it */
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    wait_refused(fd_of(c));
    write_until_refused(c, 0);
    mtls_conn_free(c);
}

TEST(non_blocking_client_writes_to_refusing_server) {
    mtls_conn *c = NULL;
    /* ---- non-blocking client */
    o.non_blocking = 1;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    int rc, rounds = 0;
    while ((rc = mtls_conn_handshake(c)) != MTLS_OK) {
        CHECK(rc == MTLS_E_WANT_READ || rc == MTLS_E_WANT_WRITE);
        struct pollfd p = { .fd = fd_of(c), .events = rc == MTLS_E_WANT_READ ? POLLIN : POLLOUT };
        poll(&p, 1, 5000);
        CHECK(++rounds < 100);
    }
    wait_refused(fd_of(c));
    write_until_refused(c, 1);
    mtls_conn_free(c);
    o.non_blocking = 0;
}

TEST(wrapped_socket_writes_to_refusing_server) {
    mtls_conn *c = NULL;
    /* ---- a socket the application owns, wrapped */
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(sock, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK_OK(mtls_conn_wrap_fd(sock, "127.0.0.1", port, &o, &c));
    wait_refused(sock);
    write_until_refused(c, 0);
    mtls_conn_free(c);
    /* the application's own write to the same socket is the application's business: the library
     * neither ignores SIGPIPE for it nor changed the disposition */
    CHECK(close(sock) == 0);

    pthread_join(th, NULL);
    for (int i = 0; i < 3; i++) CHECK_RC(ref.codes[i], MTLS_E_UNTRUSTED);
    mtls_listener_free(l);
}

TEST(server_writes_to_client_that_hung_up) {
    mtls_conn *c = NULL;
    /* ---- a server writing to a client that hung up */
    lo.client_auth = MTLS_CLIENT_AUTH_NONE;
    lo.client_policy = NULL;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    CHECK_OK(mtls_listener_port(l, &port));
    struct writer w = { .listener = l };
    pthread_create(&th, NULL, write_to_client, &w);
    o.identity = client_a;
    o.min_tls = MTLS_TLS_1_2;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(sock, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK_OK(mtls_conn_wrap_fd(sock, "127.0.0.1", port, &o, &c));
    uint8_t buf[4096]; size_t n = 0;
    CHECK_OK(mtls_conn_read(c, buf, sizeof buf, &n)); /* the server is writing */
    CHECK(n > 0);
    /* hang up with a reset: the server's next writes meet EPIPE/ECONNRESET */
    mtls_conn_free(c);
    struct linger lg = { .l_onoff = 1, .l_linger = 0 };
    setsockopt(sock, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(sock);
    pthread_join(th, NULL);
    CHECK_OK(w.accept_code);
    CHECK_RC(w.write_code, MTLS_E_CLOSED);
    CHECK(w.shutdown_code == MTLS_OK || w.shutdown_code == MTLS_E_CLOSED || w.shutdown_code == MTLS_E_IO);
    mtls_listener_free(l);
}

TEST(sigpipe_disposition_left_alone) {
    /* the library left the program's SIGPIPE disposition alone */
    struct sigaction now;
    CHECK(sigaction(SIGPIPE, NULL, &now) == 0);
    CHECK(now.sa_handler == SIG_DFL);
}

int main(void) {
    make_pki("tls-pki");

    /* SIGPIPE's default action ends the process: any write that raised it would kill this test. */
    signal(SIGPIPE, SIG_DFL);

    server_id = identity("server", "int-a.pem");
    client_a = identity("client-a", "int-a.pem");
    client_b = identity("client-b", "int-b.pem");
    server_policy = anchored("root.pem");
    client_policy = anchored("int-a.pem");

    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.verify_as = "server.test";
    o.identity = client_b; /* another customer's client: the server refuses it */
    o.policy = server_policy;
    o.min_tls = MTLS_TLS_1_3; /* the server judges us after our handshake is done */
    o.handshake_timeout_ms = 10000;
    o.io_timeout_ms = 10000;

    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    lo.client_auth = MTLS_CLIENT_AUTH_REQUIRE;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    CHECK_OK(mtls_listener_port(l, &port));
    ref.listener = l;
    ref.count = 3;
    pthread_create(&th, NULL, refuse, &ref);

    RUN(blocking_client_writes_to_refusing_server);
    RUN(non_blocking_client_writes_to_refusing_server);
    RUN(wrapped_socket_writes_to_refusing_server);
    RUN(server_writes_to_client_that_hung_up);
    RUN(sigpipe_disposition_left_alone);

    mtls_conn_cache_clear();
    mtls_policy_free(server_policy);
    mtls_policy_free(client_policy);
    mtls_identity_free(server_id);
    mtls_identity_free(client_a);
    mtls_identity_free(client_b);
    DONE();
}
