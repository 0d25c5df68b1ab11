"""The supervisor: runs the case loop in a child process, survives its death, and stops a case that hangs.

A segfault, CUDA fatal error or OOM kill takes the child down in the middle of one case. The supervisor
reads which case was in flight, records it as crashed, and starts a fresh child for the cases without
a record, at most `max_restarts` times. A round that runs past its own limit (`case_timeout_s`; time
while a compiler runs under the child, a first JIT build, counts against `build_timeout_s` instead) is
stopped with the child and every process under it, recorded as hung, and a fresh child goes on with
the next case: one hung kernel costs its case, not the host's sweep.

The supervisor is the only writer of the protocol channel (worker/contract/protocol.py) and of results.jsonl:
the child gets a pipe of its own, whose whole lines are forwarded, and a record the child sends is
written only when it is one of the cases the supervisor gave that child. Code under test lives apart:
the built-in backends run in one child, kernels from the user's own files in another (after it), so a
user kernel can neither patch what a built-in calls nor write a built-in's record on its pipe (a record
of its own case it could forge: the controller judges those again, worker/contract/physics.py), nor open
the supervisor's descriptors through /proc (out_of_reach; root still can; what code under test can
still reach: docs/SWEEPS.md). The supervisor beats
while it lives, so the controller's stall limit is about the host, and the case limit here about the
kernel. It is what the rendered script calls.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..contract.protocol import EXIT_CANNOT_START, EXIT_GPU_BUSY, EXIT_INCOMPLETE


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

    from ..contract.protocol import emit_progress

    # From the rendered script's first line when it ran us (imports included), else from here.
    started = float(os.environ.get("FLEETBENCH_SCRIPT_STARTED") or time.time())
    out_of_reach()
    try:
        return _supervise_locked(params_path, results_path)
    finally:
        emit_progress(event="exit", elapsed_s=round(time.time() - started, 4))


PR_SET_DUMPABLE = 4  # linux/prctl.h


def out_of_reach() -> bool:
    """Make this process (the protocol channel's only writer) non-dumpable, so that the processes it
    starts, code under test among them, cannot open its file descriptors through /proc/<pid>/fd nor
    trace it, unless they run with CAP_SYS_PTRACE (root). A child is dumpable again after its exec, so
    only this process is concerned; it no longer leaves a core dump. False where it cannot be done
    (not Linux, no libc): nothing else depends on it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _settings(params_path: Path) -> dict:
    """The few fields the supervisor needs (its lock, clocks and case limits), read without the schema:
    this process stays stdlib-only (the child validates the whole file; the controller always writes
    every field)."""
    import json

    raw = json.loads(params_path.read_text(encoding="utf-8"))
    return {
        "run_id": str(raw["run_id"]),
        "host": str(raw["host"]),
        "device": raw.get("device", "auto"),
        "lock_timeout_s": float(raw.get("lock_timeout_s", 0.0)),
        "cases": len(raw["cases"]),
        "lock_clocks": bool(raw.get("lock_clocks", False)),
        "limits": (float(raw.get("case_timeout_s", 300.0)), float(raw.get("build_timeout_s", 1800.0))),
    }


def _supervise_locked(params_path: Path, results_path: Path) -> int:
    import contextlib

    from ..contract.protocol import emit_progress, heartbeat
    from ..host.gpulock import CPU, GpuLockTimeout, gpu_lock

    settings = _settings(params_path)
    # None: find this process's GPU (a host without one locks its CPU); a CPU sweep locks the CPU.
    ids = [CPU] if settings["device"] == "cpu" else None
    held = contextlib.ExitStack()
    try:
        # The supervisor beats only while it waits for the GPU: once a child runs, the child beats (one
        # writer on stdout at a time).
        with heartbeat(state="lock-wait"):
            locked_id = held.enter_context(
                gpu_lock(
                    settings["run_id"],
                    settings["host"],
                    settings["lock_timeout_s"],
                    ids=ids,
                    on_wait=lambda holder: emit_progress(event="lock-wait", holder=holder.get("run_id", "?")),
                )
            )
    except GpuLockTimeout as exc:
        print(f"fleetbench: {exc}", file=sys.stderr, flush=True)
        return EXIT_GPU_BUSY
    with held:
        from ..host.clocks import CLOCK_ENV, locked_clocks

        def say(line: str) -> None:
            print(f"fleetbench: {line}", file=sys.stderr, flush=True)

        with locked_clocks(locked_id, settings["lock_clocks"], say, settings["run_id"]) as mhz:
            if mhz is not None:  # the facts the child records say so
                os.environ[CLOCK_ENV] = str(mhz)
            return _supervise_cases(params_path, results_path, settings["cases"], settings["limits"])


# Processes that mean the case is compiling (a JIT build), not hung: their time counts against the build limit.
COMPILERS = frozenset(
    {
        "ninja",
        "make",
        "cmake",
        "nvcc",
        "cicc",
        "ptxas",
        "nvlink",
        "fatbinary",
        "cudafe++",
        "cc",
        "c++",
        "gcc",
        "g++",
        "cc1",
        "cc1plus",
        "as",
        "ld",
        "collect2",
        "clang",
        "clang++",
    }
)
# How often the supervisor looks at the case in flight (a scan of /proc for compilers): seldom enough to
# cost the host nothing it measures; a child's exit is seen at once whatever this is.
POLL_S = 1.0


def in_flight(inflight: Path) -> tuple[str, str]:
    """(case id or "", what it is doing), as the case loop last said (runner.mark_inflight)."""
    try:
        case_id, _, what = inflight.read_text(encoding="utf-8").partition("\n")
    except OSError:
        return "", "starting (imports, GPU start-up, calibration)"
    return case_id.strip(), what.strip() or "running"


class _Watch:
    """How long the step in flight (a case's round, or the child's start-up before any case) has run,
    build time apart: the inflight file names the step, and its change starts a new count."""

    def __init__(self, inflight: Path):
        self.inflight = inflight
        self.key: object = None
        self.running_s = 0.0
        self.building_s = 0.0
        self.announced = False

    def tick(self, dt: float, building: bool) -> None:
        try:
            stat = self.inflight.stat()
            key = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = None
        if key != self.key:
            self.key, self.running_s, self.building_s, self.announced = key, 0.0, 0.0, False
        if building:
            self.building_s += dt
        else:
            self.running_s += dt


def _process_tree() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    tree, found, stack = _process_tree(), [], [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _compiling(pids: list[int]) -> bool:
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                if f.read().strip() in COMPILERS:
                    return True
        except OSError:
            continue
    return False


def _kill_tree(child: subprocess.Popen) -> None:
    """SIGKILL the child and every process under it (they share the launcher's process group, which
    the controller stops as a whole; here only this child's part goes)."""
    for pid in [*descendants(child.pid), child.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    child.wait()


def _wait(child: subprocess.Popen, watch: _Watch, case_timeout_s: float, build_timeout_s: float):
    """The child's exit status, or (None, why) after stopping a step past its limit."""
    from ..contract.protocol import emit_progress

    while True:
        try:
            return child.wait(timeout=POLL_S), ""
        except subprocess.TimeoutExpired:
            pass
        building = _compiling(descendants(child.pid))
        watch.tick(POLL_S, building)
        if building and not watch.announced:
            watch.announced = True
            emit_progress(event="building", case_id=in_flight(watch.inflight)[0])
        if watch.building_s > build_timeout_s:
            why = f"still compiling after its {build_timeout_s:g} s build limit"
        elif watch.running_s > case_timeout_s:
            why = f"no result within its {case_timeout_s:g} s limit"
        else:
            continue
        _kill_tree(child)
        return None, why


def _keep_finished_rounds(results_path: Path, kept) -> None:
    """After the crashed (or hung) record of a case that had finished rounds, its rounds so far again, as
    its last line: within an attempt a case's last line says where it stands, so the case reads
    `incomplete` with those rounds and `rerun --failed` times only the rounds it lacks (the crash stays
    in the file, the log and the console). The fresh child leaves it alone: the crashed line counts it done."""
    if kept is not None:
        from .runner import append_record

        append_record(results_path, kept)
        print(
            f"fleetbench: case {kept.case_id} keeps its {_rounds(kept)} finished round(s); "
            "`rerun --failed` times the rest",
            file=sys.stderr,
            flush=True,
        )


def _rounds(record) -> int:
    from ..contract.rounds import rounds_in

    return rounds_in(record)


def _supervise_cases(params_path: Path, results_path: Path, n_cases: int, limits: tuple[float, float]) -> int:
    """Each part of the cases (partitions: the built-ins, then the user's own kernels) in children of its
    own; the worst of their exit statuses."""
    parts = partitions(params_path)
    worst = 0
    for who, path, ids in parts:
        if len(parts) > 1:  # the log says when each process starts: its start-up is the split's cost
            print(f"fleetbench: the {who} process starts ({len(ids)} cases)", file=sys.stderr, flush=True)
        code = _supervise_part(path, results_path, ids, limits, who)
        if code == EXIT_CANNOT_START:
            return code
        worst = max(worst, code)
    return worst


def partitions(params_path: Path) -> list[tuple[str, Path, set[str]]]:
    """(who, params file, case ids): the built-in backends' cases, then the cases of kernels from the user's
    files, each with a params file of its own beside `params_path` when the run has both (plain JSON: the
    supervisor imports no pydantic just to split a list)."""
    import json

    from ..contract.protocol import case_id_of_raw

    raw = json.loads(params_path.read_text(encoding="utf-8"))
    cases = raw.get("cases") or []
    builtin = [c for c in cases if not c.get("kernel_sha256")]
    user = [c for c in cases if c.get("kernel_sha256")]
    if not builtin or not user:
        who = "user-kernel" if user else "built-in"
        return [(who, params_path, {case_id_of_raw(c) for c in cases})]
    out = []
    for who, part in (("built-in", builtin), ("user-kernel", user)):
        path = params_path.with_name(f"{params_path.stem}.{who}.json")
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(dict(raw, cases=part, cases_in_run=len(cases))), encoding="utf-8")
        os.replace(tmp, path)
        out.append((who, path, {case_id_of_raw(c) for c in part}))
    return out


def accepting(results_path: Path, allowed: set[str], who: str):
    """The supervisor's handling of a child's protocol line: a record of one of the child's own cases (or
    the host's facts, once) is appended to results.jsonl and sent on; any other record is refused, with a
    line on stderr; progress is sent on."""
    import json

    from ..contract.protocol import RECORD_PREFIX, has_facts, write_line, write_record

    def on_line(line: str) -> None:
        if not line.startswith(RECORD_PREFIX):
            write_line(line)
            return
        body = line[len(RECORD_PREFIX) :].strip()
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        case_id = obj.get("case_id") if kind == "case" else None
        if (kind == "case" and case_id in allowed) or (kind == "facts" and not has_facts(results_path)):
            write_record(results_path, body)
            return
        what = f"case {case_id}" if case_id else (kind or "an unreadable line")
        print(
            f"fleetbench: refused a record the {who} process sent for {what}: not one of the cases it was given",
            file=sys.stderr,
            flush=True,
        )

    return on_line


def _supervise_part(
    params_path: Path, results_path: Path, allowed: set[str], limits: tuple[float, float], who: str
) -> int:
    import threading

    from ..contract.protocol import PROTOCOL_FD_ENV, SUPERVISED_ENV, done_case_ids, forward_lines, heartbeat

    inflight = results_path.with_name(results_path.name + ".inflight")
    worker_root = str(Path(__file__).resolve().parents[2])  # the folder holding worker/ (worker/<room>/<module>.py)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [worker_root, os.environ.get("PYTHONPATH")])))
    # An SSH session's PATH is minimal; tools that live in the venv (ninja, for FlashInfer's JIT) must
    # be found as if the venv were activated.
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(filter(None, [venv_bin, os.environ.get("PATH")]))
    from ..host.buildenv import ADDED_VAR, encode_added, stable_build_env

    added = stable_build_env(env)
    env.update(added, **{ADDED_VAR: encode_added(added, os.environ)})  # the facts' notes say what was added
    cmd = [sys.executable, "-m", "worker", "run", "--params", str(params_path), "--results", str(results_path)]
    restarts = 0
    params = None  # the validated params: loaded only after a child failed (importing pydantic is costly)
    with heartbeat():
        while True:
            inflight.unlink(missing_ok=True)
            read_fd, write_fd = os.pipe()
            child = subprocess.Popen(
                cmd, env=dict(env, **{PROTOCOL_FD_ENV: str(write_fd), SUPERVISED_ENV: "1"}), pass_fds=(write_fd,)
            )
            os.close(write_fd)
            forwarder = threading.Thread(
                target=forward_lines, daemon=True, args=(read_fd, accepting(results_path, allowed, who))
            )
            forwarder.start()
            try:
                code, hung = _wait(child, _Watch(inflight), *limits)
            except KeyboardInterrupt:
                _kill_tree(child)
                raise
            forwarder.join(timeout=5.0)  # the pipe closes with the child: what it sent is forwarded first
            done = done_case_ids(results_path)  # read once per child: the file can be large after long runs
            if code == 0 and allowed <= done:
                return 0
            if code == EXIT_CANNOT_START:  # it said why on stderr; a fresh child would fail the same way
                return EXIT_CANNOT_START
            from .runner import append_record, crashed_record, find_case, load_params, partial_records

            params = params or load_params(params_path)
            if code == 0 and all(c.case_id in done for c in params.cases):
                return 0
            case_id, what = in_flight(inflight)
            case = find_case(params, case_id) if case_id else None
            if hung:
                if case is None:  # the start-up itself hangs: every case would wait on it
                    print(f"fleetbench: the worker hung while {what}: {hung}; stopped", file=sys.stderr, flush=True)
                    return EXIT_INCOMPLETE
                if case.case_id not in done:
                    kept = partial_records(results_path).get(case.case_id)
                    append_record(
                        results_path,
                        crashed_record(
                            case,
                            f"hung: {hung} ({what}); stopped, and the host went on with its next case",
                            status="hung",
                        ),
                    )
                    _keep_finished_rounds(results_path, kept)
                print(
                    f"fleetbench: case {case.case_id} ({case.backend} {case.m}x{case.n}x{case.k}) hung: {hung} "
                    f"({what}); stopped",
                    file=sys.stderr,
                    flush=True,
                )
                continue  # a hang is the case's, not the worker's: no restart is counted
            how = _describe_exit(code)
            if case is not None and case.case_id not in done:
                kept = partial_records(results_path).get(case.case_id)
                append_record(results_path, crashed_record(case, f"worker process {how} during this case ({what})"))
                _keep_finished_rounds(results_path, kept)
                done.add(case.case_id)
                print(
                    f"fleetbench: worker {how} in case {case.case_id} ({case.backend} "
                    f"{case.m}x{case.n}x{case.k}); recorded as crashed",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                print(f"fleetbench: worker {how} outside any case", file=sys.stderr, flush=True)
            if restarts >= params.max_restarts:
                left = sum(c.case_id not in done for c in params.cases)
                if left:
                    print(
                        f"fleetbench: giving up after {restarts} restarts; {left} cases have no result",
                        file=sys.stderr,
                        flush=True,
                    )
                    return EXIT_INCOMPLETE
                return 0
            restarts += 1
