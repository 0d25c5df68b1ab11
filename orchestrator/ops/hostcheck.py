"""`fleetbench hosts --check`: contact every host in parallel and say whether it can run a sweep.

Each host runs `check` through a rendered launcher (uploaded, with the current worker, only when the
host lacks them), which prints its facts and readiness as JSON. Differences in library versions,
driver or GPU between ready hosts are version skew: a host-vs-host diff is meaningless across them.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from worker.contract import protocol
from worker.contract.catalog import unknown_flashinfer_backends

from ..config.inventory import Host
from ..execution.fanout import Running, fan_out
from ..execution.remote import check_argv, lacks_files, run_first, stop_remote, sync_script
from ..launchers import job_name, launcher_for
from ..planning.bundle import build_worker_bundle
from ..planning.layout import layout_for
from ..planning.render import render_script, template_environment, write_script
from ..transport import TransportError, login_relative, make_transport

CHECK_RUN_ID = "hostcheck"
SKEW_FIELDS = ("gpu_name", "compute_capability", "driver", "cuda", "torch", "flashinfer", "sgl_kernel", "python")
CHECK_TIMEOUT_S = 120.0


@dataclass
class HostStatus:
    name: str
    ready: bool
    state: str  # ok | unreachable | auth-failed | timeout | failed
    problem: str = ""
    facts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # worth knowing, not a reason to call the host unready


def check_host(
    host: Host,
    bundle_path: Path,
    bundle_sha: str,
    script_dir: Path,
    accept_new: bool,
    running: Optional[Running] = None,
) -> HostStatus:
    running = running or Running()
    layout = layout_for(host, CHECK_RUN_ID, bundle_sha)
    script = write_script(
        script_dir / f"{host.name}.py", render_script(template_environment(), layout, bundle_sha), host.name, layout
    )
    transport = make_transport(host, accept_new=accept_new)
    lines: list[tuple[str, str]] = []
    launcher = launcher_for(host)
    name = job_name(CHECK_RUN_ID, host.name, 1)
    # The check runs where a job would (on a node a scheduler allocates, after it says it can).
    slot = f"check-{os.getpid()}"  # two checks at once (two controllers) keep apart
    argv = launcher.argv(check_argv(host, script, layout.pidfile(slot, 1)), name)
    note = ""

    def hello_seen() -> bool:
        return any(s == "stdout" and protocol.decode_stdout(l)[0] == protocol.LINE_HELLO for s, l in lines)

    def sync() -> None:
        lines.clear()
        sync_script(transport, bundle_path, script)

    result = None
    connected = False
    clocks: Optional[tuple[bool, str]] = None  # clocks: lock: (can lock, why), asked where a job would run
    try:
        transport.connect()
        connected = True
        usable, note = launcher.before_check(transport)
        if not usable:
            return HostStatus(host.name, False, "failed", note)
        running.add(
            host.name, lambda: launcher.stop(transport, name, lambda: stop_remote(transport, layout.pidfile(slot, 1)))
        )
        # As a sweep does: run first, upload only what the launcher says is missing, then run again.
        result = run_first(
            lambda: transport.run(
                argv,
                env=host.env,
                timeout=min(host.timeout or CHECK_TIMEOUT_S, CHECK_TIMEOUT_S),
                on_line=lambda s, l: lines.append((s, l)),
            ),
            lambda r: lacks_files(r, hello_seen()),
            sync,
        )
        if host.clocks == "lock" and result.exit_code == 0 and not result.timed_out:
            clocks = _lock_readiness(
                transport, host, launcher.argv(clocks_argv(host), name), login_relative(layout.worker_dir)
            )
    except TransportError as exc:
        return HostStatus(host.name, False, exc.outcome, str(exc))
    except Exception as exc:
        return HostStatus(host.name, False, "failed", f"{type(exc).__name__}: {exc}")
    finally:
        running.remove(host.name)
        if connected:
            launcher.after_check(transport, name, result is not None and result.exit_code == 0)
        transport.close()
    stdout = [l for s, l in lines if s == "stdout" and l.startswith("{")]
    stderr = [l for s, l in lines if s == "stderr" and l.strip()]
    if result.timed_out:
        return HostStatus(host.name, False, "timeout", f"no answer from the check within {CHECK_TIMEOUT_S:g} s")
    launch = protocol.classify_exit(result.exit_code, hello_seen())
    if launch == protocol.LAUNCH_NO_INTERPRETER:
        return HostStatus(host.name, False, "failed", f"remote interpreter not found: {host.python}")
    if launch == protocol.LAUNCH_NOT_EXECUTABLE:
        return HostStatus(host.name, False, "failed", f"remote interpreter not executable: {host.python}")
    if result.exit_code != 0 or not stdout:
        return HostStatus(
            host.name, False, "failed", (stderr[-1] if stderr else f"exit status {result.exit_code}")[:300]
        )
    facts = json.loads(stdout[-1])
    facts["worker_sha256"] = bundle_sha  # the host now holds exactly this worker (content-addressed)
    problems = list(facts.get("problems", []))
    if facts.get("gpu_processes"):
        problems.append(f"{facts['gpu_processes']} other processes on the GPU")
    notes = readiness_notes(facts) + ([note] if note else [])
    if clocks is not None:
        can, why = clocks
        facts["clocks_lock"] = why if can else f"cannot: {why}"
        if can:
            notes.append(f"clocks: lock: {why}")
        else:
            problems.append(
                f"clocks: lock cannot apply here: {why} (sweeps run with the clock unlocked; "
                "set clocks: leave, or run the worker as root)"
            )
    return HostStatus(host.name, not problems, "ok", "; ".join(problems), facts, notes)


def clocks_argv(host: Host) -> list[str]:
    """The probe of `clocks: lock` (worker/host/clocks.py lock_readiness): it changes no clock."""
    return [host.python, "-m", "worker.host.clocks"]


def _lock_readiness(transport, host: Host, argv: list[str], worker_dir: str) -> tuple[bool, str]:
    """(can lock, why) from the worker the check just left on the host (its folder on PYTHONPATH)."""
    lines: list[str] = []
    result = transport.run(
        argv, env={**host.env, "PYTHONPATH": worker_dir}, timeout=CHECK_TIMEOUT_S, on_line=lambda s, l: lines.append(l)
    )
    answer = next((l for l in reversed(lines) if l.startswith("{")), "")
    try:
        said = json.loads(answer)
        return bool(said["can_lock"]), str(said["why"])
    except (ValueError, KeyError, TypeError):
        return False, f"the clock probe gave no answer (exit status {result.exit_code}: {(lines or [''])[-1][:200]})"


def readiness_notes(facts: dict) -> list[str]:
    """What a host's check reports that does not make it unready."""
    unknown = unknown_flashinfer_backends(facts.get("flashinfer_mm_fp4_backends"))
    if not unknown:
        return []
    return [
        f"FlashInfer {facts.get('flashinfer')} offers mm_fp4 backends fleetbench does not know: "
        f"{', '.join(unknown)} (available but unknown: no sweep can name them yet)"
    ]


