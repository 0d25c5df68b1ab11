"""Launch work on the fleet: a planned sweep, its dry run, or a rerun of hosts of a stored run.

Plain functions returning data; the CLI decides what to print and which exit code that means. A rerun
is planned from the run's manifest alone (its stored cases, jobs, worker and scripts), never from
today's reading of its sweep file.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from worker.contract.schema import CaseSpec

from .. import __version__
from ..atomicfile import DiskFull
from ..config.inventory import Inventory, select_hosts
from ..config.sweep import Sweep, UserBackend
from ..errors import InputError, RunInterrupted
from ..planning.bundle import WorkerBundle, build_worker_bundle
from ..planning.layout import RenderedScript
from ..planning.plan import Job, Plan, WorkerSettings, with_limits
from ..planning.render import render_plan
from ..runs.outcome import HostOutcome
from ..runs.store import RunStore, now_iso
from ..transport import make_transport
from .execute import EventSink, Execution, JobTask, recover_attempts, run_tasks
from .remote import job_argv
from .storedrun import run_host, stored_bundle


class NothingToRerun(InputError):
    """Every selected case is done."""


@dataclass
class RunResult:
    store: RunStore
    plan: Plan
    outcomes: list[HostOutcome]


def _manifest(
    plan: Plan,
    sweep: Sweep,
    scripts: dict[str, RenderedScript],
    bundle: WorkerBundle,
    inventory: Inventory,
    sweep_path: Optional[str],
    dry_run: bool,
) -> dict:
    return {
        "run_id": plan.run_id,
        "created_at": now_iso(),
        "dry_run": dry_run,
        "fleetbench_version": __version__,
        "controller_python": platform.python_version(),
        "sweep_name": plan.sweep_name,
        "sweep_path": sweep_path,
        "sweep": sweep.model_dump(mode="json"),  # what was asked for, as a record; readers use `cases`
        "inventory_path": os.path.abspath(inventory.path),
        "hosts": [h.public_view() for h in plan.hosts],
        "per_gpu": plan.per_gpu,
        "stall_timeout": plan.stall_timeout,
        "worker": {
            "max_restarts": plan.worker.max_restarts,
            "device": plan.worker.device,
            "lock_timeout_s": plan.worker.lock_timeout_s,
            "calibration": plan.worker.calibration,
            "case_timeout_s": plan.worker.case_timeout_s,
            "build_timeout_s": plan.worker.build_timeout_s,
        },
        "worker_sha256": bundle.sha256,
        "scripts": {name: {"path": f"scripts/{s.path.name}", "sha256": s.sha256} for name, s in scripts.items()},
        "cases": {cid: case.model_dump(mode="json") for cid, case in plan.cases().items()},
        # User kernels: their files are inside worker.tar.gz (worker/user/k<sha[:16]>.py).
        "user_kernels": {
            b.name: {"sha256": sweep.user_kernels()[b.name][0], "file": b.file}
            for b in sweep.backends
            if isinstance(b, UserBackend)
        },
        "jobs": [
            {
                "slot": j.slot,
                "host": j.host.name,
                "gpu": j.gpu,
                "case_ids": [c.case_id for c in j.cases],
                "timeout_s": j.timeout_s,
                "stall_timeout_s": j.stall_timeout_s,
            }
            for j in plan.jobs
        ],
    }


def prepare_run(
    plan: Plan,
    sweep: Sweep,
    inventory: Inventory,
    runs_dir: Path,
    *,
    sweep_path: Optional[str] = None,
    dry_run: bool = False,
) -> tuple[RunStore, dict[str, RenderedScript], WorkerBundle]:
    """Create the run folder for `plan`, render every script (compile-checked), write the manifest."""
    if not plan.jobs:
        raise InputError("the plan is empty: no host has any case to run")
    store = RunStore.create(runs_dir, plan.run_id)
    try:
        bundle = build_worker_bundle(user_kernels=[data for _, data in sweep.user_kernels().values()])
        scripts = render_plan(plan, store.scripts_dir, bundle)
        bundle.write(store.dir / "worker.tar.gz")
        store.write_manifest(_manifest(plan, sweep, scripts, bundle, inventory, sweep_path, dry_run))
    except DiskFull as exc:  # nothing ran: the folder this call created holds no run, and takes room
        shutil.rmtree(store.dir, ignore_errors=True)
        raise DiskFull(exc.errno, exc.path, then=f"nothing ran, and the run folder {store.dir} was removed") from None
    return store, scripts, bundle


def start_run(
    plan: Plan,
    sweep: Sweep,
    inventory: Inventory,
    runs_dir: Path,
    *,
    sweep_path: Optional[str] = None,
    parallel: int = 64,
    accept_new: bool = False,
    on_event: Optional[EventSink] = None,
    execution: Optional[Execution] = None,
) -> RunResult:
    """Store `plan` as a new run and execute it on its hosts."""
    store, scripts, bundle = prepare_run(plan, sweep, inventory, runs_dir, sweep_path=sweep_path)
    tasks = [JobTask(job=j, attempt=1, cases=j.cases) for j in plan.jobs]
    with store.hold():  # `prune` leaves a run alone while this holds it
        try:
            outcomes = run_tasks(
                plan,
                store,
                scripts,
                bundle,
                tasks,
                parallel=parallel,
                accept_new=accept_new,
                on_event=on_event,
                execution=execution,
            )
        except KeyboardInterrupt:  # the hosts were stopped; what finished is stored: say where
            raise RunInterrupted(store) from None
    return RunResult(store=store, plan=plan, outcomes=outcomes)


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Environment values may be secrets: what is printed or stored shows the names only."""
    return {k: "***" for k in env}


