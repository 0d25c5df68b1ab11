"""Run-level operations the CLI calls: start a run, render one (dry run), rerun hosts of a stored run.

Plain functions returning data; the CLI decides what to print and which exit code that means.
"""
from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from worker.schema import CaseSpec

from . import __version__
from .bundle import WorkerBundle, build_worker_bundle
from .errors import InputError
from .execute import EventSink, Execution, JobTask, recover_attempts, run_tasks
from .inventory import Host, Inventory, select_hosts
from .plan import Job, Plan, PerGpu, build_plan, layout_for, new_run_id
from .render import RenderedScript, job_argv, render_plan, render_script, template_environment
from .store import HostOutcome, RunStore, now_iso
from .sweep import Sweep
from .transport import make_transport


class NothingToRerun(InputError):
    """Every selected host finished (or, with --resume, every case has a result)."""


@dataclass
class RunResult:
    store: RunStore
    plan: Plan
    outcomes: list[HostOutcome]


def _manifest(plan: Plan, scripts: dict[str, RenderedScript], bundle: WorkerBundle, inventory: Inventory,
              sweep_path: Optional[str], dry_run: bool) -> dict:
    return {
        "run_id": plan.run_id,
        "created_at": now_iso(),
        "dry_run": dry_run,
        "fleetbench_version": __version__,
        "controller_python": platform.python_version(),
        "sweep_path": sweep_path,
        "sweep": plan.sweep.model_dump(mode="json"),
        "inventory_path": inventory.path,
        "hosts": [h.public_view() for h in plan.hosts],
        "per_gpu": plan.per_gpu,
        "lock_timeout_s": plan.lock_timeout_s,
        "worker_sha256": bundle.sha256,
        "scripts": {name: {"path": f"scripts/{s.path.name}", "sha256": s.sha256} for name, s in scripts.items()},
        "jobs": [{"slot": j.slot, "host": j.host.name, "gpu": j.gpu, "case_ids": [c.case_id for c in j.cases]}
                 for j in plan.jobs],
    }


def prepare_run(inventory: Inventory, hosts: list[Host], sweep: Sweep, runs_dir: Path, *,
                sweep_path: Optional[str] = None, per_gpu: PerGpu = "all", dry_run: bool = False,
                run_id: Optional[str] = None, lock_timeout_s: float = 600.0) -> tuple[RunStore, Plan, dict[str, RenderedScript], WorkerBundle]:
    """Plan, create the run folder, render every script (compile-checked) and write the manifest."""
    plan = build_plan(hosts, sweep, run_id or new_run_id(sweep.name), per_gpu, lock_timeout_s)
    if not plan.jobs:
        raise InputError("the plan is empty: no host has any case to run")
    store = RunStore.create(runs_dir, plan.run_id)
    bundle = build_worker_bundle()
    scripts = render_plan(plan, store.scripts_dir, bundle)
    bundle.write(store.dir / "worker.tar.gz")
    store.write_manifest(_manifest(plan, scripts, bundle, inventory, sweep_path, dry_run))
    return store, plan, scripts, bundle


def start_run(inventory: Inventory, hosts: list[Host], sweep: Sweep, runs_dir: Path, *,
              sweep_path: Optional[str] = None, per_gpu: PerGpu = "all", parallel: int = 64,
              accept_new: bool = False, lock_timeout_s: float = 600.0, on_event: Optional[EventSink] = None,
              execution: Optional[Execution] = None) -> RunResult:
    store, plan, scripts, bundle = prepare_run(inventory, hosts, sweep, runs_dir, sweep_path=sweep_path,
                                               per_gpu=per_gpu, lock_timeout_s=lock_timeout_s)
    tasks = [JobTask(job=j, attempt=1, cases=j.cases) for j in plan.jobs]
    outcomes = run_tasks(plan, store, scripts, bundle, tasks, parallel=parallel, accept_new=accept_new,
                         on_event=on_event, execution=execution)
    return RunResult(store=store, plan=plan, outcomes=outcomes)


def describe_commands(plan: Plan, scripts: dict[str, RenderedScript]) -> list[str]:
    """What a run would do on each host, step by step, with the exact remote command lines."""
    lines = []
    for host in plan.hosts:
        s = scripts[host.name]
        t = make_transport(host)
        lines.append(f"# host {host.name} ({host.transport} {host.address}); script sha256 {s.sha256}")
        lines.append(f"put {s.path} -> {s.remote}  (only if the host lacks it; worker {s.layout.worker_archive} too)")
        for job in plan.jobs_of(host):
            lines.append("run " + t.describe(job_argv(job, s, 1), job.env)
                         + f"  < params.json on stdin ({len(job.cases)} cases)")
            lines.append(f"results stream back; {s.layout.results(job.slot, 1)} is fetched only if the stream is cut")
    return lines


