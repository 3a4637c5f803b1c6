/* What the handshake benchmarks (bench_tls.c, bench_callgrind.c) share: the raw OpenSSL C server
 * and client with the settings both measure (mutual TLS, client CERT + INTERMEDIATE, server name
 * server.test, one byte each way, then close), the libmtls client options and listener with the
 * same settings, and one handshake of each. Header-only like bench_support.h, so each program
 * still builds from its one .c file; the two programs differ only in their loops (timed for a
 * number of seconds vs. a fixed count under callgrind).
 *
 * Define BENCH_PROG (the program's name, for error messages) before including this header; the
 * including file defines _GNU_SOURCE (usleep). */
#ifndef MTLS_BENCH_TLS_SUPPORT_H
#define MTLS_BENCH_TLS_SUPPORT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <mtls.h>

#ifndef BENCH_PROG
#error "define BENCH_PROG before including bench_tls_support.h"
#endif

/* Prints WHAT and OpenSSL's error queue, exits 1. */
static inline void bench_die(const char *what) {
    fprintf(stderr, BENCH_PROG ": %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* The file at PATH as a NUL-terminated string (up to 64 KiB), in one of three rotating static
 * buffers: valid until the third call after. */
static inline char *bench_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) bench_die(path);
    static char buf[3][65536];
    static int i;
    char *b = buf[i++ % 3];
    size_t n = fread(b, 1, sizeof buf[0] - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* A TCP connection to 127.0.0.1:PORT with TCP_NODELAY, or -1 with errno saying why (a refused
 * connection is ECONNREFUSED). */
static inline int bench_tcp_try_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* bench_tcp_try_connect with RETRIES more tries 0.1 s apart (for a server that prints "ready"
 * before it listens), then dies. */
static inline int bench_tcp_connect(int port, int retries) {
    for (int tries = 0;; tries++) {
        int fd = bench_tcp_try_connect(port);
        if (fd >= 0) return fd;
        if (tries >= retries) bench_die("connect");
        usleep(100000);
    }
}

/* A listening socket on 127.0.0.1:PORT. */
static inline int bench_tcp_listen(int port) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 128)) bench_die("listen");
    return ls;
}

/* ---- raw OpenSSL C server */

/* The raw server's context: identity CHAIN/KEY, client certificates required and verified
 * against CLIENT_CA, a session id context so that TLS 1.2 sessions resume. */
static inline SSL_CTX *bench_raw_server_ctx(const char *chain, const char *key, const char *client_ca) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, chain) != 1 || SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        bench_die("server identity");
    if (SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1) bench_die("client CA");
    SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(client_ca));
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"bench", 5);
    return ctx;
}

/* Called, when set, in each raw server exchange: after the accept (BENCH_AT_ACCEPTED: before
 * the handshake), after the handshake (BENCH_AT_SERVER_HANDSHAKEN: before reading the request)
 * and after the answer (BENCH_AT_ANSWERED: before close_notify); bench_spin waits there. */
enum { BENCH_AT_ACCEPTED = 1, BENCH_AT_SERVER_HANDSHAKEN, BENCH_AT_ANSWERED };
static void (*bench_raw_serve_pause)(int where);

/* Serves one accepted connection FD: handshake, read one byte, answer one, close FD. Failures
 * (a client that gave up) are dropped. */
static inline void bench_raw_serve(SSL_CTX *ctx, int fd) {
    if (bench_raw_serve_pause) bench_raw_serve_pause(BENCH_AT_ACCEPTED);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    char b;
    int handshaken = SSL_accept(ssl) == 1;
    if (handshaken && bench_raw_serve_pause) bench_raw_serve_pause(BENCH_AT_SERVER_HANDSHAKEN);
    if (handshaken && SSL_read(ssl, &b, 1) == 1) {
        SSL_write(ssl, "y", 1);
        if (bench_raw_serve_pause) bench_raw_serve_pause(BENCH_AT_ANSWERED);
        SSL_shutdown(ssl);
    }
    ERR_clear_error();
    SSL_free(ssl);
    close(fd);
}

/* The raw OpenSSL C server on 127.0.0.1:PORT (identity CHAIN/KEY, clients verified against
 * CLIENT_CA): serves each client as bench_raw_serve does, until killed. */
__attribute__((noreturn)) static inline void bench_raw_server_run(int port, const char *chain, const char *key,
                                                                 const char *client_ca) {
    SSL_CTX *ctx = bench_raw_server_ctx(chain, key, client_ca);
    int ls = bench_tcp_listen(port);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd >= 0) bench_raw_serve(ctx, fd);
    }
}

/* ---- raw OpenSSL C client */

/* The raw client's context: TLS 1.VERSION only, identity CERT/KEY sent with INTER, the server
 * verified against ROOT, a client session cache. */
