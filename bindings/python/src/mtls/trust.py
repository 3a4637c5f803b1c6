"""Trust policies and evaluation: anchors, host rules, SPKI pins, and mtls_evaluate."""
import ctypes
import datetime
import functools
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _callbacks
from ._lib import lib, fn, c_void_pp, c_size_p, c_int_p
from ._handle import _Handle, utf8, out_handle, out_string, out_value, take_strings
from .certificate import Certificate
from .events import EVENT_CB, _set_callback as _set_event_callback
from .errors import check, stash_callback_exception

PURPOSE_DEFAULT, PURPOSE_SERVER, PURPOSE_CLIENT = 0, 1, 2
_PURPOSES = {None: PURPOSE_DEFAULT, "server": PURPOSE_SERVER, "client": PURPOSE_CLIENT}
_KINDS = {0: "proceed", 1: "recoverable_failure", 2: "fatal_failure"}
PIN_STOP_ENFORCING, PIN_FAIL_CLOSED = 0, 1
# Revocation (mtls.h, "Revocation"): modes and source flags.
REVOCATION_OFF, REVOCATION_SOFT, REVOCATION_HARD = 0, 1, 2
REVOCATION_SOURCE_CRL, REVOCATION_SOURCE_OCSP = 1, 2
_REVOCATION_MODES = {"off": REVOCATION_OFF, "soft": REVOCATION_SOFT, "hard": REVOCATION_HARD}
_REVOCATION_SOURCES = {"crl": REVOCATION_SOURCE_CRL, "ocsp": REVOCATION_SOURCE_OCSP}
# Who may connect (mtls.h, "allow-lists"): the kinds of allow-list entries.
ALLOW_CN, ALLOW_OU, ALLOW_DNS, ALLOW_URI, ALLOW_SPKI, ALLOW_ISSUER = 1, 2, 3, 4, 5, 6
_ALLOW_KINDS = {"cn": ALLOW_CN, "ou": ALLOW_OU, "dns": ALLOW_DNS, "uri": ALLOW_URI, "spki": ALLOW_SPKI,
                "issuer": ALLOW_ISSUER}

# typedef void (*mtls_trust_report_cb)(const char *host, const char *rule, const char *code,
#                                      const char *message, void *userdata)
REPORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
DESTROY_CB = _callbacks.DESTROY_CB
c_char_pp = ctypes.POINTER(ctypes.c_char_p)

