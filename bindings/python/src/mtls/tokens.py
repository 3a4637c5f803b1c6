"""PKCS#11 tokens through p11-kit (mtls_token, mtls_token_object, mtls_identity_from_pkcs11).

    import mtls
    for t in mtls.list_tokens():                      # every module registered with p11-kit
        print(t.label, t.uri)
    ident = mtls.identity_from_pkcs11("pkcs11:token=MyCard;id=%01", pin="1234")
    # or pin=lambda label, uri, flags: getpass.getpass(f"PIN for {label}: ")

The identity's private key never leaves the token: TLS handshakes sign on it.
"""
import ctypes
from typing import Callable, Optional, Union

from . import _callbacks
from ._lib import lib, fn, c_void_pp, c_size_p, c_int_p
from ._handle import _Handle, utf8, out_handle, out_string, out_bytes, out_value, out_list, warn_library_warnings
from .certificate import Certificate
from .errors import check, stash_callback_exception, PinRequired
from .identity import Identity

# int mtls_token_list(const char *module_path, mtls_token ***out, size_t *count)
fn("mtls_token_list", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(c_void_pp), c_size_p)
# void mtls_token_list_free(mtls_token **list, size_t count)
fn("mtls_token_list_free", None, c_void_pp, ctypes.c_size_t)
# mtls_token *mtls_token_ref(mtls_token *token)
fn("mtls_token_ref", ctypes.c_void_p, ctypes.c_void_p)
# void mtls_token_free(mtls_token *token)
fn("mtls_token_free", None, ctypes.c_void_p)
for _name in ("label", "uri", "manufacturer", "model", "serial", "module_name", "module_path"):
    # int mtls_token_<field>(const mtls_token *token, char **out)
    fn(f"mtls_token_{_name}", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_token_slot(const mtls_token *token, unsigned long *slot_id)
fn("mtls_token_slot", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong))
# int mtls_token_flags(const mtls_token *token, unsigned int *flags)
fn("mtls_token_flags", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint))
# int mtls_token_objects(const char *module_path, const char *token_uri, const char *pin,
#                        mtls_token_object ***out, size_t *count)
fn("mtls_token_objects", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
   ctypes.POINTER(c_void_pp), c_size_p)
