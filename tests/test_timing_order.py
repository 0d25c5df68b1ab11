"""Order independence of the worker's GPU timing, on the CPU: a simulated `torch.cuda` with a
deterministic clock stands in for the GPU (issue 21).

The simulation models what was measured on an H200 (benchmarks/gpu_state/first_case.py) and what cold-L2 timing
must defeat:
- every kernel call costs `COMPUTE_US`, plus `MISS_US` when its input set is not in a 50 MB LRU "L2";
- between consecutive nodes of a graph the GPU spends `GAP_US`, but only `FIRST_GAP_US` while the
  process has run the library eagerly on at most one stream other than the default one (on the H200,
  cuBLAS graphs read ~1 us per call low in that state, and normal for the rest of the process once a
  second such stream had run it: RESULTS.md, issue 21).
- optionally (`SimGpu(tau_us=...)`), a clock and power state that follows the load: a call is slower by
  `throttle`, which relaxes towards the running kernel's own `heat` with time constant `tau_us` (on the
  H200 a large GEMM read up to 5% slower after a heavy case than after light ones).
A sweep timed forward, reversed and shuffled in a fresh "process" each must give every case the same
median, and the first case of a process must read what it reads anywhere else.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch

from worker.contract.schema import CaseSpec, TimingOptions
from worker.measure import timing
from worker.measure.tuning import TUNING, Tuning
from worker.sweep.runner import CaseRunner

L2_BYTES = 50 * 2**20
COMPUTE_US = 10.0
MISS_US = 2.0
GAP_US = 1.0
FIRST_GAP_US = 0.0


class SimGpu:
    """The state of one simulated process: its clock, L2, streams and the graph being captured."""

    def __init__(self, tau_us: float | None = None):
        self.tau_us = tau_us  # None: no clock/power state
        self.throttle = 0.0
        self.now_us = 0.0
        self.l2: OrderedDict = OrderedDict()  # input set id -> bytes, least recently used first
        self.default = self.current = SimStream(self)
        self.capturing: list | None = None
        self.eager_streams: set = set()  # non-default streams that ran the library eagerly

    def touch(self, set_id, nbytes: int, heat: float = 0.0) -> float:
        """Cost of one call on this input set, updating the LRU (and the clock state, when modelled)."""
        hit = set_id in self.l2
        self.l2.pop(set_id, None)
        self.l2[set_id] = nbytes
        while sum(self.l2.values()) > L2_BYTES:
            self.l2.popitem(last=False)
        cost = COMPUTE_US + (0.0 if hit else MISS_US)
        if self.tau_us is None:
            return cost
        cost *= 1 + self.throttle
        self.throttle += (heat - self.throttle) * -math.expm1(-cost / self.tau_us)
        return cost

    def call(self, set_id, nbytes: int, heat: float = 0.0) -> None:
        if self.capturing is not None:
            self.capturing.append((set_id, nbytes, heat))
        else:  # eager: runs now, and the library has now run on this stream
            if self.current is not self.default:
                self.eager_streams.add(self.current.serial)
            self.now_us += self.touch(set_id, nbytes, heat) + GAP_US


_SERIAL = itertools.count()  # ids of simulated streams and input sets: id() of a freed object is reused


class SimStream:
    def __init__(self, gpu: SimGpu):
        self.gpu = gpu
        self.serial = next(_SERIAL)

    def wait_stream(self, other) -> None:
        pass


class SimGraph:
    def __init__(self, gpu: SimGpu):
        self.gpu = gpu
        self.nodes: list = []
        self.gap_us = GAP_US

    def replay(self) -> None:
        for set_id, nbytes, heat in self.nodes:
            self.gpu.now_us += self.gpu.touch(set_id, nbytes, heat) + self.gap_us


def install(monkeypatch, gpu: SimGpu) -> None:
    """Point the torch.cuda calls that worker.measure.timing makes at the simulation."""
    from contextlib import contextmanager

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self, stream=None):
            self.at = gpu.now_us

        def synchronize(self):
            pass

        def elapsed_time(self, end) -> float:
            return (end.at - self.at) / 1e3  # ms, as torch reports it

    @contextmanager
    def stream(s):
        before, gpu.current = gpu.current, s
        try:
            yield
        finally:
            gpu.current = before

    @contextmanager
    def graph(g, stream=None):
        s = stream or gpu.current
        g.gap_us = GAP_US if len(gpu.eager_streams) > 1 else FIRST_GAP_US
        gpu.capturing, before, gpu.current = g.nodes, gpu.current, s
        try:
            yield
        finally:
            gpu.capturing, gpu.current = None, before

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: gpu.current)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: SimStream(gpu))
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda *a, **k: SimGraph(gpu))
    monkeypatch.setattr(torch.cuda, "graph", graph)


SHAPES = [(16, 2048, 6144), (64, 2048, 6144), (256, 2048, 6144), (1024, 2048, 6144), (16, 768, 6144), (128, 768, 6144)]


def sweep_in_fresh_process(
    monkeypatch, cases: list[CaseSpec], heat: dict | None = None, tau_us: float | None = None
) -> dict[str, float]:
    """Each case timed as the worker times it (its input-set count from CaseRunner, its warm-up,
    probe, capture, settling and replays from worker.measure.timing), in one simulated process (a fresh
    Timer: its capture stream, priming pass and last load are the process's): case id -> median us.
    `heat` (case id -> steady slowdown) with `tau_us` models the clock and power state."""
    gpu = SimGpu(tau_us)
    heat = heat or {}
    install(monkeypatch, gpu)
    runner = CaseRunner.__new__(CaseRunner)
    runner.device = SimpleNamespace(device="cuda", l2_bytes=L2_BYTES)
    timer = timing.Timer()
    medians = {}
    for case in cases:
        n_sets = runner._input_sets(case, "bf16")
        per_set = (case.m + case.n) * case.k * 2
        sets = [next(_SERIAL) for _ in range(n_sets)]  # fresh allocations: never in the simulated L2 yet
        h = heat.get(case.case_id, 0.0)
        timed = timer.time_cuda(
            lambda i, sets=sets, per_set=per_set, h=h: gpu.call(sets[i], per_set, h), n_sets, case.timing
        )
        medians[case.case_id] = timed.stats.median_us
    return medians


@pytest.mark.parametrize("l2", ["cold", "hot"])
def test_a_case_reads_the_same_first_last_or_anywhere_in_the_sweep(monkeypatch, l2):
    opts = TimingOptions(l2=l2, warmup_ms=0, budget_s=5, rounds=1)
    cases = [CaseSpec(backend="torch-bf16", m=m, n=n, k=k, timing=opts) for m, n, k in SHAPES]
    shuffled = cases[:]
    random.Random(7).shuffle(shuffled)
    forward = sweep_in_fresh_process(monkeypatch, cases)
    backward = sweep_in_fresh_process(monkeypatch, cases[::-1])
    mixed = sweep_in_fresh_process(monkeypatch, shuffled)
    expected = COMPUTE_US + GAP_US + (MISS_US if l2 == "cold" else 0.0)
    for case in cases:
        got = (forward[case.case_id], backward[case.case_id], mixed[case.case_id])
        assert got == pytest.approx((expected,) * 3, rel=1e-9), (case.m, case.n, got)


@pytest.mark.parametrize(
    "variant",
    ["warm-up on the current stream, capture elsewhere (before issue 21)", "warm-up on the capture stream only"],
)
def test_the_simulation_catches_a_worker_that_favours_the_first_case_or_times_an_unrepresentative_state(
    monkeypatch, variant
):
    """The test above can fail. The worker's code before issue 21 (warm-up on the current stream, one
    call on a fresh side stream, capture on another stream) made the first case of a process read low,
    as on the H200; warming up on the capture stream alone reads every case low (the order agrees, but
    a process with more than one stream never sees those numbers)."""

    def time_cuda_variant(timer, fn, n_sets, opts):
        if variant.startswith("warm-up on the current"):
            timing._warm_up(fn, n_sets, opts, torch.cuda.current_stream())
            with torch.cuda.stream(torch.cuda.Stream()):
                fn(0)
            capture = torch.cuda.Stream()
        else:
            capture = timer.capture_stream()
            timing._warm_up(fn, n_sets, opts, capture)
        g = timing._capture(fn, -(-64 // n_sets) * n_sets, n_sets, capture)
        start, end = torch.cuda.Event(), torch.cuda.Event()
        start.record()
        g.replay()
        end.record()
        return SimpleNamespace(stats=SimpleNamespace(median_us=start.elapsed_time(end) * 1e3 / len(g.nodes)))

    opts = TimingOptions(l2="cold", warmup_ms=0, budget_s=5, rounds=1)
    cases = [CaseSpec(backend="torch-bf16", m=m, n=n, k=k, timing=opts) for m, n, k in SHAPES[:2]]
    monkeypatch.setattr(timing.Timer, "time_cuda", time_cuda_variant)
    forward = sweep_in_fresh_process(monkeypatch, cases)
    backward = sweep_in_fresh_process(monkeypatch, cases[::-1])
    normal = COMPUTE_US + GAP_US + MISS_US
    first, second = cases
    if variant.startswith("warm-up on the current"):
        assert forward[first.case_id] < backward[first.case_id] == pytest.approx(normal, rel=0.01)
        assert backward[second.case_id] < forward[second.case_id] == pytest.approx(normal, rel=0.01)
    else:
        assert forward == backward and all(v < 0.95 * normal for v in forward.values())


def test_cold_l2_rotation_spans_enough_sets_that_no_call_hits(monkeypatch):
    """Cold means every timed call misses the simulated L2, small shapes included."""
    opts = TimingOptions(l2="cold", warmup_ms=0, budget_s=5, rounds=1)
    for m, n, k in SHAPES:
        case = CaseSpec(backend="torch-bf16", m=m, n=n, k=k, timing=opts)
        medians = sweep_in_fresh_process(monkeypatch, [case])
        assert medians[case.case_id] == pytest.approx(COMPUTE_US + GAP_US + MISS_US, rel=1e-9), (m, n, k)


def test_every_round_runs_the_lightest_case_first_whatever_order_the_sweep_lists():
    """A case's predecessor is the same in every run of a sweep (forward, reversed or shuffled in the
    file), so no round's value depends on the order the user wrote: light cases first, the heaviest last,
    ties by case id."""
    import random

    from worker.contract.schema import CaseSpec
    from worker.sweep.runner import round_order

    todo = [CaseSpec(backend=b, m=m, n=2048, k=6144) for m in (16, 64, 256, 1024) for b in ("torch-bf16", "torch-fp8")]
    load = {c.case_id: c.m / 1024 * (0.5 if c.backend == "torch-fp8" else 1.0) for c in todo}
    shuffled = list(todo)
    random.Random(7).shuffle(shuffled)
    orders = [round_order(o, lambda c: load[c.case_id]) for o in (todo, todo[::-1], shuffled)]
    assert orders[0] == orders[1] == orders[2]
    assert [load[c.case_id] for c in orders[0]] == sorted(load.values())
    assert orders[0][-1].m == 1024 and orders[0][-1].backend == "torch-bf16"


def test_rounds_are_ranked_by_measured_load_once_measured(tmp_path, monkeypatch):
    """Round 1 is ranked by each case's math at the calibrated peak (a prediction); later rounds by what
    round 1 measured: a case that turned out slow (light load) moves ahead of one that ran at its peak."""
    from worker.contract.schema import Calibration, CaseRecord, CaseSpec, RoundStats, Stats, TimingOptions
    from worker.sweep import runner as runner_mod

    opts = TimingOptions(rounds=2)
    big = CaseSpec(backend="torch-bf16", m=1024, n=2048, k=6144, timing=opts)
    small = CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144, timing=opts)
    oracle = CaseSpec(backend="reference-nvfp4", m=1024, n=2048, k=6144, timing=opts)
    r = runner_mod.CaseRunner("cpu")
    r.calibration = Calibration(key="k", measured_at="t", cached=False, tflops={"bf16": 800.0}, tb_s=4.0)
    seen: list[tuple[int, str]] = []
    measured = {big.case_id: 1000.0, small.case_id: 12.0, oracle.case_id: 700.0}  # big: far off its peak

    def run(case):
        seen.append((1, case.case_id))
        stats = Stats(
            method="cpu-wallclock",
            median_us=measured[case.case_id],
            p10_us=1,
            p90_us=1,
            mean_us=1,
            stdev_us=0,
            n=3,
            rel_ci=0.0,
            calls_per_sample=1,
            l2="hot",
            samples_us=[1.0],
        )
        return CaseRecord(
            case_id=case.case_id,
            case=case,
            status="ok",
            started_at="t",
            duration_s=0.0,
            timing=stats.model_copy(update={"rounds": [RoundStats(median_us=stats.median_us, n=3, rel_ci=0.0)]}),
        )

    def again(case, calls_per_sample=0):
        seen.append((2, case.case_id))
        rec = run(case)
        seen.pop()
        return rec.timing, None, 0.0

    monkeypatch.setattr(r, "run", run)
    monkeypatch.setattr(r, "again", again)
    runner_mod._run_cases(r, [big, oracle, small], set(), 3, tmp_path / "r.jsonl", tmp_path / "inflight")
    first = [cid for rnd, cid in seen if rnd == 1]
    second = [cid for rnd, cid in seen if rnd == 2]
    assert first == [oracle.case_id, small.case_id, big.case_id]  # the oracle is off the tensor cores: 0
    # at 800 TFLOPS big's math takes 32 us: 0.8 of the peak predicted, 0.03 measured; small's 0.04
    assert second == [oracle.case_id, big.case_id, small.case_id]


def test_light_cases_settle_briefly_and_heavy_ones_and_their_successors_fully():
    """Settling lasts as long as the GPU state needs (worker/measure/timing.py): a light case after a light one
    runs at the clock it found; a heavy case (or one of unknown load) reads its burst clock until the power
    controller acts; a light case right after a heavy one waits for the clock to climb back. What the last
    case was is the process's Timer's, and the values are its Tuning's."""
    timer = timing.Timer()
    assert timer.settle_floor(100.0, 0.1) == TUNING.light_settle_ms
    assert timer.settle_floor(100.0, 0.2) == TUNING.light_settle_ms
    assert timer.settle_floor(100.0, TUNING.heavy_load) == 100.0
    assert timer.settle_floor(100.0, 0.1) == 100.0  # right after the heavy one
    assert timer.settle_floor(100.0, 0.1) == TUNING.light_settle_ms
    assert timer.settle_floor(100.0, None) == 100.0  # unknown load: as heavy
    assert timer.settle_floor(0.0, 0.1) == 0.0  # settling off stays off
    assert timing.Timer().settle_floor(100.0, 0.1) == TUNING.light_settle_ms  # another process: its own history
    other = timing.Timer(Tuning(heavy_load=0.05, light_settle_ms=20.0))  # a GPU tuned otherwise
    assert other.settle_floor(100.0, 0.04) == 20.0 and other.settle_floor(100.0, 0.1) == 100.0