def check_hosts(hosts: list[Host], *, accept_new: bool = False, parallel: int = 64) -> list[HostStatus]:
    """One status per host, in order; Ctrl-C stops every probe still running, then raises."""
    bundle = build_worker_bundle()
    running = Running()
    with tempfile.TemporaryDirectory(prefix="fleetbench-check-") as tmp:
        bundle_path = bundle.write(Path(tmp) / "worker.tar.gz")
        results = fan_out(
            hosts,
            lambda h: check_host(h, bundle_path, bundle.sha256, Path(tmp), accept_new, running),
            parallel=parallel,
            on_interrupt=running.stop_all,
        )
    return [r.value if r.ok else HostStatus(r.name, False, "failed", r.describe_error()) for r in results]


def version_skew(statuses: list[HostStatus]) -> list[str]:
    """One sentence per fact on which reachable hosts disagree, naming who has what."""
    lines = []
    reporting = [s for s in statuses if s.facts]
    for f in SKEW_FIELDS:
        groups: dict[Optional[str], list[str]] = collections.defaultdict(list)
        for s in reporting:
            groups[s.facts.get(f)].append(s.name)
        if len(groups) > 1:
            parts = [f"{v} on {', '.join(names)}" for v, names in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
            lines.append(f"version skew in {f}: " + "; ".join(parts))
    return lines
