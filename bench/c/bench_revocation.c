/* Revocation cost (issue 28): trust evaluation of a client chain (leaf + intermediate, root
 * anchor) with hard CRL checking and a warm CRL cache (both CRLs fetched once from the HTTP server
 * the script runs, then in memory), against the same evaluation without revocation, in the same
 * process; cached (the policy's evaluation cache, as handshakes use it) and uncached. Also the
 * first evaluation with a cold revocation cache (two fetches), informational.
 * Usage: bench_revocation SERVE_DIR BASE_URL. Prints one line per measurement. */
#include <mtls.h>
#include <stdio.h>
#include <string.h>

#include "bench_support.h"

#define ROUNDS 9

static const uint8_t *ders[2];
static size_t lens[2];

static int eval(mtls_policy *p) {
    mtls_trust_result *r = NULL;
    int t = 0;
    if (mtls_evaluate_der(p, ders, lens, 2, NULL, MTLS_PURPOSE_CLIENT, 0, &r) != MTLS_OK) return 0;
    mtls_trust_result_trusted(r, &t);
    mtls_trust_result_free(r);
    return t;
}

/* Seconds per evaluation over n evaluations. */
static double per_eval(mtls_policy *p, int n) {
    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
        if (!eval(p)) { fprintf(stderr, "evaluation not trusted\n"); exit(1); }
    }
    return (bench_now() - t0) / n;
}

static void write_crl(const char *dir, const char *name, const mtls_issued *ca) {
    uint8_t *der = NULL; size_t len = 0;
    char path[4096];
    if (mtls_pki_crl(ca, NULL, 0, 1, 7, 0, &der, &len) != MTLS_OK) { fprintf(stderr, "crl: %s\n", mtls_last_error()); exit(1); }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(der, 1, len, f) != len) { perror(path); exit(1); }
    fclose(f);
    mtls_bytes_free(der);
}

/* Median ratio (with's time over without's) and median times, over ROUNDS alternating rounds. */
static void measure(const char *label, mtls_policy *without, mtls_policy *with, int n) {
    double ratios[ROUNDS], a[ROUNDS], b[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        a[r] = per_eval(without, n);
        b[r] = per_eval(with, n);
        ratios[r] = b[r] / a[r];
    }
    double sorted[ROUNDS];
    memcpy(sorted, ratios, sizeof sorted);
    qsort(sorted, ROUNDS, sizeof(double), bench_cmp_double);
    qsort(a, ROUNDS, sizeof(double), bench_cmp_double);
    qsort(b, ROUNDS, sizeof(double), bench_cmp_double);
    printf("%s: without revocation %.3f us | hard CRL, warm cache %.3f us | ratio %.4f iqr %.4f\n", label,
           a[ROUNDS / 2] * 1e6, b[ROUNDS / 2] * 1e6, sorted[ROUNDS / 2], sorted[(3 * ROUNDS) / 4] - sorted[ROUNDS / 4]);
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: bench_revocation SERVE_DIR BASE_URL\n"); return 2; }
    char url[1024];
    mtls_issued *root = NULL, *inter = NULL, *leaf = NULL;
    mtls_issue_options o;
    mtls_issue_options_init(&o, MTLS_ISSUE_OPTIONS_VERSION);
    if (mtls_pki_root("Bench Rev Root", NULL, &root) != MTLS_OK) return 1;
    snprintf(url, sizeof url, "%s/root.crl", argv[2]);
    o.crl_url = url;
    if (mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "Bench Rev CA", &o, &inter) != MTLS_OK) return 1;
    char url2[1024];
    snprintf(url2, sizeof url2, "%s/ca.crl", argv[2]);
    o.crl_url = url2;
    if (mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "bench-client", &o, &leaf) != MTLS_OK) return 1;
    write_crl(argv[1], "root.crl", root);
    write_crl(argv[1], "ca.crl", inter);

    mtls_cert *lc = NULL, *ic = NULL, *rc = NULL;
    mtls_issued_cert(leaf, &lc);
    mtls_issued_cert(inter, &ic);
    mtls_issued_cert(root, &rc);
    mtls_cert_der(lc, &ders[0], &lens[0]);
    mtls_cert_der(ic, &ders[1], &lens[1]);

    mtls_policy *without = NULL, *with = NULL;
    mtls_policy_new(&without);
    mtls_policy_new(&with);
    mtls_policy *both[2] = {without, with};
    for (int i = 0; i < 2; i++) {
        mtls_policy_add_anchor(both[i], rc);
        mtls_policy_set_anchors_only(both[i], 1);
    }
    mtls_policy_set_revocation(with, MTLS_REVOCATION_HARD, MTLS_REVOCATION_SOURCE_CRL);

    /* Cold: the first evaluation fetches both CRLs (informational), against an uncached
     * evaluation without revocation. */
    mtls_policy_set_cache(without, 0);
    mtls_policy_set_cache(with, 0);
    double cold_base = per_eval(without, 20);
    mtls_revocation_cache_clear();
    double t0 = bench_now();
    if (!eval(with)) { fprintf(stderr, "cold evaluation not trusted: %s\n", mtls_last_error()); return 1; }
    double cold = bench_now() - t0;
    printf("cold: without revocation %.3f us | hard CRL, cold cache (2 fetches) %.3f us | ratio %.4f\n",
           cold_base * 1e6, cold * 1e6, cold / cold_base);

    measure("uncached", without, with, 400);
    mtls_policy_set_cache(without, 1);
    mtls_policy_set_cache(with, 1);
    per_eval(without, 1000);
    per_eval(with, 1000);
    measure("cached", without, with, 20000);

    mtls_policy_free(with);
    mtls_policy_free(without);
    mtls_cert_free(lc);
    mtls_cert_free(ic);
    mtls_cert_free(rc);
    mtls_issued_free(leaf);
    mtls_issued_free(inter);
    mtls_issued_free(root);
    return 0;
}
