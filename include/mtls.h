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
 *  - A size or count above SSIZE_MAX is MTLS_E_INVALID_ARGUMENT (a *_list_free given one frees
 *    nothing and sets the last error). Optional strings (NULL allowed) must be UTF-8 too.
 *  - Every handle carries a type tag checked on entry: a handle of another type, or one already
 *    freed, is MTLS_E_INVALID_ARGUMENT (and a no-op for the free and close functions). This is a
 *    best effort, not a guarantee: a freed handle is caught until its memory is reused, and a
 *    pointer libmtls never returned is undefined behaviour.
 *  - Strings in and out are UTF-8 and NUL-terminated; binary data is (const uint8_t *, size_t).
 *    A `char **out` string is allocated by the library and freed by the caller with
 *    mtls_string_free(); a `uint8_t **out` buffer with mtls_bytes_free(). Only the four static
 *    strings (mtls_version, mtls_strerror, mtls_error_name, mtls_last_error) are returned
 *    directly.
 *  - A list is returned as a new array and its length (`T **out` or `T ***out`, `size_t *count`),
 *    freed with the matching *_list_free(*out, *count); an empty list is NULL and 0. On an error
 *    *out is NULL and *count 0.
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

/* Contents, in this order (each section opens with a "=====" banner):
 *   Version
 *   Errors
 *   Secret files, URLs and hosts
 *   Certificates
 *   Identities and PKCS#12
 *   Trust policies and evaluation
 *   Credential store
 *   PKCS#11 tokens
 *   Identity sources, watches and events
 *   Revocation and OCSP stapling
 *   Connections
 *   Tunnels: forwarding, the PROXY protocol v2 header, the plaintext rule
 *   Listeners
 *   SSL_CTX integration
 *   Issuing: a private PKI
 *   Enrollment with a certificate authority
 *   Renewal, expiry and metrics
 * A type is declared before its first use, so a section may use the types of those above it. */

/* ======================================================================================
 * Version
 * ====================================================================================== */

/* The version is written here and nowhere else: the library, the command line, the packages
 * and mtls.pc take it from these three macros. */
#define MTLS_VERSION_MAJOR 0
#define MTLS_VERSION_MINOR 3
#define MTLS_VERSION_PATCH 0
#define MTLS_VERSION_NUMBER (MTLS_VERSION_MAJOR * 10000 + MTLS_VERSION_MINOR * 100 + MTLS_VERSION_PATCH)
#define MTLS_STRINGIFY_(x) #x
#define MTLS_STRINGIFY(x) MTLS_STRINGIFY_(x)
#define MTLS_VERSION_STRING \
    MTLS_STRINGIFY(MTLS_VERSION_MAJOR) "." MTLS_STRINGIFY(MTLS_VERSION_MINOR) "." MTLS_STRINGIFY(MTLS_VERSION_PATCH)

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
    MTLS_E_PIN_REQUIRED = -56,
    /* added later */
    MTLS_E_TRUNCATED = -48,         /* the peer closed without close_notify: a read may be cut short */
    MTLS_E_UPGRADE_REQUIRED = -57,  /* a store from before row authentication: see mtls_store_upgrade */
    /* Enrollment and renewal (issue 27) */
    MTLS_E_CA_REJECTED = -70,       /* the CA (ACME, EST) refused; the message carries its problem detail */
    MTLS_E_CHALLENGE_FAILED = -71   /* the CA could not validate the challenge, or the renewed identity is not proven */
} mtls_status;

/* A static English text for a code (unknown codes give "unknown error code"). Never free it. */
MTLS_EXTERN const char *mtls_strerror(int code);
/* The stable snake_case name of a code ("bad_password"), as used in JSON output. Static. */
MTLS_EXTERN const char *mtls_error_name(int code);
/* The detailed message of the last failed call on this thread, or "" if none. The pointer is
 * owned by the library and valid until the next failing call on the same thread. It is one line
 * whatever outside text it quotes (a file name, a label, a CA's problem detail, a server's
 * answer): control characters (C0, DEL, C1), line and paragraph separators and bidirectional
 * controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069) are blanks in it, so it can be
 * printed or logged as it is. The same holds for mtls_take_warnings and event messages. */
MTLS_EXTERN const char *mtls_last_error(void);

/* The warnings libmtls gave on the calling thread since the last call, oldest first (at most
 * 32 are kept), and clears them: the library never prints. Today: a secret file (PIN, password,
 * store secret or key, private key) that its group may read was used — one that others may
 * write or everyone may read is refused (MTLS_E_INVALID_ARGUMENT, naming the file and the
 * `chmod 600` that fixes it). Call it right after a call that read a secret file, on the same
 * thread. *out is a new array of *count strings (NULL and 0 when there is none); free it with
 * mtls_string_list_free. */
MTLS_EXTERN int mtls_take_warnings(char ***out, size_t *count);

/* Free a string the library returned through a `char **` out-parameter; it is zeroed first (it may
 * hold a private key). NULL is a no-op. */
MTLS_EXTERN void mtls_string_free(char *s);
/* Free an array of strings the library returned through `char ***out, size_t *count` (each string
 * as mtls_string_free does, then the array). NULL is a no-op. */
MTLS_EXTERN void mtls_string_list_free(char **list, size_t count);
/* Free a buffer the library returned through a `uint8_t **` out-parameter; it is zeroed first.
 * NULL is a no-op. */
MTLS_EXTERN void mtls_bytes_free(uint8_t *b);

/* ======================================================================================
 * Secret files, URLs and hosts. The core's readers, for front ends that take their own.
 * ====================================================================================== */

/* Read a password from a secret file as libmtls reads its own secret files (and OpenSSH a key):
 * refused with MTLS_E_INVALID_ARGUMENT, naming the file, when it is owned by neither the
 * effective user nor root, when anyone but its owner can write it, or when everyone can read it
 * (a group-readable one is read, with a warning through mtls_take_warnings); terminals are not
 * checked. *out receives the first line without its line ending (it may be empty), a NUL-terminated
 * copy the caller frees with mtls_string_free, which zeroes it; a line holding a NUL byte is
 * MTLS_E_INVALID_ARGUMENT. Also: MTLS_E_NOT_FOUND, MTLS_E_IO, MTLS_E_LIMIT (over 64 KiB).
 * *out is NULL on any error. */
MTLS_EXTERN int mtls_password_file_read(const char *path, char **out);

/* Split an http:// or https:// URL as libmtls reads every URL it connects to (mtls connect, the
 * ACME and EST clients, CRL distribution points, OCSP responders), so that a front end reading a
 * URL of its own (a proxy URL) reads it the same way: *host receives the host, a new string the
 * caller frees with mtls_string_free (an IPv6 literal without its brackets, an RFC 6874 zone
 * "[fe80::1%25eth0]" decoded to "fe80::1%eth0"); *port the port (80 for http, 443 for https when
 * the URL names none). Another scheme, user information, no host, an IPv6 address without
 * brackets, a malformed port or zone: MTLS_E_INVALID_ARGUMENT. *host is NULL on any error. */
MTLS_EXTERN int mtls_url_host_port(const char *url, char **host, uint16_t *port);

/* Split a host with an optional port as libmtls reads one everywhere it takes one (mtls connect
 * HOST:PORT, mtls verify --host, host rules), so that a front end taking a host of its own reads
 * it the same way: "host", "host:port", "[v6]", "[v6]:port", "[fe80::1%eth0]:port", or a bare IPv6
 * literal ("::1", "fe80::1%eth0": two colons or more without brackets are all host, no port).
 * *host receives the host without the brackets of an IPv6 literal (a zone kept as written), a new
 * string the caller frees with mtls_string_free; *port the port, 0 when the text names none. An
 * unclosed "[", text other than ":PORT" after "]", a port that is not 1 to 65535 in decimal
 * digits (an empty one, "host:", included), an empty host: MTLS_E_INVALID_ARGUMENT.
 * *host is NULL on any error. */
MTLS_EXTERN int mtls_host_port(const char *text, char **host, uint16_t *port);

/* A host given apart from its port (mtls_conn_connect, mtls_conn_open and mtls_conn_wrap_fd take one)
 * as libmtls reads it, so that a front end taking one reads it the same way: *host receives the
 * host without the brackets of an IPv6 literal ("[::1]" is "::1"; a bare IPv6 literal or a zone kept),
 * a new string the caller frees with mtls_string_free. A host carrying a port of its own
 * ("server.test:443", "[::1]:443"), a malformed bracket or an empty host: MTLS_E_INVALID_ARGUMENT,
 * as mtls_conn_connect refuses it before any name lookup. *host is NULL on any error. */
MTLS_EXTERN int mtls_host_only(const char *text, char **host);

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
/* One subject alternative name: kind is an MTLS_SAN_* value, value its text (IP addresses in
 * inet_ntop form). */
typedef struct mtls_san {
    int kind;
    char *value;
} mtls_san;
/* The SANs (DNS, IP, email, URI) in certificate order, as a new array of *count entries (*out
 * NULL and *count 0 when there are none). Free it with mtls_san_list_free(*out, *count). */
MTLS_EXTERN int mtls_cert_sans(const mtls_cert *cert, mtls_san **out, size_t *count);
MTLS_EXTERN void mtls_san_list_free(mtls_san *list, size_t count);
/* Key type: *name is "rsa2048", "p256", "p384", "p521", "ed25519"...; *bits its size.
 * Free *name with mtls_string_free. */
MTLS_EXTERN int mtls_cert_key_type(const mtls_cert *cert, char **name, int *bits);
/* basicConstraints: *present 0/1, *is_ca 0/1, *path_len -1 when absent. */
MTLS_EXTERN int mtls_cert_basic_constraints(const mtls_cert *cert, int *present, int *is_ca, int *path_len);
/* keyUsage bits (0x80 digitalSignature, 0x40 nonRepudiation, 0x20 keyEncipherment,
 * 0x10 dataEncipherment, 0x08 keyAgreement, 0x04 keyCertSign, 0x02 cRLSign). */
MTLS_EXTERN int mtls_cert_key_usage(const mtls_cert *cert, int *present, unsigned int *bits);
/* Extended key usages as dotted OIDs ("1.3.6.1.5.5.7.3.2" is clientAuth), a new array of *count
 * strings (none: *count 0, also when the extension is absent). Free it with
 * mtls_string_list_free(*out, *count). */
MTLS_EXTERN int mtls_cert_ekus(const mtls_cert *cert, char ***out, size_t *count);
/* Revocation sources the certificate names (issue 28): the URIs of its CRL distribution points
 * (full names; indirect or reason-partitioned ones left out) and of its authorityInfoAccess
 * OCSP responders. New arrays of *count strings (none: *count 0). Free with
 * mtls_string_list_free(*out, *count). */
MTLS_EXTERN int mtls_cert_crl_urls(const mtls_cert *cert, char ***out, size_t *count);
MTLS_EXTERN int mtls_cert_ocsp_urls(const mtls_cert *cert, char ***out, size_t *count);

/* ======================================================================================
 * Identities and PKCS#12
 * ====================================================================================== */

/* An mtls_identity is a private key with its leaf certificate and the chain above it, ordered
 * leaf -> root by building it. Immutable and reference counted: share it across threads
 * freely; each mtls_identity_ref needs one mtls_identity_free. The private key never leaves
 * the library in the clear. */
typedef struct mtls_identity mtls_identity;

/* Add a reference; returns `identity` (NULL gives NULL). */
MTLS_EXTERN mtls_identity *mtls_identity_ref(mtls_identity *identity);
/* Drop a reference. NULL is a no-op. */
MTLS_EXTERN void mtls_identity_free(mtls_identity *identity);
/* Make an identity from PEM text: `cert_pem` holds the leaf and, in any order, its chain;
 * `key_pem` a PKCS#8, encrypted PKCS#8 or traditional RSA/EC private key; `password` decrypts
 * an encrypted key (NULL when it is not encrypted). Free *out with mtls_identity_free.
 * MTLS_E_KEY_MISMATCH when no certificate matches the key, MTLS_E_BAD_PASSWORD for a missing
 * or wrong key password, MTLS_E_PARSE for unreadable PEM. */
MTLS_EXTERN int mtls_identity_from_pem(const char *cert_pem, const char *key_pem, const char *password,
                                       mtls_identity **out);
/* The leaf certificate: a new reference, free *out with mtls_cert_free. */
MTLS_EXTERN int mtls_identity_leaf(const mtls_identity *identity, mtls_cert **out);
/* The certificates above the leaf, as a new array of *count references (the first issued the
 * leaf; the last is the root when the chain is complete; none: *count 0). Free it with
 * mtls_cert_list_free(*out, *count). */
MTLS_EXTERN int mtls_identity_chain(const mtls_identity *identity, mtls_cert ***out, size_t *count);
/* The PKCS#12 friendly name (UTF-8). *out is set to NULL, with MTLS_OK, when there is none;
 * otherwise free it with mtls_string_free. */
MTLS_EXTERN int mtls_identity_friendly_name(const mtls_identity *identity, char **out);
/* The PKCS#12 local key id bytes. *out = NULL and *len = 0, with MTLS_OK, when there is none;
 * otherwise free *out with mtls_bytes_free. */
MTLS_EXTERN int mtls_identity_local_key_id(const mtls_identity *identity, uint8_t **out, size_t *len);
/* The private key's type ("rsa2048", "p256", "p384", "p521", "ed25519"...) and size in bits.
 * Free *name with mtls_string_free. */
MTLS_EXTERN int mtls_identity_key_type(const mtls_identity *identity, char **name, int *bits);

/* Flags of mtls_identity_chain_check. */
#define MTLS_CHAIN_VERIFIED 0x1         /* OpenSSL verified leaf -> root with the chain's own root */
#define MTLS_CHAIN_COMPLETE 0x2         /* the chain ends with a self-signed root */
#define MTLS_CHAIN_SIGNATURES_OK 0x4    /* every signature verifies with its issuer's key */
#define MTLS_CHAIN_WITHIN_VALIDITY 0x8  /* every certificate is valid now */
/* A basic X.509 evaluation of the identity's own chain (no host name, no system trust store),
 * computed on the first call and kept: *flags gets MTLS_CHAIN_* bits; *openssl_code (may be
 * NULL) OpenSSL's X509_V_* result, 0 when verified; *message (may be NULL) OpenSSL's text for
 * it, freed with mtls_string_free. */
MTLS_EXTERN int mtls_identity_chain_check(const mtls_identity *identity, unsigned int *flags, int *openssl_code,
                                          char **message);

/* An mtls_pkcs12 is the immutable result of a PKCS#12 import: one identity per private key in
 * the file (matched to its certificate by local key id, then by public key) and every
 * certificate in the file. Safe to share across threads for reading. */
typedef struct mtls_pkcs12 mtls_pkcs12;

/* Import a PKCS#12 (.p12/.pfx) file from memory. `password` is UTF-8; NULL means "no
 * password", which PKCS#12 encodes differently from the empty password "": given either, both
 * are tried (as OpenSSL's PKCS12_parse does), and mtls_pkcs12_password_encoding tells which
 * one opened the file. All schemes: PBES2 AES-CBC with
 * PBKDF2-HMAC-SHA1/256/512, SHA1-3DES, SHA1-RC2-40/128 (through the legacy provider of
 * libmtls's own OpenSSL library context; the program's default context is not touched),
 * unencrypted bags, SHA-1/256/512 MACs or no MAC. Free *out with mtls_pkcs12_free.
 * Errors: MTLS_E_BAD_PASSWORD, MTLS_E_CORRUPT (truncated or damaged), MTLS_E_NOT_PKCS12,
 * MTLS_E_UNSUPPORTED (the message names the algorithm), MTLS_E_KEY_MISMATCH (a key with no
 * matching certificate), MTLS_E_NO_IDENTITY (a key with no certificate at all),
 * MTLS_E_LIMIT (input over 16 MiB, more than 256 encrypted items, more than 1,000,000 units of
 * KDF work in one KDF or MAC or 4,000,000 in the whole file, where a PBKDF2 iteration is one unit
 * and scrypt costs N*r*p; every item visible before decryption is charged before any KDF runs).
 * Friendly names are decoded from BMPString to UTF-8 exactly. A certificate-only file imports
 * with zero identities. */
MTLS_EXTERN int mtls_pkcs12_import(const uint8_t *data, size_t len, const char *password, mtls_pkcs12 **out);
/* Same as mtls_pkcs12_import, reading the file at `path`. */
MTLS_EXTERN int mtls_pkcs12_load(const char *path, const char *password, mtls_pkcs12 **out);
/* Free an import result. Identities and certificates taken from it stay valid. NULL is a no-op. */
MTLS_EXTERN void mtls_pkcs12_free(mtls_pkcs12 *p12);
/* The identities in file order, as a new array of *count references (a file of certificates
 * only: *count 0). Free it with mtls_identity_list_free(*out, *count). */
MTLS_EXTERN int mtls_pkcs12_identities(const mtls_pkcs12 *p12, mtls_identity ***out, size_t *count);
MTLS_EXTERN void mtls_identity_list_free(mtls_identity **list, size_t count);
/* Every certificate in the file (leaves and chains included), in file order, as a new array of
 * *count references. Free it with mtls_cert_list_free(*out, *count). */
