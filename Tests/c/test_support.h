/* Tiny assertion helpers shared by the C test programs. Each program prints
 * "N passed, 0 failed" and exits non-zero on the first failure. */
#ifndef MTLS_TEST_SUPPORT_H
#define MTLS_TEST_SUPPORT_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mtls.h>

/* Counted atomically: several tests CHECK from more than one thread. */
static int t_passed = 0;
#define T_PASS() __atomic_fetch_add(&t_passed, 1, __ATOMIC_RELAXED)
#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, mtls_last_error()); \
    exit(1); } T_PASS(); } while (0)
#define CHECK_RC(expr, want) do { int rc_ = (expr); if (rc_ != (want)) { \
    fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d (last error: %s)\n", __FILE__, __LINE__, #expr, \
            rc_, mtls_error_name(rc_), (want), mtls_last_error()); exit(1); } T_PASS(); } while (0)
#define CHECK_OK(expr) CHECK_RC(expr, MTLS_OK)
#define DONE() do { printf("%d passed, 0 failed\n", __atomic_load_n(&t_passed, __ATOMIC_RELAXED)); return 0; } while (0)

/* Reads a whole file into a malloc'ed buffer. */
static inline uint8_t *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(1); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "short read %s\n", path); exit(1); }
    fclose(f); *len = (size_t)n; return buf;
}

/* Runs a shell command; fails the test if it does not exit 0. */
static inline void t_sh(const char *cmd) {
    if (system(cmd) != 0) { fprintf(stderr, "command failed: %s\n", cmd); exit(1); }
}
#endif
