/* Connections through the C ABI: client, listener, automatic identity, non-blocking, a wrapped
 * socket, a bring-your-own SSL_CTX, errors; every function with NULL arguments too. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

/* A report callback that ignores reports, and the count of its userdata's destroy calls. */
static int report_destroyed = 0;
static void ignore_report(const char *host, const char *rule, const char *code, const char *message, void *userdata) {
    (void)host; (void)rule; (void)code; (void)message; (void)userdata;
}
static void count_report_destroy(void *userdata) {
    CHECK(userdata == &report_destroyed);
    report_destroyed++;
}

/* The server side: accepts `count` clients, echoing each one's first message; records codes. */
struct server { mtls_listener *listener; int count; int codes[8]; char cn[8][64]; int resumed[8]; };

static void *serve(void *arg) {
    struct server *s = arg;
    for (int i = 0; i < s->count; i++) {
        mtls_conn *c = NULL;
        s->codes[i] = mtls_listener_accept(s->listener, 10000, &c);
        if (s->codes[i] != MTLS_OK) continue;
        mtls_conn_resumed(c, &s->resumed[i]);
        mtls_trust_result *ev = NULL;
        int trusted = 0;
        if (mtls_conn_evaluation(c, &ev) == MTLS_OK && ev) mtls_trust_result_trusted(ev, &trusted);
        mtls_trust_result_free(ev);
        mtls_cert **chain = NULL; size_t n = 0;
        if (mtls_conn_peer_chain(c, &chain, &n) == MTLS_OK && n > 0) {
            char *cn = NULL;
            mtls_cert_subject_summary(chain[0], &cn);
            snprintf(s->cn[i], sizeof s->cn[i], "%s%s", cn ? cn : "", trusted ? "" : "(untrusted)");
            mtls_string_free(cn);
        }
        mtls_cert_list_free(chain, n);
        uint8_t buf[256]; size_t got = 0, put = 0;
        if (mtls_conn_read(c, buf, sizeof buf, &got) == MTLS_OK && got > 0) mtls_conn_write(c, buf, got, &put);
        mtls_conn_shutdown(c);
        mtls_conn_free(c);
    }
    return NULL;
}

static void echo_once(mtls_conn *c) {
    size_t n = 0;
    CHECK_OK(mtls_conn_write(c, (const uint8_t *)"ping", 4, &n));
    CHECK(n == 4);
    uint8_t buf[16];
    CHECK_OK(mtls_conn_read(c, buf, sizeof buf, &n));
    CHECK(n == 4 && memcmp(buf, "ping", 4) == 0);
}

/* What the tests share, made once in main or by options_and_listener: the test PKI's identities
 * and policies, and the first listener (its port, options and serving thread), which the client
 * tests after it connect to in order, until another_customers_client_refused joins it. */
static mtls_identity *server_id, *client_a, *client_b;
static mtls_policy *server_policy, *client_policy, *wrong;
static mtls_conn_options o;
static mtls_listener_options lo;
static mtls_listener *l = NULL;
static uint16_t port = 0;
static struct server srv;
static pthread_t th;
/* OpenSSL reached through dlopen (application_ssl_ctx), also used by the tests after it. */
static void *libssl;
static void *(*tls_method)(void);
static void *(*ctx_new)(const void *);
static void (*ctx_free)(void *);

