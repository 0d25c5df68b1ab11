"""The launcher seam, and the direct launcher: the job is the command, run where the transport runs it."""

from __future__ import annotations

from typing import Callable, Optional

from ..transport import Transport


def job_name(run_id: str, slot: str, attempt: int) -> str:
    """A job's name, unique to its run, slot and attempt: how a launcher finds it again (to cancel it,
    or to ask why it ended)."""
    return f"fleetbench-{run_id}-{slot}-a{attempt}"


class LaunchWatch:
    """One attempt's view of the job between launch and its start: a direct job starts at once."""

    def see(self, line: str, now: float) -> Optional[str]:
        """A stderr line of the launcher's own (not the job's): a phrase for the live view and the log
        ("queued (...)", "started after ..."), or None when the line is not the launcher's."""
        return None

    def waiting(self) -> bool:
        """The job waits to start (no stall check then: the wall-clock limit, which counts the wait, ends it)."""
        return False

    def queue_s(self) -> Optional[float]:
        """Seconds the job waited before it started (None: a launcher without a queue)."""
        return None


class Launcher:
    """How a host's jobs start, are stopped, and which failures are the launcher's (see the package)."""

    name = "direct"
    upload_first = False  # upload before the first launch instead of on the host's word (run_first)

    def __init__(self, host):
        self.host = host

    def argv(self, command: list[str], job_name: str) -> list[str]:
        return list(command)

    def watch(self, launched: float) -> LaunchWatch:
        return LaunchWatch()

    def stall_limit(self, watch: LaunchWatch, stall_timeout_s: float) -> Callable[[], Optional[float]] | float:
        """The stall limit the transport applies: a number, or a callable asked at each check."""
        return stall_timeout_s

    def stop(self, transport: Transport, job_name: str, stop_process_group: Callable[[], bool]) -> bool:
        """Stop the job wherever it runs. Returns whether something was found."""
        return stop_process_group()

    def verdict(
        self, transport: Transport, job_name: str, outcome: str, error: str, missing: int, total: int, cancelled: bool
    ) -> tuple[str, str]:
        """The attempt's (outcome, error) with failures of the launcher's own making named."""
        return outcome, error

    def describe_wait(self, queue_s: float, duration_s: float) -> str:
        return ""

    def gpus_per_job(self) -> Optional[int]:
        """GPUs a scheduler gives each job (None: the host's own `gpus`, one job per GPU)."""
        return None

    def before_check(self, transport: Transport) -> tuple[bool, str]:
        """For `hosts --check`: (usable, a note) about where jobs would run, before the probe runs."""
        return True, ""

    def after_check(self, transport: Transport, job_name: str, succeeded: bool) -> None:
        """For `hosts --check`: clean up after the probe (a probe that failed may leave a job behind)."""


DirectLauncher = Launcher
