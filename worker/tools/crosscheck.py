"""A case of a stored run timed beside the timers users hold fleetbench against: `fleetbench crosscheck`.

On the case's own host and GPU, holding the GPU's lock as a sweep does, each case is prepared as the
sweep prepared it (worker/sweep/runner.py) and timed, back to back in one process:
  fleetbench   its own timing (worker/measure/timing.py: graph replay, cold-L2 rotation, settled, median), and
               the same graph's kernels as CUPTI records them (worker/measure/cupti.py): kernel time alone;
  flashinfer   flashinfer.testing.bench_gpu_time, where FlashInfer is installed;
  triton       triton.testing.do_bench_cudagraph, where Triton is.
Each peer runs first in its own default settings, as a user calls it on a closure over one set of inputs
(`fn` below), then with one setting after another matched to fleetbench's, each step changing one thing:
  statistic  its statistic -> fleetbench's median (computed from the same samples; no new run)
  l2         its L2 state (FlashInfer: 2x L2 zeroed before each call; Triton: hot, the same inputs every
             call) -> fleetbench's rotation through the case's input sets, inside the peer's own timing
  launch     per-call CUDA events -> graph replay of as many calls as fleetbench's sample
  clock      from idle (a GPU that idled climbs to its burst clock; peers time it there) -> settled, by
             replaying fleetbench's own graph until the case's steady state right before the peer runs,
             and by the peer's own settings: each captures its graph right before it times it, and the
             GPU idles while it captures, so the peer runs long enough after its capture (FlashInfer's
             untimed replays, dry_run_time_ms; Triton's replay length, rep) that its timed window
             starts after the power controller acted
So the first run gives the raw gap, the last the matched gap, and each step's ratio names the share of
one cause (orchestrator/analysis/crosscheck.py). A step whose setting already matches is not run.

Only what exists is imported: a peer that is not installed, or too old to have its timer, is a reason
in the record, never a crash. The parameters passed are the ones the installed version's signature
has (read with inspect, recorded); a missing one fails that step with its name.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
import traceback
import warnings
from typing import Callable, Optional

from ..contract.crosscheck import (
    CrosscheckOptions,
    CrosscheckParams,
    CrosscheckRecord,
    FleetbenchTiming,
    Method,
    PeerResult,
    Step,
    Timed,
)
from ..contract.schema import CaseSpec
from .caseloop import CaseWork, run_each_case

CUPTI_REPLAYS = 20
TARGET_SAMPLE_S = 2e-3  # one sample of fleetbench's graph, as worker/measure/timing.py sizes it
# A peer's own capture idles the GPU, so the replays right after it run at the burst clock until the power
# controller steps it down (benchmarks/RESULTS.md, issue 30; benchmarks/fidelity/graph_length.py): FlashInfer
# replays untimed for Tuning.peer_dry_run_ms first; each of Triton's 10 replays lasts ~Tuning.triton_replay_ms
# of GPU time, so the first absorbs the burst and its median is the settled state's (worker/measure/tuning.py).
# TRITON_MAX_REP_MS caps the rep a slow eager call would ask of Triton.
TRITON_MAX_REP_MS = 5000


# -- the host's side of `fleetbench crosscheck` --------------------------------------------------------
def crosscheck(params_path) -> int:
    """Time every case of `params_path` beside its peers, one record each on the protocol channel,
    holding this GPU's lock (and its clocks, where the host locks them) as a sweep does. Returns 0, or
    EXIT_GPU_BUSY when another sweep held the GPU past the lock timeout."""
    from pathlib import Path

    params = CrosscheckParams.model_validate_json(Path(params_path).read_text(encoding="utf-8"))

    def start(locked_mhz: Optional[int]) -> CaseWork:
        from ..sweep.runner import CaseRunner

        runner = CaseRunner(params.device)
        return lambda case: check_case(runner, case, params.options, locked_mhz=locked_mhz)

    return run_each_case(params, "crosscheck", start)


def check_case(
    runner, case: CaseSpec, options: CrosscheckOptions, locked_mhz: Optional[int] = None
) -> CrosscheckRecord:
    """One case timed by fleetbench and by each peer of `options` (module docstring). Never raises for
    what the case or a peer does: that is the record's status and reason."""
    from ..contract.protocol import now_iso

    started, t0 = now_iso(), time.perf_counter()

    def record(status: str, reason: str = "", **fields) -> CrosscheckRecord:
        return CrosscheckRecord(
            case_id=case.case_id,
            case=case,
            status=status,
            reason=reason,
            started_at=started,
            duration_s=round(time.perf_counter() - t0, 3),
            device=runner.device.device,
            gpu_name=runner.device.name or "",
            sm_clock_locked_mhz=locked_mhz,
            **fields,
        )

    from ..backends import availability_problem
    from ..contract.catalog import support_problem
    from ..sweep import runner as sweep_runner

    spec = sweep_runner._spec_of(case)
    if isinstance(spec, str):
        return record("unavailable" if case.kernel_sha256 else "failed", spec)
    problem = support_problem(spec, case.m, case.n, case.k, runner.device.compute_capability)
    if problem:
        return record("unsupported", problem)
    problem = None if case.kernel_sha256 else availability_problem(spec)
    if problem:
        return record("unavailable", problem)
    try:
        fn, sets, n_sets = runner._prepare(case, spec)
        if runner.device.device != "cuda":
            return record(
                "ok", "", fleetbench=_time_on_cpu(fn, n_sets, case), peers=[_not_on_cpu(p) for p in options.peers]
            )
        bench = CaseBench(fn, n_sets, case, probe=runner.probe, timer=runner.timer)
        ours = bench.fleetbench(options.cupti)
        peers = [_peer(p, bench) for p in options.peers]
        bench.release()
        del fn, sets
        return record("ok", "", fleetbench=ours, peers=peers)
    except Exception as exc:  # what the case raises is its reason, as in a sweep
        traceback.print_exc()
        return record("failed", f"{type(exc).__name__}: {exc}"[:500])


