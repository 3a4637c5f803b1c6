/* The TLS client against a fuzzed server byte stream: the input is everything "the server"
 * sends, written into one end of a socketpair (then shut for writing) while the client runs its
 * handshake on the other end through mtls_conn_wrap_fd, with the fuzz/data identity and a
 * policy trusting fuzz/data/ca.pem. Whatever the client writes is drained and discarded.
 * Seeds are server flights recorded from a real OpenSSL server (record_server.py). */
#include "fuzz.h"
#include <sys/socket.h>

static mtls_identity *identity;
static mtls_policy *policy;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!identity) {
        char *chain = (char *)fz_file("server.pem", NULL), *key = (char *)fz_file("server.key", NULL);
        if (mtls_identity_from_pem(chain, key, NULL, &identity) != MTLS_OK) abort();
        free(chain);
        free(key);
        policy = fz_fixed_policy();
    }
    if (size > 1 << 20) return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    int big = 4 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(sv[1], data + off, size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w <= 0) break; /* the rest would not fit: the client sees a truncated stream */
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);
    mtls_conn_options o;
    mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION);
    o.identity = identity;
    o.policy = policy;
    o.no_session_resumption = 1;
    o.handshake_timeout_ms = 2000;
    o.io_timeout_ms = 2000;
    mtls_conn *c = NULL;
    if (mtls_conn_wrap_fd(sv[0], "localhost", 443, &o, &c) == MTLS_OK) {
        uint8_t buf[512];
        size_t n = 0;
        (void)mtls_conn_read(c, buf, sizeof buf, &n);
    }
    mtls_conn_free(c);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
