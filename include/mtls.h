/*
 * mtls.h — libmtls, mutual-TLS client identities for Linux programs.
 *
 * Conventions (every declaration below follows them):
 *  - Objects are opaque handles. Each has a *_free function (and shared ones a *_ref);
 *    *_free(NULL) does nothing.
 *  - Fallible functions return int: MTLS_OK (0) or a negative MTLS_E_* code. Results are
 *    written through out-parameters, which are set only on success unless stated otherwise.
 *  - mtls_strerror(code) is a static text for a code; mtls_last_error() is the detailed message
 *    of the last failure on the calling thread (read it right after the failing call).
 *  - Every pointer argument is checked: NULL where a value is required, or a buffer of the
 *    wrong size, gives MTLS_E_INVALID_ARGUMENT, never a crash.
 *  - Strings in and out are UTF-8 and NUL-terminated; binary data is (const uint8_t *, size_t).
 *    A `char **out` string is allocated by the library and freed by the caller with
 *    mtls_string_free(); a `uint8_t **out` buffer with mtls_bytes_free().
 *  - Thread safety: certificates, identities, policies and stores may be shared by threads;
 *    a connection is used by one thread at a time. Each type states it below.
 */
#ifndef MTLS_H
#define MTLS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MTLS_EXTERN __attribute__((visibility("default"))) extern
#else
#define MTLS_EXTERN extern
#endif

/* ======================================================================================
 * Version
 * ====================================================================================== */

#define MTLS_VERSION_MAJOR 0
#define MTLS_VERSION_MINOR 1
#define MTLS_VERSION_PATCH 0
#define MTLS_VERSION_NUMBER (MTLS_VERSION_MAJOR * 10000 + MTLS_VERSION_MINOR * 100 + MTLS_VERSION_PATCH)
#define MTLS_VERSION_STRING "0.1.0"

/* The runtime version as "MAJOR.MINOR.PATCH". Static storage; never free it. */
MTLS_EXTERN const char *mtls_version(void);
/* The runtime version as MTLS_VERSION_NUMBER would compute it. */
MTLS_EXTERN int mtls_version_number(void);

/* ======================================================================================
 * Errors. The numbers are stable: codes are only ever added, never renumbered or removed.
 * ====================================================================================== */

typedef enum mtls_status {
    MTLS_OK = 0,
    /* general */
    MTLS_E_INVALID_ARGUMENT = -1,   /* a NULL pointer, a bad size, an out-of-range index */
    MTLS_E_NO_MEMORY = -2,
    MTLS_E_INTERNAL = -3,
    MTLS_E_IO = -4,                 /* a file could not be read or written */
    MTLS_E_PARSE = -5,              /* certificate, policy or other input not understood */
    MTLS_E_BUFFER_TOO_SMALL = -6,
    MTLS_E_NOT_FOUND = -7,          /* no such file, label, object */
    /* PKCS#12 and keys */
    MTLS_E_BAD_PASSWORD = -10,
    MTLS_E_CORRUPT = -11,           /* corrupt or truncated data */
    MTLS_E_NOT_PKCS12 = -12,
    MTLS_E_NO_IDENTITY = -13,       /* no private key with a matching certificate */
    MTLS_E_UNSUPPORTED = -14,       /* unsupported algorithm; the message names it */
    MTLS_E_KEY_MISMATCH = -15,      /* the private key does not match the certificate */
    MTLS_E_LIMIT = -16,             /* input size or KDF iteration count over a safety limit */
    /* store */
    MTLS_E_DUPLICATE = -20,
    MTLS_E_BAD_SECRET = -21,
    MTLS_E_NOT_A_STORE = -22,
    MTLS_E_SCHEMA_TOO_NEW = -23,
    MTLS_E_LOCKED = -24,
    MTLS_E_READ_ONLY = -25,
    MTLS_E_DISK_FULL = -26,
    /* trust */
    MTLS_E_INVALID_POLICY = -30,
    MTLS_E_UNTRUSTED = -31,
    /* connections */
    MTLS_E_CONNECT = -40,
    MTLS_E_TIMEOUT = -41,
    MTLS_E_HANDSHAKE = -42,
    MTLS_E_PEER_ALERT = -43,
    MTLS_E_WANT_READ = -44,
    MTLS_E_WANT_WRITE = -45,
    MTLS_E_CLOSED = -46,
    MTLS_E_NO_MATCHING_IDENTITY = -47,
    /* PKCS#11 tokens */
    MTLS_E_TOKEN = -50,
    MTLS_E_PIN_INCORRECT = -51,
    MTLS_E_PIN_LOCKED = -52,
    MTLS_E_TOKEN_NOT_PRESENT = -53,
    MTLS_E_TOKEN_REMOVED = -54,
    MTLS_E_BAD_URI = -55,
    MTLS_E_PIN_REQUIRED = -56
} mtls_status;