def _peer(peer: str, bench: "CaseBench") -> PeerResult:
    """One peer's ladder; whatever it raises beyond its steps is its reason, and a capture it left
    unfinished does not leave its stream current for the next peer (as worker/sweep/runner.py guards it)."""
    import torch

    before = torch.cuda.current_stream()
    try:
        return PEER_RUNS[peer](bench)
    except Exception as exc:
        traceback.print_exc()
        return PeerResult(peer=peer, timer=TIMERS[peer], status="failed", reason=f"{type(exc).__name__}: {exc}"[:400])
    finally:
        if torch.cuda.current_stream() != before:
            torch.cuda.set_stream(before)


def _time_on_cpu(fn, n_sets: int, case: CaseSpec) -> FleetbenchTiming:
    from ..measure.timing import time_cpu

    stats = time_cpu(fn, n_sets, case.timing)
    return FleetbenchTiming(
        method=Method(l2="hot (CPU)", launch="wall clock", clock="as found"),
        timing_method=stats.method,
        median_us=stats.median_us,
        mean_us=stats.mean_us,
        samples_us=stats.samples_us,
        calls_per_sample=stats.calls_per_sample,
        n_sets=n_sets,
        cupti_reason="the case ran on the CPU",
    )


def _not_on_cpu(peer: str) -> PeerResult:
    return PeerResult(
        peer=peer,
        timer=TIMERS[peer],
        status="unsupported",
        reason=f"{TIMERS[peer]} times CUDA kernels; this case ran on the CPU",
    )


