"""Order independence of the worker's GPU timing (worker/measure/timing.py), on the CPU, with the simulated
`torch.cuda` of tests/support/simcuda.py standing in for the GPU (issue 21): a sweep timed forward, reversed
and shuffled in a fresh "process" each must give every case the same median, and the first case of a process
must read what it reads anywhere else. Settling, sampling, CUPTI mode and a kept graph's later rounds too."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch
from support.simcuda import COMPUTE_US, GAP_US, L2_BYTES, MISS_US, SERIAL, SimGpu, graphs_counted, install

from worker.contract.schema import CaseSpec, TimingOptions
from worker.measure import timing
from worker.measure.tuning import TUNING, Tuning
from worker.sweep.runner import CaseRunner

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
        sets = [next(SERIAL) for _ in range(n_sets)]  # fresh allocations: never in the simulated L2 yet
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

    def traced(replay, calls_per_replay, replays, lead_in_ms=None):
        asked.update(replay=replay, calls=calls_per_replay, replays=replays, lead_in_ms=lead_in_ms)
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
    assert asked == {"replay": graph.replay, "calls": 64, "replays": 12, "lead_in_ms": TUNING.cupti_lead_in_ms}
    assert stats.method == "cupti" and stats.median_us == 9.0 and stats.n == 12
    assert stats.replay_median_us == 10.1 and stats.settle_ms == 12.5 and stats.calls_per_sample == 64
    assert timed.notes == ("CUPTI stays attached",) and "cupti_s" in timed.phases  # the runner: the case's reason


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