MTLS_EXTERN int mtls_pkcs12_certs(const mtls_pkcs12 *p12, mtls_cert ***out, size_t *count);
/* Which password encoding opened the file: "given" (a non-empty password), "empty" (the empty
 * password) or "absent" (no password). Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_pkcs12_password_encoding(const mtls_pkcs12 *p12, char **out);

/* Flags of mtls_pkcs12_export, mtls_store_export_p12 and mtls_issued_export_p12. */
#define MTLS_PKCS12_MODERN 0x0  /* AES-256-CBC, PBKDF2-HMAC-SHA256, HMAC-SHA256 MAC (default) */
#define MTLS_PKCS12_LEGACY 0x1  /* SHA1-3DES for keys and certificates, HMAC-SHA1 MAC */
/* Export an identity (key, leaf and its whole chain) as a PKCS#12 file protected by `password`
 * (required; "" is allowed). `friendly_name` NULL keeps the identity's own; any UTF-8 name is written
 * (characters outside the BMP as UTF-16 surrogate pairs). Free *out with
 * mtls_bytes_free. MTLS_E_UNSUPPORTED for a key that lives on a token. */
MTLS_EXTERN int mtls_pkcs12_export(const mtls_identity *identity, const char *password, int flags,
                                   const char *friendly_name, uint8_t **out, size_t *len);

/* ======================================================================================
 * Trust policies and evaluation
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
/* Since 0.3.0 a policy that has anchors trusts those anchors only; a policy without anchors
 * trusts the system store. mtls_policy_set_system_anchors(policy, 1) trusts the system store as
 * well as the anchors (policy files: "system_anchors": true; CLI: --system-anchors; Python:
 * Policy(system_anchors=True)); 0 never trusts the system store; -1 returns to the default. Host
 * rules and overrides follow the same rule. */
MTLS_EXTERN int mtls_policy_set_system_anchors(mtls_policy *policy, int system_anchors);
/* The older spelling of mtls_policy_set_system_anchors, turned around: non-zero trusts only the
 * anchors (the default when there are anchors); zero trusts the system store too (the 0.2
 * meaning, which stays). */
MTLS_EXTERN int mtls_policy_set_anchors_only(mtls_policy *policy, int anchors_only);
/* Non-zero (default): check the host against the SANs. Zero: basic X.509 policy, no name check. */
MTLS_EXTERN int mtls_policy_set_name_check(mtls_policy *policy, int enabled);
/* A fixed evaluation time in seconds since 1970; 0 returns to "now". */
MTLS_EXTERN int mtls_policy_set_time(mtls_policy *policy, int64_t unix_time);
/* Adds the CRLs of a PEM or DER file; with CRLs the leaf must be covered by one. */
MTLS_EXTERN int mtls_policy_add_crl_file(mtls_policy *policy, const char *path);

/* Host rules. `pattern`: "name.example", "*.example" (one label), "**.example" (any depth),
 * an IP literal, each optionally with ":port". An address matches however it is spelt ("10.5",
 * "::ffff:10.0.0.5" and "10.0.0.5" are one address). The most specific matching rule applies. Each
 * function below creates the rule when it does not exist yet. */
/* Sets the rule's verify-as name (NULL: the connected host) and whether to skip the name check.
 * The name check is off only with skip_name_check non-zero: an empty or whitespace verify_as, a
 * verify_as that is not a host name or IP, or both a verify_as and skip_name_check are
 * MTLS_E_INVALID_POLICY naming the rule (as are an empty pattern and a pin that is not "sha256/"
 * followed by 44 base64 characters, in mtls_policy_add_pin and in policy files). */
MTLS_EXTERN int mtls_policy_add_host_rule(mtls_policy *policy, const char *pattern, const char *verify_as,
                                          int skip_name_check);
/* Adds an anchor of the rule's own. The rule then trusts its own anchors only, unless the policy
 * says system_anchors 1; `anchors_only` non-zero ignores the system store for the rule whatever
 * the policy says (zero: as the policy says; before 0.3.0 zero added the system store). */
MTLS_EXTERN int mtls_policy_add_rule_anchor(mtls_policy *policy, const char *pattern, const mtls_cert *cert,
                                            int anchors_only);
/* The rule's own system_anchors (as mtls_policy_set_system_anchors; -1: as the policy says). Policy
 * files: a host rule's "system_anchors". */
MTLS_EXTERN int mtls_policy_set_rule_system_anchors(mtls_policy *policy, const char *pattern, int system_anchors);
/* Adds an SPKI pin "sha256/BASE64" (curl's "sha256//BASE64" is read as the same pin; every pin
 * argument and policy file takes both); one pin must match a certificate of the built chain. A rule
 * with a single pin gets a warning (no backup pin): see mtls_policy_warnings. */
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
/* Sets (or with cb NULL, clears) the report callback. `destroy(userdata)`, if not NULL, runs once,
 * when the last object holding the callback lets it go: the callback is replaced or cleared and
 * no policy copy, connection, listener or SSL_CTX configured with this policy still holds it. The
 * policy may outlive mtls_policy_free inside those objects and still call `cb`, so userdata must
 * stay valid until `destroy` runs (on whichever thread frees the last holder). */
MTLS_EXTERN int mtls_policy_set_report_callback(mtls_policy *policy, mtls_trust_report_cb cb, void *userdata,
                                                void (*destroy)(void *userdata));
/* Load-time warnings, a new array of *count strings. Free it with mtls_string_list_free. */
MTLS_EXTERN int mtls_policy_warnings(const mtls_policy *policy, char ***out, size_t *count);

/* Evaluates `certs` (count >= 1, leaf first; the rest may be unordered or padded) for `host`
 * (DNS name or IP, optionally ":port") with `purpose` (MTLS_PURPOSE_*), at `at` (seconds since
 * 1970; 0: the policy's time or now). host NULL gives no name to check: a server evaluated under
 * a policy whose name check is on is then untrusted with reason "no_peer_name" (fail closed);
 * for no name check, turn it off with mtls_policy_set_name_check(policy, 0). Returns MTLS_OK
 * whenever an evaluation
 * was made, trusted or not: read the verdict from *out, and free it with mtls_trust_result_free.
 * Recent evaluations are cached per policy version; the cache never changes an answer. */
MTLS_EXTERN int mtls_evaluate(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host,
                              int purpose, int64_t at, mtls_trust_result **out);
/* Same as mtls_evaluate with the certificates as DER (`ders[i]`, `lens[i]` bytes), as they come off
 * the wire: a chain evaluated recently under the same policy version is answered from the cache
 * without being parsed. MTLS_E_PARSE when a certificate does not parse. */
MTLS_EXTERN int mtls_evaluate_der(mtls_policy *policy, const uint8_t *const *ders, const size_t *lens, size_t count,
                                  const char *host, int purpose, int64_t at, mtls_trust_result **out);
/* Same as mtls_evaluate for the peer given as parts: `host` as the application named it (DNS
 * name or IP literal, no port; NULL: none), `port` (0: unknown, then only host rules without a
 * port apply) and `verify_as` (NULL: validate as `host`). Host rules are chosen by host and port,
 * most specific first (exact host:port, host, wildcards, default), never by verify_as: verify_as
 * changes only the name checked, so the pins of a rule for "10.0.0.5:8443" hold when the
 * certificate is validated as "api.example". A rule's own verify_as wins over `verify_as`, and the
 * policy-wide and override verify-as over both (see "One effective policy" below). */
MTLS_EXTERN int mtls_evaluate_peer(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host,
                                   uint16_t port, const char *verify_as, int purpose, int64_t at,
                                   mtls_trust_result **out);
/* Non-zero: client certificates (purpose client) may chain to the system trust store too. Default
 * zero: clients are judged by the policy's (and its rules') anchors only, even with system_anchors
 * 1, and a listener or mtls_ssl_ctx_configure(..., accepts_clients=1) whose client policy has no
 * anchor is refused with MTLS_E_INVALID_POLICY unless this is set. Policy files:
 * "system_anchors_for_clients": true. */
MTLS_EXTERN int mtls_policy_set_system_anchors_for_clients(mtls_policy *policy, int enabled);
/* Non-zero (default): remember recent evaluations. Zero: evaluate every time (for benchmarks). */
MTLS_EXTERN int mtls_policy_set_cache(mtls_policy *policy, int enabled);
/* Frees a result. NULL is a no-op. */
MTLS_EXTERN void mtls_trust_result_free(mtls_trust_result *result);
/* *trusted = 1 when the peer is trusted, else 0. */
MTLS_EXTERN int mtls_trust_result_trusted(const mtls_trust_result *result, int *trusted);
/* *kind = MTLS_TRUST_PROCEED, _RECOVERABLE_FAILURE or _FATAL_FAILURE. */
MTLS_EXTERN int mtls_trust_result_kind(const mtls_trust_result *result, int *kind);
/* One reason: a stable snake_case code ("expired", "name_mismatch", "pin_mismatch"...), the index
 * in the built chain of the certificate concerned (-1: the chain as a whole), and a message. */
typedef struct mtls_trust_reason {
    char *code;
    int cert_index;
    char *message;
} mtls_trust_reason;
/* The reasons, as a new array of *count entries (a trusted result has none: *count 0). Free it
 * with mtls_trust_reason_list_free(*out, *count). */
MTLS_EXTERN int mtls_trust_result_reasons(const mtls_trust_result *result, mtls_trust_reason **out, size_t *count);
MTLS_EXTERN void mtls_trust_reason_list_free(mtls_trust_reason *list, size_t count);
/* The chain that was built, leaf first, as new references: free with mtls_cert_list_free. */
MTLS_EXTERN int mtls_trust_result_chain(const mtls_trust_result *result, mtls_cert ***out, size_t *count);
/* The matching host rule's pattern and the matching pin; *out is NULL (with MTLS_OK) when none.
 * Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_trust_result_matched_rule(const mtls_trust_result *result, char **out);
MTLS_EXTERN int mtls_trust_result_matched_pin(const mtls_trust_result *result, char **out);

/* --- One effective policy per evaluation: policy-wide pins and verify-as, overrides ---------
 * For every evaluation (mtls_evaluate*, and the verification inside every handshake of a
 * connection, a listener or a configured SSL_CTX) libmtls composes the policy in force for that
 * peer, in this order, each step on top of the one before:
 *   1. the policy's defaults (anchors, anchors_only, name check);
 *   2. the host rule selected by the peer's host and port, never by a verify-as (its anchors,
 *      anchors_only, verify_as or skip_name_check, and its pins with their report-only and expiry);
 *   3. the policy-wide pins and verify-as (mtls_policy_set_pins, mtls_policy_set_verify_as; policy
 *      files: "pins", "verify_as"), with a host or without, of a server or of a client;
 *   4. the overrides of this connection or call (mtls_trust_overrides).
 * The name checked is the overrides' verify_as, else the policy-wide one, else the rule's (none
 * with its skip_name_check), else the peer's verify_as (mtls_evaluate_peer, mtls_conn_options,
 * mtls_ssl_set_peer), else (a server) its host; a policy whose name check is off checks none.
 * Anchors are the rule's own (else the policy's) plus the overrides'. Every set of pins in force
 * must have a pin matching a certificate of the built chain: the rule's (as the rule says), the
 * policy-wide ones and the overrides' (always enforced, whatever a rule says about report-only
 * or pin expiry). The composition is a value made for that evaluation: it never changes the
 * policy object, adds no rule and does not change its version. The result says where each
 * decision came from (mtls_trust_result_provenance). */

/* Sets the policy-wide SPKI pins ("sha256/BASE64", `count` of them; count 0 clears them): every
 * evaluation under the policy needs one of them to match a certificate of the built chain, on
 * top of the selected rule's own pins. The strings are copied. MTLS_E_INVALID_POLICY for a
 * malformed pin (nothing is changed). */
MTLS_EXTERN int mtls_policy_set_pins(mtls_policy *policy, const char *const *pins, size_t count);
/* The policy-wide pins, a new array of *count strings. Free it with mtls_string_list_free. */
MTLS_EXTERN int mtls_policy_pins(const mtls_policy *policy, char ***out, size_t *count);
/* Sets the policy-wide verify-as (NULL clears it): every peer's certificate is validated as this
 * DNS name or IP address, over the selected rule's verify_as; the rule still applies (its anchors
 * and pins). The string is copied. MTLS_E_INVALID_POLICY for an empty name or one that is not a
 * host name or IP address. */
MTLS_EXTERN int mtls_policy_set_verify_as(mtls_policy *policy, const char *verify_as);
/* The policy-wide verify-as; *out is NULL (with MTLS_OK) when none. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_policy_verify_as(const mtls_policy *policy, char **out);

#define MTLS_TRUST_OVERRIDES_VERSION 1
/* Overrides for one connection, listener, SSL_CTX or evaluation call (step 4 above). Fill with
 * mtls_trust_overrides_init first, then change fields: fields are only ever added at the end,
 * with a new version. Pointers are borrowed for the duration of the call that takes the
 * overrides (libmtls keeps its own copies and references). */
typedef struct mtls_trust_overrides {
    unsigned int version;           /* MTLS_TRUST_OVERRIDES_VERSION */
    mtls_cert *const *anchors;      /* anchors added to those in force (the rule's, else the policy's) */
    size_t anchor_count;
    int anchors_only;               /* -1 (default): as the rule, else the policy, says (anchors in
                                       force: those only, unless system_anchors); 0: the system store
                                       as well (system_anchors); 1: only the anchors are trusted */
    const char *const *pins;        /* SPKI pins "sha256/BASE64"; one must match; always enforced */
    size_t pin_count;
    const char *verify_as;          /* validate as this name or IP, over every other verify-as; NULL: none */
} mtls_trust_overrides;

/* Fill *overrides with the defaults of `version` (MTLS_TRUST_OVERRIDES_VERSION): no anchors,
 * anchors_only -1, no pins, no verify_as. */
MTLS_EXTERN int mtls_trust_overrides_init(mtls_trust_overrides *overrides, unsigned int version);
/* Same as mtls_evaluate_peer with `overrides` (NULL: none) on top of the policy; with port 0,
 * `host` may also carry its port as mtls_evaluate takes it ("name:8443", "[::1]:8443"). A malformed pin
 * or verify_as in the overrides is MTLS_E_INVALID_ARGUMENT (no evaluation is made). Free *out
 * with mtls_trust_result_free. */
MTLS_EXTERN int mtls_evaluate_with_overrides(mtls_policy *policy, mtls_cert *const *certs, size_t count,
                                             const char *host, uint16_t port, const char *verify_as, int purpose,
                                             int64_t at, const mtls_trust_overrides *overrides,
                                             mtls_trust_result **out);
/* Where each decision of the evaluation came from, as JSON text: {"rule": pattern|null,
 * "anchors": ["policy"|"rule"|"override"...] (who gave the anchors in force), "anchors_only": bool,
 * "anchors_only_from": "policy"|"rule"|"override", "name": the name checked|null, "name_from":
 * "override"|"policy"|"rule"|"peer"|"host"|"none", "pins": [{"from": "rule"|"policy"|"override",
 * "enforced": bool, "matched": pin|null}...]}. *out is NULL (with MTLS_OK) when no evaluation
 * could be made (an invalid policy, an empty chain). Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_trust_result_provenance(const mtls_trust_result *result, char **out);

/* --- Who may connect: allow-lists on the peer's certificate --------------------------------
 * An allow-list restricts which peers a policy accepts once their chain is trusted: clients on
 * a listener or an SSL_CTX configured with mtls_ssl_ctx_configure, the server on a client
 * connection. It is judged inside the one trust decision (every mtls_evaluate*, every handshake),
 * so every front end gets the same answer. A peer passes a list when it matches ANY ONE entry of
 * ANY kind (entries are OR'ed, as ghostunnel's --allow-* flags). The policy-wide list, the
 * selected host rule's list and the CLI's --allow-* flags (overrides) are each a requirement of
 * their own: each list in force must be passed. An empty list restricts nothing.
 * Kinds and matching:
 *   MTLS_ALLOW_CN   the subject's common name; MTLS_ALLOW_OU any organizational unit: exact
 *                   (case-sensitive), in "."-separated segments where "*" is one whole non-empty
 *                   segment and "**" any number of segments (zero or more);
 *   MTLS_ALLOW_DNS  any DNS subjectAltName, case-insensitive, "*" one whole label, "**" zero or
 *                   more labels ("**.example.com" matches example.com and every name below it);
 *   MTLS_ALLOW_URI  any URI subjectAltName as scheme://authority/path (SPIFFE IDs: the pattern
 *                   spiffe://example.org/ns/NS/sa/REST with NS "*" and REST "**" matches every
 *                   namespace and every service-account path under it). Scheme and authority
 *                   case-insensitive and literal (a wildcard in the trust domain is refused);
 *                   path case-sensitive, "*" one non-empty segment never crossing a slash, "**"
 *                   zero or more segments; percent-encoding compared as written; no query or
 *                   fragment;
 *   MTLS_ALLOW_SPKI an SPKI pin "sha256/BASE64" of the peer's own key (the leaf; pins on any
 *                   certificate of the chain are mtls_policy_set_pins);
 *   MTLS_ALLOW_ISSUER a CA certificate of the built chain: the anchor it ends at or an
 *                   intermediate on the way (a chain of one pinned certificate offers that one):
 *                   its SHA-256 fingerprint in hex (colons allowed) or its certificate in PEM (or
 *                   mtls_policy_allow_add_issuer).
 * A "*" inside a segment ("a*.example"), an empty pattern, a wildcard in a URI's scheme or
 * authority, a query or fragment, a malformed pin or fingerprint: MTLS_E_INVALID_POLICY naming
 * the kind and the pattern (nothing is changed). A peer refused by a list fails its evaluation
 * with reason "not_allowed" (MTLS_TRUST_FATAL_FAILURE; a handshake fails with MTLS_E_UNTRUSTED,
 * the peer is sent a bad_certificate alert), whose message names the list and, for each kind in
 * it, what the certificate had: 'the client certificate is not allowed by the policy's
 * allow-list ("allow"): CN "bob" matches no --allow-cn; URI SANs [spiffe://x/y] match no
 * --allow-uri ...'. Policy files: "allow": {"cn": [...], "ou": [...], "dns": [...], "uri": [...],
 * "spki": [...], "issuer": [...]} at the top and in host rules (issuer entries there may also
 * be certificate files). */
