/* Shared by the libFuzzer targets in fuzz/: each feeds its input to the C ABI (include/mtls.h),
 * frees everything it got back and ignores error codes. Only a crash, a sanitizer report, a leak
 * or a timeout is a finding. FUZZ_DATA is the fuzz/data folder (set by the Makefile). */
#ifndef MTLS_FUZZ_H
#define MTLS_FUZZ_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mtls.h>

#ifndef FUZZ_DATA
#define FUZZ_DATA "fuzz/data"
#endif

/* Reads FUZZ_DATA/name, NUL-terminated; a missing file is a broken set-up: abort. */
static uint8_t *fz_file(const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", FUZZ_DATA, name);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "fuzz: cannot open %s\n", path); abort(); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) abort();
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

/* A NUL-terminated copy of the input (the C ABI takes C strings). */
static char *fz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* A private scratch folder, made once per process. */
static const char *fz_tmpdir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/mtls-fuzz-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

/* The policy the evaluation targets judge by: trusts only fuzz/data/ca.pem, cache off so every
 * input is evaluated. */
static mtls_policy *fz_fixed_policy(void) {
    size_t len;
    uint8_t *pem = fz_file("ca.pem", &len);
    mtls_cert *ca = NULL;
    mtls_policy *p = NULL;
    if (mtls_cert_parse(pem, len, &ca) != MTLS_OK || mtls_policy_new(&p) != MTLS_OK ||
        mtls_policy_add_anchor(p, ca) != MTLS_OK || mtls_policy_set_anchors_only(p, 1) != MTLS_OK ||
        mtls_policy_set_cache(p, 0) != MTLS_OK) abort();
    mtls_cert_free(ca);
    free(pem);
    return p;
}

/* The network parsers (HTTP/1 responses and request heads, ACME JSON, renewal information, EST
 * PKCS#7, OCSP responses, CRLs) have no C ABI: the fuzz build alone (make fuzz-build: -DMTLS_FUZZ,
 * fuzz/fuzz.map) exports this one entry, which feeds `data` to the Swift parser named `target`
 * (Sources/MTLS/FuzzEntry.swift); the revocation targets read their fixed issuer and leaf
 * from `data_dir`. Returns 0, or -1 for an unknown target. Not in include/mtls.h: the shipped
 * libmtls.so does not have it. */
int mtlsfuzz_input(const char *target, const char *data_dir, const uint8_t *data, size_t len);

/* A whole target on mtlsfuzz_input. */
#define FZ_SWIFT_TARGET(name)                                               \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {          \
        if (mtlsfuzz_input(name, FUZZ_DATA, data, size) != 0) abort();      \
        return 0;                                                           \
    }
#endif
