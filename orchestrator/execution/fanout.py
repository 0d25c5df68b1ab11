"""The one fan-out: a function for each host in a bounded thread pool; every host ends in a result.

Every multi-host command goes through `fan_out` (run, the recovery before a rerun, hosts --check,
provision, prune). At most `parallel` hosts work at once (the command's -f / --parallel). Each host's
work returns a value or raises; either way it becomes that host's `HostResult`, and only the caller
decides what "some failed" means (as fabric's GroupResult). Ctrl-C is handled once, here: the main
thread waits in short slices so the interrupt reaches it at once; it sets `cancel` (hosts that have not
started never start; work that polls it stops), runs `on_interrupt` (which stops what runs on the
hosts), waits a bounded time for the workers to come back, and raises KeyboardInterrupt again.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Callable, Generic, Optional, Sequence, TypeVar

Item = TypeVar("Item")
Value = TypeVar("Value")

# After Ctrl-C: how long the workers get to stop what they run and come back.
STOP_GRACE_S = 20.0


class Running:
    """What runs on the hosts now, each with how to stop it: `fan_out`'s `on_interrupt` for commands
    that start work on hosts (stop_all stops every entry at once, each within its own bound)."""

    def __init__(self, limit_s: float = STOP_GRACE_S):
        self._lock = threading.Lock()
        self._stops: dict[str, Callable[[], object]] = {}
        self.limit_s = limit_s

    def add(self, name: str, stop: Callable[[], object]) -> None:
        with self._lock:
            self._stops[name] = stop

    def remove(self, name: str) -> None:
        with self._lock:
            self._stops.pop(name, None)

    def stop_all(self) -> None:
        with self._lock:
            stops = list(self._stops.values())
        threads = [threading.Thread(target=stop, daemon=True) for stop in stops]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.limit_s)


class Cancelled(Exception):
    """The work of a host that Ctrl-C reached before it started."""


@dataclass
class HostResult(Generic[Value]):
    """What happened on one host: its value, or the error its work raised."""

    name: str
    value: Optional[Value] = None
    error: Optional[BaseException] = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe_error(self) -> str:
        if self.error is None:
            return ""
        text = str(self.error)
        return (
            text
            if isinstance(self.error, Exception) and text and type(self.error).__module__.startswith("orchestrator")
            else f"{type(self.error).__name__}: {text}".rstrip(": ")
        )


def fan_out(
    items: Sequence[Item],
    work: Callable[[Item], Value],
    *,
    parallel: int,
    name_of: Callable[[Item], str] = lambda item: getattr(item, "name"),
    cancel: Optional[threading.Event] = None,
    on_interrupt: Callable[[], None] = lambda: None,
) -> list[HostResult[Value]]:
    """`work(item)` for every item, at most `parallel` at once; one HostResult per item, in order.
    Raises KeyboardInterrupt (after stopping, see the module docstring) and nothing else."""
    cancel = cancel or threading.Event()
    results: list[HostResult[Value]] = [HostResult(name=name_of(item)) for item in items]

    def one(index: int) -> None:
        if cancel.is_set():
            results[index].error = Cancelled("interrupted before it started")
            return
        try:
            results[index].value = work(items[index])
        except BaseException as exc:  # a host's failure is its result; the pool never dies of it
            results[index].error = exc

    if not items:
        return results
    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(items))), thread_name_prefix="fanout")
    futures: list[Future] = []
    try:
        futures.extend(pool.submit(one, i) for i in range(len(items)))
        for future in futures:
            while True:
                try:
                    future.result(timeout=0.2)  # short slices: Ctrl-C reaches the main thread at once
                    break
                except FutureTimeout:
                    continue
    except KeyboardInterrupt:
        cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
        stopper = threading.Thread(target=on_interrupt, name="fanout-stop", daemon=True)
        stopper.start()
        stopper.join(STOP_GRACE_S)
        for future in futures:
            try:
                future.result(timeout=STOP_GRACE_S)
            except BaseException:
                pass
        raise
    pool.shutdown(wait=True)
    return results
