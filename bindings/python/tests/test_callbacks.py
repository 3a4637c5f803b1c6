"""Python callbacks handed to libmtls: a report callback outlives its Policy (libmtls keeps it
inside connections until its destroy function runs), and an exception raised in a report or PIN
callback is re-raised on the thread whose C call ran the callback, and only there."""
import gc
import threading

import pytest

import mtls
from mtls import _callbacks
from conftest import SOFTHSM_MODULE, anchored, identity


def report_only_policy(pki, reports):
    """Trusts the test root; for 127.0.0.1 validates as server.test and pins keys that do not
    match, report-only: each connection reports pin_mismatch and proceeds."""
    pins = [mtls.Certificate.load(pki / f).spki_pin for f in ("other-root.pem", "int-b.pem")]
    return mtls.Policy(anchors=[pki / "root.pem"],
                       host_rules=[{"host": "127.0.0.1", "verify_as": "server.test", "pins": pins,
                                    "enforcement": "report_only"}],
                       report=lambda host, rule, code, message: reports.append((host, rule, code)))


@pytest.fixture
def listener(pki):
    """A libmtls listener for customer A's clients that answers each with "ok"."""
    lst = mtls.Listener(identity(pki, "server"), client_policy=anchored(pki, "int-a.pem"))
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                with lst.accept(timeout=0.2) as c:
                    c.write(b"ok")
            except mtls.Error:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield lst.port
    stop.set()
    t.join(10)
    lst.close()


def test_report_callback_outlives_its_policy_under_gc_pressure(pki, listener):
    # Earlier tests' callbacks still waiting for the collector (a failed test's traceback holds
    # its frames) would be freed during the churn below and hide this one's count; so would those
    # of policies the shared TLS contexts of earlier tests' connections still hold, released by
    # the clear_session_cache at the end (a file run before this one on the same worker: the
    # count was 2 at the start and 0 at the end).
    mtls.clear_session_cache()
    gc.collect()
    base = _callbacks.live_count()
    reports = []
    policy = report_only_policy(pki, reports)
    assert _callbacks.live_count() == base + 1
    conns = [mtls.Connection.connect("127.0.0.1", listener, identity=identity(pki, "client-a"), policy=policy,
                                     handshake=False, resume=False) for _ in range(3)]
    del policy
    for _ in range(3):
        gc.collect()
        [bytearray(4096) for _ in range(2000)]  # churn the allocator over freed memory
    # The C policy lives on inside the connections, and with it the Python callback.
    assert _callbacks.live_count() == base + 1
    for c in conns:
        c.handshake()
        assert c.read() == b"ok"
        assert c.evaluation.trusted
    assert [r[2] for r in reports] == ["pin_mismatch"] * 3 and reports[0][1] == "127.0.0.1"
    for c in conns:
        c.close()
    gc.collect()
    mtls.clear_session_cache()  # shared TLS contexts may hold the policy too
    assert _callbacks.live_count() == base  # libmtls called destroy: the callable is released


def test_report_callback_exception_is_raised_by_the_handshake(pki, listener):
    def report(*_):
        raise KeyError("from the report callback")

    policy = report_only_policy(pki, [])
    policy.set_report_callback(report)
    c = mtls.Connection.connect("127.0.0.1", listener, identity=identity(pki, "client-a"), policy=policy,
                                handshake=False, resume=False)
    with pytest.raises(KeyError, match="from the report callback"):
        c.handshake()
    c.close()
    # Nothing is left pending for the next call on this thread.
    chain = [mtls.Certificate.load(pki / "server.pem"), mtls.Certificate.load(pki / "int-a.pem")]
    assert anchored(pki, "root.pem").evaluate(chain, host="server.test").trusted


def test_callback_exceptions_stay_on_their_thread(pki):
    chain = [mtls.Certificate.load(pki / "server.pem"), mtls.Certificate.load(pki / "int-a.pem")]

    def report(host, rule, code, message):
        if threading.current_thread().name.startswith("raiser"):
            raise RuntimeError(threading.current_thread().name)

    policy = report_only_policy(pki, [])
    policy.set_report_callback(report)
    policy.set_cache(False)
    outcomes = {}

    def run(name):
        got = []
        for _ in range(50):
            try:
                got.append(policy.evaluate(chain, host="127.0.0.1").trusted)
            except RuntimeError as e:
                got.append(str(e))
        outcomes[name] = got

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in ("raiser-1", "quiet-1", "raiser-2", "quiet-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for name, got in outcomes.items():
        assert got == ([name] * 50 if name.startswith("raiser") else [True] * 50), name


def test_pin_callback_exception_is_reraised_and_released(tokens):
    base = _callbacks.live_count()

    def pin(label, uri, flags):
        raise LookupError(f"no PIN for {label}")

    uri = f"pkcs11:token=mtls-test;object=ec-client?module-path={SOFTHSM_MODULE}"
    with pytest.raises(LookupError, match="no PIN for mtls-test"):
        mtls.identity_from_pkcs11(uri, pin=pin)
    assert _callbacks.live_count() == base
    asked = []
    ident = mtls.identity_from_pkcs11(uri, pin=lambda label, uri, flags: asked.append(label) or "1234")
    assert asked == ["mtls-test"] and ident.token_uri
    assert _callbacks.live_count() == base
    ident.close()  # logs out of the shared test token for the tests after this one


def test_a_stashed_exception_is_raised_by_the_next_check_on_its_thread_only():
    # check() after a call that succeeded skips its slow path when this thread holds nothing;
    # it must still raise what a callback stashed during that call.
    from mtls import errors
    t = threading.Thread(target=errors.stash_callback_exception, args=(RuntimeError("another thread's"),))
    t.start()
    t.join()
    errors.check(0)  # another thread's exception is not this thread's
    errors.stash_callback_exception(KeyError("first"))
    errors.stash_callback_exception(KeyError("second"))  # the first one is kept
    with pytest.raises(KeyError, match="first"):
        errors.check(0)
    errors.check(0)  # taken: nothing left
    errors.stash_callback_exception(ValueError("with a failure"))
    with pytest.raises(ValueError, match="with a failure") as e:
        errors.check(mtls.InvalidArgument.code)
    assert isinstance(e.value.__cause__, mtls.InvalidArgument)
