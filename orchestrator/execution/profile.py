"""Profile cases of a stored run on their own hosts: `fleetbench profile` and `diff --across-hosts --profile`.

Per slot (a host, or one GPU of it), in the one fan-out (fanout.py): connect -> one exec of the run's own
rendered script with `profile` (the run's own worker, uploaded only when the host lacks it, as a rerun
does) and the params on its stdin -> the host profiles each case under ncu (worker/profile.py), holding
the GPU's lock as a sweep does, and sends one record per case -> the controller fetches each report and
stores record, summary and report in the run's folder (runs/profiles.py). A host that fails is that
slot's result; the others go on. Ctrl-C stops what runs on every host (the launcher's process group: the
worker, ncu and the profiled process) and raises KeyboardInterrupt.
"""
from __future__ import annotations

import hashlib
import io
import statistics
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from worker import protocol
from worker.profile import ProfileOptions, ProfileParams, ProfileRecord
from worker.schema import CaseSpec

from ..analysis.profile import ProfileFormatError, summary_of
from ..config.inventory import Host, Inventory
from ..errors import InputError
from ..launchers import job_name, launcher_for
from ..runs.atomicfile import write_atomic
from ..runs.profiles import StoredProfile, job_dir, new_job_dir, write_profile
from ..runs.store import RunStore
from ..transport import TransportError, bounded, login_relative, make_transport
from .fanout import HostResult, Running, fan_out
from .launch import _same_host, _stored_bundle, _stored_script
from .remote import RenderedScript, lacks_files, run_first, stop_remote, sync_script

# A report of a few kernels is a few MB: fetching it may take longer than a cleanup step.
FETCH_LIMIT_S = 120.0
START_ALLOWANCE_S = 300.0  # the worker's start and ncu's own, beyond each case's limit


@dataclass(frozen=True)
class ProfileJob:
    """The cases to profile on one slot of the run."""

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
class SlotProfiles:
    """What one slot's profiling gave: a stored profile per case that came back, and the error of the
    slot as a whole (unreachable, a busy GPU, a host that ended without a record) or ""."""

    slot: str
    profiles: list[StoredProfile] = field(default_factory=list)
    error: str = ""
    missing: list[CaseSpec] = field(default_factory=list)  # cases with no record


@dataclass
class ProfilePlan:
    store: RunStore
    jobs: list[ProfileJob]
    scripts: dict[str, RenderedScript]
    bundle_path: Path
    lock_timeout_s: float
    stall_timeout_s: float
    device: str
    # (slot, case id) -> the run's median µs and NVML's SM clock over its rounds (median; None: not read)
    sweep: dict[tuple[str, str], tuple[float, Optional[float]]]