static inline SSL_CTX *bench_raw_client_ctx(int version, const char *cert, const char *key, const char *inter,
                                            const char *root) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
    /* BENCH_RAW_SUITES=libmtls: the suites libmtls's contexts offer, in their order (AES-128-GCM
     * first, no PSK or SRP suites: TLSContext.ownSuites), instead of OpenSSL's default; for
     * bench_tls.py's informational rows, which compare the same suites. */
    const char *suites = getenv("BENCH_RAW_SUITES");
    if (suites && strcmp(suites, "libmtls") == 0 &&
        (SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") != 1 ||
         SSL_CTX_set_cipher_list(ctx, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:"
                                      "ECDHE-RSA-AES256-GCM-SHA384:DHE-RSA-AES128-GCM-SHA256:ALL:!COMPLEMENTOFDEFAULT:!eNULL:!PSK:!SRP") != 1))
        bench_die("raw client suites");
    if (SSL_CTX_use_certificate_file(ctx, cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) bench_die("raw identity");
    FILE *f = fopen(inter, "r");
    if (!f) bench_die(inter);
    X509 *ic = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    SSL_CTX_add1_chain_cert(ctx, ic);
    X509_free(ic);
    if (SSL_CTX_load_verify_locations(ctx, root, NULL) != 1) bench_die("raw root");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
    return ctx;
}

/* What bench_raw_exchange saw: whether the session was resumed, the SHA-256 of the DER of the
 * certificate the server presented (the session's, when resumed; only when asked for, so that
 * the benchmarks' raw client does no work the libmtls client does not), the bytes answered; on failure
 * the step that failed, SSL_get_error's code, errno and OpenSSL's first error as text. */
typedef struct {
    int reused, has_peer, ssl_error, sys_errno;
    const char *step;
    size_t got;
    unsigned char peer_sha256[32];
    char error[256];
} bench_raw_result;

/* Called, when set, in each raw exchange after the SSL object is ready on the connected socket
 * (BENCH_AT_CONNECTED: before the ClientHello) and after a handshake that succeeded
 * (BENCH_AT_HANDSHAKEN: before the request); bench_spin waits there. */
enum { BENCH_AT_CONNECTED = 1, BENCH_AT_HANDSHAKEN };
static void (*bench_raw_pause)(int where);

/* One raw client exchange on the connected socket FD, which it closes: handshake (server.test
 * verified), write REQUEST (REQUEST_LEN bytes), then read into ANSWER (ANSWER_SIZE bytes) WANT
 * bytes, or with WANT 0 until the server closes (its close_notify; a connection cut without one
 * fails). OFFER: the session in *SESSION is offered; KEEP (or NULL): receives the newest session
 * (as libmtls's cache keeps it); PEER_SHA256: R gets the server certificate's SHA-256. Returns 1
 * when it all went through, else 0 (R says why). */
static inline int bench_raw_exchange(SSL_CTX *ctx, int fd, int offer, SSL_SESSION **session, SSL_SESSION **keep,
                                     const char *request, size_t request_len, char *answer, size_t answer_size,
                                     size_t want, int peer_sha256, bench_raw_result *r) {
    memset(r, 0, sizeof *r);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, "server.test");
    SSL_set1_host(ssl, "server.test");
    if (offer && *session) SSL_set_session(ssl, *session);
    if (bench_raw_pause) bench_raw_pause(BENCH_AT_CONNECTED);
    int rc;
    errno = 0;
    r->step = "handshake";
    if ((rc = SSL_connect(ssl)) == 1) {
        if (bench_raw_pause) bench_raw_pause(BENCH_AT_HANDSHAKEN);
        r->reused = SSL_session_reused(ssl);
        X509 *peer = peer_sha256 ? SSL_get0_peer_certificate(ssl) : NULL;
        unsigned int n = 0;
        r->has_peer = peer && X509_digest(peer, EVP_sha256(), r->peer_sha256, &n) == 1;
        r->step = "write";
        if ((rc = SSL_write(ssl, request, (int)request_len)) == (int)request_len) {
            r->step = "read";
            while (r->got < (want ? want : answer_size) && (rc = SSL_read(ssl, answer + r->got, (int)((want ? want : answer_size) - r->got))) > 0)
                r->got += (size_t)rc;
            if (want ? r->got == want : SSL_get_error(ssl, rc) == SSL_ERROR_ZERO_RETURN) r->step = NULL;
        }
    }
    if (r->step) {
        r->sys_errno = errno;
        r->ssl_error = SSL_get_error(ssl, rc);
        unsigned long e = ERR_peek_error();
        if (e) ERR_error_string_n(e, r->error, sizeof r->error);
        else snprintf(r->error, sizeof r->error, "%s", r->got >= answer_size ? "answer too long" : "no OpenSSL error");
        ERR_clear_error();
    } else if (keep) {
        SSL_SESSION *s = SSL_get1_session(ssl);
        if (s) { SSL_SESSION_free(*keep); *keep = s; }
    }
    if (!r->step) SSL_shutdown(ssl);
    SSL_free(ssl);
    close(fd);
    return r->step == NULL;
}

/* One raw handshake to 127.0.0.1:PORT (connect RETRIES as bench_tcp_connect): verify server.test,
 * write one byte, read one, close. When RESUME, offers *SESSION and keeps the newest ticket in
 * it (as libmtls's cache does). Returns 1 when the session was resumed, else 0; dies on failure. */
