/* test-c links: libssl libcrypto */
/* Who may connect (issue 39), through the C ABI: allow-lists on the peer's certificate
 * (mtls_policy_allow_add and friends), judged inside the one trust decision, so an evaluation,
 * an application's SSL_CTX configured with mtls_ssl_ctx_configure and a libmtls client
 * connection all refuse the same peer with reason "not_allowed". PKI: scripts/test-pki.sh --allow. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

static mtls_cert **load_chain(const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", pki, name);
    mtls_cert **certs = NULL;
    CHECK_OK(mtls_cert_list_load(path, &certs, n));
    return certs;
}

/* A client policy trusting both roots of the allow PKI, no name check. */
static mtls_policy *client_policy(void) {
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_new(&p));
    const char *roots[] = { "root.pem", "root-2.pem" };
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        mtls_cert **c = load_chain(roots[i], &n);
        CHECK_OK(mtls_policy_add_anchor(p, c[0]));
        mtls_cert_list_free(c, n);
    }
    CHECK_OK(mtls_policy_set_name_check(p, 0));
    return p;
}

/* Evaluates NAME-chain.pem as a client; returns 1 when trusted. *reason gets the first reason
 * code and *message its message (both "" when trusted). */
static int judge(mtls_policy *p, const char *name, char *reason, size_t rlen, char *message, size_t mlen) {
    char file[256];
    snprintf(file, sizeof file, "%s-chain.pem", name);
    size_t n = 0;
    mtls_cert **chain = load_chain(file, &n);
    mtls_trust_result *r = NULL;
    CHECK_OK(mtls_evaluate(p, chain, n, NULL, MTLS_PURPOSE_CLIENT, 0, &r));
    int trusted = 0;
    CHECK_OK(mtls_trust_result_trusted(r, &trusted));
    mtls_trust_reason *reasons = NULL;
    size_t count = 0;
    CHECK_OK(mtls_trust_result_reasons(r, &reasons, &count));
    snprintf(reason, rlen, "%s", count ? reasons[0].code : "");
    snprintf(message, mlen, "%s", count ? reasons[0].message : "");
    mtls_trust_reason_list_free(reasons, count);
    mtls_trust_result_free(r);
    mtls_cert_list_free(chain, n);
    return trusted;
}

TEST(each_kind_accepts_one_client_and_refuses_another) {
    size_t n = 0;
    mtls_cert **alice = load_chain("alice.pem", &n);
    char *pin = NULL;
    CHECK_OK(mtls_cert_spki_pin(alice[0], &pin));
    mtls_cert_list_free(alice, n);
    struct { int kind; const char *pattern; const char *refused; const char *says; } cases[] = {
        { MTLS_ALLOW_CN, "alice", "bob", "CN \"bob\" matches no --allow-cn" },
        { MTLS_ALLOW_OU, "eng", "bob", "match no --allow-ou" },
        { MTLS_ALLOW_DNS, "*.SVC.example", "bob", "DNS SANs [bob.other.example] match no --allow-dns" },
        { MTLS_ALLOW_URI, "spiffe://example.org/ns/*/sa/**", "bob", "URI SANs [spiffe://other.org/ns/prod/sa/bob] match no --allow-uri" },
        { MTLS_ALLOW_SPKI, pin, "bob", "matches no --allow-spki" },
    };
    char reason[64], message[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mtls_policy *p = client_policy();
        CHECK_OK(mtls_policy_allow_add(p, cases[i].kind, cases[i].pattern));
        CHECK(judge(p, "alice", reason, sizeof reason, message, sizeof message) == 1);
        CHECK(judge(p, cases[i].refused, reason, sizeof reason, message, sizeof message) == 0);
        CHECK(strcmp(reason, "not_allowed") == 0);
        CHECK(strstr(message, cases[i].says) != NULL);
        CHECK(strstr(message, "the client certificate is not allowed by the policy's allow-list") != NULL);
        mtls_policy_free(p);
    }
    mtls_string_free(pin);

    /* Issuer: only chains ending at root-2 (carol's), as a certificate handle. */
    mtls_policy *p = client_policy();
    mtls_cert **root2 = load_chain("root-2.pem", &n);
    CHECK_OK(mtls_policy_allow_add_issuer(p, NULL, root2[0]));
    mtls_cert_list_free(root2, n);
    CHECK(judge(p, "carol", reason, sizeof reason, message, sizeof message) == 1);
    CHECK(judge(p, "alice", reason, sizeof reason, message, sizeof message) == 0);
    CHECK(strcmp(reason, "not_allowed") == 0 && strstr(message, "anchor \"Allow Root\"") != NULL);
    mtls_policy_free(p);
}