@pytest.mark.parametrize("settle_ms", [0.0, 100.0])
def test_settling_measures_each_case_in_its_own_clock_state_whatever_ran_before(monkeypatch, settle_ms):
    """The neighbour effect of the H200 (a large GEMM 34.7 us after light cases, 35.8-37.2 after a heavy
    one), modelled as a clock state with a 20 ms time constant that heavy kernels pull 5% down. Without
    settling, a heavy case sampled right after its warm-up reads what its predecessor left: forward and
    reversed sweeps disagree by more than 1%. With the worker's default settling (100 ms of its own
    graph, then until it stops drifting) every case reads its own steady state in every order."""
    heats = [0.0, 0.05, 0.0, 0.05, 0.05, 0.0]
    opts = TimingOptions(l2="cold", warmup_ms=0, budget_s=5, rounds=1, settle_ms=settle_ms)
    cases = [CaseSpec(backend="torch-bf16", m=m, n=n, k=k, timing=opts) for m, n, k in SHAPES]
    heat = {c.case_id: h for c, h in zip(cases, heats)}
    shuffled = cases[:]
    random.Random(3).shuffle(shuffled)
    runs = [
        sweep_in_fresh_process(monkeypatch, order, heat, tau_us=20_000.0) for order in (cases, cases[::-1], shuffled)
    ]
    gaps = {c.case_id: max(r[c.case_id] for r in runs) / min(r[c.case_id] for r in runs) - 1 for c in cases}
    if settle_ms == 0:
        assert max(gaps.values()) > 0.01
    else:
        assert max(gaps.values()) < 0.002, gaps
        steady = COMPUTE_US + MISS_US
        for case in cases:  # and what it reads is the case's own steady state
            want = steady * (1 + heat[case.case_id]) + GAP_US
            assert runs[0][case.case_id] == pytest.approx(want, rel=0.003)


