"""The Python API states no default of its own for what the library decides: a keyword left out
is None, and the value in force is the one the C init function writes from the core (TLSDefaults,
LifecycleDefaults). Each test fails if a default is typed again in Python."""
import ctypes
import inspect

import mtls
import mtls.asyncio
from mtls import rotation, tls
from mtls._lib import lib
from mtls.errors import check


def _defaults(func, *names):
    params = inspect.signature(func).parameters
    return {n: params[n].default for n in names}


def test_tls_version_bounds_are_the_librarys():
    for func in (tls.ConnectOptions, tls.Listener.__init__, mtls.asyncio.start_server):
        assert _defaults(func, "min_tls", "max_tls") == {"min_tls": None, "max_tls": None}, func
    o, _ = tls.ConnectOptions().to_c("example.test")
    ref = tls.ConnOptions()
    check(lib.mtls_conn_options_init(ctypes.byref(ref), tls.CONN_OPTIONS_VERSION))
    assert (o.min_tls, o.max_tls) == (ref.min_tls, ref.max_tls) != (0, 0)
    o, _ = tls.ConnectOptions(min_tls="1.3").to_c("example.test")
    assert o.min_tls == tls._VERSIONS["1.3"] and o.max_tls == ref.max_tls


def test_expiry_warning_window_is_the_librarys():
    assert _defaults(rotation.IdentitySource.follow, "warning_days") == {"warning_days": None}
    ref = rotation.WatchOptions()
    check(lib.mtls_watch_options_init(ctypes.byref(ref), rotation.WATCH_OPTIONS_VERSION))
    assert rotation._watch_options(None, None).warning_days == ref.warning_days > 0
    assert rotation._watch_options(3, None).warning_days == 3
