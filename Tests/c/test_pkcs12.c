/* Identities and PKCS#12 through the C ABI: every function, NULL arguments included. */
#define _GNU_SOURCE
#include "test_support.h"
#include <dlfcn.h>

static char tmp_dir[512];

static uint8_t *make_p12(const char *args, const char *name, size_t *len) {
    char cmd[4096], path[1024];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    snprintf(cmd, sizeof cmd,
             "cd %s && openssl pkcs12 -export -inkey leaf.key -in leaf.pem -certfile root.pem -name 'c id' "
             "-passout pass:pw %s -out %s", tmp_dir, args, path);
    t_sh(cmd);
    return t_read_file(path, len);
}

/* The identity of default.p12 (RSA 2048, "c id", chain of 1), for the tests that use one. */
static mtls_identity *id;

TEST(import_default_scheme_and_arguments) {
    /* import: the OpenSSL default scheme */
    size_t len; uint8_t *der = make_p12("", "default.p12", &len);
    mtls_pkcs12 *p12 = NULL;
    CHECK_RC(mtls_pkcs12_import(NULL, len, "pw", &p12), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_import(der, len, "pw", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_import(der, len, "wrong", &p12), MTLS_E_BAD_PASSWORD);
    CHECK(strstr(mtls_last_error(), "password") != NULL);
    CHECK_RC(mtls_pkcs12_import(der, len, NULL, &p12), MTLS_E_BAD_PASSWORD);
    CHECK_RC(mtls_pkcs12_import(der, len / 2, "pw", &p12), MTLS_E_CORRUPT);
    CHECK_RC(mtls_pkcs12_import((const uint8_t *)"hello", 5, "pw", &p12), MTLS_E_NOT_PKCS12);
    CHECK_RC(mtls_pkcs12_import(NULL, 0, "pw", &p12), MTLS_E_NOT_PKCS12);
    CHECK(p12 == NULL);
    CHECK_OK(mtls_pkcs12_import(der, len, "pw", &p12));

    size_t n = 99;
    mtls_identity **ids = (mtls_identity **)1;
    CHECK_RC(mtls_pkcs12_identities(NULL, &ids, &n), MTLS_E_INVALID_ARGUMENT); CHECK(ids == NULL && n == 0);
    CHECK_RC(mtls_pkcs12_identities(p12, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_identities(p12, &ids, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_cert **certs = NULL;
    CHECK_RC(mtls_pkcs12_certs(NULL, &certs, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_certs(p12, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_pkcs12_certs(p12, &certs, &n)); CHECK(n == 2 && certs[0] && certs[1]);
    mtls_cert_list_free(certs, n);
    char *encoding = NULL;
    CHECK_RC(mtls_pkcs12_password_encoding(NULL, &encoding), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_password_encoding(p12, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_pkcs12_password_encoding(p12, &encoding)); CHECK(strcmp(encoding, "given") == 0);
    mtls_string_free(encoding);
    {   /* written with "", opened with no password: both encodings are tried */
        size_t elen; uint8_t *eder = make_p12("-passout pass:", "empty-c.p12", &elen);
        mtls_pkcs12 *e = NULL;
        CHECK_OK(mtls_pkcs12_import(eder, elen, NULL, &e));
        CHECK_OK(mtls_pkcs12_password_encoding(e, &encoding)); CHECK(strcmp(encoding, "empty") == 0);
        mtls_string_free(encoding);
        mtls_pkcs12_free(e);
        free(eder);
    }

    CHECK_OK(mtls_pkcs12_identities(p12, &ids, &n)); CHECK(n == 1);
    mtls_identity *own = mtls_identity_ref(ids[0]);
    mtls_identity_list_free(ids, n);
    mtls_identity_list_free(NULL, 0);
    mtls_pkcs12_free(p12);   /* the identity outlives the import result */
    mtls_pkcs12_free(NULL);
    CHECK_OK(mtls_identity_friendly_name(own, &encoding)); /* still usable */
    CHECK(encoding && strcmp(encoding, "c id") == 0);
    mtls_string_free(encoding);
    mtls_identity_free(own);
    free(der);
}

TEST(identity_accessors) {
    size_t n = 0;
    /* identity accessors */
    char *s = NULL; int bits = 0;
    CHECK_RC(mtls_identity_key_type(NULL, &s, &bits), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_key_type(id, NULL, &bits), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_key_type(id, &s, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_key_type(id, &s, &bits));
    CHECK(strcmp(s, "rsa2048") == 0 && bits == 2048); mtls_string_free(s);
    CHECK_RC(mtls_identity_friendly_name(NULL, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_friendly_name(id, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_friendly_name(id, &s)); CHECK(s && strcmp(s, "c id") == 0); mtls_string_free(s);
    uint8_t *kid = NULL; size_t kid_len = 0;
    CHECK_RC(mtls_identity_local_key_id(NULL, &kid, &kid_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_local_key_id(id, NULL, &kid_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_local_key_id(id, &kid, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_local_key_id(id, &kid, &kid_len)); CHECK(kid && kid_len == 20); mtls_bytes_free(kid);
    mtls_cert *leaf = NULL;
    CHECK_RC(mtls_identity_leaf(NULL, &leaf), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_leaf(id, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_leaf(id, &leaf));
    CHECK_OK(mtls_cert_subject_summary(leaf, &s)); CHECK(strcmp(s, "c.example") == 0); mtls_string_free(s);
    mtls_cert_free(leaf);
    mtls_cert **ichain = NULL;
    CHECK_RC(mtls_identity_chain(NULL, &ichain, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_chain(id, NULL, &n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_chain(id, &ichain, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_chain(id, &ichain, &n)); CHECK(n == 1);
    CHECK_OK(mtls_cert_subject_summary(ichain[0], &s)); CHECK(strcmp(s, "C Root") == 0); mtls_string_free(s);
    mtls_cert_list_free(ichain, n);
    unsigned int flags = 0; int code = -1;
    CHECK_RC(mtls_identity_chain_check(NULL, &flags, &code, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_chain_check(id, NULL, &code, &s), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_identity_chain_check(id, &flags, NULL, NULL));
    CHECK_OK(mtls_identity_chain_check(id, &flags, &code, &s));
    CHECK(flags == (MTLS_CHAIN_VERIFIED | MTLS_CHAIN_COMPLETE | MTLS_CHAIN_SIGNATURES_OK | MTLS_CHAIN_WITHIN_VALIDITY));
    CHECK(code == 0 && strcmp(s, "ok") == 0); mtls_string_free(s);
    CHECK(mtls_identity_ref(NULL) == NULL);
    mtls_identity *extra = mtls_identity_ref(id);
    CHECK(extra == id);
    mtls_identity_free(extra);
    mtls_identity_free(NULL);
}

TEST(export_both_schemes_and_back) {
    char *s = NULL;
    size_t n = 0;
    /* export, both schemes, and back */
    uint8_t *out = NULL; size_t out_len = 0;
    CHECK_RC(mtls_pkcs12_export(NULL, "x", MTLS_PKCS12_MODERN, NULL, &out, &out_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_export(id, NULL, MTLS_PKCS12_MODERN, NULL, &out, &out_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_export(id, "x", MTLS_PKCS12_MODERN, NULL, NULL, &out_len), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_export(id, "x", MTLS_PKCS12_MODERN, NULL, &out, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_pkcs12_export(id, "x", 0x80, NULL, &out, &out_len), MTLS_E_INVALID_ARGUMENT);
    int schemes[2] = { MTLS_PKCS12_MODERN, MTLS_PKCS12_LEGACY };
    for (int i = 0; i < 2; i++) {
        CHECK_OK(mtls_pkcs12_export(id, "", schemes[i], "renamed", &out, &out_len));
        CHECK(out_len > 500);
        mtls_pkcs12 *back = NULL;
        /* written with "": opens with no password too, and says so */
        CHECK_OK(mtls_pkcs12_import(out, out_len, NULL, &back));
        char *enc = NULL;
        CHECK_OK(mtls_pkcs12_password_encoding(back, &enc)); CHECK(strcmp(enc, "empty") == 0); mtls_string_free(enc);
        mtls_pkcs12_free(back); back = NULL;
        CHECK_RC(mtls_pkcs12_import(out, out_len, "x", &back), MTLS_E_BAD_PASSWORD);
        CHECK_OK(mtls_pkcs12_import(out, out_len, "", &back));
        mtls_identity **bids = NULL; size_t nb = 0;
        CHECK_OK(mtls_pkcs12_identities(back, &bids, &nb)); CHECK(nb == 1);
        mtls_identity *bid = mtls_identity_ref(bids[0]);
        mtls_identity_list_free(bids, nb);
        CHECK_OK(mtls_identity_friendly_name(bid, &s)); CHECK(strcmp(s, "renamed") == 0); mtls_string_free(s);
        mtls_cert **bchain = NULL;
        CHECK_OK(mtls_identity_chain(bid, &bchain, &n)); CHECK(n == 1);
        mtls_cert_list_free(bchain, n);
        mtls_identity_free(bid);
        mtls_pkcs12_free(back);
        mtls_bytes_free(out);
    }
}

TEST(identity_from_pem) {
    char *s = NULL;
    uint8_t *kid = NULL; size_t kid_len = 0;
    /* identity from PEM */
    size_t cl, kl, el;
    char path[1024];
    snprintf(path, sizeof path, "%s/chain.pem", tmp_dir); char *chain = (char *)t_read_file(path, &cl); chain[cl] = 0;
    snprintf(path, sizeof path, "%s/leaf.key", tmp_dir); char *key = (char *)t_read_file(path, &kl); key[kl] = 0;
    snprintf(path, sizeof path, "%s/leaf-enc.key", tmp_dir); char *enc = (char *)t_read_file(path, &el); enc[el] = 0;
    snprintf(path, sizeof path, "%s/root.pem", tmp_dir); size_t rl; char *root = (char *)t_read_file(path, &rl); root[rl] = 0;
    mtls_identity *pid = NULL;
    CHECK_RC(mtls_identity_from_pem(NULL, key, NULL, &pid), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_from_pem(chain, NULL, NULL, &pid), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_from_pem(chain, key, NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_identity_from_pem(root, key, NULL, &pid), MTLS_E_KEY_MISMATCH);
    CHECK_RC(mtls_identity_from_pem(chain, enc, NULL, &pid), MTLS_E_BAD_PASSWORD);
    CHECK_RC(mtls_identity_from_pem(chain, enc, "nope", &pid), MTLS_E_BAD_PASSWORD);
    CHECK_RC(mtls_identity_from_pem("junk", key, NULL, &pid), MTLS_E_PARSE);
    CHECK(pid == NULL);
    CHECK_OK(mtls_identity_from_pem(chain, enc, "kp", &pid));
    CHECK_OK(mtls_identity_friendly_name(pid, &s)); CHECK(s == NULL);
    CHECK_OK(mtls_identity_local_key_id(pid, &kid, &kid_len)); CHECK(kid == NULL && kid_len == 0);
    mtls_identity_free(pid);
    CHECK_OK(mtls_identity_from_pem(chain, key, NULL, &pid));
    mtls_identity_free(pid);
    free(chain); free(key); free(enc); free(root);
}

TEST(legacy_rc2_files_open_in_libmtls_context_only) {
    size_t len = 0;
    char path[1024];
    mtls_pkcs12 *p12 = NULL;
    /* legacy (RC2-40) files open, and the program's own default OpenSSL context still has no
       RC2: the legacy provider lives only in libmtls's context. */
    uint8_t *legacy = make_p12("-legacy -certpbe PBE-SHA1-RC2-40", "rc2.p12", &len);
    CHECK_RC(mtls_pkcs12_load(NULL, "pw", &p12), MTLS_E_INVALID_ARGUMENT);
    snprintf(path, sizeof path, "%s/rc2.p12", tmp_dir);
    CHECK_RC(mtls_pkcs12_load(path, "pw", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_pkcs12_load(path, "pw", &p12));
    mtls_pkcs12_free(p12);
    CHECK_OK(mtls_pkcs12_import(legacy, len, "pw", &p12));
    mtls_pkcs12_free(p12);
    void *(*cipher_fetch)(void *, const char *, const char *);
    *(void **)(&cipher_fetch) = dlsym(RTLD_DEFAULT, "EVP_CIPHER_fetch");
    CHECK(cipher_fetch != NULL);
    CHECK(cipher_fetch(NULL, "RC2-40-CBC", NULL) == NULL);
    CHECK(cipher_fetch(NULL, "AES-256-CBC", NULL) != NULL);
    free(legacy);
}

TEST(a_certificate_only_file) {
    char cmd[4096], path[1024];
    mtls_pkcs12 *p12 = NULL;
    mtls_identity **ids = NULL;
    mtls_cert **certs = NULL;
    size_t n = 0;
    /* a certificate-only file */
    snprintf(cmd, sizeof cmd, "cd %s && openssl pkcs12 -export -nokeys -in chain.pem -passout pass:pw -out certs.p12", tmp_dir);
    t_sh(cmd);
    snprintf(path, sizeof path, "%s/certs.p12", tmp_dir);
    CHECK_OK(mtls_pkcs12_load(path, "pw", &p12));
    CHECK_OK(mtls_pkcs12_identities(p12, &ids, &n)); CHECK(n == 0 && ids == NULL); /* certificates only */
    CHECK_OK(mtls_pkcs12_certs(p12, &certs, &n)); CHECK(n == 2);
    mtls_cert_list_free(certs, n);
    mtls_pkcs12_free(p12);
}

int main(void) {
    const char *base = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[4096];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/p12-c", base);
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s && cd %s && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout root.key -out root.pem "
             "-subj '/CN=C Root' -days 5 2>/dev/null && "
             "openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj '/CN=c.example' 2>/dev/null && "
             "openssl x509 -req -in leaf.csr -CA root.pem -CAkey root.key -CAcreateserial -out leaf.pem -days 5 2>/dev/null && "
             "openssl pkey -in leaf.key -aes256 -passout pass:kp -out leaf-enc.key && "
             "cat leaf.pem root.pem > chain.pem",
             tmp_dir, tmp_dir, tmp_dir);
    t_sh(cmd);
    {
        size_t len = 0, n = 0;
        uint8_t *der = make_p12("", "default.p12", &len);
        mtls_pkcs12 *p12 = NULL;
        mtls_identity **ids = NULL;
        CHECK_OK(mtls_pkcs12_import(der, len, "pw", &p12));
        CHECK_OK(mtls_pkcs12_identities(p12, &ids, &n));
        CHECK(n == 1);
        id = mtls_identity_ref(ids[0]);
        mtls_identity_list_free(ids, n);
        mtls_pkcs12_free(p12);
        free(der);
    }

    RUN(import_default_scheme_and_arguments);
    RUN(identity_accessors);
    RUN(export_both_schemes_and_back);
    RUN(identity_from_pem);
    RUN(legacy_rc2_files_open_in_libmtls_context_only);
    RUN(a_certificate_only_file);
    mtls_identity_free(id);
    DONE();
}