/* A static English text for a code (unknown codes give "unknown error code"). Never free it. */
MTLS_EXTERN const char *mtls_strerror(int code);
/* The stable snake_case name of a code ("bad_password"), as used in JSON output. Static. */
MTLS_EXTERN const char *mtls_error_name(int code);
/* The detailed message of the last failed call on this thread, or "" if none. The pointer is
 * owned by the library and valid until the next failing call on the same thread. */
MTLS_EXTERN const char *mtls_last_error(void);

/* Free a string the library returned through a `char **` out-parameter. NULL is a no-op. */
MTLS_EXTERN void mtls_string_free(char *s);
/* Free a buffer the library returned through a `uint8_t **` out-parameter. NULL is a no-op. */
MTLS_EXTERN void mtls_bytes_free(uint8_t *b);

/* ======================================================================================
 * Certificates. An mtls_cert is immutable and reference counted: share it across threads
 * freely; each mtls_cert_ref needs one mtls_cert_free.
 * ====================================================================================== */

typedef struct mtls_cert mtls_cert;

/* Parse the first certificate of DER, PEM (one or many) or PKCS#7 data into *out.
 * Free *out with mtls_cert_free. MTLS_E_PARSE when there is no certificate. */
MTLS_EXTERN int mtls_cert_parse(const uint8_t *data, size_t len, mtls_cert **out);
/* Parse every certificate of DER, PEM or PKCS#7 data into a new array of *count handles.
 * Free the array and its handles with mtls_cert_list_free(*out, *count). */
MTLS_EXTERN int mtls_cert_list_parse(const uint8_t *data, size_t len, mtls_cert ***out, size_t *count);
/* Same as mtls_cert_list_parse, reading the file at `path`. */
MTLS_EXTERN int mtls_cert_list_load(const char *path, mtls_cert ***out, size_t *count);
/* Free an array from mtls_cert_list_* and every handle in it. NULL is a no-op. */
MTLS_EXTERN void mtls_cert_list_free(mtls_cert **list, size_t count);
/* Add a reference; returns `cert` (NULL gives NULL). Free each reference with mtls_cert_free. */
MTLS_EXTERN mtls_cert *mtls_cert_ref(mtls_cert *cert);
/* Drop a reference. NULL is a no-op. */
MTLS_EXTERN void mtls_cert_free(mtls_cert *cert);

/* The DER bytes. *data is owned by the certificate and valid while the handle lives. */
MTLS_EXTERN int mtls_cert_der(const mtls_cert *cert, const uint8_t **data, size_t *len);
/* The PEM text. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_cert_pem(const mtls_cert *cert, char **out);
/* Subject / issuer as RFC 4514 text; the subject's CN (or the whole subject) as a summary;
 * the serial number as lowercase hex. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_cert_subject(const mtls_cert *cert, char **out);
MTLS_EXTERN int mtls_cert_issuer(const mtls_cert *cert, char **out);
MTLS_EXTERN int mtls_cert_subject_summary(const mtls_cert *cert, char **out);
MTLS_EXTERN int mtls_cert_serial_hex(const mtls_cert *cert, char **out);
/* SHA-256 of the DER as 64 lowercase hex digits; SHA-256 of the SubjectPublicKeyInfo as hex and
 * as the pin form "sha256/BASE64". Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_cert_sha256_hex(const mtls_cert *cert, char **out);
MTLS_EXTERN int mtls_cert_spki_sha256_hex(const mtls_cert *cert, char **out);
MTLS_EXTERN int mtls_cert_spki_pin(const mtls_cert *cert, char **out);
/* SHA-256 of the DER into the caller's buffer of out_len >= 32 bytes
 * (MTLS_E_BUFFER_TOO_SMALL otherwise). */
