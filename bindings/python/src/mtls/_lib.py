"""Loads libmtls.so and declares the C prototypes (private; use the mtls package).

Where the library is looked for, in order, with nothing run but the dynamic loader (no compiler,
no ldconfig, no objdump: ``ctypes.util.find_library`` is not used):
  1. ``MTLS_LIBRARY``, when set: an explicit choice is the only one tried;
  2. beside this package (``libmtls.so`` or ``libmtls.so.0``: a wheel ships it there);
  3. the system's, by its SONAME ``libmtls.so.0`` (the dynamic linker's own search: its cache,
     ``LD_LIBRARY_PATH``, the system folders).
The library found must implement the ABI these bindings were written for (:data:`ABI_VERSION`)."""
import ctypes
import os
from typing import List, Tuple

#: The MAJOR.MINOR of include/mtls.h these bindings were written for (``make test-abi`` checks it
#: against MTLS_VERSION_MAJOR/MINOR). A library of another major, or an older minor, is refused.
ABI_VERSION = (0, 3)
#: The library's SONAME, what the system's copy is loaded by.
SONAME = "libmtls.so.0"


def _candidates() -> List[str]:
    """The paths (or the SONAME) to try, in order (see the module's doc)."""
    env = os.environ.get("MTLS_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    beside = [os.path.join(here, n) for n in ("libmtls.so", SONAME)]
    return [p for p in beside if os.path.exists(p)] + [SONAME]


def _load() -> Tuple[ctypes.CDLL, str]:
    tried = []
    for c in _candidates():
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append(f"{c}: {e}")
    how = ("MTLS_LIBRARY names a library that does not load; fix or unset it"
           if os.environ.get("MTLS_LIBRARY") else
           "install it (make install PREFIX=..., the libmtls0 package, or the wheel), or set MTLS_LIBRARY to its path")
    raise ImportError(f"cannot load libmtls: {how}. Tried:\n  " + "\n  ".join(tried))


def check_version(number: int, text: str, where: str) -> None:
    """Refuses a library whose MTLS_VERSION_NUMBER (``number``) is not of :data:`ABI_VERSION`'s
    major or is older than it: these bindings call functions and use struct fields it may lack."""
    major, minor = number // 10000, number // 100 % 100
    if major != ABI_VERSION[0] or minor < ABI_VERSION[1]:
        raise ImportError(f"libmtls {text} ({where}) is not compatible with these bindings, written for the "
                          f"{ABI_VERSION[0]}.{ABI_VERSION[1]} ABI: install libmtls {ABI_VERSION[0]}.{ABI_VERSION[1]} "
                          "or a newer release of the same major version, or set MTLS_LIBRARY to one")


lib, path = _load()

c_char_pp = ctypes.POINTER(ctypes.c_char_p)
c_void_pp = ctypes.POINTER(ctypes.c_void_p)
c_uint8_p = ctypes.POINTER(ctypes.c_uint8)
c_size_p = ctypes.POINTER(ctypes.c_size_t)
c_int_p = ctypes.POINTER(ctypes.c_int)


def fn(name, restype, *argtypes):
    """Declares one C function."""
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# const char *mtls_version(void)
fn("mtls_version", ctypes.c_char_p)
# int mtls_version_number(void)
fn("mtls_version_number", ctypes.c_int)
# const char *mtls_strerror(int code)
fn("mtls_strerror", ctypes.c_char_p, ctypes.c_int)
# const char *mtls_error_name(int code)
fn("mtls_error_name", ctypes.c_char_p, ctypes.c_int)
# const char *mtls_last_error(void)
fn("mtls_last_error", ctypes.c_char_p)
# void mtls_string_free(char *s)
fn("mtls_string_free", None, ctypes.c_void_p)
# int mtls_take_warnings(char ***out, size_t *count)
fn("mtls_take_warnings", ctypes.c_int, ctypes.POINTER(c_void_pp), ctypes.POINTER(ctypes.c_size_t))
# void mtls_string_list_free(char **list, size_t count)
fn("mtls_string_list_free", None, c_void_pp, ctypes.c_size_t)
# void mtls_bytes_free(uint8_t *b)
fn("mtls_bytes_free", None, ctypes.c_void_p)

# int mtls_cert_parse(const uint8_t *data, size_t len, mtls_cert **out)
fn("mtls_cert_parse", ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, c_void_pp)
# int mtls_cert_list_parse(const uint8_t *data, size_t len, mtls_cert ***out, size_t *count)
fn("mtls_cert_list_parse", ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(c_void_pp), c_size_p)
# void mtls_cert_list_free(mtls_cert **list, size_t count)
fn("mtls_cert_list_free", None, c_void_pp, ctypes.c_size_t)
# mtls_cert *mtls_cert_ref(mtls_cert *cert)
fn("mtls_cert_ref", ctypes.c_void_p, ctypes.c_void_p)
# void mtls_cert_free(mtls_cert *cert)
fn("mtls_cert_free", None, ctypes.c_void_p)
# int mtls_cert_der(const mtls_cert *cert, const uint8_t **data, size_t *len)
fn("mtls_cert_der", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_uint8_p), c_size_p)
for _name in ("subject", "issuer", "subject_summary", "serial_hex", "sha256_hex", "spki_sha256_hex",
              "spki_pin", "pem"):
    # int mtls_cert_<field>(const mtls_cert *cert, char **out)
    fn(f"mtls_cert_{_name}", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_cert_validity(const mtls_cert *cert, int64_t *not_before, int64_t *not_after)
fn("mtls_cert_validity", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64))
# int mtls_cert_sans(const mtls_cert *cert, mtls_san **out, size_t *count)
fn("mtls_cert_sans", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, c_size_p)
# void mtls_san_list_free(mtls_san *list, size_t count)
fn("mtls_san_list_free", None, ctypes.c_void_p, ctypes.c_size_t)
# int mtls_cert_key_type(const mtls_cert *cert, char **name, int *bits)
fn("mtls_cert_key_type", ctypes.c_int, ctypes.c_void_p, c_void_pp, c_int_p)
# int mtls_cert_ekus(const mtls_cert *cert, char ***out, size_t *count)
fn("mtls_cert_ekus", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_cert_crl_urls(const mtls_cert *cert, char ***out, size_t *count)
fn("mtls_cert_crl_urls", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_cert_ocsp_urls(const mtls_cert *cert, char ***out, size_t *count)
fn("mtls_cert_ocsp_urls", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)


def take_string(p):
    """Copies a library-allocated C string and frees it."""
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value).decode("utf-8")
    finally:
        lib.mtls_string_free(p)


# const char *mtls_version(void), int mtls_version_number(void): declared above.
check_version(lib.mtls_version_number(), lib.mtls_version().decode(), path)
