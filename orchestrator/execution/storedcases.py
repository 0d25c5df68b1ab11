"""A worker command over chosen cases of a stored run, each on its own host: the one path of
`fleetbench profile` and `fleetbench crosscheck`. What differs between them is a WorkerCommand
(execution/profile.py, execution/crosscheck.py): the worker's subcommand, its limits, its record and
how that is stored.

Per slot (a host, or one GPU of it), in the one fan-out (fanout.py): connect -> one exec, by the attempt
runner a sweep's job uses (attempt.py), of the run's own rendered script with the command (the run's own
worker, uploaded only when the host lacks it, as a rerun does) and the params on its stdin -> the host
runs each case holding the GPU's lock as a sweep does (worker/tools/caseloop.py) and sends one record per case
-> the controller stores each record in the run's folder (runs/slotfolders.py): as it comes, or, where
records name files the host wrote, after the run while still connected, to fetch them. A host that fails is that slot's result; the others go on. Ctrl-C
stops what runs on every host (the launcher's process group) and raises KeyboardInterrupt.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import BaseModel

from worker.contract import protocol
from worker.contract.cases import CasesParams
from worker.contract.schema import CaseSpec, Stats

from ..atomicfile import as_disk_full, write_atomic
from ..config.inventory import Host, Inventory
from ..errors import InputError
from ..launchers import job_name, launcher_for
from ..planning.plan import slot_env
from ..runs.slotfolders import SlotFolders, StoredCase
from ..runs.store import RunStore
from ..transport import Transport, TransportError, login_relative, make_transport
from .attempt import Attempt, WorkerCall
from .fanout import HostResult, Running, fan_out
from .remote import RenderedScript, sync_script
from .storedrun import run_host, stored_bundle

START_ALLOWANCE_S = 300.0  # the worker's start (torch, a peer's import, ncu's own), beyond the cases' limits


@dataclass(frozen=True)
class CaseJob:
    """The cases to run on one slot of the run."""

    host: Host
    gpu: Optional[int]
    slot: str
    cases: tuple[CaseSpec, ...]

    @property
    def env(self) -> dict[str, str]:
        return slot_env(self.host, self.gpu)


@dataclass
class CasePlan:
    store: RunStore
    jobs: list[CaseJob]
    scripts: dict[str, RenderedScript]
    bundle_path: Path
    lock_timeout_s: float
    stall_timeout_s: float
    device: str
    sweep: dict[tuple[str, str], Stats]  # (slot, case id) -> the run's timing of that case (ok cases)


@dataclass
class SlotResult:
    """What one slot gave: a stored result per case that came back, and the error of the slot as a whole
    (unreachable, a busy GPU, a host that ended without a record) or ""."""

    slot: str
    stored: list[StoredCase] = field(default_factory=list)  # of the command's own type (runs/profiles.py, ...)
    error: str = ""
    missing: list[CaseSpec] = field(default_factory=list)  # cases with no record


# (plan, job, its <kind>-<n>, a record of one of its cases, the connection to its host) -> the stored result
StoreRecord = Callable[[CasePlan, CaseJob, int, Any, Transport], StoredCase]


@dataclass(frozen=True)
class WorkerCommand:
    """What one command over cases of a stored run is, beside the path they share."""

    results: SlotFolders  # how its records are kept; their kind is the worker's subcommand
    activity: str  # what the host does, as its errors say it: "the host's profiling did not start"
    doing: str  # the progress line of one case, {case} its backend and shape: "profiling {case} under ncu"
    params_type: type[CasesParams]
    case_limit_s: Callable[[Any], float]  # options -> the time one case may take on the host
    store: StoreRecord
    # The worker writes files into its remote folder (`--out`) that its records name: records are stored
    # after the run, while the connection is still open to fetch them; otherwise each is stored as it
    # comes, and a host that dies later keeps them.
    files_on_host: bool = False
    limit_option: str = ""  # the option that sets case_limit_s, named when a host runs past its limit
    gpu_holders: str = "another sweep"  # who may hold the GPU past the lock timeout

    @property
    def name(self) -> str:
        """The worker's subcommand (`python -m worker NAME`)."""
        return self.results.kind


# Where a run's worker keeps the module of a command: worker/tools/ since the worker has rooms, worker/ before.
COMMAND_MODULES = ("worker/tools/{}.py", "worker/{}.py")