# void mtls_token_object_list_free(mtls_token_object **list, size_t count)
fn("mtls_token_object_list_free", None, c_void_pp, ctypes.c_size_t)
# mtls_token_object *mtls_token_object_ref(mtls_token_object *object)
fn("mtls_token_object_ref", ctypes.c_void_p, ctypes.c_void_p)
# void mtls_token_object_free(mtls_token_object *object)
fn("mtls_token_object_free", None, ctypes.c_void_p)
# int mtls_token_object_kind(const mtls_token_object *object, int *kind)
fn("mtls_token_object_kind", ctypes.c_int, ctypes.c_void_p, c_int_p)
for _name in ("label", "uri", "key_type"):
    # int mtls_token_object_<field>(const mtls_token_object *object, char **out)
    fn(f"mtls_token_object_{_name}", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_token_object_id(const mtls_token_object *object, uint8_t **out, size_t *len)
fn("mtls_token_object_id", ctypes.c_int, ctypes.c_void_p, c_void_pp, c_size_p)
# int mtls_token_object_cert(const mtls_token_object *object, mtls_cert **out)
fn("mtls_token_object_cert", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_token_object_token(const mtls_token_object *object, mtls_token **out)
fn("mtls_token_object_token", ctypes.c_int, ctypes.c_void_p, c_void_pp)

# typedef int (*mtls_pin_cb)(const char *token_label, const char *token_uri, unsigned int flags,
#                            char *pin, size_t pin_size, void *userdata)
PIN_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint,
                          ctypes.POINTER(ctypes.c_char), ctypes.c_size_t, ctypes.c_void_p)
# int mtls_identity_from_pkcs11(const char *uri, mtls_pin_cb pin_cb, void *userdata, void (*destroy)(void *),
#                               mtls_identity **out)
fn("mtls_identity_from_pkcs11", ctypes.c_int, ctypes.c_char_p, PIN_CB, ctypes.c_void_p, _callbacks.DESTROY_CB,
   c_void_pp)

# int mtls_token_keygen(const char *uri, const char *key_type, mtls_pin_cb pin_cb, void *userdata, char **key_uri)
fn("mtls_token_keygen", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, PIN_CB, ctypes.c_void_p, c_void_pp)
# int mtls_token_csr(const char *uri, const char *subject, mtls_pin_cb pin_cb, void *userdata, char **csr_pem)
fn("mtls_token_csr", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, PIN_CB, ctypes.c_void_p, c_void_pp)
# int mtls_token_import_cert(const char *uri, const mtls_cert *cert, mtls_pin_cb pin_cb, void *userdata,
#                            char **cert_uri)
fn("mtls_token_import_cert", ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, PIN_CB, ctypes.c_void_p, c_void_pp)

#: mtls_token_flags bits (also the `flags` a PIN callback gets)
TOKEN_LOGIN_REQUIRED, TOKEN_PIN_LOCKED, TOKEN_PIN_COUNT_LOW, TOKEN_PIN_FINAL_TRY = 0x01, 0x02, 0x04, 0x08
TOKEN_PROTECTED_AUTH_PATH, TOKEN_USER_PIN_INITIALIZED = 0x10, 0x20
_KINDS = {1: "certificate", 2: "private-key", 3: "public-key"}


class Token(_Handle):
    """A token present in a slot (an immutable snapshot taken when listed)."""
    _free = "mtls_token_free"

    def _string(self, name):
        return out_string(getattr(lib, f"mtls_token_{name}"), self._h)

    label = property(lambda self: self._string("label"))
    uri = property(lambda self: self._string("uri"), doc="The token's RFC 7512 pkcs11: URI.")
    manufacturer = property(lambda self: self._string("manufacturer"))
    model = property(lambda self: self._string("model"))
    serial = property(lambda self: self._string("serial"))
    module_name = property(lambda self: self._string("module_name"))
    module_path = property(lambda self: self._string("module_path"))

    @property
    def slot_id(self) -> int:
        return out_value(ctypes.c_ulong, lib.mtls_token_slot, self._h)

    @property
    def flags(self) -> int:
        return out_value(ctypes.c_uint, lib.mtls_token_flags, self._h)

    login_required = property(lambda self: bool(self.flags & TOKEN_LOGIN_REQUIRED))
    pin_locked = property(lambda self: bool(self.flags & TOKEN_PIN_LOCKED))

    def __repr__(self):
        return f"<Token {self.label!r} {self.uri}>"


class TokenObject(_Handle):
    """A certificate or key on a token (an immutable snapshot taken when listed)."""
    _free = "mtls_token_object_free"

    def _string(self, name):
        return out_string(getattr(lib, f"mtls_token_object_{name}"), self._h)

    label = property(lambda self: self._string("label"))
    uri = property(lambda self: self._string("uri"), doc="The object's RFC 7512 pkcs11: URI.")
    key_type = property(lambda self: self._string("key_type"))

    @property
    def kind(self) -> str:
        """"certificate", "private-key" or "public-key"."""
        return _KINDS[out_value(ctypes.c_int, lib.mtls_token_object_kind, self._h)]

    @property
    def id(self) -> bytes:
        """CKA_ID, which ties a key to its certificate."""
        return out_bytes(lib.mtls_token_object_id, self._h) or b""

    @property
    def certificate(self) -> Optional[Certificate]:
        """The certificate of a certificate object, else None."""
        if self.kind != "certificate":
            return None
        return Certificate(out_handle(lib.mtls_token_object_cert, self._h))

    @property
    def token(self) -> Token:
        return Token(out_handle(lib.mtls_token_object_token, self._h))

    def __repr__(self):
        return f"<TokenObject {self.kind} {self.label!r} {self.uri}>"


def list_tokens(module=None) -> list:
    """The tokens present in `module` (a PKCS#11 .so path), or in every module registered with p11-kit."""
    return out_list(lib.mtls_token_list, utf8(module), item=lambda h: Token(lib.mtls_token_ref(h)),
                    free=lib.mtls_token_list_free)


def token_objects(module=None, token_uri=None, pin=None) -> list:
    """The certificates and keys on the tokens matching `token_uri`; with `pin`, private keys too."""
    return out_list(lib.mtls_token_objects, utf8(module), utf8(token_uri), utf8(pin),
                    item=lambda h: TokenObject(lib.mtls_token_object_ref(h)), free=lib.mtls_token_object_list_free)


PinAnswer = Union[None, str, bytes]
PinSource = Union[None, str, bytes, Callable[[str, str, int], PinAnswer]]


def _pin_thunk(label, token_uri, flags, buf, size, userdata):
    """The one C PIN callback: asks the Python callable registered under `userdata`. An exception
    is kept for this thread and re-raised when mtls_identity_from_pkcs11 returns."""
    try:
        pin = _callbacks.lookup(userdata)
        value = pin(label.decode("utf-8", "replace"), token_uri.decode("utf-8", "replace"), flags) \
            if callable(pin) else pin
        if value is None:
            return 1
        value = utf8(value)
        if len(value) >= size:
            raise ValueError("PIN too long")
        ctypes.memmove(buf, value, len(value))
        buf[len(value)] = b"\0"
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised after the C call returns
        stash_callback_exception(e)
        return 1


_PIN = PIN_CB(_pin_thunk)


def identity_from_pkcs11(uri: str, pin: PinSource = None) -> Identity:
    """The identity a pkcs11: URI names; its private key stays on the token.

    `pin`: None (the URI's pin-value / pin-source, or no PIN), a str/bytes PIN, or a callable
    `pin(token_label, token_uri, flags) -> str | bytes | None` (None gives up: PinRequired).
    An exception raised by the callable is re-raised here, on this thread. For a key marked
    CKA_ALWAYS_AUTHENTICATE the PIN is asked again before each signature (during handshakes):
    libmtls keeps the callable until the identity and its connections are freed.
    """
    out = ctypes.c_void_p()
    if pin is None:
        rc = lib.mtls_identity_from_pkcs11(utf8(uri), PIN_CB(), None, _callbacks.DESTROY_CB(), ctypes.byref(out))
    else:
        # libmtls releases the registration through DESTROY once it is done with the callback.
        rc = lib.mtls_identity_from_pkcs11(utf8(uri), _PIN, _callbacks.register(pin), _callbacks.DESTROY,
                                           ctypes.byref(out))
    try:
        check(rc)
    except BaseException:
        if out.value:
            lib.mtls_identity_free(out)
        raise
    warn_library_warnings()  # a group-readable pin-source file
    return Identity(out.value)


def _with_pin(pin, call):
    """Runs call(callback) with a PIN callback made from `pin` (as identity_from_pkcs11 takes
    it); re-raises what the callable raised."""
    raised = []

    def answer(label, token_uri, flags, buf, size, _userdata):
        try:
            value = pin(label.decode(), token_uri.decode(), flags) if callable(pin) else pin
            if value is None:
                return 1
            value = utf8(value)
            if len(value) >= size:
                raise ValueError("PIN too long")
            ctypes.memmove(buf, value, len(value))
            buf[len(value)] = b"\0"
            return 0
        except BaseException as e:  # re-raised after the C call returns
            raised.append(e)
            return 1

    callback = PIN_CB(answer) if pin is not None else PIN_CB()
    try:
        result = call(callback)
    except Exception:
        if raised:
            raise raised[0]
        raise
    if raised:
        raise raised[0]
    return result


#: key types for generate_key: the header's MTLS_KEY_TYPE_* names a token makes ("rsa2048" and
#: "rsa3072", the names these bindings listed before 0.2.0, are accepted as aliases)
TOKEN_KEY_TYPES = ("ec-p256", "ec-p384", "rsa-2048", "rsa-3072", "ed25519")


def generate_key(uri, key_type="ec-p256", pin=None) -> str:
    """Generates a key pair on the token the URI names (object=LABEL and/or id=%XX): sensitive,
    never extractable. Returns the private key's pkcs11: URI. `pin` as for identity_from_pkcs11.
    A module that refused libmtls's usage preferences (no decrypt...) gets a key without them,
    with a LibraryWarning naming the attributes it set anyway."""
    uri = _with_pin(pin, lambda cb: out_string(lib.mtls_token_keygen, utf8(uri), utf8(key_type), cb, None))
    warn_library_warnings()
    return uri


def make_csr(uri, subject, pin=None) -> str:
    """A PEM certificate signing request for the token key the URI names, signed on the token."""
    return _with_pin(pin, lambda cb: out_string(lib.mtls_token_csr, utf8(uri), utf8(subject), cb, None))


def import_certificate(uri, certificate, pin=None) -> str:
    """Writes `certificate` (a Certificate) onto the token beside the key the URI names (same
    CKA_ID). Returns the certificate object's pkcs11: URI."""
    return _with_pin(pin, lambda cb: out_string(lib.mtls_token_import_cert, utf8(uri), certificate._h, cb, None))


def identity_token_uri(identity: Identity) -> Optional[str]:
    """The pkcs11: URI of the identity's private key when it lives on a token, else None."""
    return identity.token_uri


__all__ = ["Token", "TokenObject", "list_tokens", "token_objects", "identity_from_pkcs11",
           "identity_token_uri", "PinRequired", "generate_key", "make_csr", "import_certificate", "TOKEN_KEY_TYPES"]