MTLS_EXTERN int mtls_cert_sha256(const mtls_cert *cert, uint8_t *out, size_t out_len);
/* Validity as seconds since the Unix epoch (UTC). */
MTLS_EXTERN int mtls_cert_validity(const mtls_cert *cert, int64_t *not_before, int64_t *not_after);

/* Subject alternative name kinds. */
#define MTLS_SAN_DNS 1
#define MTLS_SAN_IP 2
#define MTLS_SAN_EMAIL 3
#define MTLS_SAN_URI 4
/* Number of SANs (DNS, IP, email, URI), and the index-th one: *kind is an MTLS_SAN_* value and
 * *value its text (IP addresses in inet_ntop form). Free *value with mtls_string_free. */
MTLS_EXTERN int mtls_cert_san_count(const mtls_cert *cert, size_t *count);
MTLS_EXTERN int mtls_cert_san(const mtls_cert *cert, size_t index, int *kind, char **value);
/* Key type: *name is "rsa2048", "p256", "p384", "p521", "ed25519"...; *bits its size.
 * Free *name with mtls_string_free. */
MTLS_EXTERN int mtls_cert_key_type(const mtls_cert *cert, char **name, int *bits);
/* basicConstraints: *present 0/1, *is_ca 0/1, *path_len -1 when absent. */
MTLS_EXTERN int mtls_cert_basic_constraints(const mtls_cert *cert, int *present, int *is_ca, int *path_len);
/* keyUsage bits (0x80 digitalSignature, 0x40 nonRepudiation, 0x20 keyEncipherment,
 * 0x10 dataEncipherment, 0x08 keyAgreement, 0x04 keyCertSign, 0x02 cRLSign). */
MTLS_EXTERN int mtls_cert_key_usage(const mtls_cert *cert, int *present, unsigned int *bits);
/* Extended key usages as dotted OIDs ("1.3.6.1.5.5.7.3.2" is clientAuth).
 * Free *oid with mtls_string_free. */
MTLS_EXTERN int mtls_cert_eku_count(const mtls_cert *cert, size_t *count);
MTLS_EXTERN int mtls_cert_eku(const mtls_cert *cert, size_t index, char **oid);

/* ======================================================================================
 * Identities and PKCS#12 (issue: foundation)
 * ====================================================================================== */

/* ======================================================================================
 * Trust policies and evaluation (issue: trust)
 * ====================================================================================== */

/* A trust policy: anchors, name checking, host rules with SPKI pins, key and signature strength,
 * CRLs, an optional fixed time. Thread safety: a policy may be changed (including replaced with
 * mtls_policy_replace) from any thread while other threads evaluate with it; each evaluation
 * sees one consistent version. Path validation is OpenSSL's X509_verify_cert; libmtls adds
 * webpki-grade checks, each with its own reason code (README.md, "Trust policies"). */
typedef struct mtls_policy mtls_policy;
/* The result of mtls_evaluate. Immutable; safe to read from any thread. */
typedef struct mtls_trust_result mtls_trust_result;

/* Purposes for mtls_evaluate. */
#define MTLS_PURPOSE_DEFAULT 0 /* the policy's purpose (server unless the policy file says) */
#define MTLS_PURPOSE_SERVER 1  /* the peer is a TLS server: serverAuth EKU */
#define MTLS_PURPOSE_CLIENT 2  /* the peer is a TLS client: clientAuth EKU */
/* Result kinds (mtls_trust_result_kind). */
#define MTLS_TRUST_PROCEED 0
#define MTLS_TRUST_RECOVERABLE_FAILURE 1 /* expiry, name mismatch, unknown root */
#define MTLS_TRUST_FATAL_FAILURE 2       /* bad signature, revoked, pin mismatch, malformed... */
/* What happens after a host rule's pins expire (mtls_policy_set_pin_expiry). */
#define MTLS_PIN_STOP_ENFORCING 0
#define MTLS_PIN_FAIL_CLOSED 1

/* A new policy with defaults: system trust store, server purpose, name check on, RSA >= 2048,
 * EC P-256/P-384/P-521, no MD5/SHA-1 signatures. Free *out with mtls_policy_free. */
