/* Many mutual-TLS clients against one server, counting every connection (issue 40's load proof,
 * Tests/e2e/test_listener_load.py):
 *   load_clients PORT THREADS HANDSHAKES CERT KEY INTER ROOT RECORDS
 * THREADS threads each make HANDSHAKES connections to 127.0.0.1:PORT, one after the other, with
 * the raw OpenSSL client of bench_tls_support.h: even threads TLS 1.3, odd ones TLS 1.2; every
 * fourth connection of a thread (its first included) a full handshake, the others offer the
 * thread's last session. Each presents CERT (with INTER, key KEY), verifies server.test against
 * ROOT, sends one HTTP GET and reads the whole answer, until the server's close_notify. Nothing
 * is retried: a refused connection is a failure like any other.
 *
 * Prints on stdout, at the end:
 *   handshakes OK / resumed R / failed F / refused C / reset X   (one "name count" per line)
 *   cert INDEX SHA256 COUNT    (each server certificate seen: its index in RECORDS, its DER's
 *                               SHA-256, how many connections saw it)
 * and the first few failures on stderr (the step, OpenSSL's error text, errno). RECORDS receives
 * one record per connection (native byte order): double start, double end (CLOCK_MONOTONIC
 * seconds, as Python's time.monotonic()), int32 cert index (-1: none), int32 flags (LOAD_*).
 * Exit status 0 only when every connection went through and was answered "200". */
#define _GNU_SOURCE
#define BENCH_PROG "load_clients"
#include "bench_tls_support.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

enum { LOAD_OK = 1, LOAD_RESUMED = 2, LOAD_TLS12 = 4, LOAD_REFUSED = 8, LOAD_RESET = 16 };
enum { MAX_CERTS = 256, SHOWN_FAILURES = 5, IO_TIMEOUT_SECONDS = 60 };

static const char REQUEST[] = "GET / HTTP/1.1\r\nHost: server.test\r\n\r\n";

typedef struct { double start, end; int32_t cert, flags; } record;

static int port, handshakes;
static SSL_CTX *ctx12, *ctx13;
static record *records;
static atomic_long ok, resumed, failed, refused, reset, shown;
static pthread_mutex_t certs_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char certs[MAX_CERTS][32];
static long cert_seen[MAX_CERTS];
static int ncerts;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The index of the certificate whose SHA-256 is SHA (added when new), -1 when the table is full. */
static int cert_index(const unsigned char *sha) {
    pthread_mutex_lock(&certs_lock);
    int i = 0;
    while (i < ncerts && memcmp(certs[i], sha, 32)) i++;
    if (i == ncerts && ncerts < MAX_CERTS) memcpy(certs[ncerts++], sha, 32);
    if (i < ncerts) cert_seen[i]++;
    pthread_mutex_unlock(&certs_lock);
    return i < ncerts ? i : -1;
}

/* An answer is "HTTP/1.1 200 " with a head and all of its Content-Length body. */
static int answered(const char *a, size_t n) {
    const char *body = memmem(a, n, "\r\n\r\n", 4), *len = memmem(a, n, "Content-Length: ", 16);
    return n > 13 && memcmp(a, "HTTP/1.1 200 ", 13) == 0 && body && len && len < body &&
           (size_t)atol(len + 16) == n - (size_t)(body + 4 - a);
}

static void fail(const char *what, int tls12, int connection, const char *step, const char *error, int e) {
    if (atomic_fetch_add(&shown, 1) < SHOWN_FAILURES)
        fprintf(stderr, "load_clients: TLS 1.%d connection %d: %s: %s failed: %s (errno %d: %s)\n", tls12 ? 2 : 3,
                connection, what, step, error, e, e ? strerror(e) : "none");
}

