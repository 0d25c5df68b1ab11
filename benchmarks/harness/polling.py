"""Waiting in tests and benchmarks: poll what the code exposes, with a deadline, instead of sleeping a
fixed time."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    """True as soon as `predicate()` holds, polled every `interval` seconds; False when it still does not
    after `timeout` seconds (asked once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
