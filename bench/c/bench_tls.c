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
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define BENCH_PROG "bench_tls"
#include "bench_support.h"
#include "bench_tls_support.h"

static int server(int port, const char *chain, const char *key, const char *client_ca) {
    signal(SIGPIPE, SIG_IGN);
    SSL_CTX *ctx = bench_raw_server_ctx(chain, key, client_ca);
    int ls = bench_tcp_listen(port);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        bench_raw_serve(ctx, fd);
    }
    return 0;
}

/* ---- raw OpenSSL client */
static SSL_CTX *raw_ctx;
static SSL_SESSION *raw_session;
static long raw_reused;

static void raw_handshake_with(int port, int resume, SSL_SESSION **session, long *reused) {
    *reused += bench_raw_handshake(raw_ctx, port, 0, resume, session);
}

static void raw_handshake(int port, int resume) { raw_handshake_with(port, resume, &raw_session, &raw_reused); }

/* ---- libmtls client */
static mtls_conn_options mo;

/* ---- libmtls listener (serverside) */
static void *listener_loop(void *arg) {
    for (;;) bench_mtls_serve(arg);
    return NULL;
}

static int serverside(char **argv) {
    int raw_port = atoi(argv[2]), version = atoi(argv[3]), resume = strcmp(argv[4], "resumed") == 0;
    double seconds = atof(argv[9]);
    raw_ctx = bench_raw_client_ctx(version, argv[5], argv[6], argv[7], argv[8]);
    mtls_identity *id = NULL;
    mtls_policy *p = NULL;
    mtls_listener *l = bench_mtls_listener(0, argv[10], argv[11], argv[8], version, &id, &p);
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
    raw_ctx = bench_raw_client_ctx(version, argv[5], argv[6], argv[7], argv[8]);
    bench_mtls_client_options(&mo, version, argv[5], argv[6], argv[7], argv[8]);
    mo.no_session_resumption = !resume;
    /* warm up both (and fill the session caches) */
    int resumed = 0;
    for (int i = 0; i < 20; i++) { raw_handshake(port, resume); resumed += bench_mtls_handshake(&mo, port); }
    /* Handshakes alternate one by one (raw, libmtls, raw, ...), each timed on its own, so both
     * clients see the same machine load; the rate is handshakes over the summed time. */
    double t_raw = 0, t_mtls = 0, start = bench_now();
    long total_mtls = 0, total_raw = 0; resumed = 0; raw_reused = 0;
    while (bench_now() - start < seconds) {
        double t0 = bench_now();
        raw_handshake(port, resume);
        double t1 = bench_now();
        resumed += bench_mtls_handshake(&mo, port);
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
