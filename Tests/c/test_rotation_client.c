/* test-c links: libssl libcrypto */
/* Client identities that change (issue 26), audited from the client side through the C ABI,
 * against a raw OpenSSL server (no libmtls on that side: it checks each CertificateVerify with
 * the certificate it was sent, and keeps its own session-id cache and tickets):
 *  - swaps to what is not an identity (NULL, a freed handle, a handle of another type) and to
 *    identities that cannot be presented (expired, not yet valid) are refused with a clear error,
 *    the identity in force stays, and the refusal is reported as MTLS_EVENT_RELOAD_FAILED;
 *    a key that does not match its certificate never becomes an identity; a store replacement
 *    that expired is a failed reload (the last good identity stays);
 *  - an identity an application's SSL_CTX refuses (its security level) keeps the last good one
 *    on that context and is reported: never a handshake without a certificate;
 *  - a swap loop hammered against handshakes from many threads, for libmtls's own client
 *    connections and an application's client SSL_CTX (mtls_ssl_ctx_configure_source, sessions
 *    kept by the application as libcurl keeps them), TLS 1.3 tickets, TLS 1.2 tickets and TLS 1.2
 *    session ids: every handshake succeeds and the server sees, for every connection, resumed
 *    or not, the certificate the client took when the handshake started (so the key that signed
 *    CertificateVerify was that certificate's, and no session of one identity resumed under
 *    another);
 *  - an application's server SSL_CTX (accepts_clients 1) presenting a source: the same fallback,
 *    and a swap loop against raw OpenSSL clients resuming sessions (never one made under the
 *    other server identity);
 *  - token keys (SoftHSM2) swapped with keys in memory, and a followed stored token identity
 *    repointed at another token key, on both client front ends;
 *  - a TLS 1.2 server's HelloRequest (a renegotiation asked for) after a swap, on an
 *    application's client SSL_CTX: the live connection keeps its session and goes on. */
#define _GNU_SOURCE
#include "pki_support.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void hex_of(const X509 *x, char *out) {
    unsigned char md[32];
    unsigned int n = 0;
    if (!x || X509_digest(x, EVP_sha256(), md, &n) != 1) { snprintf(out, 65, "none"); return; }
    for (unsigned i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

static void leaf_hex(const mtls_identity *id, char *out) {
    mtls_cert *leaf = NULL;
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    char *hex = NULL;
    CHECK_OK(mtls_cert_sha256_hex(leaf, &hex));
    snprintf(out, 65, "%s", hex);
    mtls_string_free(hex);
    mtls_cert_free(leaf);
}

/* ---------------------------------------------------------------- events */

struct events { int rotated, failed, last_code; char last_sha[65]; pthread_mutex_t lock; };
static void on_event(const mtls_event *e, void *userdata) {
    struct events *ev = userdata;
    pthread_mutex_lock(&ev->lock);
    if (e->kind == MTLS_EVENT_IDENTITY_ROTATED) ev->rotated++;
    if (e->kind == MTLS_EVENT_RELOAD_FAILED) {
        ev->failed++;
        ev->last_code = e->error_code;
        snprintf(ev->last_sha, sizeof ev->last_sha, "%s", e->sha256 ? e->sha256 : "");
        CHECK(e->message && e->message[0]);
    }
    pthread_mutex_unlock(&ev->lock);
}
static int events_failed(struct events *ev) {
    pthread_mutex_lock(&ev->lock);
    int n = ev->failed;
    pthread_mutex_unlock(&ev->lock);
    return n;
}

/* ---------------------------------------------------------------- a raw OpenSSL server */

/* Each client writes the SHA-256 (hex) of the certificate it holds for this handshake; the
 * server compares it with the certificate the handshake gave it (a resumed session's is the one
 * of the handshake that made the session) and answers "ok" or "no". */
struct server {
    SSL_CTX *ctx;
    int fd, stop;
    int hello_request; /* after the client's claim: a HelloRequest (TLS 1.2), then the answer */
    uint16_t port;
    pthread_t threads[4];
    int nthreads;
    int accepted, resumed, mismatched, failed, without_cert;
    char last_seen[65];
    pthread_mutex_t lock;
};

static void record(struct server *s, int ok, int reused, int match, const char *claim, const char *seen);

static void *serve(void *arg) {
    struct server *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) break;
        if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) { close(fd); break; }
        struct timeval tv = { 10, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        int ok = SSL_accept(ssl) == 1;
        char claim[65] = "", seen[65] = "none";
        int reused = 0, match = 0;
        if (ok) {
            reused = SSL_session_reused(ssl);
            int n = SSL_read(ssl, claim, 64);
            if (ok && n == 64 && s->hello_request) {
                /* As a server asking for a renegotiation does (Apache's per-directory client
                 * certificates): the HelloRequest goes out before the answer. */
                ok = SSL_renegotiate(ssl) == 1 && SSL_do_handshake(ssl) == 1;
            }
            if (ok && n == 64) {
                claim[64] = 0;
                hex_of(SSL_get0_peer_certificate(ssl), seen);
                match = strcmp(seen, claim) == 0;
            } else {
                ok = 0;
            }
        }
        /* Recorded before the answer: a client that has its answer finds it here. */
        record(s, ok, reused, match, claim, seen);
        if (ok) {
            SSL_write(ssl, match ? "ok" : "no", 2);
            SSL_shutdown(ssl);
        }
        ERR_clear_error();
        SSL_free(ssl);
        close(fd);
    }
    return NULL;
}