def test_settle_stops_when_the_case_stops_drifting_and_never_runs_forever():
    """GPU time counted from the batches themselves: a steady kernel stops at settle_ms; one relaxing
    with a 50 ms time constant runs until its drift is within SETTLE_TOL; one that drifts for ever stops
    at SETTLE_MAX_FACTOR x settle_ms."""

    def kernel(per_call):
        state = {"t_us": 0.0}

        def batch() -> float:
            us = per_call(state["t_us"])
            state["t_us"] += us * 100
            return us

        return batch

    assert timing.settle(kernel(lambda t: 10.0), 100, 100.0) == pytest.approx(100.0, abs=1.0)
    relaxing = timing.settle(kernel(lambda t: 10.0 * (1 + 0.05 * math.exp(-t / 50_000))), 100, 100.0)
    assert 100.0 < relaxing < 1000.0
    drifting = timing.settle(kernel(lambda t: 10.0 * (1 + t / 1e5)), 100, 100.0)
    assert drifting == pytest.approx(timing.SETTLE_MAX_FACTOR * 100.0, rel=0.05)
    assert timing.settle(kernel(lambda t: 10.0), 100, 0.0) == 0.0


def test_the_settled_tail_is_the_first_of_the_samples_and_a_drifting_one_is_not():
    """The batches that ended settling (the latest third, found drift-free against the third before) were
    already timed in the state the samples are taken in: they count as samples, so a round only times
    what it still needs. A kernel stopped at the settling limit while drifting gives none: its samples are
    all taken after it. The reported settle_ms is what ran before the samples."""

    def kernel(per_call):
        state = {"t_us": 0.0, "batches": 0}

        def batch() -> float:
            us = per_call(state["t_us"])
            state["t_us"] += us * 100
            state["batches"] += 1
            return us

        return batch, state

    opts = TimingOptions(min_samples=10, max_samples=200, target_rel_ci=0.01, budget_s=5, settle_ms=100.0)
    # A heavy case: 100 ms of 1 ms batches, the thirds agree at the 100th; its tail (33) is enough samples.
    steady, state = kernel(lambda t: 10.0)
    stats = timing._settle_and_sample(steady, 100, opts, None, "cuda-graph").stats
    assert (stats.n, state["batches"]) == (33, 100)
    assert stats.settle_ms == pytest.approx(67.0, abs=0.01)
    # With fewer samples allowed than the tail holds, the tail's first batches count as settling.
    steady, state = kernel(lambda t: 10.0)
    few = opts.model_copy(update={"max_samples": 20})
    stats = timing._settle_and_sample(steady, 100, few, None, "cuda-graph").stats
    assert (stats.n, state["batches"]) == (20, 100) and stats.settle_ms == pytest.approx(80.0, abs=0.01)
    # A light one: 10 ms of 2 ms batches, settled at the 6th; its tail of 2 and 8 more make the 10 samples.
    light, state = kernel(lambda t: 20.0)
    stats = timing._settle_and_sample(light, 100, opts, None, "cuda-graph", floor_ms=10.0).stats
    assert (stats.n, state["batches"]) == (10, 14)
    assert stats.settle_ms == pytest.approx(8.0, abs=0.01)
    # One that never stops drifting: every sample is taken after settling gave up.
    drifting, state = kernel(lambda t: 10.0 * (1 + t / 1e5))
    stats = timing._settle_and_sample(drifting, 100, opts, None, "cuda-graph").stats
    alone, settling = kernel(lambda t: 10.0 * (1 + t / 1e5))
    settled = timing._settle(alone, 100, 100.0)
    assert settled.tail == [] and state["batches"] == settling["batches"] + stats.n
    assert stats.settle_ms == pytest.approx(settled.spent_ms, abs=0.1)


