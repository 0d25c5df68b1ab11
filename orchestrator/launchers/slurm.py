"""The Slurm launcher (`launcher: slurm`): the same launcher script and worker, run by Slurm on a node it
allocates, as one job step per slot, started from a login node (reached over SSH, or this machine).

The job runs in the foreground under `srun`, so its stdout streams back exactly as an SSH job's does;
the launcher and worker are uploaded to the login node's `workdir`, which must be on the filesystem
the nodes share. Each job has a name unique to its run, slot and attempt (`job_name`): that is how the
controller finds it again to say how long it waited in the queue, why Slurm ended it, or to cancel it.
Every Slurm command is built here, as an argv list; the transport quotes it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..config.inventory import Host
from ..transport import CLEANUP_LIMIT_S, Transport, bounded
from .base import Launcher, LaunchWatch

# srun's own lines about the allocation (stderr, default verbosity): the wait in the queue.
QUEUED_RE = re.compile(r"^srun: job (\d+) queued and waiting for resources")
ALLOCATED_RE = re.compile(r"^srun: job (\d+) has been allocated resources")
QUERY_LIMIT_S = 15.0
# Job states in which Slurm itself ended the job (squeue %T); a plain COMPLETED/FAILED is the worker's.
ENDED_BY_SLURM = {"CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def srun_prefix(host: Host, name: str) -> list[str]:
    """`srun ... --` for one job step of one task on one node, with the host's Slurm settings."""
    s = host.slurm
    argv = ["srun", f"--job-name={name}", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1"]
    if s is not None:
        if s.partition:
            argv.append(f"--partition={s.partition}")
        if s.account:
            argv.append(f"--account={s.account}")
        if s.time:
            argv.append(f"--time={s.time}")
        if s.gpus:
            argv.append(f"--gpus={s.gpus}")
        argv.extend(s.options)
    return argv + ["--"]


@dataclass
class JobInfo:
    job_id: str
    state: str  # squeue's %T: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ...
    reason: str  # squeue's %r ("None" when Slurm gives none)

    def ended_by_slurm(self) -> bool:
        return self.state in ENDED_BY_SLURM

    def describe(self) -> str:
        why = f", reason {self.reason}" if self.reason and self.reason != "None" else ""
        return f"Slurm ended job {self.job_id}: {self.state}{why}"


def _quiet(stream: str, line: str) -> None:
    pass


def query(transport: Transport, host: Host, name: str) -> list[JobInfo]:
    """The jobs of that name Slurm still knows (running, pending, or ended within its MinJobAge)."""
    lines: list[str] = []
    result = transport.run(
        ["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i|%T|%r"],
        env=host.env,
        timeout=QUERY_LIMIT_S,
        on_line=lambda stream, line: lines.append(line) if stream == "stdout" else None,
    )
    if result.exit_code != 0:
        return []
    jobs = []
    for line in lines:
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0]:
            jobs.append(JobInfo(*parts))
    return jobs


ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")


def settled_jobs(transport: Transport, host: Host, name: str, wait_s: float = 10.0) -> list[JobInfo]:
    """The jobs of that name once none is still active: right after srun returns, Slurm may still list
    its job as COMPLETING for a moment before its final state (CANCELLED, TIMEOUT, ...)."""
    deadline = time.monotonic() + wait_s
    while True:
        jobs = query(transport, host, name)
        if not any(j.state in ACTIVE for j in jobs) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.3)


def cancel(transport: Transport, host: Host, name: str, wait_s: float = 10.0) -> bool:
    """scancel every job of that name, then wait until none is pending or running. Returns whether
    none is left."""
    transport.run(["scancel", f"--name={name}"], env=host.env, timeout=QUERY_LIMIT_S, on_line=_quiet)
    deadline = time.monotonic() + wait_s
    while True:
        alive = [j for j in query(transport, host, name) if j.state in ACTIVE]
        if not alive or time.monotonic() > deadline:
            return not alive
        time.sleep(0.3)


class QueueClock(LaunchWatch):
    """Time in Slurm's queue apart from time running, from srun's own lines (pending is only printed
    when the job had to wait; otherwise it started at once)."""

    def __init__(self, launched: float):
        self.launched = launched
        self.job_id: Optional[str] = None
        self.queued_at: Optional[float] = None
        self.allocated_at: Optional[float] = None

    def see(self, line: str, now: float) -> Optional[str]:
        m = QUEUED_RE.match(line)
        if m:
            self.job_id, self.queued_at = m.group(1), now
            return f"queued (slurm job {self.job_id})"
        m = ALLOCATED_RE.match(line)
        if m:
            self.job_id, self.allocated_at = m.group(1), now
            if self.queued_at is None:
                return None  # it started at once: nothing to say
            return f"slurm job {self.job_id} waited {self.pending_s():.1f} s in the queue"
        return None

    def waiting(self) -> bool:
        """In the queue now: srun said so and has not yet said the job was allocated."""
        return self.queued_at is not None and self.allocated_at is None

    def pending_s(self) -> float:
        if self.queued_at is None:
            return 0.0
        return (self.allocated_at or time.monotonic()) - self.launched

    def queue_s(self) -> Optional[float]:
        return round(self.pending_s(), 3)


