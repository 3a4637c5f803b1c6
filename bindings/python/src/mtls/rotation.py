"""Certificates that change under a running program (issue 26): identity sources (fixed, swapped,
following a store label), policy files that are followed, lifecycle events (store expiry is in
store.py: Store.expiry, earliest_expiry, metrics).

Event callbacks run on libmtls's watcher thread ("mtls-watch") for changes it finds, and on the
calling thread for a swap (IdentitySource.set, Listener.set_identity). An exception raised by a
callback on the watcher thread has no caller to go to: it is printed (traceback) and dropped."""
import ctypes
import os
from typing import Callable, List, Optional

from . import _callbacks
from ._lib import lib, fn, c_void_pp
from ._handle import _Handle, utf8, out_handle, out_string
from .errors import check
from .identity import Identity
from .store import Store, ExpiryItem  # noqa: F401 - ExpiryItem is exported from here too
from .trust import Policy
from .events import (  # noqa: F401 - the event names are exported from here too, as before
    EVENT_KINDS, EVENT_REVOCATION_FETCH_FAILED, EVENT_CB, EventC, Event, _set_callback)

WATCH_OPTIONS_VERSION = 1
LISTENER_COUNTERS_VERSION = 1


class WatchOptions(ctypes.Structure):
    """typedef struct mtls_watch_options (version 1)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("warning_days", ctypes.c_int),
        ("token_pin", ctypes.c_char_p),
    ]


class ListenerCountersC(ctypes.Structure):
    """typedef struct mtls_listener_counters (version 1)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("accepted", ctypes.c_uint64),
        ("resumed", ctypes.c_uint64),
        ("refused", ctypes.c_uint64),
        ("current_connections", ctypes.c_int64),
    ]


_wopts_p = ctypes.POINTER(WatchOptions)

