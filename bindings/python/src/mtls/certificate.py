"""Certificates."""
import ctypes
from ._lib import lib, take_string, c_uint8_p
from .errors import check


class Certificate:
    """An X.509 certificate (immutable; wraps an mtls_cert handle)."""

    def __init__(self, _handle):
        self._h = _handle

    @classmethod
    def parse(cls, data: bytes) -> "Certificate":
        """The first certificate in DER, PEM or PKCS#7 data."""
        out = ctypes.c_void_p()
        check(lib.mtls_cert_parse(data, len(data), ctypes.byref(out)))
        return cls(out.value)

    @classmethod
    def parse_all(cls, data: bytes) -> list:
        """Every certificate in DER, PEM or PKCS#7 data."""
        out = ctypes.POINTER(ctypes.c_void_p)()
        n = ctypes.c_size_t()
        check(lib.mtls_cert_list_parse(data, len(data), ctypes.byref(out), ctypes.byref(n)))
        try:
            return [cls(lib.mtls_cert_ref(out[i])) for i in range(n.value)]
        finally:
            lib.mtls_cert_list_free(out, n)

    @classmethod
    def load(cls, path: str) -> list:
        with open(path, "rb") as f:
            return cls.parse_all(f.read())

    def _str(self, name):
        out = ctypes.c_void_p()
        check(getattr(lib, f"mtls_cert_{name}")(self._h, ctypes.byref(out)))
        return take_string(out)

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
        n = ctypes.c_size_t()
        check(lib.mtls_cert_san_count(self._h, ctypes.byref(n)))
        kinds = {1: "DNS", 2: "IP", 3: "email", 4: "URI"}
        out = []
        for i in range(n.value):
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
        n = ctypes.c_size_t()
        check(lib.mtls_cert_eku_count(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            v = ctypes.c_void_p()
            check(lib.mtls_cert_eku(self._h, i, ctypes.byref(v)))
            out.append(take_string(v))
        return out

    def close(self):
        if self._h:
            lib.mtls_cert_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __eq__(self, other):
        return isinstance(other, Certificate) and self.der == other.der

    def __hash__(self):
        return hash(self.der)

    def __repr__(self):
        return f"<Certificate {self.subject_summary} sha256={self.sha256_hex[:16]}>"
