/* Trust policies and evaluation through the installed C ABI: every mtls_policy_* /
 * mtls_trust_result_* / mtls_evaluate function, NULL arguments included. The PKI is made at
 * run time by scripts/test-pki.sh --trust. */
#define _DEFAULT_SOURCE /* setenv */
#include "test_support.h"
#include <time.h>

static char dir[512];
static const char *path(const char *name) {
    static char buf[4][600];
    static int n = 0;
    n = (n + 1) % 4;
    snprintf(buf[n], sizeof buf[n], "%s/%s", dir, name);
    return buf[n];
}

static int reports = 0, destroyed = 0;
static void on_report(const char *host, const char *rule, const char *code, const char *message, void *userdata) {
    (void)message;
    CHECK(userdata == &reports);
    CHECK(host && strcmp(host, "server.test") == 0);
    CHECK(rule && strcmp(rule, "server.test") == 0);
    CHECK(code && strcmp(code, "pin_mismatch") == 0);
    reports++;
}
static void on_destroy(void *userdata) { CHECK(userdata == &reports); destroyed++; }

/* Loads a chain file; the caller frees with mtls_cert_list_free. */
static mtls_cert **chain_of(const char *name, size_t *count) {
    mtls_cert **list = NULL;
    CHECK_OK(mtls_cert_list_load(path(name), &list, count));
    return list;
}

static int has_reason(const mtls_trust_result *r, const char *want, int *index) {
    size_t n = 0;
    mtls_trust_reason *reasons = NULL;
    CHECK_OK(mtls_trust_result_reasons(r, &reasons, &n));
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        CHECK(reasons[i].code != NULL && reasons[i].message != NULL && reasons[i].cert_index >= -1);
        if (strcmp(reasons[i].code, want) == 0) { if (index) *index = reasons[i].cert_index; found = 1; }
    }
    mtls_trust_reason_list_free(reasons, n);
    return found;
}

static mtls_trust_result *eval(mtls_policy *p, const char *chain, const char *host, int purpose) {
    size_t n = 0;
    mtls_cert **certs = chain_of(chain, &n);
    mtls_trust_result *r = NULL;
    CHECK_OK(mtls_evaluate(p, certs, n, host, purpose, 0, &r));
    mtls_cert_list_free(certs, n);
    return r;
}

static int trusted(const mtls_trust_result *r) {
    int t = -1;
    CHECK_OK(mtls_trust_result_trusted(r, &t));
    return t;
}


/* What every test shares: the test PKI's roots, intermediate, chain, their pins and "now". */
static mtls_cert **root, **other, **inter, **chain;
static size_t cn = 0;
static char *other_pin, *inter_pin;
static int64_t now;

/* A policy anchored at the test root only, at `now`, checking names. */
static mtls_policy *base_policy(void) {
    mtls_policy *p = NULL;
    CHECK_OK(mtls_policy_new(&p));
    CHECK_OK(mtls_policy_add_anchor(p, root[0]));
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));
    CHECK_OK(mtls_policy_set_time(p, now));
    CHECK_OK(mtls_policy_set_name_check(p, 1));
    return p;
}

/* Whether `p` trusts chain.pem as server.test. */
static int server_trusted(mtls_policy *p) {
    mtls_trust_result *r = eval(p, "chain.pem", "server.test", MTLS_PURPOSE_SERVER);
    int t = trusted(r);
    mtls_trust_result_free(r);
    return t;
}