TEST(options_and_listener) {
    /* ---- options */
    CHECK_RC(mtls_conn_options_init(NULL, MTLS_CONN_OPTIONS_VERSION), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_options_init(&o, 99), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    CHECK(o.version == MTLS_CONN_OPTIONS_VERSION && o.min_tls == MTLS_TLS_1_2 && o.max_tls == MTLS_TLS_1_3);
    o.verify_as = "server.test";
    o.identity = client_a;
    o.policy = server_policy;
    o.alpn = "echo/1, http/1.1";
    o.handshake_timeout_ms = 10000;
    o.io_timeout_ms = 10000;

    CHECK_RC(mtls_listener_options_init(NULL, MTLS_LISTENER_OPTIONS_VERSION), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_listener_options_init(&lo, 7), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    CHECK(lo.client_auth == MTLS_CLIENT_AUTH_REQUIRE);
    CHECK(lo.no_session_tickets == 0); /* tickets by default */
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, &lo, &l), MTLS_E_INVALID_ARGUMENT); /* no identity */
    CHECK(l == NULL);
    lo.identity = server_id;
    lo.client_policy = client_policy;
    lo.alpn = "echo/1";
    lo.client_auth = 9;
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, &lo, &l), MTLS_E_INVALID_ARGUMENT);
    lo.client_auth = MTLS_CLIENT_AUTH_REQUIRE;
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, NULL, &l), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, &lo, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    CHECK_RC(mtls_listener_port(NULL, &port), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_listener_port(l, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_listener_port(l, &port));
    CHECK(port > 0);
    mtls_conn *none = NULL;
    CHECK_RC(mtls_listener_accept(NULL, 0, &none), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_listener_accept(l, 0, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_listener_accept(l, 10, &none), MTLS_E_TIMEOUT);

    /* The server accepts: A (blocking), A (wrapped fd), A (non-blocking), A (automatic), then
     * refuses B (another customer's intermediate). */
    srv.listener = l;
    srv.count = 5;
    pthread_create(&th, NULL, serve, &srv);
}

TEST(blocking_client) {
    /* ---- blocking client */
    mtls_conn *c = NULL;
    CHECK_RC(mtls_conn_connect(NULL, port, &o, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_connect("127.0.0.1", port, &o, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    char *s = NULL;
    CHECK_OK(mtls_conn_tls_version(c, &s)); CHECK(strcmp(s, "TLSv1.3") == 0); mtls_string_free(s);
    CHECK_RC(mtls_conn_tls_version(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_tls_version(c, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_alpn(c, &s)); CHECK(s && strcmp(s, "echo/1") == 0); mtls_string_free(s);
    CHECK_RC(mtls_conn_alpn(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_alpn(c, NULL), MTLS_E_INVALID_ARGUMENT);
    int resumed = -1;
    CHECK_OK(mtls_conn_resumed(c, &resumed)); CHECK(resumed == 0);
    CHECK_RC(mtls_conn_resumed(NULL, &resumed), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_resumed(c, NULL), MTLS_E_INVALID_ARGUMENT);
    /* The policy that judged the server has not changed since (issue 35 item 13: pools drop a
     * kept-alive connection once it has; Tests/MTLSTests and the Python adapters test that). */
    int changed = -1;
    CHECK_OK(mtls_conn_policy_changed(c, &changed)); CHECK(changed == 0);
    CHECK_RC(mtls_conn_policy_changed(NULL, &changed), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_policy_changed(c, NULL), MTLS_E_INVALID_ARGUMENT);
    int fd = -1;
    CHECK_OK(mtls_conn_fd(c, &fd)); CHECK(fd >= 0);
    CHECK_RC(mtls_conn_fd(NULL, &fd), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_fd(c, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_cert **chain = NULL; size_t n = 0;
    CHECK_OK(mtls_conn_peer_chain(c, &chain, &n)); CHECK(n == 2);
    CHECK_OK(mtls_cert_subject_summary(chain[0], &s)); CHECK(strcmp(s, "server.test") == 0); mtls_string_free(s);
    mtls_cert_list_free(chain, n);
    CHECK_RC(mtls_conn_peer_chain(NULL, &chain, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_peer_chain(c, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    mtls_trust_result *ev = NULL;
    int trusted = 0;
    CHECK_OK(mtls_conn_evaluation(c, &ev)); CHECK(ev != NULL);
    CHECK_OK(mtls_trust_result_trusted(ev, &trusted)); CHECK(trusted == 1);
    mtls_trust_result_free(ev);
    CHECK_RC(mtls_conn_evaluation(NULL, &ev), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_evaluation(c, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_identity *presented = NULL;
    CHECK_OK(mtls_conn_presented_identity(c, &presented)); CHECK(presented != NULL);
    mtls_identity_free(presented);
    CHECK_RC(mtls_conn_presented_identity(NULL, &presented), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_presented_identity(c, NULL), MTLS_E_INVALID_ARGUMENT);
    uint8_t buf[16];
    CHECK_RC(mtls_conn_write(NULL, (const uint8_t *)"x", 1, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_write(c, NULL, 1, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_write(c, (const uint8_t *)"x", 1, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_read(NULL, buf, sizeof buf, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_read(c, NULL, sizeof buf, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_read(c, buf, sizeof buf, NULL), MTLS_E_INVALID_ARGUMENT);
    echo_once(c);
    CHECK_OK(mtls_conn_read(c, buf, sizeof buf, &n)); CHECK(n == 0); /* the server closed */
    CHECK_RC(mtls_conn_shutdown(NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_shutdown(c));
    CHECK_RC(mtls_conn_handshake(NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_handshake(c)); /* already done */
    mtls_conn_free(c);
    mtls_conn_free(NULL);
}

TEST(caller_owned_socket) {
    mtls_conn *c = NULL;
    /* ---- a socket the caller owns */
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(sock, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK_RC(mtls_conn_wrap_fd(-1, "127.0.0.1", port, &o, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_wrap_fd(sock, NULL, port, &o, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_wrap_fd(sock, "127.0.0.1", port, &o, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_wrap_fd(sock, "127.0.0.1", port, &o, &c));
    echo_once(c);
    mtls_conn_free(c);
    CHECK(close(sock) == 0); /* still ours to close */
}

TEST(non_blocking_client) {
    mtls_conn *c = NULL;
    int fd = -1;
    size_t n = 0;
    uint8_t buf[16];
    /* ---- non-blocking */
    o.non_blocking = 1;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    int rc, rounds = 0;
    CHECK_OK(mtls_conn_fd(c, &fd));
    while ((rc = mtls_conn_handshake(c)) != MTLS_OK) {
        CHECK(rc == MTLS_E_WANT_READ || rc == MTLS_E_WANT_WRITE);
        struct pollfd p = { .fd = fd, .events = rc == MTLS_E_WANT_READ ? POLLIN : POLLOUT };
        poll(&p, 1, 5000);
        CHECK(++rounds < 100);
    }
    CHECK_OK(mtls_conn_write(c, (const uint8_t *)"ping", 4, &n));
    while ((rc = mtls_conn_read(c, buf, sizeof buf, &n)) == MTLS_E_WANT_READ) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        poll(&p, 1, 5000);
    }
    CHECK_OK(rc); CHECK(n == 4);
    mtls_conn_free(c);
    o.non_blocking = 0;
}

TEST(automatic_identity) {
    mtls_conn *c = NULL;
    mtls_identity *presented = NULL;
    char *s = NULL;
    /* ---- automatic identity: B does not match the server's CA list, A does */
    mtls_identity *candidates[2] = { client_b, client_a };
    o.identity = NULL;
    o.candidates = candidates;
    o.candidate_count = 2;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    CHECK_OK(mtls_conn_presented_identity(c, &presented));
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(presented, &leaf));
    CHECK_OK(mtls_cert_subject_summary(leaf, &s)); CHECK(strcmp(s, "client-a") == 0); mtls_string_free(s);
    mtls_cert_free(leaf); mtls_identity_free(presented);
    echo_once(c);
    mtls_conn_free(c);
    o.candidates = NULL; o.candidate_count = 0;
}

TEST(another_customers_client_refused) {
    mtls_conn *c = NULL;
    size_t n = 0;
    uint8_t buf[16];
    /* ---- another customer's client: the server refuses it (TLS 1.3: on our first read) */
    o.identity = client_b;
    CHECK_OK(mtls_conn_connect("127.0.0.1", port, &o, &c));
    CHECK_OK(mtls_conn_write(c, (const uint8_t *)"ping", 4, &n));
    CHECK_RC(mtls_conn_read(c, buf, sizeof buf, &n), MTLS_E_PEER_ALERT);
    CHECK(strstr(mtls_last_error(), "alert") != NULL);
    mtls_conn_free(c);
    o.identity = client_a;

    pthread_join(th, NULL);
    for (int i = 0; i < 4; i++) { CHECK_OK(srv.codes[i]); CHECK(strcmp(srv.cn[i], "client-a") == 0); }
    /* The first client got a full handshake; client-a came back with its ticket and resumed,
     * and the listener still reports the evaluation (trusted, its CN) for it. */
    CHECK(srv.resumed[0] == 0);
    CHECK(srv.resumed[1] + srv.resumed[2] + srv.resumed[3] >= 1);
    CHECK_RC(srv.codes[4], MTLS_E_UNTRUSTED);
    mtls_listener_free(l);
    mtls_listener_free(NULL);
}

TEST(connect_errors) {
    mtls_conn *c = NULL;
    mtls_trust_result *ev = NULL;
    int trusted = 0;
    mtls_cert **chain = NULL;
    size_t n = 0;
    /* ---- errors: refused, untrusted (with the evaluation after a failed handshake), options */
    CHECK_RC(mtls_conn_connect("127.0.0.1", port, &o, &c), MTLS_E_CONNECT);
    lo.client_auth = MTLS_CLIENT_AUTH_NONE;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &l));
    CHECK_OK(mtls_listener_port(l, &port));
    struct server srv2 = { .listener = l, .count = 1 };
    pthread_create(&th, NULL, serve, &srv2);
    wrong = anchored("other-root.pem");
    o.policy = wrong;
    CHECK_RC(mtls_conn_open(NULL, port, &o, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_open("127.0.0.1", port, &o, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_conn_open("127.0.0.1", port, &o, &c));
    CHECK_RC(mtls_conn_handshake(c), MTLS_E_UNTRUSTED);
    CHECK(strstr(mtls_last_error(), "our evaluation") != NULL);
    CHECK_OK(mtls_conn_evaluation(c, &ev)); CHECK(ev != NULL);
    CHECK_OK(mtls_trust_result_trusted(ev, &trusted)); CHECK(trusted == 0);
    size_t reasons = 0; mtls_trust_reason *rl = NULL;
    CHECK_OK(mtls_trust_result_reasons(ev, &rl, &reasons)); CHECK(reasons > 0);
    mtls_trust_reason_list_free(rl, reasons);
    mtls_trust_result_free(ev);
    CHECK_OK(mtls_conn_peer_chain(c, &chain, &n)); CHECK(n == 2); mtls_cert_list_free(chain, n);
    mtls_conn_free(c);
    pthread_join(th, NULL);
    mtls_listener_free(l);
    o.policy = server_policy;
    o.min_tls = 11;
    CHECK_RC(mtls_conn_connect("127.0.0.1", port, &o, &c), MTLS_E_INVALID_ARGUMENT);
    o.min_tls = MTLS_TLS_1_2;
    o.version = 99;
    CHECK_RC(mtls_conn_connect("127.0.0.1", port, &o, &c), MTLS_E_INVALID_ARGUMENT);
    o.version = MTLS_CONN_OPTIONS_VERSION;
}

TEST(application_ssl_ctx) {
    /* ---- bring your own SSL_CTX (OpenSSL reached through dlopen: this test links only libmtls) */
    libssl = dlopen("libssl.so.3", RTLD_NOW);
    CHECK(libssl != NULL);
    tls_method = (void *(*)(void))dlsym(libssl, "TLS_method");
    ctx_new = (void *(*)(const void *))dlsym(libssl, "SSL_CTX_new");
    ctx_free = (void (*)(void *))dlsym(libssl, "SSL_CTX_free");
    CHECK(tls_method && ctx_new && ctx_free);
    void *ctx = ctx_new(tls_method());
    CHECK(ctx != NULL);
    CHECK_RC(mtls_ssl_ctx_configure(NULL, client_a, server_policy, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_ssl_ctx_configure(ctx, client_a, server_policy, 0));
    /* A context that accepts clients needs client anchors (never the system store by default). */
    CHECK_RC(mtls_ssl_ctx_configure(ctx, NULL, NULL, 1), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "client anchors") != NULL);
    CHECK_OK(mtls_ssl_ctx_configure(ctx, NULL, client_policy, 1)); /* replaces the first configuration */
    /* The peer of each SSL (and of every SSL of a context), as libcurl's callback would set it. */
    void *(*ssl_new)(void *) = (void *(*)(void *))dlsym(libssl, "SSL_new");
    void (*ssl_free)(void *) = (void (*)(void *))dlsym(libssl, "SSL_free");
    CHECK(ssl_new && ssl_free);
    void *ssl = ssl_new(ctx);
    CHECK(ssl != NULL);
    CHECK_RC(mtls_ssl_set_peer(NULL, "127.0.0.1", 8443, "server.test"), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_ssl_set_peer(ssl, NULL, 8443, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_ssl_set_peer(ssl, "", 8443, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_ssl_set_peer(ssl, "127.0.0.1", 8443, ""), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_ssl_set_peer(ssl, "127.0.0.1", 8443, "server.test"));
    CHECK_OK(mtls_ssl_set_peer(ssl, "[::1]", 0, NULL)); /* replaces it */
    ssl_free(ssl);
    CHECK_RC(mtls_ssl_ctx_set_peer(NULL, "127.0.0.1", 8443, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_ssl_ctx_set_peer(ctx, NULL, 8443, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_ssl_ctx_set_peer(ctx, "127.0.0.1", 8443, "server.test"));
    CHECK_OK(mtls_ssl_ctx_set_peer(ctx, "server.test", 443, NULL)); /* replaces it */
    ctx_free(ctx);
}

TEST(one_effective_policy) {
    /* ---- one effective policy (issue 23): policy-wide pins on a listener's client policy,
       listener and connection overrides, options of version 1 and 2, SSL_CTX overrides */
    {
        char *pin_b = NULL, *pin_a = NULL, *pin_root = NULL;
        mtls_cert **cb = NULL, **ca = NULL, **cr = NULL; size_t nb = 0, na = 0, nr = 0;
        char pth[1024];
        snprintf(pth, sizeof pth, "%s/int-b.pem", pki); CHECK_OK(mtls_cert_list_load(pth, &cb, &nb));
        snprintf(pth, sizeof pth, "%s/int-a.pem", pki); CHECK_OK(mtls_cert_list_load(pth, &ca, &na));
        snprintf(pth, sizeof pth, "%s/root.pem", pki); CHECK_OK(mtls_cert_list_load(pth, &cr, &nr));
        CHECK_OK(mtls_cert_spki_pin(cb[0], &pin_b));
        CHECK_OK(mtls_cert_spki_pin(ca[0], &pin_a));
        CHECK_OK(mtls_cert_spki_pin(cr[0], &pin_root));
        const char *pins_b[] = {pin_b}, *pins_a[] = {pin_a}, *wrong_pins[] = {"sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="};

        /* Every customer's clients chain to the root; the policy-wide pin admits customer B only. */
        mtls_policy *customers = anchored("root.pem");
        CHECK_OK(mtls_policy_set_pins(customers, pins_b, 1));
        mtls_listener_options lp;
        CHECK_OK(mtls_listener_options_init(&lp, MTLS_LISTENER_OPTIONS_VERSION));
        CHECK(lp.version == MTLS_LISTENER_OPTIONS_VERSION && lp.client_overrides == NULL);
        lp.identity = server_id;
        lp.client_policy = customers;
        lp.no_session_tickets = 1;
        mtls_listener *lw = NULL;
        CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lp, &lw));
        uint16_t pw = 0;
        CHECK_OK(mtls_listener_port(lw, &pw));
        struct server sw = { .listener = lw, .count = 2 };
        pthread_t tw;
        pthread_create(&tw, NULL, serve, &sw);
        mtls_conn_options oc;
        CHECK_OK(mtls_conn_options_init(&oc, MTLS_CONN_OPTIONS_VERSION));
        CHECK(oc.version == MTLS_CONN_OPTIONS_VERSION && oc.overrides == NULL && oc.identity_source == NULL);
        oc.verify_as = "server.test";
        oc.policy = server_policy;
        oc.handshake_timeout_ms = oc.io_timeout_ms = 10000;
        oc.identity = client_a;
        mtls_conn *cw = NULL;
        if (mtls_conn_connect("127.0.0.1", pw, &oc, &cw) == MTLS_OK) { /* TLS 1.3: refused on the first read */
            uint8_t b[8]; size_t got = 0, put = 0;
            mtls_conn_write(cw, (const uint8_t *)"ping", 4, &put);
            CHECK(mtls_conn_read(cw, b, sizeof b, &got) != MTLS_OK || got == 0);
            mtls_conn_free(cw);
        }
        oc.identity = client_b;
        CHECK_OK(mtls_conn_connect("127.0.0.1", pw, &oc, &cw));
        echo_once(cw);
        mtls_conn_free(cw);
        pthread_join(tw, NULL);
        /* The listener reports a refused handshake and a finished one in whichever order they end. */
        CHECK((sw.codes[0] == MTLS_E_UNTRUSTED && sw.codes[1] == MTLS_OK) ||
              (sw.codes[1] == MTLS_E_UNTRUSTED && sw.codes[0] == MTLS_OK));
        CHECK(strcmp(sw.cn[sw.codes[0] == MTLS_OK ? 0 : 1], "client-b") == 0);
        mtls_listener_free(lw);

        /* The same through the listener's overrides: a policy without pins, customer A pinned. */
        mtls_policy *open_policy = anchored("root.pem");
        mtls_trust_overrides lov;
        CHECK_OK(mtls_trust_overrides_init(&lov, MTLS_TRUST_OVERRIDES_VERSION));
        lov.pins = pins_a;
        lov.pin_count = 1;
        lp.client_policy = open_policy;
        lp.client_overrides = &lov;
        CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lp, &lw));
        CHECK_OK(mtls_listener_port(lw, &pw));
        struct server sw2 = { .listener = lw, .count = 5 };
        pthread_create(&tw, NULL, serve, &sw2);
        oc.identity = client_b;
        if (mtls_conn_connect("127.0.0.1", pw, &oc, &cw) == MTLS_OK) {
            uint8_t b[8]; size_t got = 0, put = 0;
            mtls_conn_write(cw, (const uint8_t *)"ping", 4, &put);
            CHECK(mtls_conn_read(cw, b, sizeof b, &got) != MTLS_OK || got == 0);
            mtls_conn_free(cw);
        }
        /* Client side: an override pin that matches nothing refuses the server; the same
           connection without it connects (sessions and evaluations are not shared across
           overrides), and a matching override pin connects with a full handshake. */
        oc.identity = client_a;
        mtls_trust_overrides cov;
        CHECK_OK(mtls_trust_overrides_init(&cov, MTLS_TRUST_OVERRIDES_VERSION));
        CHECK_OK(mtls_conn_connect("127.0.0.1", pw, &oc, &cw));
        echo_once(cw);
        mtls_conn_free(cw);
        cov.pins = wrong_pins;
        cov.pin_count = 1;
        oc.overrides = &cov;
        CHECK_RC(mtls_conn_connect("127.0.0.1", pw, &oc, &cw), MTLS_E_UNTRUSTED);
        cov.pins = (const char *const *)&pin_root;
        CHECK_OK(mtls_conn_connect("127.0.0.1", pw, &oc, &cw));
        int resumed = -1;
        CHECK_OK(mtls_conn_resumed(cw, &resumed));
        CHECK(resumed == 0);
        mtls_trust_result *ev2 = NULL;
        CHECK_OK(mtls_conn_evaluation(cw, &ev2));
        char *prov = NULL;
        CHECK_OK(mtls_trust_result_provenance(ev2, &prov));
        CHECK(prov && strstr(prov, "\"from\":\"override\",\"enforced\":true") != NULL);
        mtls_string_free(prov);
        mtls_trust_result_free(ev2);
        echo_once(cw);
        mtls_conn_free(cw);
        cov.pins = (const char *const *)"not a pin array";
        cov.pin_count = 0; /* a count of 0 reads no pin */
        cov.verify_as = "";
        CHECK_RC(mtls_conn_connect("127.0.0.1", pw, &oc, &cw), MTLS_E_INVALID_ARGUMENT);
        /* A program built with version 1 of the options: the fields after them are never read. */
        mtls_conn_options o1;
        memset(&o1, 0x5a, sizeof o1);
        CHECK_OK(mtls_conn_options_init(&o1, 1));
        CHECK(o1.version == 1 && o1.overrides == (const mtls_trust_overrides *)(uintptr_t)0x5a5a5a5a5a5a5a5aULL);
        o1.verify_as = "server.test";
        o1.policy = server_policy;
        o1.identity = client_a;
        o1.handshake_timeout_ms = o1.io_timeout_ms = 10000;
        CHECK_OK(mtls_conn_connect("127.0.0.1", pw, &o1, &cw));
        echo_once(cw);
        mtls_conn_free(cw);
        pthread_join(tw, NULL);
        /* Customer B refused (not pinned by the overrides), one handshake the client broke off
           (its override pin refused the server), three of customer A served; in any order. */
        int ok = 0, untrusted = 0, other_failures = 0;
        for (int i = 0; i < 5; i++) {
            if (sw2.codes[i] == MTLS_OK) { ok++; CHECK(strcmp(sw2.cn[i], "client-a") == 0); }
            else if (sw2.codes[i] == MTLS_E_UNTRUSTED) untrusted++;
            else other_failures++;
        }
        CHECK(ok == 3 && untrusted == 1 && other_failures == 1);
        mtls_listener_free(lw);
        mtls_listener_options l1;
        memset(&l1, 0x5a, sizeof l1);
        CHECK_OK(mtls_listener_options_init(&l1, 1));
        CHECK(l1.client_overrides == (const mtls_trust_overrides *)(uintptr_t)0x5a5a5a5a5a5a5a5aULL);
        l1.identity = server_id;
        l1.client_policy = open_policy;
        CHECK_OK(mtls_listener_new("127.0.0.1", 0, &l1, &lw));
        mtls_listener_free(lw);

        /* An application's SSL_CTX: override anchors count as client anchors. */
        void *cx = ctx_new(tls_method());
        CHECK(cx != NULL);
        mtls_policy *bare = NULL;
        CHECK_OK(mtls_policy_new(&bare));
        CHECK_RC(mtls_ssl_ctx_configure_overrides(cx, NULL, bare, 1, NULL), MTLS_E_INVALID_POLICY);
        mtls_trust_overrides xov;
        CHECK_OK(mtls_trust_overrides_init(&xov, MTLS_TRUST_OVERRIDES_VERSION));
        xov.anchors = ca;
        xov.anchor_count = 1;
        CHECK_RC(mtls_ssl_ctx_configure_overrides(NULL, NULL, bare, 1, &xov), MTLS_E_INVALID_ARGUMENT);
        CHECK_OK(mtls_ssl_ctx_configure_overrides(cx, NULL, bare, 1, &xov));
        xov.verify_as = "bad name";
        CHECK_RC(mtls_ssl_ctx_configure_overrides(cx, NULL, bare, 1, &xov), MTLS_E_INVALID_ARGUMENT);
        ctx_free(cx);
        mtls_policy_free(bare);

        mtls_policy_free(customers);
        mtls_policy_free(open_policy);
        mtls_string_free(pin_a); mtls_string_free(pin_b); mtls_string_free(pin_root);
        mtls_cert_list_free(ca, na); mtls_cert_list_free(cb, nb); mtls_cert_list_free(cr, nr);
    }
}

TEST(report_callback_outlives_policy) {
    /* ---- a report callback lives on inside what holds its policy after mtls_policy_free: its
       userdata's destroy runs when the last holder (a listener, an SSL_CTX) goes. */
    mtls_policy *held = anchored("int-a.pem");
    CHECK_OK(mtls_policy_set_report_callback(held, ignore_report, &report_destroyed, count_report_destroy));
    mtls_listener_options lo2;
    CHECK_OK(mtls_listener_options_init(&lo2, MTLS_LISTENER_OPTIONS_VERSION));
    lo2.identity = server_id;
    lo2.client_policy = held;
    mtls_listener *l2 = NULL;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo2, &l2));
    void *ctx2 = ctx_new(tls_method());
    CHECK(ctx2 != NULL);
    CHECK_OK(mtls_ssl_ctx_configure(ctx2, NULL, held, 1));
    mtls_policy_free(held);
    CHECK(report_destroyed == 0);
    mtls_listener_free(l2);
    CHECK(report_destroyed == 0); /* the SSL_CTX still holds the policy */
    ctx_free(ctx2);
    CHECK(report_destroyed == 1);
}

TEST(arguments_read_again_by_their_bytes) {
    /* ---- a client's host, SNI and verify-as are read again when their bytes change, even at
       the same address (libmtls keeps the last text read with its bytes, issue 40): a host
       rewritten in place is the new host, and bytes that became a port or stopped being UTF-8
       are refused. A socket that listens and never accepts is enough: open does not handshake. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lfd, 16) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
    uint16_t lport = ntohs(sa.sin_port);
    char host[32] = "127.0.0.1", sni[16] = "server.test", as[16] = "server.test";
    mtls_conn_options ao = o;
    ao.sni = sni;
    ao.verify_as = as;
    mtls_conn *c = NULL;
    CHECK_OK(mtls_conn_open(host, lport, &ao, &c));
    mtls_conn_free(c);
    CHECK_OK(mtls_conn_open(host, lport, &ao, &c)); /* the same bytes again */
    mtls_conn_free(c);
    memcpy(host, "127.0.0.2", 9); /* the same length, at the same address: nothing listens there */
    CHECK_RC(mtls_conn_open(host, lport, &ao, &c), MTLS_E_CONNECT);
    strcpy(host, "127.0.0.1:443");
    CHECK_RC(mtls_conn_open(host, lport, &ao, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "without a port") != NULL);
    strcpy(host, "127.0.0.1");
    CHECK_OK(mtls_conn_open(host, lport, &ao, &c));
    mtls_conn_free(c);
    sni[9] = (char)0xff; /* "server.te\xffst": no longer UTF-8 */
    CHECK_RC(mtls_conn_open(host, lport, &ao, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "sni") != NULL);
    sni[9] = 's';
    as[3] = (char)0xc3; /* a lead byte without its continuation */
    CHECK_RC(mtls_conn_open(host, lport, &ao, &c), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "verify_as") != NULL);
    as[3] = 'v';
    CHECK_OK(mtls_conn_open(host, lport, &ao, &c));
    mtls_conn_free(c);
    close(lfd);
}

int main(void) {
    make_pki("tls-pki");

    server_id = identity("server", "int-a.pem");
    client_a = identity("client-a", "int-a.pem");
    client_b = identity("client-b", "int-b.pem");
    server_policy = anchored("root.pem");   /* how clients judge the server */
    client_policy = anchored("int-a.pem");  /* customer A's clients only */

    RUN(options_and_listener);
    RUN(blocking_client);
    RUN(caller_owned_socket);
    RUN(non_blocking_client);
    RUN(automatic_identity);
    RUN(another_customers_client_refused);
    RUN(connect_errors);
    RUN(arguments_read_again_by_their_bytes);
    RUN(application_ssl_ctx);
    RUN(one_effective_policy);
    RUN(report_callback_outlives_policy);

    mtls_conn_cache_clear(); /* drops the shared contexts and their references to identities */
    mtls_policy_free(wrong);
    mtls_policy_free(server_policy);
    mtls_policy_free(client_policy);
    mtls_identity_free(server_id);
    mtls_identity_free(client_a);
    mtls_identity_free(client_b);
    DONE();
}
