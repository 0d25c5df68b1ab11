"""The contenders of a shape, head-to-head: which cases are one unit of a round, and the interleaved
timing of their graphs (worker/measure/interleave.py) that pairs them in the same GPU state.

Each case of a unit is first timed on its own in the round, as any case is (worker/sweep/runner.py: settled in
its own clock and power state, with every integrity check around it): that is its number. Measured on
the H200, an interleaved timing is not each case's own state: the group's mixed load sets one clock for
all, so bf16 read 10-16% slow beside fp8 at 256-512x2048 and 9% fast beside the fp32 oracle at
1024x2048 (benchmarks/RESULTS.md, issue 40). Right after, the unit's graphs (the ones just timed and
checked) are replayed interleaved: per cycle one sample of each, in the same breath, so their ratio
moves with neither the clock nor the power state. That paired timing is recorded beside each case's
round (RoundStats.pair_id, paired_us); worker/contract/pairing.py turns it into B/A with its interval.
"""

from __future__ import annotations

import secrets
from typing import Optional

from ..contract.schema import CaseRecord, CaseSpec
from ..measure.tuning import TUNING, Tuning


def group_key(case: CaseSpec) -> Optional[str]:
    """What a case's contenders share (its shape, dtypes, seed, label, routing and timing options), or
    None when the case is timed alone (head_to_head off, per-call events, burst timings)."""
    t = case.timing
    if not t.head_to_head or t.mode == "events" or t.state == "burst":
        return None
    moe = case.moe.model_dump_json() if case.moe is not None else ""
    return "|".join(
        map(
            str,
            (case.workload, case.m, case.n, case.k, case.out_dtype, case.seed, case.label, moe, t.model_dump_json()),
        )
    )


def units_of(cases: list[CaseSpec], grouped: bool) -> list[list[CaseSpec]]:
    """The cases as the units a round times: contenders together (when `grouped`: a GPU), else one by one
    (the oracles always: they are references, not contenders); in the order the cases come."""
    if not grouped:
        return [[c] for c in cases]
    from ..contract.catalog import ORACLE_BACKENDS

    units: dict[str, list[CaseSpec]] = {}
    for c in cases:
        # An oracle (fp32 off the tensor cores) is no contender, and its load would set the group's clock.
        key = None if c.backend in ORACLE_BACKENDS else group_key(c)
        units.setdefault(key if key is not None else f"alone:{c.case_id}", []).append(c)
    return list(units.values())


def duel(runner, records: list[CaseRecord], tuning: Tuning = TUNING) -> list[CaseRecord]:
    """`records` (a unit's ok records after this round, each case timed on its own) with this round paired:
    the graphs `runner` keeps for them replayed interleaved (worker/measure/interleave.py), each case's samples
    of it in its latest round's `paired_us` under one `pair_id`. A case whose graph is not kept (beyond the
    keep budget, or a one-round sweep) stays unpaired; with fewer than two left, nothing is timed. `tuning`:
    the group's settling floor (Tuning.light_settle_ms) and its cycles (Tuning.paired_cycles: 6 twos, ~12 x
    2 ms per member)."""
    from ..measure.interleave import time_group

    kept = [(i, runner.kept.get(r.case_id)) for i, r in enumerate(records)]
    members = [(i, k) for i, k in kept if k is not None]
    if len(members) < 2:
        return records
    opts = records[members[0][0]].case.timing
    # The light floor even for a heavy unit: its members were each just timed in their own settled state, so
    # the GPU is loaded already, and the pairs need one state shared by all, not a sustained one. Settling
    # still runs until the group's cycles stop drifting.
    floor = min(opts.settle_ms, tuning.light_settle_ms)
    group = time_group(
        [k.graph for _, k in members],
        opts,
        floor,
        None,
        getattr(runner, "clock", None),
        cycles=max(tuning.paired_cycles, opts.min_samples),
    )
    pair_id = secrets.token_hex(6)
    out = list(records)
    share = round((group.settle_s + group.samples_s) / len(members), 4)
    for (i, _), stats in zip(members, group.stats):
        rec = records[i]
        last = rec.timing.rounds[-1]
        phases = {**(last.timing_phases or {}), "pair_s": share}
        paired = last.model_copy(
            update={"pair_id": pair_id, "paired_us": [round(x, 4) for x in stats.samples_us], "timing_phases": phases}
        )
        out[i] = rec.model_copy(
            update={"timing": rec.timing.model_copy(update={"rounds": [*rec.timing.rounds[:-1], paired]})}
        )
    return out
