"""Renewal of enrolled identities (issue 27), over the C ABI's ``mtls_renew`` and ``mtls_renewer_*``."""
import ctypes
import datetime
from typing import Callable, Optional, Tuple, Union

from . import _callbacks
from . import rotation as _rotation
from ._lib import fn, lib, c_void_pp
from ._handle import _Handle, utf8, out_handle
from .errors import check

# int mtls_renew(mtls_store *store, const char *label, int force, const mtls_policy *policy,
#                const char *pin, int *renewed)
fn("mtls_renew", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
   ctypes.POINTER(ctypes.c_int))


def renew(store, label: str, force: bool = False, policy=None, pin: Optional[Union[str, bytes]] = None) -> bool:
    """Renews the identity labelled ``label`` in ``store`` (a :class:`mtls.Store`) from its enrollment
    record (``mtls enroll``), when due (two thirds of its lifetime, with jitter) or now with ``force``.
    The new identity replaces the old one only once proven (key matches, chain validates under
    ``policy``, else the recorded anchors). Returns True when a new identity was installed. Blocks
    for the exchange with the CA: call it off an event loop. Raises :class:`mtls.CARejected`,
    :class:`mtls.ChallengeFailed` (nothing installed), :class:`mtls.NotFound`..."""
    renewed = ctypes.c_int(0)
    check(lib.mtls_renew(store._h, utf8(label), int(force), policy._h if policy is not None else None,
                         utf8(pin) if pin is not None else None, ctypes.byref(renewed)))
    return bool(renewed.value)


# ---- The renewer and its events (issue 27) ----
RENEWER_OPTIONS_VERSION = 1


class RenewerOptions(ctypes.Structure):
    """typedef struct mtls_renewer_options (version 1)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("policy", ctypes.c_void_p),
        ("token_pin", ctypes.c_char_p),
        ("ca_key_password", ctypes.c_char_p),
        ("delete_previous_keys_after", ctypes.c_int64),
    ]


_ropts_p = ctypes.POINTER(RenewerOptions)
# int mtls_renewer_options_init(mtls_renewer_options *opts, unsigned int version)
fn("mtls_renewer_options_init", ctypes.c_int, _ropts_p, ctypes.c_uint)
# int mtls_renewer_new(mtls_store *store, const char *label, const mtls_renewer_options *opts, mtls_renewer **out)
fn("mtls_renewer_new", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, _ropts_p, c_void_pp)
# int mtls_renewer_set_event_callback(mtls_renewer *renewer, mtls_event_cb cb, void *userdata,
#                                     void (*destroy)(void *userdata))
fn("mtls_renewer_set_event_callback", ctypes.c_int, ctypes.c_void_p, _rotation.EVENT_CB, ctypes.c_void_p,
   _callbacks.DESTROY_CB)
# int mtls_renewer_run_once(mtls_renewer *renewer, int force, size_t *renewed, int64_t *next_wake)
fn("mtls_renewer_run_once", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
   ctypes.POINTER(ctypes.c_int64))
# void mtls_renewer_free(mtls_renewer *renewer)
fn("mtls_renewer_free", None, ctypes.c_void_p)


class Renewer(_Handle):
    """Renews the enrolled identities of a Store (``label``, or every enrolled identity when None)
    and reports what it does as :class:`mtls.rotation.Event` objects through
    :meth:`set_event_callback` — "renewal_scheduled", "renewal_succeeded", "renewal_failed",
    "renewal_not_installed" and "expiry_warning" (expires before the next attempt). Call
    :meth:`run_once` from your loop and sleep until the time it returns; failures back off
    exponentially and are events, not exceptions. ``delete_previous_keys_after`` (seconds; None:
    keep) deletes a token key a renewal replaced once that long has passed."""
    _free = "mtls_renewer_free"

    def __init__(self, store, label: Optional[str] = None, *, policy=None, pin: Optional[Union[str, bytes]] = None,
                 ca_key_password: Optional[Union[str, bytes]] = None, delete_previous_keys_after: Optional[int] = None):
        o = RenewerOptions()
        check(lib.mtls_renewer_options_init(ctypes.byref(o), RENEWER_OPTIONS_VERSION))
        o.policy = policy._h if policy is not None else None
        o.token_pin = utf8(pin) if pin is not None else None
        o.ca_key_password = utf8(ca_key_password) if ca_key_password is not None else None
        if delete_previous_keys_after is not None:
            o.delete_previous_keys_after = int(delete_previous_keys_after)
        super().__init__(out_handle(lib.mtls_renewer_new, store._h, utf8(label) if label is not None else None,
                                    ctypes.byref(o)))
        self._store = store  # closing the Store closes its file for every holder: keep it open

    def set_event_callback(self, callback: Optional[Callable[["_rotation.Event"], None]]) -> None:
        """Calls ``callback(Event)`` for each renewal event, on the thread running :meth:`run_once` (None: stop)."""
        _rotation._set_callback(lib.mtls_renewer_set_event_callback, self._h, callback)

    def run_once(self, force: bool = False) -> Tuple[int, Optional[datetime.datetime]]:
        """One pass: (identities renewed, the earliest next attempt)."""
        renewed = ctypes.c_size_t(0)
        wake = ctypes.c_int64(0)
        check(lib.mtls_renewer_run_once(self._h, int(force), ctypes.byref(renewed), ctypes.byref(wake)))
        return renewed.value, _rotation._utc(wake.value)
