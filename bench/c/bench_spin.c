/* Where in a resumed handshake a client's own work costs it (issue 40, the client's resumed
 * rows): the raw OpenSSL C client of bench_tls, against the raw server, with a busy wait of US
 * microseconds at one of three places, compared with none, in alternating blocks of 20:
 *   before  - before the socket is made (the server waits in accept);
 *   connect - after the TCP connect, before the ClientHello (the server has accepted);
 *   after   - after the handshake, before the request (the server reads the client's Finished).
 * A busy wait touches no memory: this measures where time is on the server's clock, not what
 * code run cold costs (bench_coldcode does that).
 *
 *   bench_spin PORT 12|13 CERT KEY INTERMEDIATE ROOT N US...
 *
 * For each US: N resumed handshakes per place and N without; prints what each place added to a
 * handshake, in microseconds and as a multiple of US.
 *
 * The same on the server's side: a raw server that waits US at WHERE, and the raw client taking
 * turns (blocks of 20) between it and the same server without the wait:
 *   accepted   (1) - after the accept, before the handshake (the ClientHello may be on its way);
 *   handshaken (2) - after the handshake, before reading the request (the client waits for it);
 *   answered   (3) - after the answer, before close_notify and the close.
 *
 *   bench_spin serve PORT CHAIN KEY CLIENT_CA WHERE US
 *   bench_spin servers PORT_PLAIN PORT_WAITING 12|13 CERT KEY INTERMEDIATE ROOT N */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define BENCH_PROG "bench_spin"
#include "bench_support.h"
#include "bench_tls_support.h"

enum { NONE, BEFORE, CONNECT, AFTER, PLACES };
static int place;
static double us;

static void spin(double microseconds) {
    double end = bench_now() + microseconds * 1e-6;
    while (bench_now() < end) {
    }
}

static void pause_at(int where) {
    if ((where == BENCH_AT_CONNECTED && place == CONNECT) || (where == BENCH_AT_HANDSHAKEN && place == AFTER)) spin(us);
}

static int serve_where;
static double serve_us;

static void serve_pause(int where) {
    if (where == serve_where) spin(serve_us);
}

/* The raw client taking turns between the plain server and the waiting one. */
static int servers(char **argv) {
    int plain = atoi(argv[2]), waiting = atoi(argv[3]), version = atoi(argv[4]), n = atoi(argv[9]);
    SSL_CTX *ctx = bench_raw_client_ctx(version, argv[5], argv[6], argv[7], argv[8]);
    SSL_SESSION *sp = NULL, *sw = NULL;
    for (int i = 0; i < 100; i++) {
        bench_raw_handshake(ctx, plain, 50, 1, &sp);
        bench_raw_handshake(ctx, waiting, 50, 1, &sw);
    }
    double tp = 0, tw = 0;
    long resumed = 0;
    for (int done = 0; done < n; done += 20) {
        double t0 = bench_now();
        for (int i = 0; i < 20; i++) resumed += bench_raw_handshake(ctx, plain, 0, 1, &sp);
        double t1 = bench_now();
        for (int i = 0; i < 20; i++) resumed += bench_raw_handshake(ctx, waiting, 0, 1, &sw);
        tp += t1 - t0;
        tw += bench_now() - t1;
    }
    if (resumed < (long)n * 2 * 9 / 10) { fprintf(stderr, "bench_spin: too few resumed handshakes\n"); return 1; }
    printf("%.1f %.1f\n", tp / n * 1e6, tw / n * 1e6);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 8 && strcmp(argv[1], "serve") == 0) {
        signal(SIGPIPE, SIG_IGN);
        serve_where = atoi(argv[6]);
        serve_us = atof(argv[7]);
        bench_raw_serve_pause = serve_pause;
        bench_raw_server_run(atoi(argv[2]), argv[3], argv[4], argv[5]);
    }
    if (argc == 10 && strcmp(argv[1], "servers") == 0) { signal(SIGPIPE, SIG_IGN); return servers(argv); }
    if (argc < 9) { fprintf(stderr, "usage: see the comment at the top of bench/c/bench_spin.c\n"); return 2; }
    signal(SIGPIPE, SIG_IGN);
    int port = atoi(argv[1]), version = atoi(argv[2]), n = atoi(argv[7]);
    SSL_CTX *ctx = bench_raw_client_ctx(version, argv[3], argv[4], argv[5], argv[6]);
    SSL_SESSION *session = NULL;
    for (int i = 0; i < 100; i++) bench_raw_handshake(ctx, port, 0, 1, &session);
    bench_raw_pause = pause_at;
    for (int a = 8; a < argc; a++) {
        us = atof(argv[a]);
        double t[PLACES] = {0};
        long resumed = 0;
        for (int done = 0; done < n; done += 20)
            for (place = NONE; place < PLACES; place++)
                for (int i = 0; i < 20; i++) {
                    double t0 = bench_now();
                    if (place == BEFORE) spin(us);
                    resumed += bench_raw_handshake(ctx, port, 0, 1, &session);
                    t[place] += bench_now() - t0;
                }
        if (resumed < (long)n * PLACES * 9 / 10) { fprintf(stderr, "bench_spin: too few resumed handshakes\n"); return 1; }
        double base = t[NONE] / n * 1e6, add[PLACES];
        for (int p = BEFORE; p < PLACES; p++) add[p] = t[p] / n * 1e6 - base;
        printf("TLS 1.%d resumed, %.0f us: handshake %.1f us; spin before the socket +%.1f (%.2fx), after the connect "
               "+%.1f (%.2fx), after the handshake +%.1f (%.2fx)\n", version % 10, us, base, add[BEFORE], add[BEFORE] / us,
               add[CONNECT], add[CONNECT] / us, add[AFTER], add[AFTER] / us);
    }
    return 0;
}
