/* Instructions per handshake, for callgrind: one side of the handshake runs in this process for a
 * fixed COUNT of handshakes, the other side runs in another process (not measured). Run each
 * measured side twice under `valgrind --tool=callgrind` with two counts; the difference of the
 * totals divided by the difference of the counts is the cost of one handshake, without start-up
 * (bench/callgrind.sh does this). Same settings as bench_tls.c: mutual TLS, the raw OpenSSL
 * client presents CERT + INTERMEDIATE, verifies server.test against ROOT, writes one byte, reads
 * one byte (the TLS 1.3 ticket arrives with it), closes.
 *
 *   bench_callgrind rawserver  PORT COUNT SERVER_CHAIN SERVER_KEY ROOT     raw OpenSSL C server
 *   bench_callgrind mtlsserver PORT COUNT SERVER_CHAIN SERVER_KEY ROOT 12|13  libmtls listener
 *   bench_callgrind rawclient  PORT COUNT 12|13 full|resumed CERT KEY INTERMEDIATE ROOT
 *   bench_callgrind mtlsclient PORT COUNT 12|13 full|resumed CERT KEY INTERMEDIATE ROOT
 *
 * The servers serve COUNT connections and exit; the clients make COUNT handshakes (plus one
 * uncounted first full handshake when resuming, which the other COUNT gets too) and exit. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <mtls.h>

static void die(const char *what) {
    fprintf(stderr, "bench_callgrind: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

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

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    /* A server that prints "ready" before it listens (older libmtls builds): a few tries. */
    for (int tries = 0; connect(fd, (struct sockaddr *)&sa, sizeof sa); tries++) {
        if (tries == 50) die("connect");
        usleep(100000);
    }
    return fd;
}

static int raw_server(int port, long count, const char *chain, const char *key, const char *client_ca) {
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
    printf("ready\n");
    fflush(stdout);
    for (long i = 0; i < count; i++) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) { i--; continue; }
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
    SSL_CTX_free(ctx);
    return 0;
}

static int mtls_server(int port, long count, const char *chain, const char *key, const char *root, int version) {
    mtls_identity *id = NULL;
    if (mtls_identity_from_pem(slurp(chain), slurp(key), NULL, &id) != MTLS_OK) die(mtls_last_error());
    mtls_cert **anchors = NULL; size_t n = 0;
    if (mtls_cert_list_load(root, &anchors, &n) != MTLS_OK) die(mtls_last_error());
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
    if (mtls_listener_new("127.0.0.1", (uint16_t)port, &lo, &l) != MTLS_OK) die(mtls_last_error());
    printf("ready\n");
    fflush(stdout);
    for (long i = 0; i < count; i++) {
        mtls_conn *c = NULL;
        if (mtls_listener_accept(l, -1, &c) != MTLS_OK) { i--; continue; }
        uint8_t b; size_t k;
        if (mtls_conn_read(c, &b, 1, &k) == MTLS_OK && k == 1) mtls_conn_write(c, (const uint8_t *)"y", 1, &k);
        mtls_conn_shutdown(c);
        mtls_conn_free(c);
    }
    mtls_listener_free(l);
    mtls_policy_free(p);
    mtls_identity_free(id);
    return 0;
}

static int raw_client(int port, long count, int version, int resume, const char *cert, const char *key,
                      const char *inter, const char *root) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
    if (SSL_CTX_use_certificate_file(ctx, cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) die("raw identity");
    FILE *f = fopen(inter, "r");
    if (!f) die(inter);
    X509 *ic = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    SSL_CTX_add1_chain_cert(ctx, ic);
    X509_free(ic);
    if (SSL_CTX_load_verify_locations(ctx, root, NULL) != 1) die("raw root");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
    SSL_SESSION *session = NULL;
    long reused = 0;
    for (long i = 0; i < count + (resume ? 1 : 0); i++) {
        int fd = tcp_connect(port);
        SSL *ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        SSL_set_tlsext_host_name(ssl, "server.test");
        SSL_set1_host(ssl, "server.test");
        if (resume && session) SSL_set_session(ssl, session);
        char b;
        if (SSL_connect(ssl) != 1 || SSL_write(ssl, "x", 1) != 1 || SSL_read(ssl, &b, 1) != 1) die("raw handshake");
        if (i > 0) reused += SSL_session_reused(ssl);
        if (resume) { /* the newest ticket */
            SSL_SESSION *s = SSL_get1_session(ssl);
            if (s) { SSL_SESSION_free(session); session = s; }
        }
        SSL_shutdown(ssl);
        SSL_free(ssl);
        close(fd);
    }
    if (resume && reused < count) { fprintf(stderr, "bench_callgrind: %ld of %ld resumed\n", reused, count); return 1; }
    if (!resume && reused) { fprintf(stderr, "bench_callgrind: full handshakes resumed\n"); return 1; }
    SSL_SESSION_free(session);
    SSL_CTX_free(ctx);
    return 0;
}

static int mtls_client(int port, long count, int version, int resume, const char *cert, const char *key,
                       const char *inter, const char *root) {
    static char pem[131072];
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
    mtls_conn_options mo;
    mtls_conn_options_init(&mo, MTLS_CONN_OPTIONS_VERSION);
    mo.min_tls = mo.max_tls = version == 12 ? MTLS_TLS_1_2 : MTLS_TLS_1_3;
    mo.identity = id;
    mo.policy = p;
    mo.verify_as = "server.test";
    mo.sni = "server.test";
    mo.no_session_resumption = !resume;
    long reused = 0;
    for (long i = 0; i < count + (resume ? 1 : 0); i++) {
        mtls_conn *c = NULL;
        if (mtls_conn_connect("127.0.0.1", (uint16_t)port, &mo, &c) != MTLS_OK) die(mtls_last_error());
        uint8_t b; size_t k;
        if (mtls_conn_write(c, (const uint8_t *)"x", 1, &k) != MTLS_OK || mtls_conn_read(c, &b, 1, &k) != MTLS_OK || k != 1)
            die(mtls_last_error());
        int r = 0;
        mtls_conn_resumed(c, &r);
        if (i > 0) reused += r;
        mtls_conn_free(c);
    }
    if (resume && reused < count) { fprintf(stderr, "bench_callgrind: %ld of %ld resumed\n", reused, count); return 1; }
    if (!resume && reused) { fprintf(stderr, "bench_callgrind: full handshakes resumed\n"); return 1; }
    mtls_policy_free(p);
    mtls_identity_free(id);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc == 7 && strcmp(argv[1], "rawserver") == 0)
        return raw_server(atoi(argv[2]), atol(argv[3]), argv[4], argv[5], argv[6]);
    if (argc == 8 && strcmp(argv[1], "mtlsserver") == 0)
        return mtls_server(atoi(argv[2]), atol(argv[3]), argv[4], argv[5], argv[6], atoi(argv[7]));
    if (argc == 10 && (strcmp(argv[1], "rawclient") == 0 || strcmp(argv[1], "mtlsclient") == 0)) {
        int resume = strcmp(argv[5], "resumed") == 0;
        return (argv[1][0] == 'r' ? raw_client : mtls_client)(atoi(argv[2]), atol(argv[3]), atoi(argv[4]), resume,
                                                              argv[6], argv[7], argv[8], argv[9]);
    }
    fprintf(stderr, "usage: see the comment at the top of bench/c/bench_callgrind.c\n");
    return 2;
}
