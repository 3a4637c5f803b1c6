"""libmtls for Python: mutual-TLS identities, trust and connections, over the C ABI (ctypes).

    import mtls
    policy = mtls.Policy(anchors=[mtls.Certificate.load("root.pem")], verify_as="api.internal")
    ident = mtls.Identity.from_pkcs12(open("alice.p12", "rb").read(), "secret")
    with mtls.connect("10.0.0.7", 8443, identity=ident, policy=policy) as conn: ...

HTTP: mtls.requests.Adapter (requests), mtls.httpx.Transport (httpx), mtls.http.HTTPSConnection
(http.client, urllib). Errors: mtls.Error and one subclass per libmtls status (mtls.errors)."""
import importlib

from ._lib import lib as _lib
from . import errors
from .errors import (  # noqa: F401 - the exceptions, importable from the top level
    Error, MTLSError, TrustError, PinError, IOError_, IOFailure, InvalidArgument, NoMemory, Internal, ParseError,
    BufferTooSmall, NotFound, BadPassword, Corrupt, NotPKCS12, NoIdentity, Unsupported, KeyMismatch, LimitExceeded,
    Duplicate, BadSecret, NotAStore, SchemaTooNew, Locked, ReadOnly, DiskFull, InvalidPolicy, Untrusted,
    ConnectError, Timeout, HandshakeError, PeerAlert, WantRead, WantWrite, Closed, NoMatchingIdentity, TokenError,
    PinIncorrect, PinLocked, TokenNotPresent, TokenRemoved, BadURI, PinRequired, TruncatedError, UpgradeRequired,
    CARejected, ChallengeFailed,
)
from .certificate import Certificate
from .store import Store, StoreItem, StoreKey
from .identity import Identity, ChainCheck
from .pkcs12 import PKCS12
from .pki import IssuedCertificate
from .enrollment import renew, Renewer, enroll_acme, enroll_est, enroll_pki, enroll_revoke
from .trust import Policy, HostRule, TrustResult, TrustReason, Overrides
from .tls import (Connection, ConnectOptions, Listener, configure_ssl_ctx, set_ssl_peer, set_ssl_ctx_peer,
                  clear_session_cache, connect, resolve_identity, address_is_local, Forwarder)
from .tokens import Token, TokenObject, list_tokens, token_objects, identity_from_pkcs11
from ._handle import LibraryWarning, take_warnings
from .rotation import IdentitySource, PolicyWatch, AnchorWatch, Event
from .store import ExpiryItem

__version__: str = _lib.mtls_version().decode()

__all__ = [
    "errors", "Error", "MTLSError", "TrustError", "PinError", "IOError_", "IOFailure", "InvalidArgument", "NoMemory",
    "Internal", "ParseError", "BufferTooSmall", "NotFound", "BadPassword", "Corrupt", "NotPKCS12", "NoIdentity",
    "Unsupported", "KeyMismatch", "LimitExceeded", "Duplicate", "BadSecret", "NotAStore", "SchemaTooNew", "Locked",
    "ReadOnly", "DiskFull", "InvalidPolicy", "Untrusted", "ConnectError", "Timeout", "HandshakeError", "PeerAlert",
    "WantRead", "WantWrite", "Closed", "NoMatchingIdentity", "TokenError", "PinIncorrect", "PinLocked",
    "TokenNotPresent", "TokenRemoved", "BadURI", "PinRequired", "TruncatedError", "UpgradeRequired", "CARejected",
    "ChallengeFailed", "renew", "Renewer", "enroll_acme", "enroll_est", "enroll_pki", "enroll_revoke", "Certificate", "Store", "StoreItem",
    "StoreKey", "Identity", "PKCS12", "ChainCheck",
    "IssuedCertificate",
    "Policy", "HostRule", "TrustResult", "TrustReason", "Overrides", "Connection", "ConnectOptions", "Listener",
    "configure_ssl_ctx", "set_ssl_peer", "set_ssl_ctx_peer", "clear_session_cache", "connect", "resolve_identity", "address_is_local", "Forwarder", "Token", "TokenObject",
    "list_tokens", "token_objects", "identity_from_pkcs11", "__version__",
    "LibraryWarning", "take_warnings",
    "IdentitySource", "PolicyWatch", "AnchorWatch", "Event", "ExpiryItem",
]


def __getattr__(name: str) -> object:
    """mtls.requests, mtls.httpx, mtls.http and mtls.asyncio load on first use (requests and httpx are optional)."""
    if name in ("requests", "httpx", "http", "asyncio"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mtls' has no attribute {name!r}")
