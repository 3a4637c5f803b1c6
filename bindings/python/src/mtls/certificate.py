"""Certificates."""
import ctypes
from ._lib import lib, take_string, c_uint8_p
from ._handle import _Handle, out_handle, out_string, out_value, out_indexed, out_list
from .errors import check


class Certificate(_Handle):
    """An X.509 certificate (immutable; wraps an mtls_cert handle)."""
    _free = "mtls_cert_free"

    @classmethod
    def parse(cls, data: bytes) -> "Certificate":
        """The first certificate in DER, PEM or PKCS#7 data."""
        return cls(out_handle(lib.mtls_cert_parse, data, len(data)))

    @classmethod
    def parse_all(cls, data: bytes) -> list:
        """Every certificate in DER, PEM or PKCS#7 data."""
        return cls._list(lib.mtls_cert_list_parse, data, len(data))

    @classmethod
    def _list(cls, func, *args) -> list:
        """The certificates of an `mtls_cert ***out, size_t *count` call (freed with mtls_cert_list_free)."""
        return out_list(func, *args, item=lambda h: cls(lib.mtls_cert_ref(h)), free=lib.mtls_cert_list_free)

    @classmethod
    def load(cls, path: str) -> list:
        with open(path, "rb") as f:
            return cls.parse_all(f.read())

    def _str(self, name):
        return out_string(getattr(lib, f"mtls_cert_{name}"), self._h)

    @property
    def der(self) -> bytes:
        p = c_uint8_p()
        n = ctypes.c_size_t()
        check(lib.mtls_cert_der(self._h, ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value)

    subject = property(lambda self: self._str("subject"))
    issuer = property(lambda self: self._str("issuer"))
    subject_summary = property(lambda self: self._str("subject_summary"))
    serial_hex = property(lambda self: self._str("serial_hex"))
    sha256_hex = property(lambda self: self._str("sha256_hex"))
    spki_sha256_hex = property(lambda self: self._str("spki_sha256_hex"))
    spki_pin = property(lambda self: self._str("spki_pin"))
    pem = property(lambda self: self._str("pem"))

    @property
    def validity(self):
        """(not_before, not_after) as Unix seconds."""
        nb, na = ctypes.c_int64(), ctypes.c_int64()
        check(lib.mtls_cert_validity(self._h, ctypes.byref(nb), ctypes.byref(na)))
        return nb.value, na.value

    @property
    def subject_alt_names(self):
        """[(kind, value)] with kind in 'DNS', 'IP', 'email', 'URI'."""
        kinds = {1: "DNS", 2: "IP", 3: "email", 4: "URI"}
        out = []
        for i in range(out_value(ctypes.c_size_t, lib.mtls_cert_san_count, self._h)):
            k, v = ctypes.c_int(), ctypes.c_void_p()
            check(lib.mtls_cert_san(self._h, i, ctypes.byref(k), ctypes.byref(v)))
            out.append((kinds[k.value], take_string(v)))
        return out

    @property
    def key_type(self):
        """('p256', 256), ('rsa2048', 2048), ..."""
        name, bits = ctypes.c_void_p(), ctypes.c_int()
        check(lib.mtls_cert_key_type(self._h, ctypes.byref(name), ctypes.byref(bits)))
        return take_string(name), bits.value

    @property
    def extended_key_usages(self):
        return out_indexed(lib.mtls_cert_eku_count, lib.mtls_cert_eku, self._h, take_string)

    def __eq__(self, other):
        return isinstance(other, Certificate) and self.der == other.der

    def __hash__(self):
        return hash(self.der)

    def __repr__(self):
        return f"<Certificate {self.subject_summary} sha256={self.sha256_hex[:16]}>"
