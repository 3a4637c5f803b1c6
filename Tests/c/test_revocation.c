/* Revocation through the C ABI (issue 28): the policy and rule setters and their argument checks,
 * the result's revocation JSON and warnings, hard and soft with no reachable source, and CRLs added
 * with mtls_policy_add_crl_file answering the check without any network (a revoked leaf refused
 * in soft mode too). The HTTP cases run against real servers in Tests/e2e/test_revocation.py and
 * bindings/python/tests/test_revocation.py. */
#include "test_support.h"

static mtls_trust_result *eval(mtls_policy *p, mtls_issued *leaf, mtls_issued *inter) {
    mtls_cert *certs[2] = {NULL, NULL};
    CHECK_OK(mtls_issued_cert(leaf, &certs[0]));
    CHECK_OK(mtls_issued_cert(inter, &certs[1]));
    mtls_trust_result *r = NULL;
    CHECK_OK(mtls_evaluate(p, certs, 2, NULL, MTLS_PURPOSE_CLIENT, 0, &r));
    mtls_cert_free(certs[0]);
    mtls_cert_free(certs[1]);
    return r;
}

/* Revocation events (MTLS_EVENT_REVOCATION_FETCH_FAILED) received through the policy's callback. */
struct events {
    int count, kind, error_code, destroyed;
    char label[256], subject[256], message[1024];
};
static void on_event(const mtls_event *e, void *userdata) {
    struct events *ev = userdata;
    ev->count++;
    ev->kind = e->kind;
    ev->error_code = e->error_code;
    snprintf(ev->label, sizeof ev->label, "%s", e->label ? e->label : "");
    snprintf(ev->subject, sizeof ev->subject, "%s", e->subject ? e->subject : "");
    snprintf(ev->message, sizeof ev->message, "%s", e->message ? e->message : "");
}
static void on_destroy(void *userdata) { ((struct events *)userdata)->destroyed++; }

static int trusted(mtls_trust_result *r) { int t = -1; CHECK_OK(mtls_trust_result_trusted(r, &t)); return t; }

static int has_code(mtls_trust_result *r, const char *code) {
    mtls_trust_reason *list = NULL; size_t n = 0; int found = 0;
    CHECK_OK(mtls_trust_result_reasons(r, &list, &n));
    for (size_t i = 0; i < n; i++) if (strcmp(list[i].code, code) == 0) found = 1;
    mtls_trust_reason_list_free(list, n);
    return found;
}

/* What the tests share, made once in main: a root, an intermediate and two clients whose CRL URL
 * nobody serves, a policy anchored at the intermediate (the tests change its revocation setting in
 * order), its event counts, and laptop's serial and CRL file. */
static const char *tmp;
static mtls_issued *root = NULL, *inter = NULL, *alice = NULL, *laptop = NULL;
static mtls_policy *p = NULL;
static mtls_cert *anchor = NULL, *lc = NULL;
static struct events ev;
static char *serial = NULL;
static char crl_path[512];

