"""Renewal of enrolled identities (issue 27), over the C ABI's ``mtls_renew``."""
import ctypes
from typing import Optional, Union

from ._lib import fn, lib
from ._handle import utf8
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