static void record(struct server *s, int ok, int reused, int match, const char *claim, const char *seen) {
        pthread_mutex_lock(&s->lock);
        if (ok) {
            s->accepted++;
            s->resumed += reused;
            if (!match) {
                s->mismatched++;
                if (s->mismatched < 4) fprintf(stderr, "server saw %s, the client held %s (resumed %d)\n", seen, claim, reused);
            }
            if (strcmp(seen, "none") == 0) s->without_cert++;
            snprintf(s->last_seen, sizeof s->last_seen, "%s", seen);
        } else {
            s->failed++;
        }
        pthread_mutex_unlock(&s->lock);
}

/* A server presenting `server` (with int-a), asking for a client certificate (required unless
 * `optional`), trusting root.pem for clients; TLS up to max_version; TLS 1.2 tickets or, with
 * no_tickets, its session-id cache. */
/* A second CA the server trusts for clients (the token identities' CA), when set. */
static char extra_client_ca[1024];

static void server_start(struct server *s, int max_version, int no_tickets, int optional, int threads) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    char path[1024], key[1024], ca[1024];
    snprintf(path, sizeof path, "%s/server-chain.pem", pki);
    snprintf(key, sizeof key, "%s/server.key", pki);
    snprintf(ca, sizeof ca, "%s/root.pem", pki);
    s->ctx = SSL_CTX_new(TLS_server_method());
    CHECK(s->ctx != NULL);
    CHECK(SSL_CTX_use_certificate_chain_file(s->ctx, path) == 1);
    CHECK(SSL_CTX_use_PrivateKey_file(s->ctx, key, SSL_FILETYPE_PEM) == 1);
    CHECK(SSL_CTX_load_verify_locations(s->ctx, ca, NULL) == 1);
    if (extra_client_ca[0]) CHECK(SSL_CTX_load_verify_locations(s->ctx, extra_client_ca, NULL) == 1);
    SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | (optional ? 0 : SSL_VERIFY_FAIL_IF_NO_PEER_CERT), NULL);
    SSL_CTX_set_max_proto_version(s->ctx, max_version);
    static const unsigned char sid[] = "test_rotation_client";
    CHECK(SSL_CTX_set_session_id_context(s->ctx, sid, sizeof sid - 1) == 1);
    SSL_CTX_set_session_cache_mode(s->ctx, SSL_SESS_CACHE_SERVER);
    if (no_tickets) SSL_CTX_set_options(s->ctx, SSL_OP_NO_TICKET);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(bind(s->fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(s->fd, 64) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(s->fd, (struct sockaddr *)&a, &len) == 0);
    s->port = ntohs(a.sin_port);
    s->nthreads = threads;
    for (int i = 0; i < threads; i++) CHECK(pthread_create(&s->threads[i], NULL, serve, s) == 0);
}

static void server_stop(struct server *s) {
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    shutdown(s->fd, SHUT_RDWR);
    for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
    close(s->fd);
    SSL_CTX_free(s->ctx);
}

static int tcp_connect(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* ---------------------------------------------------------------- the two kinds of client */

static mtls_policy *servers;

/* libmtls's own client connection presenting `src`: returns 1 when the server answered "ok". */
static int own_round(mtls_identity_source *src, uint16_t port, int max_tls, int *resumed) {
    mtls_conn_options o;
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.identity_source = src;
    o.policy = servers;
    o.verify_as = "server.test";
    o.max_tls = max_tls;
    o.handshake_timeout_ms = o.io_timeout_ms = 10000;
    mtls_conn *c = NULL;
    int rc = mtls_conn_connect("127.0.0.1", port, &o, &c);
    if (rc != MTLS_OK) { fprintf(stderr, "connect: %s\n", mtls_last_error()); return 0; }
    mtls_identity *held = NULL;
    CHECK_OK(mtls_conn_presented_identity(c, &held));
    char claim[65] = "none";
    if (held) { leaf_hex(held, claim); mtls_identity_free(held); }
    size_t n = 0;
    char reply[3] = "";
    int ok = mtls_conn_write(c, (const uint8_t *)claim, 64, &n) == MTLS_OK && n == 64 && mtls_conn_read(c, (uint8_t *)reply, 2, &n) == MTLS_OK && n == 2 &&
             memcmp(reply, "ok", 2) == 0;
    if (resumed) CHECK_OK(mtls_conn_resumed(c, resumed));
    mtls_conn_free(c);
    return ok;
}

/* An application's client SSL_CTX (made, configured and shared as libcurl does), with the
 * session it keeps for the next connection (libcurl's session cache). */
struct app_client {
    SSL_CTX *ctx;
    SSL_SESSION *session;
    pthread_mutex_t lock;
};

static void app_client_init(struct app_client *a, mtls_identity_source *src, uint16_t port, int max_version) {
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->lock, NULL);
    a->ctx = SSL_CTX_new(TLS_client_method());
    CHECK(a->ctx != NULL);
    SSL_CTX_set_max_proto_version(a->ctx, max_version);
    SSL_CTX_set_session_cache_mode(a->ctx, SSL_SESS_CACHE_CLIENT);
    CHECK_OK(mtls_ssl_ctx_configure_source(a->ctx, src, servers, 0, NULL));
    CHECK_OK(mtls_ssl_ctx_set_peer(a->ctx, "server.test", port, NULL));
}

