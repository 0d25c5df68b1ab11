"""A case of a stored run, profiled under Nsight Compute (`ncu`) on its own host: `fleetbench profile`.

Two processes, both started through the run's own rendered script and worker:
  profile       (this host's side of the command) holds the GPU's lock, as a sweep does, and for each case
                runs `ncu ... python -m worker profile-case ...`, classifies what ncu said, reads the
                report back as CSV (`ncu --import`) and sends one ProfileRecord per case on the protocol
                channel. The report file stays in the output folder for the controller to fetch.
  profile-case  (the profiled process, under ncu) prepares the case as the sweep did (worker/sweep/runner.py),
                warms it up and settles it with the sweep's own timing code and settings (worker/measure/timing.py),
                and only then opens the profiler's range (cudaProfilerStart; ncu runs with
                --profile-from-start off) for `calls` calls of the case: warm-up, settling and the
                correctness check are never profiled, and every kernel in the range is the case's own.
ncu runs with --clock-control none, so the kernels run in the clock state the sweep measured them in,
and with --cache-control all for a cold-L2 case (none for a hot one), as the sweep timed it.

Failures are records: a host without ncu, one where counters may not be read (ERR_NVGPUCTRPERM), a case
that does not run, each ends in one record with a status and a reason that says what to change.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ..contract.profile import ProfiledRun, ProfileOptions, ProfileParams, ProfileRecord, ProfileStatus
from ..contract.schema import CaseSpec
from .caseloop import CaseWork, run_each_case

NCU_ENV = "FLEETBENCH_NCU"  # a host's env may name its ncu (an SSH session's PATH seldom has it)
# Where Nsight Compute installs itself, after PATH; newest version first within each pattern.
NCU_PLACES = (
    "/usr/local/cuda/bin/ncu",
    "/usr/local/cuda-*/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/NVIDIA-Nsight-Compute*/ncu",
)
# Beyond `--set basic` (launch statistics, occupancy, speed of light): the SM and DRAM clocks under their
# raw names, and the DRAM bytes moved (a kernel that moves more bytes at the same bandwidth is slower).
EXTRA_METRICS = (
    "sm__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
)
PERMISSION_FIX = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): profile as root, or "
    "let every user profile: `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file of "
    "/etc/modprobe.d/, then reload the nvidia module (or reboot)"
)
LOG_TAIL_LINES = 40
IMPORT_TIMEOUT_S = 300.0


# -- finding and asking ncu ---------------------------------------------------------------------------
def find_ncu(given: str = "") -> tuple[Optional[str], list[str]]:
    """(the ncu to use or None, where it looked)."""
    if given:
        return (given if os.access(given, os.X_OK) else None), [given]
    looked = []
    for candidate in (os.environ.get(NCU_ENV, ""), "PATH"):
        if candidate == "PATH":
            looked.append("PATH")
            found = shutil.which("ncu")
            if found:
                return found, looked
        elif candidate:
            looked.append(candidate)
            if os.access(candidate, os.X_OK):
                return candidate, looked
    for pattern in NCU_PLACES:
        looked.append(pattern)
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path, looked
    return None, looked


def ncu_version(ncu: str) -> str:
    try:
        done = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    match = re.search(r"Version\s+(\S+)", done.stdout + done.stderr)
    return match.group(1) if match else ""


def ncu_argv(
    ncu: str,
    report_base: str,
    case: CaseSpec,
    options: ProfileOptions,
    target: list[str],
    extra_metrics: tuple[str, ...] = EXTRA_METRICS,
) -> list[str]:
    """The one ncu command line: the range the profiled process opens, the sweep's clock state, the
    case's L2 state, and the report written to `report_base`.ncu-rep."""
    argv = [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--cache-control",
        "all" if case.timing.l2 == "cold" else "none",
        "--set",
        "basic",
    ]
    if extra_metrics:
        argv += ["--metrics", ",".join(extra_metrics)]
    argv += [
        "--launch-count",
        str(options.max_kernels),
        "--target-processes",
        "all",
        "--export",
        report_base,
        "--force-overwrite",
    ]
    if options.kernel_regex:
        argv += ["--kernel-name", f"regex:{options.kernel_regex}"]
    return argv + target


# The report as CSV: one row per profiled kernel, a column per metric, values in base units (without that
# option where an ncu does not know it: the reader converts whatever units ncu prints).
IMPORT_UNITS = (["--print-units", "base"], [])


def import_argv(ncu: str, report: str, units: list[str]) -> list[str]:
    return [ncu, "--import", report, "--csv", "--page", "raw", *units]


def classify_ncu_output(text: str) -> tuple[ProfileStatus, str]:
    """(status, reason) from what ncu printed; ("ok", "") when it names no problem."""
    if "ERR_NVGPUCTRPERM" in text:
        return "no-permission", PERMISSION_FIX
    errors = [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]
    if any("Failed to initialize the profiler" in e or "LibraryNotLoaded" in e for e in errors):
        first = next(e for e in errors if "Failed to initialize" in e or "LibraryNotLoaded" in e)
        return "failed", (
            f"ncu cannot start its profiler on this machine ({first[len('==ERROR==') :].strip()}): "
            "its hardware counters cannot be read here (a sandboxed container or VM?)"
        )
    real = [e for e in errors if "The application returned an error code" not in e]
    if real:
        return "failed", f"ncu: {real[0][len('==ERROR==') :].strip()}"[:400]
    if "No kernels were profiled" in text:
        return "failed", "ncu profiled no kernel of the case"
    return "ok", ""


