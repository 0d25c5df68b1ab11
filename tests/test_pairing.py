"""Head-to-head timing and rounds until sure, without a GPU (issue 40): the interleaved order, settling
and sampling of worker/measure/interleave.py on stand-in graphs whose speed follows a shared simulated clock;
the paired interval of worker/contract/pairing.py; the stamp kernel's arithmetic; when a unit stops its rounds."""

from __future__ import annotations

import math
import random

import pytest

from worker.contract import pairing
from worker.contract.schema import CaseRecord, CaseSpec, RoundStats, Stats, TimingOptions
from worker.measure import interleave, streamclock
from worker.sweep.runner import rounds_decision


class SharedGpu:
    """A clock the whole group shares: it wanders slowly (a power controller), so two graphs timed apart
    read it differently, timed interleaved alike."""

    def __init__(self, seed: int, wander: float):
        self.rng = random.Random(seed)
        self.level = 1.0
        self.wander = wander

    def tick(self) -> float:
        self.level = min(1.15, max(0.85, self.level + self.rng.gauss(0, self.wander)))
        return self.level


class FakeGraph:
    def __init__(self, gpu: SharedGpu, us: float, order: list, name: str):
        self.gpu, self.us, self.order, self.name, self.calls = gpu, us, order, name, 100

    def replay_us(self) -> float:
        self.order.append(self.name)
        return self.us * self.gpu.tick() * (1 + random.gauss(0, 0.002))


def test_cycles_alternate_their_order_so_no_member_is_always_first():
    assert [interleave.cycle_order(2, c) for c in range(4)] == [[0, 1], [1, 0], [1, 0], [0, 1]]
    assert [interleave.cycle_order(3, c) for c in range(4)] == [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1]]
    # over each two, every pair of members trades places
    for c in range(0, 12, 2):
        first, second = interleave.cycle_order(3, c), interleave.cycle_order(3, c + 1)
        for a in range(3):
            for b in range(a + 1, 3):
                assert (first.index(a) < first.index(b)) != (second.index(a) < second.index(b))


def test_an_interleaved_pair_sees_a_2_percent_difference_that_a_wandering_clock_hides_from_each_alone():
    random.seed(1)
    gpu = SharedGpu(seed=2, wander=0.01)
    order: list = []
    a, b = FakeGraph(gpu, 10.0, order, "a"), FakeGraph(gpu, 10.2, order, "b")
    opts = TimingOptions(settle_ms=1.0, min_samples=10, max_samples=40, budget_s=5.0)
    timed = interleave.time_group([a, b], opts, floor_ms=1.0)
    sa, sb = timed.stats
    assert sa.n == sb.n and sa.n >= 10  # one sample of each per cycle
    assert order[:4] == ["a", "b", "b", "a"]
    assert sa.n % 2 == 0  # whole twos
    iv = pairing.pair_interval([[math.log(y / x) for x, y in zip(sa.samples_us, sb.samples_us)]])
    assert iv.low > 1.01 and iv.high < 1.03  # 1.02, seen through a clock that moves ±15%
    assert timed.cycle_mhz == []  # no stamp kernel: no cycle clocks


def test_the_paired_interval_takes_the_wider_of_between_and_within_round_scatter():
    tight = [[0.02 + 0.001 * ((i % 3) - 1) for i in range(30)] for _ in range(3)]
    iv = pairing.pair_interval(tight)
    assert iv.ratio == pytest.approx(math.exp(0.02), rel=1e-3) and iv.rounds == 3 and iv.pairs == 90
    assert iv.half_width < 0.001
    apart = [[0.0] * 30, [0.04] * 30]  # rounds disagree: t with 1 degree of freedom
    wide = pairing.pair_interval([[x + 1e-4 * (i % 2) for i, x in enumerate(r)] for r in apart])
    assert wide.low < 1.0 < wide.high and wide.half_width > 0.1
    assert pairing.pair_interval([[0.01, 0.02] * 2]) is None  # fewer than 3 twos: no interval
    # a place that reads 1% fast, alternating with the order: the twos cancel it
    placed = [[0.02 + (0.01 if i % 2 else -0.01) for i in range(20)]]
    assert pairing.pair_interval(placed).ratio == pytest.approx(math.exp(0.02))