def describe_commands(plan: Plan, scripts: dict[str, RenderedScript]) -> list[str]:
    """What a run would do on each host, step by step, with the remote command lines (env values masked)."""
    lines = []
    for host in plan.hosts:
        s = scripts[host.name]
        t = make_transport(host)
        lines.append(f"# host {host.name} ({host.transport} {host.address}); script sha256 {s.sha256}")
        lines.append(f"put {s.path} -> {s.remote}  (only if the host lacks it; worker {s.layout.worker_archive} too)")
        for job in plan.jobs_of(host):
            lines.append(
                "run "
                + t.describe(job_argv(job, s, 1), mask_env(job.env))
                + f"  < params.json on stdin ({len(job.cases)} cases)"
            )
            lines.append(f"results stream back; {s.layout.results(job.slot, 1)} is fetched only if the stream is cut")
    return lines


# -- rerun ------------------------------------------------------------------------------------------
def cases_to_finish(planned: list[CaseSpec], records: dict) -> list[CaseSpec]:
    """The cases of a job that are not done, as they should run now: missing, failed, crashed or hung
    cases in full; a case whose rounds were cut short, for the rounds it still lacks (its case id is
    the same whatever its rounds: worker/contract/schema.py). Cases that are ok, unsupported or unavailable are done."""
    from worker.contract.rounds import rounds_in

    todo = []
    for case in planned:
        found = records.get(case.case_id)
        rec = found[1] if found else None
        if rec is None or rec.status in ("failed", "crashed", "hung"):
            todo.append(case)
        elif rec.status == "ok" and not rec.complete:
            left = max(1, case.timing.rounds - rounds_in(rec))
            todo.append(case.model_copy(update={"timing": case.timing.model_copy(update={"rounds": left})}))
    return todo


