"""Honest timing: CUDA-graph replay (default), per-call CUDA events, or wall clock on a CPU.

Decode-size GEMMs last a few microseconds, less than a launch: timed call by call they measure the
launcher, not the kernel. Graph mode captures `calls_per_sample` back-to-back calls in one CUDA graph and
divides one replay's event time by that count. Cold L2 rotates through input sets whose total size is
several times the L2, so no call finds its weights cached. Samples are collected until the median's 95%
confidence interval is narrower than `target_rel_ci` or the budget runs out; every raw sample is kept.

A case's number must not depend on what ran before it in the process. cuBLAS graphs replay faster for
as long as the process has run cuBLAS eagerly on at most one side stream (benchmarks/gpu_state/first_case.py;
docs/TIMING.md and benchmarks/RESULTS.md give the figures). So every graph is built (build_graph) after
the case ran eagerly on two streams: its warm-up on the process's one capture stream, and one call on a
fresh side stream. Every case is then measured in the state that any process using more than one stream
(a serving engine) is in. The first graph timing of a process still read low with that alone (what
exactly flips the state is not isolated), so each process's first graph timing is a discarded priming
pass. What a process's timings share (the capture stream, whether it is primed, whether the last case
was heavy) is its Timer: one per process, held by whoever times there (the case runner), never a module
global. A later round of a case replays the graph its first round built (TimedGraph, kept by
worker/sweep/runner.py): a graph keeps the speed it was captured with for as long as it lives (RESULTS.md,
"It is the graph, not the moment"), so its rounds differ by what the GPU does, not by their captures.

A case must not read what the case before it left behind either: a large GEMM reads slower after a
heavy neighbour (the GPU's clock and power state follow the load of the last ~100 ms;
benchmarks/gpu_state/neighbour.py). So before its samples every timing settles: it replays its own graph, and
on until its per-call time stops drifting (`settle`), so it is sampled in its own steady state whatever
ran before. How long at least depends on the GPU state the case needs (benchmarks/gpu_state/settle_trace.py): a
case that drives the tensor cores hard enough to meet the power limit (`load` >= Tuning.heavy_load of
the calibrated peak) reads its burst clock until the power controller acts, so it settles at least
`settle_ms`; so does any case right after such a case (the clock climbs back). A light case after a
light one runs at the clock it found, which is its own: Tuning.light_settle_ms is enough. The per-GPU
values are data (worker/measure/tuning.py).
The replays that end settling were judged drift-free against those before them, in the state the
samples are taken in, so they are the first samples (Settled).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, NamedTuple, Optional

from ..contract.schema import Stats, TimingOptions
from ..contract.stats import median_ci, summarize
from .tuning import TUNING, Tuning

# One sample (one graph replay) should last long enough that event resolution, replay
# jitter and the replay's launch cost vanish next to it.
TARGET_SAMPLE_S = 2e-3
MAX_CALLS_PER_SAMPLE = 4096
PROBE_CALLS = 16
# Settling: after `settle_ms`, the median of the latest third of the replays must be within SETTLE_TOL of
# the middle third's; a kernel that never stops drifting is sampled after SETTLE_MAX_FACTOR x settle_ms.
SETTLE_TOL = 0.005
SETTLE_MAX_FACTOR = 10
# A later round of a case warms up briefly: JIT builds, autotuning and lazy allocations happened in round 1.
LATER_WARMUP_MS = 5.0


class Timing(NamedTuple):
    """What one timing gave: its Stats; the wall seconds of its phases (warmup_s, capture_s, settle_s or
    cooldown_s, samples_s, cupti_s), which the runner records with the round: where a sweep's time goes
    (benchmarks/cost/sweep_cost.py); and what it has to say beside its numbers (mode cupti: CUPTI left
    attached, a trace taken again), which the runner puts in the case's reason."""

    stats: Stats
    phases: dict[str, float]
    notes: tuple[str, ...] = ()


def _enough(samples: list[float], opts: TimingOptions, started: float) -> bool:
    n = len(samples)
    if n >= opts.max_samples:
        return True
    if n < 3:
        return False
    if time.perf_counter() - started > opts.budget_s:
        return True  # out of budget: what we have is reported with its (wider) CI
    if n < opts.min_samples:
        return False
    ordered = sorted(samples)
    med = statistics.median(ordered)
    lo, hi = median_ci(ordered)
    return med > 0 and (hi - lo) / 2 / med <= opts.target_rel_ci


