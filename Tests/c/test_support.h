/* Tiny assertion helpers and test runner shared by the C test programs.
 *
 * A program names its tests and runs them all from main:
 *
 *     TEST(policy_constructors) { CHECK(...); ... }
 *     int main(void) { RUN(policy_constructors); RUN(...); DONE(); }
 *
 * RUN prints "ok   name" or "FAIL name" for each test; a failed CHECK ends only its own test
 * (it returns to RUN), so the next ones still run. DONE prints "N passed, M failed" (tests) and
 * exits non-zero if any failed. A CHECK that fails outside RUN, or on a thread other than the
 * one running the test, or in a process the test forked, exits that program at once (there is
 * nothing to return to). A program with no RUN counts its CHECKs instead, as before. */
#ifndef MTLS_TEST_SUPPORT_H
#define MTLS_TEST_SUPPORT_H
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mtls.h>

/* Counted atomically: several tests CHECK from more than one thread. */
static int t_passed = 0;
static int t_tests_passed = 0, t_tests_failed = 0;
static int t_in_test = 0;
static pthread_t t_test_thread;
static pid_t t_test_pid;
static jmp_buf t_test_jump;
#define T_PASS() __atomic_fetch_add(&t_passed, 1, __ATOMIC_RELAXED)

/* A test that must do its first part before a moment of the wall clock (a certificate or a pin
 * that expires a few seconds from now) arms T_WINDOW: a CHECK on the test's thread that fails once
 * that moment has passed means the machine was too slow for the window, not that the library
 * failed, so it goes back to T_WINDOW's point, which runs the part again with a window twice as
 * long (at most T_WINDOW_MAX seconds; then the CHECK fails as any other). The test disarms it
 * (T_WINDOW_DONE) once the part is done: from then on every failed CHECK fails the test. */
#include <time.h>
#define T_WINDOW_MAX 128
static int64_t t_window_end;
static int t_window_armed;
static jmp_buf t_window_jump;
/* Arms the window: the first time *SECONDS as given, after each late failure twice as long;
 * sets *END to now + *SECONDS. A macro, for its setjmp; *SECONDS must live outside the test's
 * frame (a static). */
#define T_WINDOW(seconds, end) do { \
    if (setjmp(t_window_jump) != 0) { \
        fprintf(stderr, "-- the machine was too slow for a %d s window: again with %d s\n", *(seconds), *(seconds) * 2); \
        *(seconds) *= 2; } \
    *(end) = (int64_t)time(NULL) + *(seconds); \
    t_window_end = *(end); \
    t_window_armed = *(seconds) < T_WINDOW_MAX; } while (0)
#define T_WINDOW_DONE() (t_window_armed = 0)

/* A failed CHECK: back to RUN when on the test's own thread (in the test's own process: a
 * forked child has nothing to go back to), else the program ends. */
__attribute__((noreturn)) static inline void t_fail(void) {
    fflush(stdout);
    if (t_window_armed && t_in_test && pthread_equal(pthread_self(), t_test_thread) && getpid() == t_test_pid &&
        (int64_t)time(NULL) >= t_window_end) {
        t_window_armed = 0;
        longjmp(t_window_jump, 1);
    }
    if (t_in_test && pthread_equal(pthread_self(), t_test_thread) && getpid() == t_test_pid) longjmp(t_test_jump, 1);
    exit(1);
}
#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, mtls_last_error()); \
    t_fail(); } T_PASS(); } while (0)
#define CHECK_RC(expr, want) do { int rc_ = (expr); if (rc_ != (want)) { \
    fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d (last error: %s)\n", __FILE__, __LINE__, #expr, \
            rc_, mtls_error_name(rc_), (want), mtls_last_error()); t_fail(); } T_PASS(); } while (0)
#define CHECK_OK(expr) CHECK_RC(expr, MTLS_OK)

/* A named test: a function of no arguments, run by RUN. */
#define TEST(name) static void name(void)
#define RUN(name) t_run(#name, name)
static inline void t_run(const char *name, void (*test)(void)) {
    t_test_thread = pthread_self();
    t_test_pid = getpid();
    t_in_test = 1;
    t_window_armed = 0;
    if (setjmp(t_test_jump) == 0) {
        test();
        t_in_test = 0;
        t_tests_passed++;
        printf("ok   %s\n", name);
    } else {
        t_in_test = 0;
        t_tests_failed++;
        printf("FAIL %s\n", name);
    }
    fflush(stdout);
}
#define DONE() do { \
    if (t_tests_passed + t_tests_failed > 0) { \
        printf("%d passed, %d failed\n", t_tests_passed, t_tests_failed); \
        return t_tests_failed ? 1 : 0; } \
    printf("%d passed, 0 failed\n", __atomic_load_n(&t_passed, __ATOMIC_RELAXED)); return 0; } while (0)

