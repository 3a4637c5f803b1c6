"""The one owning handle class and the call shapes the C ABI repeats (private; use the mtls package).

Every C function that can fail returns a status and writes its results through out-parameters;
the helpers here make the out-parameter, check the status and take ownership of the result, so
each binding is one line that names the C function."""
import ctypes
import warnings
from typing import Any, Optional, TypeVar

from ._lib import lib, take_string, c_void_pp
from .errors import check


_H = TypeVar("_H", bound="_Handle")


class _Handle:
    """Owns one libmtls handle (`self._h`) and frees it exactly once: on close(), at the end of a
    `with` block, or when collected. A subclass names its C destructor in `_free`."""
    _free = None  # the name of the C function that frees the handle, e.g. "mtls_cert_free"

    def __init__(self, _handle: Optional[int]) -> None:
        self._h = _handle

    def close(self) -> None:
        # getattr: a constructor that failed before setting _h still reaches __del__
        if getattr(self, "_h", None):
            getattr(lib, self._free)(self._h)
            self._h = None

    def __enter__(self: "_H") -> "_H":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the library may be gone
            pass


def utf8(s):
    """None stays None (a NULL pointer); str is UTF-8 encoded; bytes-like pass through as bytes."""
    if s is None:
        return None
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def take_bytes(p, n):
    """Copies a library-allocated buffer (a c_void_p and a c_size_t) and frees it; None for NULL."""
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value, n.value)
    finally:
        lib.mtls_bytes_free(p)


def out_value(ctype, func, *args):
    """func(*args, &value) for a scalar out-parameter of `ctype`; returns its value."""
    out = ctype()
    check(func(*args, ctypes.byref(out)))
    return out.value


def out_handle(func, *args):
    """func(*args, &handle); returns the new handle's address (None when the C side wrote NULL)."""
    return out_value(ctypes.c_void_p, func, *args)


def out_string(func, *args):
    """func(*args, &string) for a `char **` the caller frees; returns the str (or None)."""
    out = ctypes.c_void_p()
    check(func(*args, ctypes.byref(out)))
    return take_string(out)


def out_bytes(func, *args):
    """func(*args, &data, &len) for a `uint8_t **` the caller frees; returns the bytes (or None)."""
    p, n = ctypes.c_void_p(), ctypes.c_size_t()
    check(func(*args, ctypes.byref(p), ctypes.byref(n)))
    return take_bytes(p, n)


def take_strings(func, *args):
    """func(*args, &array, &count) for a library-allocated array of strings: copies them, then
    frees the array (mtls_string_list_free)."""
    arr, n = c_void_pp(), ctypes.c_size_t()
    check(func(*args, ctypes.byref(arr), ctypes.byref(n)))
    try:
        return [ctypes.string_at(arr[i]).decode("utf-8") for i in range(n.value)]
    finally:
        lib.mtls_string_list_free(arr, n)


def out_list(func, *args, item, free):
    """func(*args, &array, &count) for a library-allocated array of handles: `item` makes each
    element's Python value (taking its own reference where it keeps one), then `free` releases
    the array."""
    arr, n = c_void_pp(), ctypes.c_size_t()
    check(func(*args, ctypes.byref(arr), ctypes.byref(n)))
    try:
        return [item(arr[i]) for i in range(n.value)]
    finally:
        free(arr, n)


class LibraryWarning(UserWarning):
    """A warning libmtls gave while going on: a secret file (PIN, password, store secret or key,
    private key) that its group may read was used. One that others may write or everyone may read
    is refused instead (InvalidArgument, naming the file and the ``chmod 600`` that fixes it)."""


def take_warnings() -> "list[str]":
    """The warnings libmtls gave on this thread since the last call, oldest first; clears them
    (``mtls_take_warnings``)."""
    return take_strings(lib.mtls_take_warnings)


def warn_library_warnings(stacklevel: int = 3) -> None:
    """Issues this thread's libmtls warnings as :class:`LibraryWarning` (after a call that read a
    secret file)."""
    for w in take_warnings():
        warnings.warn(w, LibraryWarning, stacklevel=stacklevel)
