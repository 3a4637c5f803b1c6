"""libmtls for Python: mutual-TLS identities, trust and connections, over the C ABI (ctypes)."""
from ._lib import lib as _lib
from .errors import MTLSError  # noqa: F401
from . import errors  # noqa: F401
from .certificate import Certificate  # noqa: F401
from .store import Store, StoreItem, StoreKey  # noqa: F401
from .pkcs12 import Identity, PKCS12, ChainCheck  # noqa: F401
from .pki import IssuedCertificate  # noqa: F401
from .trust import Policy, TrustResult, TrustReason  # noqa: F401
from .tls import Connection, Listener, configure_ssl_ctx, set_ssl_peer, set_ssl_ctx_peer  # noqa: F401
from .tokens import Token, TokenObject, list_tokens, token_objects, identity_from_pkcs11  # noqa: F401

__version__ = _lib.mtls_version().decode()
