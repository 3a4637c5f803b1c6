"""Issuing a private PKI: root, intermediates, server and client certificates, .p12, CRLs."""
import ctypes

from ._lib import lib, fn, c_void_pp, c_size_p
from ._handle import _Handle, utf8, out_handle, out_string, out_bytes
from .certificate import Certificate
from .identity import Identity
from .errors import check

MTLS_ISSUE_OPTIONS_VERSION = 2
PROFILE_INTERMEDIATE, PROFILE_SERVER, PROFILE_CLIENT = 2, 3, 4
# Key types, the header's MTLS_KEY_TYPE_* names ("p256", "rsa2048"... are accepted as aliases).
KEY_TYPE_EC_P256, KEY_TYPE_EC_P384 = "ec-p256", "ec-p384"
KEY_TYPE_RSA_2048, KEY_TYPE_RSA_3072, KEY_TYPE_RSA_4096 = "rsa-2048", "rsa-3072", "rsa-4096"
KEY_TYPE_ED25519 = "ed25519"
KEY_TYPES = (KEY_TYPE_EC_P256, KEY_TYPE_EC_P384, KEY_TYPE_RSA_2048, KEY_TYPE_RSA_3072, KEY_TYPE_RSA_4096,
             KEY_TYPE_ED25519)


class _IssueOptions(ctypes.Structure):
    # typedef struct mtls_issue_options { ... } mtls_issue_options;  (version 2)
    _fields_ = [
        ("version", ctypes.c_uint),
        ("key_type", ctypes.c_char_p),
        ("validity_days", ctypes.c_int),
        ("now", ctypes.c_int64),
        ("dns_names", ctypes.POINTER(ctypes.c_char_p)),
        ("dns_count", ctypes.c_size_t),
        ("ip_addresses", ctypes.POINTER(ctypes.c_char_p)),
        ("ip_count", ctypes.c_size_t),
        # version 2
        ("crl_url", ctypes.c_char_p),
        ("ocsp_url", ctypes.c_char_p),
    ]


