"""Ctrl-C in tests, whatever disposition the test run inherited. A suite started as a background job
(`CI=true .ci/run &`) inherits SIGINT ignored, and an ignored signal stays ignored across fork and exec:
a test that sends SIGINT sets the disposition its target needs instead of assuming it."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


def interruptible() -> None:
    """A `preexec_fn` for a child that a test stops with SIGINT: the child starts with SIGINT's default
    disposition (a Python child then turns it into KeyboardInterrupt, as under a terminal's Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def sigint_raises() -> Iterator[None]:
    """For the block, SIGINT raises KeyboardInterrupt in the main thread (Python's own handler, as a
    process started in a terminal has it); the disposition before is restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