static void *client(void *arg) {
    long t = (long)arg;
    int tls12 = t % 2;
    SSL_SESSION *session = NULL;
    struct timeval io = { .tv_sec = IO_TIMEOUT_SECONDS };
    for (int j = 0; j < handshakes; j++) {
        record *rec = &records[t * handshakes + j];
        rec->cert = -1;
        rec->flags = tls12 ? LOAD_TLS12 : 0;
        rec->start = now();
        int fd = bench_tcp_try_connect(port);
        if (fd < 0) {
            int e = errno;
            rec->end = now();
            if (e == ECONNREFUSED) { rec->flags |= LOAD_REFUSED; atomic_fetch_add(&refused, 1); }
            else if (e == ECONNRESET) { rec->flags |= LOAD_RESET; atomic_fetch_add(&reset, 1); }
            else atomic_fetch_add(&failed, 1);
            fail("connect", tls12, j, "connect", "refused by the kernel or failed", e);
            continue;
        }
        /* A connection the server loses shows as a timeout, not a client that waits forever. */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &io, sizeof io);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &io, sizeof io);
        char answer[4096];
        bench_raw_result r;
        int done = bench_raw_exchange(tls12 ? ctx12 : ctx13, fd, j % 4 != 0, &session, &session, REQUEST,
                                      sizeof REQUEST - 1, answer, sizeof answer, 0, 1, &r);
        rec->end = now();
        if (r.has_peer) rec->cert = cert_index(r.peer_sha256);
        if (r.reused) rec->flags |= LOAD_RESUMED;
        if (done && answered(answer, r.got)) {
            rec->flags |= LOAD_OK;
            atomic_fetch_add(&ok, 1);
            if (r.reused) atomic_fetch_add(&resumed, 1);
        } else if (!done && (r.sys_errno == ECONNRESET || r.sys_errno == EPIPE)) {
            rec->flags |= LOAD_RESET;
            atomic_fetch_add(&reset, 1);
            fail("reset", tls12, j, r.step, r.error, r.sys_errno);
        } else {
            atomic_fetch_add(&failed, 1);
            if (done) {
                char shownAnswer[64];
                snprintf(shownAnswer, sizeof shownAnswer, "%.*s", (int)(r.got < 40 ? r.got : 40), answer);
                fail("answer", tls12, j, "answer", shownAnswer, 0);
            } else {
                fail("exchange", tls12, j, r.step, r.error, r.sys_errno);
            }
        }
    }
    SSL_SESSION_free(session);
    return NULL;
}

static SSL_CTX *client_ctx(int version, char **argv) {
    SSL_CTX *c = bench_raw_client_ctx(version, argv[4], argv[5], argv[6], argv[7]);
    /* Sessions are kept by each thread, not in the shared context (no lock shared by all). */
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    return c;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: load_clients PORT THREADS HANDSHAKES CERT KEY INTER ROOT RECORDS\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    port = atoi(argv[1]);
    int threads = atoi(argv[2]);
    handshakes = atoi(argv[3]);
    if (port <= 0 || threads <= 0 || handshakes <= 0) {
        fprintf(stderr, "load_clients: PORT, THREADS and HANDSHAKES are positive numbers\n");
        return 2;
    }
    ctx12 = client_ctx(12, argv);
    ctx13 = client_ctx(13, argv);
    records = calloc((size_t)threads * (size_t)handshakes, sizeof *records);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    if (!records || !tids) bench_die("out of memory");
    for (long t = 0; t < threads; t++)
        if (pthread_create(&tids[t], NULL, client, (void *)t)) bench_die("pthread_create");
    for (int t = 0; t < threads; t++) pthread_join(tids[t], NULL);
    FILE *f = fopen(argv[8], "wb");
    if (!f || fwrite(records, sizeof *records, (size_t)threads * (size_t)handshakes, f) != (size_t)threads * (size_t)handshakes ||
        fclose(f))
        bench_die(argv[8]);
    printf("handshakes %ld\nresumed %ld\nfailed %ld\nrefused %ld\nreset %ld\n", atomic_load(&ok), atomic_load(&resumed),
           atomic_load(&failed), atomic_load(&refused), atomic_load(&reset));
    for (int i = 0; i < ncerts; i++) {
        printf("cert %d ", i);
        for (int k = 0; k < 32; k++) printf("%02x", certs[i][k]);
        printf(" %ld\n", cert_seen[i]);
    }
    return atomic_load(&failed) + atomic_load(&refused) + atomic_load(&reset) == 0 ? 0 : 1;
}
