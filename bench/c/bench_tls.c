/* Mutual-TLS handshakes per second: libmtls's client against a raw OpenSSL C client, in the
 * same process, against the same raw OpenSSL C server; and libmtls's listener against that raw
 * server, each in its own process, with the same raw OpenSSL C client.
 *
 *   bench_tls server PORT CERT_CHAIN KEY CLIENT_CA         serve until killed
 *   bench_tls mtlsserver PORT 12|13 CERT_CHAIN KEY ROOT     a libmtls listener, served until killed
 *   bench_tls client PORT 12|13 full|resumed CERT KEY INTERMEDIATE ROOT SECONDS
 *   bench_tls serverside RAW_PORT MTLS_PORT 12|13 full|resumed CERT KEY INTERMEDIATE ROOT SECONDS
 *
 * mtlsserver: a libmtls listener (server identity CERT_CHAIN/KEY, clients judged against ROOT,
 * session tickets on, TLS 1.VERSION only) that serves each connection as `server` does: a process
 * of its own, as the raw server is (issue 40: the listener used to run inside the client's
 * process, the raw server outside it).
 *
 * serverside: the server's side of the handshake. The same raw OpenSSL C client
 * (CERT/KEY/INTERMEDIATE) alternates between the raw server on RAW_PORT and the libmtls listener
 * on MTLS_PORT, each with its own session.
 *
 * Each handshake: connect, present the client certificate, verify the server (anchor ROOT, name
 * server.test), write one byte, read one byte (the TLS 1.3 ticket arrives with it), close. The
 * two sides alternate in blocks of BLOCK handshakes, each handshake timed on its own; each
 * one's rate and the ratio are printed. Blocks, not single handshakes: both sides still see the
 * same machine over the run, and each runs as a client or server does, one handshake after the
 * other, rather than after the other side's every time (which evicts each one's code and data
 * from the caches before each handshake and wakes its idle thread: a cost of the alternation
 * that falls on the larger program, measured in bench/REPORT.md). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define BENCH_PROG "bench_tls"
#include "bench_support.h"
#include "bench_tls_support.h"

/* Handshakes in a row on one side before the other side's (see the top). */
#define BLOCK 20

static int server(int port, const char *chain, const char *key, const char *client_ca) {
    signal(SIGPIPE, SIG_IGN);
    bench_raw_server_run(port, chain, key, client_ca);
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

/* ---- libmtls listener (mtlsserver) */
static int mtls_server(int port, int version, const char *chain, const char *key, const char *root) {
    signal(SIGPIPE, SIG_IGN);
    mtls_identity *id = NULL;
    mtls_policy *p = NULL;
    mtls_listener *l = bench_mtls_listener(port, chain, key, root, version, &id, &p);
    for (;;) bench_mtls_serve(l);
    return 0;
}

/* ---- the server's side (serverside) */
static int serverside(char **argv) {
    int raw_port = atoi(argv[2]), mtls_port = atoi(argv[3]), version = atoi(argv[4]), resume = strcmp(argv[5], "resumed") == 0;
    double seconds = atof(argv[10]);
    raw_ctx = bench_raw_client_ctx(version, argv[6], argv[7], argv[8], argv[9]);
    SSL_SESSION *raw_s = NULL, *mtls_s = NULL;
    long raw_r = 0, mtls_r = 0;
    for (int i = 0; i < 20; i++) {
        raw_handshake_with(raw_port, resume, &raw_s, &raw_r);
        bench_raw_handshake(raw_ctx, mtls_port, 50, resume, &mtls_s); /* the listener may still be starting */
    }
    double t_raw = 0, t_mtls = 0, start = bench_now();
    long total = 0; raw_r = 0; mtls_r = 0;
    while (bench_now() - start < seconds) {
        for (int i = 0; i < BLOCK; i++) {
            double t0 = bench_now();
            raw_handshake_with(raw_port, resume, &raw_s, &raw_r);
            t_raw += bench_now() - t0;
        }
        for (int i = 0; i < BLOCK; i++) {
            double t0 = bench_now();
            raw_handshake_with(mtls_port, resume, &mtls_s, &mtls_r);
            t_mtls += bench_now() - t0;
        }
        total += BLOCK;
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
    if (argc == 11 && strcmp(argv[1], "serverside") == 0) { signal(SIGPIPE, SIG_IGN); return serverside(argv); }
    if (argc == 7 && strcmp(argv[1], "mtlsserver") == 0) return mtls_server(atoi(argv[2]), atoi(argv[3]), argv[4], argv[5], argv[6]);
    if (argc != 10 || strcmp(argv[1], "client") != 0) {
        fprintf(stderr, "usage: see the comment at the top of bench/c/bench_tls.c\n");
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
    /* Handshakes alternate in blocks of BLOCK (see the top), each timed on its own, so both
     * clients see the same machine load; the rate is handshakes over the summed time. */
    double t_raw = 0, t_mtls = 0, start = bench_now();
    long total_mtls = 0, total_raw = 0; resumed = 0; raw_reused = 0;
    while (bench_now() - start < seconds) {
        for (int i = 0; i < BLOCK; i++) {
            double t0 = bench_now();
            raw_handshake(port, resume);
            t_raw += bench_now() - t0;
        }
        for (int i = 0; i < BLOCK; i++) {
            double t0 = bench_now();
            resumed += bench_mtls_handshake(&mo, port);
            t_mtls += bench_now() - t0;
        }
        total_raw += BLOCK; total_mtls += BLOCK;
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
