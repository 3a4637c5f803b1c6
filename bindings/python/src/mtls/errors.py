"""The exceptions: one class per libmtls status code, all under :class:`Error`.

Every class is declared here (IDEs and type checkers see them) and also derives from the built-in
exception that fits where one does, so ``except LookupError`` or ``except TimeoutError`` catch
libmtls's not-found and timeout too. ``.code`` is the C status, ``.name`` its stable snake_case
name (``mtls_error_name``), ``.message`` the library's message for this failure.

Exceptions raised inside a Python callback that libmtls calls (a PIN callback, a trust report
callback) cannot cross the C frames; they are stored for the thread that made the C call and
re-raised on it when that call returns (see :func:`check`)."""
import re
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Type

from ._lib import lib

if TYPE_CHECKING:  # pragma: no cover
    from .trust import TrustReason, TrustResult


class Error(Exception):
    """A libmtls failure: ``.code`` (the C status), ``.name`` (stable snake_case), ``.message``."""
    code: int = -3
    name: str = "internal"

    def __init__(self, message: str = "", code: Optional[int] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message


#: The name the first bindings used; the same class.
MTLSError = Error


class InvalidArgument(Error, ValueError):
    """A NULL or malformed argument, a bad size, an out-of-range index."""
    code, name = -1, "invalid_argument"


class NoMemory(Error, MemoryError):
    code, name = -2, "no_memory"


class Internal(Error):
    code, name = -3, "internal"


class IOFailure(Error, OSError):
    """A file could not be read or written (``IOError_`` is the same class)."""
    code, name = -4, "io"


IOError_ = IOFailure


class ParseError(Error, ValueError):
    """A certificate, policy or other input was not understood."""
    code, name = -5, "parse"


class BufferTooSmall(Error):
    code, name = -6, "buffer_too_small"


class NotFound(Error, LookupError):
    """No such file, label or object."""
    code, name = -7, "not_found"


class BadPassword(Error):
    """A missing or wrong password (PKCS#12, encrypted key)."""
    code, name = -10, "bad_password"


class Corrupt(Error):
    code, name = -11, "corrupt"


class NotPKCS12(Error):
    code, name = -12, "not_pkcs12"


class NoIdentity(Error):
    code, name = -13, "no_identity"


class Unsupported(Error):
    code, name = -14, "unsupported"


class KeyMismatch(Error):
    code, name = -15, "key_mismatch"


class LimitExceeded(Error):
    code, name = -16, "limit_exceeded"


class Duplicate(Error):
    code, name = -20, "duplicate"


class BadSecret(Error):
    code, name = -21, "bad_secret"


class NotAStore(Error):
    code, name = -22, "not_a_store"


class SchemaTooNew(Error):
    code, name = -23, "schema_too_new"


class Locked(Error):
    code, name = -24, "locked"


class ReadOnly(Error):
    code, name = -25, "read_only"


class DiskFull(Error):
    code, name = -26, "disk_full"


class InvalidPolicy(Error, ValueError):
    code, name = -30, "invalid_policy"


class TrustError(Error):
    """libmtls's policy refused the peer. ``.evaluation`` is the :class:`~mtls.TrustResult`
    (None when it could not be read) and ``.reasons`` its reasons (``.codes`` their codes)."""
    code, name = -31, "untrusted"

    def __init__(self, message: str = "", code: Optional[int] = None,
                 evaluation: "Optional[TrustResult]" = None) -> None:
        super().__init__(message, code)
        self.evaluation = evaluation

    @property
    def reasons(self) -> "List[TrustReason]":
        return list(self.evaluation.reasons) if self.evaluation is not None else []

    @property
    def codes(self) -> List[str]:
        return [r.code for r in self.reasons]

    def __str__(self) -> str:
        # The library's message often names the codes already ("[unknown_issuer, certificate 1]"):
        # only the ones it does not name are added, so none is said twice.
        missing = [c for c in dict.fromkeys(self.codes) if not re.search(rf"\b{re.escape(c)}\b", self.message)]
        if missing:
            return f"{self.message} [{', '.join(missing)}]"
        return self.message


class Untrusted(TrustError):
    """MTLS_E_UNTRUSTED: the class raised for that code (a :class:`TrustError`, whose code and
    name it keeps: each code is declared by one class)."""


class ConnectError(Error, ConnectionError):
    """The TCP connection could not be made."""
    code, name = -40, "connect"


class Timeout(Error, TimeoutError):
    code, name = -41, "timeout"


class HandshakeError(Error):
    code, name = -42, "handshake"


class PeerAlert(Error):
    """The peer refused us (a TLS alert)."""
    code, name = -43, "peer_alert"


class WantRead(Error, BlockingIOError):
    code, name = -44, "want_read"


class WantWrite(Error, BlockingIOError):
    code, name = -45, "want_write"


class Closed(Error, ConnectionError):
    """The connection is closed."""
    code, name = -46, "closed"


class NoMatchingIdentity(Error):
    code, name = -47, "no_matching_identity"


class TokenError(Error):
    code, name = -50, "token"


class PinError(TokenError):
    """The parent of the PIN failures: PinIncorrect, PinLocked, PinRequired. A family, not a
    status: it declares no code of its own (its ``.code`` is its parent's, MTLS_E_TOKEN), so
    every code is declared by exactly one class (``make test-abi`` checks it)."""


class PinIncorrect(PinError):
    code, name = -51, "pin_incorrect"


class PinLocked(PinError):
    code, name = -52, "pin_locked"


class TokenNotPresent(TokenError):
    code, name = -53, "token_not_present"


class TokenRemoved(TokenError):
    code, name = -54, "token_removed"


class BadURI(Error, ValueError):
    code, name = -55, "bad_uri"


class PinRequired(PinError):
    code, name = -56, "pin_required"


class TruncatedError(Error, ConnectionError):
    """The peer closed the connection without close_notify: what was read may be cut short (as
    :class:`ssl.SSLEOFError`). ``Connection(..., suppress_ragged_eofs=True)`` reads it as a
    clean end of data instead."""
    code, name = -48, "truncated"


class UpgradeRequired(Error):
    """A store made before row authentication: review and upgrade it with
    :meth:`mtls.store.Store.upgrade` (or ``mtls store upgrade``) before opening it."""
    code, name = -57, "upgrade_required"


# Enrollment and renewal (issue 27)
class CARejected(Error):
    """The certificate authority (ACME, EST) refused the request; the message carries its detail."""
    code, name = -70, "ca_rejected"


class ChallengeFailed(Error):
    """A challenge was not validated, or a renewed identity could not be proven (key or chain)."""
    code, name = -71, "challenge_failed"


_CLASSES: List[Type[Error]] = [
    InvalidArgument, NoMemory, Internal, IOFailure, ParseError, BufferTooSmall, NotFound, BadPassword, Corrupt,
    NotPKCS12, NoIdentity, Unsupported, KeyMismatch, LimitExceeded, Duplicate, BadSecret, NotAStore, SchemaTooNew,
    Locked, ReadOnly, DiskFull, InvalidPolicy, Untrusted, ConnectError, Timeout, HandshakeError, PeerAlert, WantRead,
    WantWrite, Closed, NoMatchingIdentity, TokenError, PinIncorrect, PinLocked, TokenNotPresent, TokenRemoved, BadURI,
    PinRequired, TruncatedError, UpgradeRequired, CARejected, ChallengeFailed,
]
#: libmtls's failures of the TLS layer itself: what the HTTP libraries call SSL errors.
TLS_FAILURES: Tuple[Type[Error], ...] = (TrustError, HandshakeError, PeerAlert, NoMatchingIdentity, TruncatedError)

#: The exception class of each C status code.
BY_CODE: Dict[int, Type[Error]] = {c.code: c for c in _CLASSES}


# ---- libmtls errors as an HTTP library's own exceptions

_AS_HTTP: Dict[Tuple[type, type], type] = {}


def as_http_error(e: Error, base: Type[BaseException], **init: Any) -> BaseException:
    """`e` as an instance of a class derived from both the HTTP library's exception `base` (say
    ``requests.exceptions.SSLError`` or ``httpx.ConnectError``) and `e`'s own class, so both the
    HTTP library's ``except`` clauses and libmtls's catch it; it keeps ``.code``, ``.name``,
    ``.message`` (and a :class:`TrustError`'s ``.evaluation``) and its text. `init` are the
    keyword arguments of `base` (``request=``). The classes are made once per pair."""
    key = (type(e), base)
    cls = _AS_HTTP.get(key)
    if cls is None:
        cls = type(type(e).__name__, (base, type(e)),
                   {"__module__": __name__, "__str__": type(e).__str__,
                    "__doc__": f"{type(e).__name__} raised as {base.__module__}.{base.__qualname__}."})
        _AS_HTTP[key] = cls
    text = str(e)
    out = cls.__new__(cls, text)
    base.__init__(out, text, **init)  # type: ignore[misc]
    out.__dict__.update(e.__dict__)
    out.__cause__, out.__context__ = e.__cause__, e.__context__
    out.__traceback__ = e.__traceback__
    return out


# ---- exceptions raised inside callbacks, per thread

class _Pending(threading.local):
    exc: Optional[BaseException] = None  # each thread's, until stashed: read without a lookup failing


_pending = _Pending()


def stash_callback_exception(e: BaseException) -> None:
    """Called by a callback thunk (on the thread libmtls called it on, which is the thread of the
    C call that triggered it): keeps the first exception until that call returns."""
    if _pending.exc is None:
        _pending.exc = e


def take_callback_exception() -> Optional[BaseException]:
    """The exception a callback raised on this thread since the last check, cleared."""
    e = _pending.exc
    if e is not None:
        _pending.exc = None
    return e


def check(rc: int) -> None:
    """After a C call: re-raises what a callback raised during it on this thread (the C error,
    if any, becomes its context), then raises the exception for a non-zero status with the
    thread's last error message."""
    if not rc and _pending.exc is None:
        return  # the common case (each read and write): one thread-local read
    pending = take_callback_exception()
    err = None
    if rc != 0:
        msg = (lib.mtls_last_error() or b"").decode("utf-8", "replace") or lib.mtls_strerror(rc).decode()
        err = BY_CODE.get(rc, Error)(msg, rc)
    if pending is not None:
        if err is not None:
            raise pending from err
        raise pending
    if err is not None:
        raise err


def _verify_names() -> None:
    """The names above must be libmtls's own (mtls_error_name), checked once at import: a
    difference is a bug in these bindings (``make test-abi`` reports it), never patched over."""
    wrong = [f"{c.__name__}: {c.name!r}, the library says {lib.mtls_error_name(c.code).decode()!r}"
             for c in _CLASSES if lib.mtls_error_name(c.code).decode() != c.name]
    if wrong:
        raise ImportError("mtls.errors does not match the library's error names: " + "; ".join(wrong))


_verify_names()

__all__ = ["Error", "MTLSError", "TrustError", "PinError", "IOError_", "BY_CODE", "check"] + [c.__name__ for c in _CLASSES]