def worker_can_profile(bundle_bytes: bytes) -> bool:
    """Whether a run's worker archive has the `profile` command (runs made before it do not)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle_bytes), mode="r:gz") as tar:
            return "worker/profile.py" in tar.getnames()
    except (tarfile.TarError, OSError):
        return False


def plan_profiles(store: RunStore, inventory: Inventory, wanted: dict[str, list[str]]) -> ProfilePlan:
    """Jobs for `wanted` (slot -> case ids), run by the run's own scripts and worker on its own hosts.
    Raises InputError for a slot or host the run or the inventory lacks, a host that is another machine
    now, a changed workdir, and a run whose worker cannot profile."""
    from ..analysis.merge import load_slots

    manifest = store.manifest()
    bundle = _stored_bundle(store, manifest)
    if not worker_can_profile(bundle.data):
        raise InputError(f"run {store.run_id} was made by fleetbench {manifest.fleetbench_version or '?'}, whose "
                         "worker cannot profile: profile a run made by this fleetbench (`fleetbench run` the sweep "
                         "again)")
    by_name = {h.name: h for h in inventory.hosts}
    jobs_by_slot = {j.slot: j for j in manifest.jobs}
    planned = store.planned_cases()
    sweep = {(s.slot, cid): (rec.timing.median_us, _sm_clock(rec.timing)) for s in load_slots(store)
             for cid, (_, rec) in s.records.items() if rec.status == "ok" and rec.timing is not None}
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
        jobs.append(ProfileJob(host=host, gpu=stored.gpu, slot=slot, cases=tuple(planned[c] for c in case_ids)))
    bundle_path = store.dir / "worker.tar.gz"
    return ProfilePlan(store=store, jobs=jobs, scripts=scripts, bundle_path=bundle_path,
                       lock_timeout_s=manifest.worker.lock_timeout_s, stall_timeout_s=manifest.stall_timeout,
                       device=manifest.worker.device, sweep=sweep)


def _sm_clock(timing) -> Optional[float]:
    clocks = [r.sm_clock_mhz for r in timing.rounds if r.sm_clock_mhz]
    return float(statistics.median(clocks)) if clocks else None


Say = Callable[[str, str], None]  # (slot, what happens now): the command prints it


def run_profiles(plan: ProfilePlan, options: ProfileOptions, *, parallel: int = 64, accept_new: bool = False,
                 say: Optional[Say] = None, lock_timeout_s: Optional[float] = None) -> list[SlotProfiles]:
    """Profile every job; one SlotProfiles per job, in order. Never raises for a host's failure; Ctrl-C
    stops what runs on the hosts, then raises KeyboardInterrupt (what came back is stored)."""
    running = Running()
    say = say or (lambda slot, text: None)
    lock_timeout = plan.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
    with plan.store.hold():  # `prune` leaves a run alone while it is profiled
        done = fan_out(plan.jobs, lambda job: _profile_slot(plan, job, options, lock_timeout, accept_new, running, say),
                       parallel=parallel, name_of=lambda job: job.slot, on_interrupt=running.stop_all)
    return [_as_slot_result(r, job) for r, job in zip(done, plan.jobs)]


def _as_slot_result(result: HostResult, job: ProfileJob) -> SlotProfiles:
    if result.ok:
        return result.value
    return SlotProfiles(job.slot, error=result.describe_error() or "failed", missing=list(job.cases))


def profile_argv(job: ProfileJob, script: RenderedScript, remote_dir: str, name: str) -> list[str]:
    """The command a slot's profiling runs on its host, as its launcher starts it; params on stdin."""
    command = [job.host.python, login_relative(script.remote), "profile",
               "--pidfile", login_relative(f"{remote_dir}/pid"),
               "--params", login_relative(f"{remote_dir}/params.json"), "--params-stdin",
               "--out", login_relative(remote_dir)]
    return launcher_for(job.host).argv(command, name)