TEST(patterns_are_checked_when_added) {
    mtls_policy *p = client_policy();
    CHECK_RC(mtls_policy_allow_add(p, MTLS_ALLOW_URI, "spiffe://*.example.org/x"), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "trust domain") != NULL);
    CHECK_RC(mtls_policy_allow_add(p, MTLS_ALLOW_DNS, "a*.example"), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_allow_add(p, MTLS_ALLOW_CN, ""), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_allow_add(p, MTLS_ALLOW_SPKI, "sha256/nope"), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_allow_add(p, MTLS_ALLOW_ISSUER, "not a fingerprint"), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_allow_add(p, 99, "x"), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_allow_add(p, MTLS_ALLOW_CN, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_allow_add(NULL, MTLS_ALLOW_CN, "x"), MTLS_E_INVALID_ARGUMENT);
    /* Nothing was added by the refusals; a repeated entry is kept once. */
    char **out = NULL;
    size_t count = 0;
    CHECK_OK(mtls_policy_allow_patterns(p, NULL, MTLS_ALLOW_URI, &out, &count));
    CHECK(count == 0);
    mtls_string_list_free(out, count);
    CHECK_OK(mtls_policy_allow_add(p, MTLS_ALLOW_CN, "alice"));
    CHECK_OK(mtls_policy_allow_add(p, MTLS_ALLOW_CN, "alice"));
    CHECK_OK(mtls_policy_allow_patterns(p, NULL, MTLS_ALLOW_CN, &out, &count));
    CHECK(count == 1 && strcmp(out[0], "alice") == 0);
    mtls_string_list_free(out, count);
    /* A host rule's own list. */
    CHECK_OK(mtls_policy_rule_allow_add(p, "server.test", MTLS_ALLOW_URI, "spiffe://example.org/ns/prod/sa/server"));
    CHECK_OK(mtls_policy_allow_patterns(p, "server.test", MTLS_ALLOW_URI, &out, &count));
    CHECK(count == 1 && strcmp(out[0], "spiffe://example.org/ns/prod/sa/server") == 0);
    mtls_string_list_free(out, count);
    CHECK_RC(mtls_policy_rule_allow_add(p, "server.test", MTLS_ALLOW_URI, "spiffe://example.org/a*"), MTLS_E_INVALID_POLICY);
    mtls_policy_free(p);
}

TEST(policy_file_allow) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"anchors\": [\"%s/root.pem\"], \"purpose\": \"client\", \"name_check\": \"none\","
             " \"allow\": {\"uri\": [\"spiffe://example.org/ns/*/sa/**\"]}}", pki);
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_from_json(json, &p));
    char reason[64], message[1024];
    CHECK(judge(p, "alice", reason, sizeof reason, message, sizeof message) == 1);
    CHECK(judge(p, "bob", reason, sizeof reason, message, sizeof message) == 0 && strcmp(reason, "not_allowed") == 0);
    mtls_policy_free(p);
    CHECK_RC(mtls_policy_from_json("{\"allow\": {\"uri\": [\"spiffe://*/x\"]}}", &p), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "allow.uri") != NULL);
}

/* ------------------------------------------------ an application's SSL_CTX judging clients */

struct app_server {
    SSL_CTX *ctx;
    int listen_fd;
    uint16_t port;
    pthread_t thread;
    int accepted; /* 1: the handshake succeeded, 0: refused, -1: not yet */
};

static void *serve_one(void *arg) {
    struct app_server *s = arg;
    int fd = accept(s->listen_fd, NULL, NULL);
    int ok = 0;
    if (fd >= 0) {
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        ok = SSL_accept(ssl) == 1;
        if (ok) {
            char buf[8];
            if (SSL_read(ssl, buf, sizeof buf) > 0) SSL_write(ssl, "pong", 4);
            SSL_shutdown(ssl);
        }
        ERR_clear_error();
        SSL_free(ssl);
        close(fd);
    }
    __atomic_store_n(&s->accepted, ok, __ATOMIC_RELEASE);
    return NULL;
}

