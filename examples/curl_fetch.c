/* curl_fetch: fetch an HTTPS URL with libcurl, presenting a client identity from libmtls (a
 * stored identity or a .p12 file) and trusting only a pinned anchor. libcurl's OpenSSL context
 * is handed to mtls_ssl_ctx_configure through CURLOPT_SSL_CTX_FUNCTION, so the server is judged
 * by libmtls's evaluator, the same one `mtls verify` and `mtls connect` use.
 *
 * The peer: libcurl makes one SSL_CTX per connection and calls CURLOPT_SSL_CTX_FUNCTION with it
 * (and the easy handle) before the handshake, but the callback never sees the SSL. So the
 * callback reads the URL being fetched (CURLINFO_EFFECTIVE_URL, right also after a redirect),
 * takes its host and port with libcurl's URL parser, and tells libmtls with
 * mtls_ssl_ctx_set_peer: the host rules of the policy are then chosen by that host and port
 * (a rule for "127.0.0.1:8443" and its pins apply), and --verify-as only changes the name the
 * certificate is checked against. With --verify-as, CURLOPT_SSL_VERIFYHOST is set to 0:
 * libmtls has checked the name asked for, and libcurl's own check against the URL's host would
 * refuse it (rc=60). examples/README-curl.md gives the recipe step by step.
 *
 *   cc curl_fetch.c $(pkg-config --cflags --libs mtls libcurl) -o curl_fetch
 *   ./curl_fetch --store store.db --secret-file secret --label laptop --anchor root.pem \
 *                https://server.test:8443/
 *   ./curl_fetch --p12 client.p12 --password-file pw.txt --anchor root.pem \
 *                --resolve server.test:8443:127.0.0.1 https://server.test:8443/
 *   ./curl_fetch --p12 client.p12 --policy policy.json --verify-as server.test https://10.0.0.5:8443/
 */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#include <curl/curl.h>
#include <mtls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tls_setup {
    mtls_identity *identity;
    mtls_policy *policy;
    const char *verify_as; /* NULL: the URL's host */
};

/* libcurl calls this with its SSL_CTX * (one per connection) before each TLS handshake. */
static CURLcode configure_ssl_ctx(CURL *curl, void *ssl_ctx, void *userptr) {
    struct tls_setup *setup = userptr;
    if (mtls_ssl_ctx_configure(ssl_ctx, setup->identity, setup->policy, 0) != MTLS_OK) {
        fprintf(stderr, "curl_fetch: %s\n", mtls_last_error());
        return CURLE_SSL_CERTPROBLEM;
    }
    /* The peer of this connection: the host and port of the URL being fetched. */
    char *url = NULL, *host = NULL, *port = NULL;
    CURLcode res = CURLE_SSL_CERTPROBLEM;
    CURLU *u = curl_url();
    if (u && curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url &&
        curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        /* An IPv6 host comes as "[::1]"; libmtls takes the address with or without brackets. */
        if (mtls_ssl_ctx_set_peer(ssl_ctx, host, (uint16_t)atoi(port), setup->verify_as) == MTLS_OK) res = CURLE_OK;
        else fprintf(stderr, "curl_fetch: %s\n", mtls_last_error());
    } else {
        fprintf(stderr, "curl_fetch: cannot tell the URL's host and port\n");
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return res;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "curl_fetch: %s: %s (%s)\n", what, mtls_last_error(), mtls_error_name(rc));
    return 1;
}

