/* Issuing through the C ABI: root, intermediate, server, client, keys, .p12, CRL, load, and
 * every function's NULL and bad arguments. Results are checked with the openssl command. */
#include "test_support.h"
#include <sys/stat.h>

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) { fprintf(stderr, "cannot write %s\n", path); exit(1); }
    fclose(f);
}

/* What the tests share: the options, and the CAs and certificates each test issues for the
 * ones after it (they run in order), their files in $MTLS_TEST_TMP, and the client's serial. */
static const char *tmp;
static char cmd[8192], root_pem[512], inter_pem[512], server_pem[512], client_pem[512], key_path[512], p12_path[512], crl_path[512];
static mtls_issue_options opts;
static mtls_issued *root = NULL, *inter = NULL, *server = NULL, *client = NULL, *loaded = NULL;
static char *serial = NULL;

TEST(issue_options_init) {
    CHECK_RC(mtls_issue_options_init(NULL, MTLS_ISSUE_OPTIONS_VERSION), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issue_options_init(&opts, 999), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_issue_options_init(&opts, MTLS_ISSUE_OPTIONS_VERSION));
    CHECK(opts.version == MTLS_ISSUE_OPTIONS_VERSION && opts.key_type == NULL && opts.validity_days == 0);
}

TEST(root_ca) {
    /* root */
    CHECK_RC(mtls_pki_root(NULL, NULL, &root), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_root("Root", NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_root("", NULL, &root), MTLS_E_INVALID_ARGUMENT);
    CHECK(root == NULL);
    mtls_issue_options bad = opts;
    bad.key_type = "rsa-1024";
    CHECK_RC(mtls_pki_root("Root", &bad, &root), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "unknown key kind") != NULL);
    bad = opts; bad.version = 7;
    CHECK_RC(mtls_pki_root("Root", &bad, &root), MTLS_E_INVALID_ARGUMENT);
    bad = opts; bad.validity_days = -1;
    CHECK_RC(mtls_pki_root("Root", &bad, &root), MTLS_E_INVALID_ARGUMENT);
    opts.now = 1893456000; /* 2030-01-01: a fixed clock */
    CHECK_OK(mtls_pki_root("C Root", &opts, &root));
}

TEST(intermediate_server_and_client) {
    /* intermediate, server, client */
    mtls_issued *tmpi = NULL;
    CHECK_RC(mtls_pki_issue(NULL, MTLS_PROFILE_INTERMEDIATE, "I", NULL, &inter), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, NULL, NULL, &inter), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "I", NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_issue(root, MTLS_PROFILE_ROOT, "I", NULL, &inter), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_issue(root, 99, "I", NULL, &inter), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "Customer C", &opts, &inter));
    CHECK_RC(mtls_pki_issue(inter, MTLS_PROFILE_INTERMEDIATE, "Sub", &opts, &tmpi), MTLS_E_INVALID_ARGUMENT); /* pathlen 0 */

    const char *dns[] = {"c.example", "*.c.example"};
    const char *ips[] = {"127.0.0.1", "::1"};
    mtls_issue_options sopts = opts;
    CHECK_RC(mtls_pki_issue(inter, MTLS_PROFILE_SERVER, "c.example", &sopts, &server), MTLS_E_INVALID_ARGUMENT); /* no names */
    sopts.dns_names = NULL; sopts.dns_count = 2;
    CHECK_RC(mtls_pki_issue(inter, MTLS_PROFILE_SERVER, "c.example", &sopts, &server), MTLS_E_INVALID_ARGUMENT);
    const char *bad_ip[] = {"1.2.3"};
    sopts.dns_names = dns; sopts.ip_addresses = bad_ip; sopts.ip_count = 1;
    CHECK_RC(mtls_pki_issue(inter, MTLS_PROFILE_SERVER, "c.example", &sopts, &server), MTLS_E_INVALID_ARGUMENT);
    sopts.ip_addresses = ips; sopts.ip_count = 2; sopts.key_type = "rsa-2048";
    CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_SERVER, "c.example", &sopts, &server));
    mtls_issue_options copts = opts;
    copts.key_type = "ed25519"; copts.validity_days = 30;
    CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "carol", &copts, &client));
}

