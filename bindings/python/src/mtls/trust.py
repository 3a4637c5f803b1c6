"""Trust policies and evaluation: anchors, host rules, SPKI pins, and mtls_evaluate."""
import ctypes
import datetime
from dataclasses import dataclass
from typing import Callable, List, Optional

from ._lib import lib, fn, take_string, c_void_pp, c_size_p, c_int_p
from ._handle import _Handle, utf8, out_handle, out_value, out_indexed
from .certificate import Certificate
from .errors import check

PURPOSE_DEFAULT, PURPOSE_SERVER, PURPOSE_CLIENT = 0, 1, 2
_PURPOSES = {None: PURPOSE_DEFAULT, "server": PURPOSE_SERVER, "client": PURPOSE_CLIENT}
_KINDS = {0: "proceed", 1: "recoverable_failure", 2: "fatal_failure"}
PIN_STOP_ENFORCING, PIN_FAIL_CLOSED = 0, 1

# typedef void (*mtls_trust_report_cb)(const char *host, const char *rule, const char *code,
#                                      const char *message, void *userdata)
REPORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
DESTROY_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
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
# int mtls_policy_warning_count(const mtls_policy *policy, size_t *count)
fn("mtls_policy_warning_count", ctypes.c_int, ctypes.c_void_p, c_size_p)
# int mtls_policy_warning(const mtls_policy *policy, size_t index, char **out)
fn("mtls_policy_warning", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, c_void_pp)
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
# int mtls_evaluate_peer(mtls_policy *policy, mtls_cert *const *certs, size_t count, const char *host, uint16_t port,
#                        const char *verify_as, int purpose, int64_t at, mtls_trust_result **out)
fn("mtls_evaluate_peer", ctypes.c_int, ctypes.c_void_p, c_void_pp, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint16,
   ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, c_void_pp)