static void app_client_free(struct app_client *a) {
    if (a->session) SSL_SESSION_free(a->session);
    SSL_CTX_free(a->ctx);
}

/* When set, app_round swaps `swap_source` to `swap_to` once its handshake is done. */
static mtls_identity_source *swap_source;
static mtls_identity *swap_to;

/* One connection from `a`, offering its kept session: returns 1 when the server answered "ok".
 * The claim is the certificate the SSL holds once its handshake started (what it presents). */
static int app_round(struct app_client *a, uint16_t port, int *resumed) {
    int fd = tcp_connect(port);
    SSL *ssl = SSL_new(a->ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, "server.test");
    pthread_mutex_lock(&a->lock);
    if (a->session) SSL_set_session(ssl, a->session);
    pthread_mutex_unlock(&a->lock);
    int ok = SSL_connect(ssl) == 1;
    char reply[3] = "";
    if (ok) {
        if (resumed) *resumed = SSL_session_reused(ssl);
        char claim[65];
        hex_of(SSL_get_certificate(ssl), claim);
        if (swap_source) CHECK_OK(mtls_identity_source_set(swap_source, swap_to));
        ok = SSL_write(ssl, claim, 64) == 64;
        ok = ok && SSL_read(ssl, reply, 2) == 2 && memcmp(reply, "ok", 2) == 0;
        SSL_SESSION *s = SSL_get1_session(ssl);
        pthread_mutex_lock(&a->lock);
        if (a->session) SSL_SESSION_free(a->session);
        a->session = s;
        pthread_mutex_unlock(&a->lock);
        SSL_shutdown(ssl);
    } else {
        unsigned long e = ERR_peek_last_error();
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        fprintf(stderr, "SSL_connect: %s\n", buf);
    }
    ERR_clear_error();
    SSL_free(ssl);
    close(fd);
    return ok;
}

/* ---------------------------------------------------------------- the hammer */

struct hammer {
    mtls_identity_source *src;
    mtls_identity *a, *b;
    struct app_client *app; /* NULL: libmtls's own connections */
    uint16_t port;
    int max_tls, rounds, stop;
    int ok, failed, resumed;
};

static void *swapper(void *arg) {
    struct hammer *h = arg;
    for (int i = 0; !__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE); i++) {
        CHECK_OK(mtls_identity_source_set(h->src, (i & 1) ? h->b : h->a));
        usleep(700); /* the swap rate against the handshakes: time passing is the point */
    }
    return NULL;
}

