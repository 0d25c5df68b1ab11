"""Fan-out: each host's pipeline in a bounded thread pool; every host ends in an outcome, none raises.

Per host: connect once -> per GPU slot: one exec of [python, script, supervise ...] with the params
on its stdin, streaming each output line into log.txt and the live view and each result record into
results.jsonl -> validate -> outcome.json. In the steady state that exec is the only remote round
trip after the handshake: the script and the worker are content-addressed on the host. When the host
lacks either (the launcher says so with EXIT_NEEDS_SYNC, or python cannot open the script) they are
uploaded once and the command runs again. The host's results.jsonl is fetched only when the stream
was cut short. A per-host wall-clock deadline covers all of it. Stopping (Ctrl-C or a deadline) kills
the remote process group through the pid file the script wrote, then fetches whatever results exist.
"""
from __future__ import annotations

import collections
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from worker.protocol import EXIT_NEEDS_SYNC, PROGRESS_PREFIX, RECORD_PREFIX, done_case_ids
from worker.supervise import EXIT_GPU_BUSY
from worker.schema import CaseSpec

from .bundle import WorkerBundle
from .collect import parse_results
from .inventory import Host
from .plan import Job, Plan, RemoteLayout
from .render import RenderedScript, job_argv, job_params, write_params
from .store import HostOutcome, RunStore, now_iso
from .transport import CommandResult, Transport, TransportError, login_relative, make_transport

STOP_GRACE_S = 3.0
CLEANUP_LIMIT_S = 8.0  # per cleanup step on a host that may no longer answer


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
class _Running:
    transport: Transport
    pidfile: str


@dataclass
class Execution:
    """Shared state of one fan-out: the cancel flag and what is running where (to stop it)."""

    cancel: threading.Event = field(default_factory=threading.Event)
    running: dict[str, _Running] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop_all(self) -> None:
        """Ctrl-C: flag every host and kill every remote process group that is running."""
        self.cancel.set()
        with self.lock:
            running = list(self.running.values())
        threads = [threading.Thread(target=stop_remote, args=(r.transport, r.pidfile), daemon=True) for r in running]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=CLEANUP_LIMIT_S)


def stop_remote(transport: Transport, pidfile: str) -> bool:
    """TERM, then KILL, the process group recorded in `pidfile`. Returns whether a group was found."""
    text = _bounded(lambda: transport.read_text(pidfile), CLEANUP_LIMIT_S)
    if not text or not text.strip().isdigit():
        return False
    group = f"-{int(text.strip())}"
    quiet = lambda stream, line: None  # noqa: E731
    for signal_name in ("TERM", "KILL"):
        kill = ["kill", f"-{signal_name}", "--", group]
        _bounded(lambda argv=kill: transport.run(argv, env={}, timeout=10, on_line=quiet), CLEANUP_LIMIT_S)
        alive = _bounded(lambda: transport.run(["kill", "-0", "--", group], env={}, timeout=10, on_line=quiet),
                         CLEANUP_LIMIT_S)
        if not isinstance(alive, CommandResult) or alive.exit_code != 0:
            return True
        time.sleep(STOP_GRACE_S)
    return True


def _bounded(fn, seconds: float):
    """Run fn in a thread and give up after `seconds` (an SFTP call to a frozen host never returns)."""
    box: list = []

    def target():
        try:
            box.append(fn())
        except Exception as exc:  # cleanup is best effort: report None
            box.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if not box or isinstance(box[0], Exception):
        return None
    return box[0]