static void app_server_start(struct app_server *s, mtls_identity *id, mtls_policy *clients) {
    memset(s, 0, sizeof *s);
    s->accepted = -1;
    s->ctx = SSL_CTX_new(TLS_server_method());
    CHECK(s->ctx != NULL);
    SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    CHECK_OK(mtls_ssl_ctx_configure(s->ctx, id, clients, 1));
    s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(s->listen_fd, 4) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(s->listen_fd, (struct sockaddr *)&a, &len) == 0);
    s->port = ntohs(a.sin_port);
    CHECK(pthread_create(&s->thread, NULL, serve_one, s) == 0);
}

static int app_server_finish(struct app_server *s) {
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    SSL_CTX_free(s->ctx);
    return s->accepted;
}

/* A libmtls client presenting NAME (its chain) to 127.0.0.1:port, validating server.test. */
static int ping(uint16_t port, const char *name, mtls_policy *server_policy) {
    mtls_identity *id = identity(name, strcmp(name, "carol") == 0 ? "root-2.pem" : "root.pem");
    mtls_conn_options o;
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.identity = id;
    o.policy = server_policy;
    o.verify_as = "server.test";
    mtls_conn *c = NULL;
    int rc = mtls_conn_connect("127.0.0.1", port, &o, &c);
    if (rc == MTLS_OK) {
        size_t n = 0;
        uint8_t buf[8];
        rc = mtls_conn_write(c, (const uint8_t *)"ping", 4, &n);
        if (rc == MTLS_OK) rc = mtls_conn_read(c, buf, sizeof buf, &n);
    }
    mtls_conn_free(c);
    mtls_identity_free(id);
    return rc;
}

TEST(ssl_ctx_configure_judges_clients_by_the_allow_list) {
    mtls_identity *server = identity("server", "root.pem");
    mtls_policy *clients = client_policy();
    CHECK_OK(mtls_policy_allow_add(clients, MTLS_ALLOW_URI, "spiffe://example.org/ns/prod/sa/**"));
    mtls_policy *servers = anchored("root.pem");
    struct app_server s;

    app_server_start(&s, server, clients);
    CHECK_OK(ping(s.port, "alice", servers));
    CHECK(app_server_finish(&s) == 1);

    app_server_start(&s, server, clients);
    CHECK(ping(s.port, "bob", servers) != MTLS_OK);
    CHECK(app_server_finish(&s) == 0);

    /* Carol is trusted (root-2 is an anchor) but her URI is under ns/dev. */
    app_server_start(&s, server, clients);
    CHECK(ping(s.port, "carol", servers) != MTLS_OK);
    CHECK(app_server_finish(&s) == 0);

    mtls_policy_free(servers);
    mtls_policy_free(clients);
    mtls_identity_free(server);
}

TEST(a_client_connection_judges_the_server_by_the_allow_list) {
    mtls_identity *server = identity("server", "root.pem");
    mtls_policy *clients = client_policy();
    mtls_policy *servers = anchored("root.pem");
    CHECK_OK(mtls_policy_allow_add(servers, MTLS_ALLOW_URI, "spiffe://example.org/ns/prod/sa/server"));
    struct app_server s;
    app_server_start(&s, server, clients);
    CHECK_OK(ping(s.port, "alice", servers));
    CHECK(app_server_finish(&s) == 1);
    mtls_policy_free(servers);

    servers = anchored("root.pem");
    CHECK_OK(mtls_policy_allow_add(servers, MTLS_ALLOW_URI, "spiffe://example.org/ns/prod/sa/other"));
    app_server_start(&s, server, clients);
    CHECK_RC(ping(s.port, "alice", servers), MTLS_E_UNTRUSTED);
    CHECK(strstr(mtls_last_error(), "not_allowed") != NULL || strstr(mtls_last_error(), "not allowed") != NULL);
    app_server_finish(&s);
    mtls_policy_free(servers);
    mtls_policy_free(clients);
    mtls_identity_free(server);
}

int main(void) {
    make_pki_shape("--allow", "allow-pki");
    RUN(each_kind_accepts_one_client_and_refuses_another);
    RUN(patterns_are_checked_when_added);
    RUN(policy_file_allow);
    RUN(ssl_ctx_configure_judges_clients_by_the_allow_list);
    RUN(a_client_connection_judges_the_server_by_the_allow_list);
    DONE();
}