TEST(reading_back) {
    char *s = NULL;
    /* reading back */
    mtls_cert *cert = NULL;
    CHECK_RC(mtls_issued_cert(NULL, &cert), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_cert(server, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_issued_cert(server, &cert));
    size_t n = 0; char **oids = NULL; int present, bits; unsigned int ku;
    CHECK_OK(mtls_cert_ekus(cert, &oids, &n)); CHECK(n == 1 && strcmp(oids[0], "1.3.6.1.5.5.7.3.1") == 0);
    mtls_string_list_free(oids, n);
    CHECK_OK(mtls_cert_key_usage(cert, &present, &ku)); CHECK(present && ku == (0x80 | 0x20));
    mtls_san *sans = NULL;
    CHECK_OK(mtls_cert_sans(cert, &sans, &n)); CHECK(n == 4);
    mtls_san_list_free(sans, n);
    CHECK_OK(mtls_cert_key_type(cert, &s, &bits)); CHECK(strcmp(s, "rsa2048") == 0); mtls_string_free(s);
    int64_t nb, na;
    CHECK_OK(mtls_cert_validity(cert, &nb, &na)); CHECK(nb == 1893456000 - 300 && na == 1893456000 + 1096LL * 86400);
    mtls_cert_free(cert);
    CHECK_OK(mtls_issued_cert(client, &cert));
    CHECK_OK(mtls_cert_ekus(cert, &oids, &n)); CHECK(n == 1 && strcmp(oids[0], "1.3.6.1.5.5.7.3.2") == 0);
    mtls_string_list_free(oids, n);
    CHECK_OK(mtls_cert_validity(cert, &nb, &na)); CHECK(na - 1893456000 == 30 * 86400);
    CHECK_OK(mtls_cert_serial_hex(cert, &serial));
    mtls_cert_free(cert);
    CHECK_OK(mtls_issued_cert(inter, &cert));
    int is_ca, path_len;
    CHECK_OK(mtls_cert_basic_constraints(cert, &present, &is_ca, &path_len)); CHECK(present && is_ca && path_len == 0);
    mtls_cert_free(cert);
}

TEST(chain_pem_verified_by_openssl) {
    char *s = NULL;
    CHECK_RC(mtls_issued_chain_pem(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_chain_pem(server, NULL), MTLS_E_INVALID_ARGUMENT);
    char *pem = NULL;
    CHECK_OK(mtls_issued_chain_pem(root, &pem));
    snprintf(root_pem, sizeof root_pem, "%s/pki-root.pem", tmp); write_file(root_pem, pem, strlen(pem)); mtls_string_free(pem);
    CHECK_OK(mtls_issued_chain_pem(inter, &pem));
    CHECK(strstr(strstr(pem, "BEGIN CERTIFICATE") + 1, "BEGIN CERTIFICATE") != NULL); /* intermediate + root */
    snprintf(inter_pem, sizeof inter_pem, "%s/pki-inter.pem", tmp); write_file(inter_pem, pem, strlen(pem)); mtls_string_free(pem);
    CHECK_OK(mtls_issued_chain_pem(server, &pem));
    snprintf(server_pem, sizeof server_pem, "%s/pki-server.pem", tmp); write_file(server_pem, pem, strlen(pem)); mtls_string_free(pem);
    CHECK_OK(mtls_issued_chain_pem(client, &pem));
    snprintf(client_pem, sizeof client_pem, "%s/pki-client.pem", tmp); write_file(client_pem, pem, strlen(pem)); mtls_string_free(pem);
    /* openssl verifies both leaves for their purpose at the fixed time, and refuses the wrong one */
    snprintf(cmd, sizeof cmd, "openssl verify -attime 1893460000 -purpose sslserver -CAfile %s -untrusted %s %s >/dev/null",
             root_pem, inter_pem, server_pem);
    t_sh(cmd);
    snprintf(cmd, sizeof cmd, "openssl verify -attime 1893460000 -purpose sslclient -CAfile %s -untrusted %s %s >/dev/null",
             root_pem, inter_pem, client_pem);
    t_sh(cmd);
    snprintf(cmd, sizeof cmd, "! openssl verify -attime 1893460000 -purpose sslserver -CAfile %s -untrusted %s %s >/dev/null 2>&1",
             root_pem, inter_pem, client_pem);
    t_sh(cmd);
}

TEST(keys_pem) {
    char *s = NULL;
    /* keys */
    CHECK_RC(mtls_issued_key_pem(NULL, NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_key_pem(inter, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_issued_key_pem(inter, NULL, &s));
    CHECK(strncmp(s, "-----BEGIN PRIVATE KEY-----", 27) == 0); mtls_string_free(s);
    CHECK_OK(mtls_issued_key_pem(inter, "kp", &s));
    CHECK(strncmp(s, "-----BEGIN ENCRYPTED PRIVATE KEY-----", 37) == 0);
    snprintf(key_path, sizeof key_path, "%s/pki-inter-key.pem", tmp); write_file(key_path, s, strlen(s)); mtls_string_free(s);
    /* A key file is a secret file: one everyone can read is refused, naming the chmod that fixes it. */
    CHECK(chmod(key_path, 0644) == 0);
    mtls_issued *refused = NULL;
    CHECK_RC(mtls_pki_load(inter_pem, key_path, "kp", &refused), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "chmod 600") != NULL && refused == NULL);
    CHECK(chmod(key_path, 0600) == 0);
}

TEST(load_ca_from_files) {
    /* load a CA back from files */
    CHECK_RC(mtls_pki_load(NULL, key_path, "kp", &loaded), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_load(inter_pem, NULL, "kp", &loaded), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_load(inter_pem, key_path, "kp", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_load(inter_pem, key_path, "wrong", &loaded), MTLS_E_BAD_PASSWORD);
    CHECK_RC(mtls_pki_load(inter_pem, key_path, NULL, &loaded), MTLS_E_BAD_PASSWORD);
    CHECK_RC(mtls_pki_load("/nonexistent/cert.pem", key_path, "kp", &loaded), MTLS_E_NOT_FOUND);
    CHECK_RC(mtls_pki_load(root_pem, key_path, "kp", &loaded), MTLS_E_KEY_MISMATCH);
    CHECK(loaded == NULL);
    CHECK_OK(mtls_pki_load(inter_pem, key_path, "kp", &loaded));
    mtls_issued *dave = NULL;
    CHECK_OK(mtls_pki_issue(loaded, MTLS_PROFILE_CLIENT, "dave", &opts, &dave));
    mtls_issued_free(dave);
}

TEST(export_p12) {
    /* .p12 */
    uint8_t *p12 = NULL; size_t p12_len = 0;
    CHECK_RC(mtls_issued_export_p12(NULL, "pw", 0, &p12, &p12_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_export_p12(client, NULL, 0, &p12, &p12_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_export_p12(client, "pw", 0, NULL, &p12_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_export_p12(client, "pw", 0, &p12, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_issued_export_p12(client, "pw", 0, &p12, &p12_len));
    snprintf(p12_path, sizeof p12_path, "%s/pki-client.p12", tmp); write_file(p12_path, p12, p12_len); mtls_bytes_free(p12);
    snprintf(cmd, sizeof cmd, "openssl pkcs12 -in %s -passin pass:pw -nokeys 2>/dev/null | grep -c 'BEGIN CERTIFICATE' | grep -qx 3 && "
             "openssl pkcs12 -in %s -passin pass:pw -nokeys 2>/dev/null | grep -q 'friendlyName: carol'", p12_path, p12_path);
    t_sh(cmd);
    CHECK_OK(mtls_issued_export_p12(server, "", 1, &p12, &p12_len));
    CHECK(p12_len > 0); mtls_bytes_free(p12);
}

TEST(as_identity) {
    /* as an mtls_identity */
    mtls_identity *ident = NULL;
    CHECK_RC(mtls_issued_identity(NULL, &ident), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_issued_identity(client, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_issued_identity(client, &ident));
    mtls_cert **chain = NULL; size_t chain_count = 0;
    CHECK_OK(mtls_identity_chain(ident, &chain, &chain_count)); CHECK(chain_count == 2);
    mtls_cert_list_free(chain, chain_count);
    mtls_identity_free(ident);
}

TEST(crl) {
    /* CRL */
    uint8_t *der = NULL; size_t der_len = 0;
    const char *serials[] = {serial};
    CHECK_RC(mtls_pki_crl(NULL, serials, 1, 1, 0, 0, &der, &der_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_crl(inter, NULL, 1, 1, 0, 0, &der, &der_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_crl(inter, serials, 1, 1, 0, 0, NULL, &der_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_crl(inter, serials, 1, 1, 0, 0, &der, NULL), MTLS_E_INVALID_ARGUMENT);
    const char *bad_serial[] = {"not-hex"};
    CHECK_RC(mtls_pki_crl(inter, bad_serial, 1, 1, 0, 0, &der, &der_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pki_crl(server, serials, 1, 1, 0, 0, &der, &der_len), MTLS_E_INVALID_ARGUMENT); /* not a CA */
    CHECK_OK(mtls_pki_crl(inter, NULL, 0, 1, 0, 1893456000, &der, &der_len));
    mtls_bytes_free(der);
    CHECK_OK(mtls_pki_crl(inter, serials, 1, 2, 7, 1893456000, &der, &der_len));
    snprintf(crl_path, sizeof crl_path, "%s/pki.crl", tmp); write_file(crl_path, der, der_len);
    size_t back_len; uint8_t *back = t_read_file(crl_path, &back_len);
    CHECK(back_len == der_len && memcmp(back, der, der_len) == 0);
    free(back); mtls_bytes_free(der);
    snprintf(cmd, sizeof cmd, "openssl crl -inform DER -in %s -noout -text | grep -qi '%s'", crl_path, serial);
    t_sh(cmd);
    mtls_string_free(serial);
}

TEST(revocation_sources) {
    /* revocation sources (issue 28): crl_url and ocsp_url are the issuer's, carried by what it
     * issues; a version 1 structure (no such fields) still works; non-http: URLs are refused */
    {
        mtls_issue_options ropts = opts;
        ropts.crl_url = "http://127.0.0.1:8080/customer-c.crl";
        ropts.ocsp_url = "http://127.0.0.1:8081/ocsp";
        mtls_issued *revocable = NULL;
        CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "revocable", &ropts, &revocable));
        mtls_cert *rc = NULL;
        CHECK_OK(mtls_issued_cert(revocable, &rc));
        char **urls = NULL; size_t n = 0;
        CHECK_OK(mtls_cert_crl_urls(rc, &urls, &n));
        CHECK(n == 1 && strcmp(urls[0], "http://127.0.0.1:8080/customer-c.crl") == 0);
        mtls_string_list_free(urls, n);
        CHECK_OK(mtls_cert_ocsp_urls(rc, &urls, &n));
        CHECK(n == 1 && strcmp(urls[0], "http://127.0.0.1:8081/ocsp") == 0);
        mtls_string_list_free(urls, n);
        CHECK_RC(mtls_cert_crl_urls(NULL, &urls, &n), MTLS_E_INVALID_ARGUMENT);
        CHECK_RC(mtls_cert_crl_urls(rc, NULL, &n), MTLS_E_INVALID_ARGUMENT);
        mtls_cert_free(rc);
        mtls_issued_free(revocable);
        /* without URLs: no extension */
        mtls_cert *plain = NULL;
        CHECK_OK(mtls_issued_cert(client, &plain));
        CHECK_OK(mtls_cert_crl_urls(plain, &urls, &n));
        CHECK(n == 0 && urls == NULL);
        mtls_cert_free(plain);
        const char *bad_urls[] = {"file:///etc/passwd", "https://x/y.crl", "http://a/x.crl,URI:file:///y", "http://a/", "ldap://x/y"};
        for (size_t i = 0; i < sizeof bad_urls / sizeof *bad_urls; i++) {
            ropts.crl_url = bad_urls[i];
            CHECK_RC(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "bad", &ropts, &revocable), MTLS_E_INVALID_ARGUMENT);
        }
        mtls_issue_options v1 = opts;
        v1.version = 1;
        v1.crl_url = "not read: version 1 has no such field";
        CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "v1", &v1, &revocable));
        mtls_issued_free(revocable);
    }
}

TEST(references) {
    /* references */
    CHECK(mtls_issued_ref(NULL) == NULL);
    CHECK(mtls_issued_ref(root) == root);
    mtls_issued_free(root);
    mtls_issued_free(NULL);
    mtls_issued_free(loaded);
    mtls_issued_free(client);
    mtls_issued_free(server);
    mtls_issued_free(inter);
    mtls_issued_free(root);
}

int main(void) {
    tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";

    RUN(issue_options_init);
    RUN(root_ca);
    RUN(intermediate_server_and_client);
    RUN(reading_back);
    RUN(chain_pem_verified_by_openssl);
    RUN(keys_pem);
    RUN(load_ca_from_files);
    RUN(export_p12);
    RUN(as_identity);
    RUN(crl);
    RUN(revocation_sources);
    RUN(references);
    DONE();
}
