/* Listener handshakes with a fixed identity against the same listener setup whose identity
 * follows a store label (issue 26): the change check must cost nothing per handshake. One
 * process: libmtls listeners accepting on threads, a libmtls client looping full handshakes (no
 * resumption) against each in turn: a fixed listener, a second fixed one (the same-vs-same
 * control: what two identical listeners differ by here, the noise) and the store-following one,
 * measured after rotations. Prints one line (see the printf). */
#include <mtls.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OK(x) do { int rc_ = (x); if (rc_ != MTLS_OK) { fprintf(stderr, "%s: %d %s\n", #x, rc_, mtls_last_error()); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) exit(1);
    b[n] = 0; fclose(f);
    return b;
}

static volatile int stop_accepting = 0;
static void *acceptor(void *arg) {
    mtls_listener *l = arg;
    while (!stop_accepting) {
        mtls_conn *c = NULL;
        if (mtls_listener_accept(l, 200, &c) == MTLS_OK) mtls_conn_free(c);
    }
    return NULL;
}

/* Handshakes per second against `l` for `seconds`. */
static double round_rate(mtls_listener *l, mtls_conn_options *o, double seconds) {
    uint16_t port; OK(mtls_listener_port(l, &port));
    int n = 0; double start = now(), end = start + seconds;
    while (now() < end) {
        mtls_conn *c = NULL;
        OK(mtls_conn_connect("127.0.0.1", port, o, &c));
        mtls_conn_free(c);
        n++;
    }
    return n / (now() - start);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and interquartile range of v[0..n) (sorted in place). */
static void quartiles(double *v, int n, double *median, double *iqr) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *median = v[n / 2];
    *iqr = v[(3 * (n - 1) + 2) / 4] - v[(n - 1 + 2) / 4];
}

int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage: bench_rotation server.pem server.key ca.pem store.db seconds rounds\n"); return 2; }
    char *cert = slurp(argv[1]), *key = slurp(argv[2]);
    double seconds = atof(argv[5]); int rounds = atoi(argv[6]);
    if (rounds < 3) rounds = 3;
    if (rounds > 64) rounds = 64;
    mtls_identity *id = NULL; OK(mtls_identity_from_pem(cert, key, NULL, &id));
    mtls_store_options so; OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION)); so.kdf_log_n = 10;
    mtls_store *store = NULL;
    OK(mtls_store_open(argv[4], (const uint8_t *)"bench", 5, MTLS_STORE_SECRET_PASSPHRASE, &so, &store));
    OK(mtls_store_put_identity(store, "srv", id, 1));
    mtls_identity_source *src = NULL; OK(mtls_identity_source_follow_store(store, "srv", NULL, &src));

    mtls_cert **anchors = NULL; size_t na = 0; OK(mtls_cert_list_load(argv[3], &anchors, &na));
    mtls_policy *pol = NULL; OK(mtls_policy_new(&pol)); OK(mtls_policy_add_anchor(pol, anchors[0]));
    OK(mtls_policy_set_anchors_only(pol, 1));

    /* The fixed listeners present the very identity the source loaded from the store (same key
     * object, same provider): only the following differs. */
    mtls_identity *stored = NULL; OK(mtls_identity_source_current(src, &stored));
    mtls_listener_options lo; OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = stored; lo.client_auth = 0; lo.no_session_tickets = 1;
    /* fixed, its same-vs-same control (another fixed listener), and the store-following one. */
    mtls_listener *ls[3] = { NULL, NULL, NULL };
    OK(mtls_listener_new("127.0.0.1", 0, &lo, &ls[0]));
    OK(mtls_listener_new("127.0.0.1", 0, &lo, &ls[1]));
    OK(mtls_listener_new_with_source("127.0.0.1", 0, &lo, src, &ls[2]));
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, acceptor, ls[i]);

    mtls_conn_options o; OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.policy = pol; o.verify_as = "server.test"; o.no_session_resumption = 1;
    /* The followed listener is measured after rotations, not only with the identity it started
     * with: two swaps to identities loaded anew (new objects, as a store replacement gives), each
     * followed by handshakes, so it runs in the state it has after any number of rotations. */
    for (int k = 0; k < 2; k++) {
        mtls_identity *again = NULL; OK(mtls_identity_from_pem(cert, key, NULL, &again));
        OK(mtls_identity_source_set(src, again));
        mtls_identity_free(again);
        round_rate(ls[2], &o, 0.25);
    }
    for (int i = 0; i < 3; i++) round_rate(ls[i], &o, 0.5); /* warm-up */
    double rate[3] = { 0, 0, 0 }, following[64], control[64];
    /* Interleaved rounds: each round measures the three listeners back to back, in an order that
     * turns each round, so drift in the machine's load hits each alike; the ratios are per round. */
    for (int i = 0; i < rounds; i++) {
        double r[3];
        for (int j = 0; j < 3; j++) { int which = (i + j) % 3; r[which] = round_rate(ls[which], &o, seconds / rounds / 3); }
        for (int j = 0; j < 3; j++) rate[j] += r[j] / rounds;
        following[i] = r[0] / r[2];
        control[i] = r[0] / r[1];
    }
    double fm, fi, cm, ci;
    quartiles(following, rounds, &fm, &fi);
    quartiles(control, rounds, &cm, &ci);
    /* fixed/s following/s following-cost (median of per-round fixed/following) its IQR,
     * control/s control-cost (fixed/fixed) its IQR */
    printf("%.1f %.1f %.4f %.4f %.1f %.4f %.4f\n", rate[0], rate[2], fm, fi, rate[1], cm, ci);
    stop_accepting = 1;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) mtls_listener_free(ls[i]);
    mtls_identity_source_free(src); mtls_store_close(store); mtls_identity_free(stored); mtls_identity_free(id);
    mtls_cert_list_free(anchors, na); mtls_policy_free(pol);
    free(cert); free(key);
    return 0;
}
