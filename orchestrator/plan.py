"""Pure planning: hosts x sweep -> jobs (one worker process per host and GPU slot), and where each
job's files live on its host. No I/O here."""
from __future__ import annotations

import datetime as _dt
import re
import secrets
from dataclasses import dataclass
from typing import Literal, Optional

from worker.schema import CaseSpec

from .inventory import Host
from .sweep import Sweep

PerGpu = Literal["all", "shard"]


@dataclass(frozen=True)
class Job:
    """One worker process: a host, optionally pinned to one GPU, and its cases."""

    host: Host
    gpu: Optional[int]
    cases: tuple[CaseSpec, ...]

    @property
    def slot(self) -> str:
        """Stable name of (host, gpu), used for folders and table rows."""
        return self.host.name if self.gpu is None else f"{self.host.name}.gpu{self.gpu}"

    @property
    def env(self) -> dict[str, str]:
        env = dict(self.host.env)
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env


@dataclass(frozen=True)
class Plan:
    run_id: str
    sweep: Sweep
    hosts: tuple[Host, ...]
    jobs: tuple[Job, ...]
    per_gpu: PerGpu = "all"
    lock_timeout_s: float = 600.0  # how long a job waits for its GPU while another sweep holds it

    def jobs_of(self, host: Host) -> list[Job]:
        return [j for j in self.jobs if j.host.name == host.name]


def new_run_id(sweep_name: str, now: Optional[_dt.datetime] = None) -> str:
    """Sortable, unique, filesystem-safe: 20261202-131500-glm5-tp8-3fa2."""
    now = now or _dt.datetime.now()
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", sweep_name).strip("-")[:40] or "sweep"
    return f"{now:%Y%m%d-%H%M%S}-{safe}-{secrets.token_hex(2)}"


def build_plan(hosts: list[Host], sweep: Sweep, run_id: str, per_gpu: PerGpu = "all",
               lock_timeout_s: float = 600.0) -> Plan:
    """Every host gets every case; a host with `gpus` gets one job per GPU, with all the cases
    (`all`: compare GPUs) or a round-robin share (`shard`: finish sooner)."""
    cases = tuple(sweep.cases())
    jobs: list[Job] = []
    for host in hosts:
        if not host.gpus:
            jobs.append(Job(host=host, gpu=None, cases=cases))
            continue
        for i, gpu in enumerate(host.gpus):
            share = cases if per_gpu == "all" else cases[i::len(host.gpus)]
            if share:
                jobs.append(Job(host=host, gpu=gpu, cases=share))
    return Plan(run_id=run_id, sweep=sweep, hosts=tuple(hosts), jobs=tuple(jobs), per_gpu=per_gpu,
                lock_timeout_s=lock_timeout_s)


@dataclass(frozen=True)
class RemoteLayout:
    """Where things live under a host's workdir (paths may start with `~/`)."""

    workdir: str
    run_id: str
    worker_sha: str

    @property
    def worker_archive(self) -> str:
        return f"{self.workdir}/worker/{self.worker_sha[:16]}.tar.gz"

    @property
    def worker_dir(self) -> str:
        return f"{self.workdir}/worker/{self.worker_sha[:16]}"

    @property
    def run_dir(self) -> str:
        return f"{self.workdir}/runs/{self.run_id}"

    def script(self, script_sha: str) -> str:
        # Content-addressed: an unchanged script is already there and the next run uploads nothing.
        return f"{self.workdir}/scripts/bench-{script_sha[:16]}.py"

    def attempt_dir(self, slot: str, attempt: int) -> str:
        # Flat under the run folder: creating it is one SFTP round trip.
        return f"{self.run_dir}/{slot}.attempt-{attempt}"

    def params(self, slot: str, attempt: int) -> str:
        return f"{self.attempt_dir(slot, attempt)}/params.json"

    def results(self, slot: str, attempt: int) -> str:
        return f"{self.attempt_dir(slot, attempt)}/results.jsonl"

    def pidfile(self, slot: str, attempt: int) -> str:
        return f"{self.attempt_dir(slot, attempt)}/pid"


def layout_for(host: Host, run_id: str, worker_sha: str) -> RemoteLayout:
    return RemoteLayout(workdir=host.workdir.rstrip("/") or "/", run_id=run_id, worker_sha=worker_sha)