static void *client_loop(void *arg) {
    struct hammer *h = arg;
    for (int i = 0; i < h->rounds; i++) {
        int resumed = 0;
        int ok = h->app ? app_round(h->app, h->port, &resumed) : own_round(h->src, h->port, h->max_tls, &resumed);
        __atomic_fetch_add(ok ? &h->ok : &h->failed, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&h->resumed, resumed, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void hammer(const char *what, mtls_identity *a, mtls_identity *b, int app, int max_tls, int no_tickets) {
    struct server s;
    server_start(&s, max_tls == MTLS_TLS_1_2 ? TLS1_2_VERSION : TLS1_3_VERSION, no_tickets, 0, 4);
    struct hammer h = { .a = a, .b = b, .port = s.port, .max_tls = max_tls, .rounds = 25 };
    CHECK_OK(mtls_identity_source_new(a, &h.src));
    struct app_client client;
    if (app) { app_client_init(&client, h.src, s.port, max_tls == MTLS_TLS_1_2 ? TLS1_2_VERSION : TLS1_3_VERSION); h.app = &client; }
    enum { THREADS = 6 };
    pthread_t t[THREADS], sw;
    CHECK(pthread_create(&sw, NULL, swapper, &h) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, client_loop, &h) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    __atomic_store_n(&h.stop, 1, __ATOMIC_RELEASE);
    pthread_join(sw, NULL);
    server_stop(&s);
    printf("%s: %d handshakes, %d failed, %d resumed (server: %d accepted, %d resumed, %d mismatched)\n", what,
           h.ok + h.failed, h.failed, h.resumed, s.accepted, s.resumed, s.mismatched);
    CHECK(h.failed == 0 && s.failed == 0);
    CHECK(s.accepted == THREADS * h.rounds);
    CHECK(s.mismatched == 0);      /* never a session of one identity resumed under the other */
    CHECK(s.without_cert == 0);
    CHECK(s.resumed > 0);          /* resumption was exercised */
    CHECK(s.resumed < s.accepted); /* and so were full handshakes after swaps */
    if (app) app_client_free(&client);
    mtls_identity_source_free(h.src);
}

/* ---------------------------------------------------------------- an application's server */

/* An application's server SSL_CTX (nginx-style: its own session id context, session cache,
 * tickets unless no_tickets) presenting an identity source through mtls_ssl_ctx_configure_source.
 * Each accepted client is told the SHA-256 of the certificate the server's SSL holds for that
 * handshake; the client compares it with the one its handshake gave it. */
struct app_server {
    SSL_CTX *ctx;
    int fd, stop, nthreads;
    uint16_t port;
    pthread_t threads[4];
};

static void *app_serve(void *arg) {
    struct app_server *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) break;
        struct timeval tv = { 10, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1) {
            char held[65];
            hex_of(SSL_get_certificate(ssl), held);
            SSL_write(ssl, held, 64);
            SSL_shutdown(ssl);
        }
        ERR_clear_error();
        SSL_free(ssl);
        close(fd);
    }
    return NULL;
}

static void app_server_start(struct app_server *s, mtls_identity_source *src, mtls_policy *clients, int max_version,
                             int no_tickets, int security_level) {
    memset(s, 0, sizeof *s);
    s->ctx = SSL_CTX_new(TLS_server_method());
    CHECK(s->ctx != NULL);
    if (security_level) SSL_CTX_set_security_level(s->ctx, security_level);
    SSL_CTX_set_max_proto_version(s->ctx, max_version);
    static const unsigned char sid[] = "nginx-style virtual server";
    CHECK(SSL_CTX_set_session_id_context(s->ctx, sid, sizeof sid - 1) == 1);
    SSL_CTX_set_session_cache_mode(s->ctx, SSL_SESS_CACHE_SERVER);
    if (no_tickets) SSL_CTX_set_options(s->ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    CHECK_OK(mtls_ssl_ctx_configure_source(s->ctx, src, clients, 1, NULL));
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(bind(s->fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(s->fd, 64) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(s->fd, (struct sockaddr *)&a, &len) == 0);
    s->port = ntohs(a.sin_port);
    s->nthreads = 4;
    for (int i = 0; i < s->nthreads; i++) CHECK(pthread_create(&s->threads[i], NULL, app_serve, s) == 0);
}

static void app_server_stop(struct app_server *s) {
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    shutdown(s->fd, SHUT_RDWR);
    for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
    close(s->fd);
    SSL_CTX_free(s->ctx);
}

/* A raw OpenSSL client presenting client-a, keeping its last session for the next connection. */
struct raw_client {
    SSL_CTX *ctx;
    SSL_SESSION *session;
    pthread_mutex_t lock;
    uint16_t port;
    int rounds, ok, failed, resumed, mismatched;
    char last_seen[65];
};

static int raw_round(struct raw_client *c) {
    int fd = tcp_connect(c->port);
    SSL *ssl = SSL_new(c->ctx);
    SSL_set_fd(ssl, fd);
    pthread_mutex_lock(&c->lock);
    if (c->session) SSL_set_session(ssl, c->session);
    pthread_mutex_unlock(&c->lock);
    int ok = SSL_connect(ssl) == 1;
    if (ok) {
        char held[65] = "", seen[65];
        ok = SSL_read(ssl, held, 64) == 64;
        hex_of(SSL_get0_peer_certificate(ssl), seen);
        if (ok) {
            int match = strcmp(held, seen) == 0;
            pthread_mutex_lock(&c->lock);
            c->resumed += SSL_session_reused(ssl);
            if (!match) c->mismatched++;
            snprintf(c->last_seen, sizeof c->last_seen, "%s", seen);
            if (c->session) SSL_SESSION_free(c->session);
            c->session = SSL_get1_session(ssl);
            pthread_mutex_unlock(&c->lock);
        }
        SSL_shutdown(ssl);
    }
    ERR_clear_error();
    SSL_free(ssl);
    close(fd);
    return ok;
}

static void raw_client_init(struct raw_client *c, uint16_t port, int max_version) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->port = port;
    char chain[1024], key[1024];
    snprintf(chain, sizeof chain, "%s/client-a-chain.pem", pki);
    snprintf(key, sizeof key, "%s/client-a.key", pki);
    c->ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_max_proto_version(c->ctx, max_version);
    SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_CLIENT);
    CHECK(SSL_CTX_use_certificate_chain_file(c->ctx, chain) == 1);
    CHECK(SSL_CTX_use_PrivateKey_file(c->ctx, key, SSL_FILETYPE_PEM) == 1);
}

static void raw_client_free(struct raw_client *c) {
    if (c->session) SSL_SESSION_free(c->session);
    SSL_CTX_free(c->ctx);
}

struct server_hammer { struct raw_client *c; mtls_identity_source *src; mtls_identity *a, *b; int stop; };

static void *server_swapper(void *arg) {
    struct server_hammer *h = arg;
    for (int i = 0; !__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE); i++) {
        CHECK_OK(mtls_identity_source_set(h->src, (i & 1) ? h->b : h->a));
        usleep(700); /* the swap rate against the handshakes: time passing is the point */
    }
    return NULL;
}

