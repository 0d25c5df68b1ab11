"""How a host's attempt ended: the one outcome vocabulary, the stored outcome, and the judgement.

`judge` is a pure function of what the controller observed (the command's exit, the records it holds,
whether it was stopped): the execute step gathers the facts, this module decides what they mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import BaseModel

from worker.contract import protocol

Outcome = Literal["ok", "partial", "failed", "timeout", "stalled", "unreachable", "auth-failed", "interrupted"]
OUTCOMES: tuple[str, ...] = (
    "ok",
    "partial",
    "failed",
    "timeout",
    "stalled",
    "unreachable",
    "auth-failed",
    "interrupted",
)


class HostOutcome(BaseModel):
    """How one job (host, GPU slot) ended in one attempt: outcome.json, written last."""

    slot: str
    host: str
    gpu: Optional[int] = None
    attempt: int
    outcome: Outcome
    error: str = ""
    cases_total: int
    cases_done: int = 0
    statuses: dict[str, int] = {}
    problems: list[str] = []
    started_at: str = ""
    duration_s: float = 0.0
    bytes_uploaded: int = 0
    queue_s: Optional[float] = None  # a launcher with a queue: seconds the job waited there (in duration_s)


@dataclass(frozen=True)
class AttemptEnd:
    """What the controller observed when an attempt's command ended."""

    total: int  # cases the attempt was to run
    done: int  # of those, how many have a record
    cancelled: bool = False  # Ctrl-C reached this host
    started: bool = True  # the command could be launched at all
    timed_out: bool = False  # the host's wall-clock limit ran out
    stalled: bool = False  # the host sent nothing, not even a heartbeat, for its stall timeout
    exit_code: int = 0  # -1: the connection died before an exit status arrived
    hello_seen: bool = True  # the launcher said it runs (protocol.HELLO_PREFIX)
    fetched: Optional[bool] = True  # None: fetching the host's results file got no answer
    stderr_tail: str = ""  # the line of stderr most likely to explain a failure
    python: str = "python3"  # the host's interpreter, for messages
    timeout_s: float = 0.0  # the host's wall-clock limit, for messages
    stall_timeout_s: float = 0.0  # the host's stall timeout, for messages


def judge(end: AttemptEnd) -> tuple[str, str]:
    """(outcome, error) for one attempt; error is empty for ok."""
    missing = f"{end.total - end.done} of {end.total} cases have no result"
    tail = end.stderr_tail
    if end.cancelled:
        return ("ok", "") if end.done == end.total else ("interrupted", f"interrupted; {missing}")
    if not end.started:
        return ("partial" if end.done else "failed"), tail or "the run could not be started"
    if end.stalled:
        return "stalled", (
            f"no sign of life for {end.stall_timeout_s:g} s, not even a heartbeat (host frozen, or "
            f"the network cut?); {missing}"
        )
    if end.timed_out:
        return "timeout", f"did not finish within the host's {end.timeout_s:g} s limit; {missing}"
    if end.done == end.total:
        return "ok", ""
    if end.exit_code == -1:
        return ("partial" if end.done else "unreachable"), f"connection lost during the run; {missing}"
    if not end.done:
        launch = protocol.classify_exit(end.exit_code, end.hello_seen)
        if launch == protocol.LAUNCH_NO_INTERPRETER:
            return "failed", f"remote interpreter not found: {end.python} ({tail or 'exit status 127'})"
        if launch == protocol.LAUNCH_NOT_EXECUTABLE:
            return "failed", f"remote interpreter not executable: {end.python}"
        if launch == protocol.LAUNCH_GPU_BUSY:
            return "failed", tail or "the GPU was locked by another sweep"
        if launch == protocol.LAUNCH_CANNOT_START:
            return "failed", tail or "the worker cannot start on this host"
        if end.fetched is None:
            return "failed", f"results could not be fetched; {tail or 'host stopped answering'}"
    reason = tail or f"exit status {end.exit_code}"
    return ("partial" if end.done else "failed"), f"{reason}; {missing}"


def explain_stderr(lines) -> str:
    """The line of stderr most likely to explain a failure (a traceback's last line, say)."""
    for line in reversed(list(lines)):
        text = line.strip()
        if text and not protocol.is_protocol_line(text):
            return text[:400]
    return ""
