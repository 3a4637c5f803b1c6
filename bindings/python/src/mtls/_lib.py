"""Loads libmtls.so and declares the C prototypes (private; use the mtls package)."""
import ctypes
import ctypes.util
import os

WRITTEN_FOR = (0, 1)  # the MAJOR.MINOR this module was written against


def _candidates() -> "list[str]":
    """Where libmtls.so is looked for, in order: beside this package (a wheel ships it there),
    then MTLS_LIBRARY, then the linker's search (ctypes.util.find_library), then the usual
    install prefixes."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libmtls.so"), os.path.join(here, "libmtls.so.0")]
    out = [c for c in out if os.path.exists(c)]
    env = os.environ.get("MTLS_LIBRARY")
    if env:
        out.append(env)
    found = ctypes.util.find_library("mtls")
    if found:
        out.append(found)
    out += ["libmtls.so.0", "/usr/local/lib/libmtls.so.0", "/usr/lib/libmtls.so.0"]
    return out


def _load() -> ctypes.CDLL:
    tried = []
    for c in _candidates():
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            tried.append(f"{c}: {e}")
    raise ImportError("cannot load libmtls.so; install it (make install PREFIX=...) or set "
                      "MTLS_LIBRARY to its path. Tried:\n  " + "\n  ".join(tried))


lib = _load()

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


def take_string(p):
    """Copies a library-allocated C string and frees it."""
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value).decode("utf-8")
    finally:
        lib.mtls_string_free(p)


_major, _minor = (lib.mtls_version_number() // 10000, lib.mtls_version_number() // 100 % 100)
if _major != WRITTEN_FOR[0] or _minor < WRITTEN_FOR[1]:
    raise ImportError(f"libmtls {lib.mtls_version().decode()} is not compatible with these bindings "
                      f"(written for {WRITTEN_FOR[0]}.{WRITTEN_FOR[1]})")
