/* What the C layer converts and what the core decides: options_init takes the core's defaults;
 * a count above SSIZE_MAX and a string that is not UTF-8 are MTLS_E_INVALID_ARGUMENT wherever
 * they are given (counts in option structs, list frees, optional strings); a CSR without a CN
 * gets the core's fallback name; an issued .p12 carries the CN as its friendly name; a listener's
 * CA names are converted and checked, and a version 1 structure still works. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test_support.h"

/* What several tests share: a fixed clock's root, intermediate and client "alice". */
static const char *tmp;
static mtls_issue_options io;
static mtls_issued *root, *inter, *client;
static mtls_cert *cert;
static mtls_identity *alice;

/* Secret files are read by the core's one reader, for C programs too (the examples use it):
 * the first line without its ending, owner and mode checked, NULL out on every error. */
TEST(secret_files_read_by_the_core) {
        char pw_path[512];
        char *pw = (char *)1;
        snprintf(pw_path, sizeof pw_path, "%s/facts-pw.txt", tmp);
        FILE *f = fopen(pw_path, "w");
        CHECK(f != NULL);
        fputs("s3cret\r\nsecond line\n", f);
        fclose(f);
        CHECK(chmod(pw_path, 0600) == 0);
        CHECK_OK(mtls_password_file_read(pw_path, &pw));
        CHECK(pw != NULL && strcmp(pw, "s3cret") == 0);
        mtls_string_free(pw);
        CHECK(chmod(pw_path, 0644) == 0);
        pw = (char *)1;
        CHECK_RC(mtls_password_file_read(pw_path, &pw), MTLS_E_INVALID_ARGUMENT);
        CHECK(pw == NULL && strstr(mtls_last_error(), "readable by everyone") != NULL);
        CHECK(chmod(pw_path, 0600) == 0 && chown(pw_path, 4242, 4242) == 0);
        CHECK_RC(mtls_password_file_read(pw_path, &pw), MTLS_E_INVALID_ARGUMENT);
        CHECK(strstr(mtls_last_error(), "owned by another user") != NULL);
        /* Over 64 KiB: MTLS_E_LIMIT, the code mtls.h names. */
        CHECK(chown(pw_path, getuid(), getgid()) == 0);
        f = fopen(pw_path, "w");
        CHECK(f != NULL);
        for (int i = 0; i < 64 * 1024 + 1; i++) fputc('x', f);
        fclose(f);
        CHECK_RC(mtls_password_file_read(pw_path, &pw), MTLS_E_LIMIT);
        CHECK(pw == NULL);
        CHECK(unlink(pw_path) == 0);
        CHECK_RC(mtls_password_file_read(pw_path, &pw), MTLS_E_NOT_FOUND);
        CHECK_RC(mtls_password_file_read(NULL, &pw), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_password_file_read(pw_path, NULL), MTLS_E_INVALID_ARGUMENT);
}

    /* URLs are read by the core's one parser (issue 23): an RFC 6874 zone decoded, the scheme's
     * default port, a broken zone refused with *host NULL. */
TEST(urls_read_by_the_core) {
        char *host = (char *)1;
        uint16_t port = 0;
        CHECK_OK(mtls_url_host_port("http://[fe80::1%25eth0]:3128/x", &host, &port));
        CHECK(host != NULL && strcmp(host, "fe80::1%eth0") == 0 && port == 3128);
        mtls_string_free(host);
        CHECK_OK(mtls_url_host_port("HTTPS://ca.test/acme", &host, &port));
        CHECK(strcmp(host, "ca.test") == 0 && port == 443);
        mtls_string_free(host);
        host = (char *)1;
        CHECK_RC(mtls_url_host_port("http://[fe80::1%25%zz]/", &host, &port), MTLS_E_INVALID_ARGUMENT);
        CHECK(host == NULL && strstr(mtls_last_error(), "percent-encoding in the IPv6 zone") != NULL);
        CHECK_RC(mtls_url_host_port("ftp://ca.test/", &host, &port), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_url_host_port(NULL, &host, &port), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_url_host_port("http://ca.test/", NULL, &port), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_url_host_port("http://ca.test/", &host, NULL), MTLS_E_INVALID_ARGUMENT);
}

/* A host with an optional port is read by the core's one splitter (issue 36), as mtls connect
 * HOST:PORT and host rules read it: brackets off, a bare IPv6 literal all host, port 0 when none,
 * a malformed port or bracket refused with *host NULL. */
