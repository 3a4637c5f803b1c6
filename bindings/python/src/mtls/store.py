"""The labeled credential store (mtls_store)."""
import ctypes
import datetime
import os
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Tuple, Union

from ._lib import lib, fn, take_string, c_void_pp, c_size_p
from ._handle import _Handle, utf8, out_handle, out_bytes, out_string, out_value, out_list, take_strings, warn_library_warnings
from .certificate import Certificate
from .identity import Identity
from .tokens import identity_from_pkcs11
from .errors import check, InvalidArgument, NotFound

IDENTITY, CERTIFICATE, TOKEN_IDENTITY = 1, 2, 3
_CLASS_NAMES = {IDENTITY: "identity", CERTIFICATE: "certificate", TOKEN_IDENTITY: "token-identity"}
_CLASS_BY_NAME = {v: k for k, v in _CLASS_NAMES.items()}
SECRET_PASSPHRASE, SECRET_KEY = 1, 2


class StoreOptions(ctypes.Structure):
    """mtls_store_options (version 1)."""
    _fields_ = [("version", ctypes.c_uint), ("busy_timeout_ms", ctypes.c_int), ("create", ctypes.c_int),
                ("kdf_log_n", ctypes.c_int), ("kdf_r", ctypes.c_int), ("kdf_p", ctypes.c_int)]


_opts_p = ctypes.POINTER(StoreOptions)
_items_pp = ctypes.POINTER(c_void_pp)

# int mtls_store_options_init(mtls_store_options *opts, unsigned int version)
fn("mtls_store_options_init", ctypes.c_int, _opts_p, ctypes.c_uint)
# int mtls_store_open(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
#                     const mtls_store_options *opts, mtls_store **out)
fn("mtls_store_open", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _opts_p, c_void_pp)
# int mtls_store_open_secret_file(const char *path, const char *secret_file, const mtls_store_options *opts,
#                                 mtls_store **out)
fn("mtls_store_open_secret_file", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, _opts_p, c_void_pp)
# int mtls_store_open_key_file(const char *path, const char *key_file, const mtls_store_options *opts, mtls_store **out)
fn("mtls_store_open_key_file", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, _opts_p, c_void_pp)
# void mtls_store_close(mtls_store *store)
fn("mtls_store_close", None, ctypes.c_void_p)
# int mtls_store_put_identity(mtls_store *store, const char *label, const mtls_identity *identity, int replace)
fn("mtls_store_put_identity", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)
# int mtls_store_put_identities(mtls_store *store, const char *const *labels,
#                               mtls_identity *const *identities, size_t count, int replace)
fn("mtls_store_put_identities", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), c_void_pp,
   ctypes.c_size_t, ctypes.c_int)
# int mtls_store_put_cert(mtls_store *store, const char *label, const mtls_cert *cert, int replace)
fn("mtls_store_put_cert", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)
# int mtls_store_put_token_identity(mtls_store *store, const char *label, const char *uri, const mtls_cert *cert,
#                                   mtls_cert *const *chain, size_t chain_count, int replace)
fn("mtls_store_put_token_identity", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
   c_void_pp, ctypes.c_size_t, ctypes.c_int)
# int mtls_store_import_p12(mtls_store *store, const char *label, const uint8_t *data, size_t len,
#                           const char *password, int replace, mtls_identity **out)
fn("mtls_store_import_p12", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
   ctypes.c_char_p, ctypes.c_int, c_void_pp)
# int mtls_store_get_identity(mtls_store *store, const char *label, mtls_identity **out)
fn("mtls_store_get_identity", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, c_void_pp)
# int mtls_store_get_cert(mtls_store *store, const char *label, mtls_cert **out)
fn("mtls_store_get_cert", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, c_void_pp)
# int mtls_store_get_token_identity(mtls_store *store, const char *label, char **uri, mtls_cert **cert)
fn("mtls_store_get_token_identity", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, c_void_pp, c_void_pp)
# int mtls_store_identities(mtls_store *store, mtls_identity ***out, size_t *count)
fn("mtls_store_identities", ctypes.c_int, ctypes.c_void_p, _items_pp, c_size_p)
# int mtls_store_item_info(mtls_store *store, const char *label, int item_class, mtls_store_item **out)
fn("mtls_store_item_info", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, c_void_pp)
# int mtls_store_list(mtls_store *store, int item_class, mtls_store_item ***out, size_t *count)
fn("mtls_store_list", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, _items_pp, c_size_p)
# int mtls_store_find_sha256(mtls_store *store, const char *sha256_hex, mtls_store_item ***out, size_t *count)
fn("mtls_store_find_sha256", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, _items_pp, c_size_p)
# int mtls_store_find_subject(mtls_store *store, const char *subject, mtls_store_item ***out, size_t *count)
fn("mtls_store_find_subject", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, _items_pp, c_size_p)
# void mtls_store_item_free(mtls_store_item *item)
fn("mtls_store_item_free", None, ctypes.c_void_p)
# void mtls_store_item_list_free(mtls_store_item **list, size_t count)
fn("mtls_store_item_list_free", None, c_void_pp, ctypes.c_size_t)
for _name in ("label", "subject", "issuer", "leaf_sha256", "token_uri"):
    # int mtls_store_item_<field>(const mtls_store_item *item, char **out)
    fn(f"mtls_store_item_{_name}", ctypes.c_int, ctypes.c_void_p, c_void_pp)
