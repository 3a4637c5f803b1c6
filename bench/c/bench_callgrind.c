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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define BENCH_PROG "bench_callgrind"
#include "bench_tls_support.h"

/* Connect tries for the clients: a server that prints "ready" before it listens (older libmtls
 * builds) gets 5 s. */
#define CONNECT_RETRIES 50

static int raw_server(int port, long count, const char *chain, const char *key, const char *client_ca) {
    SSL_CTX *ctx = bench_raw_server_ctx(chain, key, client_ca);
    int ls = bench_tcp_listen(port);
    printf("ready\n");
    fflush(stdout);
    for (long i = 0; i < count; i++) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) { i--; continue; }
        bench_raw_serve(ctx, fd);
    }
    SSL_CTX_free(ctx);
    return 0;
}

static int mtls_server(int port, long count, const char *chain, const char *key, const char *root, int version) {
    mtls_identity *id = NULL;
    mtls_policy *p = NULL;
    mtls_listener *l = bench_mtls_listener(port, chain, key, root, version, &id, &p);
    printf("ready\n");
    fflush(stdout);
    for (long i = 0; i < count; i++)
        if (!bench_mtls_serve(l)) i--;
    mtls_listener_free(l);
    mtls_policy_free(p);
    mtls_identity_free(id);
    return 0;
}

/* Checks the resumption count of COUNT handshakes: all resumed, or none. */
static int check_reused(int resume, long reused, long count) {
    if (resume && reused < count) { fprintf(stderr, "bench_callgrind: %ld of %ld resumed\n", reused, count); return 1; }
    if (!resume && reused) { fprintf(stderr, "bench_callgrind: full handshakes resumed\n"); return 1; }
    return 0;
}

static int raw_client(int port, long count, int version, int resume, const char *cert, const char *key,
                      const char *inter, const char *root) {
    SSL_CTX *ctx = bench_raw_client_ctx(version, cert, key, inter, root);
    SSL_SESSION *session = NULL;
    long reused = 0;
    for (long i = 0; i < count + (resume ? 1 : 0); i++) {
        int r = bench_raw_handshake(ctx, port, CONNECT_RETRIES, resume, &session);
        if (i > 0) reused += r;
    }
    if (check_reused(resume, reused, count)) return 1;
    SSL_SESSION_free(session);
    SSL_CTX_free(ctx);
    return 0;
}

static int mtls_client(int port, long count, int version, int resume, const char *cert, const char *key,
                       const char *inter, const char *root) {
    mtls_conn_options mo;
    bench_mtls_client_options(&mo, version, cert, key, inter, root);
    mo.no_session_resumption = !resume;
    long reused = 0;
    for (long i = 0; i < count + (resume ? 1 : 0); i++) {
        int r = bench_mtls_handshake(&mo, port);
        if (i > 0) reused += r;
    }
    if (check_reused(resume, reused, count)) return 1;
    mtls_policy_free(mo.policy);
    mtls_identity_free(mo.identity);
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
