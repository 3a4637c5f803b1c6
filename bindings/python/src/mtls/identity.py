"""Identities: a private key (in memory or on a token) with its leaf certificate and chain
(mtls_identity), and the PKCS#12 import that yields them (mtls_pkcs12).

Every other module that hands out or takes an Identity imports it from here; this module imports
nothing of the package but the C plumbing, the certificates and the exceptions, so nothing needs
a lazy import to reach it. ``mtls.pkcs12`` re-exports it (``from mtls.pkcs12 import Identity``)."""
import ctypes
import os
from typing import List, Optional, Tuple, Union

from ._lib import lib, fn, take_string, c_void_pp, c_size_p, c_int_p
from ._handle import _Handle, utf8, out_handle, out_string, out_bytes, out_list
from .certificate import Certificate
from .errors import check, NoIdentity

# mtls_identity *mtls_identity_ref(mtls_identity *identity)
fn("mtls_identity_ref", ctypes.c_void_p, ctypes.c_void_p)
# void mtls_identity_free(mtls_identity *identity)
fn("mtls_identity_free", None, ctypes.c_void_p)
# int mtls_identity_from_pem(const char *cert_pem, const char *key_pem, const char *password, mtls_identity **out)
fn("mtls_identity_from_pem", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, c_void_pp)
# int mtls_identity_leaf(const mtls_identity *identity, mtls_cert **out)
fn("mtls_identity_leaf", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_identity_chain(const mtls_identity *identity, mtls_cert ***out, size_t *count)
fn("mtls_identity_chain", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# void mtls_identity_list_free(mtls_identity **list, size_t count)
fn("mtls_identity_list_free", None, c_void_pp, ctypes.c_size_t)
# int mtls_identity_friendly_name(const mtls_identity *identity, char **out)
fn("mtls_identity_friendly_name", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_identity_local_key_id(const mtls_identity *identity, uint8_t **out, size_t *len)
fn("mtls_identity_local_key_id", ctypes.c_int, ctypes.c_void_p, c_void_pp, c_size_p)
# int mtls_identity_key_type(const mtls_identity *identity, char **name, int *bits)
fn("mtls_identity_key_type", ctypes.c_int, ctypes.c_void_p, c_void_pp, c_int_p)
# int mtls_identity_chain_check(const mtls_identity *identity, unsigned int *flags, int *openssl_code, char **message)
fn("mtls_identity_chain_check", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), c_int_p, c_void_pp)
# int mtls_identity_token_uri(const mtls_identity *identity, char **out)
fn("mtls_identity_token_uri", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_pkcs12_import(const uint8_t *data, size_t len, const char *password, mtls_pkcs12 **out)
fn("mtls_pkcs12_import", ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, c_void_pp)
# int mtls_pkcs12_load(const char *path, const char *password, mtls_pkcs12 **out)
fn("mtls_pkcs12_load", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, c_void_pp)
# void mtls_pkcs12_free(mtls_pkcs12 *p12)
fn("mtls_pkcs12_free", None, ctypes.c_void_p)
# int mtls_pkcs12_identities(const mtls_pkcs12 *p12, mtls_identity ***out, size_t *count)
fn("mtls_pkcs12_identities", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_pkcs12_certs(const mtls_pkcs12 *p12, mtls_cert ***out, size_t *count)
fn("mtls_pkcs12_certs", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_pkcs12_password_encoding(const mtls_pkcs12 *p12, char **out)
fn("mtls_pkcs12_password_encoding", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_pkcs12_export(const mtls_identity *identity, const char *password, int flags,
#                        const char *friendly_name, uint8_t **out, size_t *len)
fn("mtls_pkcs12_export", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
   c_void_pp, c_size_p)

#: mtls_identity_chain_check flags
CHAIN_VERIFIED, CHAIN_COMPLETE, CHAIN_SIGNATURES_OK, CHAIN_WITHIN_VALIDITY = 0x1, 0x2, 0x4, 0x8
#: mtls_pkcs12_export flags
PKCS12_MODERN, PKCS12_LEGACY = 0x0, 0x1


class ChainCheck:
    """The basic X.509 evaluation of an identity's own chain (see mtls_identity_chain_check)."""

    def __init__(self, flags, openssl_code, message):
        self.verified = bool(flags & CHAIN_VERIFIED)
        self.complete = bool(flags & CHAIN_COMPLETE)
        self.signatures_ok = bool(flags & CHAIN_SIGNATURES_OK)
        self.within_validity = bool(flags & CHAIN_WITHIN_VALIDITY)
        self.openssl_code = openssl_code
        self.message = message

    def __repr__(self):
        return f"<ChainCheck verified={self.verified} {self.message!r}>"


class Identity(_Handle):
    """A private key with its leaf certificate and chain (wraps an mtls_identity handle)."""
    _free = "mtls_identity_free"

    @classmethod
    def from_pem(cls, cert_pem: Union[str, bytes], key_pem: Union[str, bytes],
                 password: Optional[Union[str, bytes]] = None) -> "Identity":
        """An identity from PEM text: the leaf and its chain, and the (possibly encrypted) key."""
        return cls(out_handle(lib.mtls_identity_from_pem, utf8(cert_pem), utf8(key_pem), utf8(password)))

    @classmethod
    def from_pkcs12(cls, data: bytes, password: Optional[Union[str, bytes]]) -> "Identity":
        """The (first) identity of PKCS#12 bytes; the other identities and loose certificates of
        the file are in :meth:`PKCS12.parse`. A wrong password raises :class:`mtls.BadPassword`."""
        data = bytes(data)
        identities, _, _ = read_pkcs12(out_handle(lib.mtls_pkcs12_import, data, len(data), utf8(password)))
        if not identities:
            raise NoIdentity("the PKCS#12 file holds no identity", NoIdentity.code)
        return identities[0]

    @classmethod
    def load_pkcs12(cls, path: "Union[str, os.PathLike[str]]", password: Optional[Union[str, bytes]]) -> "Identity":
        """Same as from_pkcs12, from a file."""
        with open(path, "rb") as f:
            return cls.from_pkcs12(f.read(), password)

    @property
    def leaf(self) -> Certificate:
        return Certificate(out_handle(lib.mtls_identity_leaf, self._h))

    @property
    def chain(self) -> List[Certificate]:
        """Certificates above the leaf, issuer first, root last."""
        return Certificate._list(lib.mtls_identity_chain, self._h)

    @property
    def token_uri(self) -> Optional[str]:
        """The pkcs11: URI of the private key when it lives on a token, else None."""
        return out_string(lib.mtls_identity_token_uri, self._h)

    @property
    def key_in_memory(self) -> bool:
        """Whether the private key is in this process's memory (:attr:`token_uri` is None), so
        that signing with it never waits for a token. Read once: an identity's key never moves."""
        known = self.__dict__.get("_key_in_memory")
        if known is None:
            known = self.__dict__["_key_in_memory"] = self.token_uri is None
        return known

    @property
    def friendly_name(self) -> Optional[str]:
        return out_string(lib.mtls_identity_friendly_name, self._h)

    @property
    def local_key_id(self) -> Optional[bytes]:
        return out_bytes(lib.mtls_identity_local_key_id, self._h)

    @property
    def key_type(self) -> Tuple[str, int]:
        """('p256', 256), ('rsa2048', 2048), ..."""
        name, bits = ctypes.c_void_p(), ctypes.c_int()
        check(lib.mtls_identity_key_type(self._h, ctypes.byref(name), ctypes.byref(bits)))
        return take_string(name), bits.value

    @property
    def chain_check(self) -> ChainCheck:
        flags, code, msg = ctypes.c_uint(), ctypes.c_int(), ctypes.c_void_p()
        check(lib.mtls_identity_chain_check(self._h, ctypes.byref(flags), ctypes.byref(code), ctypes.byref(msg)))
        return ChainCheck(flags.value, code.value, take_string(msg))

    def export_pkcs12(self, password: Union[str, bytes], legacy: bool = False,
                      friendly_name: Optional[str] = None) -> bytes:
        """The identity as a PKCS#12 file: AES-256/SHA-256 by default, 3DES/SHA-1 with legacy=True."""
        if password is None:
            raise ValueError("export needs a password (the empty string is allowed)")
        return out_bytes(lib.mtls_pkcs12_export, self._h, utf8(password),
                         PKCS12_LEGACY if legacy else PKCS12_MODERN, utf8(friendly_name))

    def __repr__(self):
        return f"<Identity {self.leaf.subject_summary} key={self.key_type[0]} name={self.friendly_name!r}>"



def read_pkcs12(h: int) -> "Tuple[List[Identity], List[Certificate], str]":
    """The identities, certificates and password encoding of an mtls_pkcs12 handle, which is
    freed: the one reading of an import result (PKCS12 and Identity.from_pkcs12 both use it)."""
    try:
        return (out_list(lib.mtls_pkcs12_identities, h, item=lambda i: Identity(lib.mtls_identity_ref(i)),
                         free=lib.mtls_identity_list_free),
                Certificate._list(lib.mtls_pkcs12_certs, h),
                out_string(lib.mtls_pkcs12_password_encoding, h))
    finally:
        lib.mtls_pkcs12_free(h)


__all__ = ["Identity", "ChainCheck", "read_pkcs12", "CHAIN_VERIFIED", "CHAIN_COMPLETE", "CHAIN_SIGNATURES_OK",
           "CHAIN_WITHIN_VALIDITY", "PKCS12_MODERN", "PKCS12_LEGACY"]