@pytest.mark.parametrize("clocks, tainted", [((1980, 1500, 1490), False), ((1980, 1980, 1500), True)])
def test_health_is_judged_over_the_samples_not_over_the_settling(monkeypatch, clocks, tainted):
    """Settling lets a heavy GEMM bring the GPU to its power-limited clock (1980 -> ~1500 MHz on the
    H200); that fall is the state the case is measured in, not a throttled measurement. A fall during
    the samples still taints. Snapshots: before the warm-up, after settling, after the samples."""
    from worker.contract.schema import HealthSnapshot

    gpu = SimGpu()
    install(monkeypatch, gpu)
    runner = CaseRunner.__new__(CaseRunner)
    runner.device = SimpleNamespace(device="cuda", l2_bytes=L2_BYTES)
    readings = iter(clocks)
    runner.probe = SimpleNamespace(snapshot=lambda: HealthSnapshot(sm_clock_mhz=next(readings)))
    runner.timer = timing.Timer()
    case = CaseSpec(
        backend="torch-bf16", m=64, n=256, k=256, timing=TimingOptions(warmup_ms=0, budget_s=1, rounds=1, settle_ms=5)
    )
    sets = [object() for _ in range(4)]
    stats, health, _ = runner._time(case, lambda i: gpu.call(id(sets[i]), 1 << 20), len(sets))
    assert health.tainted is tainted and stats.settle_ms >= 5
    assert health.before.sm_clock_mhz == clocks[1]