#define MTLS_ALLOW_CN 1
#define MTLS_ALLOW_OU 2
#define MTLS_ALLOW_DNS 3
#define MTLS_ALLOW_URI 4
#define MTLS_ALLOW_SPKI 5
#define MTLS_ALLOW_ISSUER 6
/* Adds one entry of kind MTLS_ALLOW_* to the policy-wide allow-list. The string is copied; an
 * entry already there is not added twice. MTLS_E_INVALID_ARGUMENT for an unknown kind. */
MTLS_EXTERN int mtls_policy_allow_add(mtls_policy *policy, int kind, const char *pattern);
/* The same for the host rule `rule` (created when missing): a list of its own, for peers under
 * that rule, on top of the policy-wide one. */
MTLS_EXTERN int mtls_policy_rule_allow_add(mtls_policy *policy, const char *rule, int kind, const char *pattern);
/* Adds an MTLS_ALLOW_ISSUER entry for the CA certificate `anchor` to the host rule `rule`'s
 * list (NULL: the policy-wide list). */
MTLS_EXTERN int mtls_policy_allow_add_issuer(mtls_policy *policy, const char *rule, const mtls_cert *anchor);
/* The entries of kind MTLS_ALLOW_* of the host rule `rule`'s list (NULL: the policy-wide list),
 * as given (issuers as SHA-256 hex), a new array of *count strings (none when the rule does not
 * exist). Free it with mtls_string_list_free. */
MTLS_EXTERN int mtls_policy_allow_patterns(const mtls_policy *policy, const char *rule, int kind, char ***out,
                                           size_t *count);

/* ======================================================================================
 * Credential store
 * ====================================================================================== */

/* A labeled credential store: one SQLite file (WAL) holding identities (private key sealed with
 * AES-256-GCM at rest, leaf, chain), certificates and references to token identities, each under
 * a label unique within its class. The store secret (a passphrase stretched with scrypt, or a
 * 32-byte key) unwraps the data key once per open.
 * Every row is authenticated under a key derived from the data key (class, label, generation and
 * every column a decision depends on) and checked on every read: a row written by someone who
 * could edit the file but does not know the secret is MTLS_E_CORRUPT naming its label ("tampered
 * or damaged") and is never used. A token URI's pin-value is never stored: it is removed
 * wherever p11-kit would read it (query or path attribute), the URI rebuilt by p11-kit.
 * The store is also authenticated as a whole (header, write counter, manifest): see
 * mtls_store_write_counter below.
 *
 * Thread safety: an mtls_store may be shared by threads (calls are serialised on its
 * connection); several processes may open the same file at once. An mtls_store_item is
 * immutable and may be read from any thread. */
typedef struct mtls_store mtls_store;
typedef struct mtls_store_item mtls_store_item;

/* Item classes. MTLS_STORE_ANY (0) is accepted where a class filter is optional. */
#define MTLS_STORE_ANY 0
#define MTLS_STORE_IDENTITY 1
#define MTLS_STORE_CERTIFICATE 2
#define MTLS_STORE_TOKEN_IDENTITY 3

/* Kinds of store secret. */
#define MTLS_STORE_SECRET_PASSPHRASE 1 /* any bytes; stretched with scrypt */
#define MTLS_STORE_SECRET_KEY 2        /* exactly 32 random bytes; used as the wrapping key */

/* Options for mtls_store_open. Initialise with mtls_store_options_init, then change fields. */
#define MTLS_STORE_OPTIONS_VERSION 1
typedef struct mtls_store_options {
    unsigned int version; /* MTLS_STORE_OPTIONS_VERSION */
    int busy_timeout_ms;  /* wait for other users' locks this long, then MTLS_E_LOCKED (10000) */
    int create;           /* create the file (0600) and its directory (0700) if missing (1); a
                           * new store is initialised in a temporary file beside it and moved
                           * into place only once complete (an interrupted creation leaves no
                           * file at `path`). 0: a missing store is MTLS_E_NOT_FOUND. */
    int kdf_log_n;        /* scrypt N = 2^kdf_log_n for a new store or a new secret (17) */
    int kdf_r;            /* scrypt r (8) */
    int kdf_p;            /* scrypt p (1) */
} mtls_store_options;

/* Fill *opts with the defaults above. MTLS_E_INVALID_ARGUMENT for an unknown version. */
MTLS_EXTERN int mtls_store_options_init(mtls_store_options *opts, unsigned int version);

/* Open (or create) the store at `path` with a secret of `secret_kind`. `opts` may be NULL for
 * the defaults. The secret is copied and the caller's copy may be wiped right after.
 * Errors: MTLS_E_BAD_SECRET (nothing is written), MTLS_E_NOT_A_STORE, MTLS_E_SCHEMA_TOO_NEW,
 * MTLS_E_READ_ONLY, MTLS_E_LOCKED, MTLS_E_NOT_FOUND (no file and opts->create == 0),
 * MTLS_E_UPGRADE_REQUIRED (a store from before row authentication: mtls_store_upgrade),
 * MTLS_E_CORRUPT (its authenticated header or manifest does not verify; nothing is written).
 * Close *out with mtls_store_close. */
MTLS_EXTERN int mtls_store_open(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
                                const mtls_store_options *opts, mtls_store **out);
/* Same, reading a passphrase from a file: always a passphrase, stretched with scrypt whatever its
 * length (a 32-byte file too); the passphrase is the file's first line, its line ending ("\n" or
 * "\r\n") dropped. */
MTLS_EXTERN int mtls_store_open_secret_file(const char *path, const char *secret_file,
                                            const mtls_store_options *opts, mtls_store **out);
/* Same, reading a raw key from a file of exactly 32 bytes (MTLS_STORE_SECRET_KEY); any other
 * length is MTLS_E_INVALID_ARGUMENT. */
MTLS_EXTERN int mtls_store_open_key_file(const char *path, const char *key_file,
                                         const mtls_store_options *opts, mtls_store **out);
/* Allow (allow != 0) or refuse (0, the default) stored token URIs whose module-path names a
 * PKCS#11 module that p11-kit has not registered (pkcs11.conf(5)), for this open store. Refused,
 * such a token identity is MTLS_E_INVALID_ARGUMENT when read: a store row can name a shared
 * object to be loaded into the program. */
MTLS_EXTERN int mtls_store_allow_module_paths(mtls_store *store, int allow);
/* Close the store, wipe its data key and free the handle. NULL is a no-op. Identities and
 * certificates obtained from the store stay valid (they hold their own references). */
MTLS_EXTERN void mtls_store_close(mtls_store *store);

/* Put an item under `label` (1..1024 bytes of UTF-8). With replace == 0 an existing label of
 * the same class gives MTLS_E_DUPLICATE; with replace != 0 the old item is swapped for the new
 * one in one transaction. MTLS_E_LOCKED, MTLS_E_DISK_FULL, MTLS_E_READ_ONLY leave the store
 * unchanged. The handles passed in are not consumed. */
MTLS_EXTERN int mtls_store_put_identity(mtls_store *store, const char *label, const mtls_identity *identity, int replace);
/* Put `count` identities under `count` labels in one transaction: all, or on any error none. */
MTLS_EXTERN int mtls_store_put_identities(mtls_store *store, const char *const *labels,
                                          mtls_identity *const *identities, size_t count, int replace);
MTLS_EXTERN int mtls_store_put_cert(mtls_store *store, const char *label, const mtls_cert *cert, int replace);
/* A token identity reference: the key's `pkcs11:` URI (MTLS_E_BAD_URI otherwise), its
 * certificate, and optionally `chain_count` chain certificates in any order (chain may be NULL
 * when chain_count is 0). */
MTLS_EXTERN int mtls_store_put_token_identity(mtls_store *store, const char *label, const char *uri,
                                              const mtls_cert *cert, mtls_cert *const *chain,
                                              size_t chain_count, int replace);
/* Import the single identity of a PKCS#12 file under `label`. `password` NULL means "no
 * password" (not the empty password). PKCS#12 errors are those of the PKCS#12 functions
 * (MTLS_E_BAD_PASSWORD...). `out` may be NULL; otherwise *out receives the imported identity
 * (free with mtls_identity_free). */
MTLS_EXTERN int mtls_store_import_p12(mtls_store *store, const char *label, const uint8_t *data, size_t len,
                                      const char *password, int replace, mtls_identity **out);

/* Get an item by label. MTLS_E_NOT_FOUND when absent. Free *out with mtls_identity_free /
 * mtls_cert_free; *uri with mtls_string_free. */
MTLS_EXTERN int mtls_store_get_identity(mtls_store *store, const char *label, mtls_identity **out);
MTLS_EXTERN int mtls_store_get_cert(mtls_store *store, const char *label, mtls_cert **out);
MTLS_EXTERN int mtls_store_get_token_identity(mtls_store *store, const char *label, char **uri, mtls_cert **cert);
/* Every stored identity, decrypted, in label order (token references excluded).
 * Free with mtls_identity_list_free(*out, *count). */
MTLS_EXTERN int mtls_store_identities(mtls_store *store, mtls_identity ***out, size_t *count);

/* Metadata without decrypting anything. mtls_store_item_info: the item labelled `label` in
 * `item_class` (MTLS_STORE_ANY: identity first, then certificate, then token identity).
 * mtls_store_list: every item of `item_class` (or MTLS_STORE_ANY), by label.
 * mtls_store_find_sha256: items whose leaf's SHA-256 is `sha256_hex` (64 hex digits, any case,
 * colons allowed). mtls_store_find_subject: items whose leaf subject (RFC 4514) or subject CN
 * equals `subject`. Free *out with mtls_store_item_free, arrays with
 * mtls_store_item_list_free(*out, *count). */
MTLS_EXTERN int mtls_store_item_info(mtls_store *store, const char *label, int item_class, mtls_store_item **out);
MTLS_EXTERN int mtls_store_list(mtls_store *store, int item_class, mtls_store_item ***out, size_t *count);
MTLS_EXTERN int mtls_store_find_sha256(mtls_store *store, const char *sha256_hex, mtls_store_item ***out, size_t *count);
MTLS_EXTERN int mtls_store_find_subject(mtls_store *store, const char *subject, mtls_store_item ***out, size_t *count);
MTLS_EXTERN void mtls_store_item_free(mtls_store_item *item);
MTLS_EXTERN void mtls_store_item_list_free(mtls_store_item **list, size_t count);

/* Item accessors, each returning a status like every other function (MTLS_E_INVALID_ARGUMENT for
 * a NULL item or out-parameter). Strings are new: free *out with mtls_string_free; the token URI
 * is NULL (with MTLS_OK) for an item that is not a token identity. Times are seconds since the
 * Unix epoch. mtls_store_item_chain_sha256s: the SHA-256 (hex) of every certificate of the item's
 * chain, leaf first, a new array freed with mtls_string_list_free(*out, *count). */
MTLS_EXTERN int mtls_store_item_label(const mtls_store_item *item, char **out);
MTLS_EXTERN int mtls_store_item_class(const mtls_store_item *item, int *out);
MTLS_EXTERN int mtls_store_item_subject(const mtls_store_item *item, char **out);
MTLS_EXTERN int mtls_store_item_issuer(const mtls_store_item *item, char **out);
MTLS_EXTERN int mtls_store_item_leaf_sha256(const mtls_store_item *item, char **out);
MTLS_EXTERN int mtls_store_item_token_uri(const mtls_store_item *item, char **out);
MTLS_EXTERN int mtls_store_item_not_after(const mtls_store_item *item, int64_t *out);
MTLS_EXTERN int mtls_store_item_created(const mtls_store_item *item, int64_t *out);
MTLS_EXTERN int mtls_store_item_modified(const mtls_store_item *item, int64_t *out);
MTLS_EXTERN int mtls_store_item_chain_sha256s(const mtls_store_item *item, char ***out, size_t *count);

/* Delete the item labelled `label` in `item_class` (MTLS_STORE_ANY: every class).
 * MTLS_E_NOT_FOUND when nothing matched. `deleted` may be NULL. */
MTLS_EXTERN int mtls_store_delete(mtls_store *store, const char *label, int item_class, size_t *deleted);
/* Delete every item of `item_class` (not MTLS_STORE_ANY). `deleted` may be NULL. */
MTLS_EXTERN int mtls_store_delete_class(mtls_store *store, int item_class, size_t *deleted);
/* Export the identity labelled `label` as PKCS#12 protected by `password` (required), with
 * `flags` MTLS_PKCS12_MODERN (AES-256, SHA-256 MAC) or MTLS_PKCS12_LEGACY (3DES, SHA-1 MAC, for
 * old consumers). The label is the friendly name. Free *out with mtls_bytes_free. */
MTLS_EXTERN int mtls_store_export_p12(mtls_store *store, const char *label, const char *password, int flags,
                                      uint8_t **out, size_t *out_len);
/* Change the secret and rotate the data key (scrypt parameters from the open options): a new data
 * key, every private key re-sealed and every row re-authenticated under it, in one transaction
 * (an interruption leaves the old store or the new one). The old secret, even with the old header
 * rows copied back into the file, opens nothing written after the change and no key of the new
 * file. Other open handles then fail with MTLS_E_BAD_SECRET until reopened with the new secret. */
MTLS_EXTERN int mtls_store_change_secret(mtls_store *store, const uint8_t *secret, size_t secret_len, int secret_kind);

/* The store as a whole (0.2.0). A header under the data key's MAC holds the schema version, the
 * KDF parameters and a store-wide write counter; a manifest of every row's (class, label,
 * generation), covered by the header, is checked on every read and updated in the same
 * transaction as every write. A row deleted, written back from an older copy or added behind the
 * library's back, or a header that does not verify, is MTLS_E_CORRUPT ("tampered or damaged")
 * naming the label where there is one, and nothing is written. What no file can show about
 * itself is the whole file replaced by an older copy of itself: keep the last write counter
 * you saw elsewhere and compare.
 *
 * mtls_store_write_counter: the write counter (incremented by every write transaction, by any
 * handle; never goes back). */
MTLS_EXTERN int mtls_store_write_counter(mtls_store *store, uint64_t *out);
/* A store made by a libmtls from before row authentication opens with MTLS_E_UPGRADE_REQUIRED:
 * its rows are trusted only when someone vouches for them. mtls_store_upgrade_preview lists what
 * an upgrade would vouch for (every row; token URIs without any pin-value; subject, issuer,
 * expiry and SHA-256 fingerprints read from the certificates the row holds, which are what the
 * upgrade authenticates, never from its text columns) and changes nothing:
 * free *items with mtls_store_item_list_free(*items, *count) and *confirmation with
 * mtls_string_free; *confirmation is NULL (and *count 0) when the store needs no explicit
 * upgrade (current, or of the schema before the header, whose authenticated rows any open
 * upgrades). mtls_store_upgrade does the upgrade in one transaction only if the store still holds
 * exactly what the preview with that `confirmation` showed (MTLS_E_INVALID_ARGUMENT otherwise,
 * nothing written); `vouched` (may be NULL) receives the number of rows. The secret and options
 * are those of mtls_store_open (opts->create is ignored: the file must exist). */
MTLS_EXTERN int mtls_store_upgrade_preview(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
                                           const mtls_store_options *opts, mtls_store_item ***items, size_t *count,
                                           char **confirmation);
MTLS_EXTERN int mtls_store_upgrade(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
                                   const mtls_store_options *opts, const char *confirmation, size_t *vouched);

/* The identity a user names, resolved the way the mtls command line's --identity is:
 *  - key_path non-NULL: `name` is a PEM file with the certificate (leaf first, then its chain)
 *    and key_path the PEM private key (`password` for an encrypted key);
 *  - a "pkcs11:" URI: the token identity it names (PIN: `pin`, else the URI's pin-source);
 *  - a file (a name ending in .p12/.pfx, or any file that exists): PKCS#12, opened with
 *    `password` (NULL and "" both mean no password; both encodings are tried);
 *  - anything else: a label in `store` (a stored identity, else a stored token identity, opened
 *    with `pin`); MTLS_E_INVALID_ARGUMENT when `store` is NULL, MTLS_E_NOT_FOUND when the store
 *    has no such label.
 * password, pin, key_path and store may be NULL; password and pin are copied and may be wiped
 * right after the call. Free *out with mtls_identity_free. */
MTLS_EXTERN int mtls_identity_resolve(const char *name, const char *key_path, const char *password,
                                      const char *pin, mtls_store *store, mtls_identity **out);

/* ======================================================================================
 * PKCS#11 tokens
 * ====================================================================================== */