# int mtls_store_item_class(const mtls_store_item *item, int *out)
fn("mtls_store_item_class", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
for _name in ("not_after", "created", "modified"):
    # int mtls_store_item_<time>(const mtls_store_item *item, int64_t *out)
    fn(f"mtls_store_item_{_name}", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))
# int mtls_store_item_chain_sha256s(const mtls_store_item *item, char ***out, size_t *count)
fn("mtls_store_item_chain_sha256s", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(c_void_pp), c_size_p)
# int mtls_store_delete(mtls_store *store, const char *label, int item_class, size_t *deleted)
fn("mtls_store_delete", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, c_size_p)
# int mtls_store_delete_class(mtls_store *store, int item_class, size_t *deleted)
fn("mtls_store_delete_class", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, c_size_p)
# int mtls_store_export_p12(mtls_store *store, const char *label, const char *password, int legacy,
#                           uint8_t **out, size_t *out_len)
fn("mtls_store_export_p12", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
   c_void_pp, c_size_p)
# int mtls_store_change_secret(mtls_store *store, const uint8_t *secret, size_t secret_len, int secret_kind)
fn("mtls_store_change_secret", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int)
# int mtls_store_write_counter(mtls_store *store, uint64_t *out)
fn("mtls_store_write_counter", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))
# int mtls_store_upgrade_preview(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
#                                const mtls_store_options *opts, mtls_store_item ***items, size_t *count,
#                                char **confirmation)
fn("mtls_store_upgrade_preview", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _opts_p,
   _items_pp, c_size_p, c_void_pp)
# int mtls_store_upgrade(const char *path, const uint8_t *secret, size_t secret_len, int secret_kind,
#                        const mtls_store_options *opts, const char *confirmation, size_t *vouched)
fn("mtls_store_upgrade", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _opts_p,
   ctypes.c_char_p, c_size_p)


def _secret(secret):
    """(bytes, kind) from a str/bytes passphrase or a StoreKey."""
    if isinstance(secret, StoreKey):
        return secret.key, SECRET_KEY
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    return bytes(secret), SECRET_PASSPHRASE


#: The passphrase of a store opened with insecure_no_secret=True: public, so such a store's
#: contents are as good as unencrypted (libmtls refuses an empty passphrase). For tests and demos.
INSECURE_NO_SECRET = b"mtls: insecure store with no secret"


class _NoSuchLabel(NotFound, KeyError):
    """store[label] for a label the store does not hold: mtls.NotFound and KeyError."""

    def __str__(self) -> str:
        return self.message


class StoreKey:
    """A 32-byte raw store key (as opposed to a passphrase)."""

    def __init__(self, key: bytes):
        if len(key) != 32:
            raise ValueError("a store key is 32 bytes")
        self.key = bytes(key)


def _time(t):
    return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc)


@dataclass(frozen=True)
class StoreItem:
    """Metadata of a stored item (nothing decrypted)."""
    label: str
    item_class: str  # "identity" | "certificate" | "token-identity"
    subject: str
    issuer: str
    not_after: datetime.datetime
    leaf_sha256: str
    chain_sha256: List[str] = field(default_factory=list)
    token_uri: Optional[str] = None
    created: Optional[datetime.datetime] = None
    modified: Optional[datetime.datetime] = None

    @classmethod
    def _from_handle(cls, h):
        def s(name):
            return out_string(getattr(lib, f"mtls_store_item_{name}"), h)

        def t(name):
            return _time(out_value(ctypes.c_int64, getattr(lib, f"mtls_store_item_{name}"), h))
        return cls(label=s("label"), item_class=_CLASS_NAMES[out_value(ctypes.c_int, lib.mtls_store_item_class, h)],
                   subject=s("subject"), issuer=s("issuer"), not_after=t("not_after"), leaf_sha256=s("leaf_sha256"),
                   chain_sha256=take_strings(lib.mtls_store_item_chain_sha256s, h),
                   token_uri=s("token_uri"), created=t("created"), modified=t("modified"))


