#define _POSIX_C_SOURCE 200809L
/* The C side of bench_python.py's "evaluation from Python vs from C" row: the same evaluation
 * Python's Policy.evaluate makes (a policy trusting only ROOT, the chain LEAF + INTERMEDIATE as
 * mtls_cert handles, host HOST, reading the verdict), N times through mtls_evaluate, cached and
 * uncached. Prints two
 * numbers: nanoseconds per call cached, then uncached (medians of 5 runs).
 * Usage: bench_python_eval ROOT.pem LEAF.pem INTERMEDIATE.pem HOST N */
#include <mtls.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_support.h"

static mtls_cert *load(const char *path) {
    mtls_cert **list = NULL;
    size_t n = 0;
    if (mtls_cert_list_load(path, &list, &n) != MTLS_OK || n == 0) {
        fprintf(stderr, "cannot load %s: %s\n", path, mtls_last_error());
        exit(2);
    }
    mtls_cert *c = mtls_cert_ref(list[0]);
    mtls_cert_list_free(list, n);
    return c;
}

static double per_call_ns(mtls_policy *policy, mtls_cert *const *chain, const char *host, long n) {
    double runs[5];
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        for (long i = 0; i < n; i++) {
            mtls_trust_result *res = NULL;
            if (mtls_evaluate(policy, chain, 2, host, MTLS_PURPOSE_SERVER, 0, &res) != MTLS_OK) {
                fprintf(stderr, "evaluate: %s\n", mtls_last_error());
                exit(2);
            }
            int trusted = 0;
            if (mtls_trust_result_trusted(res, &trusted) != MTLS_OK || !trusted) {
                fprintf(stderr, "not trusted\n");
                exit(2);
            }
            mtls_trust_result_free(res);
        }
        runs[r] = (bench_now() - t0) / (double)n * 1e9;
    }
    qsort(runs, 5, sizeof runs[0], bench_cmp_double);
    return runs[2];
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: bench_python_eval ROOT LEAF INTERMEDIATE HOST N\n");
        return 2;
    }
    mtls_cert *root = load(argv[1]);
    mtls_cert *chain[2] = {load(argv[2]), load(argv[3])};
    long n = atol(argv[5]);
    mtls_policy *policy = NULL;
    if (mtls_policy_new(&policy) != MTLS_OK || mtls_policy_add_anchor(policy, root) != MTLS_OK ||
        mtls_policy_set_anchors_only(policy, 1) != MTLS_OK) {
        fprintf(stderr, "policy: %s\n", mtls_last_error());
        return 2;
    }
    double cached = per_call_ns(policy, chain, argv[4], n);
    mtls_policy_set_cache(policy, 0);
    double uncached = per_call_ns(policy, chain, argv[4], n / 10 > 0 ? n / 10 : 1);
    printf("%.1f %.1f\n", cached, uncached);
    mtls_policy_free(policy);
    mtls_cert_free(chain[0]);
    mtls_cert_free(chain[1]);
    mtls_cert_free(root);
    return 0;
}
