"""Execute a plan: each host's pipeline, in the one fan-out (fanout.py); every job ends in an outcome.

Per host: connect once -> per GPU slot: one exec of [python, script, supervise ...] with the params
on its stdin, streaming each output line into log.txt and the live view and each result record into
results.jsonl -> validate -> outcome.json. In the steady state that exec is the only remote round
trip after the handshake: the script and the worker are content-addressed on the host. When the host
lacks either (the exit status says so: worker.contract.protocol.classify_exit) they are uploaded once and the
command runs again. The host's results.jsonl is fetched only when the stream was cut short. A job
silent for its stall timeout, and its wall-clock limit over all of it (both resolved in the plan:
plan.Job), end the attempt. Running it is the one attempt runner's (attempt.py: how it starts and is
stopped is its launcher's, orchestrator/launchers; what its output lines mean is the demultiplexer's,
demux.py). Stopping (Ctrl-C, a stall or a deadline) kills the remote process group through the pid
file the script wrote, then fetches whatever results exist.

A full disk under the run folder stops the attempt, not the controller: the job is stopped, what was
written stays (whole lines), and its outcome says so (failed: "disk full (ENOSPC) writing PATH ...");
when even the outcome finds no room, an empty marker beside it says why (store.RunStore.outcome).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from worker.contract import protocol
from worker.contract.schema import CaseSpec

from ..atomicfile import as_disk_full
from ..config.inventory import Host
from ..launchers import job_name, launcher_for
from ..planning.bundle import WorkerBundle
from ..planning.plan import Job, Plan
from ..runs.outcome import AttemptEnd, HostOutcome, explain_stderr, judge
from ..runs.records import parse_results
from ..runs.store import RunStore, now_iso
from ..transport import Transport, TransportError, make_transport
from .attempt import Attempt, WorkerCall
from .fanout import Running, fan_out
from .remote import (
    CLEANUP_LIMIT_S,
    RemoteLayout,
    RenderedScript,
    bounded,
    job_argv,
    job_params,
    stop_job,
    sync_script,
    write_params,
)


@dataclass(frozen=True)
class JobTask:
    """One attempt of one job: which cases it runs (all of them, or those still missing)."""

    job: Job
    attempt: int
    cases: tuple[CaseSpec, ...]


@dataclass
class JobEvent:
    slot: str
    state: str  # connecting, syncing, running, collecting, or a final outcome
    done: int = 0
    total: int = 0
    current: str = ""
    message: str = ""


EventSink = Callable[[JobEvent], None]


@dataclass
class Execution:
    """Shared state of one fan-out: the cancel flag and what is running where (to stop it)."""

    cancel: threading.Event = field(default_factory=threading.Event)
    running: Running = field(default_factory=lambda: Running(CLEANUP_LIMIT_S))

    def stop_all(self) -> None:
        """Ctrl-C: flag every host and kill every remote process group that is running."""
        self.cancel.set()
        self.running.stop_all()


def run_tasks(
    plan: Plan,
    store: RunStore,
    scripts: dict[str, RenderedScript],
    bundle: WorkerBundle,
    tasks: list[JobTask],
    *,
    parallel: int = 64,
    accept_new: bool = False,
    on_event: Optional[EventSink] = None,
    execution: Optional[Execution] = None,
    transport_factory: Callable[..., Transport] = make_transport,
) -> list[HostOutcome]:
    """Run every task; returns one outcome per task, in task order. Never raises for a host's failure."""
    execution = execution or Execution()
    emit = on_event or (lambda e: None)
    by_host: dict[str, list[JobTask]] = collections.OrderedDict()
    for task in tasks:
        by_host.setdefault(task.job.host.name, []).append(task)
    bundle_path = store.dir / "worker.tar.gz"
    if not store.exists(bundle_path):
        bundle.write(bundle_path)
    hosts = {h.name: h for h in plan.hosts}
    results: dict[tuple[str, int], HostOutcome] = {}

    def host_pipeline(name: str) -> None:
        pipeline = _HostPipeline(
            plan,
            store,
            scripts[name],
            bundle_path,
            bundle.params_format,
            hosts[name],
            by_host[name],
            accept_new,
            emit,
            execution,
            transport_factory,
        )
        for outcome in pipeline.run():
            results[(outcome.slot, outcome.attempt)] = outcome

    # Ctrl-C: flag every host, stop every remote process group that runs, then raise (fanout.fan_out).
    done = fan_out(
        list(by_host),
        host_pipeline,
        parallel=parallel,
        name_of=str,
        cancel=execution.cancel,
        on_interrupt=execution.stop_all,
    )
    for host_result in done:  # a pipeline that raised (a bug) still gives each of its jobs an outcome
        for task in by_host[host_result.name]:
            if (task.job.slot, task.attempt) not in results:
                why = host_result.describe_error() or "the host's pipeline ended without an outcome"
                results[(task.job.slot, task.attempt)] = _HostPipeline.failed_outcome(store, task, why)
    return [results[(t.job.slot, t.attempt)] for t in tasks]