# -- the case on the GPU, as each timer sees it ----------------------------------------------------------
class CaseBench:
    """A prepared case on the GPU: `fn(i)` runs it on input set i. Holds fleetbench's graph of the case
    once timed (for CUPTI and for settling before a peer) and the words for fleetbench's own method."""

    def __init__(self, fn: Callable[[int], object], n_sets: int, case: CaseSpec, probe=None, timer=None):
        from ..measure.timing import Timer

        self.fn, self.n_sets, self.case = fn, n_sets, case
        self.timer = timer if timer is not None else Timer()  # the process's (the runner's), or one of its own
        self.graph = None
        self.calls = 1  # calls in self.graph
        self.ours: Optional[FleetbenchTiming] = None
        self.probe = probe  # NVML, to read the SM clock while a timer runs (None: not read)

    # The closures the peers time. `fixed` is what a user hands a timer: a call on one set of inputs.
    # `rotating` goes through the case's input sets as fleetbench's graph does; a graph captured from
    # it captures the rotation (each captured call reads the next set).
    def fixed(self) -> None:
        self.fn(0)

    def rotating_call(self) -> Callable[[], None]:
        counter = itertools.count()
        return lambda: self.fn(next(counter) % self.n_sets)

    @property
    def cold(self) -> bool:
        return self.case.timing.l2 == "cold" and self.n_sets > 1

    @property
    def settles(self) -> bool:
        return self.case.timing.settle_ms > 0

    def l2_words(self) -> str:
        if self.cold:
            return f"rotation over {self.n_sets} input sets (at least 3x L2)"
        if self.case.timing.l2 == "cold":
            return "one input set of at least 3x L2 (every call starts cold)"
        return "hot (the same inputs every call)"

    def fleetbench(self, cupti: bool) -> FleetbenchTiming:
        import torch

        from ..host.health import ClockSampler
        from ..measure import timing

        built = []
        with ClockSampler(self.probe) as clock:
            stats = self.timer.time_cuda(self.fn, self.n_sets, self.case.timing, keep=built.append).stats
        if built:  # graph and cupti modes: the timed graph serves CUPTI and settling before a peer
            self.graph, self.calls = built[0].graph, built[0].calls
            launch = (
                f"graph replay of {self.calls} calls"
                if stats.method == "cuda-graph"
                else f"kernel time (CUPTI) of a graph of {self.calls} calls, no launch gaps"
            )
        else:  # events mode: a graph only for CUPTI and for settling before a peer
            self.calls = max(1, math.ceil(TARGET_SAMPLE_S / max(stats.median_us * 1e-6, 1e-7)))
            self.calls = -(-self.calls // self.n_sets) * self.n_sets
            launch = "per-call CUDA events"
            self.graph = timing._capture(self.fn, self.calls, self.n_sets, self.timer.capture_stream())
            self.graph.replay()
            torch.cuda.synchronize()
        settled = f"settled ({stats.settle_ms or 0:g} ms)" if self.settles else "as found (settle_ms 0)"
        ours = FleetbenchTiming(
            method=Method(l2=self.l2_words(), launch=launch, clock=settled),
            timing_method=stats.method,
            median_us=stats.median_us,
            mean_us=stats.mean_us,
            samples_us=stats.samples_us,
            calls_per_sample=stats.calls_per_sample,
            n_sets=self.n_sets,
            settle_ms=stats.settle_ms,
            sm_clock_mhz=clock.median_mhz,
        )
        if not cupti:
            ours.cupti_reason = "not asked (--no-cupti)"
        else:
            self._cupti(ours)
        self.ours = ours
        return ours

    def _cupti(self, ours: FleetbenchTiming) -> None:
        from ..measure import cupti

        problem = cupti.available()
        if problem:
            ours.cupti_reason = problem
            return
        self.settle()
        try:
            got = cupti.kernel_samples_us(
                self.graph.replay, self.calls, CUPTI_REPLAYS, self.timer.tuning.cupti_lead_in_ms
            )
        except cupti.CuptiError as exc:
            ours.cupti_reason = str(exc)
            return
        ours.kernels_us = statistics.median(got.per_call_us)
        ours.span_us = statistics.median(got.span_us)
        ours.kernels, ours.cupti_split_by, ours.cupti_notes = got.kernels, got.split_by, list(got.notes)

    def settle(self) -> None:
        """Replay fleetbench's graph of the case until it is in its own steady state (worker/measure/timing.py
        settle), right before what runs next."""
        if not self.settles:
            return
        import torch

        from ..measure import timing

        stream = torch.cuda.current_stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def replay_us() -> float:
            start.record(stream)
            self.graph.replay()
            end.record(stream)
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / self.calls

        timing.settle(replay_us, self.calls, self.case.timing.settle_ms)

    def eager_ms(self, call: Callable[[], None]) -> float:
        """eager_ms on a fresh side stream, where Triton estimates it."""
        with self.side_stream():
            return eager_ms(call)

    def side_stream(self):
        """A fresh stream made current: where a timer that captures graphs must not use the default one."""
        import torch

        return torch.cuda.stream(torch.cuda.Stream())

    def idle(self) -> None:
        """Leave the GPU idle as a user's script does before it reaches its timer (Tuning.peer_idle_s)."""
        import torch

        torch.cuda.synchronize()
        time.sleep(self.timer.tuning.peer_idle_s)

    def release(self) -> None:
        import torch

        self.graph = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def eager_ms(call: Callable[[], None]) -> float:
    """Milliseconds per call of `call` launched eagerly on the current stream, five between events after
    one: how Triton's do_bench_cudagraph estimates a call before it sizes its graph."""
    import torch

    call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 5


def _version(dist: str, module) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return str(getattr(module, "__version__", ""))


def _installed_timer(peer: str, label: str, dist: str) -> tuple[PeerResult, Optional[Callable], set[str]]:
    """The peer's timer (TIMERS) as installed here: (the peer's result so far, the timer, the parameters
    its signature has). Where its package cannot be imported or lacks the timer, the result says so
    (unavailable) and the timer is None."""
    import importlib

    timer = TIMERS[peer]
    module_name, function = timer.rsplit(".", 1)
    try:
        package = importlib.import_module(module_name.split(".")[0])
        module = importlib.import_module(module_name)
    except Exception as exc:  # not installed, or it fails to import here: a reason either way
        why = f"{label} cannot be imported here ({type(exc).__name__}: {str(exc)[:200]})"
        return PeerResult(peer=peer, timer=timer, status="unavailable", reason=why), None, set()
    version = _version(dist, package)
    fn = getattr(module, function, None)
    if fn is None:
        return (
            PeerResult(
                peer=peer,
                timer=timer,
                status="unavailable",
                version=version,
                reason=f"{label} {version} has no {timer}",
            ),
            None,
            set(),
        )
    signature, accepted = _signature(fn)
    return PeerResult(peer=peer, timer=timer, status="ok", version=version, signature=signature), fn, accepted


def _signature(fn) -> tuple[str, set[str]]:
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "", set()
    return str(sig), set(sig.parameters)


def _stat(samples: list[float], statistic: str) -> Optional[float]:
    if not samples:
        return None
    return statistics.median(samples) if statistic == "median" else statistics.fmean(samples)


def _run(step: Step, call: str, method: Method, measure: Callable[[], list[float]], probe=None) -> Timed:
    """One timer run: its samples (µs per call), the statistic of `method`, and what it warned; with an
    NVML `probe`, the SM clock it ran at."""
    from ..host.health import ClockSampler

    with warnings.catch_warnings(record=True) as caught, ClockSampler(probe) as clock:
        warnings.simplefilter("always")
        try:
            samples = [float(s) for s in measure()]
            reason = ""
        except Exception as exc:
            traceback.print_exc()
            samples, reason = [], f"{type(exc).__name__}: {exc}"[:400]
    notes = list(dict.fromkeys(str(w.message)[:300] for w in caught))
    return Timed(
        step=step,
        call=call,
        method=method,
        samples_us=[round(s, 4) for s in samples],
        value_us=_stat(samples, method.statistic),
        reason=reason,
        notes=notes,
        sm_clock_mhz=clock.median_mhz,
    )


def _with_statistic(run: Timed, statistic: str) -> Timed:
    """The same samples under another statistic: the `statistic` step costs no new run."""
    method = run.method.model_copy(update={"statistic": statistic})
    return run.model_copy(
        update={
            "step": "statistic",
            "method": method,
            "value_us": _stat(run.samples_us, statistic),
            "notes": ["the samples of the run above"],
        }
    )


# -- FlashInfer: flashinfer.testing.bench_gpu_time ---------------------------------------------------------
FLASHINFER_STATISTIC = "median"  # what FlashInfer's own benchmarks report of the times it returns (its #1337)


def flashinfer_runs(bench: CaseBench) -> PeerResult:
    result, bench_gpu_time, accepted = _installed_timer("flashinfer", "FlashInfer", "flashinfer-python")
    if bench_gpu_time is None:
        return result

    def measure(call: Callable[[], None], **kwargs) -> Callable[[], list[float]]:
        missing = [k for k in kwargs if k not in accepted]

        def run() -> list[float]:
            if missing:
                raise TypeError(f"this bench_gpu_time has no parameter {', '.join(missing)}")
            return [t * 1e3 for t in bench_gpu_time(call, **kwargs)]

        return run

    def text(**kwargs) -> str:
        return "bench_gpu_time(" + ", ".join(["fn", *(f"{k}={v!r}" for k, v in kwargs.items())]) + ")"

    flush = "2x L2 zeroed before each call (cold_l2_cache=True)"
    events = "per-call CUDA events"
    from_idle = "from idle"
    runs = result.runs
    bench.idle()
    runs.append(
        _run(
            "default",
            text(),
            Method(l2=flush, launch=events, clock=from_idle, statistic=FLASHINFER_STATISTIC),
            measure(bench.fixed),
        )
    )
    ours = bench.ours
    l2_kwargs = {"cold_l2_cache": False}
    call = bench.rotating_call() if bench.cold else bench.fixed
    bench.idle()
    runs.append(
        _run(
            "l2",
            text(**l2_kwargs),
            Method(l2=bench.l2_words(), launch=events, clock=from_idle),
            measure(call, **l2_kwargs),
        )
    )
    matched = dict(l2_kwargs)
    launch = events
    if ours is not None and ours.timing_method == "cuda-graph":
        matched.update(use_cuda_graph=True, num_iters_within_graph=bench.calls)
        launch = f"graph replay of {bench.calls} calls"
        call = bench.rotating_call() if bench.cold else bench.fixed
        bench.idle()
        runs.append(
            _run(
                "launch",
                text(**matched),
                Method(l2=bench.l2_words(), launch=launch, clock=from_idle),
                measure(call, **matched),
            )
        )
    if bench.settles:
        call = bench.rotating_call() if bench.cold else bench.fixed
        clock = "settled"
        if "dry_run_time_ms" in accepted:
            dry_run_ms = bench.timer.tuning.peer_dry_run_ms
            matched["dry_run_time_ms"] = dry_run_ms
            clock = f"settled, then {dry_run_ms} ms of its own untimed calls"
        else:
            result.unmatched.append(
                "clock (this bench_gpu_time has no dry_run_time_ms: its timed calls start "
                "right after its own set-up, at the burst clock)"
            )
        bench.settle()
        runs.append(
            _run(
                "clock",
                text(**matched),
                Method(l2=bench.l2_words(), launch=launch, clock=clock),
                measure(call, **matched),
                probe=bench.probe,
            )
        )
    result.notes += _cupti_note("enable_cupti" in accepted)
    if all(r.value_us is None for r in runs):
        result.status, result.reason = "failed", runs[0].reason
    return result


def _cupti_note(has_parameter: bool) -> list[str]:
    """What FlashInfer's CUPTI timer (flashinfer_benchmark.py's default since its #2180) would do here."""
    if not has_parameter:
        return ["this bench_gpu_time has no enable_cupti"]
    try:
        from importlib.metadata import version

        found = version("cupti-python")
    except Exception:
        return [
            "enable_cupti=True (flashinfer_benchmark.py's default) would fall back to CUDA events here: "
            "cupti-python is not installed; fleetbench's CUPTI column is that kind of figure"
        ]
    return [
        f"cupti-python {found} is installed: enable_cupti=True times kernels alone, as fleetbench's CUPTI column does"
    ]


# -- Triton: triton.testing.do_bench_cudagraph ---------------------------------------------------------------
TRITON_STATISTIC = "mean"  # do_bench_cudagraph's default return_mode


def triton_runs(bench: CaseBench) -> PeerResult:
    result, do_bench_cudagraph, accepted = _installed_timer("triton", "Triton", "triton")
    if do_bench_cudagraph is None:
        return result

    def all_times(call: Callable[[], None], **kwargs) -> Callable[[], list[float]]:
        # return_mode="all" gives every replay's per-call time, so one run yields both statistics. Older
        # Triton captures on the current stream and refuses the default one: a side stream serves both.
        def run() -> list[float]:
            with bench.side_stream():
                if "all" in modes:
                    try:
                        return [t * 1e3 for t in do_bench_cudagraph(call, return_mode="all", **kwargs)]
                    except AssertionError:  # a Triton with return_mode but without "all"
                        modes.discard("all")
                        warnings.warn("this do_bench_cudagraph refuses return_mode='all': its mean alone")
                return [do_bench_cudagraph(call, **kwargs) * 1e3]  # its mean, alone

        return run

    modes = {"all"} if "return_mode" in accepted else set()
    text = "do_bench_cudagraph(fn, return_mode='all')" if modes else "do_bench_cudagraph(fn)"
    graph = "graph of ~20 ms of calls"  # its rep=20 ms, unrolled into one graph
    runs = result.runs
    bench.idle()
    first = _run(
        "default",
        text,
        Method(l2="hot (the same inputs every call)", launch=graph, clock="from idle", statistic=TRITON_STATISTIC),
        all_times(bench.fixed),
    )
    runs.append(first)
    if "all" not in modes:
        result.unmatched.append("statistic (this do_bench_cudagraph gives its mean alone)")
    else:
        runs.append(_with_statistic(first, "median"))
    statistic = "median" if "all" in modes else "mean"  # the mean where the median cannot be had
    if bench.cold:
        bench.idle()
        runs.append(
            _run(
                "l2",
                text,
                Method(l2=bench.l2_words(), launch=graph, clock="from idle", statistic=statistic),
                all_times(bench.rotating_call()),
            )
        )
    if bench.settles:
        call = bench.rotating_call() if bench.cold else bench.fixed
        kwargs, clock = {}, "settled"
        if "rep" in accepted and bench.ours is not None:
            # It sizes its graph as rep / (its eager time per call): scaled so one replay lasts
            # ~Tuning.triton_replay_ms of the GPU time fleetbench measured.
            replay_ms = bench.timer.tuning.triton_replay_ms
            rep_ms = replay_ms * bench.eager_ms(call) / (bench.ours.median_us / 1e3)
            kwargs["rep"] = int(min(TRITON_MAX_REP_MS, max(replay_ms, rep_ms)))
            clock = f"settled, and replays of ~{replay_ms} ms (rep={kwargs['rep']})"
        else:
            result.unmatched.append(
                "clock (this do_bench_cudagraph has no rep: its replays follow its capture at the burst clock)"
            )
        step_text = text[:-1] + "".join(f", {k}={v!r}" for k, v in kwargs.items()) + ")"
        bench.settle()
        runs.append(
            _run(
                "clock",
                step_text,
                Method(l2=bench.l2_words(), launch=graph, clock=clock, statistic=statistic),
                all_times(call, **kwargs),
                probe=bench.probe,
            )
        )
    if bench.ours is not None and bench.ours.timing_method != "cuda-graph":
        result.unmatched.append(
            "launch (do_bench_cudagraph always replays a graph; this case was timed with per-call CUDA events)"
        )
    if all(r.value_us is None for r in runs):
        result.status, result.reason = "failed", runs[0].reason
    return result


TIMERS = {"flashinfer": "flashinfer.testing.bench_gpu_time", "triton": "triton.testing.do_bench_cudagraph"}
PEER_RUNS: dict[str, Callable[[CaseBench], PeerResult]] = {"flashinfer": flashinfer_runs, "triton": triton_runs}
