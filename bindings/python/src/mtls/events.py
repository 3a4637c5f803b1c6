"""Lifecycle events (mtls_event): the kinds, the Event a callback receives, and the one C
callback thunk every event source (identity sources, listeners, policy watches, anchor watches,
renewers, policies) registers through. A module of its own so that trust.py (Policy's revocation
events) and rotation.py (the watchers) both use it without importing each other."""
import ctypes
import datetime
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

from . import _callbacks
from .errors import check, stash_callback_exception, BY_CODE, Error

#: mtls_event kinds
EVENT_KINDS = {1: "identity_rotated", 2: "policy_reloaded", 3: "reload_failed", 4: "expiry_warning",
               # Renewal events (issue 27), from a Renewer (enrollment.py)
               5: "renewal_scheduled", 6: "renewal_succeeded", 7: "renewal_failed", 8: "renewal_not_installed"}
# Revocation events (issue 28), reported by a Policy (Policy.set_event_callback).
EVENT_REVOCATION_FETCH_FAILED = 16
EVENT_KINDS[EVENT_REVOCATION_FETCH_FAILED] = "revocation_fetch_failed"

class EventC(ctypes.Structure):
    """typedef struct mtls_event."""
    _fields_ = [
        ("kind", ctypes.c_int),
        ("label", ctypes.c_char_p),
        ("subject", ctypes.c_char_p),
        ("sha256", ctypes.c_char_p),
        ("not_after", ctypes.c_int64),
        ("error_code", ctypes.c_int),
        ("message", ctypes.c_char_p),
        ("next_attempt", ctypes.c_int64),
    ]


#: void (*mtls_event_cb)(const mtls_event *event, void *userdata)
EVENT_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(EventC), ctypes.c_void_p)


def _utc(seconds: int) -> Optional[datetime.datetime]:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc) if seconds else None


@dataclass(frozen=True)
class Event:
    """One lifecycle event: kind is "identity_rotated", "policy_reloaded", "reload_failed",
    "expiry_warning", or from a Renewer "renewal_scheduled", "renewal_succeeded", "renewal_failed",
    "renewal_not_installed", or from a Policy "revocation_fetch_failed" (label: the URL; subject: the
    certificate whose status was sought); error is the exception class a reload, renewal or fetch
    failed with (None otherwise); next_attempt, for renewal events, when the identity is next
    renewed (or retried)."""
    kind: str
    label: Optional[str]
    subject: Optional[str]
    sha256: Optional[str]
    not_after: Optional[datetime.datetime]
    error: Optional[type]
    message: str
    next_attempt: Optional[datetime.datetime] = None


def _text(b: Optional[bytes]) -> Optional[str]:
    return b.decode("utf-8", "replace") if b else None


def _event_thunk(event, userdata):
    try:
        callback = _callbacks.lookup(userdata)
        if callback is None or not event:
            return
        e = event.contents
        callback(Event(EVENT_KINDS.get(e.kind, str(e.kind)), _text(e.label), _text(e.subject), _text(e.sha256),
                       _utc(e.not_after), BY_CODE.get(e.error_code, Error) if e.error_code else None,
                       _text(e.message) or "", _utc(e.next_attempt)))
    except BaseException as exc:  # noqa: BLE001 - on the calling thread: re-raised after the C call
        stash_callback_exception(exc)
        traceback.print_exc()


_EVENT = EVENT_CB(_event_thunk)


def _set_callback(func, h, callback: Optional[Callable[[Event], None]]) -> None:
    if callback is None:
        check(func(h, EVENT_CB(), None, _callbacks.DESTROY_CB()))
        return
    key = _callbacks.register(callback)
    check(func(h, _EVENT, key, _callbacks.DESTROY))
