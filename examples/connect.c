/* connect: a plain C mutual-TLS client on libmtls alone. It loads a client identity from a .p12
 * file, trusts only a pinned anchor (a root, an intermediate or the server's own certificate),
 * connects, sends a request, and prints the server's chain, libmtls's evaluation of it and the
 * reply. The evaluation is printed also when the handshake fails, so a refusal says why.
 *
 *   cc connect.c $(pkg-config --cflags --libs mtls) -o connect
 *   ./connect --p12 client.p12 --password-file pw.txt --anchor root.pem \
 *             --verify-as server.test --send 'GET / HTTP/1.0\r\n\r\n' 127.0.0.1 8443
 *
 * Exit status: 0 connected (and the request answered), 1 refused or failed, 2 bad usage.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#include <mtls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *program = "connect";

static int fail(const char *what, int rc) {
    fprintf(stderr, "%s: %s: %s (%s)\n", program, what, mtls_last_error(), mtls_error_name(rc));
    return 1;
}

/* `\r`, `\n` and `\\` escapes in place, so a request can be given on the command line. */
static size_t unescape(char *s) {
    char *out = s;
    for (const char *in = s; *in; in++) {
        if (in[0] == '\\' && in[1]) {
            in++;
            *out++ = *in == 'r' ? '\r' : *in == 'n' ? '\n' : *in;
        } else {
            *out++ = *in;
        }
    }
    *out = 0;
    return (size_t)(out - s);
}

/* The server's chain as it was presented, and our evaluation of it (both exist after a failed
 * handshake too, when our evaluation is what refused the server). */
static void print_peer(const mtls_conn *conn) {
    mtls_cert **chain = NULL;
    size_t count = 0;
    if (mtls_conn_peer_chain(conn, &chain, &count) == MTLS_OK) {
        for (size_t i = 0; i < count; i++) {
            char *subject = NULL, *sha = NULL;
            if (mtls_cert_subject(chain[i], &subject) == MTLS_OK && mtls_cert_sha256_hex(chain[i], &sha) == MTLS_OK)
                printf("peer[%zu] %s sha256=%s\n", i, subject, sha);
            mtls_string_free(subject);
            mtls_string_free(sha);
        }
        mtls_cert_list_free(chain, count);
    }
    mtls_trust_result *result = NULL;
    if (mtls_conn_evaluation(conn, &result) != MTLS_OK || !result) {
        printf("evaluation: none (the server sent no certificate)\n");
        return;
    }
    int trusted = 0;
    size_t nreasons = 0;
    mtls_trust_reason *reasons = NULL;
    mtls_trust_result_trusted(result, &trusted);
    printf("evaluation: %s\n", trusted ? "trusted" : "untrusted");
    if (mtls_trust_result_reasons(result, &reasons, &nreasons) == MTLS_OK)
        for (size_t i = 0; i < nreasons; i++)
            printf("  reason %s (certificate %d): %s\n", reasons[i].code, reasons[i].cert_index, reasons[i].message);
    mtls_trust_reason_list_free(reasons, nreasons);
    mtls_trust_result_free(result);
}

int main(int argc, char **argv) {
    const char *p12_path = NULL, *password_file = NULL, *anchor_path = NULL, *verify_as = NULL;
    const char *host = NULL, *port_text = NULL;
    char *request = NULL;
    for (int i = 1; i < argc; i++) {
        const char **slot = NULL;
        if (!strcmp(argv[i], "--p12")) slot = &p12_path;
        else if (!strcmp(argv[i], "--password-file")) slot = &password_file;
        else if (!strcmp(argv[i], "--anchor")) slot = &anchor_path;
        else if (!strcmp(argv[i], "--verify-as")) slot = &verify_as;
        else if (!strcmp(argv[i], "--send")) {
            if (++i == argc) break;
            request = argv[i];
            continue;
        } else if (!host) { host = argv[i]; continue; }
        else if (!port_text) { port_text = argv[i]; continue; }
        if (!slot || ++i == argc) break;
        *slot = argv[i];
    }
    long port = port_text ? strtol(port_text, NULL, 10) : 0;
    if (!p12_path || !anchor_path || !host || port <= 0 || port > 65535) {
        fprintf(stderr, "usage: %s --p12 FILE [--password-file F] --anchor CERT.pem [--verify-as NAME] "
                        "[--send TEXT] HOST PORT\n", program);
        return 2;
    }

    /* The client identity: the first private key in the file, with its chain. */
    /* The password file is read by the library, with its rule for secret files (owner and mode
     * checked, as OpenSSH checks a key file); mtls_string_free zeroes the copy. */
    char *password = NULL;
    int rc;
    if (password_file && (rc = mtls_password_file_read(password_file, &password)) != MTLS_OK) {
        fail(password_file, rc);
        return 2;
    }
    /* The identity: the PKCS#12 file's (its first identity, with its chain). */
    mtls_identity *identity = NULL;
    rc = mtls_identity_resolve(p12_path, NULL, password, NULL, NULL, &identity);
    mtls_string_free(password);
    if (rc != MTLS_OK) return fail(p12_path, rc);

    /* Trust: the pinned anchor(s) in the file and nothing else, not the system store. */
    mtls_policy *policy = NULL;
    mtls_cert **anchors = NULL;
    size_t anchor_count = 0;
    if ((rc = mtls_policy_new(&policy)) != MTLS_OK) return fail("policy", rc);
    if ((rc = mtls_cert_list_load(anchor_path, &anchors, &anchor_count)) != MTLS_OK) return fail(anchor_path, rc);
    for (size_t i = 0; i < anchor_count && rc == MTLS_OK; i++) rc = mtls_policy_add_anchor(policy, anchors[i]);
    mtls_cert_list_free(anchors, anchor_count);
    if (rc == MTLS_OK) rc = mtls_policy_set_anchors_only(policy, 1);
    if (rc != MTLS_OK) return fail("policy", rc);

    mtls_conn_options opts;
    mtls_conn_options_init(&opts, MTLS_CONN_OPTIONS_VERSION);
    opts.identity = identity;
    opts.policy = policy;
    opts.verify_as = verify_as;  /* e.g. connect by IP, validate the certificate as its DNS name */
    if (verify_as) opts.sni = verify_as;

    /* Open, then handshake: the connection is kept after a failed handshake so that the chain
     * and the evaluation can still be printed. */
    mtls_conn *conn = NULL;
    int status = 1;
    if ((rc = mtls_conn_open(host, (uint16_t)port, &opts, &conn)) != MTLS_OK) {
        fail("connect", rc);
        goto done;
    }
    rc = mtls_conn_handshake(conn);
    print_peer(conn);
    if (rc != MTLS_OK) {
        fail("handshake", rc);
        goto done;
    }
    char *version = NULL;
    mtls_conn_tls_version(conn, &version);
    printf("connected: %s\n", version ? version : "?");
    mtls_string_free(version);

    if (request) {
        size_t len = unescape(request), written = 0;
        if ((rc = mtls_conn_write(conn, (const uint8_t *)request, len, &written)) != MTLS_OK) {
            fail("write", rc);
            goto done;
        }
        /* The reply, until the server closes the connection. */
        uint8_t buf[4096];
        size_t n = 0;
        while ((rc = mtls_conn_read(conn, buf, sizeof buf, &n)) == MTLS_OK && n > 0) fwrite(buf, 1, n, stdout);
        if (rc != MTLS_OK) {
            fail("read", rc);
            goto done;
        }
    }
    status = 0;

done:
    mtls_conn_free(conn);
    mtls_policy_free(policy);
    mtls_identity_free(identity);
    return status;
}