int main(int argc, char **argv) {
    const char *store = NULL, *secret = NULL, *label = NULL, *p12 = NULL, *password_file = NULL;
    const char *anchor = NULL, *resolve = NULL, *url = NULL, *policy = NULL, *verify_as = NULL;
    for (int i = 1; i < argc; i++) {
        const char **slot = NULL;
        if (!strcmp(argv[i], "--store")) slot = &store;
        else if (!strcmp(argv[i], "--secret-file")) slot = &secret;
        else if (!strcmp(argv[i], "--label")) slot = &label;
        else if (!strcmp(argv[i], "--p12")) slot = &p12;
        else if (!strcmp(argv[i], "--password-file")) slot = &password_file;
        else if (!strcmp(argv[i], "--anchor")) slot = &anchor;
        else if (!strcmp(argv[i], "--resolve")) slot = &resolve;
        else if (!strcmp(argv[i], "--policy")) slot = &policy;
        else if (!strcmp(argv[i], "--verify-as")) slot = &verify_as;
        else url = argv[i];
        if (slot) {
            if (++i == argc) { fprintf(stderr, "curl_fetch: %s needs a value\n", argv[i - 1]); return 2; }
            *slot = argv[i];
        }
    }
    if (!url || !(anchor || policy) || !((store && secret && label) || p12)) {
        fprintf(stderr, "usage: curl_fetch (--store DB --secret-file F --label L | --p12 F [--password-file F])\n"
                        "                  (--anchor ROOT.pem | --policy P.json [--anchor ROOT.pem])\n"
                        "                  [--verify-as NAME] [--resolve HOST:PORT:ADDR] URL\n");
        return 2;
    }

    struct tls_setup setup = { 0 };
    setup.verify_as = verify_as;
    int rc;
    /* The identity: from the store, or the first one in the .p12 file. */
    if (store) {
        mtls_store *s = NULL;
        if ((rc = mtls_store_open_secret_file(store, secret, NULL, &s)) != MTLS_OK) return fail("store", rc);
        rc = mtls_store_get_identity(s, label, &setup.identity);
        mtls_store_close(s);
        if (rc != MTLS_OK) return fail(label, rc);
    } else {
        /* The password file is read by the library, with its rule for secret files (owner and
         * mode checked); mtls_string_free zeroes the copy. */
        char *password = NULL;
        if (password_file && (rc = mtls_password_file_read(password_file, &password)) != MTLS_OK) {
            fail(password_file, rc);
            return 2;
        }
        rc = mtls_identity_resolve(p12, NULL, password, NULL, NULL, &setup.identity);
        mtls_string_free(password);
        if (rc != MTLS_OK) return fail(p12, rc);
    }
    /* The policy: a policy file (host rules, pins), and/or the pinned anchor only, not the
     * system store. */
    if (policy) {
        if ((rc = mtls_policy_load(policy, &setup.policy)) != MTLS_OK) return fail(policy, rc);
    } else if ((rc = mtls_policy_new(&setup.policy)) != MTLS_OK) {
        return fail("policy", rc);
    }
    if (anchor) {
        mtls_cert **anchors = NULL;
        size_t n = 0;
        if ((rc = mtls_cert_list_load(anchor, &anchors, &n)) != MTLS_OK) return fail(anchor, rc);
        for (size_t i = 0; i < n; i++) mtls_policy_add_anchor(setup.policy, anchors[i]);
        mtls_policy_set_anchors_only(setup.policy, 1);
        mtls_cert_list_free(anchors, n);
    }

    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *curl = curl_easy_init();
    struct curl_slist *resolves = resolve ? curl_slist_append(NULL, resolve) : NULL;
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_RESOLVE, resolves);
    curl_easy_setopt(curl, CURLOPT_SSL_CTX_FUNCTION, configure_ssl_ctx);
    curl_easy_setopt(curl, CURLOPT_SSL_CTX_DATA, &setup);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
    /* With --verify-as, libmtls checks the certificate against that name; libcurl's own host
     * check (made after the handshake, against the URL's host) would refuse what was asked. */
    if (verify_as) curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    CURLcode res = curl_easy_perform(curl); /* the body goes to stdout */
    if (res != CURLE_OK) fprintf(stderr, "curl_fetch: %s\n", curl_easy_strerror(res));
    curl_slist_free_all(resolves);
    curl_easy_cleanup(curl);
    curl_global_cleanup();
    mtls_policy_free(setup.policy);
    mtls_identity_free(setup.identity);
    return res == CURLE_OK ? 0 : 1;
}