MTLS_EXTERN int mtls_policy_new(mtls_policy **out);
/* Reads a policy JSON file (format in README.md); relative paths in it are resolved against
 * the file's folder. MTLS_E_INVALID_POLICY names the offending key. Free with mtls_policy_free. */
MTLS_EXTERN int mtls_policy_load(const char *path, mtls_policy **out);
/* Same as mtls_policy_load from JSON text (relative paths: the current directory). */
MTLS_EXTERN int mtls_policy_from_json(const char *json, mtls_policy **out);
/* Frees the policy. NULL is a no-op. Evaluations running on other threads finish first. */
MTLS_EXTERN void mtls_policy_free(mtls_policy *policy);
/* Atomically puts a copy of `from`'s settings in force in `policy` (new pins, new anchors) while
 * other threads evaluate; `policy` keeps its report callback. `from` stays owned by the caller. */
MTLS_EXTERN int mtls_policy_replace(mtls_policy *policy, const mtls_policy *from);
/* Adds an anchor (root, intermediate or the peer's own certificate). The policy keeps its own
 * reference to `cert`. */
MTLS_EXTERN int mtls_policy_add_anchor(mtls_policy *policy, const mtls_cert *cert);
/* Non-zero: trust only the anchors. Zero (default): anchors are added to the system store. */
MTLS_EXTERN int mtls_policy_set_anchors_only(mtls_policy *policy, int anchors_only);
/* Non-zero (default): check the host against the SANs. Zero: basic X.509 policy, no name check. */
MTLS_EXTERN int mtls_policy_set_name_check(mtls_policy *policy, int enabled);
/* A fixed evaluation time in seconds since 1970; 0 returns to "now". */
MTLS_EXTERN int mtls_policy_set_time(mtls_policy *policy, int64_t unix_time);
/* Adds the CRLs of a PEM or DER file; with CRLs the leaf must be covered by one. */
MTLS_EXTERN int mtls_policy_add_crl_file(mtls_policy *policy, const char *path);

/* Host rules. `pattern`: "name.example", "*.example" (one label), "**.example" (any depth),
 * an IP literal, each optionally with ":port". The most specific matching rule applies. Each
 * function below creates the rule when it does not exist yet. */
/* Sets the rule's verify-as name (NULL: the connected host) and whether to skip the name check. */
MTLS_EXTERN int mtls_policy_add_host_rule(mtls_policy *policy, const char *pattern, const char *verify_as,
                                          int skip_name_check);
/* Adds an anchor of the rule's own; `anchors_only` non-zero ignores the system store for the rule. */
MTLS_EXTERN int mtls_policy_add_rule_anchor(mtls_policy *policy, const char *pattern, const mtls_cert *cert,
                                            int anchors_only);
/* Adds an SPKI pin "sha256/BASE64"; one pin must match a certificate of the built chain. A rule
 * with a single pin gets a warning (no backup pin): see mtls_policy_warning. */
MTLS_EXTERN int mtls_policy_add_pin(mtls_policy *policy, const char *pattern, const char *pin);
/* Pins expire at `expires` (seconds since 1970; 0: never); then MTLS_PIN_STOP_ENFORCING or
 * MTLS_PIN_FAIL_CLOSED. */
MTLS_EXTERN int mtls_policy_set_pin_expiry(mtls_policy *policy, const char *pattern, int64_t expires,
                                           int after_expiry);
/* Non-zero: pin failures under the rule are reported to the report callback, not enforced. */
MTLS_EXTERN int mtls_policy_set_report_only(mtls_policy *policy, const char *pattern, int report_only);
/* Called once per unenforced failure of a report-only rule, on the evaluating thread. Strings
 * are valid only during the call. */
typedef void (*mtls_trust_report_cb)(const char *host, const char *rule, const char *code, const char *message,
                                     void *userdata);
/* Sets (or with cb NULL, clears) the report callback. `destroy(userdata)`, if not NULL, runs when
 * the callback is replaced or the policy is freed. */
MTLS_EXTERN int mtls_policy_set_report_callback(mtls_policy *policy, mtls_trust_report_cb cb, void *userdata,
                                                void (*destroy)(void *userdata));
/* Load-time warnings. Free each *out with mtls_string_free. */
MTLS_EXTERN int mtls_policy_warning_count(const mtls_policy *policy, size_t *count);
MTLS_EXTERN int mtls_policy_warning(const mtls_policy *policy, size_t index, char **out);