# -- rerun ------------------------------------------------------------------------------------------
def plan_rerun(store: RunStore, inventory: Inventory, *, failed: bool, hosts_selector: Optional[str],
               resume: bool, lock_timeout_s: Optional[float] = None) -> tuple[Plan, dict[str, RenderedScript], WorkerBundle, list[JobTask]]:
    """Which slots to run again, with which cases, reusing the run's own scripts and worker.

    Raises InputError when nothing matches or the stored script no longer fits the inventory.
    """
    from .merge import load_slots

    manifest = store.manifest()
    sweep = Sweep.model_validate(manifest["sweep"])
    all_cases = {c.case_id: c for c in sweep.cases()}
    by_name = {h.name: h for h in inventory.hosts}
    selected_hosts = None
    if hosts_selector:
        run_hosts = [h for h in inventory.hosts if h.name in {j["host"] for j in manifest["jobs"]}]
        selected_hosts = {h.name for h in select_hosts(Inventory(path=inventory.path, hosts=tuple(run_hosts)),
                                                       hosts_selector)}
    slot_data = {d.slot: d for d in load_slots(store)}
    chosen: list[tuple[dict, list[CaseSpec]]] = []
    for job in manifest["jobs"]:
        data = slot_data.get(job["slot"])
        if selected_hosts is not None and job["host"] not in selected_hosts:
            continue
        if failed and data is not None and data.outcome is not None and data.outcome.outcome == "ok":
            continue
        cases = [all_cases[cid] for cid in job["case_ids"] if cid in all_cases]
        if len(cases) != len(job["case_ids"]):
            raise InputError(f"run {store.run_id}: the stored sweep no longer yields job {job['slot']}'s cases")
        if resume and data is not None:
            cases = [c for c in cases if c.case_id not in data.records]
        if cases:
            chosen.append((job, cases))
    if not chosen:
        what = "failed hosts" if failed else "matching hosts"
        raise NothingToRerun(f"run {store.run_id}: nothing to rerun (no {what}{' with missing cases' if resume else ''})")

    bundle_path = store.dir / "worker.tar.gz"
    data = bundle_path.read_bytes()
    bundle = WorkerBundle(data=data, sha256=hashlib.sha256(data).hexdigest(), files=0)
    if bundle.sha256 != manifest["worker_sha256"]:
        raise InputError(f"{bundle_path}: worker archive does not match the manifest's sha256")
    env = template_environment()
    hosts, jobs, tasks, scripts = [], [], [], {}
    for job_info, cases in chosen:
        host = by_name.get(job_info["host"])
        if host is None:
            raise InputError(f"host '{job_info['host']}' of run {store.run_id} is not in {inventory.path}")
        if host.name not in scripts:
            stored = manifest["scripts"][host.name]
            path = store.dir / stored["path"]
            layout = layout_for(host, store.run_id, bundle.sha256)
            current = hashlib.sha256(render_script(env, layout, bundle.sha256).encode("utf-8")).hexdigest()
            if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != stored["sha256"]:
                raise InputError(f"{path}: the run's script is missing or was modified")
            if current != stored["sha256"]:
                raise InputError(f"host '{host.name}': its workdir changed since run {store.run_id}; "
                                 "the stored script no longer fits it (start a new run)")
            scripts[host.name] = RenderedScript(host=host.name, path=path, sha256=stored["sha256"], layout=layout)
            hosts.append(host)
        job = Job(host=host, gpu=job_info.get("gpu"), cases=tuple(cases))
        jobs.append(job)
        tasks.append(JobTask(job=job, attempt=store.next_attempt(job.slot), cases=tuple(cases)))
    plan = Plan(run_id=store.run_id, sweep=sweep, hosts=tuple(hosts), jobs=tuple(jobs),
                per_gpu=manifest.get("per_gpu", "all"),
                lock_timeout_s=manifest.get("lock_timeout_s", 600.0) if lock_timeout_s is None else lock_timeout_s)
    return plan, scripts, bundle, tasks


def rerun(store: RunStore, inventory: Inventory, *, failed: bool, hosts_selector: Optional[str], resume: bool,
          parallel: int = 64, accept_new: bool = False, on_event: Optional[EventSink] = None,
          execution: Optional[Execution] = None, lock_timeout_s: Optional[float] = None) -> RunResult:
    plan, scripts, _, _ = plan_rerun(store, inventory, failed=failed, hosts_selector=hosts_selector,
                                     resume=resume, lock_timeout_s=lock_timeout_s)
    recover_attempts(plan, store, scripts, accept_new=accept_new)
    # Recovered lines change what is missing, so the cases to run are decided after recovery.
    try:
        plan, scripts, bundle, tasks = plan_rerun(store, inventory, failed=failed, hosts_selector=hosts_selector,
                                                  resume=resume, lock_timeout_s=lock_timeout_s)
    except NothingToRerun:
        return RunResult(store=store, plan=plan, outcomes=[])
    outcomes = run_tasks(plan, store, scripts, bundle, tasks, parallel=parallel, accept_new=accept_new,
                         on_event=on_event, execution=execution)
    return RunResult(store=store, plan=plan, outcomes=outcomes)
