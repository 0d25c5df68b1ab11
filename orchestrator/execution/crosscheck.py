"""Crosscheck cases of a stored run on their own hosts: `fleetbench crosscheck`.

Per slot (a host, or one GPU of it), in the one fan-out (fanout.py): connect -> one exec of the run's own
rendered script with `crosscheck` (the run's own worker, uploaded only when the host lacks it, as a rerun
does) and the params on its stdin -> the host times each case beside its peers (worker/crosscheck.py),
holding the GPU's lock as a sweep does, and sends one record per case -> the controller stores each
record in the run's folder (runs/crosschecks.py) as it comes. A host that fails is that slot's result;
the others go on. Ctrl-C stops what runs on every host and raises KeyboardInterrupt.
"""
from __future__ import annotations

import io
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from worker import protocol
from worker.crosscheck import CrosscheckOptions, CrosscheckParams, CrosscheckRecord
from worker.schema import CaseSpec

from ..config.inventory import Host, Inventory
from ..errors import InputError
from ..launchers import job_name, launcher_for
from ..runs.atomicfile import write_atomic
from ..runs.crosschecks import StoredCrosscheck, job_dir, next_number, write_crosscheck
from ..runs.store import RunStore
from ..transport import TransportError, login_relative, make_transport
from .fanout import HostResult, Running, fan_out
from .launch import _same_host, _stored_bundle, _stored_script
from .remote import RenderedScript, lacks_files, run_first, stop_remote, sync_script

START_ALLOWANCE_S = 300.0  # the worker's start (torch, FlashInfer's import), beyond the cases' limits
CASE_ALLOWANCE_S = 120.0  # one case: fleetbench's timing, CUPTI, and each peer's ladder


@dataclass(frozen=True)
class CrosscheckJob:
    """The cases to crosscheck on one slot of the run."""

    host: Host
    gpu: Optional[int]
    slot: str
    cases: tuple[CaseSpec, ...]

    @property
    def env(self) -> dict[str, str]:
        env = dict(self.host.env)
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env


@dataclass
class SlotCrosschecks:
    """What one slot's crosscheck gave: a stored record per case that came back, and the error of the
    slot as a whole (unreachable, a busy GPU, a host that ended without a record) or ""."""

    slot: str
    checks: list[StoredCrosscheck] = field(default_factory=list)
    error: str = ""
    missing: list[CaseSpec] = field(default_factory=list)  # cases with no record


@dataclass
class CrosscheckPlan:
    store: RunStore
    jobs: list[CrosscheckJob]
    scripts: dict[str, RenderedScript]
    bundle_path: Path
    lock_timeout_s: float
    stall_timeout_s: float
    device: str
    sweep_median_us: dict[tuple[str, str], float]  # (slot, case id) -> the run's median