# int mtls_policy_set_system_anchors_for_clients(mtls_policy *policy, int enabled)
fn("mtls_policy_set_system_anchors_for_clients", ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
# void mtls_trust_result_free(mtls_trust_result *result)
fn("mtls_trust_result_free", None, ctypes.c_void_p)
# int mtls_trust_result_trusted(const mtls_trust_result *result, int *trusted)
fn("mtls_trust_result_trusted", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_trust_result_kind(const mtls_trust_result *result, int *kind)
fn("mtls_trust_result_kind", ctypes.c_int, ctypes.c_void_p, c_int_p)
# int mtls_trust_result_reason_count(const mtls_trust_result *result, size_t *count)
fn("mtls_trust_result_reason_count", ctypes.c_int, ctypes.c_void_p, c_size_p)
# int mtls_trust_result_reason(const mtls_trust_result *result, size_t index, const char **code, int *cert_index,
#                              const char **message)
fn("mtls_trust_result_reason", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, c_char_pp, c_int_p, c_char_pp)
# int mtls_trust_result_chain(const mtls_trust_result *result, mtls_cert ***out, size_t *count)
fn("mtls_trust_result_chain", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_trust_result_matched_rule(const mtls_trust_result *result, const char **rule)
fn("mtls_trust_result_matched_rule", ctypes.c_int, ctypes.c_void_p, c_char_pp)
# int mtls_trust_result_matched_pin(const mtls_trust_result *result, const char **pin)
fn("mtls_trust_result_matched_pin", ctypes.c_int, ctypes.c_void_p, c_char_pp)


def _unix(t) -> int:
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


@dataclass(frozen=True)
class TrustResult:
    """The verdict of Policy.evaluate."""
    trusted: bool
    kind: str
    reasons: List[TrustReason]
    chain: List[Certificate]
    matched_rule: Optional[str]
    matched_pin: Optional[str]

    @property
    def codes(self) -> List[str]:
        return [r.code for r in self.reasons]


def _read_result(h) -> TrustResult:
    trusted = out_value(ctypes.c_int, lib.mtls_trust_result_trusted, h)
    kind = out_value(ctypes.c_int, lib.mtls_trust_result_kind, h)
    reasons = []
    for i in range(out_value(ctypes.c_size_t, lib.mtls_trust_result_reason_count, h)):
        code, msg, idx = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_int()
        check(lib.mtls_trust_result_reason(h, i, ctypes.byref(code), ctypes.byref(idx), ctypes.byref(msg)))
        reasons.append(TrustReason(code.value.decode(), None if idx.value < 0 else idx.value, msg.value.decode()))
    chain = Certificate._list(lib.mtls_trust_result_chain, h)
    rule = out_value(ctypes.c_char_p, lib.mtls_trust_result_matched_rule, h)
    pin = out_value(ctypes.c_char_p, lib.mtls_trust_result_matched_pin, h)
    return TrustResult(bool(trusted), _KINDS[kind], reasons, chain,
                       rule.decode() if rule else None, pin.decode() if pin else None)


class Policy(_Handle):
    """A trust policy (wraps an mtls_policy handle). Thread-safe: it may be changed or replaced
    while other threads evaluate with it."""
    _free = "mtls_policy_free"

    def __init__(self, _handle=None):
        super().__init__(_handle if _handle is not None else out_handle(lib.mtls_policy_new))
        self._callback = None  # keeps the ctypes thunk alive
        self._pending = None   # an exception raised inside the report callback

    @classmethod
    def load(cls, path: str) -> "Policy":
        """Reads a policy JSON file (README.md, "Trust policies")."""
        return cls(out_handle(lib.mtls_policy_load, utf8(str(path))))

    @classmethod
    def from_json(cls, text: str) -> "Policy":
        return cls(out_handle(lib.mtls_policy_from_json, utf8(text)))

    def add_anchor(self, cert: Certificate):
        check(lib.mtls_policy_add_anchor(self._h, cert._h))

    def set_anchors_only(self, on: bool = True):
        check(lib.mtls_policy_set_anchors_only(self._h, int(on)))

    def set_name_check(self, on: bool = True):
        check(lib.mtls_policy_set_name_check(self._h, int(on)))

    def set_time(self, t):
        """A fixed evaluation time (datetime or Unix seconds); None returns to now."""
        check(lib.mtls_policy_set_time(self._h, _unix(t)))

    def set_cache(self, on: bool = True):
        """Remember recent evaluations (default). The cache never changes an answer."""
        check(lib.mtls_policy_set_cache(self._h, int(on)))

    def add_crl_file(self, path: str):
        check(lib.mtls_policy_add_crl_file(self._h, utf8(str(path))))

    def add_host_rule(self, pattern: str, verify_as: Optional[str] = None, skip_name_check: bool = False):
        check(lib.mtls_policy_add_host_rule(self._h, utf8(pattern), utf8(verify_as), int(skip_name_check)))

    def add_rule_anchor(self, pattern: str, cert: Certificate, anchors_only: bool = True):
        check(lib.mtls_policy_add_rule_anchor(self._h, utf8(pattern), cert._h, int(anchors_only)))

    def add_pin(self, pattern: str, pin: str):
        check(lib.mtls_policy_add_pin(self._h, utf8(pattern), utf8(pin)))

    def set_pin_expiry(self, pattern: str, expires, fail_closed: bool = False):
        check(lib.mtls_policy_set_pin_expiry(self._h, utf8(pattern), _unix(expires),
                                             PIN_FAIL_CLOSED if fail_closed else PIN_STOP_ENFORCING))

    def set_report_only(self, pattern: str, on: bool = True):
        check(lib.mtls_policy_set_report_only(self._h, utf8(pattern), int(on)))

    def set_report_callback(self, callback: Optional[Callable[[str, str, str, str], None]]):
        """callback(host, rule, code, message) for each unenforced failure of a report-only rule.
        An exception it raises is re-raised by the evaluate() call that triggered it."""
        if callback is None:
            self._callback = None
            check(lib.mtls_policy_set_report_callback(self._h, REPORT_CB(), None, DESTROY_CB()))
            return

        def thunk(host, rule, code, message, _userdata):
            try:
                callback(*(v.decode() if v else None for v in (host, rule, code, message)))
            except BaseException as e:  # noqa: BLE001 - re-raised after the C call returns
                self._pending = e
        self._callback = REPORT_CB(thunk)
        check(lib.mtls_policy_set_report_callback(self._h, self._callback, None, DESTROY_CB()))

    @property
    def warnings(self) -> List[str]:
        return out_indexed(lib.mtls_policy_warning_count, lib.mtls_policy_warning, self._h, take_string)

    def replace(self, other: "Policy"):
        """Atomically puts a copy of `other`'s settings in force; the report callback stays."""
        check(lib.mtls_policy_replace(self._h, other._h))

    def evaluate(self, chain: List[Certificate], host: Optional[str] = None, purpose: Optional[str] = None,
                 at=None) -> TrustResult:
        """Evaluates `chain` (leaf first) for `host` ("name", "1.2.3.4", "name:port"); purpose
        "server" or "client" (None: the policy's); at: datetime or Unix seconds (None: now).
        host None under a policy that checks names makes a server untrusted ("no_peer_name");
        for no name check, call set_name_check(False) on the policy first."""
        if purpose not in _PURPOSES:
            raise ValueError("purpose must be 'server', 'client' or None")
        arr = (ctypes.c_void_p * len(chain))(*[c._h for c in chain])
        return self._verdict(lib.mtls_evaluate, ctypes.cast(arr, c_void_pp), len(chain), utf8(host),
                             _PURPOSES[purpose], _unix(at))

    def evaluate_peer(self, chain: List[Certificate], host: Optional[str], port: int = 0,
                      verify_as: Optional[str] = None, purpose: Optional[str] = None, at=None) -> TrustResult:
        """Evaluates `chain` for the peer reached: `host` (name or IP, no port) and `port` (0:
        unknown, only port-less rules apply) choose the host rule; `verify_as` (None: the host)
        changes only the name checked."""
        if purpose not in _PURPOSES:
            raise ValueError("purpose must be 'server', 'client' or None")
        arr = (ctypes.c_void_p * len(chain))(*[c._h for c in chain])
        return self._verdict(lib.mtls_evaluate_peer, ctypes.cast(arr, c_void_pp), len(chain), utf8(host), int(port),
                             utf8(verify_as), _PURPOSES[purpose], _unix(at))

    def set_system_anchors_for_clients(self, on: bool):
        """True: client certificates may also chain to the system trust store (default False)."""
        check(lib.mtls_policy_set_system_anchors_for_clients(self._h, int(on)))

    def evaluate_der(self, ders: List[bytes], host: Optional[str] = None, purpose: Optional[str] = None,
                     at=None) -> TrustResult:
        """Same as evaluate() with DER certificates; a recently seen chain is answered from the
        cache without parsing."""
        if purpose not in _PURPOSES:
            raise ValueError("purpose must be 'server', 'client' or None")
        arr = (ctypes.c_char_p * len(ders))(*ders)
        lens = (ctypes.c_size_t * len(ders))(*[len(d) for d in ders])
        return self._verdict(lib.mtls_evaluate_der, arr, lens, len(ders), utf8(host), _PURPOSES[purpose], _unix(at))

    def _verdict(self, evaluate, *args) -> TrustResult:
        """Runs one evaluation call, re-raises what the report callback raised during it, and
        reads then frees the result."""
        self._pending = None
        h = out_handle(evaluate, self._h, *args)
        try:
            if self._pending is not None:
                e, self._pending = self._pending, None
                raise e
            return _read_result(h)
        finally:
            lib.mtls_trust_result_free(h)