def run_tasks(plan: Plan, store: RunStore, scripts: dict[str, RenderedScript], bundle: WorkerBundle,
              tasks: list[JobTask], *, parallel: int = 64, accept_new: bool = False,
              on_event: Optional[EventSink] = None, execution: Optional[Execution] = None,
              transport_factory: Callable[..., Transport] = make_transport) -> list[HostOutcome]:
    """Run every task; returns one outcome per task, in task order. Never raises for a host's failure."""
    execution = execution or Execution()
    emit = on_event or (lambda e: None)
    by_host: dict[str, list[JobTask]] = collections.OrderedDict()
    for task in tasks:
        by_host.setdefault(task.job.host.name, []).append(task)
    bundle_path = store.dir / "worker.tar.gz"
    if not bundle_path.exists():
        bundle.write(bundle_path)
    hosts = {h.name: h for h in plan.hosts}
    results: dict[tuple[str, int], HostOutcome] = {}

    def host_pipeline(name: str) -> None:
        pipeline = _HostPipeline(plan, store, scripts[name], bundle_path, hosts[name], by_host[name],
                                 accept_new, emit, execution, transport_factory)
        for outcome in pipeline.run():
            results[(outcome.slot, outcome.attempt)] = outcome

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(by_host)))) as pool:
        futures = [pool.submit(host_pipeline, name) for name in by_host]
        try:
            for f in futures:
                while True:
                    try:
                        f.result(timeout=0.2)  # a short wait keeps the main thread responsive to Ctrl-C
                        break
                    except TimeoutError:
                        continue
        except KeyboardInterrupt:
            execution.stop_all()
            for f in futures:
                try:
                    f.result(timeout=CLEANUP_LIMIT_S * 2)
                except Exception:
                    pass
            raise
    return [results[(t.job.slot, t.attempt)] for t in tasks]


def sync_script(transport: Transport, bundle_path: Path, script: RenderedScript) -> int:
    """Upload the worker and the script, each only if the host lacks it. Returns bytes sent."""
    layout = script.layout
    sent = 0
    if not transport.exists(f"{layout.worker_dir}/.complete") and not transport.exists(layout.worker_archive):
        transport.makedirs(layout.worker_archive.rsplit("/", 1)[0])
        sent += transport.put(bundle_path, layout.worker_archive, atomic=True)
    if not transport.exists(script.remote):
        transport.makedirs(script.remote.rsplit("/", 1)[0])
        sent += transport.put(script.path, script.remote, atomic=True)
    return sent


def run_first(launch: Callable[[], Optional[CommandResult]], lacks: Callable[[CommandResult], bool],
              sync: Callable[[], None]) -> Optional[CommandResult]:
    """Run optimistically; only when the host says it lacks the script or the worker (`lacks`, usually
    needs_sync), upload them (`sync`) and run once more. The steady state is one exec, no SFTP."""
    result = launch()
    if result is not None and lacks(result):
        sync()
        result = launch()
    return result


def needs_sync(result: CommandResult, script_remote: str, stderr_lines: list[str], stdout_lines: int) -> bool:
    """Did the command fail only because the host lacks the script or its worker version?"""
    if result.exit_code == EXIT_NEEDS_SYNC and any("is not on this host" in line for line in stderr_lines):
        return True
    # CPython: "<python>: can't open file '<path>': [Errno 2] No such file or directory", status 2.
    return (result.exit_code == 2 and stdout_lines == 0
            and any("can't open file" in line and script_remote in line for line in stderr_lines))


