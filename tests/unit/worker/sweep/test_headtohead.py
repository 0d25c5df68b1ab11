"""The contenders of a shape as one unit of a round (worker/sweep/headtohead.py), on stand-in graphs."""

from __future__ import annotations

from support.roundrecords import rounds_record
from support.wanderingclock import FakeGraph, SharedGpu

from worker.contract import pairing
from worker.contract.schema import CaseSpec, TimingOptions


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
        clock=None,
    )
    records = [rounds_record([(10.0, None, None)], opts, backend=c.backend) for c in cases]
    paired = duel(runner, records)
    a, b, alone = (r.timing.rounds[-1] for r in paired)
    assert a.pair_id and a.pair_id == b.pair_id and alone.pair_id is None and alone.paired_us is None
    assert len(a.paired_us) == len(b.paired_us) >= 12 and "pair_s" in a.timing_phases
    iv = pairing.pair_interval(pairing.paired_rounds(paired[0].timing, paired[1].timing))
    assert iv.low < 1.01 < iv.high  # torch-fp8's stand-in is 1% slower
    assert paired[2] is records[2]  # unpaired: untouched


def test_a_heavy_units_pairs_settle_the_light_floor_its_members_having_just_loaded_the_gpu(monkeypatch):
    from types import SimpleNamespace

    from worker.measure import interleave
    from worker.measure.tuning import TUNING
    from worker.sweep.headtohead import duel

    opts = TimingOptions(rounds=3, settle_ms=100.0)
    records = [rounds_record([(40.0, None, None)], opts, backend=b) for b in ("torch-bf16", "torch-fp8")]
    floors = []
    real = interleave.time_group

    def spy(graphs, opts_, floor_ms, *args, **kw):
        floors.append(floor_ms)
        return real(graphs, opts_, floor_ms, *args, **kw)

    monkeypatch.setattr(interleave, "time_group", spy)
    gpu = SharedGpu(seed=3, wander=0.0)
    kept = {r.case_id: SimpleNamespace(graph=FakeGraph(gpu, 40.0, [], r.case.backend)) for r in records}
    duel(SimpleNamespace(kept=kept, clock=None), records)  # no load_share: the floor needs no load
    assert floors == [TUNING.light_settle_ms]