static void *raw_loop(void *arg) {
    struct raw_client *c = arg;
    for (int i = 0; i < c->rounds; i++) __atomic_fetch_add(raw_round(c) ? &c->ok : &c->failed, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void server_side_hammer(const char *what, mtls_identity *a, mtls_identity *b, mtls_policy *clients, int max_version,
                               int no_tickets) {
    struct server_hammer h = { .a = a, .b = b };
    CHECK_OK(mtls_identity_source_new(a, &h.src));
    struct app_server s;
    app_server_start(&s, h.src, clients, max_version, no_tickets, 0);
    struct raw_client c;
    raw_client_init(&c, s.port, max_version);
    c.rounds = 25;
    h.c = &c;
    enum { THREADS = 6 };
    pthread_t t[THREADS], sw;
    CHECK(pthread_create(&sw, NULL, server_swapper, &h) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, raw_loop, &c) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    __atomic_store_n(&h.stop, 1, __ATOMIC_RELEASE);
    pthread_join(sw, NULL);
    app_server_stop(&s);
    printf("%s: %d handshakes, %d failed, %d resumed, %d mismatched\n", what, c.ok + c.failed, c.failed, c.resumed, c.mismatched);
    CHECK(c.failed == 0 && c.ok == THREADS * c.rounds);
    CHECK(c.mismatched == 0); /* never a session made under one server identity resumed under the other */
    CHECK(c.resumed > 0 && c.resumed < c.ok);
    raw_client_free(&c);
    mtls_identity_source_free(h.src);
}

/* ---------------------------------------------------------------- main */

static mtls_identity *issued_identity(mtls_issued *ca, const char *name, int64_t now, int days) {
    mtls_issue_options io;
    CHECK_OK(mtls_issue_options_init(&io, MTLS_ISSUE_OPTIONS_VERSION));
    io.now = now;
    io.validity_days = days;
    mtls_issued *leaf = NULL;
    CHECK_OK(mtls_pki_issue(ca, MTLS_PROFILE_CLIENT, name, &io, &leaf));
    mtls_identity *id = NULL;
    CHECK_OK(mtls_issued_identity(leaf, &id));
    mtls_issued_free(leaf);
    return id;
}

/* What the tests share, made once in main: the test PKI's client identities, their leaf hashes
 * and the temporary folder. The tests run in order; the swap refusals leave the expired identity
 * and its CA for the store-replacement test, which frees them. */
static const char *tmp;
static mtls_identity *client_a, *client_rsa;
static char want_a[65], want_rsa[65];
static int64_t now;
static mtls_issued *ca;
static mtls_identity *expired, *future, *fresh;

TEST(refused_swaps_keep_the_identity_in_force) {
    char cur_hex[65];
    /* ---- swaps to what cannot be presented: refused, the identity in force stays, reported */
    struct events ev = { .lock = PTHREAD_MUTEX_INITIALIZER };
    mtls_identity_source *src = NULL;
    CHECK_RC(mtls_identity_source_new(NULL, &src), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_source_new(client_a, &src));
    CHECK_OK(mtls_identity_source_set_event_callback(src, on_event, &ev, NULL));
    CHECK_RC(mtls_identity_source_set(src, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_identity *freed = identity("client-a-rsa", "int-a.pem");
    mtls_identity_free(freed);
    CHECK_RC(mtls_identity_source_set(src, freed), MTLS_E_INVALID_ARGUMENT);
    mtls_cert *not_identity = NULL;
    CHECK_OK(mtls_identity_leaf(client_rsa, &not_identity));
    CHECK_RC(mtls_identity_source_set(src, (mtls_identity *)not_identity), MTLS_E_INVALID_ARGUMENT);
    mtls_cert_free(not_identity);
    /* A key that is not the certificate's never becomes an identity to swap to. */
    char *rsa_cert = text_file("client-a-rsa.pem"), *a_key = text_file("client-a.key");
    mtls_identity *mismatched = NULL;
    CHECK_RC(mtls_identity_from_pem(rsa_cert, a_key, NULL, &mismatched), MTLS_E_KEY_MISMATCH);
    CHECK(mismatched == NULL);
    free(rsa_cert); free(a_key);

    /* Expired and not yet valid: issued by a CA of our own at another time. */
    mtls_issue_options ro;
    CHECK_OK(mtls_issue_options_init(&ro, MTLS_ISSUE_OPTIONS_VERSION));
    ro.now = now - 30 * 86400;
    ca = NULL;
    CHECK_OK(mtls_pki_root("rotation client test CA", &ro, &ca));
    expired = issued_identity(ca, "expired-client", now - 20 * 86400, 2);
    future = issued_identity(ca, "future-client", now + 10 * 86400, 30);
    fresh = issued_identity(ca, "fresh-client", now, 30);
    char expired_hex[65];
    leaf_hex(expired, expired_hex);
    CHECK(ev.rotated == 0 && ev.failed == 0);
    CHECK_RC(mtls_identity_source_set(src, expired), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "expired") != NULL);
    CHECK(ev.failed == 1 && ev.last_code == MTLS_E_INVALID_ARGUMENT && strcmp(ev.last_sha, expired_hex) == 0);
    CHECK_RC(mtls_identity_source_set(src, future), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "not valid before") != NULL);
    CHECK(ev.failed == 2 && ev.rotated == 0);
    mtls_identity *cur = NULL;
    CHECK_OK(mtls_identity_source_current(src, &cur));
    leaf_hex(cur, cur_hex);
    mtls_identity_free(cur);
    CHECK(strcmp(cur_hex, want_a) == 0); /* the identity in force stayed */
    /* What a server sees after all that: still client-a. */
    {
        struct server s;
        server_start(&s, TLS1_3_VERSION, 0, 0, 1);
        CHECK(own_round(src, s.port, MTLS_TLS_1_3, NULL));
        server_stop(&s);
        CHECK(strcmp(s.last_seen, want_a) == 0);
    }
    CHECK_OK(mtls_identity_source_set(src, fresh));
    CHECK(ev.rotated == 1);
    mtls_identity_source_free(src);
}

/* Needs the expired identity made by refused_swaps_keep_the_identity_in_force; frees it. */
TEST(followed_store_replaced_with_expired_identity) {
    mtls_identity_source *src = NULL;
    mtls_identity *cur = NULL;
    char cur_hex[65];
    /* A source following a store label: another handle replaces the row with an expired
     * identity. A failed reload: the last good identity stays, reported once; a valid
     * replacement after it is put in force. */
    {
        char path[1024];
        snprintf(path, sizeof path, "%s/rotation-client-%d.db", tmp, (int)getpid());
        unlink(path);
        mtls_store_options so;
        CHECK_OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION));
        so.kdf_log_n = 10;
        mtls_store *ours = NULL, *other = NULL;
        CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &other));
        CHECK_OK(mtls_store_put_identity(other, "cl", client_a, 0));
        CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &ours));
        struct events ev3 = { .lock = PTHREAD_MUTEX_INITIALIZER };
        CHECK_OK(mtls_identity_source_follow_store(ours, "cl", NULL, &src));
        CHECK_OK(mtls_identity_source_set_event_callback(src, on_event, &ev3, NULL));
        CHECK_OK(mtls_store_put_identity(other, "cl", expired, 1));
        for (int i = 0; i < 100 && events_failed(&ev3) == 0; i++) usleep(20000);
        t_wait_watcher_looks(); /* more looks at the store: still reported once */
        CHECK(events_failed(&ev3) == 1);
        CHECK(ev3.last_code == MTLS_E_INVALID_ARGUMENT && ev3.rotated == 0);
        CHECK_OK(mtls_identity_source_current(src, &cur));
        leaf_hex(cur, cur_hex);
        mtls_identity_free(cur);
        CHECK(strcmp(cur_hex, want_a) == 0);
        CHECK_OK(mtls_store_put_identity(other, "cl", client_rsa, 1));
        for (int i = 0; i < 100; i++) {
            pthread_mutex_lock(&ev3.lock);
            int r = ev3.rotated;
            pthread_mutex_unlock(&ev3.lock);
            if (r) break;
            usleep(20000);
        }
        CHECK_OK(mtls_identity_source_current(src, &cur));
        leaf_hex(cur, cur_hex);
        mtls_identity_free(cur);
        CHECK(strcmp(cur_hex, want_rsa) == 0);
        mtls_identity_source_free(src);
        mtls_store_close(ours);
        mtls_store_close(other);
        unlink(path);
    }
    mtls_identity_free(expired); mtls_identity_free(future); mtls_identity_free(fresh);
    mtls_issued_free(ca);
}