@dataclass(frozen=True)
class UpgradePreview:
    """What :meth:`Store.upgrade` would vouch for in a store made before row authentication:
    every item (token URIs without any pin-value), and the confirmation to pass to it."""
    items: List[StoreItem]
    confirmation: str


def _class_code(item_class):
    if item_class is None:
        return 0
    if isinstance(item_class, int):
        return item_class
    return _CLASS_BY_NAME[item_class]


# ---- issue 26: expiry as data

class ExpiryItemC(ctypes.Structure):
    """typedef struct mtls_expiry_item."""
    _fields_ = [
        ("label", ctypes.c_char_p),
        ("item_class", ctypes.c_int),
        ("position", ctypes.c_int),
        ("subject", ctypes.c_char_p),
        ("sha256", ctypes.c_char_p),
        ("not_before", ctypes.c_int64),
        ("not_after", ctypes.c_int64),
    ]


# int mtls_store_expiry(mtls_store *store, mtls_expiry_item **out, size_t *count)
fn("mtls_store_expiry", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ExpiryItemC)), c_size_p)
# void mtls_expiry_items_free(mtls_expiry_item *items, size_t count)
fn("mtls_expiry_items_free", None, ctypes.POINTER(ExpiryItemC), ctypes.c_size_t)
# int mtls_store_earliest_expiry(mtls_store *store, int64_t *not_after, char **label)
fn("mtls_store_earliest_expiry", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
   ctypes.POINTER(ctypes.c_void_p))