def worker_has_command(bundle_bytes: bytes, name: str) -> bool:
    """Whether a run's worker archive has the command `name` (runs made before it do not)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle_bytes), mode="r:gz") as tar:
            names = set(tar.getnames())
    except (tarfile.TarError, OSError):
        return False
    return any(place.format(name) in names for place in COMMAND_MODULES)


def plan_cases(store: RunStore, inventory: Inventory, wanted: dict[str, list[str]], name: str) -> CasePlan:
    """Jobs for `wanted` (slot -> case ids), run by the run's own scripts and worker on its own hosts.
    Raises InputError for a slot or host the run or the inventory lacks, a host that is another machine
    now, a changed workdir, and a run whose worker lacks the command `name`."""
    from ..runs.slots import load_slots

    manifest = store.manifest()
    bundle = stored_bundle(store, manifest)
    if not worker_has_command(bundle.data, name):
        raise InputError(
            f"run {store.run_id} was made by fleetbench {manifest.fleetbench_version or '?'}, whose "
            f"worker cannot {name}: {name} a run made by this fleetbench (`fleetbench run` the sweep "
            "again)"
        )
    jobs_by_slot = {j.slot: j for j in manifest.jobs}
    planned = store.planned_cases()
    sweep = {
        (s.slot, cid): rec.timing
        for s in load_slots(store)
        for cid, (_, rec) in s.records.items()
        if rec.status == "ok" and rec.timing is not None
    }
    jobs, scripts = [], {}
    for slot, case_ids in wanted.items():
        stored = jobs_by_slot.get(slot)
        if stored is None:
            raise InputError(f"run {store.run_id} has no slot '{slot}'")
        host, _ = run_host(store, manifest, inventory, stored.host, bundle, scripts)
        jobs.append(CaseJob(host=host, gpu=stored.gpu, slot=slot, cases=tuple(planned[c] for c in case_ids)))
    return CasePlan(
        store=store,
        jobs=jobs,
        scripts=scripts,
        bundle_path=store.dir / "worker.tar.gz",
        lock_timeout_s=manifest.worker.lock_timeout_s,
        stall_timeout_s=manifest.stall_timeout,
        device=manifest.worker.device,
        sweep=sweep,
    )


Say = Callable[[str, str], None]  # (slot, what happens now): the command prints it


def run_cases(
    plan: CasePlan,
    command: WorkerCommand,
    options: BaseModel,
    *,
    parallel: int = 64,
    accept_new: bool = False,
    say: Optional[Say] = None,
    lock_timeout_s: Optional[float] = None,
) -> list[SlotResult]:
    """Run `command` with `options` on every job; one SlotResult per job, in order. Never raises for a
    host's failure; Ctrl-C stops what runs on the hosts, then raises KeyboardInterrupt (what came back is
    stored)."""
    running = Running()
    say = say or (lambda slot, text: None)
    lock_timeout = plan.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    with plan.store.hold():  # `prune` leaves a run alone while its cases run again
        done = fan_out(
            plan.jobs,
            lambda job: _run_slot(plan, command, job, options, lock_timeout, accept_new, running, say),
            parallel=parallel,
            name_of=lambda job: job.slot,
            on_interrupt=running.stop_all,
        )
    return [_as_slot_result(r, job) for r, job in zip(done, plan.jobs)]


def _as_slot_result(result: HostResult, job: CaseJob) -> SlotResult:
    if result.ok:
        return result.value
    return SlotResult(job.slot, error=result.describe_error() or "failed", missing=list(job.cases))


def worker_argv(command: WorkerCommand, job: CaseJob, script: RenderedScript, remote_dir: str, name: str) -> list[str]:
    """What a slot runs on its host, as its launcher starts it; params on stdin."""
    argv = [
        job.host.python,
        login_relative(script.remote),
        command.name,
        "--pidfile",
        login_relative(f"{remote_dir}/pid"),
        "--params",
        login_relative(f"{remote_dir}/params.json"),
        "--params-stdin",
    ]
    if command.files_on_host:
        argv += ["--out", login_relative(remote_dir)]
    return launcher_for(job.host).argv(argv, name)


def case_text(case: CaseSpec) -> str:
    return f"{case.backend} {case.m}x{case.n}x{case.k}"


def _run_slot(
    plan: CasePlan,
    command: WorkerCommand,
    job: CaseJob,
    options: BaseModel,
    lock_timeout_s: float,
    accept_new: bool,
    running: Running,
    say: Say,
) -> SlotResult:
    store, script = plan.store, plan.scripts[job.host.name]
    number, local = command.results.new_job_dir(store, job.slot)
    remote_dir = f"{script.layout.run_dir}/{command.name}s/{job.slot}.{command.name}-{number}"
    params = command.params_type(
        run_id=store.run_id,
        host=job.host.name,
        gpu=job.gpu,
        device=plan.device,
        lock_timeout_s=lock_timeout_s,
        lock_clocks=job.host.clocks == "lock",
        cases=list(job.cases),
        options=options,
    )
    data = params.model_dump_json().encode("utf-8")
    write_atomic(local / "params.json", data)
    name = job_name(store.run_id, f"{job.slot}-{command.name}", number)
    call = WorkerCall(
        argv=worker_argv(command, job, script, remote_dir, name),
        env=job.env,
        params=data,
        job_name=name,
        pidfile=f"{remote_dir}/pid",
        stall_timeout_s=job.host.stall_timeout or plan.stall_timeout_s,
    )
    cases = {c.case_id: c for c in job.cases}
    kept: dict[str, StoredCase] = {}  # case id -> its stored result
    to_fetch: list = []  # records of a command whose files are fetched after the run
    problems: list[str] = []
    result = None

    def on_record(payload: str) -> None:
        try:
            record = command.results.record_type.model_validate_json(payload)
        except ValueError as exc:
            problems.append(f"a record that cannot be read: {str(exc).splitlines()[0]}")
            return
        if record.case_id not in cases:
            return
        if command.files_on_host:
            to_fetch.append(record)
        else:
            kept[record.case_id] = command.store(plan, job, number, record, transport)

    def on_progress(event: dict) -> None:
        if event.get("event") == "start":
            case = cases.get(event.get("case_id"))
            if case is not None:
                doing = command.doing.format(case=case_text(case))
                say(job.slot, f"{doing} ({event.get('done', 0) + 1}/{len(cases)})")
        elif event.get("event") == "lock-wait":
            say(job.slot, f"waiting for the GPU (held by {event.get('holder', '?')})")

    with store.open(local / "log.txt", "w", encoding="utf-8", buffering=1) as log:
        transport = make_transport(job.host, accept_new=accept_new)
        attempt = Attempt(
            transport,
            job.host,
            call,
            running,
            log=log,
            on_record=on_record,
            on_progress=on_progress,
            on_launcher=lambda said: say(job.slot, said),
        )
        try:
            transport.connect()
            timeout = START_ALLOWANCE_S + lock_timeout_s + command.case_limit_s(options) * len(job.cases)

            def resync() -> None:
                say(job.slot, "the host lacks the run's script or worker: uploading them")
                to_fetch.clear()  # the command starts afresh
                sync_script(transport, plan.bundle_path, script)

            result = attempt.run(
                time_left=lambda: timeout,
                sync=lambda: sync_script(transport, plan.bundle_path, script),
                resync=resync,
            )
            for record in to_fetch:
                kept[record.case_id] = command.store(plan, job, number, record, transport)
        except TransportError as exc:
            return SlotResult(
                job.slot,
                stored=list(kept.values()),
                error=f"{exc.outcome}: {exc}",
                missing=[c for cid, c in cases.items() if cid not in kept],
            )
        finally:
            transport.close()
    if attempt.lines.write_error is not None:
        problems.append(f"{as_disk_full(attempt.lines.write_error, local)}; the command was stopped")
    missing = [c for cid, c in cases.items() if cid not in kept]
    error = "; ".join(problems)
    if missing:
        why = _why_no_record(command, result, attempt.lines.hello, attempt.lines.last_stderr(), job)
        error = "; ".join(filter(None, [error, why]))
    return SlotResult(job.slot, stored=list(kept.values()), error=error, missing=missing)


def _why_no_record(command: WorkerCommand, result, hello: bool, last_stderr: str, job: CaseJob) -> str:
    what = f"the host's {command.activity}"
    if result is None:
        return f"{what} did not start"
    if result.timed_out:
        hint = f" ({command.limit_option} per case)" if command.limit_option else ""
        return f"{what} ran past its time limit and was stopped{hint}"
    if result.stalled:
        return f"the host went silent (stalled) and its {command.activity} was stopped"
    launch = protocol.classify_exit(result.exit_code, hello)
    if launch == protocol.LAUNCH_GPU_BUSY:
        return f"the GPU stayed busy ({command.gpu_holders} held it past the lock timeout: --lock-timeout)"
    if launch == protocol.LAUNCH_NO_INTERPRETER:
        return f"remote interpreter not found: {job.host.python}"
    if launch == protocol.LAUNCH_NOT_EXECUTABLE:
        return f"remote interpreter not executable: {job.host.python}"
    return f"{what} ended (exit status {result.exit_code}) without a record" + (
        f": {last_stderr}" if last_stderr else ""
    )
