#define _POSIX_C_SOURCE 200809L
/* Evaluations per second for a 3-certificate chain given as DER (leaf, intermediate, root), host
 * check on: raw OpenSSL (d2i_X509 x3 + X509_verify_cert with X509_VERIFY_PARAM_set1_host) versus
 * libmtls's mtls_evaluate_der, uncached and cached, in the same process. Prints ratios.
 * Usage: bench_trust PKI_DIR PREFIX (PREFIX: "" for P-256, "rsa-" for RSA-2048).
 * bench_trust PKI_DIR bag: path building against a hostile bag (pb-noise.pem: a leaf and 50
 * useless candidate issuers, same name and key identifier, another key), refused by both; the
 * row shows what libmtls's bounded search costs next to raw OpenSSL's single attempt, and the
 * same for pb-bag.pem (five bad candidates before the good one: raw OpenSSL refuses it, libmtls
 * finds the good path). */
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

/* ---- path building against a bag of candidates */

#define BAG_MAX 64
static const unsigned char *bag[BAG_MAX];
static size_t bag_lens[BAG_MAX];
static size_t bag_n;

static void load_bag(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); exit(2); }
    X509 *x;
    bag_n = 0;
    while (bag_n < BAG_MAX && (x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL) {
        unsigned char *out = NULL;
        bag_lens[bag_n] = (size_t)i2d_X509(x, &out);
        bag[bag_n++] = out;
        X509_free(x);
    }
    fclose(f);
}

/* Raw OpenSSL's one attempt over the bag; returns whether it verified. */
static int raw_bag(void) {
    X509 *x[BAG_MAX];
    STACK_OF(X509) *untrusted = sk_X509_new_null();
    for (size_t i = 0; i < bag_n; i++) {
        const unsigned char *p = bag[i];
        x[i] = d2i_X509(NULL, &p, (long)bag_lens[i]);
        if (i) sk_X509_push(untrusted, x[i]);
    }
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, raw_store, x[0], untrusted);
    X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
    X509_VERIFY_PARAM_set1_host(param, "server.test", 0);
    X509_VERIFY_PARAM_set_time(param, at);
    int ok = X509_verify_cert(ctx);
    X509_STORE_CTX_free(ctx);
    sk_X509_free(untrusted);
    for (size_t i = 0; i < bag_n; i++) X509_free(x[i]);
    return ok == 1;
}

static int mtls_bag(void) {
    mtls_trust_result *r = NULL;
    if (mtls_evaluate_der(policy, bag, bag_lens, bag_n, "server.test", MTLS_PURPOSE_SERVER, (int64_t)at, &r) != MTLS_OK) {
        fprintf(stderr, "evaluation error: %s\n", mtls_last_error());
        exit(1);
    }
    int trusted = 0;
    mtls_trust_result_trusted(r, &trusted);
    mtls_trust_result_free(r);
    return trusted;
}

/* Microseconds per call of fn, over about `seconds`. */
static double micros(int (*fn)(void), double seconds) {
    long n = 0;
    double start = bench_now(), t;
    do { fn(); n++; t = bench_now(); } while (t < start + seconds);
    return 1e6 * (t - start) / n;
}

static int bag_main(const char *dir) {
    size_t len;
    const unsigned char *rootder = der_of(dir, "root.pem", &len);
    at = time(NULL) + 2 * 86400; /* the one-day candidate of pb-bag.pem has expired */
    raw_store = X509_STORE_new();
    const unsigned char *p = rootder;
    X509 *root = d2i_X509(NULL, &p, (long)len);
    X509_STORE_add_cert(raw_store, root);
    X509_free(root);
    mtls_cert *anchor = NULL;
    if (mtls_policy_new(&policy) || mtls_cert_parse(rootder, len, &anchor) || mtls_policy_add_anchor(policy, anchor) ||
        mtls_policy_set_anchors_only(policy, 1) || mtls_policy_set_cache(policy, 0)) {
        fprintf(stderr, "setup failed: %s\n", mtls_last_error());
        return 1;
    }
    mtls_cert_free(anchor);
    double secs = getenv("BENCH_SECONDS") ? atof(getenv("BENCH_SECONDS")) : 2.0;
    load_bag(dir, "pb-noise.pem");
    if (raw_bag() || mtls_bag()) { fprintf(stderr, "the bag of useless issuers was accepted\n"); return 1; }
    size_t useless = bag_n - 1;
    double raw1 = micros(raw_bag, secs / 4), lib1 = micros(mtls_bag, secs / 4);
    double raw2 = micros(raw_bag, secs / 4), lib2 = micros(mtls_bag, secs / 4);
    double raw = (raw1 + raw2) / 2, lib = (lib1 + lib2) / 2;
    printf("path building, bag of %zu useless issuers (refused by both): raw OpenSSL one attempt %7.0f us | "
           "libmtls bounded search (<= 64 signature checks, <= 20 verifications) %7.0f us, %.2fx raw (target <= 4x) %s\n",
           useless, raw, lib, lib / raw, lib / raw <= 4 ? "ok" : "MISSED");
    load_bag(dir, "pb-bag.pem");
    int raw_ok = raw_bag();
    if (!mtls_bag()) { fprintf(stderr, "libmtls did not find the good path of pb-bag.pem\n"); return 1; }
    raw = micros(raw_bag, secs / 4);
    lib = micros(mtls_bag, secs / 4);
    printf("path building, 5 bad candidates then the good one: raw OpenSSL %7.0f us (%s) | libmtls %7.0f us "
           "(trusted: the good path), %.2fx raw\n", raw, raw_ok ? "accepts" : "refuses", lib, lib / raw);
    mtls_policy_free(policy);
    X509_STORE_free(raw_store);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: bench_trust PKI_DIR PREFIX\n"); return 2; }
    const char *dir = argv[1], *pre = argv[2];
    if (strcmp(pre, "bag") == 0) return bag_main(dir);
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