/* Tokens (smart cards, USB tokens, HSMs) are reached through p11-kit: either every module
 * registered with p11-kit (pkcs11.conf(5); pass module_path NULL) or one module file
 * (module_path, e.g. "/usr/lib/softhsm/libsofthsm2.so"). Tokens and objects are named by
 * RFC 7512 "pkcs11:" URIs. A module is initialised while something made from it is alive (a
 * listing call, or a token identity) and finalised after.
 *
 * Errors of this section: MTLS_E_BAD_URI (syntax, unknown attribute, or a URI that matches
 * several certificates), MTLS_E_TOKEN_NOT_PRESENT (no token matches), MTLS_E_NOT_FOUND (no such
 * module file, certificate or key), MTLS_E_PIN_REQUIRED, MTLS_E_PIN_INCORRECT,
 * MTLS_E_PIN_LOCKED, MTLS_E_TOKEN_REMOVED (also reported by a TLS handshake whose token went
 * away), MTLS_E_TOKEN (anything else the module reports; mtls_last_error() has its CKR_ code).
 *
 * A listed token (mtls_token) and a listed certificate or key (mtls_token_object) are
 * immutable snapshots, reference counted: share them across threads; each *_ref needs one
 * *_free. */
typedef struct mtls_token mtls_token;
typedef struct mtls_token_object mtls_token_object;

/* Flags of mtls_token_flags and of the PIN callback. */
#define MTLS_TOKEN_LOGIN_REQUIRED 0x01       /* private objects need the user PIN */
#define MTLS_TOKEN_PIN_LOCKED 0x02           /* the user PIN is locked */
#define MTLS_TOKEN_PIN_COUNT_LOW 0x04        /* wrong PINs were entered */
#define MTLS_TOKEN_PIN_FINAL_TRY 0x08        /* the next wrong PIN locks the token */
#define MTLS_TOKEN_PROTECTED_AUTH_PATH 0x10  /* the token has its own PIN pad */
#define MTLS_TOKEN_USER_PIN_INITIALIZED 0x20

/* The initialised tokens present in the module at module_path (NULL: every registered module),
 * as a new array of *count handles. Free it with mtls_token_list_free(*out, *count).
 * Thread-safe. */
MTLS_EXTERN int mtls_token_list(const char *module_path, mtls_token ***out, size_t *count);
/* Free an array from mtls_token_list and every handle in it. NULL is a no-op. */
MTLS_EXTERN void mtls_token_list_free(mtls_token **list, size_t count);
/* Add a reference; returns `token` (NULL gives NULL). */
MTLS_EXTERN mtls_token *mtls_token_ref(mtls_token *token);
/* Drop a reference. NULL is a no-op. */
MTLS_EXTERN void mtls_token_free(mtls_token *token);
/* The token's label, RFC 7512 URI, manufacturer, model, serial number, p11-kit module name and
 * module file. Free *out with mtls_string_free; mtls_token_module_path sets *out to NULL when
 * p11-kit does not know the file. */
MTLS_EXTERN int mtls_token_label(const mtls_token *token, char **out);
MTLS_EXTERN int mtls_token_uri(const mtls_token *token, char **out);
MTLS_EXTERN int mtls_token_manufacturer(const mtls_token *token, char **out);
MTLS_EXTERN int mtls_token_model(const mtls_token *token, char **out);
MTLS_EXTERN int mtls_token_serial(const mtls_token *token, char **out);
MTLS_EXTERN int mtls_token_module_name(const mtls_token *token, char **out);
MTLS_EXTERN int mtls_token_module_path(const mtls_token *token, char **out);
/* The PKCS#11 slot id of the token in its module. */
MTLS_EXTERN int mtls_token_slot(const mtls_token *token, unsigned long *slot_id);
/* MTLS_TOKEN_* flags, as the token reported them when listed. */
MTLS_EXTERN int mtls_token_flags(const mtls_token *token, unsigned int *flags);

/* Kinds of token objects. */
#define MTLS_TOKEN_OBJECT_CERT 1
#define MTLS_TOKEN_OBJECT_PRIVATE_KEY 2
#define MTLS_TOKEN_OBJECT_PUBLIC_KEY 3
/* The certificates and keys on the tokens matching token_uri (NULL: every token) of the module
 * at module_path (NULL: every registered module). With a `pin` (NUL-terminated; NULL for
 * none), logs in first so private keys are listed too. Free the array with
 * mtls_token_object_list_free(*out, *count). MTLS_E_TOKEN_NOT_PRESENT when no token matches. */
MTLS_EXTERN int mtls_token_objects(const char *module_path, const char *token_uri, const char *pin,
                                   mtls_token_object ***out, size_t *count);
/* Free an array from mtls_token_objects and every handle in it. NULL is a no-op. */
MTLS_EXTERN void mtls_token_object_list_free(mtls_token_object **list, size_t count);
/* Add a reference; returns `object` (NULL gives NULL). */
MTLS_EXTERN mtls_token_object *mtls_token_object_ref(mtls_token_object *object);
/* Drop a reference. NULL is a no-op. */
MTLS_EXTERN void mtls_token_object_free(mtls_token_object *object);
/* *kind is an MTLS_TOKEN_OBJECT_* value. */
MTLS_EXTERN int mtls_token_object_kind(const mtls_token_object *object, int *kind);
/* CKA_LABEL (*out NULL when the object has none), the object's RFC 7512 URI, and its key type
 * ("rsa2048", "p256"...; *out NULL when unknown). Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_token_object_label(const mtls_token_object *object, char **out);
MTLS_EXTERN int mtls_token_object_uri(const mtls_token_object *object, char **out);
MTLS_EXTERN int mtls_token_object_key_type(const mtls_token_object *object, char **out);
/* CKA_ID (possibly empty), which ties a key to its certificate. Free *out with mtls_bytes_free. */
MTLS_EXTERN int mtls_token_object_id(const mtls_token_object *object, uint8_t **out, size_t *len);
/* The certificate of a certificate object: a new reference, free with mtls_cert_free.
 * MTLS_E_NOT_FOUND for a key or an unreadable certificate. */
MTLS_EXTERN int mtls_token_object_cert(const mtls_token_object *object, mtls_cert **out);
/* The token the object is on: a new handle, free with mtls_token_free. */
MTLS_EXTERN int mtls_token_object_token(const mtls_token_object *object, mtls_token **out);

/* Asked for the user PIN of a token (token_label and token_uri, valid during the call; flags:
 * MTLS_TOKEN_PIN_COUNT_LOW, MTLS_TOKEN_PIN_FINAL_TRY). Write the PIN, NUL-terminated, into
 * `pin` (pin_size bytes; libmtls wipes the buffer afterwards) and return 0; return non-zero to
 * give up (the call then fails with MTLS_E_PIN_REQUIRED). Called on the calling thread, during
 * mtls_identity_from_pkcs11 only, at most once; it is not kept -- except for a key marked
 * CKA_ALWAYS_AUTHENTICATE: then it is also called before each signature with that key (on the
 * thread running the handshake, for the token's context-specific login), for as long as the
 * identity lives, so `userdata` must stay valid until the identity and its connections are freed.
 * (A PIN from the URI's pin-value/pin-source serves those logins the same way.)
 * `destroy(userdata)`, if not NULL, runs exactly once when libmtls no longer holds the callback:
 * before mtls_identity_from_pkcs11 returns (whatever it returns), or for such a key when the
 * identity and its connections are freed (like every libmtls callback registration). */
typedef int (*mtls_pin_cb)(const char *token_label, const char *token_uri, unsigned int flags, char *pin,
                           size_t pin_size, void *userdata);
/* The identity a pkcs11: URI names: the certificate it matches (by object= / id=, the chain from
 * the other certificates on the token) and the private key with the same CKA_ID. The key never
 * leaves the token: TLS handshakes with this identity sign on the token (RSA PKCS#1 v1.5,
 * RSA-PSS, ECDSA P-256/P-384, Ed25519), with the TLS signature schemes the token has mechanisms
 * for (CKM_RSA_PKCS, CKM_RSA_PKCS_PSS, CKM_ECDSA, CKM_EDDSA). The key is an OpenSSL 3 key of
 * libmtls's own provider ("mtls-token"), which lives in a library context of libmtls's own: the
 * host program's default OpenSSL context never has it loaded, and the key cannot be exported. The PIN comes from pin_cb (NULL: none asked), else the URI's pin-value or
 * pin-source (a file); the module from the URI's module-path or module-name, else every
 * registered module. The identity keeps a session with the token open (and the user logged in)
 * until it and every connection using it are freed. Free *out with mtls_identity_free; share it
 * across threads (signatures on one token are serialised).
 * A token removed while the identity is loaded makes the next handshake fail with
 * MTLS_E_TOKEN_REMOVED; once it is back, the next handshake opens a new session, logs in again
 * (with the URI's pin-value or pin-source; pin_cb is not kept, so an identity whose PIN came from
 * the callback must be made again) and works, without restarting the program. The identity also
 * works in a fork()ed child: the first signature there initialises the module again (PKCS#11
 * requires C_Initialize in the child) and opens the child's own session. */
MTLS_EXTERN int mtls_identity_from_pkcs11(const char *uri, mtls_pin_cb pin_cb, void *userdata,
                                          void (*destroy)(void *userdata), mtls_identity **out);
/* The pkcs11: URI of the identity's private key when it lives on a token; *out NULL for a key in
 * memory. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_identity_token_uri(const mtls_identity *identity, char **out);

/* Enrollment on a token (PIN as for mtls_identity_from_pkcs11: pin_cb, else the URI's pin-value
 * or pin-source; a static PIN the token refused is not sent again until it changes, and none is
 * sent to a token at its final try: MTLS_E_PIN_LOCKED). The PIN callback, if any, is called on
 * the calling thread during the call only and is not kept. */
/* Generate a key pair on the token the URI names (token=... and object=LABEL and/or id=%XX...):
 * key_type MTLS_KEY_TYPE_EC_P256, _EC_P384, _RSA_2048, _RSA_3072 or _ED25519 (the aliases below
 * are accepted too); the private key sensitive,
 * never extractable, for signing, with CKA_ID from id= (random when absent) and CKA_LABEL from
 * object=. *key_uri is the new private key's URI; free it with mtls_string_free.
 * MTLS_E_DUPLICATE when the token has a key with that id or label; MTLS_E_UNSUPPORTED when the
 * token cannot make that type (the message names the attribute when that can be known, such as
 * CKA_MODULUS_BITS outside the token's range). "No encrypt, decrypt, wrap or unwrap" is only a
 * preference: a module that refuses it (tpm2-pkcs11's keys always sign and decrypt) gets the
 * key without it, and a warning (mtls_take_warnings) names the attributes it set anyway. */
MTLS_EXTERN int mtls_token_keygen(const char *uri, const char *key_type, mtls_pin_cb pin_cb, void *userdata,
                                  char **key_uri);
/* A PKCS#10 certificate signing request for the token key the URI names, with `subject`
 * ("CN=alice", "CN=alice,O=Example"), signed on the token (a CKA_ALWAYS_AUTHENTICATE key gets
 * its context-specific login before the signature, as in a handshake). *csr_pem (PEM) is freed
 * with mtls_string_free. */
MTLS_EXTERN int mtls_token_csr(const char *uri, const char *subject, mtls_pin_cb pin_cb, void *userdata, char **csr_pem);
/* Write `cert` onto the token beside the private key the URI names (same CKA_ID; label from the
 * URI's object=, else the key's). MTLS_E_KEY_MISMATCH when it is not that key's certificate,
 * MTLS_E_DUPLICATE when it is already there. *cert_uri (may be NULL) receives the certificate
 * object's URI; free it with mtls_string_free. */
MTLS_EXTERN int mtls_token_import_cert(const char *uri, const mtls_cert *cert, mtls_pin_cb pin_cb, void *userdata,
                                       char **cert_uri);

/* ======================================================================================
 * Identity sources, watches and events
 * ====================================================================================== */

/* ---- Identities and policies that change; events; expiry (issue 26) ----
 *
 * An identity source is what a listener, client connections or a configured SSL_CTX present:
 * fixed or swapped by the application (mtls_identity_source_new, mtls_identity_source_set), or
 * following a store label (mtls_identity_source_follow_store). Each handshake takes the identity
 * in force when it starts, whole (never the key of one with the certificate of another);
 * connections in flight keep theirs. A client session made with one identity is never resumed
 * under another.
 *
 * Following a store: the library's watcher thread, named "mtls-watch" (one per process, started
 * with the first thing followed, ended when nothing is), looks at the store's change mark every
 * 250 ms (SQLite's data_version and the connection's own changes: two integers, no row read);
 * only when it moved is the label's row metadata read, and only when its leaf changed is the row
 * loaded. A replacement made by another process (mtls store import --replace) is in force within
 * a second. A replacement that fails to load (a row that fails authentication: MTLS_E_CORRUPT; a
 * label deleted: MTLS_E_NOT_FOUND; a token that is gone) keeps the last good identity and is
 * reported as MTLS_EVENT_RELOAD_FAILED, once: not again at every other write to the store, until
 * a look succeeds (it is tried again at each look). Handshakes never read the store. Every
 * event's message is one line (control characters of a label or a name in it are blanks).
 *
 * Events: callbacks run on the "mtls-watch" thread for what it finds, on the calling thread
 * for mtls_identity_source_set / mtls_listener_set_identity, and on a handshake's thread for an
 * identity its context cannot take. They must not block for long (they
 * hold up the watcher) and must not free the object they were registered on.
 *
 * Thread safety: an mtls_identity_source and an mtls_policy_watch may be shared across threads
 * and used by any number of listeners, connections and contexts at once; set, current and the
 * event callback functions may be called from any thread. */
typedef struct mtls_identity_source mtls_identity_source;
typedef struct mtls_policy_watch mtls_policy_watch;

#define MTLS_EVENT_IDENTITY_ROTATED 1 /* a new identity is in force */
#define MTLS_EVENT_POLICY_RELOADED 2  /* a followed policy file's new settings are in force */
#define MTLS_EVENT_RELOAD_FAILED 3    /* a replacement could not be loaded; the last good one stays */
#define MTLS_EVENT_EXPIRY_WARNING 4   /* the identity presented, or an anchor of a followed policy,
                                         expires within the warning window; from a renewer: the
                                         identity expires before the next renewal attempt */
/* Renewal events (issue 27), fired by a renewer: see "Renewal events" below, mtls_renewer_new. */
#define MTLS_EVENT_RENEWAL_SCHEDULED 5   /* next_attempt: when the identity is next renewed */
#define MTLS_EVENT_RENEWAL_SUCCEEDED 6   /* a renewed identity is proven and installed (the new certificate) */
#define MTLS_EVENT_RENEWAL_FAILED 7      /* error_code, message: why; next_attempt: the retry (backoff) */
#define MTLS_EVENT_RENEWAL_NOT_INSTALLED 8 /* issued but its key or chain (under the policy) does not
                                              prove it: not installed; retried like a failure */

/* One event. Every pointer is valid only during the callback. */
typedef struct mtls_event {
    int kind;                  /* MTLS_EVENT_* */
    const char *label;         /* store label or policy file path; NULL for an application's swap */
    const char *subject;       /* RFC 4514 subject of the certificate concerned, or NULL */
    const char *sha256;        /* its lowercase hex SHA-256, or NULL */
    int64_t not_after;         /* its notAfter (seconds since 1970), 0 when none */
    int error_code;            /* MTLS_EVENT_RELOAD_FAILED, _RENEWAL_FAILED, _RENEWAL_NOT_INSTALLED:
                                  the MTLS_E_* code; else 0 */
    const char *message;       /* one line saying what happened */
    int64_t next_attempt;      /* renewal events: when the next renewal attempt is due (seconds
                                  since 1970); else 0. Added last: the library writes the struct,
                                  callbacks built against the older header just do not read it. */
} mtls_event;
typedef void (*mtls_event_cb)(const mtls_event *event, void *userdata);

#define MTLS_WATCH_OPTIONS_VERSION 1
/* Options of a followed store label or policy file; fill with mtls_watch_options_init. */
typedef struct mtls_watch_options {
    unsigned int version;      /* MTLS_WATCH_OPTIONS_VERSION */
    int warning_days;          /* MTLS_EVENT_EXPIRY_WARNING this many days before notAfter (the
                                  identity presented; a followed policy's anchors); 0: 14 */
    const char *token_pin;     /* a token identity's PIN (NULL: its URI's pin-value/pin-source);
                                  copied, the caller's buffer may be wiped after the call */
} mtls_watch_options;
MTLS_EXTERN int mtls_watch_options_init(mtls_watch_options *opts, unsigned int version);

/* A source presenting `identity` (required) until mtls_identity_source_set. It keeps its own
 * reference to the identity. Free *out with mtls_identity_source_free. The first identity is not
 * checked against the clock (a program starts with what it has; one within the warning window,
 * or past it, is reported as MTLS_EVENT_EXPIRY_WARNING once a callback is set): only a
 * replacement must be valid now (see mtls_identity_source_set). */
MTLS_EXTERN int mtls_identity_source_new(const mtls_identity *identity, mtls_identity_source **out);
/* A source following `label` in `store` (a stored identity, else a token identity). The identity
 * is loaded now: a failure is returned (MTLS_E_NOT_FOUND, MTLS_E_CORRUPT, token errors). The
 * source keeps its own reference to the store. opts may be NULL. Free with
 * mtls_identity_source_free. */
MTLS_EXTERN int mtls_identity_source_follow_store(mtls_store *store, const char *label, const mtls_watch_options *opts,
                                                  mtls_identity_source **out);