class _HostPipeline:
    def __init__(
        self, plan, store, script, bundle_path, params_format, host, tasks, accept_new, emit, execution, factory
    ):
        self.plan: Plan = plan
        self.params_format: int = params_format
        self.store: RunStore = store
        self.script: RenderedScript = script
        self.layout: RemoteLayout = script.layout
        self.bundle_path: Path = bundle_path
        self.host: Host = host
        self.tasks: list[JobTask] = tasks
        self.accept_new = accept_new
        self.emit: EventSink = emit
        self.execution = execution
        self.factory = factory
        self.started = time.monotonic()
        self.launcher = launcher_for(host)
        self.bytes_uploaded = 0
        self._sync_lock = threading.Lock()  # slots of one host share one upload
        self._synced = False

    def run(self) -> list[HostOutcome]:
        started_at = now_iso()
        for task in self.tasks:
            self.emit(JobEvent(task.job.slot, "connecting", total=len(task.cases)))
        try:
            for task in self.tasks:
                self.store.make_dir(self.store.attempt_dir(task.job.slot, task.attempt))
        except OSError as exc:  # nothing started: each attempt says why
            return [
                self._finish(
                    t, "failed", str(as_disk_full(exc, self.store.attempt_dir(t.job.slot, t.attempt))), started_at
                )
                for t in self.tasks
            ]
        transport = self.factory(self.host, accept_new=self.accept_new)
        try:
            try:
                transport.connect()
            except TransportError as exc:
                return [self._finish(t, exc.outcome, str(exc), started_at) for t in self.tasks]
            except Exception as exc:
                return [self._finish(t, "failed", f"{type(exc).__name__}: {exc}", started_at) for t in self.tasks]
            # The host's GPU slots at once, in the one fan-out: a slot that raised (a bug) fails alone.
            slots = fan_out(
                self.tasks,
                lambda t: self._run_job(transport, t, started_at),
                parallel=len(self.tasks),
                name_of=lambda t: t.job.slot,
            )
            return [
                r.value if r.ok else self.failed_outcome(self.store, t, r.describe_error() or "failed")
                for r, t in zip(slots, self.tasks)
            ]
        finally:
            transport.close()

    def _sync(self, transport: Transport) -> None:
        with self._sync_lock:
            if not self._synced:
                self.bytes_uploaded += sync_script(transport, self.bundle_path, self.script)
                self._synced = True

    def _run_job(self, transport: Transport, task: JobTask, started_at: str) -> HostOutcome:
        """One attempt of one job: launch it (uploading what the host lacks), demultiplex what it says,
        collect what the stream missed, and judge how it ended."""
        job, slot, attempt = task.job, task.job.slot, task.attempt
        local = self.store.attempt_dir(slot, attempt)
        try:
            params = write_params(local / "params.json", job_params(self.plan, job, task.cases), self.params_format)
        except OSError as exc:  # a full disk before the job started: it never ran
            return self._finish(task, "failed", f"{exc}; the job was not started", started_at)
        results_local = local / "results.jsonl"
        progress = {"done": 0, "current": ""}
        call = WorkerCall(
            argv=job_argv(job, self.script, attempt),
            env=job.env,
            params=params,
            job_name=job_name(self.layout.run_id, slot, attempt),
            pidfile=self.layout.pidfile(slot, attempt),
            stall_timeout_s=job.stall_timeout_s,
        )

        def on_launcher(said: str) -> None:  # the launcher's own news: waiting in a queue, or started
            waiting = runner.watch.waiting()
            self.emit(
                JobEvent(
                    slot, "queued" if waiting else "running", total=len(task.cases), current=said if waiting else ""
                )
            )

        def resync() -> None:
            self.emit(JobEvent(slot, "syncing", total=len(task.cases)))
            self._sync(transport)
            self.emit(JobEvent(slot, "running", total=len(task.cases)))

        def count(sent: int) -> None:
            self.bytes_uploaded += sent

        # Unbuffered, line by line: a line is on disk as soon as it came, and a full disk is met at once.
        with (
            self.store.open(local / "log.txt", "wb", buffering=0) as log,
            self.store.open(results_local, "wb", buffering=0) as results,
        ):
            runner = Attempt(
                transport,
                self.host,
                call,
                self.execution.running,
                log=log,
                results=results,
                on_progress=lambda event: self._progress(task, event, progress),
                on_launcher=on_launcher,
            )
            demux, watch = runner.lines, runner.watch
            self.emit(JobEvent(slot, "running", total=len(task.cases)))
            try:
                result = runner.run(
                    time_left=lambda: self.started + job.timeout_s - time.monotonic(),
                    sync=lambda: self._sync(transport),
                    resync=resync,
                    cancel=self.execution.cancel,
                    on_launch=count,
                )
            except TransportError as exc:
                return self._finish(task, exc.outcome, str(exc), started_at)
            except Exception as exc:
                result = None
                demux.stderr_tail.append(f"{type(exc).__name__}: {exc}")

        self.emit(JobEvent(slot, "collecting", done=progress["done"], total=len(task.cases)))
        wanted = {c.case_id for c in task.cases}
        fetched: Optional[bool] = True
        if demux.write_error is not None:  # no room for the host's copy either: what is here is what there is
            pass
        elif not (result is not None and result.exit_code == 0 and wanted <= protocol.done_case_ids(results_local)):
            # The stream was cut short (or the command failed): the host's own file is the complete copy.
            results_remote = self.layout.results(slot, attempt)
            fetched_path = local / "results.fetched"

            def collect() -> bool:
                if result is not None and (result.timed_out or result.stalled):
                    runner.stop()
                return transport.get(results_remote, fetched_path)

            # One bound for stopping and fetching together: a frozen host costs its limit plus this, once.
            fetched = bounded(collect, CLEANUP_LIMIT_S)
            if fetched and fetched_path.exists():
                fetched_path.replace(results_local)
            else:
                fetched_path.unlink(missing_ok=True)
        parsed = parse_results(results_local, self.store)
        final = {r.case_id: r for r in parsed.cases if r.case_id in wanted}  # a case's last line says where it is
        done_ids = {cid for cid, r in final.items() if r.complete}
        statuses = collections.Counter(r.status if r.complete else "incomplete" for r in final.values())
        end = AttemptEnd(
            total=len(task.cases),
            done=len(done_ids),
            cancelled=self.execution.cancel.is_set(),
            started=result is not None,
            timed_out=bool(result and result.timed_out),
            stalled=bool(result and result.stalled),
            stall_timeout_s=job.stall_timeout_s,
            exit_code=result.exit_code if result else -1,
            hello_seen=demux.hello,
            fetched=fetched,
            stderr_tail=explain_stderr(demux.stderr_tail),
            python=self.host.python,
            timeout_s=job.timeout_s,
        )
        outcome, error = judge(end)
        outcome, error = self.launcher.verdict(
            transport,
            job_name(self.layout.run_id, slot, attempt),
            outcome,
            error,
            end.total - end.done,
            end.total,
            end.cancelled,
        )
        if demux.write_error is not None:
            outcome = "failed"
            error = (
                f"{as_disk_full(demux.write_error, demux.write_error.filename or local)}; the job was stopped "
                f"with {end.done} of {end.total} cases stored"
            )
        return self._finish(
            task,
            outcome,
            error,
            started_at,
            done=len(done_ids),
            statuses=dict(statuses),
            problems=parsed.problems,
            queue_s=watch.queue_s(),
        )

    def _progress(self, task: JobTask, event: dict, progress: dict) -> None:
        if event.get("event") == "lock-wait":
            progress["current"] = f"held by run {event.get('holder')}"
            self.emit(
                JobEvent(
                    task.job.slot,
                    "waiting for the host's lock",
                    done=progress["done"],
                    total=len(task.cases),
                    current=progress["current"],
                )
            )
            return
        if event.get("event") == "heartbeat":  # alive (the transport saw the bytes): the view may say so
            state = "waiting for the host's lock" if event.get("state") == "lock-wait" else "running"
            self.emit(
                JobEvent(
                    task.job.slot, state, done=progress["done"], total=len(task.cases), current=progress["current"]
                )
            )
            return
        progress["done"] = int(event.get("done", progress["done"]))
        if event.get("event") == "start":
            rounds = f" (round {event['round']}/{event['rounds']})" if event.get("rounds", 1) > 1 else ""
            progress["current"] = f"{event.get('backend')} {event.get('m')}x{event.get('n')}x{event.get('k')}{rounds}"
        elif event.get("event") == "building":  # a compiler runs under the worker: a JIT build, not a hang
            progress["current"] = (progress["current"] + " " if progress["current"] else "") + "(building)"
        elif event.get("event") == "calibrate":
            progress["current"] = "calibrating " + ", ".join(map(str, event.get("families", [])))
        else:
            progress["current"] = ""
        total = int(event.get("total", len(task.cases)))
        self.emit(JobEvent(task.job.slot, "running", done=progress["done"], total=total, current=progress["current"]))

    @staticmethod
    def failed_outcome(store: RunStore, task: JobTask, error: str) -> HostOutcome:
        result = HostOutcome(
            slot=task.job.slot,
            host=task.job.host.name,
            gpu=task.job.gpu,
            attempt=task.attempt,
            outcome="failed",
            error=error,
            cases_total=len(task.cases),
            started_at=now_iso(),
        )
        store.keep_outcome(result)
        return result

    def _finish(
        self,
        task: JobTask,
        outcome: str,
        error: str,
        started_at: str,
        *,
        done: int = 0,
        statuses: Optional[dict] = None,
        problems: Optional[list] = None,
        queue_s: Optional[float] = None,
    ) -> HostOutcome:
        duration = round(time.monotonic() - self.started, 3)
        result = HostOutcome(
            slot=task.job.slot,
            host=task.job.host.name,
            gpu=task.job.gpu,
            attempt=task.attempt,
            outcome=outcome,
            error=error,
            cases_total=len(task.cases),
            cases_done=done,
            statuses=statuses or {},
            problems=problems or [],
            started_at=started_at,
            duration_s=duration,
            bytes_uploaded=self.bytes_uploaded,
            queue_s=queue_s,
        )
        self.store.keep_outcome(result)
        message = error
        if queue_s is not None:  # a launcher with a queue: the wait apart from the run
            message = "; ".join(filter(None, [error, self.launcher.describe_wait(queue_s, duration)]))
        self.emit(JobEvent(task.job.slot, outcome, done=done, total=len(task.cases), message=message))
        return result


