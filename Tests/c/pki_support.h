/* The connection tests' PKI (scripts/test-pki.sh writes it into `pki`): identities and
 * anchored policies made from its files. Shared by test_tls, test_sigpipe and test_load. */
#ifndef MTLS_PKI_SUPPORT_H
#define MTLS_PKI_SUPPORT_H
#include "test_support.h"

/* The folder the PKI is in; each program sets it first. */
static char pki[512];

/* Makes a test PKI of scripts/test-pki.sh, of the shape `shape` ("": the connection PKI,
 * "--allow": the allow-list shapes...), in $MTLS_TEST_TMP/NAME (else /tmp/NAME) and points `pki`
 * at it. */
static inline void make_pki_shape(const char *shape, const char *name) {
    const char *tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    char cmd[1100];
    snprintf(pki, sizeof pki, "%s/%s", tmp, name);
    snprintf(cmd, sizeof cmd, "scripts/test-pki.sh %s %s", shape, pki);
    t_sh(cmd);
}

/* The connection PKI in $MTLS_TEST_TMP/NAME. */
static inline void make_pki(const char *name) { make_pki_shape("", name); }

static inline char *text_file(const char *name) {
    char path[1024]; size_t len;
    snprintf(path, sizeof path, "%s/%s", pki, name);
    uint8_t *b = t_read_file(path, &len);
    b[len] = 0;
    return (char *)b;
}

static inline mtls_identity *identity(const char *name, const char *intermediate) {
    char certname[128], keyname[128], both[16384];
    snprintf(certname, sizeof certname, "%s.pem", name);
    snprintf(keyname, sizeof keyname, "%s.key", name);
    char *cert = text_file(certname), *key = text_file(keyname), *inter = text_file(intermediate);
    snprintf(both, sizeof both, "%s%s", cert, inter);
    mtls_identity *id = NULL;
    CHECK_OK(mtls_identity_from_pem(both, key, NULL, &id));
    free(cert); free(key); free(inter);
    return id;
}

static inline mtls_policy *anchored(const char *anchor) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", pki, anchor);
    mtls_cert **certs = NULL; size_t n = 0;
    CHECK_OK(mtls_cert_list_load(path, &certs, &n));
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_new(&p));
    CHECK_OK(mtls_policy_add_anchor(p, certs[0]));
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));
    mtls_cert_list_free(certs, n);
    return p;
}

#endif
