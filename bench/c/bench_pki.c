/* Issuing: libmtls (mtls_pki_issue: new EC P-256 key + client certificate signed by an
 * intermediate) against the same work done with raw OpenSSL calls, in one process.
 * Prints the time per certificate of each and the ratio. */
#include <mtls.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bench_support.h"

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext || !X509_add_ext(x, ext, -1)) { fprintf(stderr, "extension %d failed\n", nid); exit(1); }
    X509_EXTENSION_free(ext);
}

/* The OpenSSL baseline: the same profile (CN, random 128-bit serial, validity, basicConstraints,
 * keyUsage, EKU clientAuth, SKI, AKI, SHA-256 signature). */
static X509 *raw_issue(X509 *ca, EVP_PKEY *ca_key) {
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    X509_set_version(x, X509_VERSION_3);
    unsigned char serial[16];
    RAND_bytes(serial, sizeof serial);
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    X509_NAME *name = X509_NAME_new();
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)"bench", -1, -1, 0);
    X509_set_subject_name(x, name);
    X509_NAME_free(name);
    X509_set_issuer_name(x, X509_get_subject_name(ca));
    X509_gmtime_adj(X509_getm_notBefore(x), -300);
    X509_gmtime_adj(X509_getm_notAfter(x), 1096L * 86400);
    X509_set_pubkey(x, key);
    add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(x, ca, NID_key_usage, "critical,digitalSignature");
    add_ext(x, ca, NID_ext_key_usage, "clientAuth");
    add_ext(x, ca, NID_subject_key_identifier, "hash");
    add_ext(x, ca, NID_authority_key_identifier, "keyid:always");
    if (!X509_sign(x, ca_key, EVP_sha256())) { fprintf(stderr, "sign failed\n"); exit(1); }
    EVP_PKEY_free(key);
    return x;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 300;
    mtls_issued *root = NULL, *inter = NULL;
    if (mtls_pki_root("Bench Root", NULL, &root) || mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "Bench CA", NULL, &inter)) {
        fprintf(stderr, "setup: %s\n", mtls_last_error());
        return 1;
    }
    /* The same CA for the baseline, read back through PEM. */
    char *chain = NULL, *key_pem = NULL;
    mtls_issued_chain_pem(inter, &chain);
    mtls_issued_key_pem(inter, NULL, &key_pem);
    BIO *b = BIO_new_mem_buf(chain, -1);
    X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    b = BIO_new_mem_buf(key_pem, -1);
    EVP_PKEY *ca_key = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    BIO_free(b);
    mtls_string_free(chain);
    mtls_string_free(key_pem);

    double best_lib = 1e9, best_raw = 1e9;
    for (int round = 0; round < 3; round++) {
        double t0 = bench_now();
        for (int i = 0; i < n; i++) {
            mtls_issued *leaf = NULL;
            if (mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "bench", NULL, &leaf) != MTLS_OK) {
                fprintf(stderr, "issue: %s\n", mtls_last_error());
                return 1;
            }
            mtls_issued_free(leaf);
        }
        double t1 = bench_now();
        for (int i = 0; i < n; i++) X509_free(raw_issue(ca, ca_key));
        double t2 = bench_now();
        if (t1 - t0 < best_lib) best_lib = t1 - t0;
        if (t2 - t1 < best_raw) best_raw = t2 - t1;
    }
    printf("issue client cert (ec-p256 keygen + sign), %d per round, best of 3:\n", n);
    printf("  libmtls mtls_pki_issue   %8.1f us/cert\n", best_lib / n * 1e6);
    printf("  raw OpenSSL              %8.1f us/cert\n", best_raw / n * 1e6);
    printf("  ratio libmtls/openssl    %8.2f\n", best_lib / best_raw);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    mtls_issued_free(inter);
    mtls_issued_free(root);
    return 0;
}