def worker_can_crosscheck(bundle_bytes: bytes) -> bool:
    """Whether a run's worker archive has the `crosscheck` command (runs made before it do not)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle_bytes), mode="r:gz") as tar:
            return "worker/crosscheck.py" in tar.getnames()
    except (tarfile.TarError, OSError):
        return False


def plan_crosschecks(store: RunStore, inventory: Inventory, wanted: dict[str, list[str]]) -> CrosscheckPlan:
    """Jobs for `wanted` (slot -> case ids), run by the run's own scripts and worker on its own hosts.
    Raises InputError for a slot or host the run or the inventory lacks, a host that is another machine
    now, a changed workdir, and a run whose worker cannot crosscheck."""
    from ..analysis.merge import load_slots

    manifest = store.manifest()
    bundle = _stored_bundle(store, manifest)
    if not worker_can_crosscheck(bundle.data):
        raise InputError(f"run {store.run_id} was made by fleetbench {manifest.fleetbench_version or '?'}, whose worker "
                         "cannot crosscheck: crosscheck a run made by this fleetbench (`fleetbench run` the sweep again)")
    by_name = {h.name: h for h in inventory.hosts}
    jobs_by_slot = {j.slot: j for j in manifest.jobs}
    planned = store.planned_cases()
    medians = {(s.slot, cid): rec.timing.median_us for s in load_slots(store) for cid, (_, rec) in s.records.items()
               if rec.status == "ok" and rec.timing is not None}
    jobs, scripts = [], {}
    for slot, case_ids in wanted.items():
        stored = jobs_by_slot.get(slot)
        if stored is None:
            raise InputError(f"run {store.run_id} has no slot '{slot}'")
        host = by_name.get(stored.host)
        if host is None:
            raise InputError(f"host '{stored.host}' of run {store.run_id} is not in {inventory.path}")
        if host.name not in scripts:
            _same_host(store, manifest, host, inventory.path)
            scripts[host.name] = _stored_script(store, manifest, host, bundle)
        jobs.append(CrosscheckJob(host=host, gpu=stored.gpu, slot=slot, cases=tuple(planned[c] for c in case_ids)))
    return CrosscheckPlan(store=store, jobs=jobs, scripts=scripts, bundle_path=store.dir / "worker.tar.gz",
                          lock_timeout_s=manifest.worker.lock_timeout_s, stall_timeout_s=manifest.stall_timeout,
                          device=manifest.worker.device, sweep_median_us=medians)


Say = Callable[[str, str], None]  # (slot, what happens now): the command prints it


def run_crosschecks(plan: CrosscheckPlan, options: CrosscheckOptions, *, parallel: int = 64,
                    accept_new: bool = False, say: Optional[Say] = None,
                    lock_timeout_s: Optional[float] = None) -> list[SlotCrosschecks]:
    """Crosscheck every job; one SlotCrosschecks per job, in order. Never raises for a host's failure;
    Ctrl-C stops what runs on the hosts, then raises KeyboardInterrupt (what came back is stored)."""
    running = Running()
    say = say or (lambda slot, text: None)
    lock_timeout = plan.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    with plan.store.hold():  # `prune` leaves a run alone while it is crosschecked
        done = fan_out(plan.jobs, lambda job: _crosscheck_slot(plan, job, options, lock_timeout, accept_new,
                                                               running, say),
                       parallel=parallel, name_of=lambda job: job.slot, on_interrupt=running.stop_all)
    return [_as_slot_result(r, job) for r, job in zip(done, plan.jobs)]


def _as_slot_result(result: HostResult, job: CrosscheckJob) -> SlotCrosschecks:
    if result.ok:
        return result.value
    return SlotCrosschecks(job.slot, error=result.describe_error() or "failed", missing=list(job.cases))


def crosscheck_argv(job: CrosscheckJob, script: RenderedScript, remote_dir: str, name: str) -> list[str]:
    """The command a slot's crosscheck runs on its host, as its launcher starts it; params on stdin."""
    command = [job.host.python, login_relative(script.remote), "crosscheck",
               "--pidfile", login_relative(f"{remote_dir}/pid"),
               "--params", login_relative(f"{remote_dir}/params.json"), "--params-stdin"]
    return launcher_for(job.host).argv(command, name)


