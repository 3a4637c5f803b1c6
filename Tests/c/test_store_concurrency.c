/* One store written and read by 4 processes x 8 threads at once (issue 24): every write goes
 * through the manifest and the header's write counter, every read checks them, and nothing may
 * come out `corrupt` (a reader must never mistake another writer's commit for tampering), fail,
 * or be lost. Each thread puts its own labels (checking each right after), replaces one label
 * every thread shares, reads its own and the shared label back, lists, and deletes a label of
 * its own; two handles per process, shared by four threads each. Afterwards one handle checks that
 * every label that was reported committed is there, and the write counter covers every write. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROCS 4
#define THREADS 8
#define ROUNDS 12

static char path[700];
static uint8_t key[32];
static mtls_store_options opts;
static mtls_store *handles[2];
static mtls_cert *certs[2];
static atomic_int failures, writes;
static int proc_id;

static void fail(const char *what, const char *label, int rc) {
    fprintf(stderr, "test_store_concurrency: process %d: %s \"%s\": %d %s (%s)\n", proc_id, what, label, rc,
            mtls_error_name(rc), mtls_last_error());
    atomic_fetch_add(&failures, 1);
}

static void *worker(void *arg) {
    long t = (long)arg;
    mtls_store *s = handles[t & 1];
    char label[64];
    for (int r = 0; r < ROUNDS; r++) {
        int rc;
        snprintf(label, sizeof label, "p%d-t%ld-r%d", proc_id, t, r);
        if ((rc = mtls_store_put_cert(s, label, certs[r & 1], 0)) != MTLS_OK) { fail("put", label, rc); continue; }
        atomic_fetch_add(&writes, 1);
        mtls_cert *got = NULL;
        if ((rc = mtls_store_get_cert(s, label, &got)) != MTLS_OK) fail("get own", label, rc);
        mtls_cert_free(got);
        got = NULL;
        if ((rc = mtls_store_put_cert(s, "shared", certs[(t + r) & 1], 1)) != MTLS_OK) fail("replace shared", "shared", rc);
        else atomic_fetch_add(&writes, 1);
        if ((rc = mtls_store_get_cert(s, "shared", &got)) != MTLS_OK) fail("get shared", "shared", rc);
        mtls_cert_free(got);
        mtls_store_item *item = NULL;
        if ((rc = mtls_store_item_info(s, label, MTLS_STORE_CERTIFICATE, &item)) != MTLS_OK) fail("info", label, rc);
        mtls_store_item_free(item);
        if (r % 4 == 3) {
            mtls_store_item **items = NULL; size_t n = 0;
            if ((rc = mtls_store_list(s, MTLS_STORE_ANY, &items, &n)) != MTLS_OK) fail("list", "*", rc);
            mtls_store_item_list_free(items, n);
        }
        if (r % 6 == 5) {
            /* delete the label written just before: the manifest shrinks under the others' reads */
            char prev[64];
            snprintf(prev, sizeof prev, "p%d-t%ld-r%d", proc_id, t, r - 1);
            size_t deleted = 0;
            if ((rc = mtls_store_delete(s, prev, MTLS_STORE_CERTIFICATE, &deleted)) != MTLS_OK || deleted != 1) fail("delete", prev, rc);
            else atomic_fetch_add(&writes, 1);
            if ((rc = mtls_store_get_cert(s, prev, &got)) != MTLS_E_NOT_FOUND) fail("get deleted", prev, rc);
        }
    }
    return NULL;
}

static int child(void) {
    for (int i = 0; i < 2; i++) {
        int rc = mtls_store_open(path, key, sizeof key, MTLS_STORE_SECRET_KEY, &opts, &handles[i]);
        if (rc != MTLS_OK) { fail("open", path, rc); return 1; }
    }
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    mtls_store_close(handles[0]);
    mtls_store_close(handles[1]);
    printf("process %d: %d writes, %d failures\n", proc_id, atomic_load(&writes), atomic_load(&failures));
    fflush(stdout);
    return atomic_load(&failures) == 0 ? 0 : 1;
}

/* What the tests share, made once in main: the folder, the store's path, key and options, and
 * two certificates to write. */
static char dir[512], cmd[2048];

TEST(processes_and_threads_write_at_once) {
    /* The processes race to create the store, too. */
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        CHECK(pids[p] >= 0);
        if (pids[p] == 0) { proc_id = p; fflush(stdout); _exit(child()); }
    }
    int failed = 0;
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        waitpid(pids[p], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    CHECK(failed == 0);
}

/* The store processes_and_threads_write_at_once left. */
TEST(nothing_lost) {
    /* Nothing lost: every label that was not deleted is there, and only those. */
    mtls_store *s = NULL;
    CHECK_OK(mtls_store_open(path, key, sizeof key, MTLS_STORE_SECRET_KEY, &opts, &s));
    mtls_store_item **items = NULL; size_t n = 0;
    CHECK_OK(mtls_store_list(s, MTLS_STORE_ANY, &items, &n));
    int deletes_per_thread = ROUNDS / 6;
    size_t expected = (size_t)PROCS * THREADS * (ROUNDS - deletes_per_thread) + 1;
    printf("store: %zu items, %zu expected\n", n, expected);
    CHECK(n == expected);
    mtls_store_item_list_free(items, n);
    for (int p = 0; p < PROCS; p++)
        for (int t = 0; t < THREADS; t++)
            for (int r = 0; r < ROUNDS; r++) {
                char label[64];
                snprintf(label, sizeof label, "p%d-t%d-r%d", p, t, r);
                mtls_cert *got = NULL;
                int rc = mtls_store_get_cert(s, label, &got);
                CHECK_RC(rc, r % 6 == 4 ? MTLS_E_NOT_FOUND : MTLS_OK);
                mtls_cert_free(got);
            }
    uint64_t counter = 0;
    CHECK_OK(mtls_store_write_counter(s, &counter));
    uint64_t total_writes = (uint64_t)PROCS * THREADS * (2 * ROUNDS + deletes_per_thread);
    printf("write counter %llu for %llu writes\n", (unsigned long long)counter, (unsigned long long)total_writes);
    CHECK(counter == total_writes);
    mtls_store_close(s);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char file[700];
    snprintf(dir, sizeof dir, "%s/store-conc-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %1$s && mkdir -p %1$s && scripts/test-pki.sh %1$s/pki >/dev/null", dir);
    t_sh(cmd);
    snprintf(path, sizeof path, "%s/store.db", dir);
    memset(key, 0x42, sizeof key);
    mtls_store_options_init(&opts, MTLS_STORE_OPTIONS_VERSION);
    opts.busy_timeout_ms = 60000;
    const char *names[2] = { "root.pem", "server-chain.pem" };
    for (int i = 0; i < 2; i++) {
        mtls_cert **list = NULL; size_t n = 0;
        snprintf(file, sizeof file, "%s/pki/%s", dir, names[i]);
        CHECK_OK(mtls_cert_list_load(file, &list, &n));
        certs[i] = mtls_cert_ref(list[0]);
        mtls_cert_list_free(list, n);
    }

    RUN(processes_and_threads_write_at_once);
    RUN(nothing_lost);
    mtls_cert_free(certs[0]);
    mtls_cert_free(certs[1]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
    DONE();
}
