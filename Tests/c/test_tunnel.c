/* The C entry points of the tunnel (issue 39): mtls_conn_forward between an accepted connection
 * and a plain socket (half-close passed through both ways, byte counts), mtls_conn_proxy_header
 * (PROXY v2 with the client's CN), mtls_address_is_local (the plaintext rule) and their bad
 * arguments. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
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

TEST(forward_and_proxy_header) {
    mtls_identity *server_id = identity("server", "int-a.pem"), *client_a = identity("client-a", "int-a.pem");
    mtls_policy *server_policy = anchored("root.pem"), *client_policy = anchored("int-a.pem");
    mtls_listener_options lo;
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = server_id;
    lo.client_policy = client_policy;
    mtls_listener *l = NULL;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    uint16_t port = 0;
    CHECK_OK(mtls_listener_port(l, &port));
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    struct side s = { .listener = l, .fd = pair[0] };
    pthread_t st, pt;
    pthread_create(&st, NULL, serve, &s);
    pthread_create(&pt, NULL, program, &pair[1]);

    mtls_conn_options o;
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.verify_as = "server.test";
    o.identity = client_a;
    o.policy = server_policy;
    o.io_timeout_ms = 10000;
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
    mtls_listener_free(l);
    mtls_identity_free(server_id);
    mtls_identity_free(client_a);
    mtls_policy_free(server_policy);
    mtls_policy_free(client_policy);
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
    DONE();
}