# int mtls_store_metrics(mtls_store *store, char **out)
fn("mtls_store_metrics", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


def _utc(seconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


@dataclass(frozen=True)
class ExpiryItem:
    """One certificate of a stored item: position 0 is the item's leaf, 1... its chain."""
    label: str
    item_class: str
    position: int
    subject: str
    sha256: str
    not_before: datetime.datetime
    not_after: datetime.datetime

    def days_left(self, now: Optional[datetime.datetime] = None) -> int:
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return int((self.not_after - now).total_seconds() // 86400)


_EXPIRY_CLASSES = {1: "identity", 2: "certificate", 3: "token-identity"}


class Store(_Handle):
    """A labeled credential store file. Safe to share across threads; use as a context manager.

    ``secret`` is a passphrase (str or bytes) or a :class:`StoreKey`; or ``secret_file`` names a
    passphrase file (always a passphrase, whatever its length), or ``key_file`` a raw 32-byte key
    file. With none of them, opening is an error unless ``insecure_no_secret=True`` (the store
    is then protected by a public passphrase, INSECURE_NO_SECRET: anyone may open it).
    ``kdf_log_n`` sets scrypt's cost for a new store (default 17; tests may use 10).
    ``store[label]`` is the Identity (or Certificate) stored under ``label``.

    The store must exist (:class:`mtls.NotFound` naming the path otherwise, as ``sqlite3``'s
    ``mode=rw``): a mistyped path is an error, never a new empty store. ``create=True`` creates a
    missing store and its folder (0700); the new store is made in a temporary file beside it and
    appears at ``path`` only once complete, so an interrupted creation leaves no file there."""
    _free = "mtls_store_close"

    def __init__(self, path: "Union[str, os.PathLike[str]]", secret: "Union[None, str, bytes, StoreKey]" = None, *,
                 secret_file: "Union[None, str, os.PathLike[str]]" = None,
                 key_file: "Union[None, str, os.PathLike[str]]" = None, create: bool = False,
                 busy_timeout_ms: Optional[int] = None, kdf_log_n: Optional[int] = None, kdf_r: Optional[int] = None,
                 kdf_p: Optional[int] = None, insecure_no_secret: bool = False) -> None:
        if secret is None and secret_file is None and key_file is None and not insecure_no_secret:
            raise InvalidArgument("Store(path) needs secret=, secret_file= or key_file=; a store anyone may open "
                                  "(a public passphrase) is Store(path, insecure_no_secret=True)", InvalidArgument.code)
        opts = StoreOptions()
        check(lib.mtls_store_options_init(ctypes.byref(opts), 1))
        opts.create = 1 if create else 0
        if busy_timeout_ms is not None:
            opts.busy_timeout_ms = busy_timeout_ms
        if kdf_log_n is not None:
            opts.kdf_log_n = kdf_log_n
        if kdf_r is not None:
            opts.kdf_r = kdf_r
        if kdf_p is not None:
            opts.kdf_p = kdf_p
        if key_file is not None:
            # A raw 32-byte key file; ``secret_file`` is always a passphrase file.
            h = out_handle(lib.mtls_store_open_key_file, utf8(str(path)), utf8(str(key_file)), ctypes.byref(opts))
        elif secret_file is not None:
            h = out_handle(lib.mtls_store_open_secret_file, utf8(str(path)), utf8(str(secret_file)), ctypes.byref(opts))
        else:
            data, kind = _secret(secret if secret is not None else INSECURE_NO_SECRET)
            h = out_handle(lib.mtls_store_open, utf8(str(path)), data, len(data), kind, ctypes.byref(opts))
        warn_library_warnings()  # a group-readable secret or key file
        super().__init__(h)

    def close(self) -> None:
        """Closes the store and wipes its data key."""
        super().close()

    # putting
    def put_identity(self, label: str, identity: Identity, replace: bool = False) -> None:
        check(lib.mtls_store_put_identity(self._h, utf8(label), identity._h, int(replace)))

    def put_identities(self, items: "Iterable[Tuple[str, Identity]]", replace: bool = False) -> None:
        """Puts [(label, identity)] in one transaction: all or none."""
        items = list(items)
        labels = (ctypes.c_char_p * max(len(items), 1))(*[utf8(l) for l, _ in items])
        ids = (ctypes.c_void_p * max(len(items), 1))(*[i._h for _, i in items])
        check(lib.mtls_store_put_identities(self._h, labels, ctypes.cast(ids, c_void_pp), len(items), int(replace)))

    def put_certificate(self, label: str, cert: Certificate, replace: bool = False) -> None:
        check(lib.mtls_store_put_cert(self._h, utf8(label), cert._h, int(replace)))

    def put_token_identity(self, label, uri, cert: Certificate, chain=(), replace=False):
        arr = (ctypes.c_void_p * max(len(chain), 1))(*[c._h for c in chain])
        check(lib.mtls_store_put_token_identity(self._h, utf8(label), utf8(uri), cert._h,
                                                ctypes.cast(arr, c_void_pp) if chain else None, len(chain),
                                                int(replace)))

    def import_pkcs12(self, label: str, data: bytes, password: "Union[None, str, bytes]" = None,
                      replace: bool = False) -> Identity:
        """Imports a .p12's identity under ``label`` and returns it. password None = no password."""
        return Identity(out_handle(lib.mtls_store_import_p12, self._h, utf8(label), data, len(data), utf8(password),
                                   int(replace)))

    # getting
    def __getitem__(self, label: str) -> "Union[Identity, Certificate]":
        """The item stored under `label`: an Identity (a token identity is opened on its token,
        with the PIN its URI names), else a Certificate. KeyError (also mtls.NotFound) if none."""
        try:
            item = self.info(label)
        except NotFound as e:
            raise _NoSuchLabel(f"no item labelled {label!r} in the store", NotFound.code) from e
        if item.item_class == "identity":
            return self.get_identity(label)
        if item.item_class == "token-identity":
            uri, _ = self.get_token_identity(label)
            return identity_from_pkcs11(uri)
        return self.get_certificate(label)

    def __contains__(self, label: object) -> bool:
        try:
            self.info(str(label))
            return True
        except NotFound:
            return False

    def get_identity(self, label: str) -> Identity:
        return Identity(out_handle(lib.mtls_store_get_identity, self._h, utf8(label)))

    def get_certificate(self, label) -> Certificate:
        return Certificate(out_handle(lib.mtls_store_get_cert, self._h, utf8(label)))

    def get_token_identity(self, label: str) -> "Tuple[Optional[str], Certificate]":
        """(uri, Certificate)."""
        uri, cert = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.mtls_store_get_token_identity(self._h, utf8(label), ctypes.byref(uri), ctypes.byref(cert)))
        return take_string(uri), Certificate(cert.value)

    def identities(self) -> List[Identity]:
        """Every stored identity (decrypted), in label order."""
        return out_list(lib.mtls_store_identities, self._h, item=lambda h: Identity(lib.mtls_identity_ref(h)),
                        free=lib.mtls_identity_list_free)

    # metadata
    def _items(self, func, *args):
        return out_list(func, self._h, *args, item=StoreItem._from_handle, free=lib.mtls_store_item_list_free)

    def info(self, label, item_class=None) -> StoreItem:
        h = out_handle(lib.mtls_store_item_info, self._h, utf8(label), _class_code(item_class))
        try:
            return StoreItem._from_handle(h)
        finally:
            lib.mtls_store_item_free(h)

    def list(self, item_class=None) -> List[StoreItem]:
        return self._items(lib.mtls_store_list, _class_code(item_class))

    def find_sha256(self, hex_fingerprint) -> List[StoreItem]:
        return self._items(lib.mtls_store_find_sha256, utf8(hex_fingerprint))

    def find_subject(self, subject) -> List[StoreItem]:
        return self._items(lib.mtls_store_find_subject, utf8(subject))

    # deleting, exporting, the secret
    def delete(self, label, item_class=None) -> int:
        return out_value(ctypes.c_size_t, lib.mtls_store_delete, self._h, utf8(label), _class_code(item_class))

    def delete_class(self, item_class) -> int:
        return out_value(ctypes.c_size_t, lib.mtls_store_delete_class, self._h, _class_code(item_class))

    def export_pkcs12(self, label: str, password: "Union[str, bytes]", legacy: bool = False) -> bytes:
        return out_bytes(lib.mtls_store_export_p12, self._h, utf8(label), utf8(password), int(legacy))

    def change_secret(self, secret: "Union[str, bytes, StoreKey]") -> None:
        """Changes the secret and rotates the data key (every key re-sealed, every row
        re-authenticated, in one transaction). Other open handles then raise BadSecret."""
        data, kind = _secret(secret)
        check(lib.mtls_store_change_secret(self._h, data, len(data), kind))

    # the store as a whole
    @property
    def write_counter(self) -> int:
        """The write counter of the store's authenticated header: every write transaction (by any
        handle) increments it, and it never goes back. Keep the last value you saw outside the
        file and compare: a lower one means the whole file was replaced by an older copy."""
        return out_value(ctypes.c_uint64, lib.mtls_store_write_counter, self._h)

    @staticmethod
    def upgrade_preview(path: "Union[str, os.PathLike[str]]", secret: "Union[str, bytes, StoreKey]") -> "Optional[UpgradePreview]":
        """What upgrading a store made before row authentication (opening it raises
        mtls.UpgradeRequired) would vouch for; None when it needs no explicit upgrade. Changes
        nothing."""
        data, kind = _secret(secret)
        items, count, conf = c_void_pp(), ctypes.c_size_t(), ctypes.c_void_p()
        check(lib.mtls_store_upgrade_preview(utf8(str(path)), data, len(data), kind, None, ctypes.byref(items),
                                             ctypes.byref(count), ctypes.byref(conf)))
        try:
            listed = [StoreItem._from_handle(items[i]) for i in range(count.value)]
        finally:
            if items:
                lib.mtls_store_item_list_free(items, count.value)
        confirmation = take_string(conf)
        return None if confirmation is None else UpgradePreview(listed, confirmation)

    @staticmethod
    def upgrade(path: "Union[str, os.PathLike[str]]", secret: "Union[str, bytes, StoreKey]", confirmation: str) -> int:
        """Upgrades a store made before row authentication, vouching for what
        :meth:`upgrade_preview` showed: only if the store still holds exactly that (``confirmation``
        from the preview; InvalidArgument otherwise, nothing written). Returns how many items."""
        data, kind = _secret(secret)
        n = ctypes.c_size_t()
        check(lib.mtls_store_upgrade(utf8(str(path)), data, len(data), kind, None, utf8(confirmation), ctypes.byref(n)))
        return n.value

    # ---- issue 26: expiry as data

    def expiry(self) -> "List[ExpiryItem]":
        """Every certificate in the store (identities and their chains, certificates, token
        identities' certificates), earliest notAfter first; no private key is opened."""
        arr, n = ctypes.POINTER(ExpiryItemC)(), ctypes.c_size_t()
        check(lib.mtls_store_expiry(self._h, ctypes.byref(arr), ctypes.byref(n)))
        try:
            return [ExpiryItem(arr[i].label.decode("utf-8", "replace"),
                               _EXPIRY_CLASSES.get(arr[i].item_class, str(arr[i].item_class)), arr[i].position,
                               arr[i].subject.decode("utf-8", "replace"), arr[i].sha256.decode("ascii"),
                               _utc(arr[i].not_before), _utc(arr[i].not_after)) for i in range(n.value)]
        finally:
            lib.mtls_expiry_items_free(arr, n.value)

    def earliest_expiry(self) -> "Tuple[datetime.datetime, str]":
        """(notAfter, label) of the certificate that expires first (NotFound when the store is empty)."""
        t, label = ctypes.c_int64(), ctypes.c_void_p()
        check(lib.mtls_store_earliest_expiry(self._h, ctypes.byref(t), ctypes.byref(label)))
        return _utc(t.value), take_string(label)

    def metrics(self) -> str:
        """The store's certificates' validity as Prometheus text."""
        return out_string(lib.mtls_store_metrics, self._h)