_opts_p = ctypes.POINTER(_IssueOptions)
# int mtls_issue_options_init(mtls_issue_options *opts, unsigned int version)
fn("mtls_issue_options_init", ctypes.c_int, _opts_p, ctypes.c_uint)
# int mtls_pki_root(const char *name, const mtls_issue_options *opts, mtls_issued **out)
fn("mtls_pki_root", ctypes.c_int, ctypes.c_char_p, _opts_p, c_void_pp)
# int mtls_pki_issue(const mtls_issued *issuer, int profile, const char *name,
#                    const mtls_issue_options *opts, mtls_issued **out)
fn("mtls_pki_issue", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, _opts_p, c_void_pp)
# int mtls_pki_load(const char *cert_path, const char *key_path, const char *key_password, mtls_issued **out)
fn("mtls_pki_load", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, c_void_pp)
# mtls_issued *mtls_issued_ref(mtls_issued *issued)
fn("mtls_issued_ref", ctypes.c_void_p, ctypes.c_void_p)
# void mtls_issued_free(mtls_issued *issued)
fn("mtls_issued_free", None, ctypes.c_void_p)
# int mtls_issued_cert(const mtls_issued *issued, mtls_cert **out)
fn("mtls_issued_cert", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_issued_chain_pem(const mtls_issued *issued, char **out)
fn("mtls_issued_chain_pem", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_issued_key_pem(const mtls_issued *issued, const char *password, char **out)
fn("mtls_issued_key_pem", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, c_void_pp)
# int mtls_issued_export_p12(const mtls_issued *issued, const char *password, int legacy,
#                            uint8_t **out, size_t *out_len)
fn("mtls_issued_export_p12", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, c_void_pp, c_size_p)
# int mtls_issued_identity(const mtls_issued *issued, mtls_identity **out)
fn("mtls_issued_identity", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_pki_sign_csr(const mtls_issued *issuer, int profile, const uint8_t *csr, size_t csr_len,
#                       const char *name, const mtls_issue_options *opts, mtls_cert **out)
fn("mtls_pki_sign_csr", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
   ctypes.c_char_p, ctypes.c_void_p, c_void_pp)
# int mtls_pki_crl(const mtls_issued *ca, const char *const *revoked_serials, size_t count,
#                  uint64_t number, int validity_days, int64_t now, uint8_t **der, size_t *der_len)
fn("mtls_pki_crl", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
   ctypes.c_uint64, ctypes.c_int, ctypes.c_int64, c_void_pp, c_size_p)


def _options(key_type=None, days=None, now=None, dns=(), ips=(), crl_url=None, ocsp_url=None):
    o = _IssueOptions()
    check(lib.mtls_issue_options_init(ctypes.byref(o), MTLS_ISSUE_OPTIONS_VERSION))
    if key_type is not None:
        o.key_type = key_type.encode()
    if days is not None:
        o.validity_days = int(days)
    if now is not None:
        o.now = int(now)
    dns_arr = (ctypes.c_char_p * len(dns))(*[d.encode() for d in dns])
    ip_arr = (ctypes.c_char_p * len(ips))(*[i.encode() for i in ips])
    o.dns_names, o.dns_count = ctypes.cast(dns_arr, ctypes.POINTER(ctypes.c_char_p)), len(dns)
    o.ip_addresses, o.ip_count = ctypes.cast(ip_arr, ctypes.POINTER(ctypes.c_char_p)), len(ips)
    o._keep = (dns_arr, ip_arr)  # the arrays must live as long as the struct
    if crl_url is not None:
        o.crl_url = crl_url.encode()
    if ocsp_url is not None:
        o.ocsp_url = ocsp_url.encode()
    return o


class IssuedCertificate(_Handle):
    """A certificate made by libmtls with its private key and chain (wraps mtls_issued).

    Make a root with IssuedCertificate.root(...), then issue from it:

        root = IssuedCertificate.root("Example Root")
        customer = root.issue_intermediate("Customer A")
        server = customer.issue_server("api.example.com", dns=["api.example.com"], ips=["127.0.0.1"])
        alice = customer.issue_client("alice")
        open("alice.p12", "wb").write(alice.export_p12("secret"))

    `key_type` is one of KEY_TYPES; `days` the validity (None: the profile's default); `now` a
    fixed issuing time in Unix seconds (None: the current time).

    Revocation: `crl_url` and `ocsp_url` on the issue_* methods and sign_csr say where THIS CA
    (the issuer) publishes its CRL and OCSP responder (plain http: URLs); the new certificate
    carries them, so verifiers with a revocation policy fetch them. Serve `self.crl(...)` (DER)
    at crl_url.
    """

    _free = "mtls_issued_free"

    @classmethod
    def root(cls, name, key_type=None, days=None, now=None):
        return cls(out_handle(lib.mtls_pki_root, name.encode(), ctypes.byref(_options(key_type, days, now))))

    @classmethod
    def load(cls, cert_path, key_path, key_password=None):
        """A certificate with its chain (cert_path) and its PEM key, e.g. a CA made by `mtls pki`."""
        return cls(out_handle(lib.mtls_pki_load, utf8(str(cert_path)), utf8(str(key_path)), utf8(key_password)))

    def _issue(self, profile, name, **kw):
        return IssuedCertificate(out_handle(lib.mtls_pki_issue, self._h, profile, name.encode(),
                                            ctypes.byref(_options(**kw))))

    def issue_intermediate(self, name, key_type=None, days=None, now=None, crl_url=None, ocsp_url=None):
        return self._issue(PROFILE_INTERMEDIATE, name, key_type=key_type, days=days, now=now,
                           crl_url=crl_url, ocsp_url=ocsp_url)

    def issue_server(self, name, dns=(), ips=(), key_type=None, days=None, now=None, crl_url=None, ocsp_url=None):
        return self._issue(PROFILE_SERVER, name, key_type=key_type, days=days, now=now, dns=list(dns), ips=list(ips),
                           crl_url=crl_url, ocsp_url=ocsp_url)

    def issue_client(self, name, key_type=None, days=None, now=None, crl_url=None, ocsp_url=None):
        return self._issue(PROFILE_CLIENT, name, key_type=key_type, days=days, now=now,
                           crl_url=crl_url, ocsp_url=ocsp_url)

    def sign_csr(self, csr, profile="client", name=None, dns=(), ips=(), days=None, now=None,
                 crl_url=None, ocsp_url=None) -> Certificate:
        """Signs a certificate signing request (PEM str/bytes or DER bytes) as a "client" or
        "server" certificate (the profiles of issue_client/issue_server; the key stays with its
        owner, e.g. on a token). The CSR's self-signature must verify. `name`: the CN (None: the
        CSR's)."""
        data = csr.encode() if isinstance(csr, str) else bytes(csr)
        value = {"client": PROFILE_CLIENT, "server": PROFILE_SERVER}.get(profile)
        if value is None:
            raise ValueError('profile must be "client" or "server"')
        options = _options(days=days, now=now, dns=list(dns), ips=list(ips), crl_url=crl_url, ocsp_url=ocsp_url)
        return Certificate(out_handle(lib.mtls_pki_sign_csr, self._h, value, data, len(data), utf8(name),
                                      ctypes.byref(options)))

    @property
    def certificate(self) -> Certificate:
        return Certificate(out_handle(lib.mtls_issued_cert, self._h))

    @property
    def chain_pem(self) -> str:
        """The certificate then its chain up to the root, as PEM."""
        return out_string(lib.mtls_issued_chain_pem, self._h)

    @property
    def identity(self):
        """The certificate, key and chain as an mtls.Identity (for the store and connections)."""
        return Identity(out_handle(lib.mtls_issued_identity, self._h))

    def key_pem(self, password=None) -> str:
        """The private key as PEM: encrypted PKCS#8 with a password, unencrypted without."""
        return out_string(lib.mtls_issued_key_pem, self._h, utf8(password))

    def export_pkcs12(self, password, legacy=False) -> bytes:
        """A .p12 with the key, the certificate and the whole chain (friendly name: the CN)."""
        return out_bytes(lib.mtls_issued_export_p12, self._h, password.encode(), 1 if legacy else 0)

    def crl(self, revoked_serials=(), number=1, days=None, now=None) -> bytes:
        """A DER CRL signed by this CA listing the serials (hex, as Certificate.serial_hex)."""
        arr = (ctypes.c_char_p * len(revoked_serials))(*[s.encode() for s in revoked_serials])
        return out_bytes(lib.mtls_pki_crl, self._h, arr, len(revoked_serials), number, days or 0, now or 0)

    def __repr__(self):
        return f"<IssuedCertificate {self.certificate.subject_summary}>"
