/* Mutual-TLS handshakes per second: libmtls's client against a raw OpenSSL C client, in the
 * same process, against the same raw OpenSSL C server.
 *
 *   bench_tls server PORT CERT_CHAIN KEY CLIENT_CA         serve until killed
 *   bench_tls client PORT 12|13 full|resumed CERT KEY INTERMEDIATE ROOT SECONDS
 *   bench_tls serverside RAW_PORT 12|13 full|resumed CERT KEY INTERMEDIATE ROOT SECONDS SERVER_CHAIN SERVER_KEY
 *
 * serverside: the server's side of the handshake. A libmtls listener (server identity
 * SERVER_CHAIN/SERVER_KEY, clients judged against ROOT, session tickets on) runs in this process;
 * the raw OpenSSL C server of `bench_tls server` listens on RAW_PORT. The same raw OpenSSL C
 * client (CERT/KEY/INTERMEDIATE) alternates between the two, each with its own session.
 *
 * Each handshake: connect, present the client certificate, verify the server (anchor ROOT, name
 * server.test), write one byte, read one byte (the TLS 1.3 ticket arrives with it), close. The
 * two clients alternate handshake by handshake; each one's rate and the ratio are printed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <mtls.h>
#include "bench_support.h"

static void die(const char *what) {
    fprintf(stderr, "bench_tls: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

static int server(int port, const char *chain, const char *key, const char *client_ca) {
    signal(SIGPIPE, SIG_IGN);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, chain) != 1 || SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        die("server identity");
    if (SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1) die("client CA");
    SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(client_ca));
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"bench", 5);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 128)) die("listen");
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        SSL *ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        char b;
        if (SSL_accept(ssl) == 1 && SSL_read(ssl, &b, 1) == 1) {
            SSL_write(ssl, "y", 1);
            SSL_shutdown(ssl);
        }
        ERR_clear_error();
        SSL_free(ssl);
        close(fd);
    }
    return 0;
}

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) die("connect");
    return fd;
}

/* ---- raw OpenSSL client */
static SSL_CTX *raw_ctx;
static SSL_SESSION *raw_session;
static long raw_reused;

