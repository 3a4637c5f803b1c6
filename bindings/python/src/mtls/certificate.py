"""Certificates."""
import ctypes
import os
from typing import Any, List, Tuple, Union
from ._lib import lib, take_string, c_uint8_p
from ._handle import _Handle, out_handle, out_string, out_value, out_list, take_strings
from .errors import check


class San(ctypes.Structure):
    """mtls_san (private): one subjectAltName of mtls_cert_sans."""
    _fields_ = [("kind", ctypes.c_int), ("value", ctypes.c_void_p)]


class Certificate(_Handle):
    """An X.509 certificate (immutable; wraps an mtls_cert handle)."""
    _free = "mtls_cert_free"

    @classmethod
    def parse(cls, data: bytes) -> "Certificate":
        """The first certificate in DER, PEM or PKCS#7 data."""
        data = bytes(data)
        return cls(out_handle(lib.mtls_cert_parse, data, len(data)))

    @classmethod
    def from_pem(cls, data: Union[str, bytes]) -> "Certificate":
        """The first certificate in PEM text."""
        return cls.parse(data.encode("ascii") if isinstance(data, str) else data)

    @classmethod
    def from_der(cls, data: bytes) -> "Certificate":
        """A certificate from its DER bytes."""
        return cls.parse(data)

    @classmethod
    def parse_all(cls, data: bytes) -> List["Certificate"]:
        """Every certificate in DER, PEM or PKCS#7 data."""
        data = bytes(data)
        return cls._list(lib.mtls_cert_list_parse, data, len(data))

    @classmethod
    def _list(cls, func: Any, *args: Any) -> List["Certificate"]:
        """The certificates of an `mtls_cert ***out, size_t *count` call (freed with mtls_cert_list_free)."""
        return out_list(func, *args, item=lambda h: cls(lib.mtls_cert_ref(h)), free=lib.mtls_cert_list_free)

    @classmethod
    def load(cls, path: "Union[str, os.PathLike[str]]") -> "Certificate":
        """The first certificate of a PEM, DER or PKCS#7 file."""
        with open(path, "rb") as f:
            return cls.parse(f.read())

    @classmethod
    def load_all(cls, path: "Union[str, os.PathLike[str]]") -> List["Certificate"]:
        """Every certificate of a PEM, DER or PKCS#7 file, in file order."""
        with open(path, "rb") as f:
            return cls.parse_all(f.read())

    def _str(self, name: str) -> str:
        return out_string(getattr(lib, f"mtls_cert_{name}"), self._h)

    @property
    def der(self) -> bytes:
        p = c_uint8_p()
        n = ctypes.c_size_t()
        check(lib.mtls_cert_der(self._h, ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value)

    @property
    def subject(self) -> str:
        return self._str("subject")

    @property
    def issuer(self) -> str:
        return self._str("issuer")

    @property
    def subject_summary(self) -> str:
        return self._str("subject_summary")

    @property
    def serial_hex(self) -> str:
        return self._str("serial_hex")

    @property
    def sha256_hex(self) -> str:
        return self._str("sha256_hex")

    @property
    def spki_sha256_hex(self) -> str:
        return self._str("spki_sha256_hex")

    @property
    def spki_pin(self) -> str:
        return self._str("spki_pin")

    @property
    def pem(self) -> str:
        return self._str("pem")


    @property
    def validity(self) -> Tuple[int, int]:
        """(not_before, not_after) as Unix seconds."""
        nb, na = ctypes.c_int64(), ctypes.c_int64()
        check(lib.mtls_cert_validity(self._h, ctypes.byref(nb), ctypes.byref(na)))
        return nb.value, na.value

    @property
    def subject_alt_names(self) -> List[Tuple[str, str]]:
        """[(kind, value)] with kind in 'DNS', 'IP', 'email', 'URI'."""
        kinds = {1: "DNS", 2: "IP", 3: "email", 4: "URI"}
        arr, n = ctypes.POINTER(San)(), ctypes.c_size_t()
        check(lib.mtls_cert_sans(self._h, ctypes.byref(arr), ctypes.byref(n)))
        try:
            return [(kinds[arr[i].kind], ctypes.string_at(arr[i].value).decode("utf-8")) for i in range(n.value)]
        finally:
            lib.mtls_san_list_free(arr, n)

    @property
    def key_type(self) -> Tuple[str, int]:
        """('p256', 256), ('rsa2048', 2048), ..."""
        name, bits = ctypes.c_void_p(), ctypes.c_int()
        check(lib.mtls_cert_key_type(self._h, ctypes.byref(name), ctypes.byref(bits)))
        return take_string(name), bits.value

    @property
    def extended_key_usages(self) -> List[str]:
        return take_strings(lib.mtls_cert_ekus, self._h)

    @property
    def crl_urls(self) -> List[str]:
        """The URIs of the CRL distribution points (where its issuer publishes its CRL)."""
        return take_strings(lib.mtls_cert_crl_urls, self._h)

    @property
    def ocsp_urls(self) -> List[str]:
        """The URIs of its OCSP responders (authorityInfoAccess)."""
        return take_strings(lib.mtls_cert_ocsp_urls, self._h)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Certificate) and self.der == other.der

    def __hash__(self) -> int:
        return hash(self.der)

    def __repr__(self) -> str:
        return f"<Certificate {self.subject_summary} sha256={self.sha256_hex[:16]}>"