/* Evaluates `certs` (count >= 1, leaf first; the rest may be unordered or padded) for `host`
 * (DNS name or IP, optionally ":port"; NULL: no name check) with `purpose` (MTLS_PURPOSE_*), at
 * `at` (seconds since 1970; 0: the policy's time or now). Returns MTLS_OK whenever an evaluation
 * was made, trusted or not: read the verdict from *out, and free it with mtls_trust_result_free.
 * Recent evaluations are cached per policy version; the cache never changes an answer. */
MTLS_EXTERN int mtls_evaluate(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host,
                              int purpose, int64_t at, mtls_trust_result **out);
/* Frees a result. NULL is a no-op. */
MTLS_EXTERN void mtls_trust_result_free(mtls_trust_result *result);
/* *trusted = 1 when the peer is trusted, else 0. */
MTLS_EXTERN int mtls_trust_result_trusted(const mtls_trust_result *result, int *trusted);
/* *kind = MTLS_TRUST_PROCEED, _RECOVERABLE_FAILURE or _FATAL_FAILURE. */
MTLS_EXTERN int mtls_trust_result_kind(const mtls_trust_result *result, int *kind);
/* Reasons: stable snake_case codes ("expired", "name_mismatch", "pin_mismatch"...), the index in
 * the built chain of the certificate concerned (-1: the chain as a whole), and a message.
 * `cert_index` and `message` may be NULL. The strings are owned by the result and valid until it
 * is freed. */
MTLS_EXTERN int mtls_trust_result_reason_count(const mtls_trust_result *result, size_t *count);
MTLS_EXTERN int mtls_trust_result_reason(const mtls_trust_result *result, size_t index, const char **code,
                                         int *cert_index, const char **message);
/* The chain that was built, leaf first, as new references: free with mtls_cert_list_free. */
MTLS_EXTERN int mtls_trust_result_chain(const mtls_trust_result *result, mtls_cert ***out, size_t *count);
/* The matching host rule's pattern and the matching pin, or NULL; owned by the result. */
MTLS_EXTERN int mtls_trust_result_matched_rule(const mtls_trust_result *result, const char **rule);
MTLS_EXTERN int mtls_trust_result_matched_pin(const mtls_trust_result *result, const char **pin);

/* ======================================================================================
 * Credential store (issue: store)
 * ====================================================================================== */

/* ======================================================================================
 * Connections (issue: connections)
 * ====================================================================================== */

/* ======================================================================================
 * PKCS#11 tokens
 * ====================================================================================== */

/* ======================================================================================
 * Issuing: a private PKI (issue: pki)
 * ====================================================================================== */

/* Make a small private PKI: a root CA, intermediates (path length 0), server certificates
 * (serverAuth, DNS/IP names) and client certificates (clientAuth), CRLs, and .p12 files.
 * OpenSSL builds and signs (SHA-256; Ed25519 keys sign with pure EdDSA); serials are random
 * 128-bit. Profiles: root CA:TRUE + keyCertSign/cRLSign + SKI, 20 years; intermediate
 * CA:TRUE pathlen:0 + AKI/SKI, 10 years; server/client CA:FALSE, digitalSignature
 * (+keyEncipherment for RSA servers), AKI/SKI, 3 years. A certificate never outlives its
 * issuer (a longer validity is shortened). notBefore is 5 minutes before `now`.
 *
 * An mtls_issued is an issued certificate with its private key and its chain (leaf first).
 * Immutable and reference counted: share it across threads; each mtls_issued_ref needs one
 * mtls_issued_free. */
typedef struct mtls_issued mtls_issued;

/* Profiles for mtls_pki_issue. */
#define MTLS_PROFILE_ROOT 1          /* made by mtls_pki_root only */
#define MTLS_PROFILE_INTERMEDIATE 2
#define MTLS_PROFILE_SERVER 3
#define MTLS_PROFILE_CLIENT 4

/* Options for a new certificate. Versioned: fill with mtls_issue_options_init, then set
 * fields. The strings and arrays are read during the call only. */
