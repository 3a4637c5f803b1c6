/* The listener's cost per connection in the kernel and in memory (bench/bench_listener.py, issue 40).
 *   bench_listener mtls-serve CHAIN KEY ROOT [12|13]
 *       a libmtls listener (TLS 1.3 unless 12 is given, clients judged against ROOT) on an
 *       ephemeral 127.0.0.1 port, printed on the first line; each connection served as
 *       bench_tls's raw server serves it (one byte each way, close).
 *   bench_listener resume PORT N CERT KEY INTER ROOT [12|13 [resumed|full]]
 *       a raw OpenSSL client (TLS 1.3 unless 12 is given): 20 handshakes (the session is kept),
 *       prints "warm", waits for a line on stdin, then N handshakes, resumed unless "full" is
 *       given; prints how many resumed.
 *   bench_listener mtls-hold CHAIN KEY ROOT
 *       a libmtls listener as mtls-serve whose connections answer one HTTP request with
 *       "HTTP/1.1 200" (keep-alive) and are then kept open, idle, until the program ends.
 *   bench_listener hold PORT N CERT KEY INTER ROOT
 *       N mutual-TLS connections (full handshakes), each with one GET answered, then kept open:
 *       prints "held N" and waits for stdin to close before it exits. */
#define _GNU_SOURCE
#define BENCH_PROG "bench_listener"
#include "bench_tls_support.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
static const char REQUEST[] = "GET / HTTP/1.1\r\nHost: server.test\r\n\r\n";

static void raise_fd_limit(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) { r.rlim_cur = r.rlim_max; setrlimit(RLIMIT_NOFILE, &r); }
}

static mtls_listener *listen_tls(char **argv, int version) {
    mtls_identity *id = NULL;
    mtls_policy *p = NULL;
    mtls_listener *l = bench_mtls_listener(0, argv[2], argv[3], argv[4], version, &id, &p);
    uint16_t port = 0;
    mtls_listener_port(l, &port);
    printf("%u\n", port);
    fflush(stdout);
    return l;
}

static void *hold_loop(void *arg) {
    mtls_listener *l = arg;
    for (;;) {
        mtls_conn *c = NULL;
        if (mtls_listener_accept(l, -1, &c) == MTLS_OK) bench_mtls_answer(c, RESPONSE); /* kept: idle from here on */
    }
    return NULL;
}

static void *serve_loop(void *arg) {
    for (;;) bench_mtls_serve(arg);
    return NULL;
}

static int resume(char **argv, int version, int full) {
    int port = atoi(argv[2]), n = atoi(argv[3]);
    SSL_CTX *ctx = bench_raw_client_ctx(version, argv[4], argv[5], argv[6], argv[7]);
    SSL_SESSION *s = NULL;
    for (int i = 0; i < 20; i++) bench_raw_handshake(ctx, port, 20, 1, &s);
    printf("warm\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    long resumed = 0;
    for (int i = 0; i < n; i++) resumed += bench_raw_handshake(ctx, port, 0, !full, &s);
    printf("%ld\n", resumed);
    return 0;
}

static int hold(char **argv) {
    int port = atoi(argv[2]), n = atoi(argv[3]);
    raise_fd_limit();
    SSL_CTX *ctx = bench_raw_client_ctx(13, argv[4], argv[5], argv[6], argv[7]);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    for (int i = 0; i < n; i++) {
        int fd = bench_tcp_connect(port, 20);
        SSL *ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        SSL_set_tlsext_host_name(ssl, "server.test");
        SSL_set1_host(ssl, "server.test");
        if (SSL_connect(ssl) != 1 || SSL_write(ssl, REQUEST, sizeof REQUEST - 1) != (int)sizeof REQUEST - 1) bench_die("hold handshake");
        char buf[512]; int got = 0, r;
        while (got < (int)sizeof buf - 1 && (r = SSL_read(ssl, buf + got, (int)sizeof buf - 1 - got)) > 0) {
            got += r; buf[got] = 0;
            char *body = strstr(buf, "\r\n\r\n");
            if (body && strlen(body + 4) >= 2) break;
        }
        buf[got] = 0;
        if (!strstr(buf, " 200 ")) bench_die("hold: no answer");
        /* SSL and socket kept open (freed at exit) */
    }
    printf("held %d\n", n);
    fflush(stdout);
    char line[16];
    while (fgets(line, sizeof line, stdin)) {}
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "mtls-serve") == 0) {
        serve_loop(listen_tls(argv, argc == 6 ? atoi(argv[5]) : 13));
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "mtls-hold") == 0) {
        raise_fd_limit();
        mtls_listener *l = listen_tls(argv, 13);
        pthread_t t;
        pthread_create(&t, NULL, hold_loop, l);
        hold_loop(l);
        return 0;
    }
    if (argc >= 8 && argc <= 10 && strcmp(argv[1], "resume") == 0)
        return resume(argv, argc >= 9 ? atoi(argv[8]) : 13, argc == 10 && strcmp(argv[9], "full") == 0);
    if (argc == 8 && strcmp(argv[1], "hold") == 0) return hold(argv);
    fprintf(stderr, "usage: bench_listener mtls-serve|mtls-hold CHAIN KEY ROOT [12|13] | resume|hold PORT N CERT KEY INTER ROOT [12|13 [resumed|full]]\n");
    return 2;
}