TEST(argument_checks) {
    /* argument checks */
    CHECK_RC(mtls_policy_set_revocation(NULL, MTLS_REVOCATION_HARD, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_revocation(p, 7, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_revocation(p, MTLS_REVOCATION_HARD, 64), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_rule_revocation(p, NULL, MTLS_REVOCATION_HARD, 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_rule_revocation(p, "", MTLS_REVOCATION_HARD, 0), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_set_revocation_limits(p, 0, -1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_revocation_limits(p, 0, 601000), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_revocation_limits(p, 1 << 20, 2000));
    CHECK_RC(mtls_policy_set_revocation_cache_dir(p, ""), MTLS_E_INVALID_ARGUMENT);
    /* The maximum age of an answer without nextUpdate (issue 35): 0 is the default (7 days). */
    CHECK_RC(mtls_policy_set_revocation_max_age(p, -1), MTLS_E_INVALID_ARGUMENT);
    CHECK(strstr(mtls_last_error(), "maximum age") != NULL);
    CHECK_RC(mtls_policy_set_revocation_max_age(p, 367LL * 86400), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_revocation_max_age(p, 3600));
    CHECK_OK(mtls_policy_set_revocation_max_age(p, 0));
    CHECK_OK(mtls_policy_set_revocation_cache_dir(p, NULL));
    CHECK_RC(mtls_trust_result_revocation(NULL, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_revocation_cache_clear();
}

TEST(off_by_default) {
    mtls_trust_result *r;
    char *json;
    /* off (default): no revocation report */
    r = eval(p, alice, inter);
    json = (char *)"unset";
    CHECK(trusted(r) == 1);
    CHECK_OK(mtls_trust_result_revocation(r, &json));
    CHECK(json == NULL);
    mtls_trust_result_free(r);
}

TEST(hard_nothing_reachable) {
    mtls_trust_result *r;
    char *json = NULL;
    /* hard, nothing reachable: revocation_unknown, and one event for the failed fetch */
    memset(&ev, 0, sizeof ev);
    CHECK_RC(mtls_policy_set_event_callback(NULL, on_event, &ev, on_destroy), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_event_callback(p, on_event, &ev, on_destroy));
    CHECK_OK(mtls_policy_set_revocation(p, MTLS_REVOCATION_HARD, MTLS_REVOCATION_SOURCE_CRL));
    r = eval(p, alice, inter);
    CHECK(trusted(r) == 0 && has_code(r, "revocation_unknown"));
    CHECK(ev.count == 1 && ev.kind == MTLS_EVENT_REVOCATION_FETCH_FAILED);
    CHECK(strcmp(ev.label, "http://127.0.0.1:9/never-served.crl") == 0);
    CHECK(strstr(ev.subject, "CN=alice") != NULL && ev.error_code < 0);
    CHECK(strstr(ev.message, "C Rev CA") != NULL);
    CHECK_OK(mtls_trust_result_revocation(r, &json));
    CHECK(json != NULL && strstr(json, "\"mode\":\"hard\"") && strstr(json, "\"status\":\"unknown\"")
          && strstr(json, "never-served.crl"));
    mtls_string_free(json);
    mtls_trust_result_free(r);
}

TEST(soft_trusted_with_warning) {
    /* Goes on from hard_nothing_reachable: its failed fetch is remembered, and its event counted. */
    mtls_trust_result *r;
    /* soft: trusted, with a warning; the failure is remembered, so no second event */
    CHECK_OK(mtls_policy_set_revocation(p, MTLS_REVOCATION_SOFT, 0));
    r = eval(p, alice, inter);
    CHECK(trusted(r) == 1);
    CHECK(ev.count == 1);
    CHECK_OK(mtls_policy_set_event_callback(p, NULL, NULL, NULL));
    CHECK(ev.destroyed == 1);
    char **warnings = NULL; size_t nw = 0;
    CHECK_OK(mtls_trust_result_warnings(r, &warnings, &nw));
    CHECK(nw == 1 && strstr(warnings[0], "trusted anyway") != NULL);
    mtls_string_list_free(warnings, nw);
    mtls_trust_result_free(r);
}

TEST(crl_file_answers_in_every_mode) {
    mtls_trust_result *r;
    char *json = NULL;
    char **warnings = NULL; size_t nw = 0;
    /* A CRL file revoking laptop answers the check without the network, in every mode. */
    CHECK_OK(mtls_issued_cert(laptop, &lc));
    CHECK_OK(mtls_cert_serial_hex(lc, &serial));
    const char *serials[] = {serial};
    uint8_t *der = NULL; size_t der_len = 0;
    CHECK_OK(mtls_pki_crl(inter, serials, 1, 1, 0, 0, &der, &der_len));
    snprintf(crl_path, sizeof crl_path, "%s/revocation.crl", tmp);
    FILE *f = fopen(crl_path, "wb");
    CHECK(f != NULL && fwrite(der, 1, der_len, f) == der_len);
    fclose(f);
    mtls_bytes_free(der);
    CHECK_OK(mtls_policy_add_crl_file(p, crl_path));
    r = eval(p, laptop, inter);
    CHECK(trusted(r) == 0 && has_code(r, "revoked"));
    mtls_trust_result_free(r);
    r = eval(p, alice, inter);
    CHECK(trusted(r) == 1);
    CHECK_OK(mtls_trust_result_revocation(r, &json));
    CHECK(json != NULL && strstr(json, "\"status\":\"good\"") && strstr(json, "\"source\":\"crl_file\""));
    mtls_string_free(json);
    CHECK_OK(mtls_trust_result_warnings(r, &warnings, &nw));
    CHECK(nw == 0 && warnings == NULL);
    mtls_trust_result_free(r);
}

TEST(newer_crl_file_answers) {
    mtls_trust_result *r;
    char *json = NULL;
    const char *serials[] = {serial};
    uint8_t *der = NULL; size_t der_len = 0;
    FILE *f;
    /* Two CRL files of one issuer: the newer (CRL number 2, revoking laptop) answers, whatever
     * the order they were given in; the older (number 1, revoking nothing) never hides it. */
    {
        mtls_policy *two = NULL;
        CHECK_OK(mtls_policy_new(&two));
        CHECK_OK(mtls_policy_add_anchor(two, anchor));
        CHECK_OK(mtls_policy_set_anchors_only(two, 1));
        CHECK_OK(mtls_policy_set_name_check(two, 0));
        CHECK_OK(mtls_policy_set_revocation(two, MTLS_REVOCATION_HARD, 0));
        char older_path[512];
        snprintf(older_path, sizeof older_path, "%s/revocation-older.crl", tmp);
        CHECK_OK(mtls_pki_crl(inter, NULL, 0, 1, 0, 0, &der, &der_len));
        f = fopen(older_path, "wb");
        CHECK(f != NULL && fwrite(der, 1, der_len, f) == der_len);
        fclose(f);
        mtls_bytes_free(der);
        CHECK_OK(mtls_pki_crl(inter, serials, 1, 2, 0, 0, &der, &der_len));
        f = fopen(crl_path, "wb");
        CHECK(f != NULL && fwrite(der, 1, der_len, f) == der_len);
        fclose(f);
        mtls_bytes_free(der);
        CHECK_OK(mtls_policy_add_crl_file(two, older_path));
        CHECK_OK(mtls_policy_add_crl_file(two, crl_path));
        r = eval(two, laptop, inter);
        CHECK(trusted(r) == 0 && has_code(r, "revoked"));
        CHECK_OK(mtls_trust_result_revocation(r, &json));
        CHECK(json != NULL && strstr(json, "\"status\":\"revoked\"") && strstr(json, "\"source\":\"crl_file\""));
        mtls_string_free(json);
        mtls_trust_result_free(r);
        mtls_policy_free(two);
    }
}

TEST(host_rule_setting_wins) {
    mtls_trust_result *r;
    /* A host rule's setting wins over the policy's for its peers. */
    mtls_policy *q = NULL;
    CHECK_OK(mtls_policy_new(&q));
    CHECK_OK(mtls_policy_add_anchor(q, anchor));
    CHECK_OK(mtls_policy_set_anchors_only(q, 1));
    CHECK_OK(mtls_policy_set_name_check(q, 0));
    CHECK_OK(mtls_policy_set_rule_revocation(q, "checked.test", MTLS_REVOCATION_HARD, 0));
    mtls_cert *certs[2] = {NULL, NULL};
    CHECK_OK(mtls_issued_cert(alice, &certs[0]));
    CHECK_OK(mtls_issued_cert(inter, &certs[1]));
    CHECK_OK(mtls_evaluate(q, certs, 2, "checked.test", MTLS_PURPOSE_CLIENT, 0, &r));
    CHECK(trusted(r) == 0 && has_code(r, "revocation_unknown"));
    mtls_trust_result_free(r);
    CHECK_OK(mtls_evaluate(q, certs, 2, "other.test", MTLS_PURPOSE_CLIENT, 0, &r));
    CHECK(trusted(r) == 1);
    mtls_trust_result_free(r);
    mtls_cert_free(certs[0]);
    mtls_cert_free(certs[1]);
    mtls_policy_free(q);
}

int main(void) {
    tmp = getenv("MTLS_TEST_TMP") ? getenv("MTLS_TEST_TMP") : "/tmp";
    CHECK_OK(mtls_pki_root("C Rev Root", NULL, &root));
    CHECK_OK(mtls_pki_issue(root, MTLS_PROFILE_INTERMEDIATE, "C Rev CA", NULL, &inter));
    mtls_issue_options o;
    CHECK_OK(mtls_issue_options_init(&o, MTLS_ISSUE_OPTIONS_VERSION));
    o.crl_url = "http://127.0.0.1:9/never-served.crl"; /* port 9 (discard): nothing listens */
    CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "alice", &o, &alice));
    CHECK_OK(mtls_pki_issue(inter, MTLS_PROFILE_CLIENT, "laptop", &o, &laptop));

    CHECK_OK(mtls_policy_new(&p));
    CHECK_OK(mtls_issued_cert(inter, &anchor));
    CHECK_OK(mtls_policy_add_anchor(p, anchor));
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));

    RUN(argument_checks);
    RUN(off_by_default);
    RUN(hard_nothing_reachable);
    RUN(soft_trusted_with_warning);
    RUN(crl_file_answers_in_every_mode);
    RUN(newer_crl_file_answers);
    RUN(host_rule_setting_wins);

    mtls_string_free(serial);
    mtls_cert_free(lc);
    mtls_cert_free(anchor);
    mtls_policy_free(p);
    mtls_issued_free(laptop);
    mtls_issued_free(alice);
    mtls_issued_free(inter);
    mtls_issued_free(root);
    DONE();
}