/* Reads a whole file into a malloc'ed buffer. */
static inline uint8_t *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); t_fail(); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "short read %s\n", path); t_fail(); }
    fclose(f); *len = (size_t)n; return buf;
}

/* Runs a shell command; fails the test if it does not exit 0. */
static inline void t_sh(const char *cmd) {
    if (system(cmd) != 0) { fprintf(stderr, "command failed: %s\n", cmd); t_fail(); }
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

/* Writes a self-signed P-256 certificate for CN=`cn` (valid 5 days) into the folder `dir`, which
 * exists: c.pem, c.key (not encrypted) and c.p12 (both, password "pw"). */
static inline void t_self_signed(const char *dir, const char *cn) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd,
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout c.key -out c.pem "
             "-subj '/CN=%s' -days 5 2>/dev/null && "
             "openssl pkcs12 -export -inkey c.key -in c.pem -passout pass:pw -out c.p12",
             dir, cn);
    t_sh(cmd);
}

/* Closes a store made by t_temp_store and removes its folder. */
static inline void t_close_temp_store(mtls_store *store, const char *dir) {
    char cmd[1100];
    mtls_store_close(store);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
}
/* The length of the accept queue of the socket listening on 127.0.0.1:port (the rx_queue of its
 * LISTEN line in /proc/net/tcp), or -1 when it is not found. */
static inline int t_accept_queue(uint16_t port) {
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) return -1;
    char line[512];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned addr, lport, st, txq, rxq;
        if (sscanf(line, " %*d: %8X:%4X %*8X:%*4X %2X %8X:%8X", &addr, &lport, &st, &txq, &rxq) == 5
            && lport == port && st == 0x0A) { found = (int)rxq; break; }
    }
    fclose(f);
    return found;
}

/* Waits (at most 10 s) until the listener on 127.0.0.1:port has taken every connection off its
 * accept queue; fails the test if it never does. */
static inline void t_wait_accepted(uint16_t port) {
    for (int i = 0; i < 1000 && t_accept_queue(port) != 0; i++) poll(NULL, 0, 10);
    CHECK(t_accept_queue(port) == 0);
}

/* Waits (up to `seconds`) until the file at `path` holds `needle` (a peer's log line, say);
 * fails the test if it never does. */
static inline void t_wait_file_contains(const char *path, const char *needle, int seconds) {
    for (int i = 0; i <= seconds * 100; i++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[65536];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            if (strstr(buf, needle) != NULL) return;
        }
        poll(NULL, 0, 10);
    }
    fprintf(stderr, "%s never held \"%s\"\n", path, needle);
    t_fail();
}

/* Waits until the library's watcher thread (mtls-watch) has looked at everything it follows at
 * least once after this call began: a waited-on condition, for checks that something did NOT
 * happen ("an unchanged broken file is not reported again"), instead of a fixed sleep. A canary
 * policy file, followed for the purpose, is rewritten twice and each reload waited for: the
 * watcher looks at every followed item in each pass, so the second reload comes in a pass that
 * began after the first one ended. */
static int t_canary_reloads = 0;
static void t_canary_event(const mtls_event *e, void *userdata) {
    (void)userdata;
    if (e->kind == MTLS_EVENT_POLICY_RELOADED) __atomic_fetch_add(&t_canary_reloads, 1, __ATOMIC_SEQ_CST);
}
static inline void t_wait_watcher_looks(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    static const char *const versions[] = { "{}", "{\"anchors_only\": true}", "{\"anchors_only\": false}" };
    char path[600], next[620];
    snprintf(path, sizeof path, "%s/watcher-canary-%d.json", tmp, (int)getpid());
    snprintf(next, sizeof next, "%s.new", path);
    mtls_policy_watch *w = NULL;
    for (int round = 0; round < 3; round++) {
        FILE *f = fopen(next, "w");
        CHECK(f != NULL);
        fputs(versions[round], f);
        fclose(f);
        CHECK(rename(next, path) == 0);
        if (round == 0) {
            CHECK_OK(mtls_policy_watch_new(path, NULL, &w));
            CHECK_OK(mtls_policy_watch_set_event_callback(w, t_canary_event, NULL, NULL));
            continue;
        }
        int want = __atomic_load_n(&t_canary_reloads, __ATOMIC_SEQ_CST) + 1;
        for (int i = 0; i < 6000 && __atomic_load_n(&t_canary_reloads, __ATOMIC_SEQ_CST) < want; i++) poll(NULL, 0, 10);
        CHECK(__atomic_load_n(&t_canary_reloads, __ATOMIC_SEQ_CST) >= want);
    }
    mtls_policy_watch_free(w);
    unlink(path);
}
#endif
