#define _POSIX_C_SOURCE 200809L
/* Evaluations per second for a 3-certificate chain given as DER (leaf, intermediate, root), host
 * check on: raw OpenSSL (d2i_X509 x3 + X509_verify_cert with X509_VERIFY_PARAM_set1_host) versus
 * libmtls's mtls_evaluate_der, uncached and cached, in the same process. Prints ratios.
 * Usage: bench_trust PKI_DIR PREFIX (PREFIX: "" for P-256, "rsa-" for RSA-2048). */
#include <mtls.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_support.h"

static unsigned char *der_of(const char *dir, const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); exit(2); }
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) { fprintf(stderr, "bad PEM %s\n", path); exit(2); }
    unsigned char *out = NULL;
    int n = i2d_X509(x, &out);
    X509_free(x);
    *len = (size_t)n;
    return out;
}

static const unsigned char *ders[3];
static size_t lens[3];
static X509_STORE *raw_store;
static time_t at;

static int raw_once(void) {
    X509 *x[3];
    for (int i = 0; i < 3; i++) {
        const unsigned char *p = ders[i];
        x[i] = d2i_X509(NULL, &p, (long)lens[i]);
    }
    STACK_OF(X509) *untrusted = sk_X509_new_null();
    sk_X509_push(untrusted, x[1]);
    sk_X509_push(untrusted, x[2]);
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, raw_store, x[0], untrusted);
    X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
    X509_VERIFY_PARAM_set1_host(param, "server.test", 0);
    X509_VERIFY_PARAM_set_time(param, at);
    int ok = X509_verify_cert(ctx);
    X509_STORE_CTX_free(ctx);
    sk_X509_free(untrusted);
    for (int i = 0; i < 3; i++) X509_free(x[i]);
    return ok == 1;
}

static mtls_policy *policy;

static int mtls_once(void) {
    mtls_trust_result *r = NULL;
    if (mtls_evaluate_der(policy, ders, lens, 3, "server.test", MTLS_PURPOSE_SERVER, (int64_t)at, &r) != MTLS_OK) return 0;
    int trusted = 0;
    mtls_trust_result_trusted(r, &trusted);
    mtls_trust_result_free(r);
    return trusted;
}

/* Runs fn for about `seconds`, returns evaluations per second. */
static double rate(int (*fn)(void), double seconds) {
    for (int i = 0; i < 20; i++) if (!fn()) { fprintf(stderr, "evaluation failed: %s\n", mtls_last_error()); exit(1); }
    long n = 0;
    double start = bench_now(), end = start + seconds, t;
    do {
        for (int i = 0; i < 20; i++) if (!fn()) { fprintf(stderr, "evaluation failed\n"); exit(1); }
        n += 20;
        t = bench_now();
    } while (t < end);
    return n / (t - start);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: bench_trust PKI_DIR PREFIX\n"); return 2; }
    const char *dir = argv[1], *pre = argv[2];
    char name[256];
    const char *names[3] = { "server.pem", "inter.pem", "root.pem" };
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", pre, names[i]);
        ders[i] = der_of(dir, name, &lens[i]);
    }
    at = time(NULL) + 86400;
    raw_store = X509_STORE_new();
    const unsigned char *p = ders[2];
    X509 *root = d2i_X509(NULL, &p, (long)lens[2]);
    X509_STORE_add_cert(raw_store, root);
    X509_free(root);

    mtls_cert *anchor = NULL;
    if (mtls_policy_new(&policy) || mtls_cert_parse(ders[2], lens[2], &anchor) || mtls_policy_add_anchor(policy, anchor) ||
        mtls_policy_set_anchors_only(policy, 1)) {
        fprintf(stderr, "setup failed: %s\n", mtls_last_error());
        return 1;
    }
    mtls_cert_free(anchor);
    double secs = getenv("BENCH_SECONDS") ? atof(getenv("BENCH_SECONDS")) : 2.0;
    const char *label = pre[0] ? "RSA-2048" : "P-256";
    /* Interleave raw and libmtls runs so both see the same machine load. */
    double raw1 = rate(raw_once, secs / 2);
    mtls_policy_set_cache(policy, 0);
    double unc1 = rate(mtls_once, secs / 2);
    double raw2 = rate(raw_once, secs / 2);
    double unc2 = rate(mtls_once, secs / 2);
    mtls_policy_set_cache(policy, 1);
    double cached = rate(mtls_once, secs / 2);
    double raw = (raw1 + raw2) / 2, uncached = (unc1 + unc2) / 2;
    printf("%-8s raw OpenSSL d2i+verify: %8.0f eval/s | libmtls uncached: %8.0f eval/s, cost %.2fx raw (target <= 1.25x) %s"
           " | libmtls cached: %9.0f eval/s, %.1fx faster than raw (target >= 5x) %s\n",
           label, raw, uncached, raw / uncached, raw / uncached <= 1.25 ? "ok" : "MISSED",
           cached, cached / raw, cached / raw >= 5 ? "ok" : "MISSED");
    mtls_policy_free(policy);
    X509_STORE_free(raw_store);
    return 0;
}
