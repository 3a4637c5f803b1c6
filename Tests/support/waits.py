"""Waiting on conditions, never on a fixed time (a loaded machine only makes them slower): the one
copy, imported by Tests/e2e and bindings/python/tests."""
import time


def wait_until(condition, timeout=20.0, what="the condition"):
    """Polls `condition()` until it is true; fails with `what` if it is not within `timeout` s."""
    end = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= end:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.01)