# int mtls_policy_new(mtls_policy **out)
fn("mtls_policy_new", ctypes.c_int, c_void_pp)
# int mtls_policy_load(const char *path, mtls_policy **out)
fn("mtls_policy_load", ctypes.c_int, ctypes.c_char_p, c_void_pp)
# int mtls_policy_from_json(const char *json, mtls_policy **out)
fn("mtls_policy_from_json", ctypes.c_int, ctypes.c_char_p, c_void_pp)
# void mtls_policy_free(mtls_policy *policy)
fn("mtls_policy_free", None, ctypes.c_void_p)
# int mtls_policy_replace(mtls_policy *policy, const mtls_policy *from)
fn("mtls_policy_replace", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
# int mtls_policy_add_anchor(mtls_policy *policy, const mtls_cert *cert)
fn("mtls_policy_add_anchor", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
# int mtls_policy_set_anchors_only(mtls_policy *policy, int anchors_only)
fn("mtls_policy_set_anchors_only", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# int mtls_policy_set_system_anchors(mtls_policy *policy, int system_anchors)
fn("mtls_policy_set_system_anchors", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# int mtls_policy_set_rule_system_anchors(mtls_policy *policy, const char *pattern, int system_anchors)
fn("mtls_policy_set_rule_system_anchors", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int)
# int mtls_policy_set_name_check(mtls_policy *policy, int enabled)
fn("mtls_policy_set_name_check", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# int mtls_policy_set_time(mtls_policy *policy, int64_t unix_time)
fn("mtls_policy_set_time", ctypes.c_int, ctypes.c_void_p, ctypes.c_int64)
# int mtls_policy_add_crl_file(mtls_policy *policy, const char *path)
fn("mtls_policy_add_crl_file", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
# int mtls_policy_add_host_rule(mtls_policy *policy, const char *pattern, const char *verify_as, int skip_name_check)
fn("mtls_policy_add_host_rule", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int)
# int mtls_policy_add_rule_anchor(mtls_policy *policy, const char *pattern, const mtls_cert *cert, int anchors_only)
fn("mtls_policy_add_rule_anchor", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)
# int mtls_policy_add_pin(mtls_policy *policy, const char *pattern, const char *pin)
fn("mtls_policy_add_pin", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
# int mtls_policy_set_pin_expiry(mtls_policy *policy, const char *pattern, int64_t expires, int after_expiry)
fn("mtls_policy_set_pin_expiry", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int)
# int mtls_policy_set_report_only(mtls_policy *policy, const char *pattern, int report_only)
fn("mtls_policy_set_report_only", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int)
# int mtls_policy_set_report_callback(mtls_policy *policy, mtls_trust_report_cb cb, void *userdata, void (*destroy)(void *))
fn("mtls_policy_set_report_callback", ctypes.c_int, ctypes.c_void_p, REPORT_CB, ctypes.c_void_p, DESTROY_CB)
# int mtls_policy_warnings(const mtls_policy *policy, char ***out, size_t *count)
fn("mtls_policy_warnings", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_evaluate(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host, int purpose,
#                   int64_t at, mtls_trust_result **out)
fn("mtls_evaluate", ctypes.c_int, ctypes.c_void_p, c_void_pp, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int,
   ctypes.c_int64, c_void_pp)
# int mtls_evaluate_der(mtls_policy *policy, const uint8_t *const *ders, const size_t *lens, size_t count,
#                       const char *host, int purpose, int64_t at, mtls_trust_result **out)
fn("mtls_evaluate_der", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), c_size_p, ctypes.c_size_t,
   ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, c_void_pp)
# int mtls_policy_set_cache(mtls_policy *policy, int enabled)
fn("mtls_policy_set_cache", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# int mtls_policy_set_event_callback(mtls_policy *policy, mtls_event_cb cb, void *userdata,
#                                    void (*destroy)(void *userdata))
fn("mtls_policy_set_event_callback", ctypes.c_int, ctypes.c_void_p, EVENT_CB, ctypes.c_void_p, _callbacks.DESTROY_CB)
# int mtls_evaluate_peer(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host, uint16_t port,
#                        const char *verify_as, int purpose, int64_t at, mtls_trust_result **out)
fn("mtls_evaluate_peer", ctypes.c_int, ctypes.c_void_p, c_void_pp, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint16,
   ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, c_void_pp)
# int mtls_policy_set_system_anchors_for_clients(mtls_policy *policy, int enabled)
fn("mtls_policy_set_system_anchors_for_clients", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# int mtls_policy_set_pins(mtls_policy *policy, const char *const *pins, size_t count)
fn("mtls_policy_set_pins", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t)
# int mtls_policy_pins(const mtls_policy *policy, char ***out, size_t *count)
fn("mtls_policy_pins", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_policy_set_verify_as(mtls_policy *policy, const char *verify_as)
fn("mtls_policy_set_verify_as", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
# int mtls_policy_verify_as(const mtls_policy *policy, char **out)
fn("mtls_policy_verify_as", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_policy_allow_add(mtls_policy *policy, int kind, const char *pattern)
fn("mtls_policy_allow_add", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
# int mtls_policy_rule_allow_add(mtls_policy *policy, const char *rule, int kind, const char *pattern)
fn("mtls_policy_rule_allow_add", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
# int mtls_policy_allow_add_issuer(mtls_policy *policy, const char *rule, const mtls_cert *anchor)
fn("mtls_policy_allow_add_issuer", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
# int mtls_policy_allow_patterns(const mtls_policy *policy, const char *rule, int kind, char ***out, size_t *count)
fn("mtls_policy_allow_patterns", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(c_void_pp),
   c_size_p)


class TrustOverridesC(ctypes.Structure):
    """typedef struct mtls_trust_overrides (version 1)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("anchors", ctypes.POINTER(ctypes.c_void_p)),
        ("anchor_count", ctypes.c_size_t),
        ("anchors_only", ctypes.c_int),
        ("pins", ctypes.POINTER(ctypes.c_char_p)),
        ("pin_count", ctypes.c_size_t),
        ("verify_as", ctypes.c_char_p),
    ]


TRUST_OVERRIDES_VERSION = 1
_overrides_p = ctypes.POINTER(TrustOverridesC)
# int mtls_trust_overrides_init(mtls_trust_overrides *overrides, unsigned int version)
fn("mtls_trust_overrides_init", ctypes.c_int, _overrides_p, ctypes.c_uint)
# int mtls_evaluate_with_overrides(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host,
#                                  uint16_t port, const char *verify_as, int purpose, int64_t at,
#                                  const mtls_trust_overrides *overrides, mtls_trust_result **out)
fn("mtls_evaluate_with_overrides", ctypes.c_int, ctypes.c_void_p, c_void_pp, ctypes.c_size_t, ctypes.c_char_p,
   ctypes.c_uint16, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, _overrides_p, c_void_pp)
# int mtls_trust_result_provenance(const mtls_trust_result *result, char **out)
fn("mtls_trust_result_provenance", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_policy_set_revocation(mtls_policy *policy, int mode, int sources)
fn("mtls_policy_set_revocation", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
# int mtls_policy_set_rule_revocation(mtls_policy *policy, const char *pattern, int mode, int sources)
fn("mtls_policy_set_rule_revocation", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int)
# int mtls_policy_set_revocation_limits(mtls_policy *policy, size_t max_bytes, int timeout_ms)
fn("mtls_policy_set_revocation_limits", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
# int mtls_policy_set_revocation_max_age(mtls_policy *policy, int64_t seconds)
fn("mtls_policy_set_revocation_max_age", ctypes.c_int, ctypes.c_void_p, ctypes.c_int64)
# int mtls_policy_set_revocation_cache_dir(mtls_policy *policy, const char *dir)
fn("mtls_policy_set_revocation_cache_dir", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
# int mtls_trust_result_revocation(const mtls_trust_result *result, char **out)
fn("mtls_trust_result_revocation", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_trust_result_warnings(const mtls_trust_result *result, char ***out, size_t *count)
fn("mtls_trust_result_warnings", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# void mtls_revocation_cache_clear(void)
fn("mtls_revocation_cache_clear", None)
# void mtls_trust_result_free(mtls_trust_result *result)
fn("mtls_trust_result_free", None, ctypes.c_void_p)
# int mtls_trust_result_trusted(const mtls_trust_result *result, int *trusted)
fn("mtls_trust_result_trusted", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_trust_result_kind(const mtls_trust_result *result, int *kind)
fn("mtls_trust_result_kind", ctypes.c_int, ctypes.c_void_p, c_int_p)
class _Reason(ctypes.Structure):
    """mtls_trust_reason (private): one reason of mtls_trust_result_reasons."""
    _fields_ = [("code", ctypes.c_void_p), ("cert_index", ctypes.c_int), ("message", ctypes.c_void_p)]


# int mtls_trust_result_reasons(const mtls_trust_result *result, mtls_trust_reason **out, size_t *count)
fn("mtls_trust_result_reasons", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, c_size_p)
# void mtls_trust_reason_list_free(mtls_trust_reason *list, size_t count)
fn("mtls_trust_reason_list_free", None, ctypes.c_void_p, ctypes.c_size_t)
# int mtls_trust_result_chain(const mtls_trust_result *result, mtls_cert ***out, size_t *count)
fn("mtls_trust_result_chain", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_trust_result_matched_rule(const mtls_trust_result *result, char **out)
fn("mtls_trust_result_matched_rule", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_trust_result_matched_pin(const mtls_trust_result *result, char **out)
fn("mtls_trust_result_matched_pin", ctypes.c_int, ctypes.c_void_p, c_void_pp)


def _unix(t: Union[None, int, float, datetime.datetime]) -> int:
    if t is None:
        return 0
    if isinstance(t, datetime.datetime):
        return int(t.timestamp())
    return int(t)


@dataclass(frozen=True)
class TrustReason:
    """One reason an evaluation failed: a stable code, the certificate index (None: the whole
    chain) and a message."""
    code: str
    cert_index: Optional[int]
    message: str


class TrustResult(_Handle):
    """The verdict of an evaluation (wraps an mtls_trust_result; immutable). Each attribute is
    read from libmtls when first asked for: an evaluation whose caller looks only at ``trusted``
    costs no more calls than that."""
    _free = "mtls_trust_result_free"

    @functools.cached_property
    def trusted(self) -> bool:
        return bool(out_value(ctypes.c_int, lib.mtls_trust_result_trusted, self._h))

    @functools.cached_property
    def kind(self) -> str:
        """"proceed", "recoverable_failure" or "fatal_failure"."""
        return _KINDS[out_value(ctypes.c_int, lib.mtls_trust_result_kind, self._h)]

    @functools.cached_property
    def reasons(self) -> List[TrustReason]:
        arr, n = ctypes.POINTER(_Reason)(), ctypes.c_size_t()
        check(lib.mtls_trust_result_reasons(self._h, ctypes.byref(arr), ctypes.byref(n)))
        try:
            return [TrustReason(ctypes.string_at(r.code).decode(), None if r.cert_index < 0 else r.cert_index,
                                ctypes.string_at(r.message).decode()) for r in (arr[i] for i in range(n.value))]
        finally:
            lib.mtls_trust_reason_list_free(arr, n)

    @functools.cached_property
    def chain(self) -> List[Certificate]:
        """The chain libmtls built, leaf to anchor."""
        return Certificate._list(lib.mtls_trust_result_chain, self._h)

    @functools.cached_property
    def matched_rule(self) -> Optional[str]:
        return out_string(lib.mtls_trust_result_matched_rule, self._h)

    @functools.cached_property
    def matched_pin(self) -> Optional[str]:
        return out_string(lib.mtls_trust_result_matched_pin, self._h)

    @functools.cached_property
    def provenance(self) -> Optional[Dict[str, Any]]:
        """Where each decision came from: {"rule", "anchors", "anchors_only", "anchors_only_from",
        "name", "name_from", "pins": [{"from", "enforced", "matched"}]} (mtls.h,
        mtls_trust_result_provenance); None when no evaluation could be made."""
        text = out_string(lib.mtls_trust_result_provenance, self._h)
        return json.loads(text) if text is not None else None

    @functools.cached_property
    def revocation(self) -> Optional[Dict[str, Any]]:
        """What revocation checking did: {"mode", "sources", "checks": [{"cert_index", "subject",
        "status": "good"|"revoked"|"unknown", "source", "url", "fetched_at", "fetched_from",
        "this_update", "next_update", "revoked_at", "reason", "error"}]} (mtls.h,
        mtls_trust_result_revocation); None when revocation was off or not reached."""
        text = out_string(lib.mtls_trust_result_revocation, self._h)
        return json.loads(text) if text is not None else None

    @functools.cached_property
    def warnings(self) -> List[str]:
        """What a trusted result wants known (a soft revocation check that found no status)."""
        return take_strings(lib.mtls_trust_result_warnings, self._h)

    @property
    def codes(self) -> List[str]:
        return [r.code for r in self.reasons]

    def __repr__(self) -> str:
        return (f"TrustResult(trusted={self.trusted}, kind={self.kind!r}, reasons={self.reasons!r}, "
                f"matched_rule={self.matched_rule!r}, matched_pin={self.matched_pin!r})")


def _read_result(h: Optional[int]) -> TrustResult:
    """A TrustResult that owns the result handle `h`."""
    return TrustResult(h)


@dataclass
class HostRule:
    """A host rule (the policy file's `hosts` entries, same names): `host` is `name.example`,
    `*.example`, `**.example` or an IP literal, each optionally `:port`."""
    host: str
    verify_as: Optional[str] = None
    skip_name_check: bool = False
    anchors: Sequence[Union[Certificate, str, "os.PathLike[str]"]] = ()
    #: the older spelling of system_anchors, turned around (None: as system_anchors says)
    anchors_only: Optional[bool] = None
    pins: Sequence[str] = ()
    pins_expire: Union[None, int, datetime.datetime] = None
    after_expiry: str = "stop_enforcing"
    enforcement: str = "enforce"
    # "off" | "soft" | "hard", or {"mode": ..., "sources": ["crl", "ocsp"]}; None: the policy's.
    revocation: Union[None, str, Dict[str, Any]] = None
    #: True: the system store as well as the anchors for this rule's peers; False: never; None:
    #: as the policy says (by default the rule's own anchors are the only ones)
    system_anchors: Optional[bool] = None
    #: who may connect under this rule: {"cn": [...], "ou": [...], "dns": [...], "uri": [...],
    #: "spki": [...], "issuer": [...]} (see Policy's ``allow``), on top of the policy's own list
    allow: Optional[Dict[str, Iterable[Any]]] = None

    @classmethod
    def of(cls, rule: Union["HostRule", Dict[str, Any]]) -> "HostRule":
        return rule if isinstance(rule, HostRule) else cls(**rule)


AnchorLike = Union[Certificate, str, "os.PathLike[str]", bytes]


def _system_anchors(system_anchors: Optional[bool], anchors_only: Optional[bool]) -> Optional[bool]:
    """The one setting from its name and its older spelling (anchors_only, turned around)."""
    if system_anchors is not None and anchors_only is not None and bool(system_anchors) == bool(anchors_only):
        raise ValueError("give system_anchors or anchors_only, not both saying opposite things")
    if system_anchors is not None:
        return bool(system_anchors)
    return None if anchors_only is None else not anchors_only


def _c_system_anchors(v: Optional[bool]) -> int:
    return -1 if v is None else int(bool(v))


@dataclass(frozen=True)
class Overrides:
    """What one connection, listener, SSL_CTX or evaluation adds on top of a Policy (libmtls
    composes them, the Policy object is never changed): `anchors` added to those in force (the
    host rule's own, else the policy's), `system_anchors` (True: the system store as well; False:
    never; None: as the rule or policy says — anchors in force are then the only ones trusted;
    `anchors_only` is its older spelling, turned around), `pins` that must match and are always
    enforced, `verify_as`: the name checked, over every other."""
    anchors: Sequence[AnchorLike] = ()
    anchors_only: Optional[bool] = None
    pins: Sequence[str] = ()
    verify_as: Optional[str] = None
    system_anchors: Optional[bool] = None

    def is_empty(self) -> bool:
        return (not self.anchors and self.anchors_only is None and self.system_anchors is None and not self.pins
                and self.verify_as is None)

    def to_c(self) -> Tuple[Optional["ctypes._Pointer[TrustOverridesC]"], List[Any]]:
        """A pointer to the C structure (None when empty), and the objects it borrows from."""
        if self.is_empty():
            return None, []
        o = TrustOverridesC()
        check(lib.mtls_trust_overrides_init(ctypes.byref(o), TRUST_OVERRIDES_VERSION))
        certs = [c for a in self.anchors for c in _certs(a)]
        keep: List[Any] = [o, certs]
        if certs:
            arr = (ctypes.c_void_p * len(certs))(*[c._h for c in certs])
            keep.append(arr)
            o.anchors, o.anchor_count = ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p)), len(certs)
        system = _system_anchors(self.system_anchors, self.anchors_only)
        if system is not None:
            o.anchors_only = int(not system)
        if self.pins:
            pins = (ctypes.c_char_p * len(self.pins))(*[utf8(p) for p in self.pins])
            keep.append(pins)
            o.pins, o.pin_count = ctypes.cast(pins, ctypes.POINTER(ctypes.c_char_p)), len(self.pins)
        o.verify_as = utf8(self.verify_as)
        return ctypes.pointer(o), keep
ReportCallback = Callable[[str, Optional[str], str, str], None]


def _certs(anchor: AnchorLike) -> List[Certificate]:
    """A Certificate, PEM/DER bytes, or a file name: the certificates it holds."""
    if isinstance(anchor, Certificate):
        return [anchor]
    if isinstance(anchor, (bytes, bytearray)):
        return Certificate.parse_all(bytes(anchor))
    return Certificate.load_all(anchor)


def _report_thunk(host, rule, code, message, userdata):
    """The one C report callback: finds the Python callable by its userdata key. An exception is
    kept for the thread that made the C call and re-raised when that call returns."""
    try:
        callback = _callbacks.lookup(userdata)
        if callback is not None:
            callback(*(v.decode("utf-8", "replace") if v else None for v in (host, rule, code, message)))
    except BaseException as e:  # noqa: BLE001 - re-raised after the C call returns
        stash_callback_exception(e)


_REPORT = REPORT_CB(_report_thunk)


class Policy(_Handle):
    """A trust policy (wraps an mtls_policy handle). Thread-safe: it may be changed or replaced
    while other threads evaluate with it.

    ``Policy()`` trusts the system store. A policy with ``anchors`` (Certificates, PEM/DER bytes or
    file names) trusts those anchors only, as in every libmtls front end; ``system_anchors=True``
    trusts the system store as well (``anchors_only=False``, the older spelling, says the same).
    ``verify_as`` and ``pins`` are the policy-wide settings of libmtls (mtls_policy_set_verify_as,
    mtls_policy_set_pins): every evaluation under this policy — with a host or without, of a
    server or of a client (a Listener's client_policy, configure_ssl_ctx, evaluate()) — validates
    the certificate as ``verify_as`` and needs one of ``pins`` (``sha256/BASE64`` SPKI digests, or curl's ``sha256//BASE64``)
    to match a certificate of the built chain, on top of the host rule selected for the peer
    (whose anchors and pins keep applying). ``host_rules`` (HostRule or dicts with the policy
    file's keys) refine hosts one by one. A connection's own ``verify_as`` and pins are overrides
    (see Overrides): they never change this object. ``report`` is the report callback (see
    set_report_callback).

    ``allow`` says who may connect (mtls.h, "Who may connect"): a dict with any of the keys
    ``cn``, ``ou``, ``dns``, ``uri``, ``spki``, ``issuer``, each a list of patterns (the policy
    file's ``"allow"``). Once a peer's chain is trusted it must match ANY ONE entry of ANY kind —
    clients on a Listener or an SSL_CTX configured with this policy, the server on a connection.
    ``*`` is one whole segment (a DNS label, a URI path segment, never crossing ``.`` or ``/``),
    ``**`` zero or more: ``{"uri": ["spiffe://example.org/ns/*/sa/**"]}``. DNS and a URI's scheme
    and authority are case-insensitive; CN, OU and URI paths are compared exactly. ``spki`` is a
    pin of the peer's own key; ``issuer`` a CA of its built chain, the anchor or an intermediate
    (a Certificate, PEM, or a SHA-256 fingerprint in hex). A malformed pattern raises
    mtls.InvalidPolicy; a refused
    peer fails with reason ``not_allowed`` naming the list and what its certificate had. A host
    rule's ``allow`` is a list of its own, also required for peers under that rule."""
    _free = "mtls_policy_free"

    def __init__(self, anchors: Iterable[AnchorLike] = (), anchors_only: Optional[bool] = None,
                 verify_as: Optional[str] = None, pins: Iterable[str] = (),
                 host_rules: Iterable[Union[HostRule, Dict[str, Any]]] = (), *, name_check: bool = True,
                 at: Union[None, int, datetime.datetime] = None, crl_files: Iterable[str] = (),
                 report: Optional[ReportCallback] = None,
                 revocation: Union[None, str, Dict[str, Any]] = None, system_anchors: Optional[bool] = None,
                 allow: Optional[Dict[str, Iterable[Any]]] = None,
                 _handle: Optional[int] = None) -> None:
        super().__init__(_handle if _handle is not None else out_handle(lib.mtls_policy_new))
        if verify_as is not None:
            self.verify_as = verify_as
        pins = list(pins)
        if pins:
            self.pins = pins
        anchors = [c for a in anchors for c in _certs(a)]
        for c in anchors:
            self.add_anchor(c)
        # anchors_only (older spelling) counts only with anchors, as it always did in Python.
        system = _system_anchors(system_anchors, anchors_only if anchors else None)
        if system is not None:
            self.set_system_anchors(system)
        if not name_check:
            self.set_name_check(False)
        if at is not None:
            self.set_time(at)
        for f in crl_files:
            self.add_crl_file(f)
        for r in host_rules:
            self.add_rule(HostRule.of(r))
        if report is not None:
            self.set_report_callback(report)
        if revocation is not None:
            spec = {"mode": revocation} if isinstance(revocation, str) else dict(revocation)
            self.set_revocation(**spec)
        if allow:
            self._add_allow(None, allow)

    def _add_allow(self, rule: Optional[str], allow: Dict[str, Iterable[Any]]) -> None:
        unknown = sorted(set(allow) - set(_ALLOW_KINDS))
        if unknown:
            raise ValueError("allow keys are %s; not %s" % (", ".join(_ALLOW_KINDS), ", ".join(unknown)))
        for kind, patterns in allow.items():
            if isinstance(patterns, (str, bytes, Certificate)):
                patterns = [patterns]
            for p in patterns:
                self.allow_add(kind, p, rule=rule)

    def allow_add(self, kind: str, pattern: Any, rule: Optional[str] = None) -> None:
        """Adds one entry to the allow-list (who may connect): `kind` "cn", "ou", "dns", "uri",
        "spki" or "issuer" (then `pattern` may be a Certificate), to the policy-wide list or, with
        `rule`, to that host rule's own list (mtls_policy_allow_add, mtls_policy_rule_allow_add)."""
        if kind not in _ALLOW_KINDS:
            raise ValueError("allow kind must be one of %s" % ", ".join(_ALLOW_KINDS))
        if isinstance(pattern, Certificate):
            if kind != "issuer":
                raise ValueError("a Certificate is an allow entry only for kind 'issuer'")
            check(lib.mtls_policy_allow_add_issuer(self._h, utf8(rule), pattern._h))
        elif rule is not None:
            check(lib.mtls_policy_rule_allow_add(self._h, utf8(rule), _ALLOW_KINDS[kind], utf8(pattern)))
        else:
            check(lib.mtls_policy_allow_add(self._h, _ALLOW_KINDS[kind], utf8(pattern)))

    def allow(self, rule: Optional[str] = None) -> Dict[str, List[str]]:
        """The allow-list as {kind: [patterns]} (only kinds with entries; issuers as SHA-256 hex):
        the policy-wide one, or with `rule` that host rule's."""
        out = {}
        for kind, k in _ALLOW_KINDS.items():
            got = take_strings(lib.mtls_policy_allow_patterns, self._h, utf8(rule), k)
            if got:
                out[kind] = got
        return out

    @classmethod
    def _wrap(cls, handle: int) -> "Policy":
        return cls(_handle=handle)

    @classmethod
    def from_file(cls, path: "Union[str, os.PathLike[str]]") -> "Policy":
        """Reads a policy JSON file (README.md, "Trust policies")."""
        return cls._wrap(out_handle(lib.mtls_policy_load, utf8(os.fspath(path))))

    @classmethod
    def from_json(cls, text: str) -> "Policy":
        return cls._wrap(out_handle(lib.mtls_policy_from_json, utf8(text)))

    def add_anchor(self, cert: Certificate) -> None:
        check(lib.mtls_policy_add_anchor(self._h, cert._h))

    def set_anchors_only(self, on: bool = True) -> None:
        """The older spelling of set_system_anchors(not on)."""
        check(lib.mtls_policy_set_anchors_only(self._h, int(on)))

    def set_system_anchors(self, on: Optional[bool] = True) -> None:
        """True: trust the system store as well as the anchors; False: never; None: the default
        (the anchors only when there are some, else the system store)."""
        check(lib.mtls_policy_set_system_anchors(self._h, _c_system_anchors(on)))

    def set_name_check(self, on: bool = True) -> None:
        check(lib.mtls_policy_set_name_check(self._h, int(on)))

    def set_time(self, t: Union[None, int, datetime.datetime]) -> None:
        """A fixed evaluation time (datetime or Unix seconds); None returns to now."""
        check(lib.mtls_policy_set_time(self._h, _unix(t)))

    def set_cache(self, on: bool = True) -> None:
        """Remember recent evaluations (default). The cache never changes an answer."""
        check(lib.mtls_policy_set_cache(self._h, int(on)))

    def set_event_callback(self, callback: "Optional[Callable[[Any], None]]") -> None:
        """Calls `callback(mtls.rotation.Event)` for each revocation fetch that failed while this
        policy was used (kind "revocation_fetch_failed"; label: the URL; subject: the certificate
        whose status was sought; error: the exception class). It runs on the thread that made the
        fetch (a handshake's, or libmtls's refresh thread). None: stop."""
        _set_event_callback(lib.mtls_policy_set_event_callback, self._h, callback)

    def add_crl_file(self, path: "Union[str, os.PathLike[str]]") -> None:
        check(lib.mtls_policy_add_crl_file(self._h, utf8(os.fspath(path))))

    def add_rule(self, rule: Union[HostRule, Dict[str, Any]]) -> None:
        """Adds a host rule with everything it says."""
        r = HostRule.of(rule)
        if r.enforcement not in ("enforce", "report_only"):
            raise ValueError("enforcement must be 'enforce' or 'report_only'")
        if r.after_expiry not in ("stop_enforcing", "fail_closed"):
            raise ValueError("after_expiry must be 'stop_enforcing' or 'fail_closed'")
        self.add_host_rule(r.host, r.verify_as, r.skip_name_check)
        for a in r.anchors:
            for c in _certs(a):
                self.add_rule_anchor(r.host, c, False)
        system = _system_anchors(r.system_anchors, r.anchors_only)
        if system is not None:
            self.set_rule_system_anchors(r.host, system)
        for pin in r.pins:
            self.add_pin(r.host, pin)
        if r.pins_expire is not None:
            self.set_pin_expiry(r.host, r.pins_expire, fail_closed=r.after_expiry == "fail_closed")
        if r.enforcement == "report_only":
            self.set_report_only(r.host, True)
        if r.revocation is not None:
            spec = {"mode": r.revocation} if isinstance(r.revocation, str) else dict(r.revocation)
            self.set_rule_revocation(r.host, **spec)
        if r.allow:
            self._add_allow(r.host, r.allow)

    @staticmethod
    def _revocation_args(mode: str, sources: Iterable[str]) -> Tuple[int, int]:
        if mode not in _REVOCATION_MODES:
            raise ValueError("revocation mode must be 'off', 'soft' or 'hard'")
        flags = 0
        for s in sources:
            if s not in _REVOCATION_SOURCES:
                raise ValueError("revocation sources are 'crl' and 'ocsp'")
            flags |= _REVOCATION_SOURCES[s]
        return _REVOCATION_MODES[mode], flags

    def set_revocation(self, mode: str, sources: Iterable[str] = ("crl",), max_bytes: Optional[int] = None,
                       timeout_ms: Optional[int] = None, cache_dir: "Union[None, str, os.PathLike[str]]" = None,
                       max_age_seconds: Optional[int] = None) -> None:
        """Policy-wide revocation checking (mtls_policy_set_revocation): `mode` "off", "soft"
        (an unknown status is trusted, with a warning in the result) or "hard" (refused with
        "revocation_unknown"); a revoked certificate is always refused. `sources` in order: "crl"
        (the certificates' CRL distribution points, over http:), "ocsp". `max_bytes` and
        `timeout_ms` bound each fetch (None: 10 MiB, 5000 ms); `cache_dir` keeps fetched CRLs
        across restarts (files 0600; a folder that is not the user's, or that group or others can
        write, is not used). `max_age_seconds`: how long a CRL or OCSP response without a
        nextUpdate stays current after its thisUpdate (None: 7 days;
        mtls_policy_set_revocation_max_age)."""
        m, flags = self._revocation_args(mode, sources)
        check(lib.mtls_policy_set_revocation(self._h, m, flags))
        if max_bytes is not None or timeout_ms is not None:
            check(lib.mtls_policy_set_revocation_limits(self._h, int(max_bytes or 0), int(timeout_ms or 0)))
        if cache_dir is not None:
            check(lib.mtls_policy_set_revocation_cache_dir(self._h, utf8(os.fspath(cache_dir))))
        if max_age_seconds is not None:
            check(lib.mtls_policy_set_revocation_max_age(self._h, int(max_age_seconds)))

    def set_rule_revocation(self, pattern: str, mode: str, sources: Iterable[str] = ("crl",)) -> None:
        """Revocation checking for peers under the host rule `pattern`, over the policy's."""
        m, flags = self._revocation_args(mode, sources)
        check(lib.mtls_policy_set_rule_revocation(self._h, utf8(pattern), m, flags))

    def add_host_rule(self, pattern: str, verify_as: Optional[str] = None, skip_name_check: bool = False) -> None:
        check(lib.mtls_policy_add_host_rule(self._h, utf8(pattern), utf8(verify_as), int(skip_name_check)))

    def add_rule_anchor(self, pattern: str, cert: Certificate, anchors_only: bool = True) -> None:
        """Adds an anchor of the rule's own; anchors_only False: as the policy's system_anchors says."""
        check(lib.mtls_policy_add_rule_anchor(self._h, utf8(pattern), cert._h, int(anchors_only)))

    def set_rule_system_anchors(self, pattern: str, on: Optional[bool]) -> None:
        """The rule's own system_anchors (None: as the policy says)."""
        check(lib.mtls_policy_set_rule_system_anchors(self._h, utf8(pattern), _c_system_anchors(on)))

    def add_pin(self, pattern: str, pin: str) -> None:
        check(lib.mtls_policy_add_pin(self._h, utf8(pattern), utf8(pin)))

    def set_pin_expiry(self, pattern: str, expires: Union[int, datetime.datetime], fail_closed: bool = False) -> None:
        check(lib.mtls_policy_set_pin_expiry(self._h, utf8(pattern), _unix(expires),
                                             PIN_FAIL_CLOSED if fail_closed else PIN_STOP_ENFORCING))

    def set_report_only(self, pattern: str, on: bool = True) -> None:
        check(lib.mtls_policy_set_report_only(self._h, utf8(pattern), int(on)))

    @property
    def verify_as(self) -> Optional[str]:
        """The policy-wide verify-as (None: none); setting it changes the policy for every peer."""
        return out_string(lib.mtls_policy_verify_as, self._h)

    @verify_as.setter
    def verify_as(self, name: Optional[str]) -> None:
        check(lib.mtls_policy_set_verify_as(self._h, utf8(name)))

    @property
    def pins(self) -> List[str]:
        """The policy-wide SPKI pins ("sha256/BASE64"); setting them replaces them."""
        return take_strings(lib.mtls_policy_pins, self._h)

    @pins.setter
    def pins(self, pins: Iterable[str]) -> None:
        pins = list(pins)
        arr = (ctypes.c_char_p * max(len(pins), 1))(*[utf8(p) for p in pins])
        check(lib.mtls_policy_set_pins(self._h, arr, len(pins)))

    def set_report_callback(self, callback: Optional[ReportCallback]) -> None:
        """callback(host, rule, code, message) for each unenforced failure of a report-only rule,
        on the thread evaluating. An exception it raises is re-raised on that thread when the
        libmtls call that evaluated returns (evaluate(), a connection's handshake...).

        libmtls keeps the callable for as long as anything holds this policy: connections,
        listeners and SSL_CTXs made with it, after this Python object is gone."""
        if callback is None:
            check(lib.mtls_policy_set_report_callback(self._h, REPORT_CB(), None, _callbacks.DESTROY_CB()))
            return
        key = _callbacks.register(callback)
        rc = lib.mtls_policy_set_report_callback(self._h, _REPORT, key, _callbacks.DESTROY)
        if rc != 0:
            _callbacks.release(key)
        check(rc)

    @property
    def warnings(self) -> List[str]:
        return take_strings(lib.mtls_policy_warnings, self._h)

    def replace(self, other: "Policy") -> None:
        """Atomically puts a copy of `other`'s settings in force; the report callback stays."""
        check(lib.mtls_policy_replace(self._h, other._h))

    def evaluate(self, chain: Sequence[Certificate], host: Optional[str] = None, purpose: Optional[str] = None,
                 at: Union[None, int, datetime.datetime] = None, *,
                 overrides: Optional[Overrides] = None) -> TrustResult:
        """Evaluates `chain` (leaf first) for `host` ("name", "1.2.3.4", "name:port"); purpose
        "server" or "client" (None: the policy's); at: datetime or Unix seconds (None: now);
        overrides: an Overrides for this call (the policy is not changed).
        host None under a policy that checks names makes a server untrusted ("no_peer_name")
        unless a verify_as gives the name; for no name check, make the policy with name_check=False."""
        if purpose not in _PURPOSES:
            raise ValueError("purpose must be 'server', 'client' or None")
        arr = (ctypes.c_void_p * max(len(chain), 1))(*[c._h for c in chain])
        if overrides is not None and not overrides.is_empty():
            return self._with_overrides(arr, len(chain), host, 0, None, purpose, at, overrides)
        return self._verdict(lib.mtls_evaluate, ctypes.cast(arr, c_void_pp), len(chain), utf8(host),
                             _PURPOSES[purpose], _unix(at))

    def evaluate_peer(self, chain: List[Certificate], host: Optional[str], port: int = 0,
                      verify_as: Optional[str] = None, purpose: Optional[str] = None, at=None, *,
                      overrides: Optional[Overrides] = None) -> TrustResult:
        """Evaluates `chain` for the peer reached: `host` (name or IP, no port) and `port` (0:
        unknown, only port-less rules apply) choose the host rule; `verify_as` (None: the host)
        is the peer's name to check (a rule's or the policy's verify_as comes first; an override's
        over all); overrides: an Overrides for this call."""
        if purpose not in _PURPOSES:
            raise ValueError("purpose must be 'server', 'client' or None")
        arr = (ctypes.c_void_p * max(len(chain), 1))(*[c._h for c in chain])
        if overrides is not None and not overrides.is_empty():
            return self._with_overrides(arr, len(chain), host, port, verify_as, purpose, at, overrides)
        return self._verdict(lib.mtls_evaluate_peer, ctypes.cast(arr, c_void_pp), len(chain), utf8(host), int(port),
                             utf8(verify_as), _PURPOSES[purpose], _unix(at))

    def _with_overrides(self, arr: Any, count: int, host: Optional[str], port: int, verify_as: Optional[str],
                        purpose: Optional[str], at: Any, overrides: Overrides) -> TrustResult:
        o, keep = overrides.to_c()
        try:
            return self._verdict(lib.mtls_evaluate_with_overrides, ctypes.cast(arr, c_void_pp), count, utf8(host),
                                 int(port), utf8(verify_as), _PURPOSES[purpose], _unix(at), o)
        finally:
            del keep

    def set_system_anchors_for_clients(self, on: bool) -> None:
        """True: client certificates may also chain to the system trust store (default False)."""
        check(lib.mtls_policy_set_system_anchors_for_clients(self._h, int(on)))

    def evaluate_der(self, ders: Sequence[bytes], host: Optional[str] = None, purpose: Optional[str] = None,
                     at: Union[None, int, datetime.datetime] = None) -> TrustResult:
        """Same as evaluate() with DER certificates; a recently seen chain is answered from the
        cache without parsing."""
        if purpose not in _PURPOSES:
            raise ValueError("purpose must be 'server', 'client' or None")
        arr = (ctypes.c_char_p * max(len(ders), 1))(*ders)
        lens = (ctypes.c_size_t * max(len(ders), 1))(*[len(d) for d in ders])
        return self._verdict(lib.mtls_evaluate_der, arr, lens, len(ders), utf8(host), _PURPOSES[purpose], _unix(at))

    def _verdict(self, evaluate: Any, *args: Any) -> TrustResult:
        """Runs one evaluation call, re-raises what the report callback raised during it on this
        thread (see errors.check), and reads then frees the result."""
        out = ctypes.c_void_p()
        rc = evaluate(self._h, *args, ctypes.byref(out))
        result = TrustResult(out.value)  # owns the handle from here, whatever happens next
        check(rc)
        return result


def clear_revocation_cache() -> None:
    """Forgets every CRL and OCSP answer cached in memory and every remembered fetch failure
    (mtls_revocation_cache_clear); cache folders are left as they are, and a CRL older than one
    already seen for its URL is still never used."""
    lib.mtls_revocation_cache_clear()