TEST(application_ctx_refusing_identity_keeps_last_good) {
    mtls_identity_source *src = NULL;
    /* ---- an application's SSL_CTX that refuses the new identity (its security level 3 wants
     * 128-bit keys: RSA-2048 is 112) keeps presenting the last good one there, and says so. A
     * server that asks for a certificate without requiring one would otherwise accept the
     * client with none. */
    {
        struct events ev2 = { .lock = PTHREAD_MUTEX_INITIALIZER };
        struct server s;
        server_start(&s, TLS1_3_VERSION, 0, 1 /* optional */, 1);
        CHECK_OK(mtls_identity_source_new(client_a, &src));
        CHECK_OK(mtls_identity_source_set_event_callback(src, on_event, &ev2, NULL));
        struct app_client app;
        memset(&app, 0, sizeof app);
        pthread_mutex_init(&app.lock, NULL);
        app.ctx = SSL_CTX_new(TLS_client_method());
        SSL_CTX_set_security_level(app.ctx, 3);
        CHECK_OK(mtls_ssl_ctx_configure_source(app.ctx, src, servers, 0, NULL));
        CHECK_OK(mtls_ssl_ctx_set_peer(app.ctx, "server.test", s.port, NULL));
        CHECK(app_round(&app, s.port, NULL));
        CHECK(strcmp(s.last_seen, want_a) == 0);
        CHECK_OK(mtls_identity_source_set(src, client_rsa)); /* the source takes it: another context may */
        SSL_SESSION_free(app.session);
        app.session = NULL;
        CHECK(app_round(&app, s.port, NULL));
        CHECK(strcmp(s.last_seen, "none") != 0);     /* never no certificate */
        CHECK(strcmp(s.last_seen, want_a) == 0);     /* the last good one on this context */
        CHECK(events_failed(&ev2) == 1);
        CHECK(ev2.last_code != 0 && strcmp(ev2.last_sha, want_rsa) == 0);
        SSL_SESSION_free(app.session);
        app.session = NULL;
        CHECK(app_round(&app, s.port, NULL));
        CHECK(strcmp(s.last_seen, want_a) == 0);
        CHECK(events_failed(&ev2) == 1);              /* reported once per identity and context */
        /* libmtls's own connections take the RSA identity (their contexts allow it). */
        CHECK(own_round(src, s.port, MTLS_TLS_1_3, NULL));
        CHECK(strcmp(s.last_seen, want_rsa) == 0);
        /* Back to an identity the context takes. */
        CHECK_OK(mtls_identity_source_set(src, client_a));
        SSL_SESSION_free(app.session);
        app.session = NULL;
        CHECK(app_round(&app, s.port, NULL));
        CHECK(strcmp(s.last_seen, want_a) == 0);
        server_stop(&s);
        CHECK(s.without_cert == 0);
        app_client_free(&app);
        mtls_identity_source_free(src);
    }
}

TEST(tls12_hello_request_after_swap) {
    mtls_identity_source *src = NULL;
    /* ---- a TLS 1.2 server's HelloRequest after a swap, on an application's client SSL_CTX:
     * libmtls's check of the session at each handshake start took the session off the live
     * connection (SSL_set_session resets the SSL's method and record layer), and the next read
     * failed with OpenSSL internal errors. The connection keeps its session and goes on. */
    {
        struct server s;
        server_start(&s, TLS1_2_VERSION, 0, 0, 1);
        s.hello_request = 1;
        CHECK_OK(mtls_identity_source_new(client_a, &src));
        struct app_client app;
        app_client_init(&app, src, s.port, TLS1_2_VERSION);
        swap_source = src;
        swap_to = client_rsa;
        CHECK(app_round(&app, s.port, NULL));
        swap_to = client_a;
        CHECK(app_round(&app, s.port, NULL)); /* a resumed connection, swapped back */
        swap_source = NULL;
        server_stop(&s);
        CHECK(s.failed == 0 && s.mismatched == 0 && s.accepted == 2);
        app_client_free(&app);
        mtls_identity_source_free(src);
    }
}

