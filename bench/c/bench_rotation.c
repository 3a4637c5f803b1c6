/* Listener handshakes with a fixed identity against the same listener setup whose identity
 * follows a store label (issue 26): the change check must cost nothing per handshake. One
 * process: a libmtls listener accepting on a thread, a libmtls client looping full handshakes
 * (no resumption), rounds alternating fixed / following. Prints "fixed_per_s following_per_s
 * ratio" (ratio: the median over rounds of fixed / following, the cost of following). */
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

int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage: bench_rotation server.pem server.key ca.pem store.db seconds rounds\n"); return 2; }
    char *cert = slurp(argv[1]), *key = slurp(argv[2]);
    double seconds = atof(argv[5]); int rounds = atoi(argv[6]);
    mtls_identity *id = NULL; OK(mtls_identity_from_pem(cert, key, NULL, &id));
    mtls_store_options so; OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION)); so.kdf_log_n = 10;
    mtls_store *store = NULL;
    OK(mtls_store_open(argv[4], (const uint8_t *)"bench", 5, MTLS_STORE_SECRET_PASSPHRASE, &so, &store));
    OK(mtls_store_put_identity(store, "srv", id, 1));
    mtls_identity_source *src = NULL; OK(mtls_identity_source_follow_store(store, "srv", NULL, &src));

    mtls_cert **anchors = NULL; size_t na = 0; OK(mtls_cert_list_load(argv[3], &anchors, &na));
    mtls_policy *pol = NULL; OK(mtls_policy_new(&pol)); OK(mtls_policy_add_anchor(pol, anchors[0]));
    OK(mtls_policy_set_anchors_only(pol, 1));

    /* The fixed listener presents the very identity the source loaded from the store (same key
     * object, same provider): only the following differs. */
    mtls_identity *stored = NULL; OK(mtls_identity_source_current(src, &stored));
    mtls_listener_options lo; OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = stored; lo.client_auth = 0; lo.no_session_tickets = 1;
    mtls_listener *fixed = NULL, *following = NULL;
    OK(mtls_listener_new("127.0.0.1", 0, &lo, &fixed));
    /* BENCH_SAME=1: both listeners fixed, a control that shows the noise between two identical ones. */
    if (getenv("BENCH_SAME")) OK(mtls_listener_new("127.0.0.1", 0, &lo, &following)); else OK(mtls_listener_new_with_source("127.0.0.1", 0, &lo, src, &following));
    pthread_t t1, t2;
    pthread_create(&t1, NULL, acceptor, fixed);
    pthread_create(&t2, NULL, acceptor, following);

    mtls_conn_options o; OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.policy = pol; o.verify_as = "server.test"; o.no_session_resumption = 1;
    round_rate(fixed, &o, 0.5); round_rate(following, &o, 0.5); /* warm-up */
    double f = 0, s = 0;
    /* Alternating rounds, the order swapped each time; the median of the per-round ratios. */
    double ratios[64]; if (rounds > 64) rounds = 64;
    for (int i = 0; i < rounds; i++) {
        double a, b;
        if (i % 2) { b = round_rate(following, &o, seconds / rounds / 2); a = round_rate(fixed, &o, seconds / rounds / 2); }
        else { a = round_rate(fixed, &o, seconds / rounds / 2); b = round_rate(following, &o, seconds / rounds / 2); }
        f += a; s += b; ratios[i] = a / b;
    }
    f /= rounds; s /= rounds;
    for (int i = 0; i < rounds; i++) for (int j = i + 1; j < rounds; j++) if (ratios[j] < ratios[i]) { double t = ratios[i]; ratios[i] = ratios[j]; ratios[j] = t; }
    printf("%.1f %.1f %.4f\n", f, s, ratios[rounds / 2]);
    stop_accepting = 1;
    pthread_join(t1, NULL); pthread_join(t2, NULL);
    mtls_listener_free(fixed); mtls_listener_free(following);
    mtls_identity_source_free(src); mtls_store_close(store); mtls_identity_free(stored); mtls_identity_free(id);
    return 0;
}