def test_the_stamp_arithmetic_is_cycles_over_nanoseconds_per_sm_from_its_earliest_block():
    first = [(0, 1_000, 5_000), (0, 1_400, 9_999), (1, 1_000, 7_000)]
    second = [(0, 2_001_000, 3_005_000), (1, 2_001_000, 3_207_000), (2, 5, 5)]  # SM 2 only in one stamp
    mhz = sorted(streamclock.frequencies_mhz(first, second))
    assert mhz == pytest.approx([1500.0, 1600.0])
    assert streamclock.window_mhz(first, second) == pytest.approx(1550.0)
    assert streamclock.window_mhz(first, []) is None


def _record(
    rounds: list[tuple[float, float | None, str | None]],
    opts: TimingOptions,
    backend="torch-bf16",
    samples: list[list[float]] | None = None,
) -> CaseRecord:
    spec = CaseSpec(backend=backend, m=64, n=256, k=512, timing=opts)
    per_round = samples or [[us] * 10 for us, _, _ in rounds]
    stats = Stats(
        method="cuda-graph",
        median_us=rounds[0][0],
        p10_us=1,
        p90_us=1,
        mean_us=1,
        stdev_us=0,
        n=sum(map(len, per_round)),
        rel_ci=0.0,
        calls_per_sample=8,
        l2="cold",
        samples_us=[s for r in per_round for s in r],
        rounds=[
            RoundStats(
                median_us=us, n=len(s), rel_ci=0.0, sm_clock_stream_mhz=mhz, pair_id=pid, paired_us=s if pid else None
            )
            for (us, mhz, pid), s in zip(rounds, per_round)
        ],
    )
    return CaseRecord(
        case_id=spec.case_id, case=spec, status="ok", started_at="t", duration_s=0.0, timing=stats, complete=False
    )


def test_rounds_stop_when_sure_at_the_cap_or_at_a_fixed_count():
    opts = TimingOptions(rounds=4, min_rounds=2, round_target=0.01)
    assert rounds_decision([_record([(10.0, None, None)], opts)]) is None  # below min_rounds
    assert rounds_decision([_record([(10.0, None, None), (10.01, None, None)], opts)]) == "target"
    apart = [(10.0, None, None), (11.0, None, None)]
    assert rounds_decision([_record(apart, opts)]) is None  # 10% apart: another round
    assert rounds_decision([_record(apart * 2, opts)]) == "cap"
    fixed = TimingOptions(rounds=3, min_rounds=3)
    assert rounds_decision([_record(apart[:1] * 3, fixed)]) == "fixed"


def test_a_power_capped_case_whose_cycles_hold_still_is_sure_though_its_time_moves():
    opts = TimingOptions(rounds=4, min_rounds=2, round_target=0.01)
    # time x clock: 10.0 x 1500 and 11.0 x 1363.6 are the same 15000 cycles
    moved = [(10.0, 1500.0, None), (11.0, 15000.0 / 11.0, None)]
    assert rounds_decision([_record(moved, opts)]) == "target"
    moved_no_clock = [(10.0, None, None), (11.0, None, None)]
    assert rounds_decision([_record(moved_no_clock, opts)]) is None


def test_a_run_whose_rounds_agree_lends_a_two_round_case_the_confidence_its_own_two_rounds_lack():
    from worker.contract.pairing import log_variance, median_prior, work_per_round

    opts = TimingOptions(rounds=3, min_rounds=2, round_target=0.02)
    # 0.5% apart in time and in work: t with 1 degree of freedom makes that ±3.2%, not sure
    case = _record([(10.0, 1850.0, None), (10.05, 1850.0, None)], opts)
    assert rounds_decision([case]) is None
    quiet = [_record([(8.0 + i, 1850.0, None), ((8.0 + i) * 1.001, 1850.0, None)], opts) for i in range(5)]
    prior = median_prior([log_variance(work_per_round(r.timing)) for r in quiet])
    assert rounds_decision([case], prior) == "target"
    # a run whose rounds move 5% makes the case less sure, not more
    noisy = [_record([(8.0 + i, 1850.0, None), ((8.0 + i) * 1.05, 1850.0, None)], opts) for i in range(5)]
    assert rounds_decision([case], median_prior([log_variance(work_per_round(r.timing)) for r in noisy])) is None