# int mtls_watch_options_init(mtls_watch_options *opts, unsigned int version)
fn("mtls_watch_options_init", ctypes.c_int, _wopts_p, ctypes.c_uint)
# int mtls_identity_source_new(const mtls_identity *identity, mtls_identity_source **out)
fn("mtls_identity_source_new", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_identity_source_follow_store(mtls_store *store, const char *label, const mtls_watch_options *opts,
#                                       mtls_identity_source **out)
fn("mtls_identity_source_follow_store", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, _wopts_p, c_void_pp)
# int mtls_identity_source_set(mtls_identity_source *source, const mtls_identity *identity)
fn("mtls_identity_source_set", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
# int mtls_identity_source_current(const mtls_identity_source *source, mtls_identity **out)
fn("mtls_identity_source_current", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_identity_source_set_event_callback(mtls_identity_source *source, mtls_event_cb cb, void *userdata,
#                                             void (*destroy)(void *userdata))
fn("mtls_identity_source_set_event_callback", ctypes.c_int, ctypes.c_void_p, EVENT_CB, ctypes.c_void_p,
   _callbacks.DESTROY_CB)
# void mtls_identity_source_free(mtls_identity_source *source)
fn("mtls_identity_source_free", None, ctypes.c_void_p)
# int mtls_listener_new_with_source(const char *address, uint16_t port, const mtls_listener_options *opts,
#                                   mtls_identity_source *source, mtls_listener **out)
fn("mtls_listener_new_with_source", ctypes.c_int, ctypes.c_char_p, ctypes.c_uint16, ctypes.c_void_p, ctypes.c_void_p,
   c_void_pp)
# int mtls_listener_set_identity(mtls_listener *listener, const mtls_identity *identity)
fn("mtls_listener_set_identity", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
# int mtls_listener_set_event_callback(mtls_listener *listener, mtls_event_cb cb, void *userdata,
#                                      void (*destroy)(void *userdata))
fn("mtls_listener_set_event_callback", ctypes.c_int, ctypes.c_void_p, EVENT_CB, ctypes.c_void_p, _callbacks.DESTROY_CB)
# int mtls_listener_get_counters(const mtls_listener *listener, mtls_listener_counters *out)
fn("mtls_listener_get_counters", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ListenerCountersC))
# int mtls_listener_refused_count(const mtls_listener *listener, int code, uint64_t *count)
fn("mtls_listener_refused_count", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))
# int mtls_listener_metrics(const mtls_listener *listener, char **out)
fn("mtls_listener_metrics", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
# int mtls_ssl_ctx_configure_source(void *ssl_ctx, mtls_identity_source *source, const mtls_policy *policy,
#                                   int accepts_clients, const mtls_trust_overrides *overrides)
fn("mtls_ssl_ctx_configure_source", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
   ctypes.c_void_p)
# int mtls_policy_watch_new(const char *path, const mtls_watch_options *opts, mtls_policy_watch **out)
fn("mtls_policy_watch_new", ctypes.c_int, ctypes.c_char_p, _wopts_p, c_void_pp)
# int mtls_policy_watch_policy(const mtls_policy_watch *watch, mtls_policy **out)
fn("mtls_policy_watch_policy", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_policy_watch_reload(mtls_policy_watch *watch)
fn("mtls_policy_watch_reload", ctypes.c_int, ctypes.c_void_p)
# int mtls_policy_watch_set_event_callback(mtls_policy_watch *watch, mtls_event_cb cb, void *userdata,
#                                          void (*destroy)(void *userdata))
fn("mtls_policy_watch_set_event_callback", ctypes.c_int, ctypes.c_void_p, EVENT_CB, ctypes.c_void_p,
   _callbacks.DESTROY_CB)
# void mtls_policy_watch_free(mtls_policy_watch *watch)
fn("mtls_policy_watch_free", None, ctypes.c_void_p)
# int mtls_policy_follow_store_anchors(mtls_policy *policy, mtls_store *store, const char *const *labels, size_t count,
#                                      mtls_anchor_watch **out)
fn("mtls_policy_follow_store_anchors", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
   ctypes.c_size_t, c_void_pp)
# int mtls_anchor_watch_set_event_callback(mtls_anchor_watch *watch, mtls_event_cb cb, void *userdata,
#                                          void (*destroy)(void *userdata))
fn("mtls_anchor_watch_set_event_callback", ctypes.c_int, ctypes.c_void_p, EVENT_CB, ctypes.c_void_p,
   _callbacks.DESTROY_CB)
# void mtls_anchor_watch_free(mtls_anchor_watch *watch)
fn("mtls_anchor_watch_free", None, ctypes.c_void_p)
def _watch_options(warning_days: Optional[int], token_pin) -> WatchOptions:
    """The watch options; warning_days None keeps the library's window (mtls_watch_options_init
    writes it: 14 days), not a number retyped here."""
    o = WatchOptions()
    check(lib.mtls_watch_options_init(ctypes.byref(o), WATCH_OPTIONS_VERSION))
    if warning_days is not None:
        o.warning_days = int(warning_days)
    o.token_pin = utf8(token_pin)
    return o


class IdentitySource(_Handle):
    """The identity a Listener, connections (ConnectOptions.identity_source) or a configured
    SSL_CTX present: IdentitySource(identity) is swapped with set(); IdentitySource.follow(store,
    label) follows a store label (a replacement by another process is in force within a second;
    one that fails to load keeps the last good identity and fires a "reload_failed" event). Each
    handshake takes the identity in force when it starts, whole.

    The adapters (requests, httpx, mtls.httpx.AsyncTransport, urllib, http.client) and
    mtls.asyncio take it as ``identity_source=``: a kept-alive pooled connection keeps the
    identity it was made with (as Go's transport); every new connection presents the identity in
    force when it starts and never resumes a session made with another."""
    _free = "mtls_identity_source_free"

    def __init__(self, identity: Optional[Identity] = None, *, _handle: Optional[int] = None):
        if _handle is None:
            if identity is None:
                raise TypeError("IdentitySource needs an identity (or use IdentitySource.follow)")
            _handle = out_handle(lib.mtls_identity_source_new, identity._h)
        super().__init__(_handle)

    @classmethod
    def follow(cls, store: Store, label: str, *, warning_days: Optional[int] = None, token_pin=None) -> "IdentitySource":
        """A source following `label` in `store` (a stored identity, else a token identity). An
        "expiry_warning" event fires `warning_days` before the identity expires (None: the
        library's window). The source keeps `store` open (closing a Store closes its file for
        every holder)."""
        o = _watch_options(warning_days, token_pin)
        source = cls(_handle=out_handle(lib.mtls_identity_source_follow_store, store._h, utf8(label), ctypes.byref(o)))
        # Closing the Store (its __del__ too) closes the file for every holder: keep it open.
        source._store = store
        return source

    def set(self, identity: Identity) -> None:
        """Presents `identity` from the next handshake on. An identity whose certificate has
        expired or is not valid yet raises InvalidArgument (and fires "reload_failed"): the
        identity in force stays."""
        if not isinstance(identity, Identity):
            raise TypeError("IdentitySource.set needs an mtls.Identity (for a store label, use IdentitySource.follow)")
        check(lib.mtls_identity_source_set(self._h, identity._h))

    @property
    def current(self) -> Identity:
        """The identity in force now."""
        return Identity(out_handle(lib.mtls_identity_source_current, self._h))

    def set_event_callback(self, callback: Optional[Callable[[Event], None]]) -> None:
        """Calls `callback(Event)` for each rotation, failed reload and expiry warning (None: stop)."""
        _set_callback(lib.mtls_identity_source_set_event_callback, self._h, callback)


class PolicyWatch(_Handle):
    """A Policy loaded from a JSON file and kept up to date with it (`.policy`): a changed file is
    parsed in full and only then put in force; a broken one keeps the old settings and fires a
    "reload_failed" event."""
    _free = "mtls_policy_watch_free"

    def __init__(self, path: str):
        super().__init__(out_handle(lib.mtls_policy_watch_new, utf8(os.fspath(path)), None))

    @property
    def policy(self) -> Policy:
        """The followed policy (give it to listeners and connections)."""
        p = Policy.__new__(Policy)
        _Handle.__init__(p, out_handle(lib.mtls_policy_watch_policy, self._h))
        return p

    def reload(self) -> None:
        """Reloads now (a broken file is reported through the event callback, not raised)."""
        check(lib.mtls_policy_watch_reload(self._h))

    def set_event_callback(self, callback: Optional[Callable[[Event], None]]) -> None:
        _set_callback(lib.mtls_policy_watch_set_event_callback, self._h, callback)


class AnchorWatch(_Handle):
    """Anchors taken from store labels, kept up to date in `policy`: the certificates stored
    under `labels` are added to its anchors now, and swapped for their replacements (by another
    process too) within a second; a label that fails to load keeps the anchors in force and fires
    a "reload_failed" event."""
    _free = "mtls_anchor_watch_free"

    def __init__(self, policy: Policy, store: Store, labels: List[str]):
        arr = (ctypes.c_char_p * len(labels))(*[utf8(label) for label in labels])
        super().__init__(out_handle(lib.mtls_policy_follow_store_anchors, policy._h, store._h, arr, len(labels)))
        self._store = store  # closing the Store closes the file for every holder: keep it open

    def set_event_callback(self, callback: Optional[Callable[[Event], None]]) -> None:
        _set_callback(lib.mtls_anchor_watch_set_event_callback, self._h, callback)
