"""Enrollment with a certificate authority and renewal of enrolled identities (issue 27), over the C
ABI's ``mtls_enroll_*``, ``mtls_renew`` and ``mtls_renewer_*``."""
import ctypes
import datetime
from typing import Callable, Optional, Tuple, Union

from . import _callbacks
from . import events as _events
from ._lib import fn, lib, c_void_pp
from ._handle import _Handle, utf8, out_handle
from ._url import listen_endpoint
from .certificate import Certificate
from .errors import check
from .pki import PROFILE_INTERMEDIATE, PROFILE_SERVER, PROFILE_CLIENT

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
fn("mtls_renewer_set_event_callback", ctypes.c_int, ctypes.c_void_p, _events.EVENT_CB, ctypes.c_void_p,
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

    def set_event_callback(self, callback: Optional[Callable[["_events.Event"], None]]) -> None:
        """Calls ``callback(Event)`` for each renewal event, on the thread running :meth:`run_once` (None: stop)."""
        _events._set_callback(lib.mtls_renewer_set_event_callback, self._h, callback)

    def run_once(self, force: bool = False) -> Tuple[int, Optional[datetime.datetime]]:
        """One pass: (identities renewed, the earliest next attempt)."""
        renewed = ctypes.c_size_t(0)
        wake = ctypes.c_int64(0)
        check(lib.mtls_renewer_run_once(self._h, int(force), ctypes.byref(renewed), ctypes.byref(wake)))
        return renewed.value, _events._utc(wake.value)


# ---- Enrollment (issue 27): what `mtls enroll acme|est|pki` does, over mtls_enroll_* ----

MTLS_ENROLL_OPTIONS_VERSION = 2
# mtls_enroll_options.challenge (the header's MTLS_ACME_*).
ACME_HTTP01, ACME_WEBROOT, ACME_TLS_ALPN01, ACME_DNS01 = 1, 2, 3, 4
# The profile names Python takes, as the header's constants (0: the source's default). Which of
# them a source issues (server or client) is the library's rule, not checked here.
_PROFILES = {None: 0, "server": PROFILE_SERVER, "client": PROFILE_CLIENT, "intermediate": PROFILE_INTERMEDIATE}


class _EnrollOptions(ctypes.Structure):
    # typedef struct mtls_enroll_options { ... } mtls_enroll_options;  (version 2)
    _fields_ = [
        ("version", ctypes.c_uint),
        ("key_type", ctypes.c_char_p),
        ("token_uri", ctypes.c_char_p),
        ("pin", ctypes.c_char_p),
        ("profile", ctypes.c_int),
        ("chain_anchors", ctypes.POINTER(ctypes.c_void_p)),
        ("chain_anchor_count", ctypes.c_size_t),
        ("policy", ctypes.c_void_p),
        ("anchors", ctypes.POINTER(ctypes.c_void_p)),
        ("anchor_count", ctypes.c_size_t),
        ("challenge", ctypes.c_int),
        ("listen_address", ctypes.c_char_p),
        ("port", ctypes.c_uint16),
        ("webroot", ctypes.c_char_p),
        ("dns_hook", ctypes.c_char_p),
        ("eab_kid", ctypes.c_char_p),
        ("eab_hmac_key", ctypes.c_char_p),
        ("contact", ctypes.POINTER(ctypes.c_char_p)),
        ("contact_count", ctypes.c_size_t),
        ("timeout_seconds", ctypes.c_int),
        ("user", ctypes.c_char_p),
        ("password", ctypes.c_char_p),
        ("bootstrap", ctypes.c_void_p),
        ("ca_key_password", ctypes.c_char_p),
        # version 2
        ("keep_password", ctypes.c_int),
    ]


_eopts_p = ctypes.POINTER(_EnrollOptions)
# int mtls_enroll_options_init(mtls_enroll_options *opts, unsigned int version)
fn("mtls_enroll_options_init", ctypes.c_int, _eopts_p, ctypes.c_uint)
# int mtls_enroll_acme(mtls_store *store, const char *label, const char *directory_url,
#                      const char *const *names, size_t name_count, const mtls_enroll_options *opts, mtls_cert **out)
fn("mtls_enroll_acme", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
   ctypes.c_size_t, _eopts_p, c_void_pp)
# int mtls_enroll_est(mtls_store *store, const char *label, const char *url, const char *subject,
#                     const mtls_enroll_options *opts, mtls_cert **out)
fn("mtls_enroll_est", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, _eopts_p, c_void_pp)
# int mtls_enroll_pki(mtls_store *store, const char *label, const char *dir, const char *ca_name,
#                     const char *name, const mtls_enroll_options *opts, mtls_cert **out)
fn("mtls_enroll_pki", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
   _eopts_p, c_void_pp)


def _strings(values):
    arr = (ctypes.c_char_p * len(values))(*[utf8(v) for v in values])
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)), len(values), arr


