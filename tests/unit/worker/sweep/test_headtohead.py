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
        load_share=lambda case, spec, us: 0.1,
        clock=None,
    )
    records = [rounds_record([(10.0, None, None)], opts, backend=c.backend) for c in cases]
    paired = duel(runner, records, lambda case: SimpleNamespace(name=case.backend))
    a, b, alone = (r.timing.rounds[-1] for r in paired)
    assert a.pair_id and a.pair_id == b.pair_id and alone.pair_id is None and alone.paired_us is None
    assert len(a.paired_us) == len(b.paired_us) >= 12 and "pair_s" in a.timing_phases
    iv = pairing.pair_interval(pairing.paired_rounds(paired[0].timing, paired[1].timing))
    assert iv.low < 1.01 < iv.high  # torch-fp8's stand-in is 1% slower
    assert paired[2] is records[2]  # unpaired: untouched
