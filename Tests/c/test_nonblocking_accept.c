/* mtls_conn_set_non_blocking: an accepted (blocking) connection switched to non-blocking mode
 * returns MTLS_E_WANT_READ / MTLS_E_WANT_WRITE instead of waiting out the listener's I/O timeout,
 * keeps every byte across WANT_WRITE retries under flow control, and goes back to blocking mode;
 * a client connection switches the same way. mtls_conn_may_block tells which of them an event
 * loop may drive on its own thread. Both ends are driven here from one thread with
 * poll(), as an event loop would. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

struct acceptor { mtls_listener *listener; mtls_conn *conn; int rc; };

static void *accept_one(void *arg) {
    struct acceptor *a = arg;
    a->rc = mtls_listener_accept(a->listener, 10000, &a->conn);
    return NULL;
}

static void wait_fd(mtls_conn *c, short events) {
    int fd = -1;
    CHECK_OK(mtls_conn_fd(c, &fd));
    struct pollfd p = { .fd = fd, .events = events };
    CHECK(poll(&p, 1, 10000) == 1);
}

/* The byte at offset i of the stream the server sends. */
static uint8_t pattern(size_t i) { return (uint8_t)((i * 7u + (i >> 12)) & 0xff); }

/* What the tests share, made once in main: the listener (300 ms I/O timeout) and both ends of one
 * connection, which the tests use in order. */
static mtls_identity *server_id, *client_a;
static mtls_policy *server_policy, *client_policy;
static mtls_listener *l = NULL;
static mtls_conn *client = NULL, *server = NULL;
static uint8_t buf[65536];

