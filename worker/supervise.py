"""The supervisor: runs the case loop in a child process and survives its death.

A segfault, CUDA fatal error or OOM kill takes the child down in the middle of one case. The supervisor
reads which case was in flight, records it as crashed, and starts a fresh child for the cases without
a record, at most `max_restarts` times. It is what the rendered script calls.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .protocol import EXIT_CANNOT_START, EXIT_GPU_BUSY, EXIT_INCOMPLETE


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def supervise(params_path: Path, results_path: Path) -> int:
    """Run the cases of params_path while holding this GPU's lock; the last progress line says how long
    the host-side work took (benchmarks subtract it from wall time to get the controller's overhead)."""
    import time

    from .protocol import emit_progress

    # From the rendered script's first line when it ran us (imports included), else from here.
    started = float(os.environ.get("FLEETBENCH_SCRIPT_STARTED") or time.time())
    try:
        return _supervise_locked(params_path, results_path)
    finally:
        emit_progress(event="exit", elapsed_s=round(time.time() - started, 4))


def _lock_settings(params_path: Path) -> dict:
    """The few fields the lock needs, read without the schema: this process stays stdlib-only (the
    child validates the whole file; the controller always writes every field)."""
    import json

    raw = json.loads(params_path.read_text(encoding="utf-8"))
    return {"run_id": str(raw["run_id"]), "host": str(raw["host"]), "device": raw.get("device", "auto"),
            "lock_timeout_s": float(raw.get("lock_timeout_s", 0.0)), "cases": len(raw["cases"])}


def _supervise_locked(params_path: Path, results_path: Path) -> int:
    import contextlib

    from .gpulock import GpuLockTimeout, gpu_lock
    from .protocol import emit_progress, heartbeat

    settings = _lock_settings(params_path)
    ids = [] if settings["device"] == "cpu" else None  # None: find this process's GPU (none on a CPU host)
    held = contextlib.ExitStack()
    try:
        # The supervisor beats only while it waits for the GPU: once a child runs, the child beats (one
        # writer on stdout at a time).
        with heartbeat(state="lock-wait"):
            held.enter_context(gpu_lock(
                settings["run_id"], settings["host"], settings["lock_timeout_s"], ids=ids,
                on_wait=lambda holder: emit_progress(event="lock-wait", holder=holder.get("run_id", "?"))))
    except GpuLockTimeout as exc:
        print(f"fleetbench: {exc}", file=sys.stderr, flush=True)
        return EXIT_GPU_BUSY
    with held:
        return _supervise_cases(params_path, results_path, settings["cases"])


def _supervise_cases(params_path: Path, results_path: Path, n_cases: int) -> int:
    from .protocol import done_case_ids

    inflight = results_path.with_name(results_path.name + ".inflight")
    worker_root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [worker_root, os.environ.get("PYTHONPATH")])))
    # An SSH session's PATH is minimal; tools that live in the venv (ninja, for FlashInfer's JIT) must
    # be found as if the venv were activated.
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(filter(None, [venv_bin, os.environ.get("PATH")]))
    from .buildenv import ADDED_VAR, encode_added, stable_build_env

    added = stable_build_env(env)
    env.update(added, **{ADDED_VAR: encode_added(added, os.environ)})  # the facts' notes say what was added
    cmd = [sys.executable, "-m", "worker", "run", "--params", str(params_path), "--results", str(results_path)]
    restarts = 0
    params = None  # the validated params: loaded only after a child failed (importing pydantic is costly)
    while True:
        inflight.unlink(missing_ok=True)
        child = subprocess.Popen(cmd, env=env)
        try:
            code = child.wait()
        except KeyboardInterrupt:
            child.terminate()
            child.wait()
            raise
        done = done_case_ids(results_path)  # read once per child: the file can be large after long runs
        if code == 0 and len(done) >= n_cases:
            return 0
        if code == EXIT_CANNOT_START:  # it said why on stderr; a fresh child would fail the same way
            return EXIT_CANNOT_START
        from .runner import append_record, crashed_record, find_case, load_params

        params = params or load_params(params_path)
        if code == 0 and all(c.case_id in done for c in params.cases):
            return 0
        how = _describe_exit(code)
        case = find_case(params, inflight.read_text().strip()) if inflight.exists() else None
        if case is not None and case.case_id not in done:
            append_record(results_path, crashed_record(case, f"worker process {how} during this case"))
            done.add(case.case_id)
            print(f"fleetbench: worker {how} in case {case.case_id} ({case.backend} "
                  f"{case.m}x{case.n}x{case.k}); recorded as crashed", file=sys.stderr, flush=True)
        else:
            print(f"fleetbench: worker {how} outside any case", file=sys.stderr, flush=True)
        if restarts >= params.max_restarts:
            left = sum(c.case_id not in done for c in params.cases)
            if left:
                print(f"fleetbench: giving up after {restarts} restarts; {left} cases have no result",
                      file=sys.stderr, flush=True)
                return EXIT_INCOMPLETE
            return 0
        restarts += 1