TEST(token_keys_swapped_and_followed) {
    mtls_identity_source *src = NULL;
    mtls_identity *cur = NULL;
    /* ---- token keys (SoftHSM2): a source swapped between keys on the token and in memory, and
     * a source following a stored token identity (its URI), on both client front ends, TLS 1.3
     * and 1.2: each handshake signs with the key of the certificate it presents. */
    {
        if (access("/usr/lib/softhsm/libsofthsm2.so", F_OK) != 0) {
            fprintf(stderr, "SoftHSM2 is not installed: run scripts/install-deps.sh\n");
            t_fail();
        }
        char dir[600], conf[700], path[700], tcmd[1400];
        snprintf(dir, sizeof dir, "%s/rotation-client-tokens-%d", tmp, (int)getpid());
        snprintf(tcmd, sizeof tcmd, "rm -rf %s && scripts/softhsm-token.sh %s", dir, dir);
        t_sh(tcmd);
        snprintf(conf, sizeof conf, "%s/softhsm2.conf", dir);
        setenv("SOFTHSM2_CONF", conf, 1);
        snprintf(extra_client_ca, sizeof extra_client_ca, "%s/ca.pem", dir);
        mtls_identity *tok_ec = NULL, *tok_rsa = NULL;
        CHECK_OK(mtls_identity_from_pkcs11("pkcs11:token=mtls-test;id=%02?pin-value=1234", NULL, NULL, NULL, &tok_ec));
        CHECK_OK(mtls_identity_from_pkcs11("pkcs11:token=mtls-test;id=%01?pin-value=1234", NULL, NULL, NULL, &tok_rsa));
        char want_tok_ec[65], want_tok_rsa[65];
        leaf_hex(tok_ec, want_tok_ec);
        leaf_hex(tok_rsa, want_tok_rsa);
        mtls_identity *order[] = { tok_ec, client_a, tok_rsa, client_rsa, tok_ec };
        const char *want[] = { want_tok_ec, want_a, want_tok_rsa, want_rsa, want_tok_ec };
        for (int v = 0; v < 2; v++) {
            int ossl = v ? TLS1_2_VERSION : TLS1_3_VERSION, own = v ? MTLS_TLS_1_2 : MTLS_TLS_1_3;
            struct server s;
            server_start(&s, ossl, 0, 0, 1);
            for (int app = 0; app < 2; app++) {
                CHECK_OK(mtls_identity_source_new(tok_ec, &src));
                struct app_client client;
                if (app) app_client_init(&client, src, s.port, ossl);
                for (int i = 0; i < 5; i++) {
                    CHECK_OK(mtls_identity_source_set(src, order[i]));
                    CHECK(app ? app_round(&client, s.port, NULL) : own_round(src, s.port, own, NULL));
                    CHECK(strcmp(s.last_seen, want[i]) == 0);
                }
                if (app) app_client_free(&client);
                mtls_identity_source_free(src);
            }
            /* A stored token identity, followed; another handle points the label at the other
             * token key. */
            snprintf(path, sizeof path, "%s/rotation-client-tok-%d.db", tmp, (int)getpid());
            unlink(path);
            mtls_store_options so;
            CHECK_OK(mtls_store_options_init(&so, MTLS_STORE_OPTIONS_VERSION));
            so.kdf_log_n = 10;
            mtls_store *ours = NULL, *other = NULL;
            CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &other));
            mtls_cert *leaf = NULL;
            CHECK_OK(mtls_identity_leaf(tok_ec, &leaf));
            CHECK_OK(mtls_store_put_token_identity(other, "tok", "pkcs11:token=mtls-test;id=%02", leaf, NULL, 0, 0));
            mtls_cert_free(leaf);
            CHECK_OK(mtls_store_open(path, (const uint8_t *)"secret", 6, MTLS_STORE_SECRET_PASSPHRASE, &so, &ours));
            mtls_watch_options wo;
            CHECK_OK(mtls_watch_options_init(&wo, MTLS_WATCH_OPTIONS_VERSION));
            wo.token_pin = "1234";
            CHECK_OK(mtls_identity_source_follow_store(ours, "tok", &wo, &src));
            struct app_client client;
            app_client_init(&client, src, s.port, ossl);
            CHECK(app_round(&client, s.port, NULL));
            CHECK(strcmp(s.last_seen, want_tok_ec) == 0);
            CHECK(own_round(src, s.port, own, NULL));
            CHECK(strcmp(s.last_seen, want_tok_ec) == 0);
            CHECK_OK(mtls_identity_leaf(tok_rsa, &leaf));
            CHECK_OK(mtls_store_put_token_identity(other, "tok", "pkcs11:token=mtls-test;id=%01", leaf, NULL, 0, 1));
            mtls_cert_free(leaf);
            char now_hex[65] = "";
            for (int i = 0; i < 100 && strcmp(now_hex, want_tok_rsa) != 0; i++) {
                usleep(20000);
                CHECK_OK(mtls_identity_source_current(src, &cur));
                leaf_hex(cur, now_hex);
                mtls_identity_free(cur);
            }
            CHECK(app_round(&client, s.port, NULL));
            CHECK(strcmp(s.last_seen, want_tok_rsa) == 0);
            CHECK(own_round(src, s.port, own, NULL));
            CHECK(strcmp(s.last_seen, want_tok_rsa) == 0);
            app_client_free(&client);
            mtls_identity_source_free(src);
            mtls_store_close(ours);
            mtls_store_close(other);
            unlink(path);
            server_stop(&s);
            CHECK(s.failed == 0 && s.mismatched == 0);
        }
        mtls_identity_free(tok_ec);
        mtls_identity_free(tok_rsa);
        extra_client_ca[0] = 0;
        snprintf(tcmd, sizeof tcmd, "rm -rf %s", dir);
        t_sh(tcmd);
    }
}