def test_contenders_stop_together_only_when_their_head_to_head_interval_is_narrow_enough():
    opts = TimingOptions(rounds=4, min_rounds=2, round_target=0.05, pair_target=0.005)
    rng = random.Random(3)
    a_s = [[10.0 * (1 + rng.gauss(0, 0.001)) for _ in range(20)] for _ in range(2)]
    b_close = [[x * 1.02 for x in r] for r in a_s]
    a = _record([(10.0, None, "p1"), (10.0, None, "p2")], opts, samples=a_s)
    b = _record([(10.2, None, "p1"), (10.2, None, "p2")], opts, backend="torch-fp8", samples=b_close)
    assert rounds_decision([a, b]) == "target"
    b_noisy = [[x * (1.02 + rng.gauss(0, 0.05)) for x in r] for r in a_s]
    b = _record([(10.2, None, "p1"), (10.2, None, "p2")], opts, backend="torch-fp8", samples=b_noisy)
    assert rounds_decision([a, b]) is None


def test_a_units_graphs_are_paired_after_their_own_round_and_a_case_without_a_kept_graph_is_not():
    from types import SimpleNamespace

    from worker.sweep.headtohead import duel, units_of

    opts = TimingOptions(rounds=3, settle_ms=1.0)
    cases = [CaseSpec(backend=b, m=64, n=256, k=512, timing=opts) for b in ("torch-bf16", "torch-fp8", "mm")]
    oracle = CaseSpec(backend="reference-nvfp4", m=64, n=256, k=512, timing=opts)
    assert units_of(cases + [oracle], grouped=True) == [cases, [oracle]]  # an oracle is no contender
    assert units_of(cases, grouped=False) == [[c] for c in cases]
    gpu = SharedGpu(seed=5, wander=0.002)
    order: list = []
    graphs = {c.case_id: FakeGraph(gpu, 10.0 * (1 + i / 100), order, c.backend) for i, c in enumerate(cases)}
    for g in graphs.values():
        g.per_call_s = 10e-6
    runner = SimpleNamespace(
        kept={cid: SimpleNamespace(graph=g) for cid, g in graphs.items() if cid != cases[2].case_id},
        load_share=lambda case, spec, us: 0.1,
        clock=None,
    )
    records = [_record([(10.0, None, None)], opts, backend=c.backend) for c in cases]
    paired = duel(runner, records, lambda case: SimpleNamespace(name=case.backend))
    a, b, alone = (r.timing.rounds[-1] for r in paired)
    assert a.pair_id and a.pair_id == b.pair_id and alone.pair_id is None and alone.paired_us is None
    assert len(a.paired_us) == len(b.paired_us) >= 12 and "pair_s" in a.timing_phases
    iv = pairing.pair_interval(pairing.paired_rounds(paired[0].timing, paired[1].timing))
    assert iv.low < 1.01 < iv.high  # torch-fp8's stand-in is 1% slower
    assert paired[2] is records[2]  # unpaired: untouched


def test_the_supervisor_names_a_case_of_its_params_file_as_the_schema_does():
    from worker.contract.protocol import case_id_of_raw
    from worker.contract.schema import MoeSpec

    cases = [
        CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144),
        CaseSpec(backend="mm", m=64, n=768, k=6144, label="x", seed=3, out_dtype="float16", kernel_sha256="a" * 64),
        CaseSpec(
            workload="moe",
            backend="moe-loop-bf16",
            m=24,
            n=64,
            k=128,
            moe=MoeSpec(experts=4, top_k=2, routing="zipf", skew=1.2, counts=[10, 0, 20, 18]),
        ),
    ]
    for case in cases:
        assert case_id_of_raw(case.model_dump(mode="json")) == case.case_id


def test_a_pair_of_two_rounds_borrows_the_runs_between_round_spread():
    from worker.contract.pairing import pair_interval

    # two rounds whose estimates differ by 0.4%: t with 1 degree of freedom makes that about ±2.5%
    rounds = [[0.02 + 0.0005 * (-1) ** i for i in range(12)], [0.024 + 0.0005 * (-1) ** i for i in range(12)]]
    alone = pair_interval(rounds)
    assert alone.half_width > 0.02
    moderated = pair_interval(rounds, prior=0.001**2)
    assert moderated.half_width < 0.006 and moderated.low > 1.01  # a ~2.2% effect, sure
    assert abs(moderated.ratio - alone.ratio) < 1e-12  # the estimate is the same; only its interval moves
    noisy = pair_interval(rounds, prior=0.02**2)  # a run whose pairs move 2% between rounds
    assert noisy.half_width > alone.half_width / 4 and noisy.low < 1.0