static void raw_setup(int version, const char *cert, const char *key, const char *inter, const char *root) {
    raw_ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(raw_ctx, version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(raw_ctx, version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
    if (SSL_CTX_use_certificate_file(raw_ctx, cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(raw_ctx, key, SSL_FILETYPE_PEM) != 1) die("raw identity");
    FILE *f = fopen(inter, "r");
    X509 *ic = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    SSL_CTX_add1_chain_cert(raw_ctx, ic);
    X509_free(ic);
    if (SSL_CTX_load_verify_locations(raw_ctx, root, NULL) != 1) die("raw root");
    SSL_CTX_set_verify(raw_ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_session_cache_mode(raw_ctx, SSL_SESS_CACHE_CLIENT);
}

static void raw_handshake_with(int port, int resume, SSL_SESSION **session, long *reused) {
    int fd = tcp_connect(port);
    SSL *ssl = SSL_new(raw_ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, "server.test");
    SSL_set1_host(ssl, "server.test");
    if (resume && *session) SSL_set_session(ssl, *session);
    char b;
    if (SSL_connect(ssl) != 1 || SSL_write(ssl, "x", 1) != 1 || SSL_read(ssl, &b, 1) != 1) die("raw handshake");
    *reused += SSL_session_reused(ssl);
    if (resume) { /* the newest ticket, as libmtls's cache keeps */
        SSL_SESSION_free(*session);
        *session = SSL_get1_session(ssl);
    }
    SSL_shutdown(ssl);
    SSL_free(ssl);
    close(fd);
}

static void raw_handshake(int port, int resume) { raw_handshake_with(port, resume, &raw_session, &raw_reused); }

/* ---- libmtls client */
static mtls_conn_options mo;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    static char buf[3][65536];
    static int i;
    char *b = buf[i++ % 3];
    size_t n = fread(b, 1, sizeof buf[0] - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

static void mtls_setup(int version, const char *cert, const char *key, const char *inter, const char *root) {
    char pem[131072];
    snprintf(pem, sizeof pem, "%s%s", slurp(cert), slurp(inter));
    mtls_identity *id = NULL;
    if (mtls_identity_from_pem(pem, slurp(key), NULL, &id) != MTLS_OK) die(mtls_last_error());
    mtls_cert **anchors = NULL; size_t n = 0;
    if (mtls_cert_list_load(root, &anchors, &n) != MTLS_OK) die(mtls_last_error());
    mtls_policy *p = NULL;
    mtls_policy_new(&p);
    mtls_policy_add_anchor(p, anchors[0]);
    mtls_policy_set_anchors_only(p, 1);
    mtls_cert_list_free(anchors, n);
    mtls_conn_options_init(&mo, MTLS_CONN_OPTIONS_VERSION);
    mo.min_tls = mo.max_tls = version == 12 ? MTLS_TLS_1_2 : MTLS_TLS_1_3;
    mo.identity = id;
    mo.policy = p;
    mo.verify_as = "server.test";
    mo.sni = "server.test";
}

static void mtls_handshake(int port, int resume, int *resumed) {
    mo.no_session_resumption = !resume;
    mtls_conn *c = NULL;
    if (mtls_conn_connect("127.0.0.1", (uint16_t)port, &mo, &c) != MTLS_OK) die(mtls_last_error());
    uint8_t b; size_t n;
    if (mtls_conn_write(c, (const uint8_t *)"x", 1, &n) != MTLS_OK || mtls_conn_read(c, &b, 1, &n) != MTLS_OK || n != 1)
        die(mtls_last_error());
    int r = 0;
    mtls_conn_resumed(c, &r);
    *resumed += r;
    mtls_conn_free(c);
}

/* ---- libmtls listener (serverside) */
static void *listener_loop(void *arg) {
    mtls_listener *l = arg;
    for (;;) {
        mtls_conn *c = NULL;
        if (mtls_listener_accept(l, -1, &c) != MTLS_OK) continue;
        uint8_t b; size_t n;
        if (mtls_conn_read(c, &b, 1, &n) == MTLS_OK && n == 1) mtls_conn_write(c, (const uint8_t *)"y", 1, &n);
        mtls_conn_shutdown(c);
        mtls_conn_free(c);
    }
    return NULL;
}

static int serverside(char **argv) {
    int raw_port = atoi(argv[2]), version = atoi(argv[3]), resume = strcmp(argv[4], "resumed") == 0;
    double seconds = atof(argv[9]);
    raw_setup(version, argv[5], argv[6], argv[7], argv[8]);
    mtls_identity *id = NULL;
    if (mtls_identity_from_pem(slurp(argv[10]), slurp(argv[11]), NULL, &id) != MTLS_OK) die(mtls_last_error());
    mtls_cert **anchors = NULL; size_t n = 0;
    if (mtls_cert_list_load(argv[8], &anchors, &n) != MTLS_OK) die(mtls_last_error());
    mtls_policy *p = NULL;
    mtls_policy_new(&p);
    mtls_policy_add_anchor(p, anchors[0]);
    mtls_policy_set_anchors_only(p, 1);
    mtls_cert_list_free(anchors, n);
    mtls_listener_options lo;
    mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION);
    lo.identity = id;
    lo.client_policy = p;
    lo.min_tls = lo.max_tls = version == 12 ? MTLS_TLS_1_2 : MTLS_TLS_1_3;
    mtls_listener *l = NULL;
    if (mtls_listener_new("127.0.0.1", 0, &lo, &l) != MTLS_OK) die(mtls_last_error());
    uint16_t mtls_port = 0;
    mtls_listener_port(l, &mtls_port);
    pthread_t th;
    pthread_create(&th, NULL, listener_loop, l);
    SSL_SESSION *raw_s = NULL, *mtls_s = NULL;
    long raw_r = 0, mtls_r = 0;
    for (int i = 0; i < 20; i++) {
        raw_handshake_with(raw_port, resume, &raw_s, &raw_r);
        raw_handshake_with(mtls_port, resume, &mtls_s, &mtls_r);
    }
    double t_raw = 0, t_mtls = 0, start = bench_now();
    long total = 0; raw_r = 0; mtls_r = 0;
    while (bench_now() - start < seconds) {
        double t0 = bench_now();
        raw_handshake_with(raw_port, resume, &raw_s, &raw_r);
        double t1 = bench_now();
        raw_handshake_with(mtls_port, resume, &mtls_s, &mtls_r);
        double t2 = bench_now();
        t_raw += t1 - t0; t_mtls += t2 - t1;
        total++;
    }
    if (resume && (mtls_r < total * 9 / 10 || raw_r < total * 9 / 10)) {
        fprintf(stderr, "bench_tls: resumed %ld (libmtls listener) and %ld (raw server) of %ld\n", mtls_r, raw_r, total);
        return 1;
    }
    if (!resume && (mtls_r || raw_r)) { fprintf(stderr, "bench_tls: full handshakes resumed\n"); return 1; }
    double best_raw = total / t_raw, best_mtls = total / t_mtls;
    printf("%.0f %.0f %.3f\n", best_raw, best_mtls, best_mtls / best_raw);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "server") == 0) return server(atoi(argv[2]), argv[3], argv[4], argv[5]);
    if (argc == 12 && strcmp(argv[1], "serverside") == 0) { signal(SIGPIPE, SIG_IGN); return serverside(argv); }
    if (argc != 10 || strcmp(argv[1], "client") != 0) {
        fprintf(stderr, "usage: bench_tls server PORT CHAIN KEY CLIENT_CA | client PORT 12|13 full|resumed CERT KEY INTER ROOT SECONDS\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int port = atoi(argv[2]), version = atoi(argv[3]), resume = strcmp(argv[4], "resumed") == 0;
    double seconds = atof(argv[9]);
    raw_setup(version, argv[5], argv[6], argv[7], argv[8]);
    mtls_setup(version, argv[5], argv[6], argv[7], argv[8]);
    /* warm up both (and fill the session caches) */
    int resumed = 0;
    for (int i = 0; i < 20; i++) { raw_handshake(port, resume); mtls_handshake(port, resume, &resumed); }
    /* Handshakes alternate one by one (raw, libmtls, raw, ...), each timed on its own, so both
     * clients see the same machine load; the rate is handshakes over the summed time. */
    double t_raw = 0, t_mtls = 0, start = bench_now();
    long total_mtls = 0, total_raw = 0; resumed = 0; raw_reused = 0;
    while (bench_now() - start < seconds) {
        double t0 = bench_now();
        raw_handshake(port, resume);
        double t1 = bench_now();
        mtls_handshake(port, resume, &resumed);
        double t2 = bench_now();
        t_raw += t1 - t0; t_mtls += t2 - t1;
        total_raw++; total_mtls++;
    }
    double best_raw = total_raw / t_raw, best_mtls = total_mtls / t_mtls;
    if (resume && resumed < total_mtls * 9 / 10) {
        fprintf(stderr, "bench_tls: only %d of %ld libmtls handshakes resumed\n", resumed, total_mtls);
        return 1;
    }
    if (!resume && resumed) { fprintf(stderr, "bench_tls: full handshakes resumed\n"); return 1; }
    if (resume && raw_reused < total_raw * 9 / 10) {
        fprintf(stderr, "bench_tls: only %ld of %ld raw handshakes resumed\n", raw_reused, total_raw);
        return 1;
    }
    printf("%.0f %.0f %.3f\n", best_raw, best_mtls, best_mtls / best_raw);
    return 0;
}