TEST(application_server_ctx_presenting_a_source) {
    mtls_identity_source *src = NULL;
    /* ---- an application's server SSL_CTX (accepts_clients 1) presenting a source: one whose
     * security level refuses the new identity keeps the last good one and reports it; a swap
     * loop against raw OpenSSL clients resuming their sessions. */
    {
        mtls_identity *server = identity("server", "int-a.pem"), *server_rsa = identity("server-rsa", "int-a.pem");
        mtls_policy *clients = anchored("int-a.pem");
        char want_server[65];
        leaf_hex(server, want_server);
        struct events ev4 = { .lock = PTHREAD_MUTEX_INITIALIZER };
        CHECK_OK(mtls_identity_source_new(server, &src));
        CHECK_OK(mtls_identity_source_set_event_callback(src, on_event, &ev4, NULL));
        struct app_server s;
        app_server_start(&s, src, clients, TLS1_3_VERSION, 0, 3);
        struct raw_client c;
        raw_client_init(&c, s.port, TLS1_3_VERSION);
        CHECK(raw_round(&c));
        CHECK(strcmp(c.last_seen, want_server) == 0);
        CHECK_OK(mtls_identity_source_set(src, server_rsa));
        SSL_SESSION_free(c.session);
        c.session = NULL;
        CHECK(raw_round(&c));                              /* it failed: no certificate to present */
        CHECK(strcmp(c.last_seen, want_server) == 0);
        CHECK(events_failed(&ev4) == 1 && c.mismatched == 0);
        raw_client_free(&c);
        app_server_stop(&s);
        mtls_identity_source_free(src);
        server_side_hammer("application server SSL_CTX, TLS 1.3 tickets", server, server_rsa, clients, TLS1_3_VERSION, 0);
        server_side_hammer("application server SSL_CTX, TLS 1.2 tickets", server, server_rsa, clients, TLS1_2_VERSION, 0);
        server_side_hammer("application server SSL_CTX, TLS 1.2 session ids", server, server_rsa, clients, TLS1_2_VERSION, 1);
        mtls_identity_free(server);
        mtls_identity_free(server_rsa);
        mtls_policy_free(clients);
    }
}

TEST(hammer_own_client_tls13_tickets) {
    hammer("own client, TLS 1.3 tickets", client_a, client_rsa, 0, MTLS_TLS_1_3, 0);
}
TEST(hammer_own_client_tls12_tickets) {
    hammer("own client, TLS 1.2 tickets", client_a, client_rsa, 0, MTLS_TLS_1_2, 0);
}
TEST(hammer_own_client_tls12_session_ids) {
    hammer("own client, TLS 1.2 session ids", client_a, client_rsa, 0, MTLS_TLS_1_2, 1);
}
TEST(hammer_application_ctx_tls13_tickets) {
    hammer("application SSL_CTX, TLS 1.3 tickets", client_a, client_rsa, 1, MTLS_TLS_1_3, 0);
}
TEST(hammer_application_ctx_tls12_tickets) {
    hammer("application SSL_CTX, TLS 1.2 tickets", client_a, client_rsa, 1, MTLS_TLS_1_2, 0);
}
TEST(hammer_application_ctx_tls12_session_ids) {
    hammer("application SSL_CTX, TLS 1.2 session ids", client_a, client_rsa, 1, MTLS_TLS_1_2, 1);
}

int main(void) {
    tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    make_pki("rotation-client-pki");
    servers = anchored("root.pem");
    client_a = identity("client-a", "int-a.pem");
    client_rsa = identity("client-a-rsa", "int-a.pem");
    leaf_hex(client_a, want_a);
    leaf_hex(client_rsa, want_rsa);
    now = (int64_t)time(NULL);

    RUN(refused_swaps_keep_the_identity_in_force);
    RUN(followed_store_replaced_with_expired_identity);
    RUN(application_ctx_refusing_identity_keeps_last_good);
    RUN(tls12_hello_request_after_swap);
    RUN(token_keys_swapped_and_followed);
    RUN(application_server_ctx_presenting_a_source);
    RUN(hammer_own_client_tls13_tickets);
    RUN(hammer_own_client_tls12_tickets);
    RUN(hammer_own_client_tls12_session_ids);
    RUN(hammer_application_ctx_tls13_tickets);
    RUN(hammer_application_ctx_tls12_tickets);
    RUN(hammer_application_ctx_tls12_session_ids);

    mtls_identity_free(client_a);
    mtls_identity_free(client_rsa);
    mtls_policy_free(servers);
    DONE();
}