class _HostPipeline:
    def __init__(self, plan, store, script, bundle_path, host, tasks, accept_new, emit, execution, factory):
        self.plan: Plan = plan
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
        self.deadline = self.started + host.timeout
        self.bytes_uploaded = 0
        self._sync_lock = threading.Lock()  # slots of one host share one upload
        self._synced = False

    def run(self) -> list[HostOutcome]:
        started_at = now_iso()
        for task in self.tasks:
            self.emit(JobEvent(task.job.slot, "connecting", total=len(task.cases)))
            self.store.attempt_dir(task.job.slot, task.attempt).mkdir(parents=True, exist_ok=True)
        transport = self.factory(self.host, accept_new=self.accept_new)
        try:
            try:
                transport.connect()
            except TransportError as exc:
                return [self._finish(t, exc.outcome, str(exc), started_at) for t in self.tasks]
            except Exception as exc:
                return [self._finish(t, "failed", f"{type(exc).__name__}: {exc}", started_at) for t in self.tasks]
            if len(self.tasks) == 1:
                return [self._run_job(transport, self.tasks[0], started_at)]
            with ThreadPoolExecutor(max_workers=len(self.tasks)) as pool:
                return list(pool.map(lambda t: self._run_job(transport, t, started_at), self.tasks))
        finally:
            transport.close()

    def _sync(self, transport: Transport) -> None:
        with self._sync_lock:
            if not self._synced:
                self.bytes_uploaded += sync_script(transport, self.bundle_path, self.script)
                self._synced = True

    def _run_job(self, transport: Transport, task: JobTask, started_at: str) -> HostOutcome:
        job, slot, attempt = task.job, task.job.slot, task.attempt
        local = self.store.attempt_dir(slot, attempt)
        params = write_params(local / "params.json", job_params(self.plan, job, task.cases))
        results_local = local / "results.jsonl"
        stderr_tail: collections.deque[str] = collections.deque(maxlen=30)
        progress = {"done": 0, "current": "", "stdout": 0}
        pidfile = self.layout.pidfile(slot, attempt)
        argv = job_argv(job, self.script, attempt)

        with open(local / "log.txt", "w", encoding="utf-8", buffering=1) as log, \
                open(results_local, "w", encoding="utf-8") as results:
            def on_line(stream: str, line: str) -> None:
                if stream == "stdout":
                    progress["stdout"] += 1
                    at = line.find(RECORD_PREFIX)  # find, not startswith: a library may leave half a line
                    if at >= 0:
                        results.write(line[at + len(RECORD_PREFIX):] + "\n")
                        results.flush()
                        return
                log.write(f"{time.strftime('%H:%M:%S')} {stream}: {line}\n")
                if stream == "stderr":
                    stderr_tail.append(line)
                elif PROGRESS_PREFIX in line:
                    self._progress(task, line[line.find(PROGRESS_PREFIX) + len(PROGRESS_PREFIX):], progress)

            def launch() -> Optional[CommandResult]:
                remaining = self.deadline - time.monotonic()
                if remaining <= 0 or self.execution.cancel.is_set():
                    return CommandResult(exit_code=-1, timed_out=remaining <= 0)
                self.bytes_uploaded += len(params)
                return transport.run(argv, env=job.env, timeout=remaining, on_line=on_line, stdin=params)

            def resync() -> None:
                log.write(f"{time.strftime('%H:%M:%S')} controller: the host lacks this script or worker "
                          "version: uploading, then starting again\n")
                self.emit(JobEvent(slot, "syncing", total=len(task.cases)))
                stderr_tail.clear()
                self._sync(transport)
                self.emit(JobEvent(slot, "running", total=len(task.cases)))

            self.emit(JobEvent(slot, "running", total=len(task.cases)))
            with self.execution.lock:
                self.execution.running[slot] = _Running(transport, pidfile)
            try:
                result = run_first(launch, lambda r: needs_sync(r, login_relative(self.script.remote),
                                                                 list(stderr_tail), progress["stdout"]), resync)
            except TransportError as exc:
                return self._finish(task, exc.outcome, str(exc), started_at)
            except Exception as exc:
                result = None
                stderr_tail.append(f"{type(exc).__name__}: {exc}")
            finally:
                with self.execution.lock:
                    self.execution.running.pop(slot, None)

        self.emit(JobEvent(slot, "collecting", done=progress["done"], total=len(task.cases)))
        wanted = {c.case_id for c in task.cases}
        fetched: Optional[bool] = True
        if not (result is not None and result.exit_code == 0 and wanted <= done_case_ids(results_local)):
            # The stream was cut short (or the command failed): the host's own file is the complete copy.
            results_remote = self.layout.results(slot, attempt)
            fetched_path = local / "results.fetched"

            def collect() -> bool:
                if result is not None and result.timed_out:
                    stop_remote(transport, pidfile)
                return transport.get(results_remote, fetched_path)

            # One bound for stopping and fetching together: a frozen host costs its limit plus this, once.
            fetched = _bounded(collect, CLEANUP_LIMIT_S)
            if fetched and fetched_path.exists():
                fetched_path.replace(results_local)
            else:
                fetched_path.unlink(missing_ok=True)
        parsed = parse_results(results_local)
        done_ids = {r.case_id for r in parsed.cases if r.case_id in wanted}
        statuses = collections.Counter(r.status for r in parsed.cases if r.case_id in wanted)
        outcome, error = self._judge(task, result, len(done_ids), stderr_tail, fetched)
        return self._finish(task, outcome, error, started_at, done=len(done_ids), statuses=dict(statuses),
                            problems=parsed.problems)

    def _judge(self, task: JobTask, result: Optional[CommandResult], done: int, stderr_tail, fetched) -> tuple[str, str]:
        total = len(task.cases)
        tail = _last_meaningful(stderr_tail)
        missing = f"{total - done} of {total} cases have no result"
        if self.execution.cancel.is_set():
            return ("ok" if done == total else "interrupted"), ("" if done == total else f"interrupted; {missing}")
        if result is None:
            return ("partial" if done else "failed"), tail or "the run could not be started"
        if result.timed_out:
            return "timeout", f"did not finish within the host's {self.host.timeout:g} s limit; {missing}"
        if done == total:
            return "ok", ""
        if result.exit_code == -1:
            return ("partial" if done else "unreachable"), f"connection lost during the run; {missing}"
        if result.exit_code == 127 and not done:
            return "failed", f"remote interpreter not found: {self.host.python} ({tail or 'exit status 127'})"
        if result.exit_code == EXIT_GPU_BUSY and not done:
            return "failed", tail or "the GPU was locked by another sweep"
        if result.exit_code == 126 and not done:
            return "failed", f"remote interpreter not executable: {self.host.python}"
        if fetched is None and not done:
            return "failed", f"results could not be fetched; {tail or 'host stopped answering'}"
        reason = tail or f"exit status {result.exit_code}"
        return ("partial" if done else "failed"), f"{reason}; {missing}"

    def _progress(self, task: JobTask, payload: str, progress: dict) -> None:
        try:
            event = json.loads(payload)
        except ValueError:
            return
        if event.get("event") == "lock-wait":
            self.emit(JobEvent(task.job.slot, "waiting for GPU lock", done=progress["done"], total=len(task.cases),
                               current=f"held by run {event.get('holder')}"))
            return
        progress["done"] = int(event.get("done", progress["done"]))
        if event.get("event") == "start":
            progress["current"] = f"{event.get('backend')} {event.get('m')}x{event.get('n')}x{event.get('k')}"
        else:
            progress["current"] = ""
        total = int(event.get("total", len(task.cases)))
        self.emit(JobEvent(task.job.slot, "running", done=progress["done"], total=total, current=progress["current"]))

    def _finish(self, task: JobTask, outcome: str, error: str, started_at: str, *, done: int = 0,
                statuses: Optional[dict] = None, problems: Optional[list] = None) -> HostOutcome:
        result = HostOutcome(
            slot=task.job.slot, host=task.job.host.name, gpu=task.job.gpu, attempt=task.attempt,
            outcome=outcome, error=error, cases_total=len(task.cases), cases_done=done,
            statuses=statuses or {}, problems=problems or [], started_at=started_at,
            duration_s=round(time.monotonic() - self.started, 3), bytes_uploaded=self.bytes_uploaded,
        )
        self.store.write_outcome(result)
        self.emit(JobEvent(task.job.slot, outcome, done=done, total=len(task.cases), message=error))
        return result


