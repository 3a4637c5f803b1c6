/* Opening a token identity: mtls_identity_from_pkcs11 against the same work done with raw p11-kit
 * and PKCS#11 calls (load and initialise the module, find the token, open a session, log in, find
 * the certificate by CKA_ID and parse it, find the private key with the same CKA_ID, finalise),
 * in the same process, interleaved. Prints one JSON line with both median times and their ratio.
 * usage: bench_tokens MODULE TOKEN_LABEL ID_BYTE PIN [ROUNDS] */
#define _POSIX_C_SOURCE 200809L
#include <mtls.h>
#include <openssl/x509.h>
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_support.h"

static void die(const char *what, unsigned long rv) {
    fprintf(stderr, "%s failed: 0x%lx\n", what, rv);
    exit(1);
}

static void run_mtls(const char *uri) {
    mtls_identity *id = NULL;
    if (mtls_identity_from_pkcs11(uri, NULL, NULL, NULL, &id) != MTLS_OK) {
        fprintf(stderr, "mtls_identity_from_pkcs11: %s\n", mtls_last_error());
        exit(1);
    }
    mtls_identity_free(id);
}

static CK_OBJECT_HANDLE find_one(CK_FUNCTION_LIST *f, CK_SESSION_HANDLE s, CK_OBJECT_CLASS cls, unsigned char id) {
    CK_ATTRIBUTE t[2] = {{CKA_CLASS, &cls, sizeof cls}, {CKA_ID, &id, 1}};
    CK_OBJECT_HANDLE h = 0;
    CK_ULONG n = 0;
    CK_RV rv = f->C_FindObjectsInit(s, t, 2);
    if (rv != CKR_OK) die("C_FindObjectsInit", rv);
    rv = f->C_FindObjects(s, &h, 1, &n);
    if (rv != CKR_OK || n != 1) die("C_FindObjects", rv);
    f->C_FindObjectsFinal(s);
    return h;
}

static void run_raw(const char *module, const char *label, unsigned char id, const char *pin) {
    CK_FUNCTION_LIST *f = p11_kit_module_load(module, 0);
    if (!f) die("p11_kit_module_load", 0);
    CK_RV rv = p11_kit_module_initialize(f);
    if (rv != CKR_OK) die("p11_kit_module_initialize", rv);
    CK_SLOT_ID slots[16];
    CK_ULONG count = 16;
    rv = f->C_GetSlotList(CK_TRUE, slots, &count);
    if (rv != CKR_OK) die("C_GetSlotList", rv);
    CK_SLOT_ID slot = (CK_SLOT_ID)-1;
    for (CK_ULONG i = 0; i < count; i++) {
        CK_TOKEN_INFO info;
        char l[33];
        if (f->C_GetTokenInfo(slots[i], &info) != CKR_OK) continue;
        memcpy(l, info.label, 32);
        l[32] = 0;
        for (int j = 31; j >= 0 && l[j] == ' '; j--) l[j] = 0;
        if (strcmp(l, label) == 0) { slot = slots[i]; break; }
    }
    if (slot == (CK_SLOT_ID)-1) die("token lookup", 0);
    CK_SESSION_HANDLE s;
    rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &s);
    if (rv != CKR_OK) die("C_OpenSession", rv);
    rv = f->C_Login(s, CKU_USER, (unsigned char *)pin, strlen(pin));
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) die("C_Login", rv);
    CK_OBJECT_HANDLE cert = find_one(f, s, CKO_CERTIFICATE, id);
    unsigned char der[8192];
    CK_ATTRIBUTE v = {CKA_VALUE, der, sizeof der};
    rv = f->C_GetAttributeValue(s, cert, &v, 1);
    if (rv != CKR_OK) die("C_GetAttributeValue", rv);
    const unsigned char *p = der;
    X509 *x = d2i_X509(NULL, &p, (long)v.ulValueLen);
    if (!x) die("d2i_X509", 0);
    (void)find_one(f, s, CKO_PRIVATE_KEY, id);
    X509_free(x);
    f->C_CloseSession(s);
    p11_kit_module_finalize(f);
    p11_kit_module_release(f);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: bench_tokens MODULE TOKEN_LABEL ID_BYTE PIN [ROUNDS]\n");
        return 2;
    }
    const char *module = argv[1], *label = argv[2], *pin = argv[4];
    unsigned char id = (unsigned char)strtoul(argv[3], NULL, 16);
    int rounds = argc > 5 ? atoi(argv[5]) : 41;
    char uri[2048];
    snprintf(uri, sizeof uri, "pkcs11:token=%s;id=%%%02x?module-path=%s&pin-value=%s", label, id, module, pin);
    double *tm = calloc((size_t)rounds, sizeof *tm), *to = calloc((size_t)rounds, sizeof *to);
    run_mtls(uri); /* warm up both paths (dlopen, provider loading) */
    run_raw(module, label, id, pin);
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now();
        run_mtls(uri);
        double t1 = bench_now();
        run_raw(module, label, id, pin);
        double t2 = bench_now();
        tm[r] = t1 - t0;
        to[r] = t2 - t1;
    }
    qsort(tm, (size_t)rounds, sizeof *tm, bench_cmp_double);
    qsort(to, (size_t)rounds, sizeof *to, bench_cmp_double);
    double m = tm[rounds / 2] * 1e3, o = to[rounds / 2] * 1e3;
    printf("{\"mtls_ms\": %.4f, \"raw_ms\": %.4f, \"ratio\": %.4f}\n", m, o, m / o);
    free(tm);
    free(to);
    return 0;
}