def _profile_slot(plan: ProfilePlan, job: ProfileJob, options: ProfileOptions, lock_timeout_s: float,
                  accept_new: bool, running: Running, say: Say) -> SlotProfiles:
    store, script = plan.store, plan.scripts[job.host.name]
    number, local = new_job_dir(store, job.slot)
    remote_dir = f"{script.layout.run_dir}/profiles/{job.slot}.profile-{number}"
    params = ProfileParams(run_id=store.run_id, host=job.host.name, gpu=job.gpu, device=plan.device,
                           lock_timeout_s=lock_timeout_s, lock_clocks=job.host.clocks == "lock", cases=list(job.cases),
                           options=options)
    data = params.model_dump_json().encode("utf-8")
    write_atomic(local / "params.json", data)
    launcher = launcher_for(job.host)
    name = job_name(store.run_id, f"{job.slot}-profile", number)
    argv = profile_argv(job, script, remote_dir, name)
    records: list[ProfileRecord] = []
    problems: list[str] = []
    stderr_tail: list[str] = []
    hello = [False]
    watch = launcher.watch(launched=time.monotonic())
    cases = {c.case_id: c for c in job.cases}
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
                    records.append(ProfileRecord.model_validate_json(payload))
                except ValueError as exc:
                    problems.append(f"a record that cannot be read: {str(exc).splitlines()[0]}")
            elif kind == protocol.LINE_PROGRESS and payload.get("event") == "start":
                case = cases.get(payload.get("case_id"))
                if case is not None:
                    say(job.slot, f"profiling {_case_text(case)} under ncu ({payload.get('done', 0) + 1}/{len(cases)})")
            elif kind == protocol.LINE_PROGRESS and payload.get("event") == "lock-wait":
                say(job.slot, f"waiting for the GPU (held by {payload.get('holder', '?')})")

        transport = make_transport(job.host, accept_new=accept_new)
        try:
            transport.connect()
            running.add(job.slot, lambda: launcher.stop(transport, name,
                                                        lambda: stop_remote(transport, f"{remote_dir}/pid")))
            timeout = START_ALLOWANCE_S + lock_timeout_s + options.case_timeout_s * len(job.cases)
            stall = launcher.stall_limit(watch, job.host.stall_timeout or plan.stall_timeout_s)

            def launch():
                records.clear()
                return transport.run(argv, env=job.env, timeout=timeout, on_line=on_line, stdin=data,
                                     stall_timeout=stall)

            def sync() -> None:
                say(job.slot, "the host lacks the run's script or worker: uploading them")
                hello[0] = False
                sync_script(transport, plan.bundle_path, script)

            if launcher.upload_first:
                sync_script(transport, plan.bundle_path, script)
            result = run_first(launch, lambda r: lacks_files(r, hello[0]), sync)
            stored = [_store_one(plan, job, number, record, transport) for record in records if record.case_id in cases]
        except TransportError as exc:
            return SlotProfiles(job.slot, error=f"{exc.outcome}: {exc}", missing=list(job.cases))
        finally:
            running.remove(job.slot)
            transport.close()
    missing = [c for cid, c in cases.items() if cid not in {r.case_id for r in records}]
    error = "; ".join(problems)
    if missing:
        error = "; ".join(filter(None, [error, _why_no_record(result, hello[0], stderr_tail, job)]))
    return SlotProfiles(job.slot, profiles=stored, error=error, missing=missing)


def _why_no_record(result, hello: bool, stderr_tail: list[str], job: ProfileJob) -> str:
    if result is None:
        return "the host's profiling did not start"
    if result.timed_out:
        return "the host's profiling ran past its time limit and was stopped (--timeout per case)"
    if result.stalled:
        return "the host went silent (stalled) and its profiling was stopped"
    launch = protocol.classify_exit(result.exit_code, hello)
    if launch == protocol.LAUNCH_GPU_BUSY:
        return "the GPU stayed busy (another sweep or profile held it past the lock timeout: --lock-timeout)"
    if launch == protocol.LAUNCH_NO_INTERPRETER:
        return f"remote interpreter not found: {job.host.python}"
    if launch == protocol.LAUNCH_NOT_EXECUTABLE:
        return f"remote interpreter not executable: {job.host.python}"
    tail = stderr_tail[-1] if stderr_tail else ""
    ended = f"the host's profiling ended (exit status {result.exit_code}) without a record"
    return ended + (f": {tail}" if tail else "")


def _store_one(plan: ProfilePlan, job: ProfileJob, number: int, record: ProfileRecord, transport) -> StoredProfile:
    """Fetch the record's report (when there is one), parse its CSV, store all three."""
    local = job_dir(plan.store, job.slot, number)
    report, problems, summary = None, [], None
    if record.status == "ok" and record.report:
        target = local / f"{record.case_id}.ncu-rep"
        fetched = bounded(lambda: transport.get(record.report, target), FETCH_LIMIT_S)
        if fetched and target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == record.report_sha256:
            report = target
        else:
            target.unlink(missing_ok=True)
            problems.append(f"its report could not be fetched: it stays on the host at {record.report}")
    if record.status == "ok":
        try:
            summary = summary_of(record).as_dict()
        except ProfileFormatError as exc:
            problems.append(f"ncu's CSV cannot be read: {exc}")
    return write_profile(plan.store, job.slot, number, record, summary,
                         plan.sweep.get((job.slot, record.case_id), (None, None)), report, "; ".join(problems))


def _case_text(case: CaseSpec) -> str:
    return f"{case.backend} {case.m}x{case.n}x{case.k}"
