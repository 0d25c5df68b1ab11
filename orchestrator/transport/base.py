"""The seam between the controller and a host: one interface, implemented per transport.

Remote commands are argv lists everywhere; `shell_command` is the one function that joins them (with
shlex) for a remote shell. Remote paths that start with `~/` are made relative to the login directory,
where both an SSH exec and SFTP start, so no shell ever has to expand `~`.
"""

from __future__ import annotations

import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Protocol, Sequence, Union

from ..config.inventory import Host
from ..remotepath import login_relative  # noqa: F401 (the transports' name for it)

LineSink = Callable[[str, str], None]  # (stream name "stdout"/"stderr", line without newline)
# Seconds of silence that mean stalled: a number, None (never), or a function asked at each check (a
# job a scheduler queues is silent while it waits there, and only then: launchers.Launcher.stall_limit).
StallLimit = Union[None, float, Callable[[], Optional[float]]]


def stall_limit(limit: StallLimit) -> Optional[float]:
    """The stall limit in force now."""
    return limit() if callable(limit) else limit


class TransportError(Exception):
    """A host-level failure, classified: outcome is one of unreachable, auth-failed, timeout, failed."""

    def __init__(self, outcome: str, message: str):
        super().__init__(message)
        self.outcome = outcome


@dataclass(frozen=True)
class CommandResult:
    exit_code: int  # -1 when the connection died before an exit status arrived
    timed_out: bool = False  # the wall-clock limit (timeout) ran out
    stalled: bool = False  # nothing arrived for stall_timeout seconds


def shell_command(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> str:
    """The one place an argv becomes a shell string: every word quoted, env through `env K=V`."""
    words = list(argv)
    if env:
        words = ["env", *[f"{k}={v}" for k, v in sorted(env.items())], *words]
    return " ".join(shlex.quote(str(w)) for w in words)


class Transport(Protocol):
    host: Host

    def connect(self) -> None: ...
    def path(self, p: str) -> str: ...
    def exists(self, path: str) -> bool: ...
    def makedirs(self, path: str) -> None: ...
    def put(self, local: Path, remote: str, *, atomic: bool = False) -> int: ...
    def get(self, remote: str, local: Path) -> bool: ...
    def read_text(self, remote: str) -> Optional[str]: ...
    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        timeout: Optional[float],
        on_line: LineSink,
        stdin: Optional[bytes] = None,
        stall_timeout: StallLimit = None,
    ) -> CommandResult:
        """Run argv, streaming its lines to on_line. Ends early, the command stopped, when `timeout`
        runs out (timed_out) or when nothing at all arrives for `stall_timeout` seconds (stalled)."""

    def describe(self, argv: Sequence[str], env: Mapping[str, str]) -> str: ...
    def close(self) -> None: ...


# Per cleanup step (stop, fetch) on a host that may no longer answer.
CLEANUP_LIMIT_S = 8.0


def bounded(fn, seconds: float):
    """Run fn in a thread and give up after `seconds` (an SFTP call to a frozen host never returns).
    Returns fn's value, or None when it raised or did not finish in time."""
    box: list = []

    def target():
        try:
            box.append(fn())
        except Exception as exc:  # cleanup is best effort: report None
            box.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if not box or isinstance(box[0], Exception):
        return None
    return box[0]