def test_burst_samples_after_a_cool_down_and_stop_before_the_power_controller_acts(monkeypatch):
    """`timing.state: burst` idles `cooldown_ms`, tells `settled` (the health reading then is the burst
    clock), and samples for at most Tuning.burst_gpu_ms of GPU time, never settling."""
    from worker.contract.schema import TimingOptions

    slept, events = [], []
    monkeypatch.setattr(timing.time, "sleep", lambda s: (slept.append(s), events.append("sleep")))
    calls = 100

    def batch_us() -> float:
        events.append("sample")
        return 50.0  # 100 calls of 50 us: 5 ms of GPU time a batch

    opts = TimingOptions(state="burst", cooldown_ms=300.0, min_samples=50, max_samples=200, budget_s=10.0)
    timed = timing._burst_sample(batch_us, calls, opts, lambda: events.append("settled"), "cuda-graph", 40.0)
    assert slept == [0.3] and events[:2] == ["sleep", "settled"]
    assert timed.stats.n == 40.0 / 5.0 and timed.stats.settle_ms == 0.0  # stopped by GPU time, not by n
    assert set(timed.phases) == {"cooldown_s", "samples_s"}


def test_cupti_mode_samples_the_kernels_of_the_timed_graph_and_keeps_its_replay_time_beside(monkeypatch):
    """`timing.mode: cupti` times the same graph by CUPTI's trace right after its event-timed samples: each
    sample is a call's summed kernel time; the replay median stays beside it (the difference is launch
    gaps), and the settling is the replay timing's."""
    from worker.contract.schema import TimingOptions
    from worker.contract.stats import summarize
    from worker.measure import cupti

    asked = {}

    def traced(replay, calls_per_replay, replays, lead_in_ms=cupti.LEAD_IN_MS):
        asked.update(replay=replay, calls=calls_per_replay, replays=replays)
        return cupti.KernelSamples(
            per_call_us=[9.0, 9.1, 8.9] * 4,
            span_us=[9.5] * 12,
            kernels=["gemm"],
            split_by="launch",
            notes=["CUPTI stays attached"],
        )

    monkeypatch.setattr(cupti, "kernel_samples_us", traced)

    class Graph:
        def replay(self):
            pass

    graph = Graph()
    replayed = summarize([10.0, 10.2, 10.1], method="cuda-graph", calls_per_sample=64, l2="cold")
    replayed = replayed.model_copy(update={"settle_ms": 12.5})
    opts = TimingOptions(mode="cupti", min_samples=12)
    timed = timing._kernel_time(graph, 64, opts, replayed)
    stats = timed.stats
    assert asked == {"replay": graph.replay, "calls": 64, "replays": 12}
    assert stats.method == "cupti" and stats.median_us == 9.0 and stats.n == 12
    assert stats.replay_median_us == 10.1 and stats.settle_ms == 12.5 and stats.calls_per_sample == 64
    assert timed.notes == ("CUPTI stays attached",) and "cupti_s" in timed.phases  # the runner: the case's reason


