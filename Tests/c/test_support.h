/* Tiny assertion helpers shared by the C test programs. Each program prints
 * "N passed, 0 failed" and exits non-zero on the first failure. */
#ifndef MTLS_TEST_SUPPORT_H
#define MTLS_TEST_SUPPORT_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* A new empty folder `dir` ($MTLS_TEST_TMP, else /tmp, then NAME-PID) holding a new store,
 * store.db, opened with `passphrase` and a cheap scrypt (2^10). Remove both with
 * t_close_temp_store. */
static inline mtls_store *t_temp_store(const char *name, const uint8_t *passphrase, size_t len, char *dir, size_t dir_size) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[1200], path[1100];
    snprintf(dir, dir_size, "%s/%s-%d", tmp, name, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    t_sh(cmd);
    snprintf(path, sizeof path, "%s/store.db", dir);
    mtls_store_options so;
    CHECK_OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION));
    so.kdf_log_n = 10;
    mtls_store *store = NULL;
    CHECK_OK(mtls_store_open(path, passphrase, len, MTLS_STORE_SECRET_PASSPHRASE, &so, &store));
    return store;
}

/* Closes a store made by t_temp_store and removes its folder. */
static inline void t_close_temp_store(mtls_store *store, const char *dir) {
    char cmd[1100];
    mtls_store_close(store);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
}
#endif
