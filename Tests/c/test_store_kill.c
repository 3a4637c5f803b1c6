/* kill -9 at random points (issue 24): 100 kills of a process that is writing to a store,
 * changing its secret (rotating the data key over every row) or upgrading a store written by an
 * older libmtls. After each kill the store must open with no error but the expected one, be
 * either the old state or the new one, both valid (0 corrupt stores), and hold every write the
 * killed process had seen committed (0 lost writes). A child reports each committed step on a
 * pipe; the parent kills it after a random delay once it is ready. */
#define _DEFAULT_SOURCE
#include "test_support.h"
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILLS 100
#define BASE_ROWS 60

static mtls_store_options opts;
static uint8_t keys[2][32];
static uint8_t fixture_key[32];
static mtls_cert *cert;
static mtls_identity *ident;
static int corrupt_stores, lost_writes;

static void report(int fd, int v) { if (write(fd, &v, sizeof v) != (ssize_t)sizeof v) _exit(3); }

/* The child's work, forever (until killed): `mode` 0 writes, 1 changes the secret, 2 upgrades. */
static void child(int mode, const char *path, int round, int key_index, int fd) {
    mtls_store *s = NULL;
    if (mode == 2) {
        report(fd, -1); /* ready */
        mtls_store_item **items = NULL; size_t n = 0; char *conf = NULL;
        if (mtls_store_upgrade_preview(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &items, &n, &conf) != MTLS_OK) _exit(4);
        if (mtls_store_upgrade(path, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, conf, NULL) != MTLS_OK) _exit(5);
        report(fd, 1);
        for (;;) pause();
    }
    if (mtls_store_open(path, keys[key_index], 32, MTLS_STORE_SECRET_KEY, &opts, &s) != MTLS_OK) _exit(6);
    report(fd, -1);
    for (int i = 0;; i++) {
        if (mode == 0) {
            char label[64];
            snprintf(label, sizeof label, "k%d-%d", round, i);
            if (mtls_store_put_cert(s, label, cert, 0) != MTLS_OK) _exit(7);
            report(fd, i);
            if (mtls_store_put_identity(s, "shared", ident, 1) != MTLS_OK) _exit(8);
        } else {
            key_index ^= 1;
            if (mtls_store_change_secret(s, keys[key_index], 32, MTLS_STORE_SECRET_KEY) != MTLS_OK) _exit(9);
            report(fd, key_index);
        }
    }
}

static int rc_open(const char *path, const uint8_t *key, mtls_store **s) {
    *s = NULL;
    return mtls_store_open(path, key, 32, MTLS_STORE_SECRET_KEY, &opts, s);
}

/* A valid store: every row lists and reads (identities decrypt). */
static int check_all(mtls_store *s, size_t *count) {
    mtls_store_item **items = NULL; size_t n = 0;
    int rc = mtls_store_list(s, MTLS_STORE_ANY, &items, &n);
    if (rc != MTLS_OK) return rc;
    for (size_t i = 0; i < n && rc == MTLS_OK; i++) {
        char *label = NULL; int cls = 0;
        mtls_store_item_label(items[i], &label);
        mtls_store_item_class(items[i], &cls);
        if (cls == MTLS_STORE_IDENTITY) {
            mtls_identity *id = NULL;
            rc = mtls_store_get_identity(s, label, &id);
            mtls_identity_free(id);
        } else if (cls == MTLS_STORE_TOKEN_IDENTITY) {
            mtls_cert *c = NULL; char *uri = NULL;
            rc = mtls_store_get_token_identity(s, label, &uri, &c);
            mtls_string_free(uri);
            mtls_cert_free(c);
        } else {
            mtls_cert *c = NULL;
            rc = mtls_store_get_cert(s, label, &c);
            mtls_cert_free(c);
        }
        mtls_string_free(label);
    }
    mtls_store_item_list_free(items, n);
    *count = n;
    return rc;
}