def graphs_counted(monkeypatch, **timing_fields):
    """A simulated GPU whose every CUDA graph is counted: (gpu, graphs built, a cold-L2 torch-bf16 case
    with `timing_fields`, its input sets, its call on set i)."""
    gpu = SimGpu()
    install(monkeypatch, gpu)
    graphs = []
    real_graph = torch.cuda.CUDAGraph
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda *a, **k: graphs.append(real_graph()) or graphs[-1])
    runner = CaseRunner.__new__(CaseRunner)
    runner.device = SimpleNamespace(device="cuda", l2_bytes=L2_BYTES)
    case = CaseSpec(
        backend="torch-bf16",
        m=64,
        n=2048,
        k=6144,
        timing=TimingOptions(l2="cold", warmup_ms=0, budget_s=5, **timing_fields),
    )
    n_sets = runner._input_sets(case, "bf16")
    sets = [next(_SERIAL) for _ in range(n_sets)]
    per_set = (case.m + case.n) * case.k * 2

    def fn(i):
        return gpu.call(sets[i], per_set)

    return gpu, graphs, case, n_sets, fn


def test_a_later_round_replays_the_graph_its_first_round_built_and_reads_the_same(monkeypatch):
    """A case's first round builds its timed graph (warm-up, probe, capture) and hands it to `keep`; a later
    round given that graph replays it without warming up or capturing again, settles it and reads what a
    fresh build reads."""
    gpu, graphs, case, n_sets, fn = graphs_counted(monkeypatch, rounds=3)
    kept = []
    timer = timing.Timer()
    first = timer.time_cuda(fn, n_sets, case.timing, keep=kept.append)
    built = len(graphs)
    assert len(kept) == 1 and built >= 2  # the priming pass's, the probe's, the timed graph
    assert list(first.phases) == ["warmup_s", "capture_s", "settle_s", "samples_s"]
    later = [timer.time_cuda(fn, n_sets, case.timing, graph=kept[0]) for _ in range(2)]
    assert len(graphs) == built  # nothing captured again
    assert all(t.phases["warmup_s"] == t.phases["capture_s"] == 0.0 for t in later)
    assert [t.stats.median_us for t in later] == pytest.approx([first.stats.median_us] * 2, rel=1e-9)
    assert all(t.stats.calls_per_sample == first.stats.calls_per_sample for t in later)