TEST(accepted_socket_is_non_blocking_and_close_on_exec) {
    /* The accepted socket is non-blocking and close-on-exec from its accept (mtls.h,
     * mtls_listener_accept), whatever mode the connection is in. */
    int sfd = -1;
    CHECK_OK(mtls_conn_fd(server, &sfd));
    CHECK((fcntl(sfd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK((fcntl(sfd, F_GETFD) & FD_CLOEXEC) != 0);
}

TEST(set_non_blocking_arguments) {
    /* Arguments. */
    CHECK_RC(mtls_conn_set_non_blocking(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_set_non_blocking(server, 2), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_set_non_blocking(server, -1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_set_non_blocking((mtls_conn *)server_policy, 1), MTLS_E_INVALID_ARGUMENT); /* wrong handle type */
}

TEST(blocking_read_waits_out_io_timeout) {
    /* Blocking, as accepted: a read with nothing to read waits out the I/O timeout. */
    size_t n = 0;
    CHECK_RC(mtls_conn_read(server, buf, sizeof buf, &n), MTLS_E_TIMEOUT);
}

TEST(non_blocking_read) {
    size_t n = 0;
    /* Non-blocking: the same read says it would wait, and a message is read once it arrives. */
    CHECK_OK(mtls_conn_set_non_blocking(server, 1));
    CHECK_RC(mtls_conn_read(server, buf, sizeof buf, &n), MTLS_E_WANT_READ);
    CHECK(n == 0);
    CHECK_OK(mtls_conn_write(client, (const uint8_t *)"ping", 4, &n));
    CHECK(n == 4);
    int rc;
    while ((rc = mtls_conn_read(server, buf, sizeof buf, &n)) == MTLS_E_WANT_READ) wait_fd(server, POLLIN);
    CHECK_OK(rc);
    CHECK(n == 4 && memcmp(buf, "ping", 4) == 0);
}

TEST(flow_control_both_ways) {
    size_t n = 0;
    int rc = MTLS_OK;
    /* Flow control both ways: the server sends 8 MiB that the (now non-blocking) client reads
     * only when the server's socket is full; every WANT_WRITE is retried with the same bytes. */
    CHECK_OK(mtls_conn_set_non_blocking(client, 1));
    CHECK_RC(mtls_conn_read(client, buf, sizeof buf, &n), MTLS_E_WANT_READ);
    const size_t total = 8u << 20;
    uint8_t *out = malloc(total);
    CHECK(out != NULL);
    for (size_t i = 0; i < total; i++) out[i] = pattern(i);
    size_t sent = 0, received = 0;
    int want_write = 0, mismatches = 0;
    while (received < total) {
        if (sent < total) {
            size_t len = total - sent < 65536 ? total - sent : 65536;
            rc = mtls_conn_write(server, out + sent, len, &n);
            if (rc == MTLS_OK) sent += n;
            else { CHECK_RC(rc, MTLS_E_WANT_WRITE); want_write++; }
        }
        if (sent < total && rc == MTLS_OK) continue; /* fill the socket before the client reads */
        rc = mtls_conn_read(client, buf, sizeof buf, &n);
        if (rc == MTLS_E_WANT_READ) { wait_fd(client, POLLIN); continue; }
        CHECK_OK(rc);
        CHECK(n > 0);
        for (size_t i = 0; i < n; i++) mismatches += buf[i] != pattern(received + i);
        received += n;
    }
    CHECK(sent == total && received == total);
    CHECK(mismatches == 0);
    CHECK(want_write > 0); /* the socket did fill up: the writes would have waited */
    free(out);
}

TEST(may_block_says_which_connections_may_wait) {
    /* mtls_conn_may_block: whether a handshake step or the free may wait for more than the socket. */
    int mb = 7;
    CHECK_RC(mtls_conn_may_block(NULL, &mb), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_may_block(client, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_may_block((mtls_conn *)server_policy, &mb), MTLS_E_INVALID_ARGUMENT);
    CHECK(mb == 7);
    /* A listener's connection: 1 (its identity is not looked at), non-blocking or not. */
    CHECK_OK(mtls_conn_may_block(server, &mb));
    CHECK(mb == 1);
    /* The non-blocking client, its key in memory, under a policy without revocation: 0. */
    CHECK_OK(mtls_conn_may_block(client, &mb));
    CHECK(mb == 0);
    /* Its policy now checks revocation (a fetch may come): 1, asked again; 0 once off again. */
    CHECK_OK(mtls_policy_set_revocation(server_policy, MTLS_REVOCATION_SOFT, MTLS_REVOCATION_SOURCE_CRL));
    CHECK_OK(mtls_conn_may_block(client, &mb));
    CHECK(mb == 1);
    CHECK_OK(mtls_policy_set_revocation(server_policy, MTLS_REVOCATION_OFF, MTLS_REVOCATION_SOURCE_CRL));
    CHECK_OK(mtls_conn_may_block(client, &mb));
    CHECK(mb == 0);
    /* Blocking: 1 (each step waits for the socket). */
    CHECK_OK(mtls_conn_set_non_blocking(client, 0));
    CHECK_OK(mtls_conn_may_block(client, &mb));
    CHECK(mb == 1);
    CHECK_OK(mtls_conn_set_non_blocking(client, 1));
}

TEST(back_to_blocking) {
    size_t n = 0;
    /* Back to blocking: reads wait again (within the I/O timeout) and deliver. */
    CHECK_OK(mtls_conn_set_non_blocking(server, 0));
    CHECK_RC(mtls_conn_read(server, buf, sizeof buf, &n), MTLS_E_TIMEOUT);
    CHECK_OK(mtls_conn_write(client, (const uint8_t *)"back", 4, &n));
    CHECK(n == 4);
    CHECK_OK(mtls_conn_read(server, buf, sizeof buf, &n));
    CHECK(n == 4 && memcmp(buf, "back", 4) == 0);
}

TEST(close_notify_from_non_blocking_server) {
    size_t n = 0;
    int rc;
    /* close_notify from the non-blocking server ends the client's stream cleanly. */
    CHECK_OK(mtls_conn_set_non_blocking(server, 1));
    CHECK_OK(mtls_conn_shutdown(server));
    while ((rc = mtls_conn_read(client, buf, sizeof buf, &n)) == MTLS_E_WANT_READ) wait_fd(client, POLLIN);
    CHECK_OK(rc);
    CHECK(n == 0);
}

int main(void) {
    make_pki("nonblocking-pki");
    server_id = identity("server", "int-a.pem");
    client_a = identity("client-a", "int-a.pem");
    server_policy = anchored("root.pem");
    client_policy = anchored("int-a.pem");

    /* Accepted connections wait up to 300 ms in a read or write while blocking. */
    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    lo.io_timeout_ms = 300;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    uint16_t port = 0;
    CHECK_OK(mtls_listener_port(l, &port));
    struct acceptor acc = { .listener = l };
    pthread_t th;
    pthread_create(&th, NULL, accept_one, &acc);

    mtls_conn_options o;
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.verify_as = "server.test";
    o.identity = client_a;
    o.policy = server_policy;
    o.io_timeout_ms = 10000;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &client));
    pthread_join(th, NULL);
    CHECK_OK(acc.rc);
    server = acc.conn;

    RUN(accepted_socket_is_non_blocking_and_close_on_exec);
    RUN(set_non_blocking_arguments);
    RUN(blocking_read_waits_out_io_timeout);
    RUN(non_blocking_read);
    RUN(flow_control_both_ways);
    RUN(may_block_says_which_connections_may_wait);
    RUN(back_to_blocking);
    RUN(close_notify_from_non_blocking_server);

    mtls_conn_free(server);
    mtls_conn_free(client);
    mtls_listener_free(l);
    mtls_identity_free(server_id);
    mtls_identity_free(client_a);
    mtls_policy_free(server_policy);
    mtls_policy_free(client_policy);
    DONE();
}