/* What the tests share, made once in main: the folder, the identity, and the stores: one written
 * to, one whose secret changes (BASE_ROWS rows, keys to re-seal), one upgraded from schema 2. */
static char dir[512], cmd[4096], wpath[700], cpath[700], upath[700];
static int secret_key = 0;           /* the key secret.db opens with, as far as the parent knows */
static int committed_writes = 0, kills = 0, old_states = 0, new_states = 0;
static size_t write_rows = BASE_ROWS; /* rows writes.db must hold at least */

/* The rounds of KILLS (the same rounds as when all modes ran in one loop) in which a child of
 * `want_mode` (0 writes, 1 changes the secret, 2 upgrades) is killed, each checked after. */
static void kill_rounds(int want_mode) {
    int rounds = 0;
    kills = 0;
    corrupt_stores = lost_writes = 0;
    for (int round = 0; round < KILLS; round++) {
        int mode = round % 5 < 2 ? 0 : round % 5 < 4 ? 1 : 2;
        if (mode != want_mode) continue;
        rounds++;
        if (mode == 2) {
            snprintf(cmd, sizeof cmd, "cp Tests/fixtures/store/v2.db %s && rm -f %s-wal %s-shm", upath, upath, upath);
            t_sh(cmd);
        }
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child(mode, mode == 0 ? wpath : mode == 1 ? cpath : upath, round, mode == 1 ? secret_key : 0, fds[1]);
            _exit(0);
        }
        close(fds[1]);
        int v = 0;
        if (read(fds[0], &v, sizeof v) != (ssize_t)sizeof v || v != -1) {
            int status = 0;
            waitpid(pid, &status, 0);
            fprintf(stderr, "round %d (mode %d): the child did not start: exit %d\n", round, mode,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            CHECK(0);
        }
        /* A kill at a random moment of the child's work: time passing is the point. */
        usleep((useconds_t)(rand() % (mode == 2 ? 40000 : 25000)));
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status)); /* killed mid-work, never exited on an error */
        kills++;
        int last = -1, reports = 0;
        while (read(fds[0], &v, sizeof v) == (ssize_t)sizeof v) { last = v; reports++; }
        close(fds[0]);

        mtls_store *s = NULL;
        size_t n = 0;
        if (mode == 0) {
            int rc = rc_open(wpath, keys[0], &s);
            if (rc == MTLS_E_CORRUPT) corrupt_stores++;
            CHECK_OK(rc);
            rc = check_all(s, &n);
            if (rc == MTLS_E_CORRUPT) corrupt_stores++;
            CHECK_OK(rc);
            for (int i = 0; i <= last; i++) {
                char label[64];
                snprintf(label, sizeof label, "k%d-%d", round, i);
                mtls_cert *c = NULL;
                if (mtls_store_get_cert(s, label, &c) != MTLS_OK) lost_writes++;
                mtls_cert_free(c);
            }
            committed_writes += reports;
            write_rows += (size_t)reports;
            CHECK(n >= write_rows);
            write_rows = n;
            mtls_store_close(s);
        } else if (mode == 1) {
            /* The last reported key, else the one before; the other one only if a change committed
             * without being reported. Exactly one of them opens it. */
            int expect = reports ? last : secret_key;
            int rc = rc_open(cpath, keys[expect], &s);
            if (rc == MTLS_E_BAD_SECRET) {
                rc = rc_open(cpath, keys[expect ^ 1], &s);
                expect ^= 1;
            }
            if (rc == MTLS_E_CORRUPT) corrupt_stores++;
            CHECK_OK(rc);
            if (expect == secret_key) old_states++; else new_states++;
            mtls_store *other = NULL;
            CHECK_RC(rc_open(cpath, keys[expect ^ 1], &other), MTLS_E_BAD_SECRET);
            rc = check_all(s, &n);
            if (rc == MTLS_E_CORRUPT) corrupt_stores++;
            CHECK_OK(rc);
            CHECK(n == BASE_ROWS);
            secret_key = expect;
            mtls_store_close(s);
        } else {
            int rc = rc_open(upath, fixture_key, &s);
            if (rc == MTLS_E_UPGRADE_REQUIRED) {
                CHECK(reports == 0); /* a reported upgrade is never undone */
                old_states++;
                mtls_store_item **items = NULL; char *conf = NULL;
                CHECK_OK(mtls_store_upgrade_preview(upath, fixture_key, 32, MTLS_STORE_SECRET_KEY, &opts, &items, &n, &conf));
                CHECK(n == 3 && conf != NULL);
                mtls_store_item_list_free(items, n);
                mtls_string_free(conf);
            } else {
                if (rc == MTLS_E_CORRUPT) corrupt_stores++;
                CHECK_OK(rc);
                new_states++;
                rc = check_all(s, &n);
                if (rc == MTLS_E_CORRUPT) corrupt_stores++;
                CHECK_OK(rc);
                CHECK(n == 3);
                mtls_store_close(s);
            }
        }
    }
    printf("kill -9, mode %d: %d kills, %d corrupt stores, %d lost of %d committed writes; secret/upgrade: %d old states, %d new\n",
           want_mode, kills, corrupt_stores, lost_writes, committed_writes, old_states, new_states);
    CHECK(kills == rounds && rounds > 0);
    CHECK(corrupt_stores == 0);
    CHECK(lost_writes == 0);
}