TEST(hosts_split_by_the_core) {
        static const struct { const char *text, *host; uint16_t port; } good[] = {
            {"[::1]:443", "::1", 443}, {"::1", "::1", 0}, {"[::1]", "::1", 0},
            {"fe80::1%eth0", "fe80::1%eth0", 0}, {"[fe80::1%eth0]:8443", "fe80::1%eth0", 8443},
            {"server.test:8443", "server.test", 8443}, {"server.test", "server.test", 0},
        };
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            char *host = NULL;
            uint16_t port = 1;
            CHECK_OK(mtls_host_port(good[i].text, &host, &port));
            CHECK(host != NULL && strcmp(host, good[i].host) == 0 && port == good[i].port);
            mtls_string_free(host);
        }
        static const char *bad[] = {"h:0", "h:65536", "h:", "h:+443", "[::1", "[::1]x", ":443", "[]", ""};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char *host = (char *)1;
            uint16_t port = 0;
            CHECK_RC(mtls_host_port(bad[i], &host, &port), MTLS_E_INVALID_ARGUMENT);
            CHECK(host == NULL);
        }
        char *host = NULL;
        uint16_t port = 0;
        CHECK_RC(mtls_host_port(NULL, &host, &port), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_host_port("h", NULL, &port), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_host_port("h", &host, NULL), MTLS_E_INVALID_ARGUMENT);
}

/* A host given apart from its port is read once, by the core: mtls_host_only and mtls_conn_connect
 * refuse "h:443" before any name lookup (it used to reach getaddrinfo as the name "h:443"). */
TEST(a_host_given_apart_from_its_port_carries_none) {
        static const struct { const char *text, *host; } good[] = {
            {"[::1]", "::1"}, {"::1", "::1"}, {"fe80::1%eth0", "fe80::1%eth0"}, {"server.test", "server.test"},
        };
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            char *host = NULL;
            CHECK_OK(mtls_host_only(good[i].text, &host));
            CHECK(host != NULL && strcmp(host, good[i].host) == 0);
            mtls_string_free(host);
        }
        static const char *bad[] = {"server.test:443", "[::1]:443", "127.0.0.1:1", "[::1", "[]", ""};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char *host = (char *)1;
            CHECK_RC(mtls_host_only(bad[i], &host), MTLS_E_INVALID_ARGUMENT);
            CHECK(host == NULL);
        }
        char *host = NULL;
        CHECK_RC(mtls_host_only(NULL, &host), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_host_only("h", NULL), MTLS_E_INVALID_ARGUMENT);
        mtls_conn *conn = (mtls_conn *)1;
        CHECK_RC(mtls_conn_connect("127.0.0.1:443", 443, NULL, &conn), MTLS_E_INVALID_ARGUMENT);
        CHECK(conn == NULL);
        const char *why = mtls_last_error();
        CHECK(why != NULL && strstr(why, "without a port") != NULL);
        conn = (mtls_conn *)1;
        CHECK_RC(mtls_conn_open("[::1]:443", 443, NULL, &conn), MTLS_E_INVALID_ARGUMENT);
        CHECK(conn == NULL);
}

TEST(option_defaults_come_from_the_core) {
    /* Defaults come from the core: what a zeroed struct would mean, spelt out. */
    mtls_conn_options o;
    memset(&o, 0x5a, sizeof o);
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    CHECK(o.version == MTLS_CONN_OPTIONS_VERSION && o.min_tls == MTLS_TLS_1_2 && o.max_tls == MTLS_TLS_1_3);
    CHECK(o.connect_timeout_ms == 30000 && o.handshake_timeout_ms == 30000 && o.io_timeout_ms < 0);
    CHECK(o.non_blocking == 0 && o.no_session_resumption == 0);
    CHECK(o.sni == NULL && o.verify_as == NULL && o.alpn == NULL && o.identity == NULL && o.candidates == NULL
          && o.candidate_count == 0 && o.policy == NULL && o.overrides == NULL && o.identity_source == NULL);
    CHECK_RC(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION + 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_conn_options_init(NULL, MTLS_CONN_OPTIONS_VERSION), MTLS_E_INVALID_ARGUMENT);
    mtls_listener_options lo;
    memset(&lo, 0x5a, sizeof lo);
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    CHECK(lo.version == MTLS_LISTENER_OPTIONS_VERSION && lo.client_auth == MTLS_CLIENT_AUTH_REQUIRE);
    CHECK(lo.min_tls == MTLS_TLS_1_2 && lo.max_tls == MTLS_TLS_1_3 && lo.handshake_timeout_ms == 30000 && lo.io_timeout_ms < 0);
    CHECK(lo.identity == NULL && lo.client_policy == NULL && lo.alpn == NULL && lo.no_session_tickets == 0);
    CHECK(lo.client_overrides == NULL && lo.first_byte_timeout_ms == 5000 && lo.max_handshakes_per_address == 32);
    CHECK(lo.client_ca_names == MTLS_CA_NAMES_ANCHORS && lo.client_ca_certs == NULL && lo.client_ca_cert_count == 0);
    CHECK_RC(mtls_listener_options_init(&lo, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION + 1), MTLS_E_INVALID_ARGUMENT);
    /* A version 1 caller's structure ends before client_overrides: init writes nothing past it,
     * and a listener made from it gets version 2's defaults (the CA names included). */
    memset(&lo, 0x5a, sizeof lo);
    CHECK_OK(mtls_listener_options_init(&lo, 1));
    CHECK(lo.version == 1 && lo.max_tls == MTLS_TLS_1_3 && lo.client_ca_names == 0x5a5a5a5a);
    mtls_issue_options fresh;
    memset(&fresh, 0x5a, sizeof fresh);
    CHECK_OK(mtls_issue_options_init(&fresh, MTLS_ISSUE_OPTIONS_VERSION));
    CHECK(fresh.version == MTLS_ISSUE_OPTIONS_VERSION && fresh.key_type == NULL && fresh.validity_days == 0 && fresh.dns_count == 0);
}