#define MTLS_ISSUE_OPTIONS_VERSION 1
typedef struct mtls_issue_options {
    unsigned int version;              /* MTLS_ISSUE_OPTIONS_VERSION */
    const char *key_type;              /* "ec-p256" (NULL: the default), "ec-p384", "rsa-2048",
                                          "rsa-3072", "rsa-4096", "ed25519" */
    int validity_days;                 /* 0: the profile's default */
    int64_t now;                       /* issuing time, Unix seconds; 0: the current time */
    const char *const *dns_names;      /* subjectAltName DNS names (servers; `*.` allowed) */
    size_t dns_count;
    const char *const *ip_addresses;   /* subjectAltName IPv4/IPv6 literals (servers) */
    size_t ip_count;
} mtls_issue_options;

/* Fill *opts with the defaults of `version` (MTLS_ISSUE_OPTIONS_VERSION). */
MTLS_EXTERN int mtls_issue_options_init(mtls_issue_options *opts, unsigned int version);
/* Make a self-signed root CA named `name` (its CN, 1-64 characters) with a new key.
 * `opts` may be NULL for the defaults. Free *out with mtls_issued_free. */
MTLS_EXTERN int mtls_pki_root(const char *name, const mtls_issue_options *opts, mtls_issued **out);
/* Issue an MTLS_PROFILE_INTERMEDIATE, _SERVER or _CLIENT certificate named `name` from the CA
 * `issuer`, with a new key. A server needs at least one DNS name or IP address. Errors:
 * MTLS_E_INVALID_ARGUMENT (bad name, DNS name or IP; issuer not a CA or path length 0).
 * Free *out with mtls_issued_free. */
MTLS_EXTERN int mtls_pki_issue(const mtls_issued *issuer, int profile, const char *name,
                               const mtls_issue_options *opts, mtls_issued **out);
/* Load a certificate (and its chain: PEM, DER or PKCS#7 at cert_path) with its private key
 * (PEM at key_path; key_password NULL when it is not encrypted), e.g. a CA made by `mtls pki`.
 * MTLS_E_BAD_PASSWORD, MTLS_E_KEY_MISMATCH, MTLS_E_NOT_FOUND. Free *out with mtls_issued_free. */
MTLS_EXTERN int mtls_pki_load(const char *cert_path, const char *key_path, const char *key_password,
                              mtls_issued **out);
/* Add a reference; returns `issued` (NULL gives NULL). */
MTLS_EXTERN mtls_issued *mtls_issued_ref(mtls_issued *issued);
/* Drop a reference. NULL is a no-op. */
MTLS_EXTERN void mtls_issued_free(mtls_issued *issued);
/* The certificate, as a new reference: free *out with mtls_cert_free. */
MTLS_EXTERN int mtls_issued_cert(const mtls_issued *issued, mtls_cert **out);
/* The certificate then its chain up to the root, as PEM. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_issued_chain_pem(const mtls_issued *issued, char **out);
/* The private key as PEM: encrypted PKCS#8 (AES-256-CBC, PBKDF2) with `password`, or an
 * unencrypted PKCS#8 "PRIVATE KEY" when password is NULL (write it to an owner-only file).
 * Free *out with mtls_string_free after wiping it. */
MTLS_EXTERN int mtls_issued_key_pem(const mtls_issued *issued, const char *password, char **out);
/* A PKCS#12 file with the key, the certificate and the whole chain, friendly name = the CN:
 * AES-256 with a SHA-256 MAC, or with legacy != 0 3DES with a SHA-1 MAC for old consumers.
 * `password` is required (may be ""). Free *out with mtls_bytes_free. */
MTLS_EXTERN int mtls_issued_export_p12(const mtls_issued *issued, const char *password, int legacy,
                                       uint8_t **out, size_t *out_len);
/* A v2 CRL signed by the CA `ca` listing `count` serial numbers (hex, as mtls_cert_serial_hex
 * gives them), with CRL number `number`, thisUpdate `now` (0: the current time) and nextUpdate
 * validity_days later (0: 30). DER in *der; free it with mtls_bytes_free. */
MTLS_EXTERN int mtls_pki_crl(const mtls_issued *ca, const char *const *revoked_serials, size_t count,
                             uint64_t number, int validity_days, int64_t now, uint8_t **der, size_t *der_len);

#ifdef __cplusplus
}
#endif
#endif /* MTLS_H */