TEST(writes_killed_mid_write) {
    kill_rounds(0);
    CHECK(committed_writes > 0);
}
TEST(secret_change_killed_midway) { kill_rounds(1); }
TEST(upgrade_killed_midway) { kill_rounds(2); }

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char file[700];
    snprintf(dir, sizeof dir, "%s/store-kill-%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %1$s && mkdir -p %1$s && scripts/test-pki.sh %1$s/pki >/dev/null", dir);
    t_sh(cmd);
    mtls_store_options_init(&opts, MTLS_STORE_OPTIONS_VERSION);
    opts.busy_timeout_ms = 60000;
    memset(keys[0], 0x11, 32);
    memset(keys[1], 0x22, 32);
    memcpy(fixture_key, "libmtls-store-fixture-key-32byte", 32);
    char *pems[2]; const char *names[2] = { "client-a-chain.pem", "client-a.key" };
    for (int i = 0; i < 2; i++) {
        size_t len; snprintf(file, sizeof file, "%s/pki/%s", dir, names[i]);
        pems[i] = (char *)t_read_file(file, &len); pems[i][len] = 0;
    }
    CHECK_OK(mtls_identity_from_pem(pems[0], pems[1], NULL, &ident));
    free(pems[0]); free(pems[1]);
    CHECK_OK(mtls_identity_leaf(ident, &cert));

    /* The stores: one written to, one whose secret changes (BASE_ROWS rows, keys to re-seal). */
    snprintf(wpath, sizeof wpath, "%s/writes.db", dir);
    snprintf(cpath, sizeof cpath, "%s/secret.db", dir);
    snprintf(upath, sizeof upath, "%s/upgrade.db", dir);
    for (int p = 0; p < 2; p++) {
        mtls_store *s = NULL;
        CHECK_OK(rc_open(p ? cpath : wpath, keys[0], &s));
        for (int i = 0; i < BASE_ROWS; i++) {
            char label[32];
            snprintf(label, sizeof label, "base-%d", i);
            if (i % 4 == 0) CHECK_OK(mtls_store_put_identity(s, label, ident, 0));
            else CHECK_OK(mtls_store_put_cert(s, label, cert, 0));
        }
        mtls_store_close(s);
    }
    srand((unsigned)time(NULL) ^ (unsigned)getpid());

    RUN(writes_killed_mid_write);
    RUN(secret_change_killed_midway);
    RUN(upgrade_killed_midway);
    mtls_cert_free(cert);
    mtls_identity_free(ident);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd);
    DONE();
}