TEST(policy_constructors_and_null_arguments) {
    /* Constructors and NULL arguments. */
    mtls_policy *p = NULL, *q = NULL;
    CHECK_RC(mtls_policy_new(NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_new(&p));
    CHECK_RC(mtls_policy_load(NULL, &q), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_load(path("nope.json"), NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK(mtls_policy_load(path("nope.json"), &q) != MTLS_OK && q == NULL);
    CHECK_RC(mtls_policy_from_json(NULL, &q), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_from_json("{}", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_from_json("{\"bogus\": 1}", &q), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "bogus") != NULL);
    mtls_policy_free(NULL);
    mtls_trust_result_free(NULL);

    CHECK_RC(mtls_policy_add_anchor(NULL, root[0]), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_anchor(p, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_add_anchor(p, root[0]));
    CHECK_RC(mtls_policy_set_anchors_only(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_anchors_only(p, 1));
    CHECK_RC(mtls_policy_set_time(NULL, now), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_time(p, now));
    CHECK_RC(mtls_policy_set_name_check(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_name_check(p, 1));
    mtls_policy_free(p);
}

TEST(trusted_evaluation_and_result_arguments) {
    mtls_policy *p = base_policy();
    /* A trusted evaluation, its chain, kind, rule and pin. */
    mtls_trust_result *r = eval(p, "chain.pem", "server.test", MTLS_PURPOSE_SERVER);
    CHECK(trusted(r) == 1);
    int kind = -1;
    CHECK_OK(mtls_trust_result_kind(r, &kind));
    CHECK(kind == MTLS_TRUST_PROCEED);
    size_t reasons = 9;
    mtls_trust_reason *rlist = (mtls_trust_reason *)1;
    CHECK_OK(mtls_trust_result_reasons(r, &rlist, &reasons));
    CHECK(reasons == 0 && rlist == NULL);
    mtls_cert **built = NULL;
    size_t built_n = 0;
    CHECK_OK(mtls_trust_result_chain(r, &built, &built_n));
    CHECK(built_n == 3);
    char *subject = NULL;
    CHECK_OK(mtls_cert_subject_summary(built[2], &subject));
    CHECK(strcmp(subject, "Test Root") == 0);
    mtls_string_free(subject);
    mtls_cert_list_free(built, built_n);
    char *rule = (char *)1, *pin = (char *)1;
    CHECK_OK(mtls_trust_result_matched_rule(r, &rule));
    CHECK(rule == NULL);
    CHECK_OK(mtls_trust_result_matched_pin(r, &pin));
    CHECK(pin == NULL);
    /* NULL and out-of-range arguments on results. */
    int t = 0;
    CHECK_RC(mtls_trust_result_trusted(NULL, &t), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_trusted(r, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_kind(NULL, &kind), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_kind(r, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_reasons(NULL, &rlist, &reasons), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_reasons(r, NULL, &reasons), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_reasons(r, &rlist, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_trust_reason_list_free(NULL, 0);
    CHECK_RC(mtls_trust_result_chain(NULL, &built, &built_n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_chain(r, NULL, &built_n), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_chain(r, &built, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_matched_rule(NULL, &rule), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_matched_rule(r, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_matched_pin(NULL, &pin), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_matched_pin(r, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_trust_result_free(r);
    mtls_policy_free(p);
}

TEST(evaluate_arguments_and_der_input) {
    mtls_policy *p = base_policy();
    mtls_trust_result *r = NULL;
    /* mtls_evaluate argument checks. */
    CHECK_RC(mtls_evaluate(NULL, chain, cn, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate(p, NULL, cn, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate(p, chain, 0, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate(p, chain, cn, "server.test", 7, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate(p, chain, cn, "server.test", 0, 0, NULL), MTLS_E_INVALID_ARGUMENT);
    mtls_cert *with_null[2] = { chain[0], NULL };
    CHECK_RC(mtls_evaluate(p, with_null, 2, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    /* DER input, cached and uncached, with its argument checks. */
    const uint8_t *ders[3];
    size_t lens[3];
    for (size_t i = 0; i < cn && i < 3; i++) CHECK_OK(mtls_cert_der(chain[i], &ders[i], &lens[i]));
    CHECK_RC(mtls_evaluate_der(NULL, ders, lens, cn, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_der(p, NULL, lens, cn, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_der(p, ders, NULL, cn, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_der(p, ders, lens, 0, "server.test", 0, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_der(p, ders, lens, cn, "server.test", 9, 0, &r), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_der(p, ders, lens, cn, "server.test", 0, 0, NULL), MTLS_E_INVALID_ARGUMENT);
    const uint8_t junk[4] = { 1, 2, 3, 4 };
    const uint8_t *bad_ders[1] = { junk };
    size_t bad_lens[1] = { sizeof junk };
    CHECK_RC(mtls_evaluate_der(p, bad_ders, bad_lens, 1, "server.test", 0, 0, &r), MTLS_E_PARSE);
    CHECK_RC(mtls_policy_set_cache(NULL, 0), MTLS_E_INVALID_ARGUMENT);
    for (int cache = 0; cache <= 1; cache++) {
        CHECK_OK(mtls_policy_set_cache(p, cache));
        for (int round = 0; round < 2; round++) {
            CHECK_OK(mtls_evaluate_der(p, ders, lens, cn, "server.test", MTLS_PURPOSE_SERVER, 0, &r));
            CHECK(trusted(r) == 1);
            mtls_trust_result_free(r);
            CHECK_OK(mtls_evaluate_der(p, ders, lens, cn, "wrong.test", MTLS_PURPOSE_SERVER, 0, &r));
            CHECK(trusted(r) == 0 && has_reason(r, "name_mismatch", NULL));
            mtls_trust_result_free(r);
        }
    }
    mtls_policy_free(p);
}

TEST(name_mismatch_expiry_purpose_and_no_name) {
    mtls_policy *p = base_policy();
    mtls_trust_result *r = NULL;
    int kind = -1;
    /* Wrong host: recoverable name mismatch on the leaf; expired at a later time. */
    CHECK_OK(mtls_evaluate(p, chain, cn, "other.test", MTLS_PURPOSE_DEFAULT, 0, &r));
    int idx = -5;
    CHECK(trusted(r) == 0 && has_reason(r, "name_mismatch", &idx) && idx == 0);
    CHECK_OK(mtls_trust_result_kind(r, &kind));
    CHECK(kind == MTLS_TRUST_RECOVERABLE_FAILURE);
    mtls_trust_result_free(r);
    CHECK_OK(mtls_evaluate(p, chain, cn, "server.test", MTLS_PURPOSE_SERVER, now + 60 * 86400, &r));
    CHECK(trusted(r) == 0 && has_reason(r, "expired", NULL));
    mtls_trust_result_free(r);
    /* Client purpose on a server certificate. */
    r = eval(p, "chain.pem", NULL, MTLS_PURPOSE_CLIENT);
    CHECK(trusted(r) == 0 && has_reason(r, "wrong_purpose", NULL));
    mtls_trust_result_free(r);
    r = eval(p, "client-chain.pem", NULL, MTLS_PURPOSE_CLIENT);
    CHECK(trusted(r) == 1);
    mtls_trust_result_free(r);
    /* A server with no host under a name check fails closed; no name check must be asked for. */
    r = eval(p, "chain.pem", NULL, MTLS_PURPOSE_SERVER);
    CHECK(trusted(r) == 0 && has_reason(r, "no_peer_name", NULL));
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_set_name_check(p, 0));
    r = eval(p, "chain.pem", NULL, MTLS_PURPOSE_SERVER);
    CHECK(trusted(r) == 1);
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_set_name_check(p, 1));
    mtls_policy_free(p);
}

/* The message of a reason with a code; "" when there is none (freed with the list: copied). */
static void reason_message(const mtls_trust_result *r, const char *want, char *out, size_t size) {
    size_t n = 0;
    mtls_trust_reason *reasons = NULL;
    out[0] = 0;
    CHECK_OK(mtls_trust_result_reasons(r, &reasons, &n));
    for (size_t i = 0; i < n; i++) {
        if (strcmp(reasons[i].code, want) == 0) { snprintf(out, size, "%s", reasons[i].message); break; }
    }
    mtls_trust_reason_list_free(reasons, n);
}

/* Issue 38: the core's messages say what to do next, so C says what Python and the CLI say; a
 * pin may be written the curl way (sha256//BASE64). */
TEST(messages_say_what_to_do_next) {
    mtls_policy *p = base_policy();
    mtls_trust_result *r = NULL;
    char m[2048];
    CHECK_OK(mtls_evaluate(p, chain, cn, "other.test", MTLS_PURPOSE_DEFAULT, 0, &r));
    reason_message(r, "name_mismatch", m, sizeof m);
    CHECK(strstr(m, "the certificate's names: server.test") != NULL && strstr(m, "verify-as") != NULL);
    mtls_trust_result_free(r);
    mtls_policy_free(p);
    /* Only the root as anchor and only the leaf given: the issuer is unknown. */
    mtls_policy *pa = NULL;
    CHECK_OK(mtls_policy_new(&pa));
    CHECK_OK(mtls_policy_add_anchor(pa, root[0]));
    CHECK_OK(mtls_policy_set_anchors_only(pa, 1));
    CHECK_OK(mtls_policy_set_time(pa, now));
    CHECK_OK(mtls_evaluate(pa, chain, 1, "server.test", MTLS_PURPOSE_SERVER, 0, &r));
    reason_message(r, "unknown_issuer", m, sizeof m);
    CHECK(strstr(m, "add the CA that issued it as an anchor") != NULL);
    mtls_trust_result_free(r);
    char curl_pin[128];
    snprintf(curl_pin, sizeof curl_pin, "sha256//%s", inter_pin + strlen("sha256/"));
    const char *pins[] = {curl_pin};
    CHECK_OK(mtls_policy_set_pins(pa, pins, 1));
    CHECK(server_trusted(pa) == 1);
    const char *bad[] = {"sha256//AAAA"};
    CHECK_RC(mtls_policy_set_pins(pa, bad, 1), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "sha256/BASE64") != NULL && strstr(mtls_last_error(), "sha256//BASE64") != NULL);
    mtls_policy_free(pa);
}

TEST(host_rules) {
    mtls_policy *p = base_policy();
    mtls_trust_result *r = NULL;
    char *rule = NULL;
    /* Host rules: verify-as, skip name check, own anchors. */
    CHECK_RC(mtls_policy_add_host_rule(NULL, "10.0.0.9", "server.test", 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_host_rule(p, NULL, "server.test", 0), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_host_rule(p, "bad host", NULL, 0), MTLS_E_INVALID_POLICY);
    CHECK_OK(mtls_policy_add_host_rule(p, "10.0.0.9", "server.test", 0));
    CHECK_OK(mtls_policy_add_host_rule(p, "*.internal", NULL, 1));
    r = eval(p, "chain.pem", "10.0.0.9", 0);
    CHECK(trusted(r) == 1);
    CHECK_OK(mtls_trust_result_matched_rule(r, &rule));
    CHECK(rule && strcmp(rule, "10.0.0.9") == 0);
    mtls_string_free(rule);
    mtls_trust_result_free(r);
    r = eval(p, "chain.pem", "db.internal", 0);
    CHECK(trusted(r) == 1);
    mtls_trust_result_free(r);
    CHECK_RC(mtls_policy_add_rule_anchor(NULL, "x.test", other[0], 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_rule_anchor(p, NULL, other[0], 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_rule_anchor(p, "x.test", NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_add_rule_anchor(p, "*.wild.test", other[0], 1));
    r = eval(p, "chain.pem", "a.wild.test", 0);
    CHECK(trusted(r) == 0);
    mtls_trust_result_free(r);
    mtls_policy_free(p);
}

TEST(pins_report_only_and_expiry) {
    mtls_policy *p = base_policy();
    mtls_trust_result *r = NULL;
    int kind = -1;
    char *pin = NULL;
    int reports_before = reports, destroyed_before = destroyed;
    /* Pins: mismatch (single pin warns), match on the intermediate, expiry, report-only. */
    CHECK_RC(mtls_policy_add_pin(NULL, "server.test", other_pin), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_pin(p, NULL, other_pin), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_pin(p, "server.test", NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_pin(p, "server.test", "sha256/short"), MTLS_E_INVALID_POLICY);
    CHECK_OK(mtls_policy_add_pin(p, "server.test", other_pin));
    size_t warnings = 0;
    char **warning = NULL;
    CHECK_RC(mtls_policy_warnings(NULL, &warning, &warnings), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_warnings(p, NULL, &warnings), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_warnings(p, &warning, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_warnings(p, &warning, &warnings));
    CHECK(warnings == 1 && strstr(warning[0], "backup") != NULL);
    mtls_string_list_free(warning, warnings);
    r = eval(p, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 0 && has_reason(r, "pin_mismatch", NULL));
    CHECK_OK(mtls_trust_result_kind(r, &kind));
    CHECK(kind == MTLS_TRUST_FATAL_FAILURE);
    mtls_trust_result_free(r);

    CHECK_RC(mtls_policy_set_report_only(NULL, "server.test", 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_report_only(p, NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_report_only(p, "server.test", 1));
    CHECK_RC(mtls_policy_set_report_callback(NULL, on_report, &reports, on_destroy), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_report_callback(p, on_report, &reports, on_destroy));
    r = eval(p, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 1 && reports == 1);
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_set_report_only(p, "server.test", 0));

    CHECK_RC(mtls_policy_set_pin_expiry(NULL, "server.test", now - 10, MTLS_PIN_STOP_ENFORCING), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_pin_expiry(p, NULL, now - 10, MTLS_PIN_STOP_ENFORCING), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_pin_expiry(p, "server.test", now - 10, 9), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_pin_expiry(p, "server.test", now - 10, MTLS_PIN_STOP_ENFORCING));
    r = eval(p, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 1);
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_set_pin_expiry(p, "server.test", now - 10, MTLS_PIN_FAIL_CLOSED));
    r = eval(p, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 0 && has_reason(r, "pin_expired", NULL));
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_set_pin_expiry(p, "server.test", 0, MTLS_PIN_STOP_ENFORCING));
    CHECK_OK(mtls_policy_add_pin(p, "server.test", inter_pin));
    r = eval(p, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 1);
    CHECK_OK(mtls_trust_result_matched_pin(r, &pin));
    CHECK(pin && strcmp(pin, inter_pin) == 0);
    mtls_string_free(pin);
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_set_report_callback(p, NULL, NULL, NULL));
    mtls_policy_free(p);
    CHECK(destroyed == destroyed_before + 1 && reports == reports_before + 1);
}

TEST(crl_file_arguments) {
    mtls_policy *p = base_policy();
    /* CRLs. */
    CHECK_RC(mtls_policy_add_crl_file(NULL, path("revoked.crl")), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_add_crl_file(p, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK(mtls_policy_add_crl_file(p, path("missing.crl")) != MTLS_OK);
    mtls_policy_free(p);
}

TEST(policy_json_and_atomic_replacement) {
    mtls_policy *p = base_policy(), *q = NULL;
    mtls_trust_result *r = NULL;
    int idx = -5;
    int destroyed_before = destroyed;
    CHECK_OK(mtls_policy_set_report_callback(p, on_report, &reports, on_destroy));
    /* Policy JSON and atomic replacement. */
    char json[2048];
    snprintf(json, sizeof json, "{\"anchors\": [\"%s\"], \"anchors_only\": true}", path("other-root.pem"));
    CHECK_OK(mtls_policy_from_json(json, &q));
    CHECK_RC(mtls_policy_replace(NULL, q), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_replace(p, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_replace(p, q));
    CHECK(destroyed == destroyed_before); /* replacing keeps the callback */
    r = eval(p, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 0);
    mtls_trust_result_free(r);
    mtls_policy_free(q);
    snprintf(json, sizeof json, "%s/policy.json", dir);
    FILE *f = fopen(json, "w");
    CHECK(f != NULL);
    fprintf(f, "{\"anchors\": [\"root.pem\"], \"anchors_only\": true, \"crls\": [\"revoked.crl\"]}");
    fclose(f);
    size_t json_len = 0;
    uint8_t *text = t_read_file(json, &json_len);
    text[json_len] = 0;
    CHECK(mtls_policy_from_json((const char *)text, &q) != MTLS_OK); /* relative paths: not from here */
    free(text);
    CHECK_OK(mtls_policy_load(json, &q));
    CHECK_OK(mtls_policy_set_time(q, now));
    r = eval(q, "chain.pem", "server.test", 0);
    CHECK(trusted(r) == 0 && has_reason(r, "revoked", &idx) && idx == 0);
    mtls_trust_result_free(r);
    CHECK_OK(mtls_policy_add_crl_file(q, path("empty.crl")));
    mtls_policy_free(q);
    CHECK_OK(mtls_policy_set_report_callback(p, NULL, NULL, NULL));
    mtls_policy_free(p);
    CHECK(destroyed == destroyed_before + 1);
}

/* Trust decisions bound to the peer reached (issue 9). */
TEST(decisions_bound_to_the_peer_reached) {
    mtls_policy *q = NULL;
    static const char wrong1[] = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    static const char wrong2[] = "sha256/BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB=";
    mtls_policy *pp = NULL;
    CHECK_OK(mtls_policy_new(&pp));
    CHECK_OK(mtls_policy_add_anchor(pp, root[0]));
    CHECK_OK(mtls_policy_set_anchors_only(pp, 1));
    CHECK_OK(mtls_policy_set_time(pp, now));
    CHECK_OK(mtls_policy_add_pin(pp, "10.0.0.5:8443", wrong1));
    CHECK_OK(mtls_policy_add_pin(pp, "10.0.0.5:8443", wrong2));
    size_t m = 0;
    mtls_cert **ch = chain_of("chain.pem", &m);
    mtls_trust_result *rr = NULL;
    CHECK_RC(mtls_evaluate_peer(NULL, ch, m, "10.0.0.5", 8443, "server.test", 0, 0, &rr), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_peer(pp, NULL, m, "10.0.0.5", 8443, "server.test", 0, 0, &rr), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_peer(pp, ch, 0, "10.0.0.5", 8443, "server.test", 0, 0, &rr), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_evaluate_peer(pp, ch, m, "10.0.0.5", 8443, "server.test", 0, 0, NULL), MTLS_E_INVALID_ARGUMENT);
    /* The rule for the address and port reached holds when validating as another name. */
    CHECK_OK(mtls_evaluate_peer(pp, ch, m, "10.0.0.5", 8443, "server.test", MTLS_PURPOSE_SERVER, 0, &rr));
    CHECK(trusted(rr) == 0 && has_reason(rr, "pin_mismatch", NULL) && !has_reason(rr, "name_mismatch", NULL));
    char *matched = NULL;
    CHECK_OK(mtls_trust_result_matched_rule(rr, &matched));
    CHECK(matched && strcmp(matched, "10.0.0.5:8443") == 0);
    mtls_string_free(matched);
    mtls_trust_result_free(rr);
    /* The same address spelt as the resolver also takes it (10.5 is 10.0.0.5; ::ffff:10.0.0.5
     * is what a dual-stack socket sees): the same rule. */
    const char *spellings[] = {"10.5", "012.0.0.5", "167772165", "[::ffff:10.0.0.5]", "::ffff:a00:5"};
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        CHECK_OK(mtls_evaluate_peer(pp, ch, m, spellings[i], 8443, "server.test", MTLS_PURPOSE_SERVER, 0, &rr));
        CHECK(trusted(rr) == 0 && has_reason(rr, "pin_mismatch", NULL));
        mtls_trust_result_free(rr);
    }
    /* Another port, or no port (a wrapped socket with port 0): the rule does not apply. */
    CHECK_OK(mtls_evaluate_peer(pp, ch, m, "10.0.0.5", 9443, "server.test", 0, 0, &rr));
    CHECK(trusted(rr) == 1);
    mtls_trust_result_free(rr);
    CHECK_OK(mtls_evaluate_peer(pp, ch, m, "10.0.0.5", 0, "server.test", 0, 0, &rr));
    CHECK(trusted(rr) == 1);
    mtls_trust_result_free(rr);
    /* The rule's own verify-as with the text form "host:port". */
    CHECK_OK(mtls_policy_add_host_rule(pp, "10.0.0.5:8443", "server.test", 0));
    rr = eval(pp, "chain.pem", "10.0.0.5:8443", 0);
    CHECK(trusted(rr) == 0 && has_reason(rr, "pin_mismatch", NULL) && !has_reason(rr, "name_mismatch", NULL));
    mtls_trust_result_free(rr);
    mtls_cert_list_free(ch, m);
    /* Invalid rules: MTLS_E_INVALID_POLICY naming the rule; the name check is never off by accident. */
    CHECK_RC(mtls_policy_add_host_rule(pp, "10.0.0.6", "", 0), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "10.0.0.6") != NULL);
    CHECK_RC(mtls_policy_add_host_rule(pp, "10.0.0.6", "  ", 0), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_add_host_rule(pp, "", NULL, 0), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_add_host_rule(pp, "10.0.0.6", "server.test", 1), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_add_pin(pp, "10.0.0.6", "sha256/abc"), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_add_pin(pp, "10.0.0.6", "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_from_json("{\"hosts\": [{\"host\": \"10.0.0.6\", \"verify_as\": \"\"}]}", &q), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "10.0.0.6") != NULL);
    CHECK_OK(mtls_policy_add_host_rule(pp, "10.0.0.6", NULL, 1)); /* said explicitly: fine */
    /* IPv6 zones (issue 23, defect 5): the zone is kept apart from the address, so the rule
     * for ::1 (wrong pins) holds for ::1%1 and [::1%lo]:443; a rule may name a link; a %
     * that is no zone matches no rule and is invalid_host under a policy with rules. */
    CHECK_OK(mtls_policy_add_pin(pp, "::1", wrong1));
    CHECK_OK(mtls_policy_add_pin(pp, "::1", wrong2));
    CHECK_OK(mtls_policy_add_pin(pp, "fe80::1%lo", wrong1));
    CHECK_OK(mtls_policy_add_pin(pp, "fe80::1%lo", wrong2));
    ch = chain_of("chain.pem", &m);
    const char *zoned[] = {"::1%1", "[::1%lo]", "0:0::1%1", "fe80::1%lo", "[fe80::1%lo]"};
    for (size_t i = 0; i < sizeof zoned / sizeof *zoned; i++) {
        CHECK_OK(mtls_evaluate_peer(pp, ch, m, zoned[i], 443, "server.test", MTLS_PURPOSE_SERVER, 0, &rr));
        CHECK(trusted(rr) == 0 && has_reason(rr, "pin_mismatch", NULL));
        mtls_trust_result_free(rr);
    }
    CHECK_OK(mtls_evaluate_peer(pp, ch, m, "fe80::1%eth-none", 443, "server.test", MTLS_PURPOSE_SERVER, 0, &rr));
    CHECK(trusted(rr) == 1); /* another link: the zoned rule does not apply */
    mtls_trust_result_free(rr);
    const char *unmatchable[] = {"server.test%lo", "10.0.0.5%1", "::1%", "fe80::1%a/b"};
    for (size_t i = 0; i < sizeof unmatchable / sizeof *unmatchable; i++) {
        CHECK_OK(mtls_evaluate_peer(pp, ch, m, unmatchable[i], 443, "server.test", MTLS_PURPOSE_SERVER, 0, &rr));
        CHECK(trusted(rr) == 0 && has_reason(rr, "invalid_host", NULL));
        mtls_trust_result_free(rr);
    }
    mtls_cert_list_free(ch, m);
    /* An IPv6 pattern whose last group reads as a port is ambiguous: an invalid policy that
     * says how to write it. [::1]:8443, ::1 and a full eight-group address are fine. */
    CHECK_RC(mtls_policy_add_pin(pp, "::1:8443", wrong1), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "[::1]:8443") != NULL);
    CHECK_RC(mtls_policy_add_host_rule(pp, "2001:db8::7:443", "server.test", 0), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_add_host_rule(pp, "fe80::1%lo:443", "server.test", 0), MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "[fe80::1%lo]:443") != NULL);
    CHECK_OK(mtls_policy_add_host_rule(pp, "[::1]:8443", "server.test", 0));
    CHECK_OK(mtls_policy_add_host_rule(pp, "2001:db8:0:0:0:0:0:8443", "server.test", 0));
    CHECK_OK(mtls_policy_add_host_rule(pp, "[::1:8443]", "server.test", 0));
    CHECK_RC(mtls_policy_from_json("{\"hosts\": [{\"host\": \"::1:8443\", \"verify_as\": \"server.test\"}]}", &q),
             MTLS_E_INVALID_POLICY);
    CHECK(strstr(mtls_last_error(), "[::1]:8443") != NULL);
    /* A leaf without EKU, a CN that is not a name, path building among bad candidates. */
    rr = eval(pp, "noeku-chain.pem", "server.test", 0);
    CHECK(trusted(rr) == 1);
    mtls_trust_result_free(rr);
    rr = eval(pp, "cnparent-chain.pem", "server.test", 0);
    CHECK(trusted(rr) == 1);
    mtls_trust_result_free(rr);
    CHECK_OK(mtls_policy_set_time(pp, now + 86400)); /* the one-day candidate has expired */
    rr = eval(pp, "pb-bag.pem", "server.test", 0);
    CHECK(trusted(rr) == 1);
    mtls_trust_result_free(rr);
    /* Clients are judged by the policy's anchors only, unless asked. */
    CHECK_RC(mtls_policy_set_system_anchors_for_clients(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_system_anchors_for_clients(pp, 1));
    CHECK_OK(mtls_policy_set_system_anchors_for_clients(pp, 0));
    mtls_policy_free(pp);
}

/* One effective policy (issue 23): policy-wide pins and verify-as, overrides, provenance. */
/* Issue 35 item 1: a policy that names anchors trusts those anchors only, even when the
 * system store (SSL_CERT_FILE here, holding the root that signs the server) would trust
 * the chain; mtls_policy_set_system_anchors(p, 1) is the opt-in, set_anchors_only(p, 0) its
 * older spelling; a policy without anchors uses the system store; a rule's anchors too. */
TEST(anchors_mean_those_anchors_only) {
    CHECK(setenv("SSL_CERT_FILE", path("root.pem"), 1) == 0);
    mtls_policy *ps = NULL;
    CHECK_OK(mtls_policy_new(&ps));
    CHECK_OK(mtls_policy_set_time(ps, now));
    CHECK(server_trusted(ps) == 1); /* no anchors: the system store */
    CHECK_OK(mtls_policy_add_anchor(ps, other[0]));
    CHECK(server_trusted(ps) == 0); /* anchors: those only */
    CHECK_RC(mtls_policy_set_system_anchors(NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_system_anchors(ps, 2), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_system_anchors(ps, 1));
    CHECK(server_trusted(ps) == 1);
    CHECK_OK(mtls_policy_set_system_anchors(ps, -1));
    CHECK(server_trusted(ps) == 0);
    CHECK_OK(mtls_policy_set_anchors_only(ps, 0));
    CHECK(server_trusted(ps) == 1);
    mtls_policy_free(ps);
    /* A host rule's own anchors. */
    CHECK_OK(mtls_policy_new(&ps));
    CHECK_OK(mtls_policy_set_time(ps, now));
    CHECK_OK(mtls_policy_add_rule_anchor(ps, "server.test", other[0], 0));
    CHECK(server_trusted(ps) == 0);
    CHECK_OK(mtls_policy_set_rule_system_anchors(ps, "server.test", 1));
    CHECK(server_trusted(ps) == 1);
    mtls_policy_free(ps);
    /* Overrides: anchors given for one evaluation are the only ones. */
    CHECK_OK(mtls_policy_new(&ps));
    CHECK_OK(mtls_policy_set_time(ps, now));
    mtls_trust_overrides ov;
    CHECK_OK(mtls_trust_overrides_init(&ov, MTLS_TRUST_OVERRIDES_VERSION));
    ov.anchors = other;
    ov.anchor_count = 1;
    size_t ncerts = 0;
    mtls_trust_result *rs = NULL;
    mtls_cert **certs = chain_of("chain.pem", &ncerts);
    CHECK_OK(mtls_evaluate_with_overrides(ps, certs, ncerts, "server.test", 0, NULL, MTLS_PURPOSE_SERVER, 0, &ov, &rs));
    CHECK(trusted(rs) == 0);
    mtls_trust_result_free(rs);
    ov.anchors_only = 0;
    CHECK_OK(mtls_evaluate_with_overrides(ps, certs, ncerts, "server.test", 0, NULL, MTLS_PURPOSE_SERVER, 0, &ov, &rs));
    CHECK(trusted(rs) == 1);
    mtls_trust_result_free(rs);
    mtls_cert_list_free(certs, ncerts);
    mtls_policy_free(ps);
    /* JSON: the same rule, one name. */
    char json[2048];
    snprintf(json, sizeof json, "{\"anchors\": [\"%s\"]}", path("other-root.pem"));
    CHECK_OK(mtls_policy_from_json(json, &ps));
    CHECK_OK(mtls_policy_set_time(ps, now));
    CHECK(server_trusted(ps) == 0);
    mtls_policy_free(ps);
    snprintf(json, sizeof json, "{\"anchors\": [\"%s\"], \"system_anchors\": true}", path("other-root.pem"));
    CHECK_OK(mtls_policy_from_json(json, &ps));
    CHECK_OK(mtls_policy_set_time(ps, now));
    CHECK(server_trusted(ps) == 1);
    mtls_policy_free(ps);
    CHECK(unsetenv("SSL_CERT_FILE") == 0);
}

TEST(one_effective_policy) {
    mtls_policy *pw = NULL;
    CHECK_OK(mtls_policy_new(&pw));
    CHECK_OK(mtls_policy_add_anchor(pw, root[0]));
    CHECK_OK(mtls_policy_set_anchors_only(pw, 1));
    CHECK_OK(mtls_policy_set_time(pw, now));
    /* Policy-wide pins: setter, getter, NULL and malformed arguments. */
    const char *bad_pins[] = {"sha256/abc"};
    const char *other_pins[] = {other_pin};
    const char *inter_pins[] = {inter_pin};
    CHECK_RC(mtls_policy_set_pins(NULL, other_pins, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_pins(pw, NULL, 1), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_policy_set_pins(pw, bad_pins, 1), MTLS_E_INVALID_POLICY);
    CHECK_OK(mtls_policy_set_pins(pw, other_pins, 1));
    char **got = NULL;
    size_t got_n = 0;
    CHECK_RC(mtls_policy_pins(pw, NULL, &got_n), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_pins(pw, &got, &got_n));
    CHECK(got_n == 1 && strcmp(got[0], other_pin) == 0);
    mtls_string_list_free(got, got_n);
    /* They hold with a host and without one (name check off), server and client side. */
    mtls_trust_result *rw = eval(pw, "chain.pem", "server.test", MTLS_PURPOSE_SERVER);
    CHECK(trusted(rw) == 0 && has_reason(rw, "pin_mismatch", NULL));
    mtls_trust_result_free(rw);
    CHECK_OK(mtls_policy_set_name_check(pw, 0));
    rw = eval(pw, "chain.pem", NULL, MTLS_PURPOSE_SERVER);
    CHECK(trusted(rw) == 0 && has_reason(rw, "pin_mismatch", NULL));
    mtls_trust_result_free(rw);
    rw = eval(pw, "client-chain.pem", NULL, MTLS_PURPOSE_CLIENT);
    CHECK(trusted(rw) == 0 && has_reason(rw, "pin_mismatch", NULL));
    mtls_trust_result_free(rw);
    CHECK_OK(mtls_policy_set_pins(pw, inter_pins, 1));
    rw = eval(pw, "client-chain.pem", NULL, MTLS_PURPOSE_CLIENT);
    CHECK(trusted(rw) == 1);
    char *prov = NULL;
    CHECK_RC(mtls_trust_result_provenance(NULL, &prov), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_result_provenance(rw, NULL), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_trust_result_provenance(rw, &prov));
    CHECK(prov && strstr(prov, "\"from\":\"policy\",\"enforced\":true") != NULL);
    mtls_string_free(prov);
    mtls_trust_result_free(rw);
    CHECK_OK(mtls_policy_set_pins(pw, NULL, 0)); /* cleared */
    CHECK_OK(mtls_policy_pins(pw, &got, &got_n));
    CHECK(got_n == 0);
    mtls_string_list_free(got, got_n);
    CHECK_OK(mtls_policy_set_name_check(pw, 1));

    /* Policy-wide verify-as: over a rule's, which still selects by host (its anchors hold). */
    char *va = (char *)1;
    CHECK_OK(mtls_policy_verify_as(pw, &va));
    CHECK(va == NULL);
    CHECK_RC(mtls_policy_set_verify_as(pw, ""), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_set_verify_as(pw, "not a name"), MTLS_E_INVALID_POLICY);
    CHECK_RC(mtls_policy_set_verify_as(NULL, "server.test"), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_policy_set_verify_as(pw, "server.test"));
    CHECK_OK(mtls_policy_verify_as(pw, &va));
    CHECK(va && strcmp(va, "server.test") == 0);
    mtls_string_free(va);
    CHECK_OK(mtls_policy_add_host_rule(pw, "**.example", "nobody.test", 0));
    CHECK_OK(mtls_policy_add_rule_anchor(pw, "**.example", other[0], 1));
    rw = eval(pw, "chain.pem", "10.1.2.3", MTLS_PURPOSE_SERVER); /* no rule: validated as server.test */
    CHECK(trusted(rw) == 1);
    mtls_trust_result_free(rw);
    rw = eval(pw, "chain.pem", "a.example", MTLS_PURPOSE_SERVER); /* the rule's anchors: Other Root */
    CHECK(trusted(rw) == 0);
    CHECK_OK(mtls_trust_result_matched_rule(rw, &va));
    CHECK(va && strcmp(va, "**.example") == 0);
    mtls_string_free(va);
    mtls_trust_result_free(rw);
    CHECK_OK(mtls_policy_set_verify_as(pw, NULL));

    /* Overrides: init, evaluation, and the policy left as it was. */
    mtls_trust_overrides ov;
    CHECK_RC(mtls_trust_overrides_init(NULL, MTLS_TRUST_OVERRIDES_VERSION), MTLS_E_INVALID_ARGUMENT);
    CHECK_RC(mtls_trust_overrides_init(&ov, 99), MTLS_E_INVALID_ARGUMENT);
    CHECK_OK(mtls_trust_overrides_init(&ov, MTLS_TRUST_OVERRIDES_VERSION));
    CHECK(ov.version == MTLS_TRUST_OVERRIDES_VERSION && ov.anchors_only == -1 && ov.pin_count == 0 &&
          ov.anchor_count == 0 && ov.verify_as == NULL);
    CHECK_OK(mtls_policy_add_host_rule(pw, "127.0.0.1", "server.test", 0));
    CHECK_OK(mtls_policy_add_pin(pw, "127.0.0.1", other_pin));
    CHECK_OK(mtls_policy_set_report_only(pw, "127.0.0.1", 1));
    size_t cn2 = 0;
    mtls_cert **ch = chain_of("chain.pem", &cn2);
    CHECK_OK(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, MTLS_PURPOSE_SERVER, 0, &ov, &rw));
    CHECK(trusted(rw) == 1); /* report-only rule pin: reported, not enforced */
    mtls_trust_result_free(rw);
    ov.pins = other_pins;
    ov.pin_count = 1;
    CHECK_OK(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, MTLS_PURPOSE_SERVER, 0, &ov, &rw));
    CHECK(trusted(rw) == 0 && has_reason(rw, "pin_mismatch", NULL)); /* an override pin is always enforced */
    CHECK_OK(mtls_trust_result_provenance(rw, &prov));
    CHECK(strstr(prov, "\"from\":\"override\",\"enforced\":true") != NULL);
    CHECK(strstr(prov, "\"from\":\"rule\",\"enforced\":false") != NULL);
    CHECK(strstr(prov, "\"rule\":\"127.0.0.1\"") != NULL);
    mtls_string_free(prov);
    mtls_trust_result_free(rw);
    ov.pins = inter_pins;
    ov.verify_as = "wrong.test";
    CHECK_OK(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, MTLS_PURPOSE_SERVER, 0, &ov, &rw));
    CHECK(trusted(rw) == 0 && has_reason(rw, "name_mismatch", NULL)); /* over the rule's verify_as */
    mtls_trust_result_free(rw);
    ov.verify_as = NULL;
    ov.anchors = other; /* added to the policy's: the test root still anchors the chain */
    ov.anchor_count = 1;
    CHECK_OK(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1:443", 0, NULL, MTLS_PURPOSE_SERVER, 0, &ov, &rw));
    CHECK(trusted(rw) == 1);
    CHECK_OK(mtls_trust_result_provenance(rw, &prov));
    CHECK(strstr(prov, "\"anchors\":[\"policy\",\"override\"]") != NULL);
    mtls_string_free(prov);
    mtls_trust_result_free(rw);
    ov.anchors_only = 7;
    CHECK_RC(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, 0, 0, &ov, &rw), MTLS_E_INVALID_ARGUMENT);
    ov.anchors_only = -1;
    ov.pins = bad_pins;
    CHECK_RC(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, 0, 0, &ov, &rw), MTLS_E_INVALID_ARGUMENT);
    ov.pins = NULL;
    ov.pin_count = 0;
    ov.verify_as = "";
    CHECK_RC(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, 0, 0, &ov, &rw), MTLS_E_INVALID_ARGUMENT);
    ov.verify_as = NULL;
    CHECK_OK(mtls_evaluate_with_overrides(pw, ch, cn2, "127.0.0.1", 443, NULL, 0, 0, NULL, &rw)); /* no overrides */
    CHECK(trusted(rw) == 1);
    mtls_trust_result_free(rw);
    /* Nothing was written into the policy: its rule has one pin, still report-only. */
    CHECK_OK(mtls_policy_pins(pw, &got, &got_n));
    CHECK(got_n == 0);
    mtls_string_list_free(got, got_n);
    CHECK_OK(mtls_policy_verify_as(pw, &va));
    CHECK(va == NULL);
    mtls_cert_list_free(ch, cn2);
    mtls_policy_free(pw);
}

int main(void) {
    const char *tmp = getenv("MTLS_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/trust-pki", tmp ? tmp : "/tmp");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && scripts/test-pki.sh --trust '%s'", dir, dir);
    t_sh(cmd);
    now = (int64_t)time(NULL) + 86400;
    size_t n = 0;
    root = chain_of("root.pem", &n);
    other = chain_of("other-root.pem", &n);
    inter = chain_of("inter.pem", &n);
    chain = chain_of("chain.pem", &cn);
    CHECK_OK(mtls_cert_spki_pin(other[0], &other_pin));
    CHECK_OK(mtls_cert_spki_pin(inter[0], &inter_pin));

    RUN(policy_constructors_and_null_arguments);
    RUN(trusted_evaluation_and_result_arguments);
    RUN(evaluate_arguments_and_der_input);
    RUN(name_mismatch_expiry_purpose_and_no_name);
    RUN(messages_say_what_to_do_next);
    RUN(host_rules);
    RUN(pins_report_only_and_expiry);
    RUN(crl_file_arguments);
    RUN(policy_json_and_atomic_replacement);
    RUN(decisions_bound_to_the_peer_reached);
    RUN(anchors_mean_those_anchors_only);
    RUN(one_effective_policy);

    mtls_string_free(other_pin);
    mtls_string_free(inter_pin);
    mtls_cert_list_free(chain, cn);
    mtls_cert_list_free(root, 1);
    mtls_cert_list_free(other, 1);
    mtls_cert_list_free(inter, 1);
    DONE();
}