TEST(counts_above_ssize_max_are_errors) {
    mtls_conn_options o;
    mtls_issued *none = NULL;
    /* A count above SSIZE_MAX is an error, not "none". */
    mtls_conn *conn = NULL;
    o = (mtls_conn_options){0};
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.candidate_count = SIZE_MAX;
    CHECK_RC(mtls_conn_connect("127.0.0.1", 1, &o, &conn), MTLS_E_INVALID_ARGUMENT);
    CHECK(conn == NULL && strstr(mtls_last_error(), "SSIZE_MAX") != NULL);

    mtls_issue_options huge = io;
    huge.dns_count = SIZE_MAX;
    CHECK_RC(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "huge", &huge, &none), MTLS_E_INVALID_ARGUMENT);
    CHECK(none == NULL && strstr(mtls_last_error(), "SSIZE_MAX") != NULL);
}

TEST(a_list_freed_with_a_count_above_ssize_max_is_left_alone) {
    /* A list freed with a count above SSIZE_MAX is left alone (the last error says why), so the
     * right call can still free it. */
    char **ekus = NULL;
    size_t n = 0;
    CHECK_OK(mtls_cert_ekus(cert, &ekus, &n));
    CHECK(n == 1 && strcmp(ekus[0], "1.3.6.1.5.5.7.3.2") == 0); /* clientAuth */
    mtls_string_list_free(ekus, SIZE_MAX);
    CHECK(strstr(mtls_last_error(), "SSIZE_MAX") != NULL);
    CHECK(strcmp(ekus[0], "1.3.6.1.5.5.7.3.2") == 0); /* untouched: neither wiped nor freed */
    mtls_string_list_free(ekus, n);
}

TEST(optional_strings_that_are_not_utf8_are_refused) {
    mtls_conn_options o;
    mtls_conn *conn = NULL;
    /* An optional string that is not UTF-8 is refused like a required one, never repaired. */
    uint8_t *p12 = NULL;
    size_t p12_len = 0;
    CHECK_RC(mtls_pkcs12_export(alice, "pw", MTLS_PKCS12_MODERN, "bad \xff\xfe name", &p12, &p12_len), MTLS_E_INVALID_ARGUMENT);
    CHECK(p12 == NULL && strstr(mtls_last_error(), "friendly_name is not valid UTF-8") != NULL);
    o = (mtls_conn_options){0};
    CHECK_OK(mtls_conn_options_init(&o, MTLS_CONN_OPTIONS_VERSION));
    o.sni = "\xc3\x28";
    CHECK_RC(mtls_conn_connect("127.0.0.1", 1, &o, &conn), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "sni is not valid UTF-8") != NULL);
    mtls_issue_options bad_key = io;
    bad_key.key_type = "ec-p256\xff";
    mtls_issued *none = NULL;
    CHECK_RC(mtls_pki_root("R", &bad_key, &none), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "key_type is not valid UTF-8") != NULL);
}

TEST(an_issued_p12s_friendly_name_is_the_cn) {
    uint8_t *p12 = NULL;
    size_t p12_len = 0;
    /* An issued .p12's friendly name is the certificate's CN (the core's choice for C and CLI). */
    CHECK_OK(mtls_issued_export_p12(client, "pw", MTLS_PKCS12_MODERN, &p12, &p12_len));
    mtls_pkcs12 *parsed = NULL;
    mtls_identity **ids = NULL;
    size_t nids = 0;
    char *fname = NULL;
    CHECK_OK(mtls_pkcs12_import(p12, p12_len, "pw", &parsed));
    CHECK_OK(mtls_pkcs12_identities(parsed, &ids, &nids));
    CHECK(nids == 1);
    CHECK_OK(mtls_identity_friendly_name(ids[0], &fname));
    CHECK(fname && strcmp(fname, "alice") == 0);
    mtls_string_free(fname);
    mtls_identity_list_free(ids, nids);
    mtls_pkcs12_free(parsed);
    mtls_bytes_free(p12);
}