/* Puts `identity` in force for every handshake that starts from now on (a followed label's next
 * change in the store replaces it again). Fires MTLS_EVENT_IDENTITY_ROTATED on this thread.
 * An identity whose certificate has expired or is not valid yet is refused: MTLS_E_INVALID_ARGUMENT,
 * the identity in force stays, MTLS_EVENT_RELOAD_FAILED fires on this thread (a store replacement
 * like it is a failed reload too). A context whose SSLs cannot take the identity in force (an
 * application's SSL_CTX with a security level above its key) presents the last identity it
 * could, whole, and fires MTLS_EVENT_RELOAD_FAILED once, on the thread of that handshake. */
MTLS_EXTERN int mtls_identity_source_set(mtls_identity_source *source, const mtls_identity *identity);
/* The identity in force now: a new reference, free with mtls_identity_free. */
MTLS_EXTERN int mtls_identity_source_current(const mtls_identity_source *source, mtls_identity **out);
/* Sets (cb NULL: clears) the source's event callback. `destroy(userdata)`, if not NULL, runs once
 * when the callback is replaced or cleared, or when the source is freed by its last holder (a
 * listener, connection or SSL_CTX may hold it after mtls_identity_source_free). */
MTLS_EXTERN int mtls_identity_source_set_event_callback(mtls_identity_source *source, mtls_event_cb cb, void *userdata,
                                                        void (*destroy)(void *userdata));
/* Drops the caller's reference; listeners, connections and SSL_CTXs that use it keep theirs.
 * NULL is a no-op. */
MTLS_EXTERN void mtls_identity_source_free(mtls_identity_source *source);

/* A policy loaded from a JSON file and kept up to date with it: when the file changes, the new
 * file is parsed in full and only then put in force (mtls_policy_replace semantics: sessions of
 * the old settings are not resumed); a file that does not parse keeps the old settings and fires
 * MTLS_EVENT_RELOAD_FAILED (once per version of the file; a file that failed is tried again at
 * each look, so a policy written before an anchor file it names is in force once that file is
 * there). A change is seen by the file's size, times, inode and device, and while its times are
 * within 2 s of the last read by its bytes; the file is also read again when an anchor or CRL
 * file it names changes (size, times, inode or device); a reload reads only a regular file (a
 * FIFO in its place is a failed reload, not a wait). The first load's failure is returned. opts
 * may be NULL.
 * Free with mtls_policy_watch_free. */
MTLS_EXTERN int mtls_policy_watch_new(const char *path, const mtls_watch_options *opts, mtls_policy_watch **out);
/* The followed policy, to give to listeners, connections and contexts: a new reference, free
 * with mtls_policy_free. */
MTLS_EXTERN int mtls_policy_watch_policy(const mtls_policy_watch *watch, mtls_policy **out);
/* Reloads now, whether or not the file looks changed (on SIGHUP, say). Returns MTLS_OK even when
 * the file is broken: that is reported through the event callback (even when the same failure
 * was reported before). */
MTLS_EXTERN int mtls_policy_watch_reload(mtls_policy_watch *watch);
MTLS_EXTERN int mtls_policy_watch_set_event_callback(mtls_policy_watch *watch, mtls_event_cb cb, void *userdata,
                                                     void (*destroy)(void *userdata));
/* Stops following (the policy stays valid for its holders). NULL is a no-op. */
MTLS_EXTERN void mtls_policy_watch_free(mtls_policy_watch *watch);

/* Anchors taken from store labels (stored certificates, mtls store add-cert), kept up to date
 * in `policy`: the certificates under `labels` (count >= 1) are added to its anchors now (a
 * failure is returned: MTLS_E_NOT_FOUND, MTLS_E_CORRUPT...), and when another process replaces
 * one, the policy's anchors are swapped for the new ones within a second (as mtls_policy_replace:
 * sessions judged under the old anchors are not resumed), firing MTLS_EVENT_POLICY_RELOADED; a
 * label that fails to load keeps the anchors in force and fires MTLS_EVENT_RELOAD_FAILED once.
 * The watch keeps its own references to policy and store. Free with mtls_anchor_watch_free
 * (the anchors in force stay in the policy). */
typedef struct mtls_anchor_watch mtls_anchor_watch;
MTLS_EXTERN int mtls_policy_follow_store_anchors(mtls_policy *policy, mtls_store *store, const char *const *labels,
                                                 size_t count, mtls_anchor_watch **out);
MTLS_EXTERN int mtls_anchor_watch_set_event_callback(mtls_anchor_watch *watch, mtls_event_cb cb, void *userdata,
                                                     void (*destroy)(void *userdata));
/* Stops following. NULL is a no-op. */
MTLS_EXTERN void mtls_anchor_watch_free(mtls_anchor_watch *watch);

/* ======================================================================================
 * Revocation and OCSP stapling
 * ====================================================================================== */

/* --- Revocation (issue 28) -------------------------------------------------------------------
 * A policy (and each host rule, over it) may check the revocation of every certificate of the
 * built chain below the anchor, in every evaluation: mtls_evaluate*, and the verification inside
 * every handshake of a connection, a listener (client certificates) and a configured SSL_CTX.
 * Sources, in order: CRLs (those added with mtls_policy_add_crl_file, then the certificate's CRL
 * distribution points, fetched over http: only, verified against the issuer in the built chain
 * with OpenSSL — signature, issuer name, authority key identifier, thisUpdate/nextUpdate,
 * critical extensions; delta, indirect and reason-partitioned CRLs are unsupported — and cached
 * per URL until nextUpdate, in memory and in the cache folder; concurrent evaluations needing
 * one URL make one request; refreshed in the background before nextUpdate), then OCSP (a client
 * checks the server's stapled response first — TLS 1.3 with the certificate, TLS 1.2 in the
 * OCSP status callback libmtls installs on client contexts whose policy lists OCSP, before the
 * handshake ends; else a request with a nonce to the
 * certificate's AIA responder, answered by the issuer or a responder it delegated to with
 * id-kp-OCSPSigning, current at the evaluation time, cached while current). One freshness rule
 * holds for every CRL and OCSP response, whatever its source (file, distribution point, cache,
 * fetched, stapled, and the staple a listener sends): current until its nextUpdate; without a
 * nextUpdate, until its thisUpdate plus the maximum age (mtls_policy_set_revocation_max_age,
 * default 7 days); a thisUpdate more than 5 minutes in the future is refused. A CRL without a CRL
 * number is used (as OpenSSL does); of two CRLs of one issuer the newer (CRL number, else
 * thisUpdate) answers, and one older than a CRL already seen is never used in its place. A
 * certificate found revoked is never trusted (reason "revoked", with its date and reason); when
 * no source answers (unreachable, stale, unsupported, invalid) the status is unknown: HARD
 * refuses with reason "revocation_unknown", SOFT trusts and says so (mtls_trust_result_warnings,
 * mtls_trust_result_revocation). A handshake that needs a fetch waits for it within the fetch
 * time limit. Policy files: "revocation": {"mode": "hard", "sources": ["crl"], "max_bytes": N,
 * "timeout_ms": N, "cache_dir": "dir", "max_age_seconds": N} and per host rule {"mode": ...,
 * "sources": [...]}. */
#define MTLS_REVOCATION_OFF 0   /* default */
#define MTLS_REVOCATION_SOFT 1
#define MTLS_REVOCATION_HARD 2
/* Sources, or-ed: CRLs are consulted before OCSP. */
#define MTLS_REVOCATION_SOURCE_CRL 1
#define MTLS_REVOCATION_SOURCE_OCSP 2
/* Policy-wide revocation checking: `mode` MTLS_REVOCATION_*, `sources` MTLS_REVOCATION_SOURCE_*
 * flags (0: CRL). MTLS_E_INVALID_ARGUMENT for an unknown mode or flag. */
MTLS_EXTERN int mtls_policy_set_revocation(mtls_policy *policy, int mode, int sources);
/* The same for the host rule `pattern` (created when missing), over the policy's setting. */
MTLS_EXTERN int mtls_policy_set_rule_revocation(mtls_policy *policy, const char *pattern, int mode, int sources);
/* Limits of one fetch: the largest CRL or response accepted (`max_bytes`, 0: 10 MiB) and the time
 * for the whole exchange (`timeout_ms`, 0: 5000). A larger body or a slower server is an unknown
 * status, never a hang. */
MTLS_EXTERN int mtls_policy_set_revocation_limits(mtls_policy *policy, size_t max_bytes, int timeout_ms);
/* How long a CRL or OCSP response without a nextUpdate stays current after its thisUpdate, in
 * seconds (0: the default, 7 days; at most 366 days). MTLS_E_INVALID_ARGUMENT for a negative or
 * too large value. */
MTLS_EXTERN int mtls_policy_set_revocation_max_age(mtls_policy *policy, int64_t seconds);
/* A folder where fetched CRLs are kept (made 0700 when missing; files 0600, one per URL), so a
 * restarted program does not fetch them again; NULL: memory only. The string is copied. An
 * existing folder must belong to the user and not be writable by group or others, else it is not
 * used (a library warning says why) and CRLs are fetched; cache files are read only if they are
 * regular files (not through symbolic links, never waiting on a FIFO). */
MTLS_EXTERN int mtls_policy_set_revocation_cache_dir(mtls_policy *policy, const char *dir);
/* What revocation checking did, as JSON: {"mode": "hard", "sources": ["crl"], "checks": [{
 * "cert_index": 0, "subject": ..., "status": "good"|"revoked"|"unknown", "source": "crl"|
 * "crl_file"|"ocsp"|"ocsp_staple"|null, "url": ..., "fetched_at": RFC 3339|null, "fetched_from":
 * "network"|"memory"|"disk"|"staple"|null, "this_update", "next_update", "revoked_at", "reason", "error"}]}; *out is NULL (with
 * MTLS_OK) when revocation was off or the chain was refused before. Free with mtls_string_free. */
MTLS_EXTERN int mtls_trust_result_revocation(const mtls_trust_result *result, char **out);
/* Warnings of a trusted result (a soft revocation check that found no status), a new array of
 * *count strings. Free it with mtls_string_list_free. */
MTLS_EXTERN int mtls_trust_result_warnings(const mtls_trust_result *result, char ***out, size_t *count);
/* Forgets every CRL and OCSP answer cached in memory and every remembered fetch failure (a failed
 * fetch is otherwise retried after 10 s). Cache folders are left as they are, and so is what was
 * seen: a CRL older than one already seen for its URL is still never used in its place.
 * Thread-safe. */
MTLS_EXTERN void mtls_revocation_cache_clear(void);

/* ---- Revocation events (issue 28) ----
 *
 * A policy that checks revocation (see "Revocation") reports each fetch that failed through its
 * own event callback: one event per failed fetch of a CRL or an OCSP response (a server that does
 * not answer, a body over the size or time limit, something that is not a CRL, a CRL or response
 * that does not verify against the issuer), made for a handshake or an evaluation, or by the
 * background refresh of a cached CRL (which keeps the CRL in hand until its nextUpdate).
 * Evaluations that find the failure remembered (it is retried after 10 s) fire none. The event:
 * `label` is the URL, `subject`/`sha256`/`not_after` the certificate whose status was sought,
 * `error_code` the MTLS_E_* code of the failure (MTLS_E_IO, MTLS_E_TIMEOUT, MTLS_E_LIMIT,
 * MTLS_E_PARSE, MTLS_E_UNTRUSTED...), `message` names the issuer and says why. The callback runs
 * on the thread that made the fetch (a handshake's, an mtls_evaluate caller's, or the refresh
 * thread "mtls-revocation"): it must not block for long. A stale CRL (past its nextUpdate, and
 * the distribution point serves no fresher one) is reported once per CRL and nextUpdate, not at
 * each retry; its status is unknown.
 * A server's OCSP stapler (a listener's, or an SSL_CTX configured with mtls_ssl_ctx_configure*
 * to accept clients) reports through the listener's (its identity source's) event callback, or
 * for an SSL_CTX without an identity source through the policy's: the same kind, once per failed
 * fetch of the staple or answer that is not "good" (nothing is then stapled), `label` the
 * responder's URL, `subject`/`sha256` the server's own certificate, on the thread
 * "mtls-ocsp-staple"; after a failure the stapler retries in 5 s, doubling to a minute.
 * Event kinds of this block are numbered from 16. */
#define MTLS_EVENT_REVOCATION_FETCH_FAILED 16 /* a CRL or OCSP fetch failed (or a stale CRL) */
/* Sets (cb NULL: clears) the policy's event callback. `destroy(userdata)`, if not NULL, runs once
 * when the callback is replaced or cleared, or when the policy is freed by its last holder
 * (connections, listeners and SSL_CTXs keep their own references). */
MTLS_EXTERN int mtls_policy_set_event_callback(mtls_policy *policy, mtls_event_cb cb, void *userdata,
                                               void (*destroy)(void *userdata));

/* ======================================================================================
 * Connections
 * ====================================================================================== */

/* Mutual-TLS connections over OpenSSL's libssl. The peer's certificate is judged by the same
 * evaluator as the Trust section's functions, called from inside OpenSSL's verification: a
 * connection and an evaluation can never disagree.
 *
 * Three names are kept apart on a client: the address connected to (host), the SNI sent
 * (options.sni) and the name the server certificate is validated as (options.verify_as).
 *
 * Thread safety: an mtls_conn is used by one thread at a time. An mtls_listener may be accepted
 * on from several threads. Connections made with the same identity, policy and versions share
 * one OpenSSL context and its session cache, safely across threads.
 *
 * Errors say which side failed: MTLS_E_UNTRUSTED (our evaluation rejected the peer; the message
 * lists the reasons), MTLS_E_PEER_ALERT (the peer refused us: "certificate required", "unknown
 * CA"...; with TLS 1.3 a server's refusal of our certificate arrives on the first read),
 * MTLS_E_NO_MATCHING_IDENTITY (automatic selection found no identity for the CA names the server
 * asked for; the message lists them), MTLS_E_TIMEOUT, MTLS_E_CONNECT (refused, unreachable, no
 * such host), MTLS_E_HANDSHAKE (anything else, with OpenSSL's words).
 *
 * Signals: the library never raises SIGPIPE, whatever the program's SIGPIPE disposition. Every
 * socket write it makes — client and server, blocking and non-blocking, the handshake, data and
 * close_notify, on its own sockets and on one given to mtls_conn_wrap_fd — uses send(2) with
 * MSG_NOSIGNAL, so a peer that hung up is MTLS_E_PEER_ALERT (its alert, when it sent one first)
 * or MTLS_E_CLOSED, never a dead process. The library does not change signal dispositions or
 * masks; the program's own writes to a wrapped socket remain the program's business. */

typedef struct mtls_conn mtls_conn;
typedef struct mtls_listener mtls_listener;

#define MTLS_TLS_1_2 12
#define MTLS_TLS_1_3 13

/* Version 2 added `overrides` and `identity_source` (both in 0.2.0); a program built with
 * version 1 keeps working unchanged. */
#define MTLS_CONN_OPTIONS_VERSION 2
/* Client options. Always fill with mtls_conn_options_init first, then change fields: fields are
 * only ever added at the end, with a new version. Pointers are borrowed for the duration of the
 * call that takes the options (the connection keeps its own references). */
typedef struct mtls_conn_options {
    unsigned int version;           /* MTLS_CONN_OPTIONS_VERSION */
    const char *sni;                /* NULL: the host when it is a DNS name, none for an IP; "": none */
    const char *verify_as;          /* name or IP the server certificate must match; NULL: host (a
                                       rule's, the policy's or overrides->verify_as come first) */
    const char *alpn;               /* protocols to offer, comma-separated ("h2,http/1.1"); NULL: none */
    int min_tls;                    /* MTLS_TLS_1_2 (default) or MTLS_TLS_1_3 */
    int max_tls;                    /* MTLS_TLS_1_3 (default) or MTLS_TLS_1_2 */
    int connect_timeout_ms;         /* 0: 30 s; negative: no limit */
    int handshake_timeout_ms;       /* 0: 30 s; negative: no limit */
    int io_timeout_ms;              /* per read or write; 0 or negative: no limit */
    int non_blocking;               /* 1: non-blocking mode (see mtls_conn_connect) */
    int no_session_resumption;      /* 1: never resume (0: resume sessions for the same host,
                                       port, names, identity and policy version, after the
                                       server's chain is evaluated again: see mtls_conn_connect) */
    mtls_identity *identity;        /* the identity to present; NULL: none, or automatic below */
    mtls_identity *const *candidates; /* with identity NULL: choose among these (see below) */
    size_t candidate_count;
    mtls_policy *policy;            /* how the server is judged; NULL: system trust store, name check */
    /* Version 2: */
    const mtls_trust_overrides *overrides; /* on top of policy for this connection (NULL: none):
                                       anchors, anchors_only, pins always enforced, a verify_as over
                                       every other (see "One effective policy"); sessions resume
                                       only under the same overrides */
    struct mtls_identity_source *identity_source; /* an identity that can change (see "Identities
                                       that change"); when set, each connection presents the one
                                       in force when it starts, instead of identity/candidates, and
                                       a session made with another identity is not resumed */
} mtls_conn_options;

/* Fill *opts with the defaults of `version` (MTLS_CONN_OPTIONS_VERSION), the library's own:
 * TLS 1.2 to 1.3, connect and handshake timeouts 30000 ms, io_timeout_ms -1 (no limit), session
 * resumption on, NULL pointers. */
