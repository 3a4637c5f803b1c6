/* PKCS#12 import: mtls_pkcs12_import against raw OpenSSL PKCS12_parse on the same file, in the
 * same process, interleaved. Prints one JSON line: both median times and the median ratio.
 * usage: bench_p12 FILE PASSWORD [ROUNDS] [BATCH] */
#define _POSIX_C_SOURCE 200809L
#include <mtls.h>
#include <openssl/err.h>
#include <openssl/pkcs12.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_support.h"

static void run_mtls(const uint8_t *data, size_t len, const char *pw) {
    mtls_pkcs12 *p12 = NULL;
    if (mtls_pkcs12_import(data, len, pw, &p12) != MTLS_OK) {
        fprintf(stderr, "mtls_pkcs12_import: %s\n", mtls_last_error());
        exit(1);
    }
    mtls_pkcs12_free(p12);
}

static void run_openssl(const uint8_t *data, size_t len, const char *pw) {
    const unsigned char *p = data;
    PKCS12 *p12 = d2i_PKCS12(NULL, &p, (long)len);
    EVP_PKEY *key = NULL;
    X509 *cert = NULL;
    STACK_OF(X509) *ca = NULL;
    if (!p12 || !PKCS12_parse(p12, pw, &key, &cert, &ca)) {
        fprintf(stderr, "PKCS12_parse failed\n");
        ERR_print_errors_fp(stderr);
        exit(1);
    }
    EVP_PKEY_free(key);
    X509_free(cert);
    sk_X509_pop_free(ca, X509_free);
    PKCS12_free(p12);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s FILE PASSWORD [ROUNDS] [BATCH]\n", argv[0]); return 2; }
    int rounds = argc > 3 ? atoi(argv[3]) : 41, batch = argc > 4 ? atoi(argv[4]) : 4;
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc((size_t)n);
    if (fread(data, 1, (size_t)n, f) != (size_t)n) { perror("read"); return 1; }
    fclose(f);
    const char *pw = argv[2];

    /* warm up both paths (provider loading, algorithm fetch caches) */
    for (int i = 0; i < 3; i++) { run_mtls(data, (size_t)n, pw); run_openssl(data, (size_t)n, pw); }

    double *tm = calloc((size_t)rounds, sizeof *tm), *to = calloc((size_t)rounds, sizeof *to);
    for (int r = 0; r < rounds; r++) {
        /* alternate which goes first so drift affects both equally */
        for (int side = 0; side < 2; side++) {
            int mtls_now = (r + side) % 2 == 0;
            double t0 = bench_now();
            for (int i = 0; i < batch; i++) {
                if (mtls_now) run_mtls(data, (size_t)n, pw); else run_openssl(data, (size_t)n, pw);
            }
            double dt = (bench_now() - t0) / batch;
            if (mtls_now) tm[r] = dt; else to[r] = dt;
        }
    }
    /* The ratio is the median of per-round ratios: both sides of a round run back to back, so
       load from other processes on a shared machine hits them alike and cancels out. */
    double *ratios = calloc((size_t)rounds, sizeof *ratios);
    for (int r = 0; r < rounds; r++) ratios[r] = tm[r] / to[r];
    qsort(ratios, (size_t)rounds, sizeof *ratios, bench_cmp_double);
    qsort(tm, (size_t)rounds, sizeof *tm, bench_cmp_double);
    qsort(to, (size_t)rounds, sizeof *to, bench_cmp_double);
    printf("{\"mtls_ms\": %.4f, \"openssl_ms\": %.4f, \"ratio\": %.4f, \"spread\": %.4f}\n", tm[rounds / 2] * 1e3,
           to[rounds / 2] * 1e3, ratios[rounds / 2], ratios[rounds * 3 / 4] - ratios[rounds / 4]);
    free(tm); free(to); free(ratios); free(data);
    return 0;
}