def time_cpu(fn: Callable[[int], object], n_sets: int, opts: TimingOptions) -> Stats:
    """Wall-clock timing for the CPU (no graphs, no events): for smoke runs and the local default."""
    deadline = time.perf_counter() + opts.warmup_ms / 1e3
    calls = 0
    t0 = time.perf_counter()
    while True:
        fn(calls % n_sets)
        calls += 1
        if time.perf_counter() >= deadline and calls >= 1:
            break
    per_call = (time.perf_counter() - t0) / calls
    cps = opts.calls_per_sample or max(1, min(MAX_CALLS_PER_SAMPLE, round(TARGET_SAMPLE_S / max(per_call, 1e-9))))
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, opts, started):
        t = time.perf_counter()
        for i in range(cps):
            fn(i % n_sets)
        samples.append((time.perf_counter() - t) / cps * 1e6)
    return summarize(samples, method="cpu-wallclock", calls_per_sample=cps, l2="hot")


class TimedGraph:
    """A case's timed CUDA graph: `calls` back-to-back calls rotating through `n_sets` input sets, and the
    events a sample is timed by. Built once for a case (worker/sweep/runner.py keeps it across the case's
    rounds), replayed by every round."""

    def __init__(self, graph, calls: int, n_sets: int, stream, per_call_s: float):
        import torch

        self.graph, self.calls, self.n_sets, self.stream = graph, calls, n_sets, stream
        self.per_call_s = per_call_s  # from one whole replay right after capture: the case's load
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def replay_us(self) -> float:
        """One timed replay: its per-call time in µs."""
        self.start.record(self.stream)
        self.graph.replay()
        self.end.record(self.stream)
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3 / self.calls

    def replay_once(self) -> int:
        """Exactly what one timed sample runs, ended as the timer ends it; the input set of its last call."""
        self.graph.replay()
        self.end.record(self.stream)
        self.end.synchronize()
        return (self.calls - 1) % self.n_sets


