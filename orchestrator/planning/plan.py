"""Pure planning: hosts x sweep -> jobs (one worker process per host and GPU slot). No I/O here."""

from __future__ import annotations

import datetime as _dt
import re
import secrets
from dataclasses import dataclass, replace
from typing import Literal, Optional

from worker.contract.schema import CaseSpec

from ..config import defaults
from ..config.inventory import Host
from ..config.sweep import Sweep

PerGpu = Literal["all", "shard"]


@dataclass(frozen=True)
class Job:
    """One worker process: a host, optionally pinned to one GPU, and its cases."""

    host: Host
    gpu: Optional[int]
    cases: tuple[CaseSpec, ...]
    # Its limits, resolved when it is planned and stored in the manifest: the wall clock for the whole
    # attempt (the host's `timeout`, else derived from its cases: wall_clock_limit), and the silence
    # after which it is stalled (the host's `stall_timeout`, else the sweep's).
    timeout_s: float = 0.0
    stall_timeout_s: float = defaults.STALL_TIMEOUT_S

    @property
    def slot(self) -> str:
        """Stable name of (host, gpu), used for folders and table rows."""
        return self.host.name if self.gpu is None else f"{self.host.name}.gpu{self.gpu}"

    @property
    def env(self) -> dict[str, str]:
        return slot_env(self.host, self.gpu)


def slot_env(host: Host, gpu: Optional[int]) -> dict[str, str]:
    """The environment of a worker on `host`: its own env, pinned to `gpu` (CUDA_VISIBLE_DEVICES) when it has one."""
    env = dict(host.env)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


@dataclass(frozen=True)
class WorkerSettings:
    """How each host's worker runs its cases, whatever they are (stored in the manifest)."""

    max_restarts: int = 2  # fresh worker processes after a crash, per job
    device: str = "auto"  # auto | cuda | cpu
    lock_timeout_s: float = defaults.LOCK_TIMEOUT_S  # a job's wait for its GPU while another sweep holds it
    calibration: str = "cached"  # cached | fresh | off: the GPU peaks speed of light is computed from
    case_timeout_s: float = defaults.CASE_TIMEOUT_S  # one round, then it is stopped as hung (worker/sweep/supervise.py)
    build_timeout_s: float = defaults.BUILD_TIMEOUT_S  # the same while a compiler runs (a first JIT build)


@dataclass(frozen=True)
class Plan:
    """What a run does: the jobs with their cases, as data. A stored run is planned again from its
    manifest alone (launch.plan_rerun), never from today's reading of its sweep."""

    run_id: str
    sweep_name: str
    hosts: tuple[Host, ...]
    jobs: tuple[Job, ...]
    worker: WorkerSettings = WorkerSettings()
    per_gpu: PerGpu = "all"
    stall_timeout: float = defaults.STALL_TIMEOUT_S  # silence after which a host is stalled (a host may set its own)

    def jobs_of(self, host: Host) -> list[Job]:
        return [j for j in self.jobs if j.host.name == host.name]

    def cases(self) -> dict[str, CaseSpec]:
        """Every planned case once, by id, in plan order."""
        return {c.case_id: c for j in self.jobs for c in j.cases}


def new_run_id(sweep_name: str, now: Optional[_dt.datetime] = None) -> str:
    """Sortable, unique, filesystem-safe: 20261202-131500-glm5-tp8-3fa2."""
    now = now or _dt.datetime.now()
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", sweep_name).strip("-")[:40] or "sweep"
    return f"{now:%Y%m%d-%H%M%S}-{safe}-{secrets.token_hex(2)}"


def build_plan(
    hosts: list[Host],
    sweep: Sweep,
    run_id: str,
    per_gpu: PerGpu = "all",
    lock_timeout_s: float = defaults.LOCK_TIMEOUT_S,
) -> Plan:
    """Every host gets every case; a host with `gpus` gets one job per GPU, with all the cases
    (`all`: compare GPUs) or a round-robin share (`shard`: finish sooner)."""
    cases = tuple(sweep.cases())
    jobs: list[Job] = []
    for host in hosts:
        if not host.gpus:
            jobs.append(Job(host=host, gpu=None, cases=cases))
            continue
        for i, gpu in enumerate(host.gpus):
            share = cases if per_gpu == "all" else cases[i :: len(host.gpus)]
            if share:
                jobs.append(Job(host=host, gpu=gpu, cases=share))
    # Environments of one machine (hosts name@env) take turns on its GPU through the GPU lock: each may
    # wait for the others' whole sweeps, on top of what the caller allows for other sweeps.
    turns: dict[tuple, list[Job]] = {}
    for job in jobs:
        turns.setdefault((job.host.machine, job.host.hostname, job.gpu), []).append(job)
    waits = [sum(wall_clock_limit(j.cases) for j in group[1:]) for group in turns.values() if len(group) > 1]
    if waits:
        lock_timeout_s += max(waits)
    jobs = [with_limits(j, lock_timeout_s, sweep.stall_timeout) for j in jobs]
    worker = WorkerSettings(
        max_restarts=sweep.max_restarts,
        device=sweep.device,
        lock_timeout_s=lock_timeout_s,
        calibration=sweep.calibration,
        case_timeout_s=sweep.case_timeout,
        build_timeout_s=sweep.build_timeout,
    )
    return Plan(
        run_id=run_id,
        sweep_name=sweep.name,
        hosts=tuple(hosts),
        jobs=tuple(jobs),
        worker=worker,
        per_gpu=per_gpu,
        stall_timeout=sweep.stall_timeout,
    )


# The wall-clock limit of a host that sets none: generous, for it is the last resort. A frozen or dead
# host is caught by the stall timeout within a minute; this catches a worker that beats but never ends.
START_ALLOWANCE_S = 600.0  # interpreter, torch and CUDA start-up, a first JIT build
PER_CASE_S = 30.0  # inputs, the correctness check, warm-up and a graph capture


def wall_clock_limit(cases, lock_timeout_s: float = 0.0) -> float:
    """Seconds a host may take for `cases` when its inventory sets no `timeout`: the start-up allowance,
    the GPU lock wait, and per case its timing budget (in every round) plus a fixed allowance."""
    return START_ALLOWANCE_S + lock_timeout_s + sum(PER_CASE_S + 3 * c.timing.budget_s for c in cases)


def with_limits(job: Job, lock_timeout_s: float, stall_timeout_s: float) -> Job:
    """`job` with its limits resolved (see Job): a host's own settings first."""
    return replace(
        job,
        timeout_s=job.host.timeout or wall_clock_limit(job.cases, lock_timeout_s),
        stall_timeout_s=job.host.stall_timeout or stall_timeout_s,
    )