TEST(a_csr_without_cn_gets_the_cores_fallback) {
    char cmd[4096], csr_path[512];
    /* A CSR without a CN: the core's fallback, the first DNS name (as `mtls pki sign`). */
    snprintf(csr_path, sizeof csr_path, "%s/facts-nocn.csr", tmp);
    snprintf(cmd, sizeof cmd, "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout %s/facts-nocn.key "
             "-out %s -subj /O=NoCN 2>/dev/null", tmp, csr_path);
    t_sh(cmd);
    size_t csr_len = 0;
    uint8_t *csr = t_read_file(csr_path, &csr_len);
    mtls_cert *signed_cert = NULL;
    CHECK_RC(mtls_pki_sign_csr(inter, MTLS_PROFILE_SERVER, csr, csr_len, NULL, &io, &signed_cert), MTLS_E_INVALID_ARGUMENT);
    CHECK(signed_cert == NULL);
    const char *dns[] = {"fallback.example"};
    mtls_issue_options named = io;
    named.dns_names = dns;
    named.dns_count = 1;
    CHECK_OK(mtls_pki_sign_csr(inter, MTLS_PROFILE_SERVER, csr, csr_len, NULL, &named, &signed_cert));
    char *summary = NULL;
    CHECK_OK(mtls_cert_subject_summary(signed_cert, &summary));
    CHECK(strcmp(summary, "fallback.example") == 0);
    mtls_string_free(summary);
    mtls_cert_free(signed_cert);
    free(csr);
}

TEST(listener_ca_names_checked_as_arguments) {
    mtls_listener_options lo;
    /* The CA names of a listener's certificate request: checked as arguments (the handshakes
     * are in the Python, Swift and e2e tests). */
    mtls_listener *listener = NULL;
    mtls_policy *client_policy = NULL;
    CHECK_OK(mtls_policy_new(&client_policy));
    CHECK_OK(mtls_policy_add_anchor(client_policy, cert));
    lo = (mtls_listener_options){0};
    CHECK_OK(mtls_listener_options_init(&lo, MTLS_LISTENER_OPTIONS_VERSION));
    lo.identity = alice;
    lo.client_policy = client_policy;
    lo.client_ca_names = 7;
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, &lo, &listener), MTLS_E_INVALID_ARGUMENT);
    CHECK(listener == NULL && strstr(mtls_last_error(), "MTLS_CA_NAMES_") != NULL);
    lo.client_ca_names = MTLS_CA_NAMES_LIST;
    lo.client_ca_cert_count = 1; /* and no certificates */
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, &lo, &listener), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "client_ca_certs") != NULL);
    mtls_cert *const names[] = {cert};
    lo.client_ca_certs = names;
    lo.client_ca_cert_count = SIZE_MAX;
    CHECK_RC(mtls_listener_new("127.0.0.1", 0, &lo, &listener), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "SSIZE_MAX") != NULL);
    lo.client_ca_cert_count = 1;
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    mtls_listener_free(listener);
    lo.client_ca_names = MTLS_CA_NAMES_NONE;
    lo.client_ca_certs = NULL; /* not read */
    CHECK_OK(mtls_listener_new("127.0.0.1", 0, &lo, &listener));
    mtls_listener_free(listener);
}

int main(void) {
    tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    CHECK_OK(mtls_issue_options_init(&io, MTLS_ISSUE_OPTIONS_VERSION));
    io.now = 1893456000; /* 2030-01-01: a fixed clock */
    CHECK_OK(mtls_pki_root("Facts Root", &io, &root));
    CHECK_OK(mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "Facts CA", &io, &inter));
    CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "alice", &io, &client));
    CHECK_OK(mtls_issued_cert(client, &cert));
    CHECK_OK(mtls_issued_identity(client, &alice));

    RUN(secret_files_read_by_the_core);
    RUN(urls_read_by_the_core);
    RUN(hosts_split_by_the_core);
    RUN(a_host_given_apart_from_its_port_carries_none);
    RUN(option_defaults_come_from_the_core);
    RUN(counts_above_ssize_max_are_errors);
    RUN(a_list_freed_with_a_count_above_ssize_max_is_left_alone);
    RUN(optional_strings_that_are_not_utf8_are_refused);
    RUN(an_issued_p12s_friendly_name_is_the_cn);
    RUN(a_csr_without_cn_gets_the_cores_fallback);
    RUN(listener_ca_names_checked_as_arguments);

    mtls_identity_free(alice);
    mtls_cert_free(cert);
    mtls_issued_free(client);
    mtls_issued_free(inter);
    mtls_issued_free(root);
    DONE();
}
