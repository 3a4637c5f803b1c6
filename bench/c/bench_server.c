/* Server throughput under 64 concurrent mutual-TLS clients (bench/bench_server.py).
 *   bench_server serve PORT CHAIN KEY CLIENT_CA THREADS TICKETS
 *       a libmtls server: mtls_listener, THREADS threads accepting; each client gets one
 *       "HTTP/1.1 200" answer to its request and is closed (as the nginx it is compared with);
 *       TICKETS "on" issues session tickets (the listener's default), "off" none.
 *   bench_server load PORT CERT KEY CA CLIENTS SECONDS
 *       the load: CLIENTS threads of raw OpenSSL clients, each a loop of full TLS 1.3 handshakes
 *       with a client certificate, one GET, the answer read; prints completed requests/s. */
#define _GNU_SOURCE
#include "bench_support.h"
#define BENCH_PROG "bench_server"
#include "bench_tls_support.h"
#include <arpa/inet.h>
#include <mtls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f); b[n] = 0;
    return b;
}

static void *serve_thread(void *arg) {
    mtls_listener *l = arg;
    for (;;) {
        mtls_conn *c = NULL;
        if (mtls_listener_accept(l, -1, &c) != MTLS_OK) continue;
        bench_mtls_answer(c, RESPONSE);
        mtls_conn_free(c);
    }
    return NULL;
}

static int serve(int argc, char **argv) {
    if (argc != 8) return 2;
    char *chain = slurp(argv[3]), *key = slurp(argv[4]);
    mtls_identity *id = NULL;
    mtls_cert **cas = NULL; size_t n = 0;
    mtls_policy *p = NULL;
    if (mtls_identity_from_pem(chain, key, NULL, &id) || mtls_cert_list_load(argv[5], &cas, &n) || mtls_policy_new(&p) ||
        mtls_policy_add_anchor(p, cas[0]) || mtls_policy_set_anchors_only(p, 1)) {
        fprintf(stderr, "serve setup: %s\n", mtls_last_error());
        return 1;
    }
    mtls_listener_options o;
    mtls_listener_options_init(&o, MTLS_LISTENER_OPTIONS_VERSION);
    o.identity = id;
    o.client_policy = p;
    o.min_tls = MTLS_TLS_1_3;
    o.no_session_tickets = strcmp(argv[7], "on") != 0;
    mtls_listener *l = NULL;
    if (mtls_listener_new("127.0.0.1", (uint16_t)atoi(argv[2]), &o, &l)) {
        fprintf(stderr, "listen: %s\n", mtls_last_error());
        return 1;
    }
    int threads = atoi(argv[6]);
    for (int i = 1; i < threads; i++) { pthread_t t; pthread_create(&t, NULL, serve_thread, l); }
    serve_thread(l);
    return 0;
}

static SSL_CTX *client_ctx;
static int load_port;
static double load_end;
static atomic_long done, failed;

static void *load_thread(void *arg) {
    (void)arg;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)load_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (bench_now() < load_end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        SSL *ssl = NULL;
        int ok = 0;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && (ssl = SSL_new(client_ctx))) {
            SSL_set_fd(ssl, fd);
            SSL_set_tlsext_host_name(ssl, "localhost");
            static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
            char buf[512];
            int got = 0, r;
            if (SSL_connect(ssl) == 1 && SSL_write(ssl, req, sizeof req - 1) > 0) {
                while ((r = SSL_read(ssl, buf + got, (int)sizeof buf - 1 - got)) > 0) got += r;
                buf[got] = 0;
                ok = strstr(buf, " 200 ") != NULL;
            }
        }
        if (ssl) SSL_free(ssl);
        close(fd);
        ERR_clear_error();
        if (bench_now() >= load_end) break;
        atomic_fetch_add(ok ? &done : &failed, 1);
    }
    return NULL;
}

static int load(int argc, char **argv) {
    if (argc != 8) return 2;
    client_ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(client_ctx, TLS1_3_VERSION);
    SSL_CTX_set_session_cache_mode(client_ctx, SSL_SESS_CACHE_OFF);
    if (SSL_CTX_use_certificate_chain_file(client_ctx, argv[3]) != 1 ||
        SSL_CTX_use_PrivateKey_file(client_ctx, argv[4], SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_load_verify_locations(client_ctx, argv[5], NULL) != 1) {
        fprintf(stderr, "load setup failed\n");
        return 1;
    }
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, NULL);
    load_port = atoi(argv[2]);
    int clients = atoi(argv[6]);
    double secs = atof(argv[7]), start = bench_now();
    load_end = start + secs;
    pthread_t *t = calloc((size_t)clients, sizeof *t);
    for (int i = 0; i < clients; i++) pthread_create(&t[i], NULL, load_thread, NULL);
    for (int i = 0; i < clients; i++) pthread_join(t[i], NULL);
    printf("%.1f %ld\n", atomic_load(&done) / (bench_now() - start), atomic_load(&failed));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "serve") == 0) return serve(argc, argv);
    if (argc > 1 && strcmp(argv[1], "load") == 0) return load(argc, argv);
    fprintf(stderr, "usage: bench_server serve|load ...\n");
    return 2;
}