def partition_report(transport: Transport, host: Host) -> tuple[bool, str]:
    """(usable, one line): the partition's availability, its nodes by state and the GPUs it can grant
    (sinfo), for `hosts --check`."""
    part = host.slurm.partition if host.slurm and host.slurm.partition else None
    lines: list[str] = []
    argv = ["sinfo", "--noheader", "--format=%P|%a|%D|%T|%G"] + ([f"--partition={part}"] if part else [])
    result = transport.run(
        argv,
        env=host.env,
        timeout=QUERY_LIMIT_S,
        on_line=lambda stream, line: lines.append(line.strip()) if stream == "stdout" else None,
    )
    if result.exit_code != 0 or not lines:
        return False, f"sinfo found no partition {part or '(default)'} (exit {result.exit_code})"
    parts = [line.split("|") for line in lines if line.count("|") == 4]
    if part is None:  # the default partition is the one sinfo marks with '*'
        parts = [p for p in parts if p[0].endswith("*")] or parts
    name = parts[0][0].rstrip("*")
    avail = {p[1] for p in parts}
    nodes = ", ".join(f"{p[2]} {p[3]}" for p in parts)
    gres = sorted({p[4] for p in parts if p[4] and p[4] != "(null)"})
    usable = "up" in avail and any(p[3].rstrip("*~#") in ("idle", "mixed", "allocated", "completing") for p in parts)
    want = host.slurm.gpus if host.slurm else 0
    line = f"partition {name}: {'/'.join(sorted(avail))}; nodes {nodes}; GPUs {', '.join(gres) or 'none'}"
    if want and not gres:
        usable = False
        line += f" (jobs ask for {want} GPU(s))"
    return usable, line


class SlurmLauncher(Launcher):
    name = "slurm"
    upload_first = True  # an allocation may wait long in the queue: never spend one on a missing file

    def argv(self, command: list[str], job_name: str) -> list[str]:
        return srun_prefix(self.host, job_name) + list(command)

    def watch(self, launched: float) -> QueueClock:
        return QueueClock(launched=launched)

    def stall_limit(self, watch: LaunchWatch, stall_timeout_s: float) -> Callable[[], Optional[float]]:
        # srun is silent while its job waits in the queue: no stall check then; from the allocation on,
        # as for any job.
        return lambda: None if watch.waiting() else stall_timeout_s

    def stop(self, transport: Transport, job_name: str, stop_process_group: Callable[[], bool]) -> bool:
        # The job runs on a node, not where the commands run: Slurm stops it.
        return bool(bounded(lambda: cancel(transport, self.host, job_name), CLEANUP_LIMIT_S * 2))

    def verdict(
        self, transport: Transport, job_name: str, outcome: str, error: str, missing: int, total: int, cancelled: bool
    ) -> tuple[str, str]:
        """A job that Slurm itself ended (cancelled, time limit, node failure, preemption) fails with
        Slurm's state and reason, whatever the worker managed before."""
        if outcome == "ok" or cancelled:
            return outcome, error
        jobs = bounded(lambda: settled_jobs(transport, self.host, job_name), CLEANUP_LIMIT_S * 2) or []
        ended = [j for j in jobs if j.ended_by_slurm()]
        if not ended:
            return outcome, error
        return "failed", f"{ended[-1].describe()}; {missing} of {total} cases have no result"

    def gpus_per_job(self) -> Optional[int]:
        return self.host.slurm.gpus if self.host.slurm else 0

    def describe_wait(self, queue_s: float, duration_s: float) -> str:
        return f"{queue_s:.1f} s queued in Slurm, {max(0.0, duration_s - queue_s):.1f} s running"

    def before_check(self, transport: Transport) -> tuple[bool, str]:
        usable, line = partition_report(transport, self.host)
        return usable, f"slurm {line}"

    def after_check(self, transport: Transport, job_name: str, succeeded: bool) -> None:
        if not succeeded:
            cancel(transport, self.host, job_name)  # a check that waited past its limit leaves no job behind