# -- the host's side of `fleetbench profile` -----------------------------------------------------------
def profile(params_path: Path, out_dir: Path) -> int:
    """Profile every case of `params_path` under ncu, one record each on the protocol channel, holding
    this GPU's lock (and its clocks, where the host locks them) as a sweep does. Returns 0, or
    EXIT_GPU_BUSY when another sweep held the GPU past the lock timeout."""
    params = ProfileParams.model_validate_json(Path(params_path).read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)

    def start(locked_mhz: Optional[int]) -> CaseWork:
        ncu, looked = find_ncu(params.options.ncu)
        version = ncu_version(ncu) if ncu else ""

        def profile_case(case: CaseSpec) -> ProfileRecord:
            if ncu is None:
                return _record(
                    case,
                    params.options,
                    "no-ncu",
                    "ncu (Nsight Compute) is not on this host "
                    f"(looked in: {', '.join(looked)}): install Nsight Compute, or name it with "
                    f"--ncu PATH or {NCU_ENV} in the host's env",
                    time.time(),
                )
            return profile_one(params_path, params, case, out_dir, ncu, version)

        return profile_case

    return run_each_case(params, "profile", start)


def _record(
    case: CaseSpec, options: ProfileOptions, status: ProfileStatus, reason: str, started: float, **fields
) -> ProfileRecord:
    from ..contract.protocol import now_iso

    return ProfileRecord(
        case_id=case.case_id,
        case=case,
        status=status,
        reason=reason,
        options=options,
        started_at=now_iso(),
        duration_s=round(time.time() - started, 3),
        **fields,
    )


def child_env() -> dict[str, str]:
    """The profiled process's environment: the worker importable, the venv's tools on PATH and FlashInfer's
    JIT settings stable, as the sweep's case loop has them (worker/sweep/supervise.py); never our channel."""
    from ..contract.protocol import PROTOCOL_FD_ENV
    from ..host.buildenv import ADDED_VAR, encode_added, stable_build_env

    worker_root = str(Path(__file__).resolve().parents[2])  # the folder holding worker/ (worker/<room>/<module>.py)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [worker_root, os.environ.get("PYTHONPATH")])))
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), os.environ.get("PATH")]))
    added = stable_build_env(env)
    env.update(added, **{ADDED_VAR: encode_added(added, os.environ)})
    env.pop(PROTOCOL_FD_ENV, None)
    return env


def _stop_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ncu and everything under it (the profiled process); the rest of our group lives on."""
    import signal

    from ..sweep.supervise import descendants

    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def profile_one(
    params_path: Path, params: ProfileParams, case: CaseSpec, out_dir: Path, ncu: str, version: str
) -> ProfileRecord:
    """One case under ncu: its record (the CSV of its report when it worked; else why not)."""
    started = time.time()
    options = params.options
    base = out_dir / case.case_id
    report = Path(f"{base}.ncu-rep")
    said_path, log_path = out_dir / f"{case.case_id}.run.json", out_dir / f"{case.case_id}.ncu.log"
    target = [
        sys.executable,
        "-m",
        "worker",
        "profile-case",
        "--params",
        str(Path(params_path).resolve()),
        "--case",
        case.case_id,
        "--out",
        str(said_path.resolve()),
    ]
    # An ncu that does not know one of the extra metrics profiles nothing: once more with the basic set alone.
    for extra in (EXTRA_METRICS, ()):
        argv = ncu_argv(ncu, str(base.resolve()), case, options, target, extra)
        report.unlink(missing_ok=True)
        said_path.unlink(missing_ok=True)
        timed_out, returncode, text = _capture(argv, log_path, options.case_timeout_s)
        if timed_out or "Failed to find metric" not in text:
            break
    common = dict(ncu=ncu, ncu_version=version, argv=argv, extra_metrics=list(extra))
    tail = text.splitlines()[-LOG_TAIL_LINES:]
    for line in tail:  # the host's log (log.txt on the controller) keeps what ncu said
        print(f"ncu: {line}", file=sys.stderr, flush=True)
    said = _read_said(said_path)
    if timed_out:
        return _record(
            case,
            options,
            "failed",
            f"ncu did not finish within {options.case_timeout_s:g} s (--timeout); stopped",
            started,
            log_tail=tail,
            run=said,
            **common,
        )
    status, reason = classify_ncu_output(text)
    if status == "ok" and said is not None and said.status != "ok":
        status, reason = "failed", f"the case did not run under ncu: {said.reason}"
    elif status == "ok" and said is None:
        status, reason = "failed", f"the profiled process ended without a word (ncu exit status {returncode})"
    elif status == "ok" and not report.exists():
        status, reason = "failed", f"ncu wrote no report (exit status {returncode})"
    if status == "failed" and "no kernel" in reason and said is not None and said.device != "cuda":
        reason += f" (the case ran on the {said.device or 'CPU'}: there is no GPU kernel to profile)"
    if status != "ok":
        return _record(case, options, status, reason, started, log_tail=tail, run=said, **common)
    last = ""
    for units in IMPORT_UNITS:
        try:
            done = subprocess.run(
                import_argv(ncu, str(report), units), capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            last = str(exc)
            continue
        if done.returncode == 0 and done.stdout.strip():
            data = report.read_bytes()
            return _record(
                case,
                options,
                "ok",
                "",
                started,
                log_tail=tail,
                run=said,
                report=str(report.resolve()),
                report_bytes=len(data),
                report_sha256=hashlib.sha256(data).hexdigest(),
                csv=done.stdout,
                **common,
            )
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return _record(
        case,
        options,
        "failed",
        f"ncu could not read its report back: {last}"[:400],
        started,
        log_tail=tail,
        run=said,
        **common,
    )


def _capture(argv: list[str], log_path: Path, timeout_s: float) -> tuple[bool, int, str]:
    """Run ncu (and under it the profiled process), its output into `log_path`: (timed out, exit status,
    what it printed). A run past `timeout_s` is stopped with everything under it."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env())
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop_tree(proc)
            timed_out = True
        except KeyboardInterrupt:
            _stop_tree(proc)
            raise
    return timed_out, proc.returncode, log_path.read_text(encoding="utf-8", errors="replace")