def _crosscheck_slot(plan: CrosscheckPlan, job: CrosscheckJob, options: CrosscheckOptions, lock_timeout_s: float,
                     accept_new: bool, running: Running, say: Say) -> SlotCrosschecks:
    store, script = plan.store, plan.scripts[job.host.name]
    number = next_number(store, job.slot)
    local = job_dir(store, job.slot, number)
    local.mkdir(parents=True, exist_ok=True)
    remote_dir = f"{script.layout.run_dir}/crosschecks/{job.slot}.crosscheck-{number}"
    params = CrosscheckParams(run_id=store.run_id, host=job.host.name, gpu=job.gpu, device=plan.device,
                              lock_timeout_s=lock_timeout_s, lock_clocks=job.host.clocks == "lock",
                              cases=list(job.cases), options=options)
    data = params.model_dump_json().encode("utf-8")
    write_atomic(local / "params.json", data)
    launcher = launcher_for(job.host)
    name = job_name(store.run_id, f"{job.slot}-crosscheck", number)
    argv = crosscheck_argv(job, script, remote_dir, name)
    cases = {c.case_id: c for c in job.cases}
    stored: dict[str, StoredCrosscheck] = {}
    problems: list[str] = []
    stderr_tail: list[str] = []
    hello = [False]
    watch = launcher.watch(launched=time.monotonic())
    result = None
    with open(local / "log.txt", "w", encoding="utf-8", buffering=1) as log:
        def on_line(stream: str, line: str) -> None:
            log.write(f"{time.strftime('%H:%M:%S')} {stream}: {line}\n")
            if stream == "stderr":
                said = watch.see(line, time.monotonic())
                if said:
                    say(job.slot, said)
                elif line.strip():
                    stderr_tail[:] = (stderr_tail + [line.strip()])[-5:]
                return
            kind, payload = protocol.decode_stdout(line)
            if kind == protocol.LINE_HELLO:
                hello[0] = True
            elif kind == protocol.LINE_RECORD:
                try:
                    record = CrosscheckRecord.model_validate_json(payload)
                except ValueError as exc:
                    problems.append(f"a record that cannot be read: {str(exc).splitlines()[0]}")
                    return
                if record.case_id in cases:  # stored as it comes: a host that dies later keeps these
                    stored[record.case_id] = write_crosscheck(store, job.slot, number, record,
                                                              plan.sweep_median_us.get((job.slot, record.case_id)))
            elif kind == protocol.LINE_PROGRESS and payload.get("event") == "start":
                case = cases.get(payload.get("case_id"))
                if case is not None:
                    say(job.slot, f"crosschecking {case.backend} {case.m}x{case.n}x{case.k} "
                                  f"({payload.get('done', 0) + 1}/{len(cases)})")
            elif kind == protocol.LINE_PROGRESS and payload.get("event") == "lock-wait":
                say(job.slot, f"waiting for the GPU (held by {payload.get('holder', '?')})")

        transport = make_transport(job.host, accept_new=accept_new)
        try:
            transport.connect()
            running.add(job.slot, lambda: launcher.stop(transport, name,
                                                        lambda: stop_remote(transport, f"{remote_dir}/pid")))
            timeout = START_ALLOWANCE_S + lock_timeout_s + CASE_ALLOWANCE_S * len(job.cases)
            stall = launcher.stall_limit(watch, job.host.stall_timeout or plan.stall_timeout_s)

            def launch():
                return transport.run(argv, env=job.env, timeout=timeout, on_line=on_line, stdin=data,
                                     stall_timeout=stall)

            def sync() -> None:
                say(job.slot, "the host lacks the run's script or worker: uploading them")
                hello[0] = False
                sync_script(transport, plan.bundle_path, script)

            if launcher.upload_first:
                sync_script(transport, plan.bundle_path, script)
            result = run_first(launch, lambda r: lacks_files(r, hello[0]), sync)
        except TransportError as exc:
            return SlotCrosschecks(job.slot, checks=list(stored.values()), error=f"{exc.outcome}: {exc}",
                                   missing=[c for cid, c in cases.items() if cid not in stored])
        finally:
            running.remove(job.slot)
            transport.close()
    missing = [c for cid, c in cases.items() if cid not in stored]
    error = "; ".join(problems)
    if missing:
        error = "; ".join(filter(None, [error, _why_no_record(result, hello[0], stderr_tail, job)]))
    return SlotCrosschecks(job.slot, checks=list(stored.values()), error=error, missing=missing)


def _why_no_record(result, hello: bool, stderr_tail: list[str], job: CrosscheckJob) -> str:
    if result is None:
        return "the host's crosscheck did not start"
    if result.timed_out:
        return "the host's crosscheck ran past its time limit and was stopped"
    if result.stalled:
        return "the host went silent (stalled) and its crosscheck was stopped"
    launch = protocol.classify_exit(result.exit_code, hello)
    if launch == protocol.LAUNCH_GPU_BUSY:
        return "the GPU stayed busy (another sweep held it past the lock timeout: --lock-timeout)"
    if launch == protocol.LAUNCH_NO_INTERPRETER:
        return f"remote interpreter not found: {job.host.python}"
    if launch == protocol.LAUNCH_NOT_EXECUTABLE:
        return f"remote interpreter not executable: {job.host.python}"
    tail = stderr_tail[-1] if stderr_tail else ""
    return f"the host's crosscheck ended (exit status {result.exit_code}) without a record" + (f": {tail}" if tail else "")