def _certs(certs):
    arr = (ctypes.c_void_p * len(certs))(*[c._h for c in certs])
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p)), len(certs), arr


def _options(key_type=None, token_uri=None, pin=None, profile=None, chain_anchors=(), policy=None, anchors=(), **fields):
    """A filled mtls_enroll_options (fields the caller left out stay at the library's defaults)."""
    o = _EnrollOptions()
    check(lib.mtls_enroll_options_init(ctypes.byref(o), MTLS_ENROLL_OPTIONS_VERSION))
    if profile not in _PROFILES:
        raise ValueError(f"{profile!r} is not a certificate profile name")
    o.key_type, o.token_uri, o.pin, o.profile = utf8(key_type), utf8(token_uri), utf8(pin), _PROFILES[profile]
    o.chain_anchors, o.chain_anchor_count, keep_chain = _certs(list(chain_anchors))
    o.anchors, o.anchor_count, keep_anchors = _certs(list(anchors))
    o.policy = policy._h if policy is not None else None
    keep = [keep_chain, keep_anchors]
    for name, value in fields.items():
        if value is None:
            continue
        if name == "contact":
            o.contact, o.contact_count, arr = _strings(list(value))
            keep.append(arr)
        elif name == "bootstrap":
            o.bootstrap = value._h
        elif isinstance(value, int):
            setattr(o, name, value)
        else:
            setattr(o, name, utf8(value))
    o._keep = keep  # the arrays must live as long as the struct
    return o


def _enrolled(func, *args):
    return Certificate(out_handle(func, *args))


def enroll_acme(store, label: str, directory: str, names, *, http_port: Optional[int] = None,
                webroot: Optional[str] = None, tls_alpn_port: Optional[int] = None, dns_hook: Optional[str] = None,
                listen_address: Optional[str] = None, anchors=(), chain_anchors=(), key_type: Optional[str] = None,
                token_uri: Optional[str] = None, pin: Optional[Union[str, bytes]] = None, eab_kid: Optional[str] = None,
                eab_hmac_key: Optional[Union[str, bytes]] = None, contact=(), timeout: Optional[int] = None,
                policy=None):
    """Enrolls ``names`` (DNS names or IP addresses) with the ACME server whose directory URL is
    ``directory`` and installs the identity in ``store`` (a :class:`mtls.Store`) under ``label``,
    with the record :func:`mtls.renew` uses — ``mtls enroll acme`` (C: ``mtls_enroll_acme``).
    Exactly one challenge: ``http_port`` (a built-in http-01 responder), ``webroot``,
    ``tls_alpn_port`` (a built-in tls-alpn-01 responder) or ``dns_hook`` (a command given
    present|cleanup NAME VALUE). ``anchors``: trust only these :class:`mtls.Certificate` for the
    server's TLS; ``chain_anchors``: the issued chain must validate to one of them. A token key
    with ``token_uri`` (and ``pin``); external account binding with ``eab_kid`` and
    ``eab_hmac_key`` (base64url). Returns the new leaf :class:`mtls.Certificate`. Blocks for the
    exchange with the CA. Raises :class:`mtls.CARejected`, :class:`mtls.ChallengeFailed`,
    :class:`mtls.ConnectError`, :class:`mtls.InvalidArgument`..."""
    methods = {ACME_HTTP01: http_port, ACME_WEBROOT: webroot, ACME_TLS_ALPN01: tls_alpn_port, ACME_DNS01: dns_hook}
    given = [k for k, v in methods.items() if v is not None]
    # opts->challenge names one method: none or several given is passed as 0, and the library's
    # rule (exactly one) refuses it, as it refuses a parameter of another method.
    challenge = given[0] if len(given) == 1 else 0
    if isinstance(names, str):
        names = [names]
    port = http_port if http_port is not None else tls_alpn_port
    if port is not None:  # read by the core: a port outside 0..65535 refused (the struct's uint16 would wrap it)
        listen_address, port = listen_endpoint(listen_address, port)
    o = _options(key_type, token_uri, pin, None, chain_anchors, policy, anchors, challenge=challenge,
                 listen_address=listen_address, port=port, webroot=webroot, dns_hook=dns_hook, eab_kid=eab_kid,
                 eab_hmac_key=eab_hmac_key, contact=contact or None, timeout_seconds=timeout)
    arr, n, keep = _strings(list(names))
    return _enrolled(lib.mtls_enroll_acme, store._h, utf8(label), utf8(directory), arr, n, ctypes.byref(o))