def _read_said(path: Path) -> Optional[ProfiledRun]:
    try:
        return ProfiledRun.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# -- the profiled process --------------------------------------------------------------------------------
def run_profiled_case(params_path: Path, case_id: str, out: Path) -> int:
    """Prepare, warm up and settle one case as the sweep does, then run `calls` calls inside the profiler's
    range (on a CPU there is no range: the calls run, and ncu finds no kernel). Writes what it did to
    `out` (ProfiledRun); returns 0 when the case ran."""
    said = ProfiledRun()
    try:
        params = ProfileParams.model_validate_json(Path(params_path).read_text(encoding="utf-8"))
        case = next((c for c in params.cases if c.case_id == case_id), None)
        if case is None:
            said.reason = f"case {case_id} is not in {params_path}"
        else:
            _run_case(case, params, said)
    except Exception as exc:  # whatever the case raises is its reason, as in a sweep
        import traceback

        said.status, said.reason = "failed", f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
    out.write_text(said.model_dump_json(), encoding="utf-8")
    return 0 if said.status == "ok" else 1


def _run_case(case: CaseSpec, params: ProfileParams, said: ProfiledRun) -> None:
    # The sweep's own preparation (runner.py): its backend lookup (a user kernel's file included) and
    # inputs. They are private there; a public hook in runner.py would serve this module better.
    from ..backends import availability_problem
    from ..contract.catalog import support_problem
    from ..host.env import gpu_processes
    from ..measure.timing import time_cpu
    from ..sweep import runner as sweep_runner

    runner = sweep_runner.CaseRunner(params.device)
    said.device, said.gpu_name = runner.device.device, runner.device.name or ""
    spec = sweep_runner._spec_of(case)
    problem = (
        spec
        if isinstance(spec, str)
        else (
            support_problem(spec, case.m, case.n, case.k, runner.device.compute_capability)
            or (None if case.kernel_sha256 else availability_problem(spec))
        )
    )
    if problem:
        said.reason = problem
        return
    round_start = getattr(runner, "_round_start", None)  # a round's start (L2 persistence reset), where it exists
    if round_start is not None:
        round_start()
    fn, sets, n_sets = runner._prepare(case, spec)
    said.n_sets = n_sets
    calls = params.options.calls
    # The sweep's warm-up, graph capture and settling, with only a token of samples after the range.
    opts = case.timing.model_copy(update={"min_samples": 3, "max_samples": 3, "budget_s": 0.01})
    if runner.device.device != "cuda":
        time_cpu(fn, n_sets, opts)
        for i in range(calls):
            fn(i % n_sets)
        said.calls = calls
        said.status = "ok"
        return
    import torch

    def profiled_range() -> None:
        snap = runner.probe.snapshot() if runner.probe else None
        if snap is not None:
            said.sm_clock_mhz, said.mem_clock_mhz = snap.sm_clock_mhz, snap.mem_clock_mhz
            said.throttle_reasons = list(snap.throttle_reasons)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        try:
            for i in range(calls):
                fn(i % n_sets)
            torch.cuda.synchronize()
        finally:
            torch.cuda.profiler.stop()
        said.calls = calls

    stats = runner.timer.time_cuda(fn, n_sets, opts, settled=profiled_range).stats
    said.settle_ms = stats.settle_ms
    said.gpu_processes = gpu_processes()
    said.status = "ok" if said.calls else "failed"
    if not said.calls:
        said.reason = "the timing never reached its samples: the profiled range was not opened"