MTLS_EXTERN int mtls_conn_options_init(mtls_conn_options *opts, unsigned int version);
/* Connect to host (DNS name, IPv4 or IPv6 literal, "[v6]" in brackets or not) and port, and complete
 * the handshake (unless opts->non_blocking). opts may be NULL for the defaults. Free *out with
 * mtls_conn_free. A host carrying a port of its own ("server.test:443", "[::1]:443") is
 * MTLS_E_INVALID_ARGUMENT before any lookup (mtls_host_only reads a host the same way; the same
 * for mtls_conn_open and mtls_conn_wrap_fd's host). The TLS side is set up before the TCP
 * connect: options it refuses (an ALPN list, a server name, an identity source that fails) are
 * their error with no connection made to the server.
 *
 * Non-blocking mode (opts->non_blocking = 1): the call returns at once, with the TCP connect
 * under way; mtls_conn_handshake, mtls_conn_read and mtls_conn_write return MTLS_E_WANT_READ /
 * MTLS_E_WANT_WRITE: poll mtls_conn_fd and call again. A failed TCP connect is MTLS_E_CONNECT
 * from mtls_conn_handshake. A DNS name is still resolved first with a BLOCKING getaddrinfo: to
 * never block, pass an IP literal with sni and verify_as set to the name, or connect the socket
 * yourself and use mtls_conn_wrap_fd.
 *
 * Automatic identity (opts->identity NULL, opts->candidates non-empty): the candidate presented
 * is chosen by the server's CertificateRequest: CA names, validity, clientAuth, key type, and in
 * TLS 1.3 an EC key's curve against the server's ECDSA schemes. Token identities
 * (mtls_token_identity) may be candidates too.
 *
 * A TLS 1.3 server may ask for the client certificate after the handshake (post-handshake
 * authentication, as Apache httpd does for a per-location SSLVerifyClient): the request is
 * answered inside mtls_conn_read with the same identity, chosen the same way. TLS 1.2
 * renegotiation is refused (no_renegotiation alert); when the server then drops the connection,
 * the error message says it asked to renegotiate. */
MTLS_EXTERN int mtls_conn_connect(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out);
/* Connect the socket only; mtls_conn_handshake runs the handshake. Use this to read the
 * evaluation and the peer chain of a handshake that failed. Free *out with mtls_conn_free. */
MTLS_EXTERN int mtls_conn_open(const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out);
/* Session resumption (unless no_session_resumption): a session is offered again only under the
 * policy object and version, host, port, SNI, verify_as and identity it was made with, and only
 * after the chain the server presented for it is evaluated again at the policy's time (its fixed
 * time, else now): a server certificate that expired since, or a host rule whose pins expired
 * and that fails closed, gives a full handshake, judged by the policy in force, instead. */
/* Run TLS over a connected socket the caller owns (the caller closes it after mtls_conn_free;
 * it is switched to non-blocking mode). host and port name the server for SNI, validation, host
 * rules and the session cache: give the real port, because with port 0 only host rules without a
 * port apply (a rule for "host:8443" and its pins are then never used). Handshakes unless
 * opts->non_blocking. Free *out with mtls_conn_free. */
MTLS_EXTERN int mtls_conn_wrap_fd(int fd, const char *host, uint16_t port, const mtls_conn_options *opts, mtls_conn **out);
/* Run or continue the handshake (MTLS_OK once complete; later calls do nothing). */
MTLS_EXTERN int mtls_conn_handshake(mtls_conn *conn);
/* Read up to len bytes into buf; *n is the count, 0 when the peer closed the connection with
 * close_notify. MTLS_E_TRUNCATED when it closed without one: what was read before may be cut
 * short (a reply delimited by the end of the connection, as an HTTP/1.0 body without
 * Content-Length, is then incomplete, or was cut by someone on the path). */
MTLS_EXTERN int mtls_conn_read(mtls_conn *conn, uint8_t *buf, size_t len, size_t *n);
/* Write len bytes; blocking connections write them all, non-blocking ones may write part (*n). */
MTLS_EXTERN int mtls_conn_write(mtls_conn *conn, const uint8_t *buf, size_t len, size_t *n);
/* Send close_notify. The socket stays open until mtls_conn_free. */
MTLS_EXTERN int mtls_conn_shutdown(mtls_conn *conn);
/* Close (close_notify, then the socket if the connection owns it) and free. NULL is a no-op. */
MTLS_EXTERN void mtls_conn_free(mtls_conn *conn);
/* The socket, for poll()/epoll in non-blocking mode. Owned by the connection. */
MTLS_EXTERN int mtls_conn_fd(const mtls_conn *conn, int *fd);
/* Switch a connection to non-blocking mode (non_blocking 1) or back to blocking mode (0); any
 * other value is MTLS_E_INVALID_ARGUMENT. Made for connections from
 * mtls_listener_accept, which are blocking (their handshake is done; reads and writes wait within
 * the listener's io_timeout_ms), so that an event loop (epoll, asyncio, libuv) can serve them:
 * once non-blocking, mtls_conn_read, mtls_conn_write, mtls_conn_handshake and mtls_conn_shutdown
 * return MTLS_E_WANT_READ / MTLS_E_WANT_WRITE instead of waiting, exactly as for a client
 * connection opened with opts->non_blocking (poll mtls_conn_fd and call again; io_timeout_ms no
 * longer applies; a write that returned MTLS_E_WANT_WRITE must be retried with the same bytes,
 * at least as many). It works on client connections too, in both directions. The socket is
 * O_NONBLOCK in both modes (blocking mode waits with poll), so the call changes nothing else:
 * data the connection holds is kept. In either mode a client's mtls_conn_read answers a TLS 1.3
 * server's post-handshake CertificateRequest (see mtls_conn_connect), and may then sign with a
 * token key inside the read.
 * Not thread-safe against other calls on the same connection (one thread at a time). */
MTLS_EXTERN int mtls_conn_set_non_blocking(mtls_conn *conn, int non_blocking);
/* Whether a handshake step (mtls_conn_handshake) or mtls_conn_free of this connection may wait
 * for something other than its socket: *may_block 1 when the connection is blocking, is a
 * listener's, presents (or may choose) an identity whose key is on a token (a signature, the
 * token's lock, a PIN callback) or is loaded only when chosen (a store or token read), or is
 * judged by a policy that checks revocation anywhere (policy-wide or in a rule: a CRL or OCSP
 * fetch, within the fetch time limit). *may_block 0 for a non-blocking client connection with no
 * identity, or keys in memory only, under a policy without revocation: each step is then CPU
 * work (the chain evaluation included) over a socket that does not wait, and the free sends
 * close_notify only if the socket takes it at once. An event loop may then run the steps and the
 * free on its own thread, as Python's ssl module does (the Python bindings' asyncio does). The
 * answer can change when the policy does (mtls_policy_replace, a followed file): ask before each
 * step. Reads are not covered: see mtls_conn_connect on post-handshake requests. */
MTLS_EXTERN int mtls_conn_may_block(const mtls_conn *conn, int *may_block);
/* The chain the peer presented, leaf first (also after a failed handshake, when our evaluation
 * rejected it). Free with mtls_cert_list_free(*out, *count). */
MTLS_EXTERN int mtls_conn_peer_chain(const mtls_conn *conn, mtls_cert ***out, size_t *count);
/* Our evaluation of the peer's chain (for a resumed session: the chain presented when the
 * session was established, evaluated again when it was resumed; also after a failed handshake
 * when our evaluation rejected the peer); *out is NULL when the peer sent no certificate. Free
 * *out with mtls_trust_result_free. */
MTLS_EXTERN int mtls_conn_evaluation(const mtls_conn *conn, mtls_trust_result **out);
/* The ALPN protocol agreed on; *out is NULL when none. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_conn_alpn(const mtls_conn *conn, char **out);
/* "TLSv1.2" or "TLSv1.3" (MTLS_E_INVALID_ARGUMENT before the handshake). Free with mtls_string_free. */
MTLS_EXTERN int mtls_conn_tls_version(const mtls_conn *conn, char **out);
/* *resumed = 1 when the handshake resumed an earlier session. */
MTLS_EXTERN int mtls_conn_resumed(const mtls_conn *conn, int *resumed);
/* *changed = 1 when the policy judging the peer has changed since the connection was made
 * (mtls_policy_replace, a followed policy file's reload, any mtls_policy_set_*): the peer was
 * judged under the old settings. A pool of kept-alive connections drops an idle one for which
 * this is 1 (the Python adapters do: requests, httpx, mtls.httpx.AsyncTransport, urllib). */
MTLS_EXTERN int mtls_conn_policy_changed(const mtls_conn *conn, int *changed);
/* The identity we presented (the chosen one, with automatic selection); *out is NULL when none.
 * Free *out with mtls_identity_free. */
MTLS_EXTERN int mtls_conn_presented_identity(const mtls_conn *conn, mtls_identity **out);

/* Forget every cached TLS session and the OpenSSL contexts behind them. libmtls keeps the
 * contexts of the 16 most recently used (identity or candidates, policy, versions) combinations,
 * each with its session cache, so repeated connections resume; a 17th combination evicts the
 * least recently used one. They hold references to their identities (and keys) until cleared or
 * evicted. Open connections are not affected.
 * Thread-safe. */
MTLS_EXTERN void mtls_conn_cache_clear(void);

/* ======================================================================================
 * Tunnels: forwarding, the PROXY protocol v2 header, the plaintext rule
 * What `mtls tunnel` is made of, for a program that puts mutual TLS in front of another.
 * ====================================================================================== */

/* Move bytes both ways between conn (its handshake finished or finishing) and the connected
 * plaintext socket fd (TCP or UNIX) until both directions have ended, on the calling thread: one
 * poll over both sockets, non-blocking I/O, one 16 KiB buffer. Half-close is passed through:
 * the peer's close_notify becomes shutdown(fd, SHUT_WR) once everything before it was written,
 * and the end of fd's data becomes close_notify; the other direction goes on until it ends too.
 * idle_timeout_ms: nothing moved either way for that long ends the loop (MTLS_E_TIMEOUT); -1:
 * none. MTLS_OK when both directions ended; MTLS_E_TRUNCATED when they ended but the TLS peer
 * hung up without close_notify (passed on as the end of its data); otherwise the error that
 * stopped it. *bytes_from_tls (TLS peer to fd) and *bytes_to_tls (fd to the TLS peer) are set in
 * every case; either may be NULL. Neither socket is closed: mtls_conn_free and close(fd). */
MTLS_EXTERN int mtls_conn_forward(mtls_conn *conn, int fd, int idle_timeout_ms, uint64_t *bytes_from_tls,
                                  uint64_t *bytes_to_tls);
/* A forwarder: what mtls_conn_forward does, for many connections on a few threads (each one
 * epoll loop over its share of the pairs), with no thread per connection. An idle pair holds no
 * buffer: each thread reads into one 16 KiB buffer, and a pair keeps only the bytes a short
 * write left behind. Half-close, truncation and the idle timeout are as mtls_conn_forward's. */
typedef struct mtls_forwarder mtls_forwarder;
/* Called once per pair, when it ended, on a forwarder thread (mtls_last_error() there says why):
 * status is what mtls_conn_forward would return (MTLS_OK, MTLS_E_TIMEOUT for the idle timeout,
 * MTLS_E_TRUNCATED, or the error that stopped it; MTLS_E_CLOSED when mtls_forwarder_free cut it);
 * both sockets are already closed. Keep it short: the thread forwards other pairs meanwhile. */
typedef void (*mtls_forward_done_cb)(void *user, int status, uint64_t bytes_from_tls, uint64_t bytes_to_tls);
/* Start a forwarder with threads threads (1 to 64; 0: the default, 1), named "mtls-forward".
 * Free it with mtls_forwarder_free. */
MTLS_EXTERN int mtls_forwarder_new(int threads, mtls_forwarder **out);
/* Hand conn (its handshake finished or finishing: a handshake still to do runs here, blocking; a
 * non-blocking connection's, opts->non_blocking, is finished on the forwarder's thread without
 * blocking it, within idle_timeout_ms) and the connected plaintext socket fd to the forwarder. On MTLS_OK the forwarder owns both:
 * conn is no longer the caller's handle (do not use or mtls_conn_free it) and fd is closed by the
 * forwarder when the pair ends, before done(user, ...) is called (done may be NULL). A conn made by
 * mtls_conn_wrap_fd leaves its own socket to the caller: close it in done. idle_timeout_ms: -1
 * none. On an error (a bad argument) nothing was taken. After mtls_forwarder_free has begun, the
 * pair ends at once with MTLS_E_CLOSED, done called on the calling thread. */
MTLS_EXTERN int mtls_forwarder_add(mtls_forwarder *fw, mtls_conn *conn, int fd, int idle_timeout_ms,
                                   mtls_forward_done_cb done, void *user);
/* *active = the pairs added and not yet ended (their done not yet called). */
MTLS_EXTERN int mtls_forwarder_active(const mtls_forwarder *fw, int *active);
/* End every running pair (MTLS_E_CLOSED to its done, both sockets closed), wait for the threads and
 * free the forwarder. NULL is a no-op. Do not call it from a done callback: there it cannot wait
 * for its own thread, so it only asks the threads to stop and returns; the pairs then end on the
 * forwarder's threads after it returned. */
MTLS_EXTERN void mtls_forwarder_free(mtls_forwarder *fw);
/* The PROXY protocol v2 header (haproxy's proxy-protocol.txt) that tells a plaintext target who
 * is on the other end of the accepted connection conn: command PROXY, the client's address and
 * port as source and ours as destination (TCP4 or TCP6; UNSPEC when their families differ), and
 * the PP2_TYPE_SSL TLV (client flags PP2_CLIENT_SSL, _CERT_CONN, _CERT_SESS; verify 0) with the
 * sub-TLVs SSL_VERSION, SSL_CN, SSL_CIPHER, SSL_SIG_ALG and SSL_KEY_ALG ("RSA2048", "EC256");
 * include_certificate 1 adds the client certificate's DER in TLV type 0xE0 (libmtls's own, in the
 * range the specification leaves to applications). Write it to the target before the first byte.
 * Free *out with mtls_bytes_free. */
MTLS_EXTERN int mtls_conn_proxy_header(const mtls_conn *conn, int include_certificate, uint8_t **out, size_t *out_len);
/* The plaintext rule: *is_local = 1 when plaintext to or from address stays on this machine (a
 * loopback IP, "localhost", a UNIX socket "unix:PATH" or "/PATH"), else 0 (`mtls tunnel` then
 * wants --unsafe-target / --unsafe-listen). address is HOST:PORT, [IPv6]:PORT, unix:PATH or an
 * absolute path; anything else is MTLS_E_INVALID_ARGUMENT. */
MTLS_EXTERN int mtls_address_is_local(const char *address, int *is_local);

/* ======================================================================================
 * Listeners
 * ====================================================================================== */

#define MTLS_CLIENT_AUTH_NONE 0      /* do not ask clients for a certificate */
#define MTLS_CLIENT_AUTH_OPTIONAL 1  /* ask; accept clients without one (not untrusted ones) */
#define MTLS_CLIENT_AUTH_REQUIRE 2   /* ask, and refuse clients without one (default) */

/* Which CA names a listener's certificate request carries (client_ca_names). Clients pick the
 * identity they present from them; they decide nothing about trust (client_policy does). */
#define MTLS_CA_NAMES_ANCHORS 0  /* the subjects of the client anchors: client_policy's (and its
                                    host rules') and client_overrides' (default) */
#define MTLS_CA_NAMES_NONE 1     /* none: each client presents the identity it has. For clients
                                    that match the names against the wrong certificates (an
                                    Erlang/OTP 25 TLS 1.3 client whose certificate is issued by a
                                    named intermediate sends none) */
#define MTLS_CA_NAMES_LIST 2     /* the subjects of client_ca_certs, in order */

#define MTLS_LISTENER_OPTIONS_VERSION 3
/* Server options; fill with mtls_listener_options_init first. Pointers are borrowed for the
 * duration of mtls_listener_new (the listener keeps its own references). Version 2 added the
 * fields from client_overrides on (all in 0.2.0), version 3 those from client_hello_timeout_ms
 * on (0.3.0); a program built against an earlier version keeps working (its listener gets the
 * later fields' defaults). */
typedef struct mtls_listener_options {
    unsigned int version;           /* MTLS_LISTENER_OPTIONS_VERSION */
    int client_auth;                /* MTLS_CLIENT_AUTH_* */
    mtls_identity *identity;        /* the server's identity (required) */
    mtls_policy *client_policy;     /* how clients are judged; see mtls_listener_new */
    const char *alpn;               /* protocols accepted, comma-separated, preferred first */
    int min_tls, max_tls;           /* as in mtls_conn_options */
    int handshake_timeout_ms;       /* per accepted client; 0: 30 s; negative: no limit */
    int io_timeout_ms;              /* per read or write on accepted connections; 0: no limit */
    int no_session_tickets;         /* nonzero: issue no session tickets (see mtls_listener_accept) */
    /* Version 2: */
    const mtls_trust_overrides *client_overrides; /* on top of client_policy for every client (NULL:
                                       none); its anchors count as client anchors and CA names */
    int first_byte_timeout_ms;      /* time an accepted client has to send its first byte (its
                                       ClientHello); until then it takes no handshake slot and no
                                       thread, and after it the socket is closed silently (nothing
                                       is reported to mtls_listener_accept). 0: 5 s; negative: no
                                       limit; never more than handshake_timeout_ms */
    int max_handshakes_per_address; /* the most clients of one source (an IPv4 address; an IPv6
                                       prefix, see ipv6_source_prefix_length) in a handshake at
                                       once; more wait for a slot of their source. 0: 32;
                                       negative: no limit */
    int client_ca_names;            /* MTLS_CA_NAMES_*: the CA names of the certificate request
                                       (default MTLS_CA_NAMES_ANCHORS) */
    mtls_cert *const *client_ca_certs; /* with MTLS_CA_NAMES_LIST: the certificates whose subjects
                                       are sent (none when client_ca_cert_count is 0); not read
                                       otherwise. The listener keeps its own references */
    size_t client_ca_cert_count;
    /* Version 3: */
    int client_hello_timeout_ms;    /* time an accepted client has, from its connection, to send
                                       its whole ClientHello; until then it takes no handshake
                                       slot and no thread (a client that sends a byte, or a part
                                       of a ClientHello, and stalls holds no slot or thread;
                                       the listener keeps the bytes it sent), and after it
                                       the socket is closed and mtls_listener_accept reports the
                                       client as MTLS_E_TIMEOUT. 0: 10 s; negative: no limit;
                                       never more than handshake_timeout_ms */
    int ipv6_source_prefix_length;  /* the leading bits of an IPv6 client address that make one
                                       source for max_handshakes_per_address (an IPv6 host may use
                                       any address of its network). 0: 64; 128 or negative: each
                                       address alone; above 128: MTLS_E_INVALID_ARGUMENT at
                                       mtls_listener_new. IPv4 clients count by address (an
                                       IPv4-mapped address as its IPv4 address) */
} mtls_listener_options;