class Timer:
    """One process's CUDA timing (module docstring): the one stream every graph is captured on, whether
    the process's discarded priming pass ran, and whether its last timing was of a heavy case
    (settle_floor), with the per-GPU Tuning its timings use. A process has one, held by what times
    there (worker/sweep/runner.py CaseRunner), so a case's number depends on no other object's history."""

    def __init__(self, tuning: Tuning = TUNING):
        self.tuning = tuning
        self.primed = False  # the priming pass ran (module docstring)
        self.last_heavy = False  # the last timing was of a heavy case (settle_floor)
        self._capture_stream = None

    def capture_stream(self):
        """The one stream of this process that every graph is captured on (module docstring)."""
        if self._capture_stream is None:
            import torch

            self._capture_stream = torch.cuda.Stream()
        return self._capture_stream

    def time_cuda(
        self,
        fn: Callable[[int], object],
        n_sets: int,
        opts: TimingOptions,
        settled: Optional[Callable[[], None]] = None,
        timed_once: Optional[Callable[[Callable[[], int]], None]] = None,
        load: Optional[Callable[[float], Optional[float]]] = None,
        graph: Optional[TimedGraph] = None,
        keep: Optional[Callable[[TimedGraph], None]] = None,
        clock=None,
    ) -> Timing:
        """CUDA timing by graph replay or per-call events; `fn(i)` runs the kernel on input set i.
        `settled()` is called once the case has settled, just before its samples (health readings taken
        there judge the samples, not the settling, which may rightly lower the clock). `timed_once(run)` is
        called once before settling with `run()`: exactly what one timed sample runs (a replay of the timed
        graph; in events mode one call on input set 0), ended as the timer ends it (the timed stream's end
        event), returning the input set of its last call, so worker/check/integrity.py can check that what
        is timed does the work. `load(per_call_us)`: the share of the GPU's tensor peak a call at that speed
        uses (None: unknown), which sets how long the case settles at least (module docstring).
        Graph modes: `graph`, a TimedGraph an earlier round of the case built, is replayed as it is (no
        warm-up, no capture: settling runs it into its steady state); otherwise one is built, and `keep(it)`
        is told of it so a later round can replay it. `clock` (a worker/measure/streamclock.py StreamClock):
        the SM clock of the samples' window, read in the stream, is left in `clock.window_mhz` (graph
        modes). Returns the Timing: its Stats, its phases' wall seconds and its notes."""
        import torch

        stream = torch.cuda.current_stream()
        if opts.mode == "cupti":
            from .cupti import available

            problem = available()
            if problem:
                raise RuntimeError(f"timing.mode cupti cannot run here: {problem}")
        if opts.mode == "events":
            _warm_up(fn, n_sets, opts, stream)
            if timed_once is not None:
                end_once = torch.cuda.Event()

                def one_call() -> int:
                    fn(0)
                    end_once.record(stream)
                    end_once.synchronize()
                    return 0

                timed_once(one_call)
            return self._time_events(fn, n_sets, opts, settled)
        if graph is None:
            graph, built = self.build_graph(fn, n_sets, opts, stream, load)
            if keep is not None:
                keep(graph)
        else:
            built = {"warmup_s": 0.0, "capture_s": 0.0}
        if timed_once is not None:
            timed_once(graph.replay_once)
        if opts.state == "burst":
            self.last_heavy = False  # idled for the burst: the clock climbs back
            sampled = _burst_sample(graph.replay_us, graph.calls, opts, settled, "cuda-graph", self.tuning.burst_gpu_ms)
        else:
            share = load(graph.per_call_s * 1e6) if load is not None else None
            floor = self.settle_floor(opts.settle_ms, share)
            sampled = _settle_and_sample(graph.replay_us, graph.calls, opts, settled, "cuda-graph", floor, clock=clock)
        timed = Timing(sampled.stats, {**built, **sampled.phases})
        if opts.mode != "cupti":
            return timed
        traced = _kernel_time(graph.graph, graph.calls, opts, timed.stats, self.tuning.cupti_lead_in_ms)
        return Timing(traced.stats, {**timed.phases, **traced.phases}, traced.notes)

    def build_graph(
        self,
        fn: Callable[[int], object],
        n_sets: int,
        opts: TimingOptions,
        stream,
        load: Optional[Callable[[float], Optional[float]]] = None,
    ) -> tuple[TimedGraph, dict[str, float]]:
        """Warm the case up and capture its timed graph, sized so one replay lasts ~TARGET_SAMPLE_S; events
        on `stream` time it. Returns the graph and the wall seconds it took (warmup_s, capture_s)."""
        import torch

        # Warm up on the stream the graphs are captured on (a library's lazy per-stream state then exists
        # before capture), and call once on a fresh stream: the module docstring says why.
        if not self.primed:  # the module docstring says why the first graph timing of a process is discarded
            self.primed = True
            self.time_cuda(
                fn,
                n_sets,
                opts.model_copy(
                    update={"budget_s": 0.05, "min_samples": 3, "max_samples": 5, "settle_ms": 0.0, "mode": "graph"}
                ),
                load=load,
            )
        t0 = time.perf_counter()
        capture_stream = self.capture_stream()
        side = torch.cuda.Stream()
        for s in (side, capture_stream):
            s.wait_stream(stream)
        with torch.cuda.stream(side):
            fn(0)
        _warm_up(fn, n_sets, opts, capture_stream)
        warmed = time.perf_counter()

        # Size the graph from a short graph, not from eager calls: a library with heavy Python dispatch
        # (100+ us per eager call) would otherwise get a graph of a handful of calls, and the replay's own
        # launch cost (a few us) would land on every one of them.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cps = opts.calls_per_sample  # a later round of a case gets its first round's (worker/sweep/runner.py again)
        if not cps:
            probe_calls = max(PROBE_CALLS, n_sets if opts.l2 == "cold" else 1)
            probe = _capture(fn, probe_calls, n_sets, capture_stream)
            probe.replay()
            start.record(stream)
            probe.replay()
            end.record(stream)
            end.synchronize()
            per_call_s = start.elapsed_time(end) / 1e3 / probe_calls
            del probe
            cps = max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(TARGET_SAMPLE_S / max(per_call_s, 1e-7))))
        if opts.l2 == "cold":
            # Whole rotations only: a replay then starts on set 0, last used a full rotation ago, and never on
            # a set that the previous replay's last calls left in L2.
            cps = -(-cps // n_sets) * n_sets
        graph = _capture(fn, cps, n_sets, capture_stream)
        graph.replay()
        start.record(stream)
        graph.replay()
        end.record(stream)
        end.synchronize()
        per_call_s = start.elapsed_time(end) / 1e3 / cps  # the case's load (settle_floor), from a whole replay
        phases = {"warmup_s": warmed - t0, "capture_s": time.perf_counter() - warmed}
        return TimedGraph(graph, cps, n_sets, stream, per_call_s), phases

    def settle_floor(self, settle_ms: float, load: Optional[float]) -> float:
        """The least GPU time a case settles (module docstring): `settle_ms` for a heavy case (or one of
        unknown load) and for any case right after a heavy one, Tuning.light_settle_ms otherwise."""
        heavy = load is None or load >= self.tuning.heavy_load
        floor = settle_ms if heavy or self.last_heavy else min(settle_ms, self.tuning.light_settle_ms)
        self.last_heavy = heavy
        return floor

    def _time_events(
        self,
        fn: Callable[[int], object],
        n_sets: int,
        opts: TimingOptions,
        settled: Optional[Callable[[], None]] = None,
    ) -> Timing:
        """One event pair around each call: includes launch overhead; honest only for large GEMMs."""
        import torch

        stream = torch.cuda.current_stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        i = 0

        def call_us() -> float:
            nonlocal i
            start.record(stream)
            fn(i % n_sets)
            end.record(stream)
            end.synchronize()
            i += 1
            return start.elapsed_time(end) * 1e3

        if opts.state == "burst":
            self.last_heavy = False  # idled for the burst: the clock climbs back
            return _burst_sample(call_us, 1, opts, settled, "cuda-events", self.tuning.burst_gpu_ms)
        return _settle_and_sample(call_us, 1, opts, settled, "cuda-events")


def _kernel_time(
    graph, cps: int, opts: TimingOptions, replayed: Stats, lead_in_ms: float = TUNING.cupti_lead_in_ms
) -> Timing:
    """Mode cupti: right after the event-timed samples (the GPU in the state they were taken in), as many
    replays of the same graph traced by CUPTI, after `lead_in_ms` of replays (Tuning.cupti_lead_in_ms);
    each sample is a call's summed kernel time (worker/measure/cupti.py). The replay median stays beside
    it: their difference is the launch gaps."""
    from . import cupti

    t0 = time.perf_counter()
    replays = max(opts.min_samples, min(replayed.n, opts.max_samples))
    traced = cupti.kernel_samples_us(graph.replay, cps, replays, lead_in_ms)
    phases = {"cupti_s": time.perf_counter() - t0}
    stats = summarize(traced.per_call_us, method="cupti", calls_per_sample=cps, l2=opts.l2)
    stats = stats.model_copy(update={"settle_ms": replayed.settle_ms, "replay_median_us": round(replayed.median_us, 4)})
    return Timing(stats, phases, tuple(traced.notes))


def _burst_sample(
    batch_us: Callable[[], float],
    calls: int,
    opts: TimingOptions,
    settled: Optional[Callable[[], None]],
    method: str,
    gpu_ms: float = TUNING.burst_gpu_ms,
) -> Timing:
    """The burst number (TimingOptions.state): idle for `cooldown_ms` so the clock climbs back, then
    samples for at most `gpu_ms` of GPU time (Tuning.burst_gpu_ms), before the power controller reacts
    to the load."""
    t0 = time.perf_counter()
    time.sleep(opts.cooldown_ms / 1e3)
    if settled is not None:
        settled()
    phases = {"cooldown_s": time.perf_counter() - t0}
    samples: list[float] = []
    spent_ms = 0.0
    started = time.perf_counter()
    while spent_ms < gpu_ms and not _enough(samples, opts, started):
        samples.append(batch_us())
        spent_ms += samples[-1] * calls / 1e3
    phases["samples_s"] = time.perf_counter() - started
    stats = summarize(samples, method=method, calls_per_sample=calls, l2=opts.l2)
    return Timing(stats.model_copy(update={"settle_ms": 0.0}), phases)


def _settle_and_sample(
    batch_us: Callable[[], float],
    calls: int,
    opts: TimingOptions,
    settled: Optional[Callable[[], None]],
    method: str,
    floor_ms: Optional[float] = None,
    clock=None,
) -> Timing:
    """Settle (`settle`, at least `floor_ms`, default `settle_ms`), tell `settled`, then take samples
    (`batch_us()`: the per-call time of one timed batch of `calls` calls) until the interval is narrow
    enough or the budget is spent. The settled tail (Settled) is the first of the samples. `clock`: a
    StreamClock stamped before every batch and after the last; the samples' SM clock goes to its
    `window_mhz`."""
    floor = opts.settle_ms if floor_ms is None else floor_ms
    stamps: list[int] = []
    if clock is not None:
        clock.reset()
        unstamped = batch_us

        def batch_us() -> float:
            stamps.append(clock.stamp())
            return unstamped()

    t0 = time.perf_counter()
    done = _settle(batch_us, calls, floor, opts.settle_ms)
    settle_end = len(stamps)
    if settled is not None:
        settled()
    started = done.tail_started if done.tail else time.perf_counter()
    phases = {"settle_s": started - t0}
    samples = done.tail[-opts.max_samples :]
    first_stamp = settle_end - len(samples)  # the stamp before the first sample's batch
    tail_ms = sum(samples) * calls / 1e3  # a tail beyond max_samples: its first batches count as settling
    while not _enough(samples, opts, started):
        samples.append(batch_us())
    phases["samples_s"] = time.perf_counter() - started
    if clock is not None:
        end = clock.stamp()
        import torch

        torch.cuda.synchronize()
        clock.window_mhz = clock.mhz(stamps[first_stamp], end) if first_stamp < len(stamps) else None
    stats = summarize(samples, method=method, calls_per_sample=calls, l2=opts.l2)
    return Timing(stats.model_copy(update={"settle_ms": round(done.spent_ms - tail_ms, 1)}), phases)


class Settled(NamedTuple):
    """What settling ran: `spent_ms` of GPU time in all, and its settled tail: the latest third of its
    batches, which the stopping rule found within SETTLE_TOL of the third before, so the GPU already held
    the state the samples are taken in (empty when settling is off, or stopped at its limit still
    drifting). `tail_started`: perf_counter() when the tail's first batch began."""

    spent_ms: float
    tail: list[float]
    tail_started: float


def settle(per_call_us: Callable[[], float], calls: int, settle_ms: float, limit_ms: Optional[float] = None) -> float:
    """Run the case (`per_call_us()`: one timed batch of `calls` calls, its per-call time) until the GPU is
    in the case's own steady state (module docstring): at least `settle_ms` of GPU time, then until the
    latest third of the batches agrees with the middle third within SETTLE_TOL, at most
    SETTLE_MAX_FACTOR x `limit_ms` (default `settle_ms`). Counted in GPU time, not wall time, so a slow
    host does not shorten it. Returns the GPU milliseconds spent."""
    return _settle(per_call_us, calls, settle_ms, limit_ms).spent_ms


def drifting(seen: list[float]) -> bool:
    """Whether the median of the latest third of `seen` still differs from the middle third's by more than
    SETTLE_TOL (settling's stopping rule; at least 3 values)."""
    third = len(seen) // 3
    latest, middle = statistics.median(seen[-third:]), statistics.median(seen[-2 * third : -third])
    return abs(latest / middle - 1) > SETTLE_TOL


def _settle(
    per_call_us: Callable[[], float], calls: int, settle_ms: float, limit_ms: Optional[float] = None
) -> Settled:
    """`settle`, with its settled tail (Settled)."""
    limit_ms = settle_ms if limit_ms is None else limit_ms
    if limit_ms <= 0:
        return Settled(0.0, [], time.perf_counter())
    seen: list[float] = []
    began: list[float] = []
    spent_ms = 0.0
    while spent_ms < SETTLE_MAX_FACTOR * limit_ms:
        began.append(time.perf_counter())
        seen.append(per_call_us())
        spent_ms += seen[-1] * calls / 1e3
        if spent_ms >= settle_ms and len(seen) >= 6:
            if not drifting(seen):
                third = len(seen) // 3
                return Settled(spent_ms, seen[-third:], began[-third])
    return Settled(spent_ms, [], time.perf_counter())


def _warm_up(fn: Callable[[int], object], n_sets: int, opts: TimingOptions, stream) -> None:
    """Eager calls on `stream` for `warmup_ms` (at least 3): JIT builds, autotuners and lazy workspace
    allocations happen here, untimed."""
    import torch

    deadline = time.perf_counter() + opts.warmup_ms / 1e3
    calls = 0
    with torch.cuda.stream(stream):
        while calls < 3 or time.perf_counter() < deadline:
            fn(calls % n_sets)
            calls += 1
            if calls % 8 == 0:
                torch.cuda.synchronize()
    torch.cuda.synchronize()


def _capture(fn: Callable[[int], object], calls: int, n_sets: int, stream):
    """A CUDA graph, captured on `stream` (already warmed up), of `calls` back-to-back calls rotating
    through the input sets."""
    import torch

    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            fn(i % n_sets)
    torch.cuda.synchronize()
    return graph