def plan_rerun(
    store: RunStore,
    inventory: Inventory,
    *,
    failed: bool,
    hosts_selector: Optional[str],
    resume: bool,
    lock_timeout_s: Optional[float] = None,
) -> tuple[Plan, dict[str, RenderedScript], WorkerBundle, list[JobTask]]:
    """Which slots to run again, with which cases, reusing the run's own scripts and worker:
    with `failed` (or `resume`), every case that is not done, on any host (cases_to_finish); with only
    `hosts_selector`, every case of those hosts, measured afresh.

    Raises InputError when nothing matches or the stored script no longer fits the inventory.
    """
    from ..runs.slots import load_slots

    manifest = store.manifest()
    planned = store.planned_cases()
    selected_hosts = None
    if hosts_selector:
        run_hosts = [h for h in inventory.hosts if h.name in {j.host for j in manifest.jobs}]
        selected_hosts = {
            h.name for h in select_hosts(Inventory(path=inventory.path, hosts=tuple(run_hosts)), hosts_selector)
        }
    slot_data = {d.slot: d for d in load_slots(store)}
    chosen = []
    for job in manifest.jobs:
        data = slot_data.get(job.slot)
        if selected_hosts is not None and job.host not in selected_hosts:
            continue
        cases = [planned[cid] for cid in job.case_ids]
        if failed or resume:
            cases = cases_to_finish(cases, data.records if data is not None else {})
        if cases:
            chosen.append((job, cases))
    if not chosen:
        where = " on the selected hosts" if selected_hosts is not None else ""
        raise NothingToRerun(
            f"run {store.run_id}: nothing to rerun: every case{where} is done (ok, unsupported or unavailable)"
        )

    bundle = stored_bundle(store, manifest)
    lock_timeout = manifest.worker.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    hosts, jobs, tasks, scripts = [], [], [], {}
    for job_info, cases in chosen:
        host, first = run_host(store, manifest, inventory, job_info.host, bundle, scripts)
        if first:
            hosts.append(host)
        # Limits for what runs now: the host's own settings, else derived from these cases.
        job = with_limits(Job(host=host, gpu=job_info.gpu, cases=tuple(cases)), lock_timeout, manifest.stall_timeout)
        jobs.append(job)
        tasks.append(JobTask(job=job, attempt=store.next_attempt(job.slot), cases=tuple(cases)))
    stored = manifest.worker
    worker = WorkerSettings(
        max_restarts=stored.max_restarts,
        device=stored.device,
        calibration=stored.calibration,
        case_timeout_s=stored.case_timeout_s,
        build_timeout_s=stored.build_timeout_s,
        lock_timeout_s=lock_timeout,
    )
    plan = Plan(
        run_id=store.run_id,
        sweep_name=manifest.sweep_name,
        hosts=tuple(hosts),
        jobs=tuple(jobs),
        worker=worker,
        per_gpu=manifest.per_gpu,
        stall_timeout=manifest.stall_timeout,
    )
    return plan, scripts, bundle, tasks


def rerun(
    store: RunStore,
    inventory: Inventory,
    *,
    failed: bool,
    hosts_selector: Optional[str],
    resume: bool,
    parallel: int = 64,
    accept_new: bool = False,
    on_event: Optional[EventSink] = None,
    execution: Optional[Execution] = None,
    lock_timeout_s: Optional[float] = None,
) -> RunResult:
    with store.hold():  # `prune` leaves a run alone while this holds it
        return _rerun(
            store,
            inventory,
            failed=failed,
            hosts_selector=hosts_selector,
            resume=resume,
            parallel=parallel,
            accept_new=accept_new,
            on_event=on_event,
            execution=execution,
            lock_timeout_s=lock_timeout_s,
        )


def _rerun(
    store: RunStore,
    inventory: Inventory,
    *,
    failed: bool,
    hosts_selector: Optional[str],
    resume: bool,
    parallel: int,
    accept_new: bool,
    on_event: Optional[EventSink],
    execution: Optional[Execution],
    lock_timeout_s: Optional[float],
) -> RunResult:
    plan, scripts, _, _ = plan_rerun(
        store, inventory, failed=failed, hosts_selector=hosts_selector, resume=resume, lock_timeout_s=lock_timeout_s
    )
    recover_attempts(plan, store, scripts, accept_new=accept_new, parallel=parallel)
    # Recovered lines change what is missing, so the cases to run are decided after recovery.
    try:
        plan, scripts, bundle, tasks = plan_rerun(
            store, inventory, failed=failed, hosts_selector=hosts_selector, resume=resume, lock_timeout_s=lock_timeout_s
        )
    except NothingToRerun:
        return RunResult(store=store, plan=plan, outcomes=[])
    try:
        outcomes = run_tasks(
            plan,
            store,
            scripts,
            bundle,
            tasks,
            parallel=parallel,
            accept_new=accept_new,
            on_event=on_event,
            execution=execution,
        )
    except KeyboardInterrupt:
        raise RunInterrupted(store) from None
    return RunResult(store=store, plan=plan, outcomes=outcomes)
