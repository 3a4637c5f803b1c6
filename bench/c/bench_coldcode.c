/* What code run cold costs a client, per handshake (issue 40, the client's resumed rows): the raw
 * OpenSSL C client of bench_tls, against the raw server, with and without calling LINES small
 * functions before each handshake, functions laid out as a library's are, 7 per 4 KiB page at
 * random 64-byte lines of a 10 MiB text (bench/coldcode.sh generates them: cold_table). A
 * library on top of OpenSSL runs code of its own per connection; this says what that code costs
 * when the caches no longer hold it, whatever it does, on this machine.
 *
 *   bench_coldcode PORT 12|13 CERT KEY INTERMEDIATE ROOT N LINES...
 *
 * For each LINES: N resumed handshakes each way, in alternating blocks of 20 (as bench_tls), and
 * the same LINES calls made back to back (hot). Prints the means, the difference and the ratio. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define BENCH_PROG "bench_coldcode"
#include "bench_support.h"
#include "bench_tls_support.h"

extern void *cold_table[];
extern const long cold_count;

/* Calls the first N functions of cold_table (each adds 1 to its argument register and returns). */
static void touch(long n) {
    for (long i = 0; i < n; i++) {
        long r;
        /* Below the red zone: the call pushes a return address. */
        __asm__ volatile("sub $128, %%rsp\n\txor %%eax, %%eax\n\tcall *%1\n\tadd $128, %%rsp"
                         : "=&a"(r) : "r"(cold_table[i]) : "memory", "cc");
    }
}

static double mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s / n;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: see the comment at the top of bench/c/bench_coldcode.c\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int port = atoi(argv[1]), version = atoi(argv[2]), n = atoi(argv[7]);
    SSL_CTX *ctx = bench_raw_client_ctx(version, argv[3], argv[4], argv[5], argv[6]);
    SSL_SESSION *session = NULL;
    for (int i = 0; i < 50; i++) bench_raw_handshake(ctx, port, 0, 1, &session);
    double *t[2] = {calloc(n, sizeof(double)), calloc(n, sizeof(double))};
    for (int a = 8; a < argc; a++) {
        long lines = atol(argv[a]);
        if (lines < 0 || lines > cold_count) { fprintf(stderr, "bench_coldcode: 0 to %ld lines\n", cold_count); return 2; }
        long reused = 0;
        for (int i0 = 0; i0 < n; i0 += 20)
            for (int k = 0; k < 2; k++)
                for (int i = i0; i < i0 + 20 && i < n; i++) {
                    double t0 = bench_now();
                    if (k) touch(lines);
                    reused += bench_raw_handshake(ctx, port, 0, 1, &session);
                    t[k][i] = bench_now() - t0;
                }
        if (reused < 2L * n * 9 / 10) { fprintf(stderr, "bench_coldcode: %ld of %d resumed\n", reused, 2 * n); return 1; }
        double plain = mean(t[0], n), cold = mean(t[1], n);
        double h0 = bench_now();
        for (int j = 0; j < 1000; j++) touch(lines);
        double hot = (bench_now() - h0) / 1000;
        printf("TLS 1.%d resumed, %5ld lines: raw %7.1f us, raw + lines %7.1f us: +%5.1f us (%.3fx); the lines hot: %5.2f us\n",
               version - 10, lines, plain * 1e6, cold * 1e6, (cold - plain) * 1e6, cold / plain, hot * 1e6);
    }
    SSL_SESSION_free(session);
    SSL_CTX_free(ctx);
    return 0;
}