/* Fill *opts with the defaults of `version` (MTLS_LISTENER_OPTIONS_VERSION), the library's own:
 * MTLS_CLIENT_AUTH_REQUIRE, TLS 1.2 to 1.3, handshake_timeout_ms 30000, io_timeout_ms -1 (no
 * limit), session tickets on, first_byte_timeout_ms 5000, max_handshakes_per_address 32,
 * MTLS_CA_NAMES_ANCHORS, client_hello_timeout_ms 10000, ipv6_source_prefix_length 64, NULL
 * pointers.
 *
 * How a listener judges a client (client_policy): the policy's anchors (or, for a client whose
 * address matches one of its host rules, that rule's anchors and pins) decide, and they are also
 * the CA names sent to clients. The rule is chosen by the address the client connected from:
 * "10.0.0.7" or "::1" (an IPv4-mapped address counts as its IPv4 address); the client's source
 * port selects nothing, so rules written with a port never match a client. A client is not
 * name-checked against its address; a rule's verify_as, when set, is a name (DNS or IP SAN) the
 * client's certificate must carry. With client_auth other than MTLS_CLIENT_AUTH_NONE, NULL or a
 * policy without anchors makes mtls_listener_new fail with MTLS_E_INVALID_POLICY unless
 * mtls_policy_set_system_anchors_for_clients allows the system store (a client-verifying
 * listener never trusts it by accident). */
MTLS_EXTERN int mtls_listener_options_init(mtls_listener_options *opts, unsigned int version);
/* Listen on address ("127.0.0.1", "::1"; NULL: every IPv4 address) and port (0: an ephemeral
 * port, see mtls_listener_port). Free *out with mtls_listener_free. When the identity's
 * certificate names an OCSP responder (authorityInfoAccess) and its issuer is in the identity's
 * chain, the listener staples OCSP: a background thread fetches and checks a response, refreshes
 * it before its nextUpdate, and every handshake whose client asks for the status gets the
 * current good one (none while none is good); nothing is fetched on the handshake path. Client
 * certificates are checked for revocation as the client policy says (see "Revocation"). */
MTLS_EXTERN int mtls_listener_new(const char *address, uint16_t port, const mtls_listener_options *opts,
                                  mtls_listener **out);
/* The port listened on. */
MTLS_EXTERN int mtls_listener_port(const mtls_listener *listener, uint16_t *port);
/* Wait up to timeout_ms (negative: forever) for a client and run its handshake. Clients that
 * have not sent their whole ClientHello yet are not waited for here: they take no handshake slot
 * until it has arrived; one that sent nothing is closed silently after first_byte_timeout_ms,
 * one that sent a part of its ClientHello is closed after client_hello_timeout_ms and reported
 * here as MTLS_E_TIMEOUT (MTLS_E_HANDSHAKE when it leaves before it is whole), as a handshake
 * that failed is. When all 256 handshake slots (or all of its
 * source's) are taken and a client whose ClientHello came waits, the handshake that has made no
 * progress (no handshake message read or written) for longest, at least 1 s, is cut short for it
 * and reported here as MTLS_E_TIMEOUT. The listener
 * issues session tickets (unless no_session_tickets): a returning client resumes without the
 * certificate work. A ticket resumes only while the client policy is the object and version
 * that judged the client (any change to the policy invalidates every ticket), from the same
 * client address, with the same server identity, and when the chain the client presented is
 * still trusted at the policy's time (every certificate within its validity, a fail_closed
 * rule's pins not expired: the chain is evaluated again, and mtls_conn_evaluation reports that
 * evaluation); otherwise the client gets a full handshake and a fresh evaluation. A rejected client
 * gives an error saying why (MTLS_E_UNTRUSTED with our evaluation's reasons, or no certificate
 * when one is required; MTLS_E_PEER_ALERT). An accepted connection's socket (mtls_conn_fd) is
 * non-blocking and close-on-exec from its accept, and an idle one holds no OpenSSL read or write
 * buffer (SSL_MODE_RELEASE_BUFFERS: they are taken again for its next record). Free *out with
 * mtls_conn_free.
 *
 * Threads: the calling thread runs handshakes itself (no hand-off per handshake). When no other
 * call holds the turn it accepts, reads ClientHellos and runs the next handshake, non-blocking;
 * one that waits for its client is parked and taken up again by whichever thread holds the turn
 * when the client's bytes come. When no accept call holds the turn and handshakes or sockets are
 * waiting, or none has held it for 250 ms (the application is busy elsewhere: clients are still
 * accepted and handshaken, as from the first mtls_listener_accept on), the listener's one thread
 * "mtls-handshakes" (started as the first call returns, ended by mtls_listener_free) holds it
 * and keeps what it finishes for the next calls. So callbacks that
 * run on "a handshake's thread" (a policy's report and event callbacks, an identity source's
 * events, a token's PIN callback at a signature) run, for a listener's client, on a thread inside
 * mtls_listener_accept or on "mtls-handshakes", never with a listener lock held, possibly on
 * several threads at once; they must not free the listener. A rejected client's alert is drained
 * (at most 0.5 s) on the thread that ran its handshake. */
MTLS_EXTERN int mtls_listener_accept(mtls_listener *listener, int timeout_ms, mtls_conn **out);
/* Stop listening and free. Accepted connections live on; clients handshaken and not accepted are
 * closed, and handshakes under way are cut short. The listener's thread ("mtls-handshakes", see
 * mtls_listener_accept) has ended when this returns, so the program may exit right after it. Do
 * not call it while another thread is inside mtls_listener_accept on the same listener, nor from
 * a callback running a handshake of this listener. NULL is a no-op. */
MTLS_EXTERN void mtls_listener_free(mtls_listener *listener);

/* A listener presenting `source`'s identity (opts->identity is ignored and may be NULL); the
 * listener keeps its own reference to the source. Otherwise as mtls_listener_new. */
MTLS_EXTERN int mtls_listener_new_with_source(const char *address, uint16_t port, const mtls_listener_options *opts,
                                              mtls_identity_source *source, mtls_listener **out);
/* Presents `identity` from the listener's next handshake on; handshakes under way and accepted
 * connections keep theirs. Fires MTLS_EVENT_IDENTITY_ROTATED (on this thread). Refuses an
 * expired or not yet valid identity as mtls_identity_source_set does. */
MTLS_EXTERN int mtls_listener_set_identity(mtls_listener *listener, const mtls_identity *identity);
/* The listener's event callback (its identity source's): as mtls_identity_source_set_event_callback. */
MTLS_EXTERN int mtls_listener_set_event_callback(mtls_listener *listener, mtls_event_cb cb, void *userdata,
                                                 void (*destroy)(void *userdata));

#define MTLS_LISTENER_COUNTERS_VERSION 1
/* A listener's counters; set `version` to MTLS_LISTENER_COUNTERS_VERSION before the call. */
typedef struct mtls_listener_counters {
    unsigned int version;
    uint64_t accepted;          /* handshakes that succeeded (resumed ones included) */
    uint64_t resumed;           /* handshakes that resumed a session */
    uint64_t refused;           /* handshakes refused, every reason */
    int64_t current_connections; /* accepted connections not yet freed with mtls_conn_free */
} mtls_listener_counters;
MTLS_EXTERN int mtls_listener_get_counters(const mtls_listener *listener, mtls_listener_counters *out);
/* Handshakes refused with the error `code` (MTLS_E_UNTRUSTED, MTLS_E_HANDSHAKE, MTLS_E_TIMEOUT...). */
MTLS_EXTERN int mtls_listener_refused_count(const mtls_listener *listener, int code, uint64_t *count);
/* The listener's counters as Prometheus text. Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_listener_metrics(const mtls_listener *listener, char **out);

/* ======================================================================================
 * SSL_CTX integration. An application's own OpenSSL contexts.
 * ====================================================================================== */

/* Bring your own SSL_CTX: configure an OpenSSL SSL_CTX * the application owns (passed as void *,
 * e.g. from libcurl's CURLOPT_SSL_CTX_FUNCTION) to present `identity` (NULL: none) and to judge
 * peers with `policy` (NULL: system trust store) through libmtls's evaluator. accepts_clients 0:
 * the context connects to servers, validated as the name set on each SSL with SSL_set1_host (or
 * X509_VERIFY_PARAM_set1_ip_asc), else the SNI (SSL_set_tlsext_host_name; libcurl sends the URL's
 * host as SNI, except an IP address).
 * Fail closed: an SSL with neither is refused in the handshake (libmtls's reason "no_peer_name";
 * SSL_get_verify_result gives X509_V_ERR_HOSTNAME_MISMATCH) unless the policy's name check is off
 * (mtls_policy_set_name_check(policy, 0)). Without mtls_ssl_set_peer / mtls_ssl_ctx_set_peer
 * the host is that name and the port the one of the socket the SSL reads (SSL_set_fd; getpeername):
 * an SSL on a BIO of the application's own (libcurl's) has no port, so host rules written with a
 * port never apply to it, and rules for the address never apply when the name set is a DNS name:
 * tell libmtls the peer.
 * 1: it accepts clients, each judged by the host rule for the address its socket is connected
 * from, as a listener's (certificates requested, no name check; the context's own
 * SSL_VERIFY_FAIL_IF_NO_PEER_CERT, SSL_VERIFY_CLIENT_ONCE and SSL_VERIFY_POST_HANDSHAKE are kept;
 * a policy without anchors is MTLS_E_INVALID_POLICY unless
 * mtls_policy_set_system_anchors_for_clients). A token identity (mtls_identity_from_pkcs11)
 * works here too, in a context of OpenSSL's default library context: OpenSSL takes the key's
 * signature operations from the key's own provider, which stays in libmtls's library context
 * (nothing is loaded into the application's); the application's context is told to sign only
 * with the schemes the token has mechanisms for. The context keeps its own references to
 * identity and policy until it is freed; calling again replaces them.
 *
 * Resumption is judged too: a session of the context resumes only under the same policy object
 * and version, the same peer (client side: host, port, verify_as; server side: the client's
 * address) and identity, and while the chain it was made with is still trusted at the policy's
 * time; otherwise a full handshake, evaluated under the policy in force, follows. To do so,
 * libmtls watches each SSL made from the context from the start of its handshake (an SSL-level
 * info callback that then calls the context's own SSL_CTX_set_info_callback; an application
 * that sets its own SSL-level info callback on an SSL turns this off for that SSL):
 *  - accepts_clients 1: it sets the SSL's session id context to a digest of that binding, so
 *    OpenSSL refuses sessions (session-id cache and tickets, TLS 1.2 and 1.3) made under another
 *    one (a session id context the application sets, as nginx and Apache do, is replaced on each
 *    SSL and no longer decides); it installs SSL_CTX_set_session_ticket_cb callbacks
 *    (replacing the application's own) that check tickets and evaluate the client's chain again;
 *    a session in the session-id cache gets a timeout that ends when its chain or a fail_closed
 *    rule's pins expire, or at the earliest nextUpdate of the CRLs and OCSP responses its client
 *    was judged with (see "Revocation"). Sessions do not survive a restart of the process.
 *    When `identity` names an OCSP responder (its issuer in its chain), the context staples OCSP
 *    for it as a listener does (a status callback of libmtls's, fetched in the background).
 *  - accepts_clients 0: a session the application sets (SSL_set_session; libcurl's session
 *    cache) carries what libmtls attached to it when its full handshake was evaluated; one that
 *    does not match, whose server chain is no longer trusted, or that carries nothing (made before
 *    the context was configured, or read back with d2i_SSL_SESSION) is taken off the SSL before
 *    the ClientHello, and a full handshake follows. */
MTLS_EXTERN int mtls_ssl_ctx_configure(void *ssl_ctx, const mtls_identity *identity, const mtls_policy *policy,
                                       int accepts_clients);
/* Same as mtls_ssl_ctx_configure with `overrides` (NULL: none) on top of `policy` for every peer
 * of the context (see "One effective policy"): with accepts_clients 1, override anchors count as
 * client anchors. The context keeps its own copy of the overrides until it is freed; calling
 * either function again replaces them. MTLS_E_INVALID_ARGUMENT for a malformed pin or verify_as. */
MTLS_EXTERN int mtls_ssl_ctx_configure_overrides(void *ssl_ctx, const mtls_identity *identity, const mtls_policy *policy,
                                                 int accepts_clients, const mtls_trust_overrides *overrides);
/* Tells libmtls the peer one SSL (an SSL * made from a configured context, passed as void *)
 * connects to, before its handshake: `host` as the application named it (DNS name or IP literal,
 * not empty), `port` (0: unknown, only port-less host rules apply) and `verify_as` (NULL: validate
 * as `host`). The host and port select the host rule; verify_as changes only the name checked.
 * On a context that accepts clients, `host` is the client's address (it selects the client's
 * host rule, as for a listener), `port` should be 0, and a client is name-checked only against
 * `verify_as` or its rule's verify_as, never against its address.
 * The SSL keeps a copy until it is freed; calling again replaces it. */
MTLS_EXTERN int mtls_ssl_set_peer(void *ssl, const char *host, uint16_t port, const char *verify_as);
/* Same for every SSL made from `ssl_ctx` that was not given a peer with mtls_ssl_set_peer. Meant
 * for libcurl, whose CURLOPT_SSL_CTX_FUNCTION sees only the SSL_CTX (libcurl makes one per
 * connection): call it there with the easy handle's host and port (pass them through
 * CURLOPT_SSL_CTX_DATA). The context keeps a copy until it is freed; calling again replaces it. */
MTLS_EXTERN int mtls_ssl_ctx_set_peer(void *ssl_ctx, const char *host, uint16_t port, const char *verify_as);

/* Configures an application's SSL_CTX as mtls_ssl_ctx_configure_overrides does, presenting
 * `source`'s identity: each SSL takes the identity in force when its handshake starts. The
 * context keeps its own reference to the source. With accepts_clients, the OCSP staple follows
 * the identity in force, as a listener's does (fetched in the background for a new certificate
 * once a handshake presents it; no staple until then). */
MTLS_EXTERN int mtls_ssl_ctx_configure_source(void *ssl_ctx, mtls_identity_source *source, const mtls_policy *policy,
                                              int accepts_clients, const mtls_trust_overrides *overrides);

/* ======================================================================================
 * Issuing: a private PKI
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

/* Key types for a new key (mtls_issue_options.key_type, mtls_token_keygen), one spelling each.
 * "p256", "p384", "rsa2048", "rsa3072" and "rsa4096" (the names mtls_cert_key_type reports) are
 * accepted as aliases of the EC and RSA types; names are case-insensitive. */
#define MTLS_KEY_TYPE_EC_P256 "ec-p256"     /* the default */
#define MTLS_KEY_TYPE_EC_P384 "ec-p384"
#define MTLS_KEY_TYPE_RSA_2048 "rsa-2048"
#define MTLS_KEY_TYPE_RSA_3072 "rsa-3072"
#define MTLS_KEY_TYPE_RSA_4096 "rsa-4096"   /* issuing only; tokens make up to 3072 */
#define MTLS_KEY_TYPE_ED25519 "ed25519"

/* Options for a new certificate. Versioned: fill with mtls_issue_options_init, then set
 * fields. The strings and arrays are read during the call only. Version 2 added crl_url and
 * ocsp_url; a program built with version 1 keeps working unchanged. */