def enroll_est(store, label: str, url: str, subject: str, *, user: Optional[str] = None,
               password: Optional[Union[str, bytes]] = None, bootstrap=None, anchors=(), profile: str = "client",
               key_type: Optional[str] = None, token_uri: Optional[str] = None, pin: Optional[Union[str, bytes]] = None,
               policy=None, keep_password: bool = False):
    """Enrolls with the EST server at ``url`` (``https://host/.well-known/est``) for ``subject``
    (an RFC 4514 DN) with HTTP basic authentication (``user``, ``password``) and/or a
    ``bootstrap`` :class:`mtls.Identity` presented over TLS, and installs the identity in
    ``store`` under ``label`` with its record — ``mtls enroll est`` (C: ``mtls_enroll_est``).
    Renewal (:func:`mtls.renew`) re-enrolls over mutual TLS; with ``keep_password`` the password
    is kept, sealed in the store with the record, and sent again on re-enrollment (for servers
    that ask for HTTP authentication there too). Returns the new leaf :class:`mtls.Certificate`."""
    o = _options(key_type, token_uri, pin, profile, (), policy, anchors, user=user, password=password, bootstrap=bootstrap,
                 keep_password=1 if keep_password else None)
    return _enrolled(lib.mtls_enroll_est, store._h, utf8(label), utf8(url), utf8(subject), ctypes.byref(o))


def enroll_pki(store, label: str, directory, ca: str, name: str, *, profile: str = "server",
               key_type: Optional[str] = None, token_uri: Optional[str] = None, pin: Optional[Union[str, bytes]] = None,
               ca_key_password: Optional[Union[str, bytes]] = None, chain_anchors=(), policy=None):
    """Enrolls ``name`` from the intermediate ``ca`` of the ``mtls pki`` directory ``directory``
    and installs the identity in ``store`` under ``label`` with its record — ``mtls enroll pki``
    (C: ``mtls_enroll_pki``). The chain must validate to ``chain_anchors`` (default: the
    directory's root). Returns the new leaf :class:`mtls.Certificate`."""
    o = _options(key_type, token_uri, pin, profile, chain_anchors, policy, (), ca_key_password=ca_key_password)
    return _enrolled(lib.mtls_enroll_pki, store._h, utf8(label), utf8(str(directory)), utf8(ca), utf8(name),
                     ctypes.byref(o))


# int mtls_enroll_revoke(mtls_store *store, const char *label, int reason, const char *pin, mtls_cert **out)
fn("mtls_enroll_revoke", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, c_void_pp)
REVOKE_NO_REASON = -1

# RFC 5280 CRLReason names, as `mtls enroll revoke --reason` takes them (7 does not exist).
_CRL_REASONS = {"unspecified": 0, "keycompromise": 1, "cacompromise": 2, "affiliationchanged": 3, "superseded": 4,
                "cessationofoperation": 5, "certificatehold": 6, "removefromcrl": 8, "privilegewithdrawn": 9,
                "aacompromise": 10}


def enroll_revoke(store, label: str, reason: Optional[Union[int, str]] = None,
                  pin: Optional[Union[str, bytes]] = None) -> Certificate:
    """Revokes, through its CA (RFC 8555 §7.6), the certificate of the identity ``label`` of
    ``store`` enrolled with :func:`enroll_acme`, signed with the account recorded at enrollment —
    ``mtls enroll revoke`` (C: ``mtls_enroll_revoke``). ``reason``: an RFC 5280 CRLReason code or
    name (``"keyCompromise"``, ``"superseded"``...; None: no reason sent). The identity stays in
    the store. Returns the revoked :class:`mtls.Certificate`. Raises :class:`mtls.CARejected`
    (already revoked...), :class:`mtls.NotFound`, :class:`mtls.InvalidArgument`..."""
    if reason is None:
        code = REVOKE_NO_REASON
    elif isinstance(reason, str):
        if reason.lower() not in _CRL_REASONS:
            raise ValueError(f"{reason!r} is not a CRLReason name")
        code = _CRL_REASONS[reason.lower()]
    else:
        code = int(reason)
    return _enrolled(lib.mtls_enroll_revoke, store._h, utf8(label), code, utf8(pin) if pin is not None else None)