def recover_attempts(
    plan: Plan,
    store: RunStore,
    scripts: dict[str, RenderedScript],
    *,
    accept_new: bool = False,
    parallel: int = 64,
    transport_factory: Callable[..., Transport] = make_transport,
) -> dict[str, int]:
    """Before a rerun: stop what earlier unfinished attempts still run on their hosts, and fetch the
    result lines they wrote that never reached the controller (a host that died mid-fetch, a
    controller killed mid-run). Returns recovered line counts per slot; unreachable hosts are skipped."""
    recovered: dict[str, int] = {}

    def per_host(host: Host) -> None:
        layout = scripts[host.name].layout
        transport = transport_factory(host, accept_new=accept_new)
        try:
            transport.connect()
        except Exception:
            return
        try:
            for job in plan.jobs_of(host):
                for attempt in store.attempts(job.slot):
                    if store.outcome(job.slot, attempt).outcome == "ok":
                        continue
                    stop_job(transport, host, layout, job.slot, attempt)
                    local = store.attempt_dir(job.slot, attempt) / "results.jsonl"
                    fetched = local.with_name("results.recovered")
                    store.exists(fetched)  # LinkInRun for a link left there: a copy is never written through one
                    remote = layout.results(job.slot, attempt)  # bound below: a thread past its limit lives on
                    if not bounded(lambda src=remote, dst=fetched: transport.get(src, dst), CLEANUP_LIMIT_S):
                        fetched.unlink(missing_ok=True)  # a copy cut short (a full disk) is no copy
                        continue
                    old = store.read_bytes(local) if store.exists(local) else b""
                    new = store.read_bytes(fetched)
                    if len(new) > len(old) and new.startswith(old):
                        fetched.replace(local)
                        recovered[job.slot] = recovered.get(job.slot, 0) + new[len(old) :].count(b"\n")
                    else:
                        fetched.unlink()
        finally:
            transport.close()

    fan_out(list(plan.hosts), per_host, parallel=parallel)
    return recovered