def _last_meaningful(lines) -> str:
    """The line of stderr most likely to explain a failure (a traceback's last line, say)."""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith("@@fleetbench"):
            return text[:400]
    return ""


def recover_attempts(plan: Plan, store: RunStore, scripts: dict[str, RenderedScript], *, accept_new: bool = False,
                     transport_factory: Callable[..., Transport] = make_transport) -> dict[str, int]:
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
                    stop_remote(transport, layout.pidfile(job.slot, attempt))
                    local = store.attempt_dir(job.slot, attempt) / "results.jsonl"
                    fetched = local.with_name("results.recovered")
                    remote = layout.results(job.slot, attempt)  # bound below: a thread past its limit lives on
                    if not _bounded(lambda src=remote, dst=fetched: transport.get(src, dst), CLEANUP_LIMIT_S):
                        continue
                    old = local.read_bytes() if local.exists() else b""
                    new = fetched.read_bytes()
                    if len(new) > len(old) and new.startswith(old):
                        fetched.replace(local)
                        recovered[job.slot] = recovered.get(job.slot, 0) + new[len(old):].count(b"\n")
                    else:
                        fetched.unlink()
        finally:
            transport.close()

    with ThreadPoolExecutor(max_workers=max(1, min(64, len(plan.hosts)))) as pool:
        list(pool.map(per_host, plan.hosts))
    return recovered
