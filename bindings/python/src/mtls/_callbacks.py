"""Python callables handed to libmtls as C callbacks (private).

libmtls keeps a callback for as long as any object that holds it lives: a policy's report
callback lives on inside connections, listeners and SSL_CTXs made with the policy, after the
Python :class:`~mtls.Policy` is gone. So the callable is not owned by the Python object that
registered it: it sits in a registry under an integer key, the key is the C `userdata`, and
libmtls's `destroy(userdata)` removes it when the last holder lets go. The C-callable thunks are
module-level and never freed."""
import ctypes
import itertools
import threading
from typing import Any, Dict, Optional

#: void (*destroy)(void *userdata)
DESTROY_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_lock = threading.Lock()
_registry: Dict[int, Any] = {}
_keys = itertools.count(1)


def register(obj: Any) -> int:
    """Keeps `obj` alive until libmtls calls destroy on the returned key."""
    with _lock:
        key = next(_keys)
        _registry[key] = obj
    return key


def lookup(userdata: Optional[int]) -> Any:
    """The object registered under a callback's userdata (None if it is gone)."""
    return _registry.get(userdata or 0)


def release(key: Optional[int]) -> None:
    with _lock:
        _registry.pop(key or 0, None)


def live_count() -> int:
    """How many callables libmtls still holds (for tests)."""
    return len(_registry)


def _destroy(userdata: Optional[int]) -> None:
    try:
        release(userdata)
    except Exception:  # noqa: BLE001 - interpreter shutdown: module globals may be gone
        pass


#: The one destroy function every registration passes.
DESTROY = DESTROY_CB(_destroy)