static inline int bench_raw_handshake(SSL_CTX *ctx, int port, int retries, int resume, SSL_SESSION **session) {
    char b;
    bench_raw_result r;
    if (!bench_raw_exchange(ctx, bench_tcp_connect(port, retries), resume, session, resume ? session : NULL, "x", 1,
                            &b, 1, 1, 0, &r)) {
        fprintf(stderr, BENCH_PROG ": raw handshake: %s failed: %s (errno %d)\n", r.step, r.error, r.sys_errno);
        exit(1);
    }
    return r.reused;
}

/* ---- libmtls */

/* A policy trusting the first certificate of ROOT only (the caller frees it). */
static inline mtls_policy *bench_anchor_policy(const char *root) {
    mtls_cert **anchors = NULL; size_t n = 0;
    if (mtls_cert_list_load(root, &anchors, &n) != MTLS_OK) bench_die(mtls_last_error());
    mtls_policy *p = NULL;
    mtls_policy_new(&p);
    mtls_policy_add_anchor(p, anchors[0]);
    mtls_policy_set_anchors_only(p, 1);
    mtls_cert_list_free(anchors, n);
    return p;
}

/* Fills *MO for the libmtls client with the raw client's settings (TLS 1.VERSION, identity
 * CERT + INTER / KEY, server.test verified against ROOT). The identity and policy it sets are the
 * caller's to free. */
static inline void bench_mtls_client_options(mtls_conn_options *mo, int version, const char *cert, const char *key,
                                             const char *inter, const char *root) {
    static char pem[131072];
    snprintf(pem, sizeof pem, "%s%s", bench_slurp(cert), bench_slurp(inter));
    mtls_identity *id = NULL;
    if (mtls_identity_from_pem(pem, bench_slurp(key), NULL, &id) != MTLS_OK) bench_die(mtls_last_error());
    mtls_policy *p = bench_anchor_policy(root);
    mtls_conn_options_init(mo, MTLS_CONN_OPTIONS_VERSION);
    mo->min_tls = mo->max_tls = version == 12 ? MTLS_TLS_1_2 : MTLS_TLS_1_3;
    mo->identity = id;
    mo->policy = p;
    mo->verify_as = "server.test";
    mo->sni = "server.test";
}

/* One libmtls client handshake to 127.0.0.1:PORT with *MO: write one byte, read one, close.
 * Returns 1 when the session was resumed, else 0; dies on failure. */
static inline int bench_mtls_handshake(const mtls_conn_options *mo, int port) {
    mtls_conn *c = NULL;
    if (mtls_conn_connect("127.0.0.1", (uint16_t)port, mo, &c) != MTLS_OK) bench_die(mtls_last_error());
    uint8_t b; size_t n;
    if (mtls_conn_write(c, (const uint8_t *)"x", 1, &n) != MTLS_OK || mtls_conn_read(c, &b, 1, &n) != MTLS_OK || n != 1)
        bench_die(mtls_last_error());
    int r = 0;
    mtls_conn_resumed(c, &r);
    mtls_conn_free(c);
    return r;
}

/* A libmtls listener on 127.0.0.1:PORT (0: any) with the raw server's settings: identity
 * CHAIN/KEY, clients judged against ROOT, TLS 1.VERSION only. *ID and *POLICY receive what the
 * caller frees after the listener. */
static inline mtls_listener *bench_mtls_listener(int port, const char *chain, const char *key, const char *root,
                                                 int version, mtls_identity **id, mtls_policy **policy) {
    *id = NULL;
    if (mtls_identity_from_pem(bench_slurp(chain), bench_slurp(key), NULL, id) != MTLS_OK) bench_die(mtls_last_error());
    *policy = bench_anchor_policy(root);
    mtls_listener_options lo;
    mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION);
    lo.identity = *id;
    lo.client_policy = *policy;
    lo.min_tls = lo.max_tls = version == 12 ? MTLS_TLS_1_2 : MTLS_TLS_1_3;
    mtls_listener *l = NULL;
    if (mtls_listener_new("127.0.0.1", (uint16_t)port, &lo, &l) != MTLS_OK) bench_die(mtls_last_error());
    return l;
}

/* Reads one request on C (up to 1 KiB) and answers it with the NUL-terminated RESPONSE. */
static inline void bench_mtls_answer(mtls_conn *c, const char *response) {
    uint8_t buf[1024]; size_t n = 0;
    if (mtls_conn_read(c, buf, sizeof buf, &n) == MTLS_OK && n > 0)
        mtls_conn_write(c, (const uint8_t *)response, strlen(response), &n);
}

/* Accepts and serves one connection on L as bench_raw_serve does. Returns 0 when the accept
 * failed (nothing served), else 1. */
static inline int bench_mtls_serve(mtls_listener *l) {
    mtls_conn *c = NULL;
    if (mtls_listener_accept(l, -1, &c) != MTLS_OK) return 0;
    uint8_t b; size_t n;
    if (mtls_conn_read(c, &b, 1, &n) == MTLS_OK && n == 1) mtls_conn_write(c, (const uint8_t *)"y", 1, &n);
    mtls_conn_shutdown(c);
    mtls_conn_free(c);
    return 1;
}

#endif
