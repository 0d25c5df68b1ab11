"""What the controller does on a host, whatever the command: the argv and the params of a job (where
files live there: planning/layout.py), uploading what the host lacks, and stopping what runs there. Used
by sweeps (execute) and by `hosts --check` alike; the transport underneath is the only thing that talks
to the host.

Remote paths may start with `~/`; in argv they are made relative to the login directory, where an SSH
exec (and the local transport) starts, so no shell ever expands `~`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Optional

from worker.contract import protocol
from worker.contract.schema import WorkerParams

from ..atomicfile import write_atomic
from ..config.inventory import Host
from ..launchers import job_name, launcher_for
from ..planning.layout import RemoteLayout, RenderedScript, layout_for  # noqa: F401 (re-exported)
from ..planning.plan import Job, Plan
from ..runs.formats import MANIFEST_VERSION, params_for_worker
from ..transport import CLEANUP_LIMIT_S, CommandResult, Transport, bounded, login_relative  # noqa: F401 (re-exported)

STOP_GRACE_S = 3.0


# -- the commands ------------------------------------------------------------------------------------
def job_argv(job: Job, script: RenderedScript, attempt: int) -> list[str]:
    """The command a job runs on its host, as an argv list, as its launcher starts it (orchestrator/
    launchers: the command itself, or under a scheduler); its params arrive on stdin."""
    layout = script.layout
    command = [
        job.host.python,
        login_relative(script.remote),
        "supervise",
        "--pidfile",
        login_relative(layout.pidfile(job.slot, attempt)),
        "--params",
        login_relative(layout.params(job.slot, attempt)),
        "--params-stdin",
        "--results",
        login_relative(layout.results(job.slot, attempt)),
    ]
    return launcher_for(job.host).argv(command, job_name(layout.run_id, job.slot, attempt))


def check_argv(host: Host, script: RenderedScript, pidfile: str) -> list[str]:
    """The readiness probe of `hosts --check`: facts and readiness as one JSON line on stdout; its
    process group goes into `pidfile`, so a Ctrl-C can stop it as it stops a job."""
    return [host.python, login_relative(script.remote), "check", "--pidfile", login_relative(pidfile)]


def job_params(plan: Plan, job: Job, cases=None) -> WorkerParams:
    return WorkerParams(
        run_id=plan.run_id,
        host=job.host.name,
        gpu=job.gpu,
        cases=list(job.cases if cases is None else cases),
        max_restarts=plan.worker.max_restarts,
        device=plan.worker.device,
        lock_timeout_s=plan.worker.lock_timeout_s,
        calibration=plan.worker.calibration,
        case_timeout_s=plan.worker.case_timeout_s,
        build_timeout_s=plan.worker.build_timeout_s,
        lock_clocks=job.host.clocks == "lock",
    )


def write_params(path: Path, params: WorkerParams, worker_format: int = MANIFEST_VERSION) -> bytes:
    """Write params JSON in the form the run's worker reads (a rerun of an older run uses its own older
    worker: formats.params_for_worker), compact, for these bytes travel on the command's stdin.
    Returns the bytes."""
    obj = params_for_worker(params.model_dump(mode="json"), worker_format)
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    write_atomic(path, data)
    return data


# -- upload only what is missing ----------------------------------------------------------------------
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


def lacks_files(result: Optional[CommandResult], hello_seen: bool) -> bool:
    """Did the command fail only because the host lacks the script or its worker version?"""
    return (
        result is not None
        and not result.timed_out
        and protocol.classify_exit(result.exit_code, hello_seen) == protocol.LAUNCH_NEEDS_SYNC
    )


def run_first(
    launch: Callable[[], Optional[CommandResult]], lacks: Callable[[CommandResult], bool], sync: Callable[[], None]
) -> Optional[CommandResult]:
    """Run optimistically; only when the host says it lacks the script or the worker (`lacks`, usually
    lacks_files), upload them (`sync`) and run once more. The steady state is one exec, no SFTP."""
    result = launch()
    if result is not None and lacks(result):
        sync()
        result = launch()
    return result


# -- stopping ----------------------------------------------------------------------------------------
def stop_job(transport: Transport, host: Host, layout: RemoteLayout, slot: str, attempt: int) -> bool:
    """Stop a job wherever its launcher started it (its process group, or a scheduler's job). Returns
    whether something was found."""
    return launcher_for(host).stop(
        transport, job_name(layout.run_id, slot, attempt), lambda: stop_remote(transport, layout.pidfile(slot, attempt))
    )


def stop_remote(transport: Transport, pidfile: str) -> bool:
    """TERM, then KILL, the process group recorded in `pidfile`. Returns whether a group was found."""
    text = bounded(lambda: transport.read_text(pidfile), CLEANUP_LIMIT_S)
    if not text or not text.strip().isdigit():
        return False
    group = f"-{int(text.strip())}"
    quiet = lambda stream, line: None  # noqa: E731
    for signal_name in ("TERM", "KILL"):
        kill = ["kill", f"-{signal_name}", "--", group]
        bounded(lambda argv=kill: transport.run(argv, env={}, timeout=10, on_line=quiet), CLEANUP_LIMIT_S)
        alive = bounded(
            lambda: transport.run(["kill", "-0", "--", group], env={}, timeout=10, on_line=quiet), CLEANUP_LIMIT_S
        )
        if not isinstance(alive, CommandResult) or alive.exit_code != 0:
            return True
        time.sleep(STOP_GRACE_S)
    return True