#define MTLS_ISSUE_OPTIONS_VERSION 2
typedef struct mtls_issue_options {
    unsigned int version;              /* MTLS_ISSUE_OPTIONS_VERSION */
    const char *key_type;              /* an MTLS_KEY_TYPE_* name (NULL: MTLS_KEY_TYPE_EC_P256) */
    int validity_days;                 /* 0: the profile's default */
    int64_t now;                       /* issuing time, Unix seconds; 0: the current time */
    const char *const *dns_names;      /* subjectAltName DNS names (servers; `*.` allowed) */
    size_t dns_count;
    const char *const *ip_addresses;   /* subjectAltName IPv4/IPv6 literals (servers) */
    size_t ip_count;
    /* Version 2: where the ISSUER publishes revocation information; the new certificate carries
     * it (mtls_pki_issue, mtls_pki_sign_csr; ignored by mtls_pki_root, a root has no issuer).
     * Plain http://host[:port]/path URLs (printable ASCII, no commas), else
     * MTLS_E_INVALID_ARGUMENT. Serve the issuer's CRL (mtls_pki_crl, DER) at crl_url. */
    const char *crl_url;               /* CRL distribution point (NULL: none) */
    const char *ocsp_url;              /* authorityInfoAccess OCSP responder (NULL: none) */
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
/* Sign a certificate signing request (PEM or DER, csr_len bytes) as an MTLS_PROFILE_SERVER or
 * _CLIENT certificate from the CA `issuer`: the same profiles as mtls_pki_issue, the key stays
 * with its owner (e.g. on a token). The CSR's self-signature must verify (MTLS_E_CORRUPT
 * otherwise; MTLS_E_PARSE for data that is not a CSR). `name` is the CN (NULL: the CSR's CN,
 * else the first DNS name, else the first IP address of opts, as `mtls pki sign` does);
 * opts gives validity, DNS and IP names (its key_type is ignored). Free *out with mtls_cert_free. */
MTLS_EXTERN int mtls_pki_sign_csr(const mtls_issued *issuer, int profile, const uint8_t *csr, size_t csr_len,
                                  const char *name, const mtls_issue_options *opts, mtls_cert **out);
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
/* A PKCS#12 file with the key, the certificate and the whole chain, friendly name = the CN,
 * with `flags` MTLS_PKCS12_MODERN or MTLS_PKCS12_LEGACY (as mtls_pkcs12_export).
 * `password` is required (may be ""). Free *out with mtls_bytes_free. */
MTLS_EXTERN int mtls_issued_export_p12(const mtls_issued *issued, const char *password, int flags,
                                       uint8_t **out, size_t *out_len);
/* The issued certificate, its key and chain as an identity handle, for connections, the store
 * and mtls_pkcs12_export. A new reference: free *out with mtls_identity_free. */
MTLS_EXTERN int mtls_issued_identity(const mtls_issued *issued, mtls_identity **out);
/* A v2 CRL signed by the CA `ca` listing `count` serial numbers (hex, as mtls_cert_serial_hex
 * gives them), with CRL number `number`, thisUpdate `now` (0: the current time) and nextUpdate
 * validity_days later (0: 30). DER in *der; free it with mtls_bytes_free. */
MTLS_EXTERN int mtls_pki_crl(const mtls_issued *ca, const char *const *revoked_serials, size_t count,
                             uint64_t number, int validity_days, int64_t now, uint8_t **der, size_t *der_len);

/* ======================================================================================
 * Enrollment with a certificate authority. ACME, EST, a local PKI.
 * ====================================================================================== */

/* ---- Enrollment with a certificate authority (issue 27) ----
 * What `mtls enroll acme|est|pki` does, from C: a new key (or a key on a token), a CSR signed by
 * it, the certificate from the CA, and the identity installed in `store` under `label` (replacing
 * one there) with the enrollment record mtls_renew uses, in one store transaction. The identity
 * is installed only once proven: its key matches the certificate and its chain validates to the
 * chain anchors (and under opts->policy when given); otherwise nothing is written.
 * Each call blocks for the whole exchange with the CA (seconds). Safe to call from any thread;
 * calls for one label should not overlap. *out (`out` may be NULL) is the new leaf certificate,
 * NULL on an error: free it with mtls_cert_free. Errors: MTLS_E_INVALID_ARGUMENT (NULL or malformed arguments, an option
 * that does not apply), MTLS_E_CA_REJECTED (the CA's problem detail in mtls_last_error: a wrong
 * external account binding, a refused request), MTLS_E_CHALLENGE_FAILED (the CA could not
 * validate the challenge, or the issued identity was not proven: nothing installed),
 * MTLS_E_CONNECT (the CA unreachable), MTLS_E_UNTRUSTED (the CA's TLS certificate),
 * MTLS_E_TIMEOUT, MTLS_E_TOKEN..., the store's errors. */

/* How mtls_enroll_acme answers the ACME challenge (mtls_enroll_options.challenge). */
#define MTLS_ACME_HTTP01 1     /* http-01, a built-in HTTP responder on listen_address:port */
#define MTLS_ACME_WEBROOT 2    /* http-01, files written under webroot/.well-known/acme-challenge/ */
#define MTLS_ACME_TLS_ALPN01 3 /* tls-alpn-01 (RFC 8737), a built-in TLS responder on listen_address:port */
#define MTLS_ACME_DNS01 4      /* dns-01, dns_hook publishes and removes the TXT record */

/* Options of mtls_enroll_acme, _est and _pki. Versioned: fill with mtls_enroll_options_init,
 * then set fields; fields are only ever added at the end, with a new version. Strings, arrays
 * and handles are borrowed for the duration of the call (the record keeps its own copies;
 * secrets are not kept, except an EST password with keep_password). A field that does not apply to the source called must stay at its
 * default, else MTLS_E_INVALID_ARGUMENT. */
#define MTLS_ENROLL_OPTIONS_VERSION 2
typedef struct mtls_enroll_options {
    unsigned int version;            /* MTLS_ENROLL_OPTIONS_VERSION */
    /* Every source. */
    const char *key_type;            /* MTLS_KEY_TYPE_* of the new key (NULL: MTLS_KEY_TYPE_EC_P256); not with token_uri */
    const char *token_uri;           /* "pkcs11:" URI of an existing token private key, used instead of a new key (NULL: none) */
    const char *pin;                 /* the token's PIN (NULL: the URI's pin-source, or none); not kept */
    int profile;                     /* EST and pki: MTLS_PROFILE_SERVER or _CLIENT (0: EST client, pki server); ACME: 0 */
    mtls_cert *const *chain_anchors; /* ACME and pki: the issued chain must validate to one of these (none: ACME the
                                        chain's own top, pki the directory's root); EST uses `anchors` */
    size_t chain_anchor_count;
    const mtls_policy *policy;       /* the new identity must also validate under it (NULL: the chain anchors only) */
    /* ACME and EST. */
    mtls_cert *const *anchors;       /* trust only these for the CA server's TLS (none: the system store) */
    size_t anchor_count;
    /* ACME. */
    int challenge;                   /* MTLS_ACME_* (required by mtls_enroll_acme) */
    const char *listen_address;      /* where the built-in responders listen (NULL: every IPv4 address); unused by
                                        _WEBROOT and _DNS01, which run none */
    uint16_t port;                   /* the responder's port (MTLS_ACME_HTTP01, _TLS_ALPN01) */
    const char *webroot;             /* MTLS_ACME_WEBROOT: the web server's document root */
    const char *dns_hook;            /* MTLS_ACME_DNS01: command given present|cleanup NAME VALUE */
    const char *eab_kid;             /* external account binding key identifier (NULL: none) */
    const char *eab_hmac_key;        /* with eab_kid: its MAC key, base64url as the CA gives it; not kept */
    const char *const *contact;      /* account contact URLs ("mailto:ops@example.com") */
    size_t contact_count;
    int timeout_seconds;             /* how long an order may stay pending (0: 120; 1 to 86400) */
    /* EST. */
    const char *user;                /* HTTP basic authentication for /simpleenroll (with password) */
    const char *password;            /* not kept */
    const mtls_identity *bootstrap;  /* a bootstrap identity presented over TLS (NULL: none) */
    /* pki. */
    const char *ca_key_password;     /* password of the directory's CA keys (NULL: unencrypted keys); not kept */
    /* Version 2. EST. */
    int keep_password;               /* 1: keep `password`, sealed in the store with the enrollment record (under a key
                                        the store seals), and send it again on re-enrollment, for servers that ask for
                                        HTTP authentication on /simplereenroll as well as the client certificate
                                        (RFC 7030 3.2.3); 0 (default): not kept */
} mtls_enroll_options;

/* Fill *opts with the defaults of `version` (MTLS_ENROLL_OPTIONS_VERSION): every field zero or
 * NULL. MTLS_E_INVALID_ARGUMENT for an unknown version. */
MTLS_EXTERN int mtls_enroll_options_init(mtls_enroll_options *opts, unsigned int version);
/* ACME (RFC 8555; `mtls enroll acme`): `names` (name_count DNS names or IP addresses, at least
 * one; the first is the CN) from the server whose directory is `directory_url` (https://...).
 * The account key is the one recorded for `label` with the same directory, else a new P-256 key.
 * opts is required (opts->challenge). */
MTLS_EXTERN int mtls_enroll_acme(mtls_store *store, const char *label, const char *directory_url,
                                 const char *const *names, size_t name_count, const mtls_enroll_options *opts,
                                 mtls_cert **out);
/* EST (RFC 7030; `mtls enroll est`): /simpleenroll at the base URL `url`
 * (https://host/.well-known/est) for `subject` (an RFC 4514 DN, "CN=device-1,O=Example"), with
 * opts->user and opts->password and/or opts->bootstrap (one is required); the chain from
 * /cacerts. Renewal re-enrolls over mutual TLS with the identity itself, plus the password when
 * opts->keep_password kept it; a server asking for HTTP authentication on re-enrollment when no
 * password was kept is MTLS_E_CA_REJECTED saying so. */
MTLS_EXTERN int mtls_enroll_est(mtls_store *store, const char *label, const char *url, const char *subject,
                                const mtls_enroll_options *opts, mtls_cert **out);
/* The local CA (`mtls enroll pki`): signed by the intermediate `ca_name` of the `mtls pki`
 * directory `dir`, for `name` (a DNS name or IP address for a server). `opts` may be NULL. */
MTLS_EXTERN int mtls_enroll_pki(mtls_store *store, const char *label, const char *dir, const char *ca_name,
                                const char *name, const mtls_enroll_options *opts, mtls_cert **out);
/* Revoke through the CA (`mtls enroll revoke`; RFC 8555 §7.6): the certificate of the identity
 * `label` of `store`, enrolled with mtls_enroll_acme (or `mtls enroll acme`), with the account
 * recorded at enrollment (the request is signed with its key). `reason` is an RFC 5280 CRLReason
 * code (0 unspecified, 1 keyCompromise, 4 superseded, 5 cessationOfOperation...; 7 does not
 * exist) or MTLS_REVOKE_NO_REASON to send none. `pin` unlocks the token of a token identity
 * (NULL: the URI's pin-source, or none); not kept. The identity stays in the store: deleting or
 * renewing it is the caller's choice. Blocks for the exchange with the CA; safe from any thread.
 * *out (`out` may be NULL) is the certificate revoked, NULL on an error: free it with
 * mtls_cert_free. Errors: MTLS_E_INVALID_ARGUMENT (NULL store or label, a reason out of range),
 * MTLS_E_NOT_FOUND (no such label or no enrollment record), MTLS_E_UNSUPPORTED (the identity
 * was not enrolled with ACME), MTLS_E_CA_REJECTED (the CA's problem detail in mtls_last_error:
 * already revoked, unauthorized), MTLS_E_CONNECT, MTLS_E_UNTRUSTED, MTLS_E_TOKEN..., the
 * store's errors. */
#define MTLS_REVOKE_NO_REASON -1
MTLS_EXTERN int mtls_enroll_revoke(mtls_store *store, const char *label, int reason, const char *pin,
                                   mtls_cert **out);

/* ======================================================================================
 * Renewal, expiry and metrics
 * ====================================================================================== */

/* ---- Renewal (issue 27) ----
 * Renews the identity labelled `label` in `store` from the enrollment record kept beside it
 * (made by `mtls enroll acme|pki`): when it is due — two thirds of its lifetime passed, less a
 * random jitter of up to 5 % — or always when `force` is non-zero. The new identity replaces the
 * old one (identity and record in one store transaction) only once its key matches and its
 * chain validates under `policy` (NULL: the anchors recorded at enrollment); until then the old
 * one stays. `pin` (NULL: none) is the token PIN for a token identity; it is not kept.
 * *renewed (may be NULL) is 1 when a new identity was installed, 0 otherwise.
 * Blocks for the whole exchange with the CA (seconds). Safe to call from any thread; calls for
 * one label should not overlap. Errors: MTLS_E_NOT_FOUND (no such identity or no record),
 * MTLS_E_CA_REJECTED (the CA's problem detail in mtls_last_error), MTLS_E_CHALLENGE_FAILED
 * (validation failed, or the new identity was not proven: nothing installed), MTLS_E_CONNECT,
 * MTLS_E_UNTRUSTED (the CA's TLS certificate), MTLS_E_TIMEOUT, MTLS_E_TOKEN... */
MTLS_EXTERN int mtls_renew(mtls_store *store, const char *label, int force, const mtls_policy *policy,
                           const char *pin, int *renewed);

/* ---- Renewal events: the renewer (issue 27) ----
 * A renewer renews the enrolled identities of a store (one label, or every enrolled identity
 * when `label` is NULL) and reports what it does through the same event callback as rotation:
 * MTLS_EVENT_RENEWAL_SCHEDULED / _SUCCEEDED / _FAILED / _NOT_INSTALLED and
 * MTLS_EVENT_EXPIRY_WARNING (expires before the next attempt). Each mtls_renewer_run_once looks
 * at the labels whose next attempt has come: renews those due (two thirds of the lifetime with
 * jitter, or the ACME server's renewal window, RFC 9773), backs off exponentially (30 s doubling
 * to 1 h, +-20 %) after a failure; the old identity stays until a new one is proven. The labels
 * due are renewed side by side, each on a thread of its own, so a CA that does not answer delays
 * no other label (every exchange with a CA ends within its deadline, 30 s at most). Events are
 * delivered on the thread calling mtls_renewer_run_once, as each attempt ends; run_once returns
 * when every attempt it started has ended. The application runs the loop (a timer,
 * its event loop, a thread) and sleeps until *next_wake. One run_once at a time per renewer. */
typedef struct mtls_renewer mtls_renewer;

#define MTLS_RENEWER_OPTIONS_VERSION 1
/* Options of a renewer; fill with mtls_renewer_options_init. */
typedef struct mtls_renewer_options {
    unsigned int version;      /* MTLS_RENEWER_OPTIONS_VERSION */
    const mtls_policy *policy; /* a renewed chain must validate under it (NULL: the anchors
                                  recorded at enrollment); the renewer keeps its own reference */
    const char *token_pin;     /* token identities' PIN (NULL: the URI's); copied */
    const char *ca_key_password; /* identities enrolled from a local pki directory: its CA keys'
                                    password (NULL: none); copied */
    int64_t delete_previous_keys_after; /* token identities: seconds after which a key replaced
                                           by a renewal is deleted from the token, with its
                                           objects; -1 (the default): keep previous keys.
                                           Deleted only when mtls_renewer_run_once runs for the
                                           label (due or not): no background deletion */
} mtls_renewer_options;
MTLS_EXTERN int mtls_renewer_options_init(mtls_renewer_options *opts, unsigned int version);
/* A renewer for `label` (NULL: every enrolled identity) of `store`; it keeps its own reference to
 * the store. opts may be NULL (defaults). Free *out with mtls_renewer_free. */
MTLS_EXTERN int mtls_renewer_new(mtls_store *store, const char *label, const mtls_renewer_options *opts,
                                 mtls_renewer **out);
/* Sets (cb NULL: clears) the renewer's event callback; destroy(userdata) as
 * mtls_identity_source_set_event_callback. */
MTLS_EXTERN int mtls_renewer_set_event_callback(mtls_renewer *renewer, mtls_event_cb cb, void *userdata,
                                                void (*destroy)(void *userdata));
/* One pass (force non-zero: renew every label now, due or not). A failed renewal is an event,
 * not an error: the return is an error only when the pass could not run (the store unreadable:
 * MTLS_E_CORRUPT...). *renewed (may be NULL): identities installed by this pass; *next_wake (may
 * be NULL): the earliest next attempt (seconds since 1970). Blocks for the exchanges with the CAs. */
MTLS_EXTERN int mtls_renewer_run_once(mtls_renewer *renewer, int force, size_t *renewed, int64_t *next_wake);
/* NULL is a no-op. */
MTLS_EXTERN void mtls_renewer_free(mtls_renewer *renewer);

/* One certificate of a stored item and its validity. */
typedef struct mtls_expiry_item {
    char *label;               /* the item's label */
    int item_class;            /* MTLS_STORE_IDENTITY, _CERTIFICATE or _TOKEN_IDENTITY */
    int position;              /* 0: the item's leaf; 1...: its chain, leaf's issuer first */
    char *subject;             /* RFC 4514 */
    char *sha256;              /* lowercase hex */
    int64_t not_before;        /* seconds since 1970 */
    int64_t not_after;
} mtls_expiry_item;
/* Every certificate in the store (identities and chains, stored certificates, token identities'
 * certificates and chains; not enrollment records), earliest notAfter first; no private key is opened. A new array of
 * *count items: free with mtls_expiry_items_free(*out, *count). */
MTLS_EXTERN int mtls_store_expiry(mtls_store *store, mtls_expiry_item **out, size_t *count);
MTLS_EXTERN void mtls_expiry_items_free(mtls_expiry_item *items, size_t count);
/* The earliest notAfter in the store (seconds since 1970) and, if label is not NULL, the label of
 * its item (free with mtls_string_free). MTLS_E_NOT_FOUND when the store holds no certificate. */
MTLS_EXTERN int mtls_store_earliest_expiry(mtls_store *store, int64_t *not_after, char **label);
/* The store's certificates as Prometheus text (mtls_certificate_not_after_seconds and
 * mtls_certificate_not_before_seconds per certificate). Free *out with mtls_string_free. */
MTLS_EXTERN int mtls_store_metrics(mtls_store *store, char **out);

#ifdef __cplusplus
}
#endif
#endif /* MTLS_H */
