/* Token identities in the field, through the C ABI, on SoftHSM2 tokens made here by
 * scripts/softhsm-token.sh: a token removed while the identity is loaded (its directory moved
 * away) gives MTLS_E_TOKEN_REMOVED on the next handshake and works again, in the same process,
 * once it is back; an identity loaded before fork() signs in the child (which must initialise
 * the module again) and in the parent after it. Every handshake is against openssl s_server
 * requiring a client certificate, so it succeeds only if the token signed. */
#define _DEFAULT_SOURCE
#include "s_server_support.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[400];

static mtls_policy *policy;

/* One handshake with `identity` (TLS 1.2, where the client signs inside the handshake);
 * returns its status. */
static int handshake(mtls_identity *identity) {
    int port = 0;
    pid_t server = start_server(dir, "", &port);
    mtls_conn_options opts;
    CHECK_OK(mtls_conn_options_init(&opts, MTLS_CONN_OPTIONS_VERSION));
    opts.identity = identity;
    opts.policy = policy;
    opts.max_tls = MTLS_TLS_1_2;
    opts.no_session_resumption = 1;
    opts.handshake_timeout_ms = 10000;
    mtls_conn *conn = NULL;
    int rc = mtls_conn_connect("127.0.0.1", (uint16_t)port, &opts, &conn);
    mtls_conn_free(conn);
    /* The server (-naccept 1) ends once it is done with this connection; it is ended if it has
     * not within 2 s (a handshake it never finished). */
    for (int i = 0; i < 200; i++) {
        if (waitpid(server, NULL, WNOHANG) == server) return rc;
        poll(NULL, 0, 10);
    }
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    return rc;
}

/* What the tests share: the tokens' folder (above), the policy, and the identity loaded by the
 * first test, which the others use in order. */
static char cmd[2048], uri[1500];
static mtls_identity *id = NULL;

TEST(pin_source_identity_handshake) {
    /* The PIN from a file named in the URI: a static source libmtls may use again to log in
     * after the token comes back. */
    snprintf(uri, sizeof uri, "pkcs11:token=mtls-test;id=%%02?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:%s/pin", dir);
    CHECK_OK(mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &id));
    CHECK_OK(handshake(id));
}

TEST(token_removed_then_back) {
    /* ---- the token goes away while the identity is loaded */
    snprintf(cmd, sizeof cmd, "cd %s && t=$(dirname $(grep -l mtls-test tokens/*/token.object)) && mv $t away && echo $t > away.name", dir);
    t_sh(cmd);
    CHECK_RC(handshake(id), MTLS_E_TOKEN_REMOVED);
    CHECK(strstr(mtls_last_error(), "mtls-test") != NULL);
    CHECK_RC(handshake(id), MTLS_E_TOKEN_REMOVED); /* still away: still removed, no crash */
    /* ---- and comes back: the same identity works, no restart */
    snprintf(cmd, sizeof cmd, "cd %s && mv away $(cat away.name)", dir);
    t_sh(cmd);
    CHECK_OK(handshake(id));
    CHECK_OK(handshake(id));
}

TEST(fork_child_signs) {
    /* ---- fork(): the child signs with the identity its parent loaded */
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        int rc = handshake(id);
        if (rc != MTLS_OK) fprintf(stderr, "child: %d %s\n", rc, mtls_last_error());
        _exit(rc == MTLS_OK ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the parent's identity still works after its child used it */
    CHECK_OK(handshake(id));
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char conf[600];
    snprintf(dir, sizeof dir, "%s/field-hsm", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf %s && scripts/softhsm-token.sh %s", dir, dir);
    t_sh(cmd);
    snprintf(conf, sizeof conf, "%s/softhsm2.conf", dir);
    setenv("SOFTHSM2_CONF", conf, 1);
    mtls_cert **ca = NULL;
    size_t n = 0;
    snprintf(cmd, sizeof cmd, "%s/ca.pem", dir);
    CHECK_OK(mtls_cert_list_load(cmd, &ca, &n));
    CHECK_OK(mtls_policy_new(&policy));
    CHECK_OK(mtls_policy_add_anchor(policy, ca[0]));
    CHECK_OK(mtls_policy_set_anchors_only(policy, 1));
    mtls_cert_list_free(ca, n);

    RUN(pin_source_identity_handshake);
    RUN(token_removed_then_back);
    RUN(fork_child_signs);

    mtls_identity_free(id);
    mtls_conn_cache_clear();
    mtls_policy_free(policy);
    (void)t_read_file;
    DONE();
}