@pytest.mark.parametrize("mode", ["graph", "cupti"])
def test_crosscheck_settles_and_traces_the_graph_fleetbench_timed_without_capturing_it_again(monkeypatch, mode):
    """worker/tools/crosscheck.py CaseBench: fleetbench's timing of the case builds its graph once; settling
    before a peer (and CUPTI) replays that graph, so no capture follows the timing, in `timing.mode: cupti`
    too, whose figure is named for what it is (kernel time, not a replay; never per-call events)."""
    from worker.measure import cupti
    from worker.tools.crosscheck import CaseBench

    monkeypatch.setattr(cupti, "available", lambda: None)
    monkeypatch.setattr(
        cupti,
        "kernel_samples_us",
        lambda replay, calls, replays, lead_in_ms=0: cupti.KernelSamples(
            per_call_us=[9.0] * replays, span_us=[9.5] * replays, kernels=["gemm"], split_by="launch", notes=[]
        ),
    )
    gpu, graphs, case, n_sets, fn = graphs_counted(monkeypatch, mode=mode, rounds=1)
    timed_with = []  # graphs built when fleetbench's timing returned
    real_time_cuda = timing.Timer.time_cuda

    def time_cuda(*args, **kwargs):
        timed = real_time_cuda(*args, **kwargs)
        timed_with.append(len(graphs))
        return timed

    monkeypatch.setattr(timing.Timer, "time_cuda", time_cuda)
    bench = CaseBench(fn, n_sets, case)
    ours = bench.fleetbench(cupti=False)
    built = len(graphs)
    assert built == timed_with[-1]  # nothing captured after the timing
    assert bench.graph is graphs[-1] and bench.calls == ours.calls_per_sample == len(bench.graph.nodes)
    assert ours.method.launch == (
        f"graph replay of {ours.calls_per_sample} calls"
        if mode == "graph"
        else f"kernel time (CUPTI) of a graph of {ours.calls_per_sample} calls, no launch gaps"
    )
    before = gpu.now_us
    bench.settle()
    assert len(graphs) == built and gpu.now_us - before >= case.timing.settle_ms * 1e3  # replayed, not captured
